"""The calibration snapshot: judge scores become P(a human would pass this), with costs,
decisions and the rubric's aggregate, per output (docs/calibration.md).

`calibration_inputs_load` reads the evidence (`calibration.frames`, columns "evidence") plus
what the frames do not carry (each criterion's pass rule, hard gate and weight; each judge
version's content hash; the analysis plan's costs and policy); `calibration_compute` turns
them into a `CalibrationResult` with no database access. The statistics are `evalstats`'
(calibration, costs, selective prediction); this module decides which rows feed them.

Definitions (the docs say the same in prose):

* Human consensus of a (subject, criterion): the latest adjudication's label wins, then a
  gold label, then the majority of the annotators' pass readings (binary: "pass"; ordinal:
  level >= pass_threshold; categorical: a pass label; pairwise: the preferred side A/B/tie);
  an exact tie has no consensus.
* Which human labels fit the curves: a subject whose annotations were all drawn as
  escalations is not a random draw, so it is left out of every fit, diagnostic and cost
  estimate; its consensus still replaces the judge's decision. Subjects drawn at random weigh
  1 / inclusion probability (the largest recorded for the subject, i.e. the smaller weight);
  census, gold and imported labels weigh 1.
* The judge's score: the verdict's probability when every verdict of that judge version on
  the criterion has one (judges store P(pass) for binary, ordinal and categorical criteria and
  P(A wins) for pairwise ones, judges/models.py), else the verdict itself: 0/1 (binary, and
  categorical through its pass labels), the ordinal level or the continuous score. Pairwise:
  the confidence that the judge's preferred side is right (P(A) when it prefers A, 1 - P(A)
  for B; 1 without a probability) and "pass" means the human consensus prefers the same side;
  a judge's tie has no preferred side and gets no score (counted in the warnings).
* Cells: the combinations of the strata dimensions' labels ("dim=label|dim2=label2"), plus the
  whole study (""). Every cell whose items have judged outputs appears; a cell with fewer than
  ``min_labels`` human labels says "too few labels" and its outputs get the whole-study curve.
"""

from __future__ import annotations

import hashlib
import json
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
    calibration_diagnostics,
    calibration_fit,
    calibration_hierarchical,
    calibration_select,
    confidence_of,
)
from evalstats.costs import (
    CostModel,
    DecisionThresholds,
    decide,
    decision_thresholds,
    expected_decision_cost,
    false_pass_cost,
    policy_costs,
)
from evalstats.options import BootstrapOptions
from evalstats.selective import TrustThreshold, threshold_grid, trust_cascade, trust_threshold
from studies.criteria import criterion_has_pass_reading, criterion_is_pass
from studies.subjects import subject_split

from .frames import (
    PAIRWISE_CODE,
    RatingData,
    human_labels,
    rubric_predictor_columns,
)
from .frames import rubric_rule as rubric_rule_of
from .results import (
    CALIBRATION_RESULT_VERSION,
    CalibrationCell,
    CalibrationResult,
    ScoreBlock,
    ScoreRows,
)

FloatArray = npt.NDArray[np.float64]
RUBRIC_KEY = "rubric"
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


def calibration_inputs_load(
    study: Any, params: Mapping[str, Any], plan: Any = None
) -> CalibrationInputs:
    """Load the evidence of a calibration snapshot (criteria and judges as in `params`)."""
    from judges.models import JudgeVersion
    from studies.models import Criterion, RubricVersion

    from .frames import rating_data_load

    data = rating_data_load(
        study=study,
        criterion_keys=params.get("criteria"),
        judge_version_ids=params.get("judges"),
        columns="evidence",
    )
    rules = {
        c.pk: CriterionRule(
            id=c.pk, key=c.key, scale=c.scale, points=c.points,
            pass_threshold=c.pass_threshold, pass_labels=list(c.pass_labels or []),
            is_hard_gate=bool(c.is_hard_gate), weight=float(c.weight),
            rubric_version=c.rubric.version, min=c.min, max=c.max,
        )
        for c in Criterion.objects.filter(pk__in=list(data.criteria)).select_related("rubric")
    }
    hashes = dict(
        JudgeVersion.objects.filter(pk__in=list(data.judges)).values_list("id", "content_hash")
    )
    spec = dict(plan.spec or {}) if plan is not None else None
    latest = (
        Criterion.objects.filter(rubric__study=study).order_by("-rubric__version")
        .values_list("rubric__version", flat=True).first()
    )
    rubric = tuple(
        c.pk
        for c in Criterion.objects.filter(rubric__study=study, rubric__version=latest or 0)
        .order_by("position", "id")
        if c.scale != "pairwise" and criterion_has_pass_reading(c)
    )
    aggregate = (
        RubricVersion.objects.filter(study=study, version=latest or 0)
        .values_list("aggregate", flat=True).first()
    )
    return CalibrationInputs(
        study_id=study.pk, data=data, rules=rules,
        judge_hashes={int(k): str(v or "") for k, v in hashes.items()}, plan_spec=spec,
        rubric_criteria=rubric, rubric_rule=rubric_rule_of(aggregate),
    )


