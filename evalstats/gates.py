"""Hard-gate statistics of the selection report: rates, latency quantiles, means per 1,000.

A *gate* is a pass/fail requirement on a candidate's outputs that holds whatever its quality
(issue 14, section 3): schema-valid rate, error rate, p50/p95 latency, tokens and cost per 1,000
outputs. Each gate statistic comes with an interval, and :func:`gate_check` compares the
conservative end of that interval with the plan's threshold: a candidate passes a gate only when
the data show it does, not merely when its point estimate does.

* :func:`rate_gate`: a share with the Wilson interval.
* :func:`quantile_intervals`: the q-quantile per group (numpy's default ``"linear"``
  definition) with a percentile-bootstrap interval, all groups at once.
* :func:`mean_per_thousand`: 1000 x the mean per group with a Student t interval.

Groups are integer codes (one per candidate x stratum cell, say); results are keyed by code.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats.intervals import wilson_interval
from evalstats.results import Estimate

__all__ = ["gate_check", "mean_per_thousand", "quantile_intervals", "rate_gate"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Below this many values on the short side of a quantile, the bootstrap distribution of the
# quantile has only a handful of distinct values and its percentile interval under-covers.
_MIN_TAIL_VALUES = 5


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def rate_gate(successes: int, n: int, *, level: float = 0.95) -> Estimate:
    """Share ``successes / n`` of outputs with a Wilson score interval.

    Used for the schema-valid rate (a "min" gate: its lower bound is checked) and the error rate
    (a "max" gate: its upper bound is checked). ``n == 0`` gives ``value`` NaN, no interval and
    the warning ``"no outputs"`` (never a rate of zero).
    """
    est = wilson_interval(int(successes), int(n), level=level)
    if n == 0:
        return Estimate(
            value=float("nan"),
            n_items=0,
            method=est.method,
            level=level,
            warnings=("no outputs",),
        )
    return est


def _group_codes(
    values: npt.ArrayLike, groups: npt.ArrayLike
) -> tuple[FloatArray, IntArray, IntArray, IntArray, IntArray]:
    """Values as float, and per distinct group: code, inverse index, total and missing counts."""
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups)
    if v.ndim != 1 or g.ndim != 1 or v.shape != g.shape:
        raise ValueError("values and groups must be 1-D arrays of the same length")
    if g.size and g.dtype.kind not in "iu":
        if g.dtype.kind == "f" and np.all(np.isfinite(g)) and np.all(g == np.round(g)):
            g = g.astype(np.int64)
        else:
            raise ValueError("groups must be integer codes")
    g = g.astype(np.int64, copy=False)
    if g.size and g.min() >= 0 and g.max() < max(4 * g.size, 1 << 16):
        # Dense non-negative codes (the usual cell index): a bincount and a lookup table are
        # O(n), where np.unique sorts (most of the run time at 500k outputs).
        counts = np.bincount(g)
        codes = np.flatnonzero(counts)
        lookup = np.zeros(counts.size, dtype=np.int64)
        lookup[codes] = np.arange(codes.size)
        inverse = lookup[g]
    else:
        codes, inverse = np.unique(g, return_inverse=True)
    n_groups = codes.size
    missing = np.bincount(inverse, weights=np.isnan(v), minlength=n_groups).astype(np.int64)
    total = np.bincount(inverse, minlength=n_groups).astype(np.int64)
    return v, codes.astype(np.int64), inverse.astype(np.int64), total, missing


def _missing_warning(k: int) -> tuple[str, ...]:
    return (f"{k} missing (NaN) values dropped",) if k else ()


def _quantile_replicates(
    sorted_values: FloatArray,
    starts: IntArray,
    sizes: IntArray,
    q: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Bootstrap replicates (groups x resamples) of the linear q-quantile of each group.

    ``sorted_values[starts[g] : starts[g] + sizes[g]]`` holds group g's values in ascending
    order (every size >= 1). A bootstrap resample of group g is ``n = sizes[g]`` draws
    ``x_(floor(n U_i))`` with ``U_i`` i.i.d. uniform; the map u -> x_(floor(n u)) is
    non-decreasing, so the k-th order statistic of the resample is ``x_(floor(n U_(k)))``.
    The linear quantile needs only two adjacent order statistics, and their joint law is known
    exactly: ``U_(j+1) ~ Beta(j+1, n-j)`` and, given it, ``U_(j+2) = U_(j+1) + (1 - U_(j+1)) W``
    with ``W ~ Beta(1, n-j-1)`` (the least of the n-j-1 uniforms above it). So each replicate
    is drawn *exactly* from the ordinary bootstrap distribution at O(1) cost, instead of
    O(n) multiplicities per resample (500k outputs x 1000 resamples would be 5e8 counts).
    """
    n = sizes.astype(np.float64)
    h = (n - 1.0) * q  # numpy's "linear" virtual index
    j = np.floor(h)
    gamma = h - j
    shape = (sizes.size, n_resamples)
    u1 = rng.beta((j + 1.0)[:, None], (n - j)[:, None], size=shape)
    idx1 = np.minimum(np.floor(n[:, None] * u1), n[:, None] - 1.0).astype(np.int64)
    lo = sorted_values[starts[:, None] + idx1]
    # The second order statistic only matters where the virtual index is fractional (then
    # j <= n - 2, so the Beta(1, n-j-1) parameter is >= 1); elsewhere it is unused.
    frac = gamma > 0
    b2 = np.where(frac, n - j - 1.0, 1.0)
    w = rng.beta(np.ones_like(b2)[:, None], b2[:, None], size=shape)
    u2 = u1 + (1.0 - u1) * w
    idx2 = np.minimum(np.floor(n[:, None] * u2), n[:, None] - 1.0).astype(np.int64)
    hi = sorted_values[starts[:, None] + idx2]
    t = gamma[:, None]
    # numpy's _lerp: interpolate from the nearer end, so gamma = 0 returns lo exactly.
    out = np.where(t >= 0.5, hi - (hi - lo) * (1.0 - t), lo + (hi - lo) * t)
    return np.asarray(np.where(frac[:, None], out, lo), dtype=np.float64)


