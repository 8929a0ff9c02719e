"""Whether the judge can still be trusted on a window's traffic (pure: no Django).

* `calibrated_values`: the judge's values mapped through the calibration curve in force
  (linear interpolation on the snapshot's grid, the curve the snapshot stores).
* `judge_trust`: the judge-human agreement on the window's *random* human draws (the share
  where the judge's value, read as pass at >= 0.5, matches the human's), with its Wilson
  interval at the plan's level, against the selection-time agreement (the agreement report's
  accuracy against the human consensus, whole study or the stratum) and the human ceiling (two
  humans' pooled agreement). State: ``no_longer`` when the window's interval lies wholly below
  the selection-time interval (its lower end; the point value when it has none), ``agrees``
  otherwise, ``no_reference`` without a selection-time figure, ``unknown`` without a pair. This
  is a per-window reading; the alert on agreement is the anytime-valid stream
  (`monitoring.alerts`).
* `calibration_drift`: on the random human draws, the calibrated probabilities against the
  human labels: ECE (10 equal-width bins, the snapshot's binning), Brier score, and
  calibration-in-the-large: the labels' mean against the mean predicted probability, with the
  z-test of ``sum(y) - sum(p)`` under ``Var = sum p(1 - p)`` (the labels independent Bernoulli(p)
  when the curve still holds) — beside the snapshot's ECE and Brier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats import wilson_interval

if TYPE_CHECKING:
    from .compute import SelectionReference

FloatArray = npt.NDArray[np.float64]
ECE_BINS = 10
# How a row without a finish reason is counted (monitoring.window.context).
NO_REASON = "(none)"


def calibrated_values(judge: FloatArray, ref: SelectionReference | None) -> FloatArray | None:
    """P(pass) of each judge value by the curve in force (None without a curve)."""
    if ref is None or len(ref.curve_x) < 2:
        return None
    x, y = np.asarray(ref.curve_x, dtype=float), np.asarray(ref.curve_y, dtype=float)
    order = np.argsort(x, kind="stable")
    return np.interp(judge, x[order], y[order])


def judge_trust(*, judge: FloatArray, human: FloatArray, stratum: str,
                ref: SelectionReference | None, level: float) -> dict[str, Any]:
    """The judge-trust reading of one stratum (module docstring). ``judge``/``human``: the
    values of the random human draws that have a judge value beside them."""
    n = int(judge.size)
    k = int(((judge >= 0.5) == (human >= 0.5)).sum())
    agreement = ref.agreement if ref is not None else {}
    selection = agreement.get(stratum) or agreement.get("")
    ceilings = ref.ceiling if ref is not None else {}
    ceiling = ceilings.get(stratum, ceilings.get(""))
    out: dict[str, Any] = {"n": n, "agree": k, "agreement": None,
                           "selection": dict(selection) if selection else None,
                           "ceiling": ceiling, "state": "unknown"}
    if n == 0:
        return out
    est = wilson_interval(k, n, level=level)
    out["agreement"] = {"value": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high}
    if not selection or selection.get("value") is None:
        out["state"] = "no_reference"
        return out
    low = selection.get("ci_low")
    bar = float(low if low is not None else selection["value"] or 0.0)
    out["state"] = "no_longer" if est.ci_high is not None and est.ci_high < bar else "agrees"
    return out


def expected_calibration_error(y: FloatArray, p: FloatArray, n_bins: int = ECE_BINS) -> float:
    """Sum over equal-width bins of (bin share) x |mean label - mean probability|."""
    bins = np.minimum((p * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        m = bins == b
        total += m.sum() / p.size * abs(float(y[m].mean()) - float(p[m].mean()))
    return total


def calibration_drift(*, judge: FloatArray, human: FloatArray,
                      ref: SelectionReference | None) -> dict[str, Any] | None:
    """Reliability of the calibrated judge on the window's random human draws (module
    docstring); None without a curve or a labelled draw."""
    p = calibrated_values(judge, ref)
    if p is None or p.size == 0 or ref is None:
        return None
    y = (human >= 0.5).astype(float)
    var = float((p * (1 - p)).sum())
    z = (float(y.sum()) - float(p.sum())) / np.sqrt(var) if var > 0 else None
    return {
        "n": int(p.size),
        "ece": expected_calibration_error(y, p),
        "brier": float(((p - y) ** 2).mean()),
        "mean_predicted": float(p.mean()),
        "mean_observed": float(y.mean()),
        "z": z,
        "p_value": None if z is None else float(2 * stats.norm.sf(abs(z))),
        "snapshot_ece": ref.snapshot_ece,
        "snapshot_brier": ref.snapshot_brier,
    }


def finish_signal(window: Mapping[str, int], reference: Mapping[str, int]
                  ) -> dict[str, Any] | None:
    """The window's finish reasons against the reference's: the chi-square test of
    homogeneity of the two count vectors (scipy), over the reasons either one reports (rows
    without a finish reason are left out); None when either reports none or only one reason
    occurs at all."""
    window = {k: v for k, v in window.items() if k != NO_REASON}
    reference = {k: v for k, v in reference.items() if k != NO_REASON}
    reasons = sorted(set(window) | set(reference))
    n_w, n_r = sum(window.values()), sum(reference.values())
    if n_w == 0 or n_r == 0 or len(reasons) < 2:
        return None
    table = np.array([[window.get(r, 0) for r in reasons],
                      [reference.get(r, 0) for r in reasons]], dtype=float)
    table = table[:, table.sum(axis=0) > 0]
    test = stats.chi2_contingency(table, correction=False)
    top = max(reference, key=lambda r: reference[r])
    return {"p_value": float(test.pvalue), "n_window": n_w, "n_reference": n_r,
            "reason": top, "window_share": window.get(top, 0) / n_w,
            "reference_share": reference[top] / n_r}
