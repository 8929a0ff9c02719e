"""One set of outputs: human-only, judge-only and prediction-powered means (see `evalstats.ppi`)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from evalstats.ppi._common import (
    FloatArray,
    Interval,
    PPIEstimate,
    _check_interval,
    _estimate,
    _few_labels,
    _interval_text,
    _level,
    _same_length,
    _vec,
    _weights,
    _welch_df,
)

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


def _ppi_inputs(
    y: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    w: npt.ArrayLike | None,
    w_unlabelled: npt.ArrayLike | None,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """`ppi_mean`'s arrays checked: labels, judge scores on both sets, and both sets' weights."""
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"))
    if len(yv) == 0:
        raise ValueError("ppi_mean needs at least one human label")
    return yv, fl, fu, _weights(w, len(yv), "w"), _weights(w_unlabelled, len(fu), "w_unlabelled")


def _lambda_choice(
    lam: float | None,
    yv: FloatArray,
    fl: FloatArray,
    fu: FloatArray,
    wv: FloatArray,
    wu: FloatArray,
    warnings: list[str],
) -> tuple[float, str]:
    """PPI++'s lambda and how it was chosen: 0 without unlabelled outputs (a warning is
    appended), power-tuned when ``lam`` is None, else the caller's finite value."""
    if len(fu) == 0:
        warnings.append("no judge-only outputs: the estimate uses the human labels only")
        return 0.0, "no unlabelled outputs: human labels only"
    if lam is None:
        lam_used = _tuned_lambda(yv, fl, fu, wv, wu)
        return lam_used, f"power-tuned lambda={lam_used:.4g}"
    lam_used = float(lam)
    if not math.isfinite(lam_used):
        raise ValueError(f"lam must be finite, got {lam!r}")
    return lam_used, f"fixed lambda={lam_used:.4g}"


def _ppi_terms(
    yv: FloatArray,
    fl: FloatArray,
    fu: FloatArray,
    wv: FloatArray,
    wu: FloatArray,
    lam: float,
    ddof: int,
) -> tuple[float, float, float]:
    """The PPI++ point estimate and its two independent variance terms: the rectifier's
    (labelled outputs) and the imputed judge term's (unlabelled outputs)."""
    n, big_n = len(yv), len(fu)
    rect = wv * (yv - lam * fl)
    value = float(rect.mean())
    var_r = float(rect.var(ddof=ddof)) / n if n > ddof else 0.0
    var_i = 0.0
    if big_n:
        imputed = wu * (lam * fu)
        value += float(imputed.mean())
        var_i = float(imputed.var(ddof=ddof)) / big_n if big_n > ddof else 0.0
    return value, var_r, var_i


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
    yv, fl, fu, wv, wu = _ppi_inputs(y, f_labelled, f_unlabelled, w, w_unlabelled)
    n, big_n = len(yv), len(fu)
    weighted = ", weighted" if (w is not None or w_unlabelled is not None) else ""
    warnings = list(_few_labels(n))
    lam_used, how = _lambda_choice(lam, yv, fl, fu, wv, wu, warnings)
    ddof = 1 if interval == "t" else 0
    value, var_r, var_i = _ppi_terms(yv, fl, fu, wv, wu, lam_used, ddof)
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
