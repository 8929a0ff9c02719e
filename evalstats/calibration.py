"""Calibration of judge scores: maps from a judge's output to P(a human would pass it).

A judge's output (a pass probability, a confidence, an ordinal level, a continuous score or a
0/1 verdict) is mapped to the probability that the human consensus passes the subject. Four
maps (:data:`METHODS`), all fitted by weighted maximum likelihood or its monotone analogue so
that humans sampled with unequal inclusion probabilities are weighted back (``weights`` =
1 / inclusion probability):

* ``"isotonic"``: weighted isotonic regression of ``passed`` on ``score`` (scipy's
  ``isotonic_regression`` on the distinct scores, ties averaged with their weights), predicted
  by linear interpolation between the fitted points and clipped outside the fitted range:
  the predictions of scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``.
* ``"platt"``: logistic regression of ``passed`` on ``score`` (Platt 1999, without Platt's
  target smoothing), ``params["coef"] = (intercept, slope)``.
* ``"beta"``: beta calibration (Kull, Silva Filho & Flach 2017), logistic regression on
  ``[ln t, -ln(1 - t)]`` with ``params["coef"] = (c, a, b)``. Scores already in [0, 1] are
  used as ``t`` (clipped to [1e-6, 1 - 1e-6]); other scores (ordinal levels, continuous
  scores) are rescaled min-max to [0.01, 0.99] over the fitted range (``params["scale"] =
  (lo, hi, margin)``; scores outside the range are clipped to it). The paper's constraint
  a, b >= 0 is imposed as in the authors' ``betacal`` package: when the fitted a is negative
  the ``ln t`` feature is dropped and the model refitted (a = 0), otherwise when b is negative
  the other feature is dropped (b = 0); a remaining negative coefficient is dropped as well.
* ``"histogram"``: histogram binning (Zadrozny & Elkan 2001) on equal-mass bins of the
  fitted scores, ``round(n ** (1/3))`` bins of at least 10 rows (tied scores share a bin, so
  coarse ordinal levels get one bin each); a bin's value is its weighted pass share with one
  pseudo-observation at the overall pass share, ``(sum w y + p) / (sum w + 1)`` (weights
  rescaled to mean 1), so that a small bin never predicts exactly 0 or 1.

Every prediction is clipped to ``[EPS, 1 - EPS]``. With labels of one class only (or no
labels) every method returns the constant ``(sum w y + 0.5) / (sum w + 1)``. When the score
separates the classes perfectly the unpenalised logistic likelihood has no maximum; the
logistic fits then add a weak ridge penalty (lambda = 1 on the standardised coefficients) so
that the curve stays a steep but finite step.

:func:`calibration_select` chooses the method by K-fold cross-validated weighted log loss
(groups, e.g. items, kept in one fold) and refits it on all rows; :func:`calibration_hierarchical`
shrinks per-stratum curves toward the pooled one (empirical Bayes on the logit scale, see its
docstring); :func:`calibration_diagnostics` gives reliability bins, ECE, Brier score and its
Murphy decomposition, log loss and AUROC with item-clustered bootstrap intervals.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
from scipy.optimize import isotonic_regression
from scipy.special import expit, logit

from evalstats._data import small_n_warning
from evalstats.bootstrap import _interval, resample_counts
from evalstats.clustered import with_interval
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = [
    "EPS",
    "METHODS",
    "CalibrationCurve",
    "CalibrationDiagnostics",
    "CalibrationMethod",
    "CalibrationSelection",
    "HierarchicalCalibration",
    "ReliabilityBin",
    "StratumCalibration",
    "calibration_diagnostics",
    "calibration_fit",
    "calibration_hierarchical",
    "calibration_select",
    "confidence_of",
    "reliability_bins",
]

FloatArray = npt.NDArray[np.float64]
CalibrationMethod = Literal["isotonic", "platt", "beta", "histogram"]
METHODS: tuple[CalibrationMethod, ...] = ("isotonic", "platt", "beta", "histogram")

#: Predictions are clipped to [EPS, 1 - EPS]: a calibrated probability is never certain.
EPS = 1e-6
# Beta calibration: clip of scores already in [0, 1], and the margin of min-max rescaling.
_BETA_EPS = 1e-6
_BETA_MARGIN = 0.01
# Ridge used only when the unpenalised logistic likelihood has no maximum (separation).
_SEPARATION_RIDGE = 1.0
# Weak N(0, 5^2) prior on a stratum's logit offset: keeps it finite for one-class strata.
_OFFSET_PRIOR_VAR = 25.0
# AUROC intervals resample per-level tables; beyond this many distinct predictions the
# predictions are grouped into this many quantile levels for the interval (the point is exact).
_AUROC_MAX_LEVELS = 50
# Bootstrap resamples per block: bounds the B x clusters multiplicity matrix (~64 MB).
_BLOCK_ELEMENTS = 8_000_000

_STRATUM_KEYS = ("stratum_offset", "stratum_raw_offset", "stratum_raw_variance")


# --- input -----------------------------------------------------------------------------------


def _vector(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    return arr


def _prepare(
    score: npt.ArrayLike, passed: npt.ArrayLike, weights: npt.ArrayLike | None
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """(score, passed, weights, keep) of the same length; keep = both score and label known."""
    s = _vector(score, "score")
    y = _vector(passed, "passed")
    if s.shape != y.shape:
        raise ValueError(f"score and passed differ in length ({s.size} vs {y.size})")
    keep = np.isfinite(s) & np.isfinite(y)
    if not np.isin(y[keep], (0.0, 1.0)).all():
        raise ValueError("passed must be 0/1 (NaN for missing)")
    if weights is None:
        w = np.ones_like(s)
    else:
        w = _vector(weights, "weights")
        if w.shape != s.shape:
            raise ValueError("weights must have one entry per row")
        if not (np.isfinite(w[keep]).all() and (w[keep] >= 0).all()):
            raise ValueError("weights must be finite and non-negative")
    return s, y, w, keep


def _clip(p: FloatArray) -> FloatArray:
    return np.asarray(np.clip(p, EPS, 1.0 - EPS), dtype=np.float64)


def _log_loss_rows(y: FloatArray, p: FloatArray) -> FloatArray:
    p = _clip(p)
    return np.asarray(-(y * np.log(p) + (1.0 - y) * np.log1p(-p)), dtype=np.float64)


def _json_value(x: Any) -> Any:
    """Plain JSON types: numpy scalars to Python, NaN / inf to None, tuples to lists."""
    if isinstance(x, Mapping):
        return {str(k): _json_value(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_json_value(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _estimate_json(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return cast(dict[str, Any], _json_value(dataclasses.asdict(e)))


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float("nan") if v is None else float(v) for v in values)


# --- logistic regression ---------------------------------------------------------------------


def _logistic(
    x: FloatArray, y: FloatArray, w: FloatArray, *, ridge: float = 0.0
) -> tuple[float, FloatArray, bool]:
    """Weighted logistic MLE by Newton's method: (intercept, coefficients, converged).

    Features are standardised for the iterations (coefficients returned on the original
    scale); a feature without variance gets coefficient 0 (it is absorbed by the intercept).
    """
    n, k = x.shape
    wsum = w.sum()
    mu = (w[:, None] * x).sum(axis=0) / wsum
    sd = np.sqrt((w[:, None] * (x - mu) ** 2).sum(axis=0) / wsum)
    active = sd > 1e-12 * np.maximum(1.0, np.abs(mu))
    z = (x[:, active] - mu[active]) / sd[active]
    a = np.column_stack([np.ones(n), z])
    ybar = float(np.clip((w * y).sum() / wsum, EPS, 1 - EPS))
    beta = np.zeros(a.shape[1])
    beta[0] = math.log(ybar / (1 - ybar))
    lam = np.full(a.shape[1], ridge)
    lam[0] = 0.0

    def objective(b: FloatArray) -> float:
        eta = a @ b
        return float((w * (np.logaddexp(0.0, eta) - y * eta)).sum() + 0.5 * (lam * b * b).sum())

    f = objective(beta)
    converged = False
    for _ in range(200):
        p = expit(a @ beta)
        grad = a.T @ (w * (p - y)) + lam * beta
        if np.abs(grad).max() <= 1e-11 * max(wsum, 1.0):
            converged = True
            break
        hess = (a * (w * p * (1 - p))[:, None]).T @ a + np.diag(lam)
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        t = 1.0
        while True:
            cand = beta - t * step
            fc = objective(cand)
            if fc <= f + 1e-13 * abs(f) or t < 1e-12:
                break
            t *= 0.5
        moved = np.abs(cand - beta).max()
        beta, f = cand, fc
        if moved < 1e-13:
            converged = True
            break
        if np.abs(beta[1:]).max(initial=0.0) > 60.0:  # diverging: the classes are separated
            break
    coef = np.zeros(k)
    coef[active] = beta[1:] / sd[active]
    intercept = float(beta[0] - (beta[1:] * mu[active] / sd[active]).sum())
    return intercept, coef, converged


def _logistic_safe(x: FloatArray, y: FloatArray, w: FloatArray) -> tuple[float, FloatArray]:
    """Unpenalised MLE, or the weakly penalised fit when the MLE does not exist."""
    intercept, coef, ok = _logistic(x, y, w)
    if not ok or not np.isfinite(coef).all():
        intercept, coef, _ = _logistic(x, y, w, ridge=_SEPARATION_RIDGE)
    return intercept, coef


# --- curves ----------------------------------------------------------------------------------


def _beta_features(score: FloatArray, scale: tuple[float, ...]) -> FloatArray:
    lo, hi, margin = scale
    t = (score - lo) / (hi - lo)
    t = margin + (1.0 - 2.0 * margin) * t
    edge = max(margin, _BETA_EPS)
    t = np.clip(t, edge, 1.0 - edge)
    return np.column_stack([np.log(t), -np.log1p(-t)])


def _histogram_bins(score: FloatArray, edges: FloatArray) -> npt.NDArray[np.intp]:
    # Bins are (e_{k-1}, e_k]: the convention of sklearn.calibration.calibration_curve.
    return np.searchsorted(edges, score, side="left")


@dataclass(frozen=True, kw_only=True)
class CalibrationCurve:
    """A fitted map from judge score to P(human pass); see the module docstring per method.

    ``params``: isotonic ``{"x", "y"}`` (fitted points), platt ``{"coef": (intercept,
    slope)}``, beta ``{"coef": (c, a, b), "scale": (lo, hi, margin)}``, histogram
    ``{"edges": interior bin edges, "values": one per bin}``. ``n``: labelled rows fitted on.
    """

    method: CalibrationMethod
    params: dict[str, tuple[float, ...]]
    n: int

    def predict(self, score: npt.ArrayLike) -> FloatArray:
        """P(pass) for each score, clipped to [EPS, 1 - EPS]; NaN where the score is NaN."""
        s = np.atleast_1d(np.asarray(score, dtype=np.float64))
        out = np.full(s.shape, np.nan)
        ok = np.isfinite(s)
        v = s[ok]
        m = self.method
        if m == "isotonic":
            p = np.interp(v, np.asarray(self.params["x"]), np.asarray(self.params["y"]))
        elif m == "platt":
            c0, c1 = self.params["coef"]
            p = expit(c0 + c1 * v)
        elif m == "beta":
            c, a, b = self.params["coef"]
            feats = _beta_features(v, self.params["scale"])
            p = expit(c + a * feats[:, 0] + b * feats[:, 1])
        elif m == "histogram":
            edges = np.asarray(self.params["edges"], dtype=np.float64)
            values = np.asarray(self.params["values"], dtype=np.float64)
            p = values[_histogram_bins(v, edges)]
        else:
            raise ValueError(f"unknown calibration method {m!r}")
        out[ok] = _clip(np.asarray(p, dtype=np.float64))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "params": {k: _json_value(v) for k, v in self.params.items()},
            "n": int(self.n),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CalibrationCurve:
        method = d["method"]
        if method not in METHODS:
            raise ValueError(f"unknown calibration method {method!r}")
        return cls(
            method=method,
            params={str(k): _floats(v) for k, v in d["params"].items()},
            n=int(d["n"]),
        )


def _constant_curve(
    method: CalibrationMethod, value: float, n: int, s: FloatArray
) -> CalibrationCurve:
    """The curve of ``method`` that predicts ``value`` everywhere."""
    v = float(np.clip(value, EPS, 1 - EPS))
    z = math.log(v / (1 - v))
    if method == "isotonic":
        x0 = float(s[0]) if s.size else 0.0
        params: dict[str, tuple[float, ...]] = {"x": (x0,), "y": (v,)}
    elif method == "platt":
        params = {"coef": (z, 0.0)}
    elif method == "beta":
        params = {"coef": (z, 0.0, 0.0), "scale": (0.0, 1.0, 0.0)}
    else:
        params = {"edges": (), "values": (v,)}
    return CalibrationCurve(method=method, params=params, n=n)


def _fit_isotonic(s: FloatArray, y: FloatArray, w: FloatArray) -> dict[str, tuple[float, ...]]:
    xu, inv = np.unique(s, return_inverse=True)
    wu = np.bincount(inv, weights=w, minlength=xu.size)
    yu = np.bincount(inv, weights=w * y, minlength=xu.size) / wu
    fitted = np.asarray(isotonic_regression(yu, weights=wu, increasing=True).x)
    # Interior points of a constant run do not change the interpolation (sklearn drops them too).
    keep = np.ones(xu.size, dtype=bool)
    if xu.size > 2:
        keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return {"x": tuple(map(float, xu[keep])), "y": tuple(map(float, fitted[keep]))}


def _fit_platt(s: FloatArray, y: FloatArray, w: FloatArray) -> dict[str, tuple[float, ...]]:
    intercept, coef = _logistic_safe(s[:, None], y, w)
    return {"coef": (intercept, float(coef[0]))}


def _fit_beta(s: FloatArray, y: FloatArray, w: FloatArray) -> dict[str, tuple[float, ...]]:
    lo, hi = float(s.min()), float(s.max())
    scale = (0.0, 1.0, 0.0) if lo >= 0.0 and hi <= 1.0 else (lo, hi, _BETA_MARGIN)
    x = _beta_features(s, scale)
    cols = [0, 1]
    while True:
        intercept, coef = _logistic_safe(x[:, cols], y, w)
        negative = [c for c, v in zip(cols, coef, strict=True) if v < 0]
        if not negative:
            break
        # betacal's rule: drop the ln t feature first when a < 0, otherwise the other one.
        cols = [c for c in cols if c != negative[0]]
        if not cols:
            intercept, coef = _logistic_safe(np.zeros((s.size, 0)), y, w)
            break
    full = [0.0, 0.0]
    for c, v in zip(cols, coef, strict=True):
        full[c] = float(v)
    return {"coef": (intercept, full[0], full[1]), "scale": scale}


def _fit_histogram(s: FloatArray, y: FloatArray, w: FloatArray) -> dict[str, tuple[float, ...]]:
    # About n^(1/3) bins (the bias-variance balance of a histogram), at least 10 rows each.
    n_bins = max(1, min(s.size // 10, round(s.size ** (1 / 3))))
    # Edge k is the ceil(k n / n_bins)-th smallest score (integer arithmetic: no rounding).
    k = np.arange(1, n_bins)
    edges = np.unique(np.sort(s)[(k * s.size + n_bins - 1) // n_bins - 1])
    edges = edges[edges < s.max()]  # an edge at the maximum would leave the top bin empty
    bins = _histogram_bins(s, edges)
    prior = float((w * y).sum() / w.sum())
    sw = np.bincount(bins, weights=w, minlength=edges.size + 1)
    sy = np.bincount(bins, weights=w * y, minlength=edges.size + 1)
    values = (sy + prior) / (sw + 1.0)
    return {"edges": tuple(map(float, edges)), "values": tuple(map(float, values))}


def calibration_fit(
    score: npt.ArrayLike,
    passed: npt.ArrayLike,
    *,
    method: CalibrationMethod,
    weights: npt.ArrayLike | None = None,
) -> CalibrationCurve:
    """Fit one calibration map of ``method`` (see the module docstring) to labelled rows.

    ``score``: the judge's output as a number (P(pass), an ordinal level, a continuous score or
    a 0/1 verdict); ``passed``: the human consensus, 0/1; ``weights``: e.g. 1 / inclusion
    probability. Rows with a NaN score or label, or weight 0, are left out; ``n`` counts the
    rows used. Never raises for small data: without both classes the curve is a constant.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    s_all, y_all, w_all, keep = _prepare(score, passed, weights)
    use = keep & (w_all > 0)
    s, y, w = s_all[use], y_all[use], w_all[use]
    n = int(s.size)
    if n:
        w = w * (n / w.sum())  # mean 1: the prior pseudo-counts are in units of observations
    pos = float((w * y).sum())
    if n == 0 or pos <= 0.0 or pos >= float(w.sum()):
        value = (pos + 0.5) / (float(w.sum()) + 1.0)
        return _constant_curve(method, value, n, np.sort(s))
    if method == "isotonic":
        params = _fit_isotonic(s, y, w)
    elif method == "platt":
        params = _fit_platt(s, y, w)
    elif method == "beta":
        params = _fit_beta(s, y, w)
    else:
        params = _fit_histogram(s, y, w)
    return CalibrationCurve(method=method, params=params, n=n)


