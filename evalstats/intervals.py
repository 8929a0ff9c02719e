"""Confidence intervals: Wilson for proportions, percentile and BCa for bootstrap draws."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from evalstats.results import Estimate

__all__ = ["bca_interval", "percentile_interval", "wilson_interval"]

FloatArray = npt.NDArray[np.float64]


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def wilson_interval(successes: int, n: int, *, level: float = 0.95, min_items: int = 0) -> Estimate:
    """Proportion ``successes / n`` with the Wilson score interval.

    Matches ``statsmodels.stats.proportion.proportion_confint(method="wilson")``. Wilson is used
    rather than the normal (Wald) interval because it stays inside [0, 1] and keeps close to
    nominal coverage for small n and proportions near 0 or 1.
    """
    _check_level(level)
    if n < 0 or successes < 0 or successes > n:
        raise ValueError("need 0 <= successes <= n")
    warnings: tuple[str, ...] = ()
    if n == 0:
        return Estimate(
            value=float("nan"),
            n_items=0,
            method="proportion; wilson",
            level=level,
            warnings=("no observations",),
        )
    if n < min_items:
        warnings = (f"only {n} observations (< {min_items})",)
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    p = successes / n
    denom = 1.0 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return Estimate(
        value=p,
        ci_low=float(max(0.0, centre - half)),
        ci_high=float(min(1.0, centre + half)),
        n_items=n,
        method="proportion; wilson",
        level=level,
        warnings=warnings,
    )


def percentile_interval(boot: FloatArray, level: float) -> tuple[float, float]:
    """Equal-tailed percentile interval of bootstrap replicates (NaNs must be removed)."""
    _check_level(level)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bca_interval(
    boot: FloatArray,
    theta_hat: float,
    jackknife: FloatArray,
    level: float,
    jackknife_weights: FloatArray | None = None,
) -> tuple[float, float, tuple[str, ...]]:
    """Bias-corrected and accelerated interval (Efron 1987).

    ``jackknife`` holds the leave-one-item-out estimates; ``jackknife_weights`` their
    multiplicities when identical items were collapsed (the acceleration is then a weighted
    sum, which is exactly the ordinary jackknife over all items). Falls back to the
    percentile interval, with a warning, when the bias correction is undefined (every
    replicate on one side of the estimate).
    """
    _check_level(level)
    warnings: list[str] = []
    b = boot.size
    # Half of the ties count as below: discrete statistics (accuracy on few items) often have
    # replicates exactly equal to the estimate, and counting them all on one side biases z0.
    below = np.count_nonzero(boot < theta_hat) + 0.5 * np.count_nonzero(boot == theta_hat)
    prop = below / b
    if prop <= 0.0 or prop >= 1.0:
        lo, hi = percentile_interval(boot, level)
        return (
            lo,
            hi,
            ("BCa bias correction undefined (all replicates on one side); percentile used",),
        )
    # special.ndtri / ndtr are exactly what stats.norm.ppf / cdf evaluate, without the
    # per-call overhead of the distribution machinery (BCa runs once per statistic per group).
    z0 = float(special.ndtri(prop))
    w = np.ones_like(jackknife) if jackknife_weights is None else jackknife_weights
    ok = np.isfinite(jackknife)
    if not ok.all():
        warnings.append(f"{int((~ok).sum())} jackknife replicates undefined and ignored")
    jk, w = jackknife[ok], w[ok]
    mean = np.sum(w * jk) / np.sum(w)
    dev = mean - jk
    den = np.sum(w * dev**2)
    accel = float(np.sum(w * dev**3) / (6.0 * den**1.5)) if den > 0 else 0.0
    z = special.ndtri(np.array([(1.0 - level) / 2.0, 0.5 + level / 2.0]))
    adj = z0 + (z0 + z) / (1.0 - accel * (z0 + z))
    probs = special.ndtr(adj)
    lo, hi = np.quantile(boot, probs)
    return float(lo), float(hi), tuple(warnings)
