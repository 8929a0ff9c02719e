"""Anytime-valid inference for a bounded mean: a confidence sequence that may be looked at
after every observation, forever, with its error rate held.

Looking every hour at a fixed-level interval inflates false alarms: with a 95 % interval
checked 500 times, a stream whose mean never moved is flagged at some look far more often than
5 % of the time. A *confidence sequence* (CS) is a sequence of intervals ``C_t`` with

    P(for every t >= 1: mu_bar_t in C_t) >= 1 - alpha,

where ``mu_bar_t`` is the average of the conditional means of the first ``t`` observations
(the mean itself when it does not move). The guarantee holds at every time simultaneously, so
it holds at any looks, chosen in any way (after every row, every hour, when a page is opened),
and at a stopping time.

The boundary (:func:`normal_mixture_radius`) is the two-sided normal-mixture boundary of
Howard, Ramdas, McAuliffe & Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic
confidence sequences", Annals of Statistics 49(2) (Robbins' mixture): an observation bounded
in ``[lo, hi]`` is sub-Gaussian with variance proxy ``sigma^2 = ((hi - lo) / 2)^2``
(Hoeffding), so with ``S_t`` the centred sum and intrinsic time ``V_t = t sigma^2``, the mixture
of ``exp(lambda S_t - lambda^2 V_t / 2)`` over ``lambda ~ N(0, 1/rho)`` is a nonnegative
supermartingale, and Ville's inequality gives, simultaneously for every ``t``,

    |S_t| < sqrt((V_t + rho) * (log(1 + V_t / rho) + 2 log(1 / alpha))).

``rho`` sets where the boundary is tightest; ``rho = v / (2 log(1/alpha) +
log(1 + 2 log(1/alpha)))`` makes it tightest near intrinsic time ``v`` (the choice of the
authors' package ``confseq``, ``TwoSidedNormalMixture::best_rho``). The boundary is valid for
every ``rho``; the choice only moves where it is narrow. Dividing by ``t`` gives the interval
for the mean, clipped to ``[lo, hi]``.

Being built on Hoeffding's variance proxy it does not adapt to a small variance: for a rare
event (an error rate of 1 %) it is wider than an empirical-Bernstein or betting CS would be.
It is exact in the sense that matters here: its false-alarm guarantee needs no asymptotics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

__all__ = [
    "ConfidenceSequence",
    "DriftMonitor",
    "drift_monitor",
    "mean_confidence_sequence",
    "normal_mixture_radius",
    "normal_mixture_rho",
    "restart_alpha",
]


def normal_mixture_rho(v: float, alpha: float) -> float:
    """The mixture precision that makes the two-sided boundary tightest near intrinsic time v."""
    if v <= 0:
        raise ValueError("v must be positive")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    log_inv = math.log(1.0 / alpha)
    return v / (2.0 * log_inv + math.log(1.0 + 2.0 * log_inv))


def normal_mixture_radius(v: npt.ArrayLike, *, alpha: float, rho: float) -> FloatArray:
    """The two-sided normal-mixture boundary on ``|S_t|`` at intrinsic times ``v`` (>= 0)."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    if rho <= 0:
        raise ValueError("rho must be positive")
    vv = np.asarray(v, dtype=float)
    if np.any(vv < 0):
        raise ValueError("intrinsic time must be >= 0")
    return np.sqrt((vv + rho) * (np.log1p(vv / rho) + 2.0 * math.log(1.0 / alpha)))


@dataclass(frozen=True)
class ConfidenceSequence:
    """Intervals of a confidence sequence at each look.

    ``n`` is the number of observations behind each look, ``mean`` their mean (NaN with none),
    ``lower``/``upper`` the interval (the whole range ``[lo, hi]`` before any observation).
    ``alpha`` is the probability that *any* interval of the sequence misses.
    """

    n: npt.NDArray[np.int64]
    mean: FloatArray
    lower: FloatArray
    upper: FloatArray
    alpha: float
    method: str


def mean_confidence_sequence(
    counts: npt.ArrayLike,
    sums: npt.ArrayLike,
    *,
    alpha: float = 0.05,
    bounds: tuple[float, float] = (0.0, 1.0),
    n_opt: float = 500.0,
) -> ConfidenceSequence:
    """A confidence sequence for the mean of observations bounded in ``bounds``.

    ``counts[k]`` and ``sums[k]`` are the cumulative number and sum of the observations at the
    ``k``-th look (non-decreasing counts; looks may be after every observation or after
    batches: the guarantee holds at every observation, hence at any subset of times).
    ``n_opt`` is the number of observations where the boundary is tightest. See the module
    docstring for the guarantee and the boundary.
    """
    lo, hi = float(bounds[0]), float(bounds[1])
    if not hi > lo:
        raise ValueError("bounds must be (lo, hi) with hi > lo")
    n = np.asarray(counts, dtype=np.int64)
    s = np.asarray(sums, dtype=float)
    if n.shape != s.shape or n.ndim != 1:
        raise ValueError("counts and sums must be 1-D arrays of the same length")
    if np.any(n < 0) or np.any(np.diff(n) < 0):
        raise ValueError("counts must be non-negative and non-decreasing")
    if np.any(s < lo * n - 1e-9) or np.any(s > hi * n + 1e-9):
        raise ValueError("a sum lies outside what observations in bounds can give")
    sigma2 = ((hi - lo) / 2.0) ** 2
    rho = normal_mixture_rho(sigma2 * float(n_opt), alpha)
    radius_sum = normal_mixture_radius(sigma2 * n, alpha=alpha, rho=rho)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, s / np.maximum(n, 1), np.nan)
        radius = np.where(n > 0, radius_sum / np.maximum(n, 1), np.inf)
    lower = np.where(n > 0, np.clip(mean - radius, lo, hi), lo)
    upper = np.where(n > 0, np.clip(mean + radius, lo, hi), hi)
    return ConfidenceSequence(
        n=n, mean=mean, lower=lower.astype(float), upper=upper.astype(float), alpha=alpha,
        method=f"normal-mixture confidence sequence (Howard et al. 2021), sub-Gaussian "
               f"sigma = {math.sqrt(sigma2):g}, tightest near n = {n_opt:g}",
    )