def _plan_sections(spec: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from studies.spec import plan_costs, plan_policy

    costs, costs_default = plan_costs(spec)
    policy, policy_default = plan_policy(spec)
    return {**costs, "is_default": bool(costs_default)}, {
        **policy, "is_default": bool(policy_default)
    }


def calibration_fingerprint(inputs: CalibrationInputs) -> str:
    """sha256 over every input the snapshot reads: the ratings with their evidence columns
    (sorted, so row order does not matter), the criteria's rules, the judge versions' hashes,
    the items' strata and the plan's costs and policy."""
    data = inputs.data
    r = data.ratings
    h = hashlib.sha256()
    cols = ["subject", "criterion", "rater", "is_judge", "num", "probability", "severity",
            "inclusion_probability", "draw_kind", "gold_label", "adjudicated_label"]
    if len(r):
        frame = r[cols].sort_values(["subject", "criterion", "is_judge", "rater"], kind="stable")
        frame = frame.astype({"draw_kind": str, "gold_label": str, "adjudicated_label": str})
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    h.update(pd.util.hash_pandas_object(data.items.sort_index(), index=True).to_numpy().tobytes())
    rules = sorted(
        (k, r_.key, r_.scale, r_.pass_threshold, list(r_.pass_labels), r_.is_hard_gate, r_.weight)
        for k, r_ in inputs.rules.items()
    )
    costs, policy = _plan_sections(inputs.plan_spec)
    meta = {"rules": rules, "judges": sorted(inputs.judge_hashes.items()),
            "costs": costs, "policy": policy, "rubric_rule": inputs.rubric_rule}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    return h.hexdigest()


# --- helpers -----------------------------------------------------------------------------------


def _rng(seed: int, *parts: object) -> np.random.Generator:
    """A generator per cell, so one cell's numbers do not depend on which other cells exist."""
    return np.random.default_rng([seed] + [zlib.crc32(str(p).encode()) for p in parts])


def cell_label(labels: Mapping[str, str], dims: Sequence[str]) -> str:
    """The calibration cell of an item: "dim=label|dim2=label2" ("" without dimensions)."""
    return "|".join(f"{d}={labels.get(d, 'unknown')}" for d in dims)


def _pass_codes(rule: CriterionRule, values: tuple[str, ...], num: FloatArray) -> FloatArray:
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


def _label_code(rule: CriterionRule, label: Any) -> float:
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


def _label_codes(rule: CriterionRule, labels: pd.Series) -> pd.Series:
    """`_label_code` of every label, read once per distinct label (a million-rating study
    has a few)."""
    out = np.full(len(labels), np.nan)
    present = labels.notna().to_numpy()
    if present.any():
        codes, uniques = pd.factorize(labels[present])
        out[present] = np.array([_label_code(rule, u) for u in uniques], dtype=np.float64)[codes]
    return pd.Series(out, index=labels.index)


def _has_reading(rule: CriterionRule) -> bool:
    if rule.scale == "pairwise":
        return True
    if rule.scale in ("ordinal", "interval"):  # interval without a threshold: skipped, said so
        return rule.pass_threshold is not None
    if rule.scale == "categorical":
        return bool(rule.pass_labels)
    return rule.scale == "binary"


@dataclass
class _Humans:
    """Per subject of one criterion: consensus, source, fit membership, weight, severity."""

    consensus: pd.Series  # subject -> pass 0/1 (pairwise: side code); NaN: none
    source: pd.Series  # subject -> "human" | "adjudicated"
    fit: pd.Series  # subject -> bool (not an escalation-only draw)
    weight: pd.Series  # subject -> 1 / inclusion probability or 1
    severity: pd.Series  # subject -> mean severity of the failing annotations (NaN: none)
    n_labels: pd.Series  # subject -> number of annotations


def _humans(rows: pd.DataFrame, rule: CriterionRule, values: tuple[str, ...]) -> _Humans:
    human = rows[~rows["is_judge"].to_numpy(dtype=bool)]
    num = human["num"].to_numpy(dtype=np.float64)
    reading = _pass_codes(rule, values, num)
    subj = human["subject"].to_numpy(dtype=np.int64)
    # Gold and adjudicated labels ride on every rating of the (subject, criterion).
    labels = rows.drop_duplicates("subject", keep="last").set_index("subject")
    gold = _label_codes(rule, labels["gold_label"])
    adjudicated = _label_codes(rule, labels["adjudicated_label"])
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
    return _Humans(consensus, source, fit.astype(bool), weight, severity, n_labels)


@dataclass
class _JudgeScores:
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


def _judge_scores(
    rows: pd.DataFrame, jv: int, rule: CriterionRule, values: tuple[str, ...]
) -> tuple[_JudgeScores, int]:
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
        raw_pass = _pass_codes(rule, values, num) if not continuous else (
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
        _JudgeScores(
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


def _grid(js: _JudgeScores) -> FloatArray:
    u = np.unique(js.score[np.isfinite(js.score)])
    if u.size <= MAX_GRID_UNIQUE:
        return u.astype(np.float64)
    lo, hi = (0.0, 1.0) if js.kind == "probability" else (js.lo, js.hi)
    return np.linspace(lo, hi, GRID_POINTS)


@dataclass
class _Model:
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


def _bands(
    model: _Model,
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


def _curve_json(model: _Model | None, label: str, grid: FloatArray) -> dict[str, list[float]]:
    if model is None or grid.size == 0:
        return {"x": [], "y": []}
    if label == "" or model.hier is None:
        y = model.pooled.curve.predict(grid)
    else:
        y = model.hier.strata[label].predict(grid)
    return {"x": [float(v) for v in grid], "y": [float(v) for v in y]}


def _estimate_value(d: Mapping[str, Any] | None) -> float:
    if not d:
        return math.nan
    v = (d.get("expected") or {}).get("value")
    return math.nan if v is None else float(v)


def _raw_confidence(js: _JudgeScores, rule: CriterionRule) -> tuple[FloatArray, FloatArray] | None:
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


def _cascade_ids(
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


@dataclass
class _Setting:
    """What every step of a calibration snapshot reads: parameters, costs and policy, the
    strata cells of the subjects; `warnings` collects every step's notes in order."""

    inputs: CalibrationInputs
    params: Mapping[str, Any]
    seed: int
    level: float
    min_labels: int
    methods: tuple[CalibrationMethod, ...]
    options: BootstrapOptions
    costs: dict[str, Any]
    policy: dict[str, Any]
    cost_model: CostModel
    middle_cost: float
    dims: list[str]
    subjects: _SubjectTable
    subj_cell: pd.Series
    subj_items: pd.Series
    guaranteed: bool
    cascade_ids: list[int]
    score_mode: str
    grid: FloatArray | None
    warnings: list[str]


@dataclass
class _Fit:
    """One judge version's labelled rows on one criterion (the "fit" rows) and its model."""

    js: _JudgeScores
    fit_mask: npt.NDArray[np.bool_]
    fx: FloatArray
    fy: FloatArray
    fw: FloatArray
    fsubj: npt.NDArray[np.int64]
    fgroups: npt.NDArray[np.int64]
    fcells: npt.NDArray[np.object_]
    row_cells: npt.NDArray[np.object_]
    present: list[str]
    model: _Model | None = None


@dataclass
class _Output:
    """What the criteria add to the snapshot, in criterion order."""

    cells: list[CalibrationCell] = field(default_factory=list)
    cascades: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocks: list[ScoreBlock] = field(default_factory=list)
    # Per criterion: its rows as columns (the rubric rows combine the output rows).
    rubric_parts: dict[int, _CriterionRows] = field(default_factory=dict)


PerJudge = dict[int, tuple[_JudgeScores, _Model | None, dict[str, Any]]]


def calibration_compute(
    inputs: CalibrationInputs,
    params: Mapping[str, Any],
    plan_version: int | None,
    fingerprint: str,
) -> CalibrationResult:
    """The calibration snapshot of `inputs` (module docstring; docs/calibration.md): per
    criterion, each judge version's fit and cells, the plan's cascade, the served rows; then
    the rubric rows."""
    st = _setting(inputs, params)
    trial = params.get("policy")
    trial_out: dict[str, Any] = {"exploratory": True, "policy": trial, "judges": {},
                                 "cascades": {}}
    out = _Output()
    for cid, crit in inputs.data.criteria.items():
        _criterion_calibrate(st, out, cid, crit, trial, trial_out, plan_version)
    rubric_block = _rubric_rows(out.rubric_parts, inputs, inputs.data, plan_version,
                                st.warnings)
    if rubric_block is not None:
        out.blocks.append(rubric_block)
    scores = ScoreRows(tuple(out.blocks))
    if params.get("curve_resamples", 0) == 0:
        st.warnings.append("P(pass) intervals not computed (curve_resamples = 0): p_low and "
                           "p_high are null")
    return CalibrationResult(
        version=CALIBRATION_RESULT_VERSION,
        plan_version=plan_version,
        fingerprint=fingerprint,
        params=dict(params),
        costs=st.costs,
        policy=st.policy,
        cells=tuple(out.cells),
        cascade=next(iter(out.cascades.values()), None),
        cascades=out.cascades,
        n_scores=len(scores),
        warnings=tuple(dict.fromkeys(st.warnings)),
        policy_trial=trial_out if trial is not None else None,
        scores=scores,
    )


def _setting(inputs: CalibrationInputs, params: Mapping[str, Any]) -> _Setting:
    data = inputs.data
    level = float(params["level"])
    min_labels = int(params["min_labels"])
    costs, policy = _plan_sections(inputs.plan_spec)
    cost_model = CostModel.from_json(costs)
    warnings: list[str] = []
    if costs["is_default"]:
        warnings.append("the analysis plan states no costs: the documented default scale is used")
    dims_asked = list(params.get("strata") or [])
    dims = [d for d in dims_asked if d in data.dimensions]
    for d in dims_asked:
        if d not in data.dimensions:
            warnings.append(f"strata dimension '{d}' is not in the study's scheme: ignored")
    subjects = _subject_table(data, dims)
    guaranteed = policy.get("kind") == "guaranteed_agreement"
    cascade_ids = _cascade_ids(policy.get("cascade") or [], data.judges, inputs.judge_hashes,
                               warnings) if guaranteed else []
    if not cost_model.severity_costs:
        raise ValueError("cost model without severity costs")  # pragma: no cover
    return _Setting(
        inputs=inputs, params=params, seed=int(params["seed"]), level=level,
        min_labels=min_labels,
        methods=tuple(cast(Sequence[CalibrationMethod], params["methods"])),
        options=BootstrapOptions(n_resamples=int(params["n_resamples"]), ci="percentile",
                                 level=level, min_items=min_labels),
        costs=costs, policy=policy, cost_model=cost_model,
        middle_cost=float(cost_model.severity_costs[2]), dims=dims, subjects=subjects,
        subj_cell=pd.Series(subjects.cell, index=subjects.index),
        subj_items=pd.Series(data.subjects["item"].to_numpy(dtype=np.int64),
                             index=subjects.index),
        guaranteed=guaranteed, cascade_ids=cascade_ids,
        score_mode=str(policy.get("score", "confidence")),
        grid=threshold_grid(policy.get("grid_step", 0.001)), warnings=warnings,
    )


def _criterion_calibrate(
    st: _Setting, out: _Output, cid: int, crit: Any, trial: Mapping[str, Any] | None,
    trial_out: dict[str, Any], plan_version: int | None,
) -> None:
    """One criterion: every judge version's fit and cells, the cascade, the served rows."""
    data = st.inputs.data
    rule = st.inputs.rules.get(cid)
    if rule is None:
        return
    if not _has_reading(rule):
        st.warnings.append(
            f"criterion '{crit.key}' has no pass/fail reading (no pass threshold or pass "
            "labels): not calibrated"
        )
        return
    rows = data.ratings[data.ratings["criterion"].to_numpy() == cid]
    if rows.empty:
        return
    humans = _humans(rows, rule, crit.values)
    evidence = rows.groupby("subject")["created_at"].max()
    judged_by = set(rows.loc[rows["is_judge"].to_numpy(dtype=bool), "rater"].tolist())
    jv_ids = [jv for jv in data.judges if jv in judged_by]
    if not jv_ids:
        return
    per_judge: PerJudge = {}
    losses: dict[int, float] = {}
    for jv in jv_ids:
        per_judge[jv] = _judge_calibrate(st, crit, rule, rows, humans, jv, losses)
    stages, cascade_thr = _cascade(st, out, crit, per_judge)
    for jv in jv_ids:
        out.cells.extend(per_judge[jv][2]["cells"].values())
    if trial is not None:
        _policy_trial(trial, trial_out, crit.key, rule, jv_ids, per_judge, data,
                      st.inputs.judge_hashes, st.warnings)
    # Which judge version serves each subject: the cascade order, else the best pooled
    # cross-validated log loss first (judges without a curve last).
    if st.guaranteed and stages:
        order = stages + [jv for jv in jv_ids if jv not in stages]
    else:
        order = sorted(jv_ids, key=lambda j: (losses.get(j, math.inf), j))
    preds = {jv: pred for jv in order
             if (pred := _served(per_judge[jv], cascade_thr.get(jv) if stages else None,
                                 bool(stages))) is not None}
    part = _criterion_rows(
        cid=cid, key=crit.key, rule=rule, order=order, per_judge=per_judge, preds=preds,
        humans=humans, evidence=evidence, subjects=st.subjects, guaranteed=st.guaranteed,
        cascade=bool(st.guaranteed and stages),
    )
    if part is not None:
        out.blocks.append(_score_block(part, study_id=st.inputs.study_id,
                                       judge_hashes=st.inputs.judge_hashes,
                                       plan_version=plan_version))
        out.rubric_parts[cid] = part


def _fit_rows(
    st: _Setting, rule: CriterionRule, humans: _Humans, js: _JudgeScores,
) -> _Fit:
    """The judge's scored subjects with a human consensus that may fit a curve."""
    cons = humans.consensus.reindex(js.subjects).to_numpy(dtype=np.float64)
    fit_mask = (
        humans.fit.reindex(js.subjects, fill_value=False).to_numpy(dtype=bool)
        & np.isfinite(cons) & np.isfinite(js.score)
    )
    if rule.scale == "pairwise":
        passed_all = np.where(np.isfinite(cons), (cons == js.side).astype(float), np.nan)
    else:
        passed_all = cons
    fsubj = js.subjects[fit_mask]
    row_cells = st.subj_cell.reindex(js.subjects).to_numpy(dtype=object)
    return _Fit(
        js=js, fit_mask=fit_mask, fx=js.score[fit_mask], fy=passed_all[fit_mask],
        fw=humans.weight.reindex(fsubj).to_numpy(dtype=np.float64), fsubj=fsubj,
        fgroups=st.subj_items.reindex(fsubj).to_numpy(dtype=np.int64),
        fcells=st.subj_cell.reindex(fsubj).to_numpy(dtype=object), row_cells=row_cells,
        present=sorted(str(c) for c in pd.unique(row_cells)),
    )


def _fit_model(st: _Setting, fit: _Fit, jv: int, crit: Any, display: str,
               losses: dict[int, float]) -> _Model | None:
    """The judge's calibration map on the criterion (hierarchical over the cells with strata),
    or None with fewer than min_labels labels; records its cross-validated log loss."""
    if fit.fx.size < st.min_labels:
        st.warnings.append(
            f"{display} on '{crit.key}': {fit.fx.size} human label(s), fewer than "
            f"min_labels = {st.min_labels}: too few labels, no calibrated scores"
        )
        return None
    rng_fit = _rng(st.seed, jv, crit.key, "fit")
    folds = int(st.params["folds"])
    if st.dims:
        hier = calibration_hierarchical(
            fit.fx, fit.fy, fit.fcells.astype(str), weights=fit.fw, groups=fit.fgroups,
            methods=st.methods, folds=folds, min_labels=st.min_labels, rng=rng_fit,
            all_strata=fit.present,
        )
        model = _Model(pooled=hier.pooled, hier=hier, heldout=hier.heldout())
        st.warnings.extend(f"{display} on '{crit.key}': {w}" for w in hier.warnings)
    else:
        sel = calibration_select(
            fit.fx, fit.fy, weights=fit.fw, groups=fit.fgroups, methods=st.methods,
            folds=folds, rng=rng_fit,
        )
        model = _Model(pooled=sel, hier=None, heldout=sel.heldout)
        st.warnings.extend(f"{display} on '{crit.key}': {w}" for w in sel.warnings)
    finite = [v for v in model.pooled.cv_log_loss.values() if math.isfinite(v)]
    losses[jv] = min(finite) if finite else math.inf
    return model


def _trust_scores(
    st: _Setting, fit: _Fit, rule: CriterionRule, crit: Any, display: str,
) -> tuple[tuple[FloatArray, FloatArray] | None, str, FloatArray, FloatArray]:
    """What the guaranteed-agreement policy thresholds (plan setting `score`): the judge's own
    confidence when it gave one, else (or by choice) the cross-fitted P(pass); returns the
    judge's raw confidence, the mode, and the fit rows' confidence and agreement."""
    raw = _raw_confidence(fit.js, rule) if st.score_mode == "confidence" else None
    if st.guaranteed and st.score_mode == "confidence" and raw is None:
        st.warnings.append(f"{display} on '{crit.key}': no probability on its "
                           "verdicts; the guaranteed-agreement policy thresholds its "
                           "calibrated P(pass) instead of its own confidence")
    tmode = "confidence" if raw is not None else "calibrated"
    if raw is not None:
        tconf_fit = raw[0][fit.fit_mask]
        tagree_fit = (raw[1][fit.fit_mask] == (fit.fy == 1.0)).astype(float)
    elif fit.model is not None:
        held_all = fit.model.heldout
        tconf_fit = np.maximum(held_all, 1.0 - held_all)
        tagree_fit = ((held_all >= 0.5) == (fit.fy == 1.0)).astype(float)
    else:
        tconf_fit = tagree_fit = np.zeros(0)
    return raw, tmode, tconf_fit, tagree_fit


def _judge_calibrate(
    st: _Setting, crit: Any, rule: CriterionRule, rows: pd.DataFrame, humans: _Humans,
    jv: int, losses: dict[int, float],
) -> tuple[_JudgeScores, _Model | None, dict[str, Any]]:
    """One judge version on one criterion: its scores, model, bands and every cell."""
    js, ties = _judge_scores(rows, jv, rule, crit.values)
    judge = st.inputs.data.judges[jv]
    if ties:
        st.warnings.append(
            f"{judge.display} on '{crit.key}': {ties} tie verdict(s) have no preferred "
            "side and get no calibrated score"
        )
    fit = _fit_rows(st, rule, humans, js)
    model = fit.model = _fit_model(st, fit, jv, crit, judge.display, losses)
    grid_x = _grid(js)
    cells_here = ["", *[c for c in fit.present if c != ""]] if st.dims else [""]
    bands: dict[str, tuple[FloatArray, FloatArray]] = {}
    if model is not None and int(st.params["curve_resamples"]) > 0:
        bands = _bands(
            model, fit.fx, fit.fy, fit.fw, fit.fgroups, grid_x, cells_here,
            resamples=int(st.params["curve_resamples"]), level=st.level,
            rng=_rng(st.seed, jv, crit.key, "bands"),
        )
    raw, tmode, tconf_fit, tagree_fit = _trust_scores(st, fit, rule, crit, judge.display)
    info: dict[str, Any] = {
        "cells": {}, "thresholds": {}, "bands": bands, "grid": grid_x,
        "row_cells": fit.row_cells, "n_by_cell": {}, "trust": None,
        "passed_fit": (fit.fsubj, fit.fy), "raw": raw, "tmode": tmode,
        "tfit": (tconf_fit, tagree_fit),
    }
    for label in cells_here:
        info["cells"][label] = _cell(st, fit, jv, crit, rule, humans, label, info,
                                     judge.display)
    return js, model, info


def _cell(
    st: _Setting, fit: _Fit, jv: int, crit: Any, rule: CriterionRule, humans: _Humans,
    label: str, info: dict[str, Any], display: str,
) -> CalibrationCell:
    """One cell of one judge version x criterion: figures, thresholds, policy costs, trust.
    Records the cell's thresholds, label count and (whole study) trust threshold in `info`."""
    model = fit.model
    in_cell = np.ones(fit.fx.size, bool) if label == "" else (fit.fcells == label)
    n_cell = int(in_cell.sum())
    info["n_by_cell"][label] = n_cell
    too_few = model is None or n_cell < st.min_labels
    figures: dict[str, Any] = {"diag_before": None, "diag_after": None, "conf_diag": None,
                               "fpc": None, "thr": None, "pol": None}
    crng = _rng(st.seed, jv, crit.key, label, "cell")
    if not too_few and model is not None:
        figures = _cell_figures(st, fit, model, rule, humans, in_cell, crng,
                                info["thresholds"])
        info["thresholds"][label] = figures["threshold"]
    trust_json = None
    if st.guaranteed and label == "" and model is not None and not st.cascade_ids:
        t_conf, t_agree = info["tfit"]
        trust = trust_threshold(
            t_conf, t_agree, alpha=float(st.policy["alpha"]),
            delta=float(st.policy["delta"]), min_count=int(st.policy["min_count"]),
            thresholds=st.grid,
        )
        info["trust"] = trust
        trust_json = {**trust.to_json(), "score": info["tmode"]}
    stratum = None
    if model is not None and model.hier is not None and label != "":
        stratum = model.hier.strata.get(label)
    method: str | None
    if too_few:
        method = own = borrowed = None
        pooled_only = True
    elif label == "" or stratum is None:
        method = model.pooled.method if model is not None else None
        own, borrowed, pooled_only = 1.0, 0.0, False
    else:
        method, own, borrowed, pooled_only = (
            stratum.method, stratum.own_weight, stratum.borrowed, stratum.pooled_only
        )
    conf_diag = figures["conf_diag"]
    return CalibrationCell(
        judge_version=jv, judge=display, criterion=crit.key, stratum=label,
        n_labels=n_cell, too_few_labels=too_few, method=method, own_weight=own,
        borrowed=borrowed, pooled_only=pooled_only,
        cv_log_loss=(dict(model.pooled.cv_log_loss)
                     if model is not None and label == "" else {}),
        diagnostics={"before": figures["diag_before"], "after": figures["diag_after"],
                     **({"confidence": conf_diag} if conf_diag else {})},
        curve=(_curve_json(model, label, info["grid"]) if not too_few
               else {"x": [], "y": []}),
        false_pass_cost=figures["fpc"], false_fail_cost=st.cost_model.reject_cost,
        thresholds=figures["thr"], policy_costs=figures["pol"], trust=trust_json,
    )


def _cell_figures(
    st: _Setting, fit: _Fit, model: _Model, rule: CriterionRule, humans: _Humans,
    in_cell: npt.NDArray[np.bool_], crng: np.random.Generator,
    thresholds_by_cell: Mapping[str, DecisionThresholds],
) -> dict[str, Any]:
    """A cell's diagnostics before and after, the cost of a false pass, the decision
    thresholds and the policies' costs (the cell has enough labels and a model)."""
    r_before, r_after, r_fpc, r_pol = crng.spawn(4)
    n_bins = int(st.params["n_bins"])
    options = st.options
    cy, cw, cg = fit.fy[in_cell], fit.fw[in_cell], fit.fgroups[in_cell]
    before = fit.js.before[fit.fit_mask][in_cell]
    diag_before = calibration_diagnostics(
        cy, before, weights=cw, clusters=cg, n_bins=n_bins, rng=r_before, options=options,
    ).to_json()
    held = model.heldout[in_cell]
    diag_after = calibration_diagnostics(
        cy, held, weights=cw, clusters=cg, n_bins=n_bins, rng=r_after, options=options,
    ).to_json()
    conf_diag: dict[str, Any] | None = None
    if rule.scale == "pairwise":
        # The usual figure for a pairwise judge: its confidence in the side it chose, binned
        # over [0.5, 1] (docs/statistics.md, "ECE").
        r_cb, r_ca = crng.spawn(2)
        conf_diag = {
            name: calibration_diagnostics(
                *confidence_of(cy, probs), weights=cw, clusters=cg,
                n_bins=n_bins, rng=r, options=options, low=0.5,
            ).to_json()
            for name, probs, r in (("before", before, r_cb), ("after", held, r_ca))
        }
    failed = cy == 0.0
    sev = humans.severity.reindex(fit.fsubj[in_cell][failed]).to_numpy(np.float64)
    # The held-out P(pass) of each failure: where severity depends on it, the cost of a false
    # pass is that of the failures the judge lets through.
    fpc = false_pass_cost(
        sev, costs=st.cost_model, weights=cw[failed], clusters=cg[failed],
        scores=np.clip(held[failed], 0.0, 1.0), rng=r_fpc, options=options,
    )
    e = fpc.expected.value
    if not math.isfinite(e):
        whole = thresholds_by_cell.get("")
        e = whole.fail_cost if whole is not None else st.middle_cost
    thr = decision_thresholds(
        fail_cost=e, reject_cost=st.cost_model.reject_cost,
        review_cost=st.cost_model.review_cost,
    )
    pol = policy_costs(
        cy, fit.js.raw_pass[fit.fit_mask][in_cell], held, thresholds=thr, weights=cw,
        clusters=cg, rng=r_pol, options=options,
    ).to_json()
    return {"diag_before": diag_before, "diag_after": diag_after, "conf_diag": conf_diag,
            "fpc": fpc.to_json(), "thr": thr.to_json(), "threshold": thr, "pol": pol}


def _cascade(
    st: _Setting, out: _Output, crit: Any, per_judge: PerJudge,
) -> tuple[list[int], dict[int, TrustThreshold]]:
    """The guaranteed-agreement cascade over the plan's judge versions (of this criterion):
    its stages and each stage's threshold (the stages' whole-study cells get their trust)."""
    data = st.inputs.data
    stages = [jv for jv in st.cascade_ids if jv in per_judge and per_judge[jv][1] is not None]
    cascade_thr: dict[int, TrustThreshold] = {}
    if not (st.guaranteed and stages):
        return stages, cascade_thr
    calib = np.unique(np.concatenate([per_judge[jv][2]["passed_fit"][0] for jv in stages]))
    confs, agrees = [], []
    for jv in stages:
        info = per_judge[jv][2]
        fsubj, _fy = info["passed_fit"]
        tc, ta = info["tfit"]
        conf_s = pd.Series(tc, index=fsubj).reindex(calib).to_numpy(np.float64)
        agree_s = pd.Series(ta, index=fsubj).reindex(calib).to_numpy(np.float64)
        # A stage that did not score a row cannot trust it (NaN is never trusted).
        confs.append(conf_s)
        agrees.append(np.where(np.isfinite(agree_s), agree_s, 0.0))
    result = trust_cascade(
        confs, agrees, alpha=float(st.policy["alpha"]), delta=float(st.policy["delta"]),
        min_count=int(st.policy["min_count"]), thresholds=st.grid,
    )
    out.cascades[crit.key] = {
        **result.to_json(), "judges": [data.judges[jv].display for jv in stages],
        "judge_versions": [{"judge": data.judges[jv].judge,
                            "version": data.judges[jv].version} for jv in stages],
        "scores": [per_judge[jv][2]["tmode"] for jv in stages],
    }
    for jv, stage in zip(stages, result.stages, strict=True):
        cascade_thr[jv] = stage
        info = per_judge[jv][2]
        info["cells"][""] = _with_trust(
            info["cells"][""], {**stage.to_json(), "score": info["tmode"]})
    return stages, cascade_thr


def _served(
    entry: tuple[_JudgeScores, _Model | None, dict[str, Any]],
    stage: TrustThreshold | None, cascade: bool,
) -> dict[str, Any] | None:
    """A judge version's served figures per scored subject: P(pass) and its band, whether its
    decision is trusted, and that decision (None without a model)."""
    js, model, info = entry
    if model is None:
        return None
    cells_arr = info["row_cells"]
    p = model.predict(js.score, cells_arr)
    low = np.full(p.size, np.nan)
    high = np.full(p.size, np.nan)
    for label, (lo_g, hi_g) in info["bands"].items():
        m = np.ones(p.size, bool) if model.hier is None else cells_arr == label
        if m.any():
            low[m] = np.interp(js.score[m], info["grid"], lo_g)
            high[m] = np.interp(js.score[m], info["grid"], hi_g)
    ok = np.isfinite(low)
    # A bootstrap band of a step function may miss its own point: widen it to cover.
    low[ok] = np.minimum(low[ok], p[ok])
    high[ok] = np.maximum(high[ok], p[ok])
    gate: TrustThreshold | None = stage if cascade else info["trust"]
    raw = info["raw"]
    if raw is not None:
        # Trusted on the judge's own confidence: the judge's own decision is served.
        conf, dpass = raw[0], raw[1]
    else:
        conf, dpass = np.maximum(p, 1.0 - p), (p >= 0.5).astype(np.float64)
    trusted_rows = gate.trusted(conf) if gate is not None else np.zeros(p.size, dtype=bool)
    return {"p": p, "low": low, "high": high, "trusted": trusted_rows, "dpass": dpass}


def _policy_trial(
    trial: Mapping[str, Any], out: dict[str, Any], key: str, rule: CriterionRule,
    jv_ids: Sequence[int], per_judge: Mapping[int, tuple[_JudgeScores, _Model | None,
                                                         dict[str, Any]]],
    data: Any, hashes: Mapping[int, str], warnings: list[str],
) -> None:
    """The guaranteed-agreement policy `trial` (the exploratory report parameter) on one
    criterion's labelled rows: each judge's threshold and, with a cascade, the cascade.
    Nothing here reaches the served decisions, which follow the plan's policy."""
    if trial.get("kind") != "guaranteed_agreement":
        return
    grid = threshold_grid(trial.get("grid_step", 0.001))
    inputs: dict[int, tuple[FloatArray, FloatArray, npt.NDArray[np.int64], str]] = {}
    for jv in jv_ids:
        js, model, info = per_judge[jv]
        fsubj, fy = info["passed_fit"]
        raw = _raw_confidence(js, rule) if trial.get("score") == "confidence" else None
        fit_mask = np.isin(js.subjects, fsubj)
        if raw is not None:
            conf, agree, mode = raw[0][fit_mask], (raw[1][fit_mask] == (fy == 1.0)), "confidence"
        elif model is not None:
            held = model.heldout
            conf, agree, mode = np.maximum(held, 1 - held), (held >= 0.5) == (fy == 1.0), \
                "calibrated"
        else:
            continue
        inputs[jv] = (conf, agree.astype(float), fsubj, mode)
        t = trust_threshold(conf, agree.astype(float), alpha=float(trial["alpha"]),
                            delta=float(trial["delta"]), min_count=int(trial["min_count"]),
                            thresholds=grid)
        out["judges"].setdefault(key, {})[data.judges[jv].display] = {**t.to_json(),
                                                                      "score": mode}
    stages = [jv for jv in _cascade_ids(trial.get("cascade") or [], data.judges, hashes,
                                        warnings) if jv in inputs]
    if stages:
        calib = np.unique(np.concatenate([inputs[jv][2] for jv in stages]))
        confs = [pd.Series(inputs[jv][0], index=inputs[jv][2]).reindex(calib)
                 .to_numpy(np.float64) for jv in stages]
        agrees = [np.nan_to_num(pd.Series(inputs[jv][1], index=inputs[jv][2]).reindex(calib)
                                .to_numpy(np.float64)) for jv in stages]
        res = trust_cascade(confs, agrees, alpha=float(trial["alpha"]),
                            delta=float(trial["delta"]), min_count=int(trial["min_count"]),
                            thresholds=grid)
        out["cascades"][key] = {**res.to_json(),
                                "judges": [data.judges[jv].display for jv in stages]}


def _with_trust(cell: CalibrationCell, trust: dict[str, Any]) -> CalibrationCell:
    from dataclasses import replace

    return replace(cell, trust=trust)


def rubric_aggregate(
    p: Sequence[float], gates: Sequence[bool], weights: Sequence[float]
) -> float:
    """P(output passes the rubric) from its criteria's P(pass), ASSUMING INDEPENDENCE.

    Hard gates must all pass: their probabilities multiply. The other criteria count by their
    rubric weights: their factor is the weighted mean P(pass), the expected weighted share of
    them passed (equivalently: the probability that a criterion drawn in proportion to its
    weight passes). The product of the gate factor and that mean treats the criteria as
    independent given the judge's scores; failures that go together (a wrong answer is often
    unhelpful too) make the true joint probability of passing every gate higher than the
    product, so the aggregate is conservative for gates. Without non-gate criteria (or with
    all their weights 0) the factor is 1.
    """
    gate = 1.0
    num = den = 0.0
    for pi, g, w in zip(p, gates, weights, strict=True):
        if g:
            gate *= pi
        else:
            num += w * pi
            den += w
    rest = num / den if den > 0 else 1.0
    return gate * rest


# --- the per-row steps (vectorised over whole criteria) -------------------------------------

# The functions that build the calibrated-score rows (bench/calibration.py times them).
ROW_STEPS = ("_criterion_rows", "_rubric_rows", "_score_block")



@dataclass
class _SubjectTable:
    """Per subject of the study (the rows of `data.subjects`): what its rows carry."""

    index: pd.Index  # subject codes
    candidate: npt.NDArray[np.int64]
    cell: npt.NDArray[np.object_]  # calibration cell label
    # The item's labels per dimension: one dict per distinct combination, shared by the rows
    # of its items (rows are read, never changed).
    labels: npt.NDArray[np.object_]


def _subject_table(data: RatingData, dims: Sequence[str]) -> _SubjectTable:
    items = data.items
    columns = [items[d].astype(str).tolist() for d in data.dimensions]
    combos: list[tuple[str, ...]] = (
        list(zip(*columns, strict=True)) if columns else [()] * len(items)
    )
    # A study has a handful of label combinations: one dict and one cell label each.
    code_of: dict[tuple[str, ...], int] = {}
    codes = np.array([code_of.setdefault(c, len(code_of)) for c in combos], dtype=np.intp)
    # The last slot: an item not in `items` (no labels, the whole-study cell).
    labels_of = np.empty(len(code_of) + 1, dtype=object)
    cell_of = np.empty(len(code_of) + 1, dtype=object)
    for combo, k in code_of.items():
        labels_of[k] = dict(zip(data.dimensions, combo, strict=True))
        cell_of[k] = cell_label(labels_of[k], dims)
    labels_of[-1], cell_of[-1] = {}, ""
    item_code = np.append(codes, len(code_of))
    subj = data.subjects
    # Position of each subject's item in `items`; an item not there gets the last slot
    # (no labels, the whole-study cell).
    pos = items.index.get_indexer(subj["item"].to_numpy(dtype=np.int64))
    code = item_code[np.where(pos >= 0, pos, len(items))]
    return _SubjectTable(
        index=subj.index,
        candidate=subj["candidate"].to_numpy(dtype=np.int64),
        cell=cell_of[code],
        labels=labels_of[code],
    )


def _gather(values: npt.NDArray[Any], pos: npt.NDArray[np.intp], fill: Any) -> npt.NDArray[Any]:
    """values[pos] with `fill` where pos < 0."""
    out = values[np.where(pos >= 0, pos, 0)] if values.size else np.empty(pos.size, values.dtype)
    if values.dtype == object:
        out = out.astype(object)
        out[pos < 0] = fill
    else:
        out = np.where(pos >= 0, out, fill)
    return out


@dataclass
class _CriterionRows:
    """The calibrated-score rows of one criterion as columns, one entry per row (rows in
    subject order); `_score_block` makes them the rows' `ScoreBlock`, `_rubric_rows`
    combines the output rows of the rubric's criteria."""

    cid: int
    key: str
    rule: CriterionRule
    subject: npt.NDArray[np.int64]
    candidate: npt.NDArray[np.int64]  # -1: none
    judge_version: npt.NDArray[np.int64]
    cell: npt.NDArray[np.object_]
    labels: npt.NDArray[np.object_]
    raw_codes: npt.NDArray[np.intp]  # into raw_uniques
    raw_uniques: tuple[str, ...]
    raw_confidence: FloatArray
    p_pass: FloatArray
    p_low: FloatArray  # NaN: none
    p_high: FloatArray
    decision: npt.NDArray[np.object_]
    expected_cost: FloatArray
    source: npt.NDArray[np.object_]
    n_labels: npt.NDArray[np.int64]
    evidence: pd.Series  # the newest evidence behind the row (NaT: none), by row position


def _criterion_rows(
    *,
    cid: int,
    key: str,
    rule: CriterionRule,
    order: Sequence[int],
    per_judge: Mapping[int, tuple[_JudgeScores, _Model | None, dict[str, Any]]],
    preds: Mapping[int, Mapping[str, Any]],
    humans: _Humans,
    evidence: pd.Series,
    subjects: _SubjectTable,
    guaranteed: bool,
    cascade: bool,
) -> _CriterionRows | None:
    """Which judge version serves each subject of one criterion, and its row (docs).

    Per subject: the first judge version in `order` with a curve that scored it; under a
    cascade, the first stage that trusts it (else the first stage that scored it,
    escalated). Subjects scored only by judge versions without a curve keep a row only when
    humans decided them. A human consensus decides its subject ("human", P(pass) 0 or 1).
    Judge rows are decided per (judge version, cell) with that cell's thresholds (else the
    whole study's), elementwise as `decide` and `expected_decision_cost` define.
    """
    if not order:
        return None
    all_s = np.unique(np.concatenate([per_judge[jv][0].subjects for jv in order]))
    n = all_s.size
    jv_of = np.full(n, -1, dtype=np.int64)
    k_of = np.full(n, -1, dtype=np.int64)
    chosen = np.zeros(n, dtype=bool)  # a judge version with a curve scored it
    final = np.zeros(n, dtype=bool)  # ... and serves it (no later stage may take it)
    positions: dict[int, npt.NDArray[np.intp]] = {}
    for jv in order:
        js = per_judge[jv][0]
        pos = pd.Index(js.subjects).get_indexer(all_s)
        positions[jv] = pos
        pr = preds.get(jv)
        if pr is None:
            continue
        has = pos >= 0
        first = has & ~chosen
        jv_of[first], k_of[first] = jv, pos[first]
        chosen |= first
        take = has & ~final
        if cascade:
            take &= _gather(np.asarray(pr["trusted"], dtype=bool), pos, False)
        jv_of[take], k_of[take] = jv, pos[take]
        final |= take
    # No curve scored it: the first judge version in `order` that did (for a human row).
    for jv in order:
        pos = positions[jv]
        m = (jv_of < 0) & (pos >= 0)
        jv_of[m], k_of[m] = jv, pos[m]

    cons = humans.consensus.reindex(all_s).to_numpy(dtype=np.float64)
    has_human = np.isfinite(cons)
    keep = has_human | chosen
    all_s, jv_of, k_of, cons = all_s[keep], jv_of[keep], k_of[keep], cons[keep]
    has_human, chosen = has_human[keep], chosen[keep]
    n = all_s.size
    if n == 0:
        return None

    side = np.full(n, np.nan)
    value = np.empty(n, dtype=object)
    prob = np.full(n, np.nan)
    p = np.full(n, np.nan)
    low = np.full(n, np.nan)
    high = np.full(n, np.nan)
    trusted = np.zeros(n, dtype=bool)
    dpass = np.full(n, np.nan)
    for jv in order:
        m = jv_of == jv
        if not m.any():
            continue
        js = per_judge[jv][0]
        k = k_of[m]
        side[m], value[m], prob[m] = js.side[k], js.value[k], js.probability[k]
        pr = preds.get(jv)
        if pr is not None:
            p[m], low[m], high[m] = pr["p"][k], pr["low"][k], pr["high"][k]
            trusted[m] = pr["trusted"][k]
            dpass[m] = pr["dpass"][k]
    if rule.scale == "pairwise":
        human_pass = np.where(has_human, (cons == side).astype(np.float64), np.nan)
    else:
        human_pass = cons

    spos = subjects.index.get_indexer(all_s)
    cell = _gather(subjects.cell, spos, "")
    labels = _gather(subjects.labels, spos, None)
    for i in np.flatnonzero(spos < 0).tolist():
        labels[i] = {}
    candidate = _gather(subjects.candidate, spos, -1).astype(np.int64)

    decision = np.full(n, "human", dtype=object)
    cost = np.zeros(n)
    n_labels = np.array(humans.n_labels.reindex(all_s, fill_value=0), dtype=np.int64)
    source = np.array(humans.source.reindex(all_s), dtype=object)
    source[pd.isna(source)] = "human"
    p_pass, p_low, p_high = human_pass.copy(), human_pass.copy(), human_pass.copy()
    judged = chosen & ~has_human
    for jv in order:
        mj = judged & (jv_of == jv)
        if not mj.any():
            continue
        info = per_judge[jv][2]
        for label in pd.unique(cell[mj]):
            m = mj & (cell == label)
            thr = info["thresholds"].get(label) or info["thresholds"][""]
            pm = p[m]
            if guaranteed:
                dec = np.where(trusted[m], np.where(dpass[m] == 1.0, "pass", "fail"),
                               "escalate")
            else:
                dec = decide(pm, thresholds=thr)
            decision[m] = dec.astype(object)
            cost[m] = expected_decision_cost(
                pm, dec, fail_cost=thr.fail_cost, reject_cost=thr.reject_cost,
                review_cost=thr.review_cost,
            )
            n_labels[m] = int(info["n_by_cell"].get(label, 0))
    p_pass[judged], p_low[judged], p_high[judged] = p[judged], low[judged], high[judged]
    source[judged] = "judge"

    raw_codes, raw_uniques = pd.factorize(pd.Series(value, dtype=object), use_na_sentinel=False)
    return _CriterionRows(
        cid=cid, key=key, rule=rule, subject=all_s, candidate=candidate, judge_version=jv_of,
        cell=cell, labels=labels, raw_codes=np.asarray(raw_codes, dtype=np.intp),
        raw_uniques=tuple(str(v)[:64] for v in raw_uniques), raw_confidence=prob,
        p_pass=p_pass, p_low=p_low, p_high=p_high, decision=decision, expected_cost=cost,
        source=source, n_labels=n_labels, evidence=evidence.reindex(all_s).reset_index(drop=True),
    )


def _utc_us(values: pd.Series) -> npt.NDArray[np.datetime64]:
    """A timestamp column as datetime64[us] in UTC (naive), NaT kept."""
    index = pd.DatetimeIndex(values)
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    return index.as_unit("us").to_numpy()


def _score_block(
    part: _CriterionRows, *, study_id: int, judge_hashes: Mapping[int, str],
    plan_version: int | None,
) -> ScoreBlock:
    """The rows (`ScoreBlock`) of one criterion's columns."""
    return ScoreBlock(
        study_id=study_id, subject=part.subject, candidate=part.candidate,
        criterion_id=part.cid, criterion_key=part.key, judge_version=part.judge_version,
        judge_hashes=judge_hashes, stratum=part.cell, strata=part.labels,
        raw_codes=part.raw_codes, raw_uniques=part.raw_uniques,
        raw_confidence=part.raw_confidence, p_pass=part.p_pass, p_low=part.p_low,
        p_high=part.p_high, decision=part.decision, expected_cost=part.expected_cost,
        source=part.source, plan_version=plan_version, n_labels=part.n_labels,
        evidence_at=_utc_us(part.evidence),
    )


def _output_ids(codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The output ids among subject codes (comparisons left out), in their order."""
    is_comparison, ids = subject_split(codes)
    return ids[~is_comparison]


def _rubric_rows(
    parts: Mapping[int, _CriterionRows],
    inputs: CalibrationInputs,
    data: RatingData,
    plan_version: int | None,
    warnings: list[str],
) -> ScoreBlock | None:
    """One "rubric" row per output that has a calibrated row for every pass/fail criterion of
    the study's latest rubric version (docs/calibration.md); none when the snapshot leaves one
    of those criteria out (``params.criteria``) or calibrated none of them."""
    needed = list(inputs.rubric_criteria)
    output_ids = {cid: _output_ids(part.subject) for cid, part in parts.items()}
    every = (np.unique(np.concatenate(list(output_ids.values()))) if output_ids
             else np.empty(0, dtype=np.int64))
    if not needed or every.size == 0:
        return None
    left_out = [cid for cid in needed if cid not in data.criteria]
    if left_out:
        warnings.append(
            "the snapshot does not cover every pass/fail criterion of the rubric: no rubric rows"
        )
        return None
    # Row of each output in each needed criterion's columns (-1: none).
    at: dict[int, npt.NDArray[np.intp]] = {}
    for cid in needed:
        if cid not in parts:
            at[cid] = np.full(every.size, -1, dtype=np.intp)
            continue
        rows_of = np.flatnonzero(~subject_split(parts[cid].subject)[0])
        pos = pd.Index(output_ids[cid]).get_indexer(every)
        at[cid] = np.where(pos >= 0, rows_of[np.where(pos >= 0, pos, 0)], -1)
    complete = np.logical_and.reduce([at[cid] >= 0 for cid in needed])
    missing = int((~complete).sum())
    outs = every[complete]
    out: ScoreBlock | None = None
    if outs.size:
        cols = [(parts[cid], at[cid][complete]) for cid in needed]
        gates = [part.rule.is_hard_gate for part, _ in cols]
        weights = [part.rule.weight for part, _ in cols]
        p = [part.p_pass[k] for part, k in cols]
        lows = [part.p_low[k] for part, k in cols]
        highs = [part.p_high[k] for part, k in cols]
        rule = inputs.rubric_rule
        agg = rubric_predictor_columns(p, gates, weights, rule)
        # The aggregate increases in every P(pass): the ends at the criteria's ends bound it.
        agg_low = rubric_predictor_columns(lows, gates, weights, rule)
        agg_high = rubric_predictor_columns(highs, gates, weights, rule)
        agg_low[~np.logical_and.reduce([np.isfinite(v) for v in lows])] = np.nan
        agg_high[~np.logical_and.reduce([np.isfinite(v) for v in highs])] = np.nan
        decisions = [part.decision[k] for part, k in cols]
        is_human = [d == "human" for d in decisions]
        outcome = [np.where(h, pi >= 0.5, d == "pass")
                   for h, pi, d in zip(is_human, p, decisions, strict=True)]
        escalate = np.logical_or.reduce([d == "escalate" for d in decisions])
        all_human = np.logical_and.reduce(is_human)
        gate_failed = np.zeros(outs.size, dtype=bool)
        share_num = np.zeros(outs.size)
        share_den = 0.0
        for g, w, ok in zip(gates, weights, outcome, strict=True):
            if g:
                gate_failed |= ~ok
            else:
                share_num = share_num + np.where(ok, w, 0.0)
                share_den += w
        share = share_num / share_den if share_den > 0 else np.ones(outs.size)
        # The rubric's rule (calibration.frames.rubric_rule): every criterion must pass, or
        # the gates and the stated share of the others by weight.
        if rule.get("kind") == "weighted":
            passed = ~gate_failed & (share >= float(rule["pass_share"]) - 1e-12)
        else:
            passed = np.logical_and.reduce(outcome)
        decision = np.where(
            escalate, "escalate",
            np.where(all_human, "human", np.where(passed, "pass", "fail")),
        )
        sources = [part.source[k] for part, k in cols]
        any_judge = np.logical_or.reduce([s == "judge" for s in sources])
        any_adjudicated = np.logical_or.reduce([s == "adjudicated" for s in sources])
        source = np.where(any_judge, "judge", np.where(any_adjudicated, "adjudicated", "human"))
        cost = np.zeros(outs.size)
        for part, k in cols:
            cost = cost + part.expected_cost[k]
        n_labels = np.minimum.reduce([part.n_labels[k] for part, k in cols])
        stamps = pd.concat(
            [part.evidence.iloc[k].reset_index(drop=True) for part, k in cols], axis=1
        ).max(axis=1)
        first, k0 = cols[0]
        n = outs.size
        out = ScoreBlock(
            study_id=inputs.study_id, subject=(outs * 2).astype(np.int64),
            candidate=first.candidate[k0], criterion_id=None, criterion_key=RUBRIC_KEY,
            judge_version=np.full(n, -1, dtype=np.int64), judge_hashes={},
            stratum=first.cell[k0], strata=first.labels[k0],
            raw_codes=np.zeros(n, dtype=np.intp), raw_uniques=("",),
            raw_confidence=np.full(n, np.nan), p_pass=np.minimum(1.0, np.maximum(0.0, agg)),
            p_low=agg_low, p_high=agg_high, decision=decision.astype(object),
            expected_cost=cost, source=source.astype(object), plan_version=plan_version,
            n_labels=n_labels.astype(np.int64), evidence_at=_utc_us(stamps),
        )
    if missing:
        warnings.append(
            f"{missing} output(s) lack a calibrated score for some rubric criterion: no rubric "
            "row for them"
        )
    return out


__all__ = [
    "RUBRIC_KEY",
    "CalibrationInputs",
    "CriterionRule",
    "calibration_compute",
    "calibration_fingerprint",
    "calibration_inputs_load",
    "cell_label",
    "rubric_aggregate",
]