def _sorted_by_group(
    v: FloatArray, inverse: npt.NDArray[np.intp], sizes: npt.NDArray[np.int64], *, n_groups: int,
) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """The non-NaN values, each group one contiguous ascending slice, and the slices' starts."""
    keep = ~np.isnan(v)
    v_k, g_k = v[keep], inverse[keep]
    # Each group becomes one contiguous ascending slice: a stable sort on the group index
    # (radix sort for 16-bit keys), then one in-place sort per group. About 6x faster than
    # np.lexsort((values, groups)) at 500k outputs.
    key = g_k.astype(np.int16) if n_groups <= np.iinfo(np.int16).max else g_k
    sorted_values = v_k[np.argsort(key, kind="stable")]
    ends = np.cumsum(sizes)
    starts = (ends - sizes).astype(np.int64)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        sorted_values[a:b].sort()
    return sorted_values, starts


def _quantile_estimates(
    codes: IntArray, sizes: IntArray, missing: IntArray, starts: IntArray,
    sorted_values: FloatArray, bounds: FloatArray, present: npt.NDArray[np.intp], *,
    q: float, method: str, level: float, n_resamples: int,
) -> dict[int, Estimate]:
    """Each group's quantile with its interval (a column of ``bounds``) and warnings."""
    out: dict[int, Estimate] = {}
    row = {int(g): i for i, g in enumerate(present)}
    for gi, code in enumerate(codes):
        n_g = int(sizes[gi])
        warnings = _missing_warning(int(missing[gi]))
        if n_g == 0:
            out[int(code)] = Estimate(
                value=float("nan"),
                n_items=0,
                method=method,
                level=level,
                n_resamples=n_resamples,
                warnings=(*warnings, "no values"),
            )
            continue
        s = int(starts[gi])
        point = float(np.quantile(sorted_values[s : s + n_g], q))
        if min(q, 1.0 - q) * n_g < _MIN_TAIL_VALUES:
            warnings = (
                *warnings,
                f"fewer than {_MIN_TAIL_VALUES} of {n_g} values beyond the {q:g} quantile: "
                "bootstrap interval unreliable",
            )
        r = row[gi]
        out[int(code)] = Estimate(
            value=point,
            ci_low=float(bounds[0, r]),
            ci_high=float(bounds[1, r]),
            n_items=n_g,
            method=method,
            level=level,
            n_resamples=n_resamples,
            warnings=warnings,
        )
    return out


