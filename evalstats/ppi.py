"""Prediction-powered inference: few human labels plus many judge scores, unbiased and valid.

A candidate's quality on a set of outputs (a pass rate, a mean score, a cost per output) can be
estimated three ways, and the selection report shows all three side by side:

* **human-only** (:func:`classical_mean`): the mean of the human labels, weighted by
  1 / inclusion probability when humans were sampled unequally. Unbiased, but wide when labels
  are few.
* **judge-only** (:func:`naive_mean`): the mean of the judge's scores over every output.
  Narrow, and biased by however much the judge disagrees with humans; its interval covers only
  the sampling noise, never the judge's error.
* **prediction-powered** (:func:`ppi_mean`): PPI++ (Angelopoulos, Duchi & Zrnic 2023, "PPI++:
  Efficient Prediction-Powered Inference"). With ``y`` the human labels and ``f`` the judge's
  scores on the same ``n`` labelled outputs and ``f~`` its scores on ``N`` unlabelled outputs,

      theta(lambda) = lambda * mean_w~(f~) + mean_w(y - lambda * f)

  is unbiased for every ``lambda`` (the second term rectifies the judge's bias), with variance
  ``lambda^2 var_w~(f~) / N + var_w(y - lambda f) / n``. ``lambda = 0`` is the human-only
  estimate, ``lambda = 1`` the original PPI; *power tuning* picks the ``lambda`` that minimises
  the estimated variance, clipped to [0, 1], so a useless judge costs (asymptotically) nothing
  and a good one narrows the interval. The computation follows the authors' package
  ``ppi_py`` (0.2.x) exactly, so that both give the same numbers to rounding: weights are
  rescaled to mean 1 within each set, ``lambda`` is tuned on the gradients at the
  ``lambda = 1`` estimate (``_calc_lam_glm`` with an identity Hessian), variances are the
  ``1/n`` (population) variances and the interval is the normal one.

Strata and the deployment mix (:func:`ppi_mean_stratified`)
-----------------------------------------------------------
Stratified PPI (Fisch et al. 2024, "Stratified Prediction-Powered Inference for Hybrid
Language Model Evaluation"): one PPI++ estimate per stratum, each with its own power-tuned
``lambda`` (the mix variance is a sum of per-stratum terms, so tuning each stratum separately
minimises it), combined with the deployment-mix weights: ``theta = sum_s mix_s theta_s`` and
``se = sqrt(sum_s mix_s^2 se_s^2)``. A judge can be good in one stratum and useless in
another; per-stratum tuning uses it only where it helps.

Paired differences (:func:`paired_difference`)
----------------------------------------------
Candidates answer the same items, so their scores are correlated through item difficulty; the
difference of two independent intervals overstates the uncertainty. PPI is applied to the
item-level differences ``y_a - y_b`` (labelled: items where both outputs carry a human label)
with the judge's differences ``f_a - f_b`` as the predictor.

Where the next labels help most (:func:`neyman_allocation`)
-----------------------------------------------------------
The extra human labels per stratum that bring the mix standard error down to a target with the
fewest labels in total (Neyman allocation, exact in integers).

Pairwise studies (:func:`ppi_bradley_terry`)
--------------------------------------------
Bradley-Terry strengths by PPI++ logistic regression, as ``ppi_py.ppi_logistic_ci``.

Intervals
---------
``interval="normal"`` (the default) is the z interval of ``ppi_py`` with its ``1/n``
variances. With few labels it undercovers (on HANNA, 10 labels per system: about 0.90 for a
nominal 0.95), so every estimator also offers ``interval="t"``: unbiased (``n - 1``)
variances and a Student t quantile, with ``n - 1`` degrees of freedom for a human-only mean
and Welch-Satterthwaite degrees of freedom for the two PPI terms and for a mix of strata. The
two agree as the number of labels grows; the point estimates and ``lambda`` are the same.

Conventions: inputs are 1-D numeric arrays without missing values (the caller drops them);
``w`` / ``w_unlabelled`` are positive weights such as 1 / inclusion probability; ``level`` is
the two-sided confidence level. Fewer than two labels give an estimate without an interval and
a warning, never an exception.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.special import expit, ndtri, stdtrit

__all__ = [
    "INTERVALS",
    "BradleyTerry",
    "Interval",
    "NeymanAllocation",
    "PPIEstimate",
    "StratifiedPPI",
    "classical_mean",
    "combine_strata",
    "naive_mean",
    "neyman_allocation",
    "paired_difference",
    "paired_difference_stratified",
    "ppi_bradley_terry",
    "ppi_mean",
    "ppi_mean_stratified",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: ``"normal"``: the z interval of ``ppi_py``; ``"t"``: the small-sample interval (see module doc).
Interval = Literal["normal", "t"]
INTERVALS: tuple[Interval, ...] = ("normal", "t")

#: Tolerance on the deployment mix summing to 1.
MIX_TOLERANCE = 1e-6
#: The most human labels :func:`neyman_allocation` plans; a target that needs more is infeasible.
MAX_LABELS = 10**12


def _num(x: float | None) -> float | None:
    """A float for JSON: non-finite values become null (strict JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True, kw_only=True)
class PPIEstimate:
    """A mean (or difference, or strength) with its normal interval.

    ``se`` is the standard error the interval is built from; ``ci_low``, ``ci_high`` and
    ``se`` are ``None`` when no interval exists (fewer than two labels); ``df`` is the degrees
    of freedom of a Student t interval (``None``: a normal interval). ``lam`` is the
    PPI++ weight of the judge (0 = human-only, 1 = plain PPI), ``None`` where it does not
    apply (human-only, judge-only, a mix of strata with their own ``lam``). ``n_labelled``
    counts the human-labelled outputs used, ``n_unlabelled`` the judge-only ones.
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    se: float | None
    n_labelled: int
    n_unlabelled: int
    lam: float | None
    method: str
    level: float
    warnings: tuple[str, ...] = ()
    df: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; NaN and infinities become ``None``.

        The key ``df`` is present only for a Student t interval (``df`` not ``None``), so
        that the default (normal) shape has exactly the ten documented keys.
        """
        out: dict[str, Any] = {
            "value": _num(self.value),
            "ci_low": _num(self.ci_low),
            "ci_high": _num(self.ci_high),
            "se": _num(self.se),
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
            "lam": _num(self.lam),
            "method": self.method,
            "level": self.level,
            "warnings": list(self.warnings),
        }
        if self.df is not None:
            out["df"] = _num(self.df)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PPIEstimate:
        """Inverse of :meth:`to_json` (a null value reads back as NaN)."""

        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        value = d.get("value")
        return cls(
            value=math.nan if value is None else float(value),
            ci_low=opt("ci_low"),
            ci_high=opt("ci_high"),
            se=opt("se"),
            n_labelled=int(d["n_labelled"]),
            n_unlabelled=int(d["n_unlabelled"]),
            lam=opt("lam"),
            method=str(d["method"]),
            level=float(d["level"]),
            warnings=tuple(str(w) for w in d.get("warnings", ())),
            df=opt("df"),
        )


# --- input checks -----------------------------------------------------------------------------