# --- selection by cross-validation -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CalibrationSelection:
    """The method chosen by cross-validated log loss, refitted on all rows.

    ``cv_log_loss``: method -> weighted mean held-out log loss (empty when too few rows for
    cross-validation). ``heldout``: out-of-fold P(pass) of the chosen method in input order
    (NaN for rows without score or label). ``folds``: folds used (0: no cross-validation).
    """

    method: CalibrationMethod
    curve: CalibrationCurve
    cv_log_loss: dict[str, float]
    heldout: FloatArray = field(repr=False)
    folds: int
    n: int
    warnings: tuple[str, ...] = ()

    def to_json(self, *, include_heldout: bool = False) -> dict[str, Any]:
        """Plain JSON; the per-row held-out predictions only with ``include_heldout``."""
        out: dict[str, Any] = {
            "method": self.method,
            "curve": self.curve.to_json(),
            "cv_log_loss": _json_value(self.cv_log_loss),
            "folds": int(self.folds),
            "n": int(self.n),
            "warnings": list(self.warnings),
        }
        if include_heldout:
            out["heldout"] = _json_value(self.heldout)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CalibrationSelection:
        heldout = np.asarray(_floats(d.get("heldout", ())), dtype=np.float64)
        return cls(
            method=d["method"],
            curve=CalibrationCurve.from_json(d["curve"]),
            cv_log_loss={
                str(k): float("nan") if v is None else float(v) for k, v in d["cv_log_loss"].items()
            },
            heldout=heldout,
            folds=int(d["folds"]),
            n=int(d["n"]),
            warnings=tuple(d.get("warnings", ())),
        )