def quantile_intervals(
    values: npt.ArrayLike,
    groups: npt.ArrayLike,
    q: float,
    *,
    level: float = 0.95,
    n_resamples: int = 1000,
    rng: np.random.Generator,
) -> dict[int, Estimate]:
    """The q-quantile of ``values`` per group code with a percentile-bootstrap interval.

    The quantile is numpy's default ``method="linear"`` (Hyndman & Fan type 7): with the n
    sorted values x_(0..n-1) and h = (n-1) q, it is x_(floor h) + (h - floor h) *
    (x_(floor h + 1) - x_(floor h)). ``value`` equals ``np.quantile(group_values, q)``.

    The interval is the equal-tailed percentile interval of ``n_resamples`` bootstrap
    replicates; outputs are resampled with replacement within their group (the same target as
    ``scipy.stats.bootstrap(method="percentile")``). Replicates are drawn exactly from the
    bootstrap distribution of the quantile via two order statistics per resample (see
    :func:`_quantile_replicates`), for all groups and resamples at once: the cost is one sort
    of the values plus O(groups x resamples).

    NaN values (e.g. an output without a recorded latency) are dropped and counted in the
    group's warnings; a group without any value gets ``value`` NaN and no interval. When fewer
    than 5 values lie beyond the quantile (``min(q, 1-q) * n < 5``) a warning says the
    interval is unreliable: the bootstrap cannot see past the largest observed value.
    """
    _check_level(level)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if n_resamples < 2:
        raise ValueError("n_resamples must be at least 2")
    v, codes, inverse, total, missing = _group_codes(values, groups)
    if codes.size == 0:
        return {}
    sizes = total - missing
    sorted_values, starts = _sorted_by_group(v, inverse, sizes, n_groups=int(codes.size))
    present = np.flatnonzero(sizes > 0)
    alpha = (1.0 - level) / 2.0
    bounds = np.empty((2, 0))
    if present.size:
        boot = _quantile_replicates(
            sorted_values, starts[present], sizes[present], q, n_resamples, rng
        )
        bounds = np.quantile(boot, [alpha, 1.0 - alpha], axis=1)
    method = (
        f"quantile[q={q:g}, numpy linear]; bootstrap-percentile(B={n_resamples}, "
        "outputs resampled within group, exact order-statistic draws)"
    )
    return _quantile_estimates(codes, sizes, missing, starts, sorted_values, bounds, present,
                               q=q, method=method, level=level, n_resamples=n_resamples)


def mean_per_thousand(
    values: npt.ArrayLike, groups: npt.ArrayLike, *, level: float = 0.95
) -> dict[int, Estimate]:
    """1000 x the mean of ``values`` per group code, with a Student t interval.

    For cost and tokens per 1,000 outputs. The interval is 1000 x (mean +/- t_{n-1} s/sqrt(n))
    with s the sample standard deviation (ddof 1), i.e.
    ``1000 * scipy.stats.ttest_1samp(x, 0).confidence_interval(level)``. With the large n of a
    cost gate the t interval is accurate even for skewed per-output costs (central limit);
    groups with fewer than 30 values get a warning. NaN values are dropped and counted in a
    warning; no values gives NaN without interval, one value gives the value without interval.
    """
    _check_level(level)
    v, codes, inverse, _, missing = _group_codes(values, groups)
    if codes.size == 0:
        return {}
    keep = ~np.isnan(v)
    v_k, g_k = v[keep], inverse[keep]
    n_groups = codes.size
    n = np.bincount(g_k, minlength=n_groups).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(g_k, weights=v_k, minlength=n_groups) / n
        # Two passes (deviations from the group mean) rather than sum of squares: costs per
        # output are tiny numbers with a large common part, and E[x^2] - E[x]^2 cancels badly.
        ss = np.bincount(g_k, weights=(v_k - mean[g_k]) ** 2, minlength=n_groups)
        se = np.sqrt(ss / (n - 1.0)) / np.sqrt(n)
    method = "mean x 1000; student-t"
    out: dict[int, Estimate] = {}
    for gi, code in enumerate(codes):
        n_g = int(n[gi])
        warnings = _missing_warning(int(missing[gi]))
        if n_g == 0:
            out[int(code)] = Estimate(
                value=float("nan"),
                n_items=0,
                method=method,
                level=level,
                warnings=(*warnings, "no values"),
            )
            continue
        value = 1000.0 * float(mean[gi])
        if n_g == 1:
            out[int(code)] = Estimate(
                value=value,
                n_items=1,
                method=method,
                level=level,
                warnings=(*warnings, "one value: no interval"),
            )
            continue
        if n_g < 30:
            warnings = (*warnings, f"only {n_g} values (< 30)")
        half = float(stats.t.ppf(0.5 + level / 2.0, n_g - 1)) * float(se[gi])
        out[int(code)] = Estimate(
            value=value,
            ci_low=value - 1000.0 * half,
            ci_high=value + 1000.0 * half,
            n_items=n_g,
            method=method,
            level=level,
            warnings=warnings,
        )
    return out


def gate_check(
    estimate: Estimate, *, threshold: float, direction: Literal["min", "max"]
) -> tuple[float | None, bool | None]:
    """The bound that decides a gate, and whether the gate passed.

    ``"min"`` gates (schema-valid rate) pass when the interval's *lower* bound is
    ``>= threshold``; ``"max"`` gates (error rate, latency, cost, tokens) pass when its *upper*
    bound is ``<= threshold``. Checking the conservative end means a candidate passes only
    when the data show it meets the gate at the interval's confidence. Without an interval (no
    data, undefined estimate) the answer is ``(None, None)``: unknown, never a pass.
    """
    if direction not in ("min", "max"):
        raise ValueError("direction must be 'min' or 'max'")
    if not math.isfinite(threshold):
        raise ValueError("threshold must be finite")
    bound = estimate.ci_low if direction == "min" else estimate.ci_high
    if bound is None or not math.isfinite(bound) or not math.isfinite(estimate.value):
        return None, None
    passed = bound >= threshold if direction == "min" else bound <= threshold
    return float(bound), bool(passed)
