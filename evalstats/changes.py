"""Two-sample change tests for label-free behaviour signals (output length, latency, refusals).

"Did the model behind this API name change?" needs no labels: compare a window of live
outputs with a reference sample (the shipped candidate's selection outputs, or an earlier
window).

* :func:`rank_sum_test`: the Mann-Whitney U (Wilcoxon rank-sum) test of whether one sample
  tends to be larger than the other, two-sided, with the normal approximation corrected for
  ties and for continuity (Lehmann 1975, "Nonparametrics", ch. 1). Distribution-free, robust
  to the heavy tails of lengths and latencies; with the sizes of a traffic window (tens to
  thousands) the normal approximation is what ``scipy.stats.mannwhitneyu(method=
  "asymptotic")`` uses too.
* :func:`two_proportion_test`: the pooled two-proportion z test of equal rates (refusal rate,
  error rate), two-sided.

Both return a frozen :class:`ChangeTest`. They are fixed-sample tests: one look per window
pair. Repeated every window at a fixed level they raise false alarms at almost every
deployment in the end; :func:`change_monitor` spends the level over the looks instead, so the
tests may be repeated forever with P(any false alarm, ever) <= alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr
from scipy.stats import rankdata

from .sequential import restart_alpha

__all__ = ["ChangeMonitor", "ChangeTest", "change_monitor", "rank_sum_test",
           "two_proportion_test"]


@dataclass(frozen=True)
class ChangeTest:
    """A two-sample test: ``statistic`` (U of the first sample, or the difference of rates),
    its standardised ``z``, the two-sided ``p_value``, the sizes, and a ``shift`` that reads
    as an effect (the difference of medians, or of rates: first minus second). ``p_value`` is
    None when a sample is empty or the pooled data has no spread."""

    statistic: float
    z: float | None
    p_value: float | None
    n_first: int
    n_second: int
    shift: float | None
    method: str


def _finite(x: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    arr = np.asarray(x, dtype=float).ravel()
    if np.any(~np.isfinite(arr)):
        raise ValueError(f"{name} has missing or infinite values; drop them first")
    return arr


def rank_sum_test(first: npt.ArrayLike, second: npt.ArrayLike) -> ChangeTest:
    """Two-sided Mann-Whitney U test (normal approximation, tie and continuity corrected)."""
    x = _finite(first, "first")
    y = _finite(second, "second")
    n1, n2 = x.size, y.size
    method = "Mann-Whitney U, normal approximation with tie and continuity corrections"
    if n1 == 0 or n2 == 0:
        return ChangeTest(math.nan, None, None, n1, n2, None, method)
    ranks = rankdata(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    _, tie_counts = np.unique(np.concatenate([x, y]), return_counts=True)
    tie_term = float(((tie_counts.astype(float) ** 3) - tie_counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    shift = float(np.median(x) - np.median(y))
    if var <= 0:
        return ChangeTest(u1, None, None, n1, n2, shift, method)
    mu = n1 * n2 / 2.0
    # Continuity: move |U - mu| half a unit toward zero (scipy's use_continuity=True).
    dev = abs(u1 - mu) - 0.5
    z = max(dev, 0.0) / math.sqrt(var)
    p = float(min(1.0, 2.0 * ndtr(-z)))
    signed = z if u1 >= mu else -z
    return ChangeTest(u1, signed, p, n1, n2, shift, method)


def two_proportion_test(k1: int, n1: int, k2: int, n2: int) -> ChangeTest:
    """Two-sided pooled z test of equal proportions ``k1/n1`` and ``k2/n2``."""
    method = "two-proportion z test, pooled variance"
    for name, k, n in (("first", k1, n1), ("second", k2, n2)):
        if n < 0 or k < 0 or k > n:
            raise ValueError(f"{name}: need 0 <= k <= n")
    if n1 == 0 or n2 == 0:
        return ChangeTest(math.nan, None, None, n1, n2, None, method)
    p1, p2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    var = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)
    if var <= 0:
        return ChangeTest(p1 - p2, None, None, n1, n2, p1 - p2, method)
    z = (p1 - p2) / math.sqrt(var)
    p = float(min(1.0, 2.0 * ndtr(-abs(z))))
    return ChangeTest(p1 - p2, z, p, n1, n2, p1 - p2, method)


@dataclass(frozen=True)
class ChangeMonitor:
    """Fixed-sample tests repeated at every look, with the level spent over the looks (see
    :func:`change_monitor`). ``alarm[k]``: some signal's p-value at look ``k`` is below its
    level ``level[k]``; ``first_alarm``: the first such look (None: none)."""

    alarm: npt.NDArray[np.bool_]
    first_alarm: int | None
    level: npt.NDArray[np.float64]
    alpha: float


def change_monitor(p_values: npt.ArrayLike, *, alpha: float = 0.05) -> ChangeMonitor:
    """Alarm on "the distribution changed" with false alarms held at ``alpha`` over an
    unbounded horizon of looks.

    ``p_values[k, j]``: the p-value of signal ``j`` at look ``k`` (a 1-D array is one signal;
    NaN: no test at that look, never an alarm). Look ``k`` (0-based, counted from the start of
    the deployment) tests each of the ``m`` signals at ``restart_alpha(alpha / m, k) =
    (alpha / m) / ((k + 1)(k + 2))``; these levels sum to exactly ``alpha`` over all looks and
    signals.

    Guarantee (the union bound, Bonferroni over looks): if nothing changed, so that each
    p-value is valid (``P(p <= x) <= x``), then ``P(any alarm, ever) <= alpha``, however the
    tests depend on each other (every window compared with the same reference sample). The
    price is a level that shrinks like ``1 / k^2``: a change at look ``k`` must reach
    ``p < alpha / (m k^2)``, which a window of thousands of rows does for any change worth
    flagging, and a small window may not (the delays are measured in bench/monitoring_drift.py).
    The levels restart only with the deployment's monitor.
    """
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    p = np.asarray(p_values, dtype=float)
    if p.ndim == 1:
        p = p[:, None]
    if p.ndim != 2:
        raise ValueError("p_values must be 1-D (one signal) or 2-D (looks x signals)")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1] (NaN: no test)")
    looks, signals = p.shape
    level = np.array([restart_alpha(alpha / max(signals, 1), k) for k in range(looks)],
                     dtype=float)
    with np.errstate(invalid="ignore"):
        hit = p < level[:, None]
    alarm = np.asarray(hit.any(axis=1), dtype=bool)
    hits = np.flatnonzero(alarm)
    return ChangeMonitor(alarm=alarm, first_alarm=int(hits[0]) if hits.size else None,
                         level=level, alpha=alpha)
