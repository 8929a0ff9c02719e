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


def calibration_compute(
    inputs: CalibrationInputs,
    params: Mapping[str, Any],
    plan_version: int | None,
    fingerprint: str,
) -> CalibrationResult:
    """The calibration snapshot of `inputs` (module docstring; docs/calibration.md)."""
    data = inputs.data
    seed = int(params["seed"])
    level = float(params["level"])
    min_labels = int(params["min_labels"])
    methods = tuple(cast(Sequence[CalibrationMethod], params["methods"]))
    options = BootstrapOptions(
        n_resamples=int(params["n_resamples"]), ci="percentile", level=level,
        min_items=min_labels,
    )
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
    subj_cell = pd.Series(subjects.cell, index=subjects.index)
    subj_items = pd.Series(data.subjects["item"].to_numpy(dtype=np.int64), index=subjects.index)
    r = data.ratings
    guaranteed = policy.get("kind") == "guaranteed_agreement"
    cascade_ids = _cascade_ids(policy.get("cascade") or [], data.judges, inputs.judge_hashes,
                               warnings) if guaranteed else []
    score_mode = str(policy.get("score", "confidence"))
    trial = params.get("policy")
    trial_out: dict[str, Any] = {"exploratory": True, "policy": trial, "judges": {},
                                 "cascades": {}}
    grid = threshold_grid(policy.get("grid_step", 0.001))

    cells_out: list[CalibrationCell] = []
    cascades: dict[str, dict[str, Any]] = {}
    blocks: list[ScoreBlock] = []
    # Per criterion: its rows as columns (the rubric rows combine the output rows).
    rubric_parts: dict[int, _CriterionRows] = {}
    if not cost_model.severity_costs:
        raise ValueError("cost model without severity costs")  # pragma: no cover
    middle_cost = float(cost_model.severity_costs[2])

    for cid, crit in data.criteria.items():
        rule = inputs.rules.get(cid)
        if rule is None:
            continue
        if not _has_reading(rule):
            warnings.append(
                f"criterion '{crit.key}' has no pass/fail reading (no pass threshold or pass "
                "labels): not calibrated"
            )
            continue
        rows = r[r["criterion"].to_numpy() == cid]
        if rows.empty:
            continue
        humans = _humans(rows, rule, crit.values)
        evidence = rows.groupby("subject")["created_at"].max()
        judged_by = set(rows.loc[rows["is_judge"].to_numpy(dtype=bool), "rater"].tolist())
        jv_ids = [jv for jv in data.judges if jv in judged_by]
        if not jv_ids:
            continue
        per_judge: dict[int, tuple[_JudgeScores, _Model | None, dict[str, Any]]] = {}
        losses: dict[int, float] = {}
        for jv in jv_ids:
            js, ties = _judge_scores(rows, jv, rule, crit.values)
            judge = data.judges[jv]
            if ties:
                warnings.append(
                    f"{judge.display} on '{crit.key}': {ties} tie verdict(s) have no preferred "
                    "side and get no calibrated score"
                )
            cons = humans.consensus.reindex(js.subjects).to_numpy(dtype=np.float64)
            fit_mask = (
                humans.fit.reindex(js.subjects, fill_value=False).to_numpy(dtype=bool)
                & np.isfinite(cons) & np.isfinite(js.score)
            )
            if rule.scale == "pairwise":
                passed_all = np.where(np.isfinite(cons), (cons == js.side).astype(float), np.nan)
            else:
                passed_all = cons
            fx = js.score[fit_mask]
            fy = passed_all[fit_mask]
            fw = humans.weight.reindex(js.subjects[fit_mask]).to_numpy(dtype=np.float64)
            fsubj = js.subjects[fit_mask]
            fgroups = subj_items.reindex(fsubj).to_numpy(dtype=np.int64)
            fcells = subj_cell.reindex(fsubj).to_numpy(dtype=object)
            row_cells = subj_cell.reindex(js.subjects).to_numpy(dtype=object)
            present = sorted(str(c) for c in pd.unique(row_cells))
            rng_fit = _rng(seed, jv, crit.key, "fit")
            model: _Model | None = None
            if fx.size >= min_labels:
                if dims:
                    hier = calibration_hierarchical(
                        fx, fy, fcells.astype(str), weights=fw, groups=fgroups, methods=methods,
                        folds=int(params["folds"]), min_labels=min_labels, rng=rng_fit,
                        all_strata=present,
                    )
                    model = _Model(pooled=hier.pooled, hier=hier, heldout=hier.heldout())
                    warnings.extend(f"{judge.display} on '{crit.key}': {w}" for w in hier.warnings)
                else:
                    sel = calibration_select(
                        fx, fy, weights=fw, groups=fgroups, methods=methods,
                        folds=int(params["folds"]), rng=rng_fit,
                    )
                    model = _Model(pooled=sel, hier=None, heldout=sel.heldout)
                    warnings.extend(f"{judge.display} on '{crit.key}': {w}" for w in sel.warnings)
                finite = [v for v in model.pooled.cv_log_loss.values() if math.isfinite(v)]
                losses[jv] = min(finite) if finite else math.inf
            else:
                warnings.append(
                    f"{judge.display} on '{crit.key}': {fx.size} human label(s), fewer than "
                    f"min_labels = {min_labels}: too few labels, no calibrated scores"
                )
            grid_x = _grid(js)
            cells_here = ["", *[c for c in present if c != ""]] if dims else [""]
            bands: dict[str, tuple[FloatArray, FloatArray]] = {}
            if model is not None and int(params["curve_resamples"]) > 0:
                bands = _bands(
                    model, fx, fy, fw, fgroups, grid_x, cells_here,
                    resamples=int(params["curve_resamples"]), level=level,
                    rng=_rng(seed, jv, crit.key, "bands"),
                )
            # What the guaranteed-agreement policy thresholds (plan setting `score`): the judge's
            # own confidence when it gave one, else (or by choice) the cross-fitted P(pass).
            raw = _raw_confidence(js, rule) if score_mode == "confidence" else None
            if guaranteed and score_mode == "confidence" and raw is None:
                warnings.append(f"{judge.display} on '{crit.key}': no probability on its "
                                "verdicts; the guaranteed-agreement policy thresholds its "
                                "calibrated P(pass) instead of its own confidence")
            tmode = "confidence" if raw is not None else "calibrated"
            if raw is not None:
                tconf_fit = raw[0][fit_mask]
                tagree_fit = (raw[1][fit_mask] == (fy == 1.0)).astype(float)
            elif model is not None:
                held_all = model.heldout
                tconf_fit = np.maximum(held_all, 1.0 - held_all)
                tagree_fit = ((held_all >= 0.5) == (fy == 1.0)).astype(float)
            else:
                tconf_fit = tagree_fit = np.zeros(0)
            # Cells: figures, thresholds, policy costs, trust.
            thresholds_by_cell: dict[str, DecisionThresholds] = {}
            n_by_cell: dict[str, int] = {}
            trust: TrustThreshold | None = None
            cell_json: dict[str, CalibrationCell] = {}
            for label in cells_here:
                in_cell = np.ones(fx.size, bool) if label == "" else (fcells == label)
                n_cell = int(in_cell.sum())
                n_by_cell[label] = n_cell
                too_few = model is None or n_cell < min_labels
                st = None
                if model is not None and model.hier is not None and label != "":
                    st = model.hier.strata.get(label)
                crng = _rng(seed, jv, crit.key, label, "cell")
                r_before, r_after, r_fpc, r_pol = crng.spawn(4)
                diag_before = diag_after = fpc_json = pol_json = thr_json = None
                conf_diag: dict[str, Any] | None = None
                if not too_few and model is not None:
                    cy, cw, cg = fy[in_cell], fw[in_cell], fgroups[in_cell]
                    diag_before = calibration_diagnostics(
                        cy, js.before[fit_mask][in_cell], weights=cw, clusters=cg,
                        n_bins=int(params["n_bins"]), rng=r_before, options=options,
                    ).to_json()
                    held = model.heldout[in_cell]
                    diag_after = calibration_diagnostics(
                        cy, held, weights=cw, clusters=cg, n_bins=int(params["n_bins"]),
                        rng=r_after, options=options,
                    ).to_json()
                    if rule.scale == "pairwise":
                        # The usual figure for a pairwise judge: its confidence in the side it
                        # chose, binned over [0.5, 1] (docs/statistics.md, "ECE").
                        r_cb, r_ca = crng.spawn(2)
                        conf_diag = {
                            name: calibration_diagnostics(
                                *confidence_of(cy, probs), weights=cw, clusters=cg,
                                n_bins=int(params["n_bins"]), rng=r, options=options, low=0.5,
                            ).to_json()
                            for name, probs, r in (
                                ("before", js.before[fit_mask][in_cell], r_cb),
                                ("after", held, r_ca))
                        }
                    failed = cy == 0.0
                    sev = humans.severity.reindex(fsubj[in_cell][failed]).to_numpy(np.float64)
                    # The held-out P(pass) of each failure: where severity depends on it,
                    # the cost of a false pass is that of the failures the judge lets through.
                    fpc = false_pass_cost(
                        sev, costs=cost_model, weights=cw[failed], clusters=cg[failed],
                        scores=np.clip(held[failed], 0.0, 1.0), rng=r_fpc, options=options,
                    )
                    fpc_json = fpc.to_json()
                    e = fpc.expected.value
                    if not math.isfinite(e):
                        whole = thresholds_by_cell.get("")
                        e = whole.fail_cost if whole is not None else middle_cost
                    thr = decision_thresholds(
                        fail_cost=e, reject_cost=cost_model.reject_cost,
                        review_cost=cost_model.review_cost,
                    )
                    thresholds_by_cell[label] = thr
                    thr_json = thr.to_json()
                    pol_json = policy_costs(
                        cy, js.raw_pass[fit_mask][in_cell], held, thresholds=thr, weights=cw,
                        clusters=cg, rng=r_pol, options=options,
                    ).to_json()
                trust_json = None
                if guaranteed and label == "" and model is not None and not cascade_ids:
                    t_conf, t_agree = tconf_fit, tagree_fit
                    trust = trust_threshold(
                        t_conf, t_agree, alpha=float(policy["alpha"]),
                        delta=float(policy["delta"]), min_count=int(policy["min_count"]),
                        thresholds=grid,
                    )
                    trust_json = {**trust.to_json(), "score": tmode}
                method: str | None
                if too_few:
                    method = own = borrowed = None
                    pooled_only = True
                elif label == "" or st is None:
                    method = model.pooled.method if model is not None else None
                    own, borrowed, pooled_only = 1.0, 0.0, False
                else:
                    method, own, borrowed, pooled_only = (
                        st.method, st.own_weight, st.borrowed, st.pooled_only
                    )
                cell_json[label] = CalibrationCell(
                    judge_version=jv, judge=judge.display, criterion=crit.key, stratum=label,
                    n_labels=n_cell, too_few_labels=too_few, method=method, own_weight=own,
                    borrowed=borrowed, pooled_only=pooled_only,
                    cv_log_loss=(dict(model.pooled.cv_log_loss)
                                 if model is not None and label == "" else {}),
                    diagnostics={"before": diag_before, "after": diag_after,
                                 **({"confidence": conf_diag} if conf_diag else {})},
                    curve=(_curve_json(model, label, grid_x) if not too_few
                           else {"x": [], "y": []}),
                    false_pass_cost=fpc_json, false_fail_cost=cost_model.reject_cost,
                    thresholds=thr_json, policy_costs=pol_json, trust=trust_json,
                )
            per_judge[jv] = (js, model, {
                "cells": cell_json, "thresholds": thresholds_by_cell, "bands": bands,
                "grid": grid_x, "row_cells": row_cells, "n_by_cell": n_by_cell, "trust": trust,
                "passed_fit": (fsubj, fy), "raw": raw, "tmode": tmode,
                "tfit": (tconf_fit, tagree_fit),
            })

        # The guaranteed-agreement cascade over the plan's judge versions (of this criterion).
        stages = [jv for jv in cascade_ids if jv in per_judge and per_judge[jv][1] is not None]
        cascade_thr: dict[int, TrustThreshold] = {}
        if guaranteed and stages:
            calib = np.unique(np.concatenate([per_judge[jv][2]["passed_fit"][0] for jv in stages]))
            confs, agrees = [], []
            for jv in stages:
                js, model, info = per_judge[jv]
                fsubj, fy = info["passed_fit"]
                tc, ta = info["tfit"]
                conf_s = pd.Series(tc, index=fsubj).reindex(calib).to_numpy(np.float64)
                agree_s = pd.Series(ta, index=fsubj).reindex(calib).to_numpy(np.float64)
                # A stage that did not score a row cannot trust it (NaN is never trusted).
                confs.append(conf_s)
                agrees.append(np.where(np.isfinite(agree_s), agree_s, 0.0))
            result = trust_cascade(
                confs, agrees, alpha=float(policy["alpha"]), delta=float(policy["delta"]),
                min_count=int(policy["min_count"]), thresholds=grid,
            )
            names = [data.judges[jv].display for jv in stages]
            cascades[crit.key] = {
                **result.to_json(), "judges": names,
                "judge_versions": [{"judge": data.judges[jv].judge,
                                    "version": data.judges[jv].version} for jv in stages],
                "scores": [per_judge[jv][2]["tmode"] for jv in stages],
            }
            for jv, stage in zip(stages, result.stages, strict=True):
                cascade_thr[jv] = stage
                info = per_judge[jv][2]
                info["cells"][""] = _with_trust(
                    info["cells"][""], {**stage.to_json(), "score": info["tmode"]})
        for jv in jv_ids:
            cells_out.extend(per_judge[jv][2]["cells"].values())
        if trial is not None:
            _policy_trial(trial, trial_out, crit.key, rule, jv_ids, per_judge, data,
                          inputs.judge_hashes, warnings)

        # Which judge version serves each subject: the cascade order, else the best pooled
        # cross-validated log loss first (judges without a curve last).
        if guaranteed and stages:
            order = stages + [jv for jv in jv_ids if jv not in stages]
        else:
            order = sorted(jv_ids, key=lambda j: (losses.get(j, math.inf), j))
        preds: dict[int, dict[str, Any]] = {}
        for jv in order:
            js, model, info = per_judge[jv]
            if model is None:
                continue
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
            gate: TrustThreshold | None = cascade_thr.get(jv) if stages else info["trust"]
            raw = info["raw"]
            if raw is not None:
                # Trusted on the judge's own confidence: the judge's own decision is served.
                conf, dpass = raw[0], raw[1]
            else:
                conf, dpass = np.maximum(p, 1.0 - p), (p >= 0.5).astype(np.float64)
            trusted_rows = (gate.trusted(conf) if gate is not None
                            else np.zeros(p.size, dtype=bool))
            preds[jv] = {"p": p, "low": low, "high": high, "trusted": trusted_rows,
                         "dpass": dpass}
        part = _criterion_rows(
            cid=cid, key=crit.key, rule=rule, order=order, per_judge=per_judge, preds=preds,
            humans=humans, evidence=evidence, subjects=subjects, guaranteed=guaranteed,
            cascade=bool(guaranteed and stages),
        )
        if part is not None:
            blocks.append(_score_block(part, study_id=inputs.study_id,
                                       judge_hashes=inputs.judge_hashes,
                                       plan_version=plan_version))
            rubric_parts[cid] = part

    rubric_block = _rubric_rows(rubric_parts, inputs, data, plan_version, warnings)
    if rubric_block is not None:
        blocks.append(rubric_block)
    scores = ScoreRows(tuple(blocks))
    if params.get("curve_resamples", 0) == 0:
        warnings.append("P(pass) intervals not computed (curve_resamples = 0): p_low and p_high "
                        "are null")
    first_cascade = next(iter(cascades.values()), None)
    return CalibrationResult(
        version=CALIBRATION_RESULT_VERSION,
        plan_version=plan_version,
        fingerprint=fingerprint,
        params=dict(params),
        costs=costs,
        policy=policy,
        cells=tuple(cells_out),
        cascade=first_cascade,
        cascades=cascades,
        n_scores=len(scores),
        warnings=tuple(dict.fromkeys(warnings)),
        policy_trial=trial_out if trial is not None else None,
        scores=scores,
    )


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