def _vec(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (drop missing values first)")
    return arr


def _same_length(*pairs: tuple[FloatArray | IntArray, str]) -> None:
    lengths = {len(a) for a, _ in pairs}
    if len(lengths) > 1:
        names = ", ".join(n for _, n in pairs)
        raise ValueError(f"{names} must have the same length")


def _level(level: float) -> float:
    if not (0.0 < float(level) < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(level)


@functools.lru_cache(maxsize=64)
def _z(level: float) -> float:
    # ndtri is what norm.ppf evaluates, without its argument-checking overhead.
    return float(ndtri(1.0 - (1.0 - level) / 2.0))


def _weights(w: npt.ArrayLike | None, n: int, name: str) -> FloatArray:
    """Weights rescaled to mean 1 (``w / w.sum() * n``, as ``ppi_py``); ones when ``None``."""
    if w is None:
        return np.ones(n)
    arr = _vec(w, name)
    if len(arr) != n:
        raise ValueError(f"{name} must have one weight per value ({n}), got {len(arr)}")
    if n and np.any(arr <= 0):
        raise ValueError(f"{name} must be positive")
    return arr / arr.sum() * n if n else arr


def _codes(s: npt.ArrayLike, name: str) -> IntArray:
    arr = np.asarray(s)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise ValueError(f"{name} must hold integer stratum codes")
    return arr.astype(np.int64)


def _check_mix(mix: Mapping[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in mix.items():
        fv = float(v)
        if not math.isfinite(fv) or fv < 0:
            raise ValueError(f"mix weight of stratum {k} must be a finite number >= 0, got {v!r}")
        out[int(k)] = fv
    total = sum(out.values())
    if abs(total - 1.0) > MIX_TOLERANCE:
        raise ValueError(f"mix weights must sum to 1, got {total:.6g}")
    return out


def _estimate(
    value: float,
    se: float | None,
    *,
    n_labelled: int,
    n_unlabelled: int,
    lam: float | None,
    method: str,
    level: float,
    warnings: tuple[str, ...] = (),
    df: float | None = None,
) -> PPIEstimate:
    if se is None or not math.isfinite(se):
        lo = hi = None
        se = None
        df = None
    else:
        half = (_z(level) if df is None else _t(level, df)) * se
        lo, hi = value - half, value + half
    return PPIEstimate(
        value=float(value),
        ci_low=lo,
        ci_high=hi,
        se=se,
        n_labelled=n_labelled,
        n_unlabelled=n_unlabelled,
        lam=lam,
        method=method,
        level=level,
        warnings=warnings,
        df=df,
    )


def _t(level: float, df: float) -> float:
    # stdtrit is what scipy.stats.t.ppf evaluates.
    return float(stdtrit(df, 1.0 - (1.0 - level) / 2.0))


def _check_interval(interval: str) -> Interval:
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
    return "t" if interval == "t" else "normal"


def _interval_text(df: float | None) -> str:
    if df is None:
        return "normal interval"
    return f"Student t interval (df={df:.3g})"


def _welch_df(parts: Sequence[tuple[float, float]]) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a sum of variances ``(v_k, df_k)``."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / d for v, d in parts if v > 0 and d > 0)
    if not (total > 0) or not (denom > 0):
        return None
    return total * total / denom


def _few_labels(n: int) -> tuple[str, ...]:
    return (f"only {n} human label(s) (< 2): no interval",) if n < 2 else ()


# --- means ------------------------------------------------------------------------------------


def classical_mean(
    y: npt.ArrayLike,
    *,
    w: npt.ArrayLike | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
) -> PPIEstimate:
    """Human-only mean of ``y`` with a normal interval.

    Without weights it is ``ppi_py.classical_mean_ci``: the mean and ``std(y) / sqrt(n)``.
    With weights ``w`` (1 / inclusion probability) the estimate is the ratio (Hajek) mean
    ``sum(w y) / sum(w)`` and its standard error the Taylor-linearised one of that ratio,
    ``sqrt(sum(w_i^2 (y_i - mean)^2)) / sum(w)`` (Sarndal, Swensson and Wretman 1992,
    result 5.6.2, with-replacement approximation; statsmodels' HC0 sandwich of an
    intercept-only weighted regression is the same number). ppi_py's weighted form uses the
    spread of ``w y`` instead, which counts the variation of the weights themselves as noise:
    labels [1, 1, 1, 1] with weights [1, 1, 3, 3] have a standard error of 0, not 0.25
    (docs/statistics.md, "Human-only estimates with unequal weights"). With equal weights both
    are ``std(y) / sqrt(n)``. Raises ``ValueError`` without labels; one label gives the value
    without an interval. ``interval="t"``: the variance times ``n / (n - 1)`` and a Student t
    quantile with ``n - 1`` degrees of freedom.
    """
    level = _level(level)
    interval = _check_interval(interval)
    yv = _vec(y, "y")
    n = len(yv)
    if n == 0:
        raise ValueError("classical_mean needs at least one human label")
    wv = _weights(w, n, "w")
    value = float(np.sum(wv * yv) / np.sum(wv))
    se, df = _hajek_se(yv, wv, value, interval)
    weighted = ", weighted by w (Hajek ratio, linearised variance)" if w is not None else ""
    return _estimate(
        value,
        se,
        n_labelled=n,
        n_unlabelled=0,
        lam=None,
        method=f"classical mean of human labels{weighted}; {_interval_text(df)}",
        level=level,
        warnings=_few_labels(n),
        df=df,
    )


def _hajek_se(y: FloatArray, w: FloatArray, value: float,
              interval: Interval) -> tuple[float | None, float | None]:
    """Linearised standard error of the ratio mean sum(w y) / sum(w): the residuals
    w_i (y_i - value) / sum(w) summed in quadrature (equal weights: std(y) / sqrt(n))."""
    n = len(y)
    if n < 2:
        return None, None
    z = w * (y - value)
    var = float(np.sum(z * z)) / float(np.sum(w)) ** 2
    if interval == "t":
        return math.sqrt(var * n / (n - 1)), float(n - 1)
    return math.sqrt(var), None


def _simple_se(values: FloatArray, interval: Interval) -> tuple[float | None, float | None]:
    n = len(values)
    if n < 2:
        return None, None
    if interval == "t":
        return float(values.std(ddof=1) / math.sqrt(n)), float(n - 1)
    return float(values.std() / math.sqrt(n)), None


def naive_mean(
    f: npt.ArrayLike,
    *,
    w: npt.ArrayLike | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
) -> PPIEstimate:
    """Judge-only mean of the judge's scores ``f`` over every output, with a normal interval.

    Biased by the judge's disagreement with humans: the interval reflects the sampling noise
    of the outputs only, never the judge's error, and does not cover the human mean when the
    judge is off. Shown beside the other two so a reader sees how far the judge alone is.
    """
    level = _level(level)
    interval = _check_interval(interval)
    fv = _vec(f, "f")
    n = len(fv)
    if n == 0:
        raise ValueError("naive_mean needs at least one judge score")
    wv = _weights(w, n, "w")
    values = wv * fv
    se, df = _simple_se(values, interval)
    return _estimate(
        float(values.mean()),
        se,
        n_labelled=0,
        n_unlabelled=n,
        lam=None,
        method="naive mean of judge scores over all outputs (biased: ignores judge error); "
        + _interval_text(df),
        level=level,
        warnings=() if n >= 2 else (f"only {n} output(s): no interval",),
        df=df,
    )


def _tuned_lambda(
    y: FloatArray, fl: FloatArray, fu: FloatArray, w: FloatArray, wu: FloatArray
) -> float:
    """Power-tuned lambda of PPI++ for a mean, computed as ``ppi_py`` does (clipped to [0, 1]).

    The gradients are taken at the ``lambda = 1`` estimate; the numerator is the (1/n)
    covariance of the labelled gradients of the human and judge losses, the denominator
    ``(1 + n/N)`` times the (n+N-1)-normalised variance of the judge's gradients over both sets.
    """
    n, big_n = len(y), len(fu)
    theta1 = float((wu * fu).mean() + (w * (y - fl)).mean())
    g = w * (y - theta1)
    gh = w * (fl - theta1)
    ghu = wu * (fu - theta1)
    cov = 2.0 * float(np.sum((g - g.mean()) * (gh - gh.mean()))) / n
    var = float(np.var(np.concatenate([gh, ghu]), ddof=1))
    denom = 2.0 * (1.0 + n / big_n) * var
    if not (denom > 0) or not math.isfinite(cov):
        # A constant judge carries no information: the human-only estimate.
        return 0.0
    return float(np.clip(cov / denom, 0.0, 1.0))


def _census_parts(
    y: FloatArray, fl: FloatArray, wn: FloatArray, lam: float, big_n: int, ddof: int
) -> tuple[float, float]:
    """(design variance of the rectifier, the population's own variance of the mean) of the
    difference estimator (`ppi_mean` with ``census=True``); ``wn`` has mean 1."""
    n = len(y)
    if n <= ddof or big_n <= 0:
        return 0.0, 0.0
    r = y - lam * fl
    r_bar = float((wn * r).mean())
    inv_pi = wn * (big_n / n)
    # (1 - pi) / pi^2 = 1/pi^2 - 1/pi; an output drawn with certainty (pi >= 1) adds nothing.
    factor = np.maximum(inv_pi**2 - inv_pi, 0.0)
    scale = n / (n - ddof)
    v_design = float(np.sum(factor * (r - r_bar) ** 2)) / big_n**2 * scale
    y_bar = float((wn * y).mean())
    v_pop = float(np.sum(wn * (y - y_bar) ** 2)) / (n - ddof) / big_n
    return v_design, v_pop


def ppi_mean(
    y: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    *,
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
    census: bool = False,
) -> PPIEstimate:
    """PPI++ estimate of the mean human label, with power tuning when ``lam`` is ``None``.

    ``y`` and ``f_labelled``: human labels and the judge's scores on the same labelled outputs;
    ``f_unlabelled``: the judge's scores on outputs without a human label. ``w`` and
    ``w_unlabelled`` weight each set (rescaled to mean 1 within the set). Equals
    ``ppi_py.ppi_mean_pointestimate`` / ``ppi_mean_ci`` on the same inputs (with
    ``alpha = 1 - level``). Without unlabelled outputs the estimate is the human-only one
    (``lam = 0``). Raises ``ValueError`` without labels.

    Unequal inclusion probabilities: when humans labelled outputs of a fixed set with
    probabilities ``pi`` and the unlabelled outputs are the rest of that set, pass
    ``w = 1 / pi`` **and** ``w_unlabelled = 1 / (1 - pi)``: the rest over-represents the
    outputs humans were unlikely to see, and without its weights the judge-only term is biased
    (in a simulation where humans saw low-scored outputs more often, 95 % intervals covered
    in 28 % of runs without ``w_unlabelled`` and in 97 % with it).

    ``interval="t"`` (not in ``ppi_py``): the two variance terms with ``n - 1`` and ``N - 1``,
    and a Student t quantile with Welch-Satterthwaite degrees of freedom. With tens of labels
    the normal interval undercovers (about 90 % for a nominal 95 % at n = 10); the t interval
    keeps its level there and converges to the normal one as ``n`` grows.

    ``census=True`` (not in ``ppi_py``): ``f_unlabelled`` holds the judge's scores on EVERY
    output of the population, the labelled ones included, and the labelled outputs are a
    probability sample of it with inclusion probabilities proportional to ``1 / w``. The
    estimate is the survey difference estimator, lambda mean(f over all) + weighted mean of
    (y - lambda f) over the labelled, unbiased whatever the inclusion probabilities, with no
    weight needed on the unlabelled rest. Its variance is not ppi_py's (the two terms are not
    independent samples): var(y) / N for the population's own sampling plus the design
    variance of the rectifier, (1 / N^2) sum (1 - pi_i) / pi_i^2 (r_i - r_bar)^2 with
    pi_i = (n / N) / w_i; for equal weights that is (1/n - 1/N) var(y - lambda f), and with
    every output labelled it is the human-only variance.
    """
    level = _level(level)
    interval = _check_interval(interval)
    if census and w_unlabelled is not None:
        raise ValueError("census: the judge term runs over every output unweighted; "
                         "w_unlabelled does not apply")
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"))
    n, big_n = len(yv), len(fu)
    if n == 0:
        raise ValueError("ppi_mean needs at least one human label")
    wv = _weights(w, n, "w")
    wu = _weights(w_unlabelled, big_n, "w_unlabelled")
    weighted = ", weighted" if (w is not None or w_unlabelled is not None) else ""
    warnings = list(_few_labels(n))
    if big_n == 0:
        lam_used = 0.0
        how = "no unlabelled outputs: human labels only"
        warnings.append("no judge-only outputs: the estimate uses the human labels only")
    elif lam is None:
        lam_used = _tuned_lambda(yv, fl, fu, wv, wu)
        how = f"power-tuned lambda={lam_used:.4g}"
    else:
        lam_used = float(lam)
        if not math.isfinite(lam_used):
            raise ValueError(f"lam must be finite, got {lam!r}")
        how = f"fixed lambda={lam_used:.4g}"
    ddof = 1 if interval == "t" else 0
    rect = wv * (yv - lam_used * fl)
    value = float(rect.mean())
    var_r = float(rect.var(ddof=ddof)) / n if n > ddof else 0.0
    var_i = 0.0
    if big_n:
        imputed = wu * (lam_used * fu)
        value += float(imputed.mean())
        var_i = float(imputed.var(ddof=ddof)) / big_n if big_n > ddof else 0.0
    if census:
        if big_n < n:
            raise ValueError("census: f_unlabelled must hold the judge's scores on every "
                             "output, the labelled ones included")
        var_r, var_i = _census_parts(yv, fl, wv, lam_used, big_n, ddof)
        how += "; judge term over every output, design-based variance"
    se = math.sqrt(var_r + var_i) if n >= 2 else None
    df = None
    if interval == "t" and se is not None:
        df = (float(n - 1) if census
              else _welch_df([(var_r, n - 1.0), (var_i, big_n - 1.0)]) or float(n - 1))
    return _estimate(
        value,
        se,
        n_labelled=n,
        n_unlabelled=big_n,
        lam=lam_used,
        method=f"PPI++ mean ({how}{weighted}); {_interval_text(df)}",
        level=level,
        warnings=tuple(warnings),
        df=df,
    )


# --- strata and the deployment mix -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StratifiedPPI:
    """Per-stratum estimates and their deployment-mix combination.

    ``per_stratum`` has an entry for every stratum code with at least one human label (in the
    data or the mix). ``mix`` is ``None`` when a stratum with a positive mix weight has no
    human label; those strata are listed in ``missing``. ``weights`` is the mix used.
    """

    per_stratum: dict[int, PPIEstimate]
    mix: PPIEstimate | None
    missing: tuple[int, ...]
    weights: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (stratum codes become string keys)."""
        return {
            "per_stratum": {str(k): v.to_json() for k, v in sorted(self.per_stratum.items())},
            "mix": None if self.mix is None else self.mix.to_json(),
            "missing": list(self.missing),
            "weights": {str(k): v for k, v in sorted(self.weights.items())},
        }


def combine_strata(
    per_stratum: Mapping[int, PPIEstimate],
    mix: Mapping[int, float],
    *,
    method: str = "mix of per-stratum estimates",
    level: float | None = None,
) -> tuple[PPIEstimate | None, tuple[int, ...]]:
    """Combine per-stratum estimates with the mix: ``sum mix_s theta_s``, se from the strata.

    Returns ``(estimate, missing)``: ``missing`` lists the strata with a positive mix weight
    and no estimate, and the estimate is then ``None``. A stratum without an interval gives a
    mix value without an interval. Usable for human-only or judge-only per-stratum estimates as
    well as PPI ones. When every weighted stratum has a Student t interval (``df`` set), the
    mix has one too, with Welch-Satterthwaite degrees of freedom; otherwise it is normal.
    """
    weights = _check_mix(mix)
    active = {s: m for s, m in weights.items() if m > 0}
    missing = tuple(sorted(s for s in active if s not in per_stratum))
    if missing:
        return None, missing
    if level is None:
        levels = {per_stratum[s].level for s in active}
        level = levels.pop() if len(levels) == 1 else 0.95
    level = _level(level)
    value = sum(m * per_stratum[s].value for s, m in active.items())
    no_interval = sorted(s for s in active if per_stratum[s].se is None)
    warnings: list[str] = []
    se: float | None
    if no_interval:
        se = None
        warnings.append(
            "no interval: strata without an interval (fewer than 2 labels): "
            + ", ".join(str(s) for s in no_interval)
        )
    else:
        se = math.sqrt(sum(m**2 * (per_stratum[s].se or 0.0) ** 2 for s, m in active.items()))
    df: float | None = None
    if se is not None and all(per_stratum[s].df is not None for s in active):
        df = _welch_df([(m**2 * (per_stratum[s].se or 0.0) ** 2, per_stratum[s].df or 0.0)
                        for s, m in active.items()])
    if df is not None:
        method = method.replace("normal interval", _interval_text(df))
    for s in active:
        warnings.extend(f"stratum {s}: {w}" for w in per_stratum[s].warnings)
    left_out = sorted(s for s in per_stratum if s not in active)
    if left_out:
        warnings.append(
            "strata with data but no mix weight, left out of the mix: "
            + ", ".join(str(s) for s in left_out)
        )
    est = _estimate(
        value,
        se,
        n_labelled=sum(per_stratum[s].n_labelled for s in active),
        n_unlabelled=sum(per_stratum[s].n_unlabelled for s in active),
        lam=None,
        method=method,
        level=level,
        warnings=tuple(warnings),
        df=df,
    )
    return est, ()


def _strata_normal(
    y: FloatArray, fl: FloatArray, sl: IntArray, fu: FloatArray, su: IntArray,
    w: FloatArray | None, wu: FloatArray | None, lam: float | None, level: float,
    census: bool = False,
) -> dict[int, PPIEstimate]:
    """:func:`ppi_mean` (normal interval) of every stratum at once, from per-stratum sums.

    The same formulas as `ppi_mean` and `_tuned_lambda`, evaluated with one ``bincount`` per
    sum over all strata instead of one boolean mask and a dozen array passes per stratum: a
    selection report calls this for every candidate and paired difference over ~100k outputs
    and 11 strata. Sums are in another order, so figures agree with `ppi_mean` to rounding
    (tests/evalstats/test_ppi.py holds 1e-12). Centred (two-pass) sums keep the variances as
    accurate as numpy's ``var``.
    """
    codes = np.unique(sl)
    k = int(max(int(codes.max()), int(su.max()) if su.size else 0)) + 1
    if int(codes.min()) < 0 or (su.size and int(su.min()) < 0):
        return {}

    def bsum(idx: IntArray, vals: FloatArray) -> FloatArray:
        return np.asarray(np.bincount(idx, weights=vals, minlength=k), dtype=np.float64)

    n = np.bincount(sl, minlength=k).astype(np.float64)
    big_n = np.bincount(su, minlength=k).astype(np.float64) if su.size else np.zeros(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Weights rescaled to mean 1 within each stratum's labelled / unlabelled set.
        wl = np.ones_like(y) if w is None else w * (n / bsum(sl, w))[sl]
        wun = None if wu is None else wu * (big_n / bsum(su, wu))[su]
        has_u = big_n > 0
        # The unlabelled set (the big one) enters only through its size, weighted mean and
        # centred sum of squares per stratum; every formula below is rewritten in those.
        wf = fu if wun is None else wun * fu
        sum_wf = bsum(su, wf)
        mu = np.where(has_u, sum_wf / big_n, 0.0)
        # One pass, shifted by the overall mean so that a common offset cannot cancel
        # (sum (x - c)^2 - N (mu - c)^2 per stratum; no per-output gather of mu).
        shift = float(wf.mean()) if wf.size else 0.0
        ss_u = np.maximum(bsum(su, (wf - shift) ** 2) - big_n * (mu - shift) ** 2, 0.0)

        def mean_l(v: FloatArray) -> FloatArray:
            return bsum(sl, v) / n

        if lam is None:
            theta1 = mu + mean_l(wl * (y - fl))
            g = wl * (y - theta1[sl])
            gh = wl * (fl - theta1[sl])
            cov = 2.0 * bsum(sl, (g - mean_l(g)[sl]) * (gh - mean_l(gh)[sl])) / n
            # ghu = wun * (fu - theta1): sum = swf' - theta1 sw, sum of squares by moments.
            if wun is None:
                m_all = (bsum(sl, gh) + big_n * (mu - theta1)) / (n + big_n)
                ss_ghu = ss_u + big_n * (mu - theta1 - m_all) ** 2
            else:
                # With weights the judge's gradients are w (f - theta), not w f - theta: a
                # pass over them (an expansion in the weights' moments cancels badly).
                ghu = wun * (fu - theta1[su])
                m_all = (bsum(sl, gh) + bsum(su, ghu)) / (n + big_n)
                ss_ghu = bsum(su, (ghu - m_all[su]) ** 2)
            ss = bsum(sl, (gh - m_all[sl]) ** 2) + ss_ghu
            var = ss / (n + big_n - 1.0)
            denom = 2.0 * (1.0 + n / big_n) * var
            ok = (denom > 0) & np.isfinite(cov) & has_u
            lam_s = np.where(ok, np.clip(cov / np.where(ok, denom, 1.0), 0.0, 1.0), 0.0)
        else:
            if not math.isfinite(float(lam)):
                raise ValueError(f"lam must be finite, got {lam!r}")
            lam_s = np.where(has_u, float(lam), 0.0)
        rect = wl * (y - lam_s[sl] * fl)
        value_r = mean_l(rect)
        var_r = bsum(sl, (rect - value_r[sl]) ** 2) / n / n
        # imputed = lambda * w f: mean lambda mu, centred sum of squares lambda^2 ss_u.
        value_i = np.where(has_u, lam_s * mu, 0.0)
        var_i = np.where(has_u, lam_s**2 * ss_u / big_n / big_n, 0.0)
    weighted = ", weighted" if (w is not None or wu is not None) else ""
    if census:
        if wu is not None:
            raise ValueError("census: the judge term runs over every output unweighted; "
                             "w_unlabelled does not apply")
        # The labelled set is small: its design variance per stratum from its own slices.
        for c in codes.tolist():
            if big_n[c] < n[c]:
                raise ValueError("census: f_unlabelled must hold the judge's scores on every "
                                 "output, the labelled ones included")
            li = sl == c
            var_r[c], var_i[c] = _census_parts(y[li], fl[li], wl[li], float(lam_s[c]),
                                               int(big_n[c]), 0)
    out: dict[int, PPIEstimate] = {}
    for c in codes.tolist():
        n_c, big_c = int(n[c]), int(big_n[c])
        warnings = list(_few_labels(n_c))
        if big_c == 0:
            how = "no unlabelled outputs: human labels only"
            warnings.append("no judge-only outputs: the estimate uses the human labels only")
        elif lam is None:
            how = f"power-tuned lambda={float(lam_s[c]):.4g}"
        else:
            how = f"fixed lambda={float(lam_s[c]):.4g}"
        if census and big_c:
            how += "; judge term over every output, design-based variance"
        se = math.sqrt(float(var_r[c]) + float(var_i[c])) if n_c >= 2 else None
        out[c] = _estimate(
            float(value_r[c] + value_i[c]),
            se,
            n_labelled=n_c,
            n_unlabelled=big_c,
            lam=float(lam_s[c]),
            method=f"PPI++ mean ({how}{weighted}); {_interval_text(None)}",
            level=level,
            warnings=tuple(warnings),
        )
    return out


def ppi_mean_stratified(
    y: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    s_labelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    s_unlabelled: npt.ArrayLike,
    *,
    mix: Mapping[int, float],
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
    census: bool = False,
) -> StratifiedPPI:
    """Stratified PPI++ (Fisch et al. 2024): per-stratum power-tuned estimates and their mix.

    ``s_labelled`` / ``s_unlabelled`` are integer stratum codes of the labelled and unlabelled
    outputs; ``mix`` maps stratum codes to deployment shares (>= 0, summing to 1). Each stratum
    gets :func:`ppi_mean` on its own outputs (weights rescaled within the stratum; its own
    ``lambda``, or the fixed ``lam``, where ``lam = 0`` gives the human-only estimates); the mix
    estimate is ``sum mix_s theta_s`` with ``se = sqrt(sum mix_s^2 se_s^2)``. A stratum with
    a positive mix weight and no human label makes the mix ``None`` and is listed in
    ``missing``; one with fewer than 2 labels has no interval (nor has the mix then); one
    without unlabelled outputs uses its human labels only.
    """
    level = _level(level)
    weights = _check_mix(mix)
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    sl = _codes(s_labelled, "s_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    su = _codes(s_unlabelled, "s_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"), (sl, "s_labelled"))
    _same_length((fu, "f_unlabelled"), (su, "s_unlabelled"))
    wv = None if w is None else _vec(w, "w")
    wu = None if w_unlabelled is None else _vec(w_unlabelled, "w_unlabelled")
    if wv is not None:
        _same_length((yv, "y"), (wv, "w"))
    if wu is not None:
        _same_length((fu, "f_unlabelled"), (wu, "w_unlabelled"))
    per: dict[int, PPIEstimate] = {}
    if interval == "normal" and sl.size and (wv is None or np.all(wv > 0)) and (
        wu is None or np.all(wu > 0)
    ):
        per = _strata_normal(yv, fl, sl, fu, su, wv, wu, lam, level, census)
    for s in sorted(set(sl.tolist()) - set(per)):
        li = sl == s
        ui = su == s
        per[s] = ppi_mean(
            yv[li],
            fl[li],
            fu[ui],
            w=None if wv is None else wv[li],
            w_unlabelled=None if wu is None else wu[ui],
            lam=lam,
            level=level,
            interval=interval,
            census=census,
        )
    how = "per-stratum power-tuned lambda" if lam is None else f"fixed lambda={lam:.4g}"
    mixed, missing = combine_strata(
        per,
        weights,
        method=f"stratified PPI++ (Fisch et al. 2024; {how}): mix-weighted sum of per-stratum "
        "estimates; normal interval",
        level=level,
    )
    return StratifiedPPI(per_stratum=per, mix=mixed, missing=missing, weights=weights)


# --- paired differences -----------------------------------------------------------------------


def paired_difference(
    y_a: npt.ArrayLike,
    y_b: npt.ArrayLike,
    f_a_l: npt.ArrayLike,
    f_b_l: npt.ArrayLike,
    f_a_u: npt.ArrayLike,
    f_b_u: npt.ArrayLike,
    *,
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
    census: bool = False,
) -> PPIEstimate:
    """PPI++ estimate of mean(A - B) on shared items.

    Labelled: the items where both candidates' outputs carry a human label (``y_a``, ``y_b``
    and the judge's ``f_a_l``, ``f_b_l`` there, aligned by item); unlabelled: the other items
    where both have judge scores (``f_a_u``, ``f_b_u``). This is :func:`ppi_mean` on the
    item-level differences, so the correlation between the candidates through the items is
    accounted for.
    """
    ya, yb = _vec(y_a, "y_a"), _vec(y_b, "y_b")
    fal, fbl = _vec(f_a_l, "f_a_l"), _vec(f_b_l, "f_b_l")
    fau, fbu = _vec(f_a_u, "f_a_u"), _vec(f_b_u, "f_b_u")
    _same_length((ya, "y_a"), (yb, "y_b"), (fal, "f_a_l"), (fbl, "f_b_l"))
    _same_length((fau, "f_a_u"), (fbu, "f_b_u"))
    est = ppi_mean(
        ya - yb, fal - fbl, fau - fbu, w=w, w_unlabelled=w_unlabelled, lam=lam, level=level,
        interval=interval, census=census,
    )
    return _relabel(est, "paired difference A - B on shared items: ")


def _relabel(est: PPIEstimate, prefix: str) -> PPIEstimate:
    return dataclasses.replace(est, method=prefix + est.method)


def paired_difference_stratified(
    y_a: npt.ArrayLike,
    y_b: npt.ArrayLike,
    f_a_l: npt.ArrayLike,
    f_b_l: npt.ArrayLike,
    s_labelled: npt.ArrayLike,
    f_a_u: npt.ArrayLike,
    f_b_u: npt.ArrayLike,
    s_unlabelled: npt.ArrayLike,
    *,
    mix: Mapping[int, float],
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
    census: bool = False,
) -> StratifiedPPI:
    """Stratified PPI++ of mean(A - B): per-stratum paired differences and their mix.

    As :func:`paired_difference` within each stratum (item-aligned arrays, stratum codes
    ``s_labelled`` / ``s_unlabelled`` per item) and :func:`ppi_mean_stratified` for the mix.
    """
    ya, yb = _vec(y_a, "y_a"), _vec(y_b, "y_b")
    fal, fbl = _vec(f_a_l, "f_a_l"), _vec(f_b_l, "f_b_l")
    fau, fbu = _vec(f_a_u, "f_a_u"), _vec(f_b_u, "f_b_u")
    _same_length((ya, "y_a"), (yb, "y_b"), (fal, "f_a_l"), (fbl, "f_b_l"))
    _same_length((fau, "f_a_u"), (fbu, "f_b_u"))
    res = ppi_mean_stratified(
        ya - yb,
        fal - fbl,
        s_labelled,
        fau - fbu,
        s_unlabelled,
        mix=mix,
        w=w,
        w_unlabelled=w_unlabelled,
        lam=lam,
        level=level,
        interval=interval,
        census=census,
    )
    prefix = "paired difference A - B on shared items: "
    return StratifiedPPI(
        per_stratum={k: _relabel(v, prefix) for k, v in res.per_stratum.items()},
        mix=None if res.mix is None else _relabel(res.mix, prefix),
        missing=res.missing,
        weights=res.weights,
    )


# --- where the next labels help most -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NeymanAllocation:
    """Extra human labels per stratum that reach ``target_se`` on the mix with the fewest labels.

    ``per_stratum``: extra labels (>= 0) per stratum code; ``total``: their sum;
    ``feasible``: whether the planned labels reach the target (``False`` when the target is 0
    or below the part of the variance labels cannot reduce, when it needs more than
    :data:`MAX_LABELS` labels, or when a stratum's ``capacity`` of unlabelled outputs runs
    out; ``per_stratum`` is then the labels an interval needs, or the whole capacity);
    ``se_current`` / ``se_planned``: the modelled mix standard error now (``inf`` when a
    weighted stratum has no label) and after the extra labels. A target already met, or
    ``sigma`` 0 everywhere (no variance to remove), is feasible with only the labels an
    interval needs.
    """

    per_stratum: dict[int, int]
    total: int
    feasible: bool
    target_se: float
    se_current: float
    se_planned: float

    def to_json(self) -> dict[str, Any]:
        """The report's ``next_labels`` shape (stratum codes as string keys)."""
        return {
            "target_se": self.target_se,
            "per_stratum": {str(k): v for k, v in sorted(self.per_stratum.items())},
            "total": self.total,
            "feasible": self.feasible,
            "se_current": _num(self.se_current),
            "se_planned": _num(self.se_planned),
        }


def _max_m(q: FloatArray) -> IntArray:
    """Largest integer m >= 0 with m (m + 1) <= q (elementwise, exact after a correction)."""
    m = np.floor((np.sqrt(1.0 + 4.0 * q) - 1.0) / 2.0)
    m = np.where((m + 1) * (m + 2) <= q, m + 1, m)
    m = np.where(m * (m + 1) > q, m - 1, m)
    return np.maximum(m, 0).astype(np.int64)


def neyman_allocation(
    *,
    sigma: Mapping[int, float],
    n_labelled: Mapping[int, int],
    mix: Mapping[int, float],
    target_se: float,
    capacity: Mapping[int, int] | None = None,
    fixed_var: Mapping[int, float] | None = None,
    min_labels: int = 2,
) -> NeymanAllocation:
    """The fewest extra human labels per stratum that bring the mix se down to ``target_se``.

    Model: ``var_mix = sum_s mix_s^2 (sigma_s^2 / n_s + fixed_var_s)`` with ``sigma_s`` the
    per-label standard deviation of the rectifier ``y - lambda f`` in stratum s (e.g. a
    stratum's PPI se times ``sqrt(n_s)``), ``n_s`` its labels after the extra ones and
    ``fixed_var_s`` (default 0) the part of its variance labels do not reduce (the judge-only
    term). Minimises the total number of extra labels subject to ``var_mix <= target_se^2``,
    in integers: the continuous optimum is Neyman's allocation, ``n_s`` proportional to
    ``mix_s sigma_s`` with the strata that already have more than their share kept as they are;
    the integer optimum takes the largest marginal reductions ``mix_s^2 sigma_s^2 /
    (n (n + 1))`` first, which is exact for this separable convex problem (found here by a
    threshold search on the marginal reduction, then single steps).

    Every stratum with a positive mix weight first gets up to ``min_labels`` labels (an
    interval needs two). ``capacity`` caps the extra labels per stratum (its unlabelled
    outputs); strata missing from it are uncapped. ``sigma`` must be given (finite, >= 0) for
    every stratum with a positive mix weight; a stratum whose sigma is unknown (fewer than two
    labels) needs a prior guess from the caller, e.g. the pooled sigma.
    """
    weights = _check_mix(mix)
    target = float(target_se)
    if not math.isfinite(target) or target < 0:
        raise ValueError(f"target_se must be a finite number >= 0, got {target_se!r}")
    if min_labels < 1:
        raise ValueError("min_labels must be >= 1")
    strata = sorted(s for s, m in weights.items() if m > 0)
    a2 = np.zeros(len(strata))
    n0 = np.zeros(len(strata), dtype=np.int64)
    cap = np.full(len(strata), np.iinfo(np.int64).max // 4, dtype=np.int64)
    floor_var = 0.0
    for i, s in enumerate(strata):
        if s not in sigma:
            raise ValueError(f"sigma is missing for stratum {s} (mix weight {weights[s]})")
        sg = float(sigma[s])
        if not math.isfinite(sg) or sg < 0:
            raise ValueError(f"sigma of stratum {s} must be a finite number >= 0, got {sg!r}")
        a2[i] = weights[s] ** 2 * sg**2
        n0[i] = int(n_labelled.get(s, 0))
        if n0[i] < 0:
            raise ValueError(f"n_labelled of stratum {s} must be >= 0")
        if capacity is not None and s in capacity:
            cap[i] = max(int(capacity[s]), 0)
        if fixed_var is not None and s in fixed_var:
            floor_var += weights[s] ** 2 * float(fixed_var[s])

    def var_of(m: IntArray) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(a2 > 0, a2 / m, 0.0)
        return float(terms.sum()) + floor_var

    # Labels every weighted stratum needs before an interval exists.
    forced = np.minimum(np.maximum(min_labels - n0, 0), cap)
    m = n0 + forced
    room = cap - forced
    se_now = math.sqrt(var_of(np.maximum(n0, 0))) if np.all((n0 > 0) | (a2 == 0)) else math.inf
    budget = target**2

    def result(extra: IntArray, feasible: bool) -> NeymanAllocation:
        per = {s: int(x) for s, x in zip(strata, extra, strict=True)}
        v = var_of(n0 + extra) if np.all((n0 + extra > 0) | (a2 == 0)) else math.inf
        return NeymanAllocation(
            per_stratum=per,
            total=int(sum(per.values())),
            feasible=feasible,
            target_se=target,
            se_current=se_now,
            se_planned=math.sqrt(v),
        )

    if np.any(n0 + forced < min_labels) or np.any((m == 0) & (a2 > 0)):
        # Not enough outputs left to label in some weighted stratum.
        return result(forced, False)
    if var_of(m) <= budget:
        return result(forced, True)
    full = m + room
    if var_of(full) > budget:
        return result(forced + room, False)
    # Neyman's continuous total; beyond MAX_LABELS the plan is not a plan (and int64 overflows).
    if float(np.sqrt(a2).sum()) ** 2 / (budget - floor_var) > MAX_LABELS:
        return result(forced, False)

    def steps(t: float) -> IntArray:
        # Steps m -> m + 1 whose reduction a2 / (m (m + 1)) is >= t, within the capacity.
        with np.errstate(divide="ignore"):
            top = _max_m(a2 / t)
        return np.clip(top - m + 1, 0, room)

    gains0 = a2 / (m * (m + 1.0))
    t_hi = float(gains0.max()) * 2.0  # takes no step: infeasible
    t_lo = t_hi
    while var_of(m + steps(t_lo)) > budget:
        t_lo /= 16.0
    for _ in range(200):
        t_mid = math.sqrt(t_hi * t_lo)
        if not (t_lo < t_mid < t_hi):
            break
        if var_of(m + steps(t_mid)) > budget:
            t_hi = t_mid
        else:
            t_lo = t_mid
    # m + steps(t_hi) is a prefix of the order of largest reductions and misses the target:
    # continue one label at a time, largest reduction first.
    cur = m + steps(t_hi)
    v = var_of(cur)
    heap = [
        (-a2[i] / (cur[i] * (cur[i] + 1.0)), i)
        for i in range(len(strata))
        if a2[i] > 0 and cur[i] - m[i] < room[i]
    ]
    heapq.heapify(heap)
    while v > budget and heap:
        neg_gain, i = heapq.heappop(heap)
        cur[i] += 1
        v -= -neg_gain
        if cur[i] - m[i] < room[i]:
            heapq.heappush(heap, (-a2[i] / (cur[i] * (cur[i] + 1.0)), i))
    # Recompute from scratch (the running sum drifts by rounding) before deciding feasibility.
    return result(cur - n0, var_of(cur) <= budget * (1 + 1e-12))


# --- Bradley-Terry strengths for pairwise studies ----------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BradleyTerry:
    """Bradley-Terry strengths (log-odds scale), ``P(i beats j) = expit(beta_i - beta_j)``.

    ``strengths[c]`` per candidate code, the ``reference`` fixed at 0 (no interval);
    ``cov`` the covariance matrix of the other candidates' strengths, in the order of
    ``free`` (for intervals of differences, see :meth:`difference`); ``order`` the candidates
    best first; ``lam`` the PPI++ weight of the judge (0 = human-only).
    """

    strengths: dict[int, PPIEstimate]
    reference: int
    free: tuple[int, ...]
    cov: tuple[tuple[float, ...], ...]
    lam: float
    order: tuple[int, ...]
    n_labelled: int
    n_unlabelled: int
    level: float
    method: str
    warnings: tuple[str, ...] = ()

    def difference(self, i: int, j: int) -> PPIEstimate:
        """``beta_i - beta_j`` with its normal interval (from the joint covariance)."""
        c = np.asarray(self.cov, dtype=np.float64)
        vec = np.zeros(len(self.free))
        pos = {k: p for p, k in enumerate(self.free)}
        if i in pos:
            vec[pos[i]] += 1.0
        if j in pos:
            vec[pos[j]] -= 1.0
        var = float(vec @ c @ vec) if len(vec) else 0.0
        se = math.sqrt(var) if math.isfinite(var) and var >= 0 and self.cov else None
        return _estimate(
            self.strengths[i].value - self.strengths[j].value,
            se,
            n_labelled=self.n_labelled,
            n_unlabelled=self.n_unlabelled,
            lam=self.lam,
            method=f"difference of strengths {i} - {j}; {self.method}",
            level=self.level,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (candidate codes as string keys)."""
        return {
            "strengths": {str(k): v.to_json() for k, v in sorted(self.strengths.items())},
            "reference": self.reference,
            "free": list(self.free),
            "cov": [[_num(x) for x in row] for row in self.cov],
            "lam": _num(self.lam),
            "order": list(self.order),
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
            "level": self.level,
            "method": self.method,
            "warnings": list(self.warnings),
        }


def _design(first: IntArray, second: IntArray, col: Mapping[int, int], d: int) -> FloatArray:
    """Rows +1 at ``first``'s column, -1 at ``second``'s (the reference has no column)."""
    x = np.zeros((len(first), d))
    if not len(first):
        return x
    codes = np.array(sorted(col), dtype=np.int64)
    cols = np.array([col[int(c)] for c in codes], dtype=np.int64)
    rows = np.arange(len(first))
    for arr, sign in ((first, 1.0), (second, -1.0)):
        pos = np.searchsorted(codes, arr)
        pos = np.minimum(pos, max(len(codes) - 1, 0))
        ok = codes[pos] == arr if len(codes) else np.zeros(len(arr), dtype=bool)
        np.add.at(x, (rows[ok], cols[pos[ok]]), sign)
    return x


def _log1pexp(x: FloatArray) -> FloatArray:
    return np.logaddexp(0.0, x)


def _bt_fit(
    lam: float,
    x: FloatArray,
    y: FloatArray,
    fl: FloatArray,
    xu: FloatArray,
    fu: FloatArray,
    w: FloatArray,
    wu: FloatArray,
) -> tuple[FloatArray, bool]:
    """Minimiser of the rectified logistic loss (the loss of ``ppi_logistic_pointestimate``).

    The loss is convex for lambda in [0, 1] (its Hessian is ``lambda H_unlabelled +
    (1 - lambda) H_labelled``), so damped Newton converges to the unique minimum.
    """
    n, big_n, d = len(y), len(fu), x.shape[1]

    def loss(t: FloatArray) -> float:
        z, zu = x @ t, xu @ t
        val = np.sum(w * (-y * z + _log1pexp(z))) / n
        val -= lam * np.sum(w * (-fl * z + _log1pexp(z))) / n
        if big_n:
            val += lam * np.sum(wu * (-fu * zu + _log1pexp(zu))) / big_n
        return float(val)

    theta = np.zeros(d)
    converged = False
    base = loss(theta)
    for _ in range(200):
        mu = expit(x @ theta)
        grad = x.T @ (w * (mu - y)) / n - lam * x.T @ (w * (mu - fl)) / n
        hess = (1.0 - lam) * (x.T * (w * mu * (1 - mu))) @ x / n
        if big_n:
            mu_u = expit(xu @ theta)
            grad += lam * xu.T @ (wu * (mu_u - fu)) / big_n
            hess += lam * (xu.T * (wu * mu_u * (1 - mu_u))) @ xu / big_n
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        t = 1.0
        trial = loss(theta - step)
        while t > 1e-10 and trial > base + 1e-15 * abs(base):
            t /= 2.0
            trial = loss(theta - t * step)
        theta = theta - t * step
        base = trial
        if float(np.max(np.abs(t * step), initial=0.0)) < 1e-13:
            converged = True
            break
    return theta, converged


def _bt_stats(
    theta: FloatArray,
    x: FloatArray,
    y: FloatArray,
    fl: FloatArray,
    xu: FloatArray,
    fu: FloatArray,
    w: FloatArray,
    wu: FloatArray,
    use_unlabelled: bool,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per-row gradients and the inverse Hessian at ``theta`` (``ppi_py._logistic_get_stats``)."""
    n, big_n = len(y), len(fu)
    mu = expit(x @ theta)
    mu_u = expit(xu @ theta)
    if use_unlabelled:
        hess = ((xu.T * (wu * mu_u * (1 - mu_u))) @ xu + (x.T * (w * mu * (1 - mu))) @ x) / (
            big_n + n
        )
    else:
        hess = (x.T * (w * mu * (1 - mu))) @ x / n
    grads = (w * (mu - y))[:, None] * x
    grads_hat = (w * (mu - fl))[:, None] * x
    grads_hat_u = (wu * (mu_u - fu))[:, None] * xu
    return grads, grads_hat, grads_hat_u, np.linalg.inv(hess)


def _glm_lambda(
    grads: FloatArray, grads_hat: FloatArray, grads_hat_u: FloatArray, inv_h: FloatArray
) -> float:
    """Power-tuned lambda for a GLM (``ppi_py._calc_lam_glm``, overall mode, clipped)."""
    n, big_n = len(grads), len(grads_hat_u)
    gc = grads - grads.mean(axis=0)
    ghc = grads_hat - grads_hat.mean(axis=0)
    cov = (gc.T @ ghc + ghc.T @ gc) / n
    both = np.concatenate([grads_hat, grads_hat_u], axis=0)
    var = np.atleast_2d(np.cov(both.T))
    num = float(np.trace(inv_h @ cov @ inv_h))
    den = 2.0 * (1.0 + n / big_n) * float(np.trace(inv_h @ var @ inv_h))
    if not (den > 0) or not math.isfinite(num):
        return 0.0
    return float(np.clip(num / den, 0.0, 1.0))


def ppi_bradley_terry(
    y: npt.ArrayLike,
    first_labelled: npt.ArrayLike,
    second_labelled: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    first_unlabelled: npt.ArrayLike,
    second_unlabelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    *,
    candidates: Sequence[int] | None = None,
    reference: int | None = None,
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
) -> BradleyTerry:
    """Bradley-Terry strengths with intervals, by PPI++ logistic regression.

    One row per comparison of candidate ``first`` with candidate ``second`` (integer codes).
    Labelled comparisons carry the human outcome ``y`` (1: first wins, 0: second wins, 0.5:
    tie) and the judge's ``f_labelled`` (its probability that first wins, or its verdict coded
    the same way); unlabelled ones the judge's ``f_unlabelled`` only. The model is a logistic
    regression without intercept on the design ``+1`` for first, ``-1`` for second, the
    ``reference`` candidate's column dropped (its strength fixed at 0; default: the smallest
    code). ``candidates``: every candidate code (default: those that appear).

    Computed as ``ppi_py.ppi_logistic_ci`` (weights rescaled to mean 1): with ``lam=None``,
    lambda is tuned at the ``lambda = 1`` fit, the model refitted, lambda tuned again at that
    fit and the model refitted once more; the interval is the sandwich normal interval at that
    last fit. ``lam=0`` gives the human-only fit. Raises ``ValueError`` when the comparisons do
    not connect every candidate (the strengths are then not identified).
    """
    level = _level(level)
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    a_l = _codes(first_labelled, "first_labelled")
    b_l = _codes(second_labelled, "second_labelled")
    a_u = _codes(first_unlabelled, "first_unlabelled")
    b_u = _codes(second_unlabelled, "second_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"), (a_l, "first_labelled"), (b_l, "second_labelled"))
    _same_length(
        (fu, "f_unlabelled"), (a_u, "first_unlabelled"), (b_u, "second_unlabelled")
    )
    if np.any(a_l == b_l) or np.any(a_u == b_u):
        raise ValueError("a comparison must be between two different candidates")
    n, big_n = len(yv), len(fu)
    if n < 2:
        raise ValueError("ppi_bradley_terry needs at least two human-labelled comparisons")
    seen = sorted(set(np.concatenate([a_l, b_l, a_u, b_u]).tolist()))
    cands = sorted(set(candidates)) if candidates is not None else seen
    if not set(seen) <= set(cands):
        raise ValueError("a comparison names a candidate outside candidates")
    ref = cands[0] if reference is None else int(reference)
    if ref not in cands:
        raise ValueError(f"reference {ref} is not among the candidates")
    free = tuple(c for c in cands if c != ref)
    col = {c: i for i, c in enumerate(free)}
    d = len(free)
    if d == 0:
        raise ValueError("ppi_bradley_terry needs at least two candidates")
    x = _design(a_l, b_l, col, d)
    xu = _design(a_u, b_u, col, d)
    wv = _weights(w, n, "w")
    wu = _weights(w_unlabelled, big_n, "w_unlabelled")
    warnings: list[str] = []

    def connected(use_unlabelled: bool) -> bool:
        xx = np.concatenate([x, xu]) if use_unlabelled else x
        return bool(np.linalg.matrix_rank(xx.T @ xx) == d)

    def fit(lam_: float) -> FloatArray:
        theta, ok = _bt_fit(lam_, x, yv, fl, xu, fu, wv, wu)
        if not ok:
            warnings.append(
                f"the fit at lambda={lam_:.4g} did not converge: a candidate may win or "
                "lose every comparison"
            )
        return theta

    if big_n == 0:
        lam_used = 0.0
        how = "no unlabelled comparisons: human labels only"
    elif lam is None:
        if not connected(True):
            raise ValueError("the comparisons do not connect every candidate")
        lam1 = _glm_lambda(*_bt_stats(fit(1.0), x, yv, fl, xu, fu, wv, wu, True))
        lam_used = _glm_lambda(*_bt_stats(fit(lam1), x, yv, fl, xu, fu, wv, wu, True))
        how = f"power-tuned lambda={lam_used:.4g}"
    else:
        lam_used = float(lam)
        if not (0.0 <= lam_used <= 1.0):
            raise ValueError(f"lam must be in [0, 1], got {lam!r}")
        how = f"fixed lambda={lam_used:.4g}"
    use_unlabelled = lam_used != 0 and big_n > 0
    if not connected(use_unlabelled):
        raise ValueError("the comparisons do not connect every candidate")
    theta = fit(lam_used)
    grads, grads_hat, grads_hat_u, inv_h = _bt_stats(
        theta, x, yv, fl, xu, fu, wv, wu, use_unlabelled
    )
    var = np.atleast_2d(np.cov((grads - lam_used * grads_hat).T))
    if big_n >= 2:
        var = var + n / big_n * np.atleast_2d(np.cov((lam_used * grads_hat_u).T))
    sigma = inv_h @ var @ inv_h / n
    method = f"Bradley-Terry by PPI++ logistic regression ({how}); normal interval"
    strengths: dict[int, PPIEstimate] = {
        ref: PPIEstimate(
            value=0.0,
            ci_low=None,
            ci_high=None,
            se=None,
            n_labelled=n,
            n_unlabelled=big_n,
            lam=lam_used,
            method="reference candidate (strength fixed at 0)",
            level=level,
        )
    }
    for c, i in col.items():
        strengths[c] = _estimate(
            float(theta[i]),
            math.sqrt(max(float(sigma[i, i]), 0.0)),
            n_labelled=n,
            n_unlabelled=big_n,
            lam=lam_used,
            method=method,
            level=level,
        )
    order = tuple(sorted(cands, key=lambda c: (-strengths[c].value, c)))
    return BradleyTerry(
        strengths=strengths,
        reference=ref,
        free=free,
        cov=tuple(tuple(float(v) for v in row) for row in sigma),
        lam=lam_used,
        order=order,
        n_labelled=n,
        n_unlabelled=big_n,
        level=level,
        method=method,
        warnings=tuple(dict.fromkeys(warnings)),
    )
