"""How a bootstrap interval is computed: one options object shared by every ``bootstrap_*``.

Every bootstrap function of :mod:`evalstats` takes the data, its own statistic-specific
arguments, an explicit ``rng`` and one :class:`BootstrapOptions`. The random generator is not
part of the options on purpose: options are plain settings that a caller builds once (a report
builds them from its parameters) and shares across calls, while a generator is consumed by
each call, so sharing one would make a result depend on which calls ran before it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

__all__ = ["CI", "DEFAULT_OPTIONS", "BootstrapOptions"]

#: Interval methods: bias-corrected and accelerated (Efron 1987) or equal-tailed percentile.
CI = Literal["bca", "percentile"]


@dataclass(frozen=True, kw_only=True)
class BootstrapOptions:
    """Settings of an item-clustered bootstrap interval.

    ``n_resamples``: number of bootstrap resamples B. ``ci``: ``"bca"`` (default) or
    ``"percentile"``. ``level``: confidence level of the interval, in (0, 1). ``min_items``:
    below this many items (resampling units) the result carries a small-sample warning; it
    never raises. Invalid settings raise ``ValueError`` when the options are built.
    """

    n_resamples: int = 1000
    ci: CI = "bca"
    level: float = 0.95
    min_items: int = 30

    def __post_init__(self) -> None:
        for name in ("n_resamples", "min_items"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            # numpy integers are accepted and stored as int (frozen: set through object).
            object.__setattr__(self, name, int(value))
        if self.n_resamples < 1:
            raise ValueError(f"n_resamples must be at least 1, got {self.n_resamples}")
        if self.ci not in ("bca", "percentile"):
            raise ValueError("ci must be 'bca' or 'percentile'")
        if (
            isinstance(self.level, bool)
            or not isinstance(self.level, (int, float))
            or not math.isfinite(self.level)
            or not 0.0 < self.level < 1.0
        ):
            raise ValueError(f"level must be in (0, 1), got {self.level}")
        if self.min_items < 0:
            raise ValueError(f"min_items must be non-negative, got {self.min_items}")


#: The defaults of every bootstrap function: B = 1000, BCa, 95%, a warning below 30 items.
DEFAULT_OPTIONS = BootstrapOptions()
