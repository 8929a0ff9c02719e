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

# The package splits along the steps a report takes: _fit (one map), _select (the method by
# cross-validated log loss), _hierarchical (per stratum, borrowing from the pool), _diagnostics
# (reliability bins, ECE, AUROC and their joint bootstrap); _common holds the shared helpers.
from evalstats.calibration._common import (
    EPS,
    METHODS,
    CalibrationMethod,
)
from evalstats.calibration._diagnostics import (
    CalibrationDiagnostics,
    ReliabilityBin,
    calibration_diagnostics,
    confidence_of,
    reliability_bins,
)
from evalstats.calibration._fit import (
    CalibrationCurve,
    calibration_fit,
)
from evalstats.calibration._hierarchical import (
    HierarchicalCalibration,
    StratumCalibration,
    calibration_hierarchical,
)
from evalstats.calibration._select import (
    CalibrationSelection,
    calibration_select,
)
from evalstats.calibration._select import (
    _fold_of_rows as _fold_of_rows,  # a test checks the folds against a manual split
)

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
