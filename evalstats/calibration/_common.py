"""Calibration's shared helpers: input preparation, clipping, JSON values, the logistic fit."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from evalstats.results import Estimate

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
