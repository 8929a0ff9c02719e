"""Ranking statistics of the selection report: rank agreement, multiplicity, Pareto frontier.

* :func:`kendall_tau`: Kendall's tau-b between two rankings (public benchmark score vs the
  team's private estimate) with a Fisher-z interval.
* :func:`holm`: Holm's step-down adjusted p-values (ranking flips across strata).
* :func:`two_sided_p`: normal-theory p-value of "the difference is zero".
* :func:`pareto_front`: the non-dominated candidates on quality x latency x cost.
* :func:`rank_with_ties`: ranks with 1 = best and average ranks on ties.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from evalstats._data import as_float, paired
from evalstats.results import Estimate

__all__ = ["holm", "kendall_tau", "pareto_front", "rank_with_ties", "two_sided_p"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Fieller, Hartley & Pearson (1957): var(atanh(tau)) ~= 0.437 / (n - 4) for bivariate normal
# data, which keeps close to nominal coverage from n ~ 10 on.
_FHP_VARIANCE = 0.437
# Rows of the n x n x k dominance comparison handled at once (bounds the temporary).
_PARETO_BLOCK_ELEMENTS = 4_000_000


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def kendall_tau(x: npt.ArrayLike, y: npt.ArrayLike, *, level: float = 0.95) -> Estimate:
    """Kendall's tau-b of ``x`` and ``y`` with a Fisher z-transform interval.

    ``value`` and ``p_value`` are those of ``scipy.stats.kendalltau(x, y)`` (tau-b, ties
    corrected; scipy's exact or asymptotic p-value). Pairs with a missing side are dropped with
    a warning. The interval is tanh(atanh(tau) +/- z_{(1+level)/2} sqrt(0.437 / (n - 4))), the
    variance of Fieller, Hartley & Pearson (1957) for the z-transformed tau; it needs n >= 5
    (otherwise no interval, with a warning). With five candidates (n = 5) it is necessarily very
    wide: it says how little a rank correlation over a handful of models can show.
    """
    _check_level(level)
    xa, ya, dropped = paired(x, y, ("x", "y"))
    xf, yf = as_float(xa, "x"), as_float(ya, "y")
    n = int(xf.size)
    warnings: list[str] = []
    if dropped:
        warnings.append(f"{dropped} pairs dropped because a value was missing")
    method = "kendall_tau_b; fisher-z interval (Fieller-Hartley-Pearson variance 0.437/(n-4))"

    def result(tau: float, p_value: float | None = None,
               ci: tuple[float | None, float | None] = (None, None)) -> Estimate:
        return Estimate(value=tau, ci_low=ci[0], ci_high=ci[1], n_items=n, method=method,
                        level=level, p_value=p_value, warnings=tuple(warnings))

    if n < 2:
        warnings.append(f"only {n} pairs: tau undefined")
        return result(float("nan"))
    res = stats.kendalltau(xf, yf, variant="b")
    tau = float(res.statistic)
    p = float(res.pvalue)
    p_value = p if math.isfinite(p) else None
    if not math.isfinite(tau):
        warnings.append("tau undefined (a ranking without any order, e.g. all values tied)")
        return result(tau, p_value)
    if n < 5:
        warnings.append(f"only {n} pairs (< 5): no interval")
        return result(tau, p_value)
    z_crit = float(special.ndtri(0.5 + level / 2.0))
    se = math.sqrt(_FHP_VARIANCE / (n - 4))
    if abs(tau) >= 1.0 - 1e-12:  # scipy may return 1 - 1 ulp for a perfect agreement
        # atanh(+-1) is infinite: the transformed interval collapses onto the point.
        warnings.append("tau is +-1: the Fisher-z interval degenerates to the point")
        return result(tau, p_value, (tau, tau))
    z = math.atanh(tau)
    return result(tau, p_value, (math.tanh(z - z_crit * se), math.tanh(z + z_crit * se)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Equal to ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]``: with the m
    p-values sorted ascending, p_adj(i) = min(1, max_{k <= i} (m - k + 1) p_(k)). Holm controls
    the family-wise error rate under any dependence between the tests (strata share items'
    candidates). NaN entries (a test that could not be run) stay NaN and are *excluded from m*:
    only tests that exist count toward the multiplicity. An empty input gives an empty list.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("p_values must be 1-D")
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    if ok.size == 0:
        return out.tolist()
    pv = p[ok]
    if np.any((pv < 0.0) | (pv > 1.0)):
        raise ValueError("p-values must be in [0, 1]")
    m = pv.size
    order = np.argsort(pv, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * pv[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    out[ok] = adjusted
    return out.tolist()


def two_sided_p(estimate: float, se: float | None) -> float:
    """Two-sided normal p-value of H0 "the true value is 0": 2 (1 - Phi(|estimate| / se)).

    For a paired difference with an (asymptotically normal) standard error. ``se`` None, zero,
    negative or non-finite, or a non-finite estimate, gives NaN: no test is possible.
    """
    if se is None or not math.isfinite(se) or se <= 0.0 or not math.isfinite(estimate):
        return float("nan")
    # ndtr(-|z|) is the upper tail without the cancellation of 1 - ndtr(|z|) for large |z|.
    return float(2.0 * special.ndtr(-abs(estimate) / se))


def pareto_front(points: npt.ArrayLike, maximise: Sequence[bool]) -> BoolArray:
    """Boolean mask of the rows of ``points`` (n x k) that no other row dominates.

    Column c is better when larger if ``maximise[c]`` (quality), when smaller otherwise
    (latency, cost). Row j dominates row i when j is at least as good in every column and
    strictly better in one. Identical rows do not dominate each other (both stay on the front).
    A row with any NaN is never on the front and dominates nothing (it cannot be compared).
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise ValueError("points must be 2-D (candidates x criteria)")
    flags = np.asarray(maximise, dtype=bool)
    if flags.shape != (pts.shape[1],):
        raise ValueError("maximise needs one flag per column of points")
    # Orient every column so that larger is better.
    oriented = np.where(flags[None, :], pts, -pts)
    valid: BoolArray = ~np.any(np.isnan(pts), axis=1)
    front: BoolArray = valid.copy()
    cand = oriented[valid]
    rows = np.flatnonzero(valid)
    n, k = cand.shape
    if n == 0:
        return front
    block = max(1, _PARETO_BLOCK_ELEMENTS // max(n * max(k, 1), 1))
    for start in range(0, n, block):
        part = cand[start : start + block]  # the rows being tested
        ge = (cand[None, :, :] >= part[:, None, :]).all(axis=2)
        gt = (cand[None, :, :] > part[:, None, :]).any(axis=2)
        dominated: BoolArray = np.any(ge & gt, axis=1)
        front[rows[start : start + block]] = ~dominated
    return front


def rank_with_ties(values: npt.ArrayLike, *, higher_is_better: bool = True) -> FloatArray:
    """Ranks with 1 = best; tied values share the average of their ranks; NaN stays NaN.

    The same as ``scipy.stats.rankdata`` (method ``"average"``) of the values negated when
    higher is better, with NaN (no data) left unranked rather than ranked last.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError("values must be 1-D")
    key = -v if higher_is_better else v
    return np.asarray(stats.rankdata(key, method="average", nan_policy="omit"), dtype=np.float64)
