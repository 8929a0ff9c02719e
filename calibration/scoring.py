"""What a calibration snapshot reads (`CriterionRule`, `CalibrationInputs`) and the pieces that
score one criterion: the pass readings of stored values, the human consensus by the one rule,
a judge version's scores, the fitted map (`Model`) with its P(pass) bands and curve, the judge's
own confidence, and the plan's cascade stages. Pure: no database (calibration/compute.py runs
the steps; docs/calibration.md)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import expit, logit

from evalstats.calibration import (
    EPS,
    CalibrationMethod,
    CalibrationSelection,
    HierarchicalCalibration,
    calibration_fit,
)
from studies.criteria import criterion_is_pass

from .frames import (
    PAIRWISE_CODE,
    RatingData,
    human_labels,
)
from .frames import rubric_rule as rubric_rule_of

FloatArray = npt.NDArray[np.float64]
# Score grid of the stored curves (plots) and of the P(pass) interval bands.
GRID_POINTS = 101
MAX_GRID_UNIQUE = 512


@dataclass
class CriterionRule:
    """What the frames do not say about a criterion: its pass rule, gate and weight (shaped
    like `studies.criteria.CriterionLike`, so the pass readings are the project's own)."""

    id: int
    key: str
    scale: str
    points: Any
    pass_threshold: int | float | None
    pass_labels: Any
    is_hard_gate: bool
    weight: float
    rubric_version: int
    # Interval criteria: the closed range of a score (pass: score >= pass_threshold).
    min: float | None = None
    max: float | None = None


@dataclass
class CalibrationInputs:
    """Everything a calibration snapshot reads (`calibration_inputs_load`)."""

    study_id: int
    data: RatingData
    rules: dict[int, CriterionRule]
    judge_hashes: dict[int, str]
    plan_spec: dict[str, Any] | None
    # The pass/fail criteria of the study's latest rubric version: what a rubric row combines.
    rubric_criteria: tuple[int, ...] = ()
    # That version's rule (calibration.frames.rubric_rule; default: every criterion passes).
    rubric_rule: dict[str, Any] = field(default_factory=lambda: rubric_rule_of(None))



# --- helpers -----------------------------------------------------------------------------------


def seeded_rng(seed: int, *parts: object) -> np.random.Generator:
    """A generator per cell, so one cell's numbers do not depend on which other cells exist."""
    return np.random.default_rng([seed] + [zlib.crc32(str(p).encode()) for p in parts])


def cell_label(labels: Mapping[str, str], dims: Sequence[str]) -> str:
    """The calibration cell of an item: "dim=label|dim2=label2" ("" without dimensions)."""
    return "|".join(f"{d}={labels.get(d, 'unknown')}" for d in dims)


def pass_codes(rule: CriterionRule, values: tuple[str, ...], num: FloatArray) -> FloatArray:
    """Pass reading (1/0) of rating codes; pairwise keeps the side code (tie 0, A 1, B 2)."""
    if rule.scale == "binary":
        return (num == 1.0).astype(np.float64)
    if rule.scale in ("ordinal", "interval"):
        return (num >= float(rule.pass_threshold or 0)).astype(np.float64)
    if rule.scale == "categorical":
        labels = {str(x) for x in rule.pass_labels}
        ok = np.array([values[int(c)] in labels for c in num], dtype=np.float64)
        return ok if num.size else np.empty(0)
    return num.astype(np.float64)


def label_code(rule: CriterionRule, label: Any) -> float:
    """Pass reading of a stored label (gold, adjudication); NaN when unreadable."""
    if label is None:
        return math.nan
    text = str(label)
    if rule.scale == "pairwise":
        return PAIRWISE_CODE.get(text, math.nan)
    try:
        passed = criterion_is_pass(rule, text)
    except ValueError:
        return math.nan
    return math.nan if passed is None else float(passed)


def label_codes(rule: CriterionRule, labels: pd.Series) -> pd.Series:
    """`label_code` of every label, read once per distinct label (a million-rating study
    has a few)."""
    out = np.full(len(labels), np.nan)
    present = labels.notna().to_numpy()
    if present.any():
        codes, uniques = pd.factorize(labels[present])
        out[present] = np.array([label_code(rule, u) for u in uniques], dtype=np.float64)[codes]
    return pd.Series(out, index=labels.index)


def has_reading(rule: CriterionRule) -> bool:
    if rule.scale == "pairwise":
        return True
    if rule.scale in ("ordinal", "interval"):  # interval without a threshold: skipped, said so
        return rule.pass_threshold is not None
    if rule.scale == "categorical":
        return bool(rule.pass_labels)
    return rule.scale == "binary"


@dataclass
class Humans:
    """Per subject of one criterion: consensus, source, fit membership, weight, severity."""

    consensus: pd.Series  # subject -> pass 0/1 (pairwise: side code); NaN: none
    source: pd.Series  # subject -> "human" | "adjudicated"
    fit: pd.Series  # subject -> bool (not an escalation-only draw)
    weight: pd.Series  # subject -> 1 / inclusion probability or 1
    severity: pd.Series  # subject -> mean severity of the failing annotations (NaN: none)
    n_labels: pd.Series  # subject -> number of annotations


def humans_of(rows: pd.DataFrame, rule: CriterionRule, values: tuple[str, ...]) -> Humans:
    human = rows[~rows["is_judge"].to_numpy(dtype=bool)]
    num = human["num"].to_numpy(dtype=np.float64)
    reading = pass_codes(rule, values, num)
    subj = human["subject"].to_numpy(dtype=np.int64)
    # Gold and adjudicated labels ride on every rating of the (subject, criterion).
    labels = rows.drop_duplicates("subject", keep="last").set_index("subject")
    gold = label_codes(rule, labels["gold_label"])
    adjudicated = label_codes(rule, labels["adjudicated_label"])
    kind = human["draw_kind"].astype(object).to_numpy()
    sev = human["severity"].to_numpy(dtype=np.float64)
    failing = reading == 0.0 if rule.scale != "pairwise" else np.zeros(reading.size, bool)
    severity = (
        pd.Series(np.where(failing, sev, np.nan), index=subj).groupby(level=0).mean()
        .reindex(labels.index)
    )
    n_labels = pd.Series(1, index=subj).groupby(level=0).sum().reindex(labels.index, fill_value=0)
    # The one human-label rule of the evidence read model (calibration.frames): pass readings,
    # or the side codes of a pairwise criterion (the side most annotators chose).
    hl = human_labels(
        subject=subj, reading=reading, draw_kind=kind,
        inclusion=human["inclusion_probability"].to_numpy(dtype=np.float64),
        gold={int(k): float(v) for k, v in
              gold[labels["gold_label"].notna().to_numpy()].items()},
        adjudicated={int(k): float(v) for k, v in
                     adjudicated[labels["adjudicated_label"].notna().to_numpy()].items()})
    idx = pd.Index(hl.subjects)
    consensus = pd.Series(hl.label, index=idx).reindex(labels.index).astype(np.float64)
    source = pd.Series(np.where(pd.Series(hl.source, index=idx).reindex(labels.index)
                                .to_numpy() == "adjudication", "adjudicated", "human"),
                       index=labels.index)
    fit = pd.Series(hl.countable, index=idx).reindex(labels.index, fill_value=False)
    weight = pd.Series(hl.weight, index=idx).reindex(labels.index).fillna(1.0)
    return Humans(consensus, source, fit.astype(bool), weight, severity, n_labels)


@dataclass
class JudgeScores:
    """One judge version's scores on one criterion, one row per scored subject."""

    jv: int
    subjects: npt.NDArray[np.int64]
    score: FloatArray
    before: FloatArray  # the raw score read as a probability
    raw_pass: FloatArray  # the raw verdict's pass reading (pairwise: 1, the judge's side)
    side: FloatArray  # pairwise: the judge's side code; NaN otherwise
    value: npt.NDArray[np.object_]
    probability: FloatArray
    kind: str  # "probability" | "verdict" | "level" | "score"
    lo: float
    hi: float


def judge_scores(
    rows: pd.DataFrame, jv: int, rule: CriterionRule, values: tuple[str, ...]
) -> tuple[JudgeScores, int]:
    j = rows[rows["is_judge"].to_numpy(dtype=bool) & (rows["rater"].to_numpy() == jv)]
    j = j.drop_duplicates("subject", keep="last")
    num = j["num"].to_numpy(dtype=np.float64)
    prob = j["probability"].to_numpy(dtype=np.float64)
    continuous = bool(j["continuous"].to_numpy(dtype=bool).any()) if len(j) else False
    ties = 0
    side = np.full(num.size, np.nan)
    if rule.scale == "pairwise":
        keep = num != 0.0
        ties = int((~keep).sum())
        j, num, prob = j[keep], num[keep], prob[keep]
        side = num.copy()
    use_prob = bool(num.size) and bool(np.all(np.isfinite(prob)))
    lo, hi = 0.0, 1.0
    if rule.scale == "pairwise":
        raw_pass = np.ones(num.size)
        if use_prob:
            score, kind = np.where(side == 1.0, prob, 1.0 - prob), "probability"
        else:
            score, kind = np.ones(num.size), "verdict"
        before = score
    else:
        raw_pass = pass_codes(rule, values, num) if not continuous else (
            (num >= float(rule.pass_threshold or 0)).astype(np.float64)
        )
        if use_prob:
            score, kind = prob, "probability"
            before = prob
        elif rule.scale in ("ordinal", "interval"):
            score = num
            if rule.scale == "interval":
                kind = "score"  # the range is the criterion's, not the scores seen
                lo = float(rule.min if rule.min is not None else num.min() if num.size else 0.0)
                hi = float(rule.max if rule.max is not None else num.max() if num.size else 1.0)
            elif continuous:
                kind = "score"
                lo = float(num.min()) if num.size else 0.0
                hi = float(num.max()) if num.size else 1.0
            else:
                kind = "level"
                levels = [float(v) for v in values]
                lo, hi = min(levels), max(levels)
            span = hi - lo
            before = np.clip((num - lo) / span, 0.0, 1.0) if span > 0 else np.full(num.size, 0.5)
        else:
            score, kind = raw_pass.copy(), "verdict"
            before = score
    return (
        JudgeScores(
            jv=jv,
            subjects=j["subject"].to_numpy(dtype=np.int64),
            score=np.asarray(score, dtype=np.float64),
            before=np.asarray(before, dtype=np.float64),
            raw_pass=np.asarray(raw_pass, dtype=np.float64),
            side=side,
            value=j["value"].astype(object).to_numpy(),
            probability=prob,
            kind=kind,
            lo=lo,
            hi=hi,
        ),
        ties,
    )


def score_grid(js: JudgeScores) -> FloatArray:
    u = np.unique(js.score[np.isfinite(js.score)])
    if u.size <= MAX_GRID_UNIQUE:
        return u.astype(np.float64)
    lo, hi = (0.0, 1.0) if js.kind == "probability" else (js.lo, js.hi)
    return np.linspace(lo, hi, GRID_POINTS)


@dataclass
class Model:
    """The fitted map of one judge version x criterion (hierarchical, or pooled only)."""

    pooled: CalibrationSelection
    hier: HierarchicalCalibration | None
    heldout: FloatArray

    def predict(self, score: FloatArray, labels: npt.NDArray[np.object_]) -> FloatArray:
        if self.hier is None:
            return self.pooled.curve.predict(score)
        return self.hier.predict(score, labels)

    def shift(self, label: str) -> tuple[float, float]:
        """(applied logit offset, its posterior variance) of a cell (0, 0: pooled curve)."""
        if self.hier is None or label not in self.hier.strata:
            return 0.0, 0.0
        st = self.hier.strata[label]
        if st.pooled_only:
            return 0.0, 0.0
        offset = st.params.get("stratum_offset", (0.0,))[0]
        variance = st.params.get("stratum_raw_variance", (0.0,))[0]
        return float(offset), float(st.own_weight * variance)


def p_bands(
    model: Model,
    x: FloatArray,
    y: FloatArray,
    w: FloatArray,
    groups: npt.NDArray[np.int64],
    grid: FloatArray,
    cells: Sequence[str],
    *,
    resamples: int,
    level: float,
    rng: np.random.Generator,
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """Per cell, the (low, high) P(pass) band on `grid` (module docs: item bootstrap of the
    pooled curve with its chosen method, plus the normal posterior of the cell's offset)."""
    method = cast(CalibrationMethod, model.pooled.method)
    codes, uniq = pd.factorize(groups)
    n_groups = len(uniq)
    curves = np.empty((resamples, grid.size))
    for b in range(resamples):
        # Resampling items with replacement is reweighting each item's rows by how often it
        # was drawn: no copy of the rows per resample.
        drawn = np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)
        curves[b] = calibration_fit(
            x, y, method=method, weights=w * drawn[codes]
        ).predict(grid)
    z = logit(np.clip(curves, EPS, 1 - EPS))
    tail = (1.0 - level) / 2.0
    out: dict[str, tuple[FloatArray, FloatArray]] = {}
    for label in cells:
        offset, var = model.shift(label)
        draws = z + offset + math.sqrt(max(var, 0.0)) * rng.standard_normal((resamples, 1))
        p = expit(draws)
        out[label] = (np.quantile(p, tail, axis=0), np.quantile(p, 1.0 - tail, axis=0))
    return out


def curve_json(model: Model | None, label: str, grid: FloatArray) -> dict[str, list[float]]:
    if model is None or grid.size == 0:
        return {"x": [], "y": []}
    if label == "" or model.hier is None:
        y = model.pooled.curve.predict(grid)
    else:
        y = model.hier.strata[label].predict(grid)
    return {"x": [float(v) for v in grid], "y": [float(v) for v in y]}


def estimate_value(d: Mapping[str, Any] | None) -> float:
    if not d:
        return math.nan
    v = (d.get("expected") or {}).get("value")
    return math.nan if v is None else float(v)


def raw_confidence(js: JudgeScores, rule: CriterionRule) -> tuple[FloatArray, FloatArray] | None:
    """The judge's own confidence in its decision and that decision (1 pass / 0 fail; for a
    comparison 1 = the side it chose), one per scored subject; None without a probability.

    Pass reading: P(pass) for a pass, 1 - P(pass) for a fail. Comparison: P(the chosen side),
    i.e. P(A) for A and 1 - P(A) for B (the published method's max(P(A), P(B)))."""
    if js.kind != "probability":
        return None
    if rule.scale == "pairwise":
        return js.score.copy(), np.ones(js.score.size)
    dec = js.raw_pass
    return np.where(dec == 1.0, js.probability, 1.0 - js.probability), dec.copy()


def plan_cascade_ids(
    entries: Sequence[Any], judges: Mapping[int, Any], hashes: Mapping[int, str],
    warnings: list[str],
) -> list[int]:
    """The plan's cascade stages as judge version ids, in order. A stage names a judge and its
    version (number, or the label / config hash it was imported or pushed with); a bare
    integer is a version id. A stage with no such version yet (e.g. the plan was written
    before its verdicts came in) is left out with a warning."""
    out: list[int] = []
    for e in entries:
        if isinstance(e, Mapping):
            name, ver = str(e.get("judge", "")), e.get("version")
            found = [
                jv for jv, j in judges.items()
                if j.judge == name and (
                    (isinstance(ver, int) and not isinstance(ver, bool) and j.version == ver)
                    or (isinstance(ver, str) and ver in (j.label, hashes.get(jv, "")))
                )
            ]
            if not found:
                warnings.append(f"cascade stage {name} {ver}: no such judge version in the "
                                "study (yet): left out of the cascade")
                continue
            jv_id = found[0]
        else:
            jv_id = int(e)
            if jv_id not in judges:
                warnings.append(f"cascade stage {jv_id}: no such judge version: left out")
                continue
        if jv_id not in out:
            out.append(jv_id)
    return out