def _group_codes(groups: npt.ArrayLike | None, size: int) -> npt.NDArray[np.intp]:
    if groups is None:
        return np.arange(size)
    g = np.asarray(groups)
    if g.shape[0] != size:
        raise ValueError("groups must have one entry per row")
    return np.asarray(np.unique(g.astype(str) if g.dtype == object else g, return_inverse=True)[1])


def _fold_of_rows(
    codes: npt.NDArray[np.intp], folds: int, rng: np.random.Generator
) -> npt.NDArray[np.intp]:
    """Fold of each row: groups shuffled by ``rng`` and dealt round-robin to the folds."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    fold_of_group = np.empty(uniq.size, dtype=np.intp)
    fold_of_group[rng.permutation(uniq.size)] = np.arange(uniq.size) % folds
    return fold_of_group[inverse]


def _too_few(y: FloatArray, w: FloatArray, codes: npt.NDArray[np.intp], folds: int) -> str | None:
    n = y.size
    pos = float((w * y).sum())
    if n < 2 * folds:
        return f"too few labelled rows for {folds}-fold selection ({n} < {2 * folds})"
    if pos <= 0 or pos >= float(w.sum()):
        return "labels of one class only"
    if np.unique(codes).size < 2:
        return "fewer than two groups: no held-out fold"
    return None


def _leave_group_out_constant(
    y: FloatArray, w: FloatArray, codes: npt.NDArray[np.intp]
) -> FloatArray:
    """Held-out constant P(pass) of each row: the pass share of the other groups (+ prior)."""
    wn = w * (y.size / w.sum()) if w.sum() > 0 else w
    tot_w, tot_y = wn.sum(), (wn * y).sum()
    gw = np.bincount(codes, weights=wn)
    gy = np.bincount(codes, weights=wn * y)
    return _clip((tot_y - gy[codes] + 0.5) / (tot_w - gw[codes] + 1.0))


def _select_kept(
    s: FloatArray,
    y: FloatArray,
    w: FloatArray,
    codes: npt.NDArray[np.intp],
    *,
    methods: Sequence[CalibrationMethod],
    folds: int,
    rng: np.random.Generator,
) -> tuple[CalibrationMethod, CalibrationCurve, dict[str, float], FloatArray, int, list[str]]:
    warnings: list[str] = []
    reason = _too_few(y, w, codes, folds)
    if reason is not None:
        pos, tot = float((w * y).sum()), float(w.sum())
        wn = y.size / tot if tot > 0 else 1.0
        value = (pos * wn + 0.5) / (tot * wn + 1.0)
        curve = _constant_curve("histogram", value, int(y.size), np.sort(s))
        warnings.append(f"{reason}: a constant P(pass) = {value:.3f} is used, not a fitted curve")
        return "histogram", curve, {}, _leave_group_out_constant(y, w, codes), 0, warnings
    k = min(folds, int(np.unique(codes).size))
    if k < folds:
        warnings.append(f"only {k} groups: {k}-fold cross-validation instead of {folds}")
    fold = _fold_of_rows(codes, k, rng)
    oof: dict[str, FloatArray] = {}
    losses: dict[str, float] = {}
    wsum = float(w.sum())
    for method in methods:
        pred = np.empty(y.size)
        for f in range(k):
            test = fold == f
            curve = calibration_fit(s[~test], y[~test], method=method, weights=w[~test])
            pred[test] = curve.predict(s[test])
        oof[method] = pred
        losses[method] = float((w * _log_loss_rows(y, pred)).sum() / wsum)
    best = min(methods, key=lambda m: losses[m])  # ties: the earlier method in ``methods``
    curve = calibration_fit(s, y, method=best, weights=w)
    return best, curve, losses, oof[best], k, warnings


def calibration_select(
    score: npt.ArrayLike,
    passed: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    groups: npt.ArrayLike | None = None,
    methods: Sequence[CalibrationMethod] = METHODS,
    folds: int = 5,
    rng: np.random.Generator,
) -> CalibrationSelection:
    """Choose the calibration method by K-fold cross-validated weighted log loss.

    Groups (``groups``, e.g. item ids; default: every row its own group) are shuffled with
    ``rng`` and dealt to ``folds`` folds, so that all rows of a group are held out together;
    each method is fitted on the other folds and scored by the weighted mean log loss of its
    held-out predictions. The method with the lowest loss is refitted on all rows. Rows with
    a NaN score or label are left out (their ``heldout`` is NaN).

    Never raises for small data: with fewer than ``2 * folds`` labelled rows, labels of one
    class only, or a single group, the curve is the constant ``(sum w y + 0.5) / (sum w + 1)``
    (method ``"histogram"`` with one bin, ``folds == 0``) with a warning, and ``heldout`` is
    the same constant computed without each row's own group.
    """
    if not methods:
        raise ValueError("methods must name at least one calibration method")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown calibration method {m!r}")
    if folds < 2:
        raise ValueError("folds must be at least 2")
    s_all, y_all, w_all, keep = _prepare(score, passed, weights)
    codes = _group_codes(groups, s_all.size)[keep]
    method, curve, losses, oof, k, warnings = _select_kept(
        s_all[keep], y_all[keep], w_all[keep], codes, methods=methods, folds=folds, rng=rng
    )
    heldout = np.full(s_all.size, np.nan)
    heldout[keep] = oof
    return CalibrationSelection(
        method=method,
        curve=curve,
        cv_log_loss=losses,
        heldout=heldout,
        folds=k,
        n=int(keep.sum()),
        warnings=tuple(warnings),
    )


# --- hierarchical shrinkage toward the pooled curve ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StratumCalibration:
    """One stratum's curve: the pooled curve shifted by the shrunk logit offset.

    ``params`` are the pooled curve's plus ``stratum_offset`` (the applied, shrunk offset),
    and, for strata with enough labels, ``stratum_raw_offset`` / ``stratum_raw_variance``
    (the stratum's own estimate and its variance). ``own_weight`` = share of the stratum's own
    estimate, ``borrowed`` = 1 - own_weight; ``pooled_only``: too few labels (below
    ``min_labels``, or none), the pooled curve is used unchanged.
    """

    label: str
    n: int
    own_weight: float
    borrowed: float
    pooled_only: bool
    method: str
    params: dict[str, tuple[float, ...]]

    def predict(self, score: npt.ArrayLike) -> FloatArray:
        """P(pass) of this stratum for each score, clipped to [EPS, 1 - EPS]."""
        base = CalibrationCurve(
            method=cast(CalibrationMethod, self.method),
            params={k: v for k, v in self.params.items() if k not in _STRATUM_KEYS},
            n=self.n,
        ).predict(score)
        offset = self.params.get("stratum_offset", (0.0,))[0]
        if offset == 0.0:
            return base
        return _clip(expit(logit(base) + offset))

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "n": int(self.n),
            "own_weight": _json_value(self.own_weight),
            "borrowed": _json_value(self.borrowed),
            "pooled_only": bool(self.pooled_only),
            "method": self.method,
            "params": {k: _json_value(v) for k, v in self.params.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StratumCalibration:
        return cls(
            label=str(d["label"]),
            n=int(d["n"]),
            own_weight=float(d["own_weight"]),
            borrowed=float(d["borrowed"]),
            pooled_only=bool(d["pooled_only"]),
            method=str(d["method"]),
            params={str(k): _floats(v) for k, v in d["params"].items()},
        )


@dataclass(frozen=True, kw_only=True)
class HierarchicalCalibration:
    """Pooled curve, per-stratum shrunk curves, the between-strata variance ``tau2``.

    ``heldout()`` returns the cross-fitted predictions computed at fit time (not stored by
    ``to_json``: after ``from_json`` it raises).
    """

    pooled: CalibrationSelection
    strata: dict[str, StratumCalibration]
    tau2: float
    warnings: tuple[str, ...] = ()
    heldout_p: FloatArray | None = field(default=None, repr=False)

    def predict(
        self, score: npt.ArrayLike, strata_labels: Sequence[str] | npt.ArrayLike
    ) -> FloatArray:
        """P(pass) of each row by its stratum's curve (the pooled curve for unknown labels)."""
        s = np.atleast_1d(np.asarray(score, dtype=np.float64))
        labels = np.asarray(strata_labels, dtype=object).astype(str)
        if labels.shape != s.shape:
            raise ValueError("score and strata_labels differ in length")
        out = self.pooled.curve.predict(s)
        for label in np.unique(labels):
            st = self.strata.get(str(label))
            if st is not None and not st.pooled_only:
                rows = labels == label
                out[rows] = st.predict(s[rows])
        return out

    def heldout(self) -> FloatArray:
        """Out-of-fold P(pass) of the whole procedure (pooled selection and shrinkage refitted
        without each fold), input order; NaN for rows without score or label."""
        if self.heldout_p is None:
            raise ValueError("held-out predictions are computed at fit time and not stored")
        return np.array(self.heldout_p, copy=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "pooled": self.pooled.to_json(),
            "strata": {k: v.to_json() for k, v in self.strata.items()},
            "tau2": _json_value(self.tau2),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HierarchicalCalibration:
        return cls(
            pooled=CalibrationSelection.from_json(d["pooled"]),
            strata={str(k): StratumCalibration.from_json(v) for k, v in d["strata"].items()},
            tau2=float("nan") if d["tau2"] is None else float(d["tau2"]),
            warnings=tuple(d.get("warnings", ())),
        )


def _offset_fit(z: FloatArray, y: FloatArray, w: FloatArray) -> tuple[float, float]:
    """MAP logit offset a of ``logit P = z + a`` under the weak prior, and its variance.

    Weights are rescaled to the stratum's Kish effective sample size, so that unequal
    inclusion weights widen the variance instead of being taken as extra observations.
    """
    n_eff = w.sum() ** 2 / (w * w).sum()
    wk = w * (n_eff / w.sum())
    a = 0.0
    info = 0.0
    for _ in range(100):
        p = expit(z + a)
        grad = float((wk * (y - p)).sum()) - a / _OFFSET_PRIOR_VAR
        info = float((wk * p * (1 - p)).sum()) + 1.0 / _OFFSET_PRIOR_VAR
        step = grad / info
        a += step
        if abs(step) < 1e-12:
            break
    p = expit(z + a)
    info = float((wk * p * (1 - p)).sum()) + 1.0 / _OFFSET_PRIOR_VAR
    return a, 1.0 / info


@dataclass(frozen=True)
class _HierFit:
    selection: tuple[CalibrationMethod, CalibrationCurve, dict[str, float], FloatArray, int]
    offsets: dict[str, tuple[float, float, float]]  # label -> (raw offset, variance, own weight)
    tau2: float
    warnings: list[str]


def _fit_hier(
    s: FloatArray,
    y: FloatArray,
    w: FloatArray,
    codes: npt.NDArray[np.intp],
    labels: npt.NDArray[Any],
    *,
    methods: Sequence[CalibrationMethod],
    folds: int,
    min_labels: int,
    rng: np.random.Generator,
) -> _HierFit:
    method, curve, losses, oof, k, warnings = _select_kept(
        s, y, w, codes, methods=methods, folds=folds, rng=rng
    )
    # Offsets are measured against the pooled model's out-of-fold predictions: in-sample
    # predictions of a flexible curve (isotonic) would already contain each stratum's deviation.
    z = logit(_clip(oof))
    raw: dict[str, tuple[float, float]] = {}
    for label in np.unique(labels):
        rows = (labels == label) & (w > 0)
        if int(rows.sum()) >= min_labels and rows.any():
            raw[str(label)] = _offset_fit(z[rows], y[rows], w[rows])
    tau2 = 0.0
    if raw:
        a = np.array([v[0] for v in raw.values()])
        prec = 1.0 / np.array([v[1] for v in raw.values()])
        # Method of moments with the mean fixed at 0 (offsets are deviations from the pooled
        # curve): E[sum prec * a^2] = k + tau2 * sum prec (DerSimonian-Laird with known mean).
        tau2 = max(0.0, float((prec * a * a).sum() - a.size) / float(prec.sum()))
        if a.size < 3:
            warnings.append(
                f"between-strata variance estimated from {a.size} stratum/strata: unstable"
            )
    offsets = {lab: (a_s, v_s, tau2 / (tau2 + v_s)) for lab, (a_s, v_s) in raw.items()}
    return _HierFit((method, curve, losses, oof, k), offsets, tau2, warnings)


def _predict_fit(fit: _HierFit, s: FloatArray, labels: npt.NDArray[Any]) -> FloatArray:
    p = fit.selection[1].predict(s)
    shift = np.zeros(s.size)
    for label, (a_s, _, own) in fit.offsets.items():
        shift[labels == label] = own * a_s
    moved = shift != 0.0
    p[moved] = _clip(expit(logit(p[moved]) + shift[moved]))
    return p


def calibration_hierarchical(
    score: npt.ArrayLike,
    passed: npt.ArrayLike,
    strata: Sequence[str] | npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    groups: npt.ArrayLike | None = None,
    methods: Sequence[CalibrationMethod] = METHODS,
    folds: int = 5,
    min_labels: int = 10,
    rng: np.random.Generator,
    all_strata: Sequence[str] = (),
) -> HierarchicalCalibration:
    """Per-stratum calibration that borrows strength from the whole study.

    Model: a pooled curve f is chosen and fitted on all rows (:func:`calibration_select`).
    Stratum s has its own logit offset, ``logit P(pass | score, s) = logit f(score) + a_s``
    with ``a_s ~ N(0, tau2)`` across strata. For each stratum with at least ``min_labels``
    labelled rows, a_s is estimated by (weakly penalised) weighted maximum likelihood against
    the pooled model's out-of-fold logits, with variance v_s from the Fisher information
    (weights rescaled to the stratum's effective sample size); tau2 is the method-of-moments
    (DerSimonian-Laird) estimate with the mean fixed at 0, ``max(0, (sum a_s^2 / v_s - k) /
    sum 1 / v_s)``. The stratum's curve applies the empirical-Bayes posterior mean
    ``own_weight * a_s`` with ``own_weight = tau2 / (tau2 + v_s)``; ``borrowed = 1 -
    own_weight``. Only the offset is stratum-specific; the shape of the curve is the pooled one.

    Strata with fewer than ``min_labels`` labelled rows, or none (labels in ``all_strata``
    without rows), get the pooled curve: ``pooled_only=True``, ``own_weight=0``. ``heldout()``
    gives cross-fitted predictions: the procedure (the pooled curve with its own inner
    out-of-fold logits, the offsets, tau2) refitted without each of ``folds`` group-kept folds
    and applied to it. The outer refits keep the method selected on all rows rather than
    re-running the choice among ``methods`` (which would multiply the cost by their number);
    the choice of one of a few methods by cross-validation adds little optimism.
    """
    if min_labels < 1:
        raise ValueError("min_labels must be at least 1")
    s_all, y_all, w_all, keep = _prepare(score, passed, weights)
    labels_all = np.asarray(strata, dtype=object).astype(str)
    if labels_all.shape != s_all.shape:
        raise ValueError("strata must have one label per row")
    codes_all = _group_codes(groups, s_all.size)
    s, y, w = s_all[keep], y_all[keep], w_all[keep]
    codes, labels = codes_all[keep], labels_all[keep]
    fit_rng, fold_rng, outer_rng = rng.spawn(3)
    fit = _fit_hier(
        s, y, w, codes, labels, methods=methods, folds=folds, min_labels=min_labels, rng=fit_rng
    )
    method, curve, losses, oof, k = fit.selection
    pooled_heldout = np.full(s_all.size, np.nan)
    pooled_heldout[keep] = oof
    pooled = CalibrationSelection(
        method=method,
        curve=curve,
        cv_log_loss=losses,
        heldout=pooled_heldout,
        folds=k,
        n=int(keep.sum()),
        warnings=tuple(fit.warnings),
    )
    # Cross-fitting of the whole procedure.
    heldout = np.full(s_all.size, np.nan)
    if k == 0:
        heldout[keep] = oof  # too few rows: the leave-group-out constant
    else:
        k_outer = min(folds, int(np.unique(codes).size))
        fold = _fold_of_rows(codes, k_outer, fold_rng)
        kept_pred = np.empty(s.size)
        for f, child in zip(range(k_outer), outer_rng.spawn(k_outer), strict=True):
            test = fold == f
            inner = _fit_hier(
                s[~test],
                y[~test],
                w[~test],
                codes[~test],
                labels[~test],
                methods=(method,),
                folds=folds,
                min_labels=min_labels,
                rng=child,
            )
            kept_pred[test] = _predict_fit(inner, s[test], labels[test])
        heldout[keep] = kept_pred
    out: dict[str, StratumCalibration] = {}
    names = sorted(set(labels_all.tolist()) | {str(x) for x in all_strata})
    for label in names:
        n_s = int(((labels == label) & (w > 0)).sum())
        if label in fit.offsets:
            a_s, v_s, own = fit.offsets[label]
            params = {
                **curve.params,
                "stratum_offset": (own * a_s,),
                "stratum_raw_offset": (a_s,),
                "stratum_raw_variance": (v_s,),
            }
            out[label] = StratumCalibration(
                label=label,
                n=n_s,
                own_weight=own,
                borrowed=1.0 - own,
                pooled_only=False,
                method=method,
                params=params,
            )
        else:
            out[label] = StratumCalibration(
                label=label,
                n=n_s,
                own_weight=0.0,
                borrowed=1.0,
                pooled_only=True,
                method=method,
                params={**curve.params, "stratum_offset": (0.0,)},
            )
    return HierarchicalCalibration(
        pooled=pooled,
        strata=out,
        tau2=fit.tau2,
        warnings=tuple(fit.warnings),
        heldout_p=heldout,
    )


# --- diagnostics -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReliabilityBin:
    """One bin of a reliability diagram: rows with predictions in (lower, upper] (the first
    bin also holds ``lower``); ``weight`` = summed weights, means are weighted."""

    lower: float
    upper: float
    count: int
    weight: float
    mean_predicted: float
    fraction_pass: float

    def to_json(self) -> dict[str, Any]:
        return cast(dict[str, Any], _json_value(dataclasses.asdict(self)))


@dataclass(frozen=True, kw_only=True)
class CalibrationDiagnostics:
    """How well probabilities match human pass rates (see :func:`calibration_diagnostics`)."""

    bins: tuple[ReliabilityBin, ...]
    ece: Estimate
    ece_mass: Estimate
    brier: Estimate
    brier_reliability: float
    brier_resolution: float
    brier_uncertainty: float
    log_loss: Estimate
    auroc: Estimate | None
    n: int
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "bins": [b.to_json() for b in self.bins],
            "ece": _estimate_json(self.ece),
            "ece_mass": _estimate_json(self.ece_mass),
            "brier": _estimate_json(self.brier),
            "brier_reliability": _json_value(self.brier_reliability),
            "brier_resolution": _json_value(self.brier_resolution),
            "brier_uncertainty": _json_value(self.brier_uncertainty),
            "log_loss": _estimate_json(self.log_loss),
            "auroc": _estimate_json(self.auroc),
            "n": int(self.n),
            "warnings": list(self.warnings),
        }


def _bin_edges(prob: FloatArray, n_bins: int, strategy: str) -> FloatArray:
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        return np.asarray(np.percentile(prob, np.linspace(0.0, 1.0, n_bins + 1) * 100))
    raise ValueError("strategy must be 'uniform' or 'quantile'")


def _bin_ids(prob: FloatArray, edges: FloatArray) -> npt.NDArray[np.intp]:
    return np.searchsorted(edges[1:-1], prob)  # sklearn's calibration_curve convention


def _bins_of(
    y: FloatArray, p: FloatArray, w: FloatArray, edges: FloatArray
) -> tuple[ReliabilityBin, ...]:
    n_bins = edges.size - 1
    ids = _bin_ids(p, edges)
    count = np.bincount(ids, minlength=n_bins)
    sw = np.bincount(ids, weights=w, minlength=n_bins)
    swp = np.bincount(ids, weights=w * p, minlength=n_bins)
    swy = np.bincount(ids, weights=w * y, minlength=n_bins)
    out = []
    for b in np.flatnonzero(count):
        mean_p = float(swp[b] / sw[b]) if sw[b] > 0 else float("nan")
        frac = float(swy[b] / sw[b]) if sw[b] > 0 else float("nan")
        out.append(
            ReliabilityBin(
                lower=float(edges[b]),
                upper=float(edges[b + 1]),
                count=int(count[b]),
                weight=float(sw[b]),
                mean_predicted=mean_p,
                fraction_pass=frac,
            )
        )
    return tuple(out)


def _prepare_probs(
    passed: npt.ArrayLike, prob: npt.ArrayLike, weights: npt.ArrayLike | None
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    p, y, w, keep = _prepare(prob, passed, weights)
    if ((p[keep] < 0) | (p[keep] > 1)).any():
        raise ValueError("probabilities must lie in [0, 1]")
    return y, p, w, keep


def reliability_bins(
    passed: npt.ArrayLike,
    prob: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    n_bins: int = 10,
    strategy: Literal["uniform", "quantile"] = "uniform",
) -> tuple[ReliabilityBin, ...]:
    """Reliability-diagram bins, empty bins omitted.

    ``"uniform"``: n_bins equal-width bins of [0, 1]; ``"quantile"``: edges at the
    (unweighted) quantiles of ``prob``. Bin membership and unweighted means are those of
    ``sklearn.calibration.calibration_curve``; with ``weights`` the means are weighted.
    """
    y, p, w, keep = _prepare_probs(passed, prob, weights)
    y, p, w = y[keep], p[keep], w[keep]
    if p.size == 0:
        return ()
    return _bins_of(y, p, w, _bin_edges(p, n_bins, strategy))


def _ece_fn(n_bins: int) -> Any:
    def fn(t: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(np.abs(t[..., 1:]).sum(axis=-1) / t[..., 0], dtype=np.float64)

    return fn


def _ratio(t: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(t[..., 1] / t[..., 0], dtype=np.float64)


def _auroc_from_tables(t: FloatArray) -> FloatArray:
    """AUROC from per-level weighted counts [pos_1..pos_L, neg_1..neg_L] (levels ascending)."""
    half = t.shape[-1] // 2
    pos, neg = t[..., :half], t[..., half:]
    below = np.cumsum(neg, axis=-1) - neg
    with np.errstate(divide="ignore", invalid="ignore"):
        num = (pos * (below + 0.5 * neg)).sum(axis=-1)
        return np.asarray(num / (pos.sum(axis=-1) * neg.sum(axis=-1)), dtype=np.float64)


def _auroc_levels(p: FloatArray) -> tuple[npt.NDArray[np.intp], int, bool]:
    levels, codes = np.unique(p, return_inverse=True)
    if levels.size <= _AUROC_MAX_LEVELS:
        return np.asarray(codes), int(levels.size), False
    # Quantile levels of the distinct predictions keep their order (ties only within a level).
    cuts = np.quantile(levels, np.linspace(0, 1, _AUROC_MAX_LEVELS + 1)[1:-1])
    coarse = np.searchsorted(np.unique(cuts), p, side="left")
    return np.asarray(coarse), int(coarse.max()) + 1, True


StatFn = Callable[[FloatArray], FloatArray]
Columns = slice | npt.NDArray[np.intp]


def _joint_bootstrap(
    cluster_stats: FloatArray,
    parts: dict[str, tuple[Columns, StatFn]],
    *,
    n_rows: int,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> dict[str, Estimate]:
    """Clustered bootstrap of several statistics of summed per-cluster columns, one draw.

    ``parts`` maps a name to (its columns, its statistic). Every statistic sees the same
    resampled clusters (multiplicities from :func:`evalstats.resample_counts`, in blocks) and
    the same leave-one-cluster-out jackknife for BCa; intervals as in
    :func:`evalstats.bootstrap_from_item_stats`.
    """
    n_cl = cluster_stats.shape[0]
    total = cluster_stats.sum(axis=0)
    block = max(1, _BLOCK_ELEMENTS // max(n_cl, 1))
    sums: list[FloatArray] = []
    done = 0
    while done < options.n_resamples:
        b = min(block, options.n_resamples - done)
        sums.append(resample_counts(n_cl, b, rng).astype(np.float64) @ cluster_stats)
        done += b
    resampled = np.concatenate(sums)
    leave_out = total[None, :] - cluster_stats if options.ci == "bca" else None
    base = list(small_n_warning(n_cl, options.min_items))
    out: dict[str, Estimate] = {}
    # Tiny samples give undefined replicates: reported as warnings, not numpy warnings.
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, (cols, fn) in parts.items():
            theta = float(fn(total[None, cols])[0])
            boot = fn(resampled[:, cols])
            # ECE sums absolute gaps, so every resample's value is biased upward of the
            # sample's; BCa's bias correction then moves the whole interval below the point
            # estimate. The percentile interval keeps it around the value a lead reads.
            ci = "percentile" if name.startswith("ece") else options.ci
            jk = fn(leave_out[:, cols]) if leave_out is not None and ci == "bca" else None
            lo, hi, extra = _interval(boot, theta, jk, None, ci, options.level)
            out[name] = Estimate(
                value=theta,
                ci_low=lo,
                ci_high=hi,
                n_items=n_cl,
                n_ratings=n_rows,
                level=options.level,
                n_resamples=options.n_resamples,
                method=(
                    f"{name}; bootstrap-{ci}(B={options.n_resamples}, clustered by item)"
                ),
                warnings=tuple(base + extra),
            )
    return out


def confidence_of(passed: npt.ArrayLike, prob: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """A probability of "the judge's side is right" read as the usual (confidence, correct)
    pair: confidence max(p, 1 - p) in [0.5, 1], correct whether the side the probability
    favours is the human's (NaN kept). For the ECE of a pairwise judge in confidence bins."""
    y = np.asarray(passed, dtype=np.float64)
    p = np.asarray(prob, dtype=np.float64)
    conf = np.maximum(p, 1.0 - p)
    correct = np.where(p >= 0.5, y, 1.0 - y)
    return np.asarray(correct, dtype=np.float64), np.asarray(conf, dtype=np.float64)


def calibration_diagnostics(
    passed: npt.ArrayLike,
    prob: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    clusters: npt.ArrayLike | None = None,
    n_bins: int = 10,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    low: float = 0.0,
) -> CalibrationDiagnostics:
    """Calibration diagnostics of probabilities ``prob`` against human labels ``passed``.

    All figures are weighted by ``weights`` (default 1); pass held-out predictions so that the
    figures are not in-sample. ``bins``: ``n_bins`` equal-width reliability bins (empty ones
    omitted). ``ece``: sum over equal-width bins of (bin weight share) x |pass share - mean
    prediction|; ``ece_mass``: the same over ``n_bins`` equal-mass (quantile) bins. ``brier``:
    weighted mean squared error; its Murphy decomposition ``reliability - resolution +
    uncertainty`` groups rows by their distinct predicted values when there are at most
    ``n_bins`` of them (then the identity with the Brier score is exact) and otherwise by the
    equal-width bins with each bin's mean prediction (the identity then misses the
    within-bin variation). ``log_loss``: weighted mean with predictions clipped to
    [machine eps, 1 - eps] (scikit-learn's rule). ``auroc``: weighted, ties count one half;
    ``None`` with one class.

    ``low``: the equal-width bins span [low, 1] (0.5 for a confidence in the side a judge
    chose, the usual binning of a pairwise judge's ECE: :func:`confidence_of`).

    ECE is biased upward (absolute values of noisy bin errors); a BCa interval corrects for
    that bias and can therefore lie below the plug-in estimate.

    Intervals: item-clustered bootstrap over ``clusters`` (default: every row its own
    cluster), with ``options``; bin edges stay those of the full sample. The AUROC interval
    resamples per-level tables; with more than 50 distinct predictions they are grouped into
    50 quantile levels for the interval (the point estimate is exact). Small data adds
    warnings, never raises.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    y, p, w, keep = _prepare_probs(passed, prob, weights)
    cl_all = np.arange(y.size) if clusters is None else np.asarray(clusters)
    if cl_all.shape[0] != y.size:
        raise ValueError("clusters must have one entry per row")
    y, p, w, cl = y[keep], p[keep], w[keep], cl_all[keep]
    n = int(y.size)
    warnings: list[str] = []
    if n == 0 or float(w.sum()) <= 0:
        nan = Estimate(
            value=float("nan"), method="no labelled rows", warnings=("no labelled rows",)
        )
        return CalibrationDiagnostics(
            bins=(),
            ece=nan,
            ece_mass=nan,
            brier=nan,
            brier_reliability=float("nan"),
            brier_resolution=float("nan"),
            brier_uncertainty=float("nan"),
            log_loss=nan,
            auroc=None,
            n=n,
            warnings=("no labelled rows",),
        )
    uniform = (_bin_edges(p, n_bins, "uniform") if low == 0.0
               else np.linspace(float(low), 1.0, n_bins + 1))
    quantile = _bin_edges(p, n_bins, "quantile")
    p_ll = np.clip(p, np.finfo(np.float64).eps, 1 - np.finfo(np.float64).eps)
    ll_rows = -(y * np.log(p_ll) + (1 - y) * np.log1p(-p_ll))
    # One row of summed statistics per cluster: [w, w (y - p) per equal-width bin,
    # w (y - p) per equal-mass bin, w (p - y)^2, w log loss, AUROC level tables]. One-hot
    # blocks are summed with bincount on (cluster, cell) codes: no dense rows x cells matrix.
    ccode = np.unique(cl, return_inverse=True)[1].reshape(-1)
    n_cl = int(ccode.max()) + 1

    def cells(cell: npt.NDArray[np.intp], n_cells: int, values: FloatArray) -> FloatArray:
        flat = np.bincount(ccode * n_cells + cell, weights=values, minlength=n_cl * n_cells)
        return np.asarray(flat, dtype=np.float64).reshape(n_cl, n_cells)

    def col(values: FloatArray) -> FloatArray:
        return np.asarray(np.bincount(ccode, weights=values, minlength=n_cl), dtype=np.float64)[
            :, None
        ]

    columns = [col(w)]
    for edges in (uniform, quantile):
        columns.append(cells(_bin_ids(p, edges), edges.size - 1, w * (y - p)))
    columns += [col(w * (p - y) ** 2), col(w * ll_rows)]
    pos_w, neg_w = float((w * y).sum()), float((w * (1 - y)).sum())
    two_classes = pos_w > 0 and neg_w > 0
    codes, n_levels, coarsened = _auroc_levels(p)
    if two_classes:
        columns.append(cells(codes + n_levels * (1 - y).astype(np.intp), 2 * n_levels, w))
    stats = np.hstack(columns)
    k = n_bins
    c_brier = 1 + 2 * k
    parts: dict[str, tuple[Columns, StatFn]] = {
        f"ece[equal-width, {k} bins]": (slice(0, 1 + k), _ece_fn(k)),
        f"ece[equal-mass, {k} bins]": (np.r_[0, 1 + k : 1 + 2 * k], _ece_fn(k)),
        "brier": (np.r_[0, c_brier], _ratio),
        "log_loss": (np.r_[0, c_brier + 1], _ratio),
    }
    auc_name = "auroc" + (f" (interval on {n_levels} quantile levels)" if coarsened else "")
    if two_classes:
        parts[auc_name] = (slice(c_brier + 2, c_brier + 2 + 2 * n_levels), _auroc_from_tables)
    est = _joint_bootstrap(stats, parts, n_rows=n, rng=rng, options=options)
    ece, ece_mass, brier, log_loss = (est[name] for name in list(parts)[:4])

    # Murphy (1973) decomposition.
    wsum = float(w.sum())
    obar = float((w * y).sum() / wsum)
    distinct, dcodes = np.unique(p, return_inverse=True)
    groups = dcodes if distinct.size <= n_bins else _bin_ids(p, uniform)
    gw = np.bincount(groups, weights=w)
    nz = gw > 0
    gp = np.bincount(groups, weights=w * p)[nz] / gw[nz]
    gy = np.bincount(groups, weights=w * y)[nz] / gw[nz]
    reliability = float((gw[nz] * (gp - gy) ** 2).sum() / wsum)
    resolution = float((gw[nz] * (gy - obar) ** 2).sum() / wsum)
    uncertainty = obar * (1 - obar)

    auroc: Estimate | None = None
    if two_classes:
        n_distinct = int(distinct.size)
        exact = np.concatenate(
            [
                np.bincount(dcodes, weights=w * y, minlength=n_distinct),
                np.bincount(dcodes, weights=w * (1 - y), minlength=n_distinct),
            ]
        )
        point = Estimate(
            value=float(_auroc_from_tables(exact[None, :])[0]),
            n_items=est[auc_name].n_items,
            n_ratings=n,
            method="auroc",
        )
        auroc = with_interval(point, est[auc_name])
    else:
        warnings.append("labels of one class only: AUROC undefined")
    for e in (ece, brier):
        warnings.extend(w_ for w_ in e.warnings if w_ not in warnings)
    return CalibrationDiagnostics(
        bins=_bins_of(y, p, w, uniform),
        ece=ece,
        ece_mass=ece_mass,
        brier=brier,
        brier_reliability=reliability,
        brier_resolution=resolution,
        brier_uncertainty=uncertainty,
        log_loss=log_loss,
        auroc=auroc,
        n=n,
        warnings=tuple(warnings),
    )
