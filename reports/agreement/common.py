"""What every part of the report shares: JSON of estimates, bootstrap options, per-cell
generators, and the codes of each scale.

Codes: nominal scales use category indices in the criterion's value order (binary: fail 0,
pass 1); pairwise uses tie 0, A 1, B 2; ordinal, interval and continuous scores are the
numbers.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef

FloatArray = npt.NDArray[np.float64]


def finite_or_none(x: Any) -> float | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def est_dict(e: Any) -> dict[str, Any]:
    """A result dataclass as JSON: value, interval, n, method, warnings (NaN -> null)."""
    if e is None:
        return {
            "value": None,
            "ci_low": None,
            "ci_high": None,
            "n": 0,
            "method": "",
            "warnings": [],
        }
    out = {
        "value": finite_or_none(e.value),
        "ci_low": finite_or_none(getattr(e, "ci_low", None)),
        "ci_high": finite_or_none(getattr(e, "ci_high", None)),
        "n": int(getattr(e, "n_items", 0) or 0),
        "method": str(getattr(e, "method", "")),
        "warnings": list(getattr(e, "warnings", ()) or ()),
    }
    p = getattr(e, "p_value", None)
    if p is not None:
        out["p_value"] = finite_or_none(p)
    return out


def bootstrap_options(p: Mapping[str, Any]) -> es.BootstrapOptions:
    """The bootstrap settings of validated report parameters."""
    return es.BootstrapOptions(
        n_resamples=p["n_resamples"], ci=p["ci"], level=p["level"], min_items=p["min_items"]
    )


def cell_rng(seed: int, *parts: object) -> np.random.Generator:
    """A generator per cell, so one cell's numbers do not depend on which other cells exist."""
    material = [seed] + [zlib.crc32(str(p).encode()) for p in parts]
    return np.random.default_rng(material)


def scale_categories(crit: CriterionRef) -> list[float]:
    if crit.scale == "pairwise":
        return [0.0, 1.0, 2.0]
    if crit.scale == "binary":
        return [0.0, 1.0]
    if crit.scale == "ordinal":
        return [float(v) for v in crit.values]
    if crit.scale == "interval":
        return []  # a continuous range: no categories
    return [float(i) for i in range(len(crit.values))]


def scale_labels(crit: CriterionRef) -> list[str]:
    if crit.scale == "pairwise":
        return ["tie", "A", "B"]
    if crit.scale in ("binary", "interval"):  # interval: its pass/fail reading
        return ["fail", "pass"]
    return list(crit.values)


def numeric_reading(crit: CriterionRef, codes: FloatArray) -> FloatArray | None:
    """value_num of codes (pairwise A 1 / tie .5 / B 0; binary; ordinal; interval) or None
    (categorical)."""
    if crit.scale == "pairwise":
        return np.select([codes == 1, codes == 2, codes == 0], [1.0, 0.0, 0.5], np.nan)
    if crit.scale in ("binary", "ordinal", "interval"):
        return codes
    return None


__all__ = [
    "FloatArray",
    "bootstrap_options",
    "cell_rng",
    "est_dict",
    "finite_or_none",
    "numeric_reading",
    "scale_categories",
    "scale_labels",
]
