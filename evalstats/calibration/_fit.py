"""One calibration map (isotonic, Platt, beta or histogram) from scores to P(human pass)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import isotonic_regression
from scipy.special import expit

from evalstats.calibration._common import (
    _BETA_MARGIN,
    EPS,
    METHODS,
    CalibrationMethod,
    FloatArray,
    _beta_features,
    _clip,
    _floats,
    _histogram_bins,
    _json_value,
    _logistic_safe,
    _prepare,
)


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
