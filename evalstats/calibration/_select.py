"""Choosing the calibration method by cross-validated log loss (grouped folds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from evalstats.calibration._common import (
    METHODS,
    CalibrationMethod,
    FloatArray,
    _clip,
    _floats,
    _json_value,
    _log_loss_rows,
    _prepare,
)
from evalstats.calibration._fit import CalibrationCurve, _constant_curve, calibration_fit

# --- selection by cross-validation -----------------------------------------------------------

#: A selection on the kept rows: (method, its curve refitted on them, method -> cross-validated
#: log loss, out-of-fold P(pass) of the method, folds used).
KeptSelection = tuple[CalibrationMethod, CalibrationCurve, dict[str, float], FloatArray, int]


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
    def from_kept(
        cls,
        kept: KeptSelection,
        keep: npt.NDArray[np.bool_],
        warnings: Sequence[str],
    ) -> CalibrationSelection:
        """The selection ``kept`` made on the rows ``keep`` (score and label known);
        ``heldout`` is NaN on the other rows."""
        method, curve, losses, oof, k = kept
        heldout = np.full(keep.size, np.nan)
        heldout[keep] = oof
        return cls(method=method, curve=curve, cv_log_loss=losses, heldout=heldout, folds=k,
                   n=int(keep.sum()), warnings=tuple(warnings))

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
) -> tuple[KeptSelection, list[str]]:
    warnings: list[str] = []
    reason = _too_few(y, w, codes, folds)
    if reason is not None:
        pos, tot = float((w * y).sum()), float(w.sum())
        wn = y.size / tot if tot > 0 else 1.0
        value = (pos * wn + 0.5) / (tot * wn + 1.0)
        curve = _constant_curve("histogram", value, int(y.size), np.sort(s))
        warnings.append(f"{reason}: a constant P(pass) = {value:.3f} is used, not a fitted curve")
        return ("histogram", curve, {}, _leave_group_out_constant(y, w, codes), 0), warnings
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
    return (best, curve, losses, oof[best], k), warnings


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
    kept, warnings = _select_kept(
        s_all[keep], y_all[keep], w_all[keep], codes, methods=methods, folds=folds, rng=rng
    )
    return CalibrationSelection.from_kept(kept, keep, warnings)
