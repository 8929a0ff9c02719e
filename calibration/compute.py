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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from evalstats.calibration import (
    CalibrationMethod,
    calibration_diagnostics,
    calibration_hierarchical,
    calibration_select,
    confidence_of,
)
from evalstats.costs import (
    CostModel,
    DecisionThresholds,
    decision_thresholds,
    false_pass_cost,
    policy_costs,
)
from evalstats.options import BootstrapOptions
from evalstats.selective import TrustThreshold, threshold_grid, trust_cascade, trust_threshold
from judges.models import JudgeVersion
from studies.criteria import criterion_has_pass_reading
from studies.models import Criterion, RubricVersion
from studies.spec import plan_costs, plan_policy

from .frames import rating_data_load
from .frames import rubric_rule as rubric_rule_of
from .results import (
    CALIBRATION_RESULT_VERSION,
    CalibrationCell,
    CalibrationResult,
    ScoreBlock,
    ScoreRows,
)
from .score_rows import (
    ROW_STEPS,
    RUBRIC_KEY,
    CriterionRows,
    SubjectTable,
    criterion_rows,
    rubric_aggregate,
    rubric_rows,
    score_block,
    subject_table,
    with_trust,
)
from .scoring import (
    CalibrationInputs,
    CriterionRule,
    Humans,
    JudgeScores,
    Model,
    curve_json,
    has_reading,
    humans_of,
    judge_scores,
    p_bands,
    plan_cascade_ids,
    raw_confidence,
    score_grid,
    seeded_rng,
)

FloatArray = npt.NDArray[np.float64]




def calibration_inputs_load(
    study: Any, params: Mapping[str, Any], plan: Any = None
) -> CalibrationInputs:
    """Load the evidence of a calibration snapshot (criteria and judges as in `params`)."""
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
    subjects: SubjectTable
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

    js: JudgeScores
    fit_mask: npt.NDArray[np.bool_]
    fx: FloatArray
    fy: FloatArray
    fw: FloatArray
    fsubj: npt.NDArray[np.int64]
    fgroups: npt.NDArray[np.int64]
    fcells: npt.NDArray[np.object_]
    row_cells: npt.NDArray[np.object_]
    present: list[str]
    model: Model | None = None


@dataclass
class _Output:
    """What the criteria add to the snapshot, in criterion order."""

    cells: list[CalibrationCell] = field(default_factory=list)
    cascades: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocks: list[ScoreBlock] = field(default_factory=list)
    # Per criterion: its rows as columns (the rubric rows combine the output rows).
    rubric_parts: dict[int, CriterionRows] = field(default_factory=dict)