@dataclass(frozen=True)
class DriftMonitor:
    """Where a restarted confidence-sequence monitor stands (see :func:`drift_monitor`).

    ``alarm[k]``: whether any sequence excluded the acceptable side at look ``k``;
    ``first_alarm``: the first such look (None: none). ``start``, ``n``, ``mean``, ``lower``,
    ``upper``, ``alpha``: the sequence with the strongest evidence at the last look (the
    look it started at, its observations, its interval and its share of alpha)."""

    alarm: npt.NDArray[np.bool_]
    first_alarm: int | None
    start: int
    n: int
    mean: float | None
    lower: float
    upper: float
    alpha: float


def restart_alpha(alpha: float, d: int) -> float:
    """The share of alpha of the sequence started at the ``d``-th restart (0-based):
    ``alpha / ((d + 1)(d + 2))``, which sums to exactly alpha over d = 0, 1, 2, ..."""
    return alpha / ((d + 1) * (d + 2))


def drift_monitor(
    counts: npt.ArrayLike,
    sums: npt.ArrayLike,
    *,
    limit: float,
    direction: str,
    alpha: float = 0.05,
    restart_every: int = 24,
    bounds: tuple[float, float] = (0.0, 1.0),
    n_opt: float = 500.0,
) -> DriftMonitor:
    """Alarm when a bounded mean has crossed ``limit``, with false alarms held at ``alpha``
    over an unbounded horizon of looks.

    ``counts[k]``/``sums[k]``: the observations and their sum *at* look ``k`` (per look, not
    cumulative). ``direction="below"`` alarms when the mean is below ``limit`` (a pass rate
    under its floor), ``"above"`` when above (an error rate over its gate).

    A fresh confidence sequence (:func:`mean_confidence_sequence`) starts every
    ``restart_every`` looks, the ``d``-th at level :func:`restart_alpha` ``(alpha, d)``, over
    the observations from its start on; the monitor alarms when any of them lies wholly on the
    wrong side of ``limit``. Guarantee: if the conditional mean of every observation is on the
    acceptable side (>= limit for "below", <= limit for "above"), each sequence's running
    average is too, so by the union bound P(any alarm, ever) <= sum_d alpha_d = alpha. The
    restarts are what keep detection quick after a late drift: a sequence started after the
    drift sees only drifted data, where one over the whole history would wait for the old
    observations to be outweighed.
    """
    if direction not in ("below", "above"):
        raise ValueError("direction must be 'below' or 'above'")
    if restart_every < 1:
        raise ValueError("restart_every must be >= 1")
    n = np.asarray(counts, dtype=np.int64)
    s = np.asarray(sums, dtype=float)
    if n.shape != s.shape or n.ndim != 1:
        raise ValueError("counts and sums must be 1-D arrays of the same length")
    looks = n.size
    cn = np.concatenate([[0], np.cumsum(n)])
    cs_ = np.concatenate([[0.0], np.cumsum(s)])
    alarm = np.zeros(looks, dtype=bool)
    best: tuple[float, int, int, float | None, float, float, float] | None = None
    for d, start in enumerate(range(0, looks, restart_every)):
        a = restart_alpha(alpha, d)
        seq = mean_confidence_sequence(cn[start + 1:] - cn[start], cs_[start + 1:] - cs_[start],
                                       alpha=a, bounds=bounds, n_opt=n_opt)
        crossed = seq.upper < limit if direction == "below" else seq.lower > limit
        alarm[start:] |= crossed
        # Evidence at the last look: how far the sequence's near end is past the limit.
        gap = (limit - float(seq.upper[-1]) if direction == "below"
               else float(seq.lower[-1]) - limit)
        mean = None if seq.n[-1] == 0 else float(seq.mean[-1])
        if best is None or gap > best[0]:
            best = (gap, start, int(seq.n[-1]), mean, float(seq.lower[-1]),
                    float(seq.upper[-1]), a)
    hits = np.flatnonzero(alarm)
    if best is None:
        lo, hi = float(bounds[0]), float(bounds[1])
        return DriftMonitor(alarm, None, 0, 0, None, lo, hi, alpha)
    _, start, count, mean, lower, upper, a = best
    return DriftMonitor(alarm, int(hits[0]) if hits.size else None, start, count, mean,
                        lower, upper, a)
