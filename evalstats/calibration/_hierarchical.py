"""Per-stratum calibration that borrows from the pooled fit where a stratum has few labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from scipy.special import expit, logit

from evalstats.calibration._common import (
    METHODS,
    CalibrationMethod,
    FloatArray,
    _clip,
    _floats,
    _json_value,
    _prepare,
)
from evalstats.calibration._fit import CalibrationCurve
from evalstats.calibration._select import (
    CalibrationSelection,
    KeptSelection,
    _fold_of_rows,
    _group_codes,
    _select_kept,
)

# Weak N(0, 5^2) prior on a stratum's logit offset: keeps it finite for one-class strata.
_OFFSET_PRIOR_VAR = 25.0

_STRATUM_KEYS = ("stratum_offset", "stratum_raw_offset", "stratum_raw_variance")


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
    selection: KeptSelection
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
    selection, warnings = _select_kept(s, y, w, codes, methods=methods, folds=folds, rng=rng)
    oof = selection[3]
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
    return _HierFit(selection, offsets, tau2, warnings)


def _predict_fit(fit: _HierFit, s: FloatArray, labels: npt.NDArray[Any]) -> FloatArray:
    p = fit.selection[1].predict(s)
    shift = np.zeros(s.size)
    for label, (a_s, _, own) in fit.offsets.items():
        shift[labels == label] = own * a_s
    moved = shift != 0.0
    p[moved] = _clip(expit(logit(p[moved]) + shift[moved]))
    return p


def _cross_fitted(
    s: FloatArray, y: FloatArray, w: FloatArray, codes: npt.NDArray[np.int64],
    labels: npt.NDArray[Any], *, method: CalibrationMethod, folds: int, min_labels: int,
    fold_rng: np.random.Generator, outer_rng: np.random.Generator,
) -> FloatArray:
    """Held-out predictions: the whole procedure refitted without each group-kept fold (with
    the method chosen on all rows) and applied to that fold."""
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
    return kept_pred


def _stratum_calibrations(
    names: Sequence[str], labels: npt.NDArray[Any], w: FloatArray, fit: _HierFit,
    pooled_params: Mapping[str, tuple[float, ...]], method: CalibrationMethod,
) -> dict[str, StratumCalibration]:
    """Each stratum's curve: the pooled one shifted by its shrunk offset, or the pooled one
    alone for a stratum with too few labels."""
    out: dict[str, StratumCalibration] = {}
    for label in names:
        n_s = int(((labels == label) & (w > 0)).sum())
        if label in fit.offsets:
            a_s, v_s, own = fit.offsets[label]
            params = {
                **pooled_params,
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
                params={**pooled_params, "stratum_offset": (0.0,)},
            )
    return out


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
    method, curve, _, oof, k = fit.selection
    pooled = CalibrationSelection.from_kept(fit.selection, keep, fit.warnings)
    # Cross-fitting of the whole procedure.
    heldout = np.full(s_all.size, np.nan)
    if k == 0:
        heldout[keep] = oof  # too few rows: the leave-group-out constant
    else:
        heldout[keep] = _cross_fitted(s, y, w, codes, labels, method=method, folds=folds,
                                      min_labels=min_labels, fold_rng=fold_rng,
                                      outer_rng=outer_rng)
    names = sorted(set(labels_all.tolist()) | {str(x) for x in all_strata})
    out = _stratum_calibrations(names, labels, w, fit, curve.params, method)
    return HierarchicalCalibration(
        pooled=pooled,
        strata=out,
        tau2=fit.tau2,
        warnings=tuple(fit.warnings),
        heldout_p=heldout,
    )
