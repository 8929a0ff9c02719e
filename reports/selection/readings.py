"""How stored ratings read as numbers for the selection report: a pass reading of rating
codes, a stored label (gold, adjudication) as a pass or a level, a pairwise value as the score
of candidate A, and the mean of several readings per output. Pure: no Django."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .inputs import A_WINS, CriterionMeta

FloatArray = npt.NDArray[np.float64]


def pass_reading(c: CriterionMeta, num: FloatArray, text: Any = None) -> FloatArray:
    """1/0 pass reading of rating codes (NaN where unreadable)."""
    out = np.full(num.size, np.nan)
    if c.scale == "binary":
        ok = np.isfinite(num)
        out[ok] = (num[ok] == 1.0).astype(np.float64)
    elif c.scale in ("ordinal", "interval") and c.pass_threshold is not None:
        ok = np.isfinite(num)
        out[ok] = (num[ok] >= float(c.pass_threshold)).astype(np.float64)
    elif c.scale == "categorical" and c.pass_labels and text is not None:
        labels = set(c.pass_labels)
        values = set(c.values)
        arr = np.asarray(text, dtype=object)
        known = np.array([v in values for v in arr], dtype=bool)
        passed = np.array([v in labels for v in arr], dtype=bool)
        out[known] = passed[known].astype(np.float64)
    return out


def label_reading(c: CriterionMeta, label: str, mean_score: bool) -> float:
    """A stored label (gold, adjudication) as a pass reading or, for mean scores, a level."""
    if c.scale == "interval":  # a number (the rubric checked its range when it was stored)
        try:
            num = float(label)
        except ValueError:
            return math.nan
        if mean_score:
            return num
        return math.nan if c.pass_threshold is None else float(num >= c.pass_threshold)
    if label not in c.values:
        return math.nan
    if mean_score:
        return float(label) if c.scale == "ordinal" else math.nan
    if c.scale == "binary":
        return 1.0 if label == "pass" else 0.0
    if c.scale == "ordinal":
        return math.nan if c.pass_threshold is None else float(int(label) >= c.pass_threshold)
    if c.scale == "categorical":
        return float(label in c.pass_labels) if c.pass_labels else math.nan
    return math.nan



def a_wins(num: FloatArray, text: Any) -> FloatArray:
    """The "A wins" score of stored pairwise values: value_num when stored (A 1, B 0, tie
    0.5, as the judges and importers write it), else the value's text."""
    out = np.where(np.isin(num, (0.0, 0.5, 1.0)), num, np.nan)
    if text is not None:
        from_text = pd.Series(np.asarray(text, dtype=object)).map(A_WINS).to_numpy(
            dtype=np.float64, na_value=np.nan)
        out = np.where(np.isfinite(out), out, from_text)
    return np.asarray(out, dtype=np.float64)


def mean_at(at: npt.NDArray[np.intp], values: FloatArray, n: int) -> FloatArray:
    """Mean of `values` per position `at` over n positions (NaN where none): several verdicts
    of one judge version on an output (samples, orders) average into one predictor."""
    ok = np.isfinite(values)
    if n == 0:
        return np.zeros(0)
    s = np.bincount(at[ok], weights=values[ok], minlength=n)
    k = np.bincount(at[ok], minlength=n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, s / np.where(k > 0, k, 1.0), np.nan)


__all__ = ["a_wins", "label_reading", "mean_at", "pass_reading"]