PerJudge = dict[int, tuple[JudgeScores, Model | None, dict[str, Any]]]


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
    rubric_block = rubric_rows(out.rubric_parts, inputs, inputs.data, plan_version,
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
    subjects = subject_table(data, dims)
    guaranteed = policy.get("kind") == "guaranteed_agreement"
    cascade_ids = plan_cascade_ids(policy.get("cascade") or [], data.judges, inputs.judge_hashes,
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
    if not has_reading(rule):
        st.warnings.append(
            f"criterion '{crit.key}' has no pass/fail reading (no pass threshold or pass "
            "labels): not calibrated"
        )
        return
    rows = data.ratings[data.ratings["criterion"].to_numpy() == cid]
    if rows.empty:
        return
    humans = humans_of(rows, rule, crit.values)
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
    part = criterion_rows(
        cid=cid, key=crit.key, rule=rule, order=order, per_judge=per_judge, preds=preds,
        humans=humans, evidence=evidence, subjects=st.subjects, guaranteed=st.guaranteed,
        cascade=bool(st.guaranteed and stages),
    )
    if part is not None:
        out.blocks.append(score_block(part, study_id=st.inputs.study_id,
                                       judge_hashes=st.inputs.judge_hashes,
                                       plan_version=plan_version))
        out.rubric_parts[cid] = part


def _fit_rows(
    st: _Setting, rule: CriterionRule, humans: Humans, js: JudgeScores,
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
               losses: dict[int, float]) -> Model | None:
    """The judge's calibration map on the criterion (hierarchical over the cells with strata),
    or None with fewer than min_labels labels; records its cross-validated log loss."""
    if fit.fx.size < st.min_labels:
        st.warnings.append(
            f"{display} on '{crit.key}': {fit.fx.size} human label(s), fewer than "
            f"min_labels = {st.min_labels}: too few labels, no calibrated scores"
        )
        return None
    rng_fit = seeded_rng(st.seed, jv, crit.key, "fit")
    folds = int(st.params["folds"])
    if st.dims:
        hier = calibration_hierarchical(
            fit.fx, fit.fy, fit.fcells.astype(str), weights=fit.fw, groups=fit.fgroups,
            methods=st.methods, folds=folds, min_labels=st.min_labels, rng=rng_fit,
            all_strata=fit.present,
        )
        model = Model(pooled=hier.pooled, hier=hier, heldout=hier.heldout())
        st.warnings.extend(f"{display} on '{crit.key}': {w}" for w in hier.warnings)
    else:
        sel = calibration_select(
            fit.fx, fit.fy, weights=fit.fw, groups=fit.fgroups, methods=st.methods,
            folds=folds, rng=rng_fit,
        )
        model = Model(pooled=sel, hier=None, heldout=sel.heldout)
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
    raw = raw_confidence(fit.js, rule) if st.score_mode == "confidence" else None
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
    st: _Setting, crit: Any, rule: CriterionRule, rows: pd.DataFrame, humans: Humans,
    jv: int, losses: dict[int, float],
) -> tuple[JudgeScores, Model | None, dict[str, Any]]:
    """One judge version on one criterion: its scores, model, bands and every cell."""
    js, ties = judge_scores(rows, jv, rule, crit.values)
    judge = st.inputs.data.judges[jv]
    if ties:
        st.warnings.append(
            f"{judge.display} on '{crit.key}': {ties} tie verdict(s) have no preferred "
            "side and get no calibrated score"
        )
    fit = _fit_rows(st, rule, humans, js)
    model = fit.model = _fit_model(st, fit, jv, crit, judge.display, losses)
    grid_x = score_grid(js)
    cells_here = ["", *[c for c in fit.present if c != ""]] if st.dims else [""]
    bands: dict[str, tuple[FloatArray, FloatArray]] = {}
    if model is not None and int(st.params["curve_resamples"]) > 0:
        bands = p_bands(
            model, fit.fx, fit.fy, fit.fw, fit.fgroups, grid_x, cells_here,
            resamples=int(st.params["curve_resamples"]), level=st.level,
            rng=seeded_rng(st.seed, jv, crit.key, "bands"),
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
    st: _Setting, fit: _Fit, jv: int, crit: Any, rule: CriterionRule, humans: Humans,
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
    crng = seeded_rng(st.seed, jv, crit.key, label, "cell")
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
        curve=(curve_json(model, label, info["grid"]) if not too_few
               else {"x": [], "y": []}),
        false_pass_cost=figures["fpc"], false_fail_cost=st.cost_model.reject_cost,
        thresholds=figures["thr"], policy_costs=figures["pol"], trust=trust_json,
    )


def _cell_figures(
    st: _Setting, fit: _Fit, model: Model, rule: CriterionRule, humans: Humans,
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
        info["cells"][""] = with_trust(
            info["cells"][""], {**stage.to_json(), "score": info["tmode"]})
    return stages, cascade_thr


def _served(
    entry: tuple[JudgeScores, Model | None, dict[str, Any]],
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
    jv_ids: Sequence[int], per_judge: Mapping[int, tuple[JudgeScores, Model | None,
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
        raw = raw_confidence(js, rule) if trial.get("score") == "confidence" else None
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
    stages = [jv for jv in plan_cascade_ids(trial.get("cascade") or [], data.judges, hashes,
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


__all__ = [
    "ROW_STEPS",
    "RUBRIC_KEY",
    "CalibrationInputs",
    "CriterionRule",
    "calibration_compute",
    "calibration_fingerprint",
    "calibration_inputs_load",
    "rubric_aggregate",
]

