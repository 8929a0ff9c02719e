"""The selection report's inputs: one lean read of a study (docs/reports.md, "Selection report").

`selection_inputs_load` reads, per output of the compared candidates: its item, the item's
stratum label in the report's dimension ("unknown" when the item has none), latency, tokens
(in + out), cost, whether it errored and whether it was schema-valid; and per output and
metric the judge's predictor ``f``, the human label ``Y`` (NaN without one) and the inclusion
probability of that label. It does not go through `calibration.frames.rating_data_load`:
that reader carries every rating's evidence for every judge version (about 7 s for a million
verdicts), while this report needs one judge version's value and probability plus the few
thousand human labels; it uses the same COPY-based reader (`calibration.frames.values_frame`)
on statements that select only those columns. A load costs at most `LOAD_MAX_QUERIES` queries
whatever the study's size.

For the study's pairwise criterion (`pairwise_criterion`), it also reads per comparison of
two compared candidates (`SelectionInputs.comparisons`): the candidates of output A and B, the
item's stratum, the judge's "A wins" score (A 1, B 0, tie 0.5, averaged over its verdicts, or
its P(A wins) when every verdict records one), the human label on the same scale by the one
rule (`calibration.frames.human_labels` on side codes: the latest adjudication, then a gold
label, else the side most annotators chose — a tie for the most frequent side gives none —
read as A 1, tie 0.5, B 0) and the inclusion weight, by the same rules as the outputs' labels
below.

Definitions (the same as calibration's, docs/calibration.md):

* Human label of an (output, criterion): `calibration.frames.human_labels`, the one rule
  (the latest adjudication wins, then a gold label, then the majority of the annotators' pass
  readings, an exact tie having none; an output whose annotations were all escalation draws
  is left out of every estimate, adjudicated or not; a gold or adjudicated label without any
  annotation counts with weight 1); for mean scores the adjudicated or gold level, else the
  annotators' mean level. A randomly drawn label weighs 1 / inclusion probability (the
  largest recorded for the output); census, gold and imported labels weigh 1.
* The rubric: the rubric's own rule (`calibration.frames.rubric_rule`; by default an output
  passes when every criterion with a pass/fail reading passes, or the weighted rule the rubric
  states); its human label needs a label on every one of those criteria.

The predictor ``f`` is fixed before any human label is looked at: the judge's probability of a
pass where the judge recorded one on every verdict of the criterion, else its pass reading
(0/1); the judge's level for mean scores; `calibration.frames.rubric_predictor_columns` of
the criteria's predictors for the rubric; ``(1 - rubric predictor) x SEVERITY_COST_LEVEL's cost``
for the expected cost. Prediction-powered inference is valid (unbiased, with the stated
coverage) for ANY predictor that does not depend on the labelled sample; a predictor fitted on
the same human labels (a calibration curve fitted on them, say) makes the rectifier
``mean(Y - f)`` over the labelled outputs shrink toward zero by construction, so the intervals
would be too narrow. That is why the raw judge reading is used and not calibrated scores.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    FloatField,
    IntegerField,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce

from annotations.models import Adjudication, Annotation, GoldLabel
from calibration import frames
from calibration.refs import judge_display
from judges.models import JudgeVersion, Verdict
from reviewhub.errors import Problems
from studies.criteria import criterion_allowed_values
from studies.models import (
    AnalysisPlan,
    Candidate,
    Criterion,
    Item,
    Output,
    StratumDimension,
)
from studies.spec import plan_costs, plan_selection
from studies.strata import dimension_possible_labels

from .comparisons import comparisons_load, pairwise_criterion
from .inputs import (
    ALL,
    SEVERITY_COST_LEVEL,
    UNKNOWN,
    CriterionMeta,
    SelectionInputs,
    empty_comparisons,
    metric_catalogue,
    mix_problems,
    resolve_dimension,
    rubric_criteria,
)
from .readings import label_reading, mean_at, pass_reading

FloatArray = npt.NDArray[np.float64]

# Queries of one load, whatever the study's size: dimension, criteria, verdict counts (when no
# judge is given), judge version, candidates, outputs, items, verdicts x2 (numeric and
# categorical criteria), annotations, gold labels, adjudications, annotator names; and for a
# pairwise criterion comparisons, their verdicts, annotations, gold labels and adjudications.
LOAD_MAX_QUERIES = 18
# Of which the pairwise criterion's (a study without one costs at most 13).
LOAD_PAIRWISE_QUERIES = 5


def plan_read(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """studies.spec.plan_selection of a plan spec (the one reader of the plan's selection
    sections)."""
    return plan_selection(spec)


def _raise(errors: list[dict[str, str]]) -> None:
    problems = Problems()
    problems.extend(errors)
    problems.raise_if_any("The selection report's inputs")


def _dimension_info(study: Any, dimension: str | None) -> tuple[bool, list[str] | None]:
    """Whether the study has the dimension, and the labels it can produce without data."""
    if dimension is None:
        return True, None
    row = StratumDimension.objects.filter(study=study, key=dimension).values(
        "kind", "config").first()
    if row is None:
        return False, None
    return True, dimension_possible_labels(row)


def _labels_present(study: Any, dimension: str) -> dict[str, int]:
    rows = (
        Item.objects.filter(study=study)
        .annotate(label=Coalesce(KeyTextTransform(dimension, "strata"), Value(UNKNOWN),
                                output_field=CharField()))
        .values("label").annotate(n=Count("id")).values_list("label", "n")
    )
    return {str(label): int(n) for label, n in rows}


def selection_inputs_check(study: Any, params: Mapping[str, Any], plan: Any) -> None:
    """The checks that need the study's data, made when a snapshot is created (so a bad
    request is a 400 naming the field, not a failed snapshot): the dimension exists; the mix
    in force (the parameter's, else the plan's for that dimension) sums to 1, names only the
    dimension's labels and gives a share to every label that has items ("unknown" included);
    the judge version and the candidates belong to the study."""
    sel = plan_read(plan.spec if plan is not None else None)
    errors: list[dict[str, str]] = []
    dimension = resolve_dimension(params, sel)
    exists, possible = _dimension_info(study, dimension)
    if not exists:
        path = "params.dimension" if params.get("dimension") else "plan.strata"
        errors.append({"path": path, "message": f"'{dimension}' is not a strata dimension of "
                                                "this study"})
        _raise(errors)
    if dimension is not None:
        present = _labels_present(study, dimension)
        if params.get("mix"):
            errors += mix_problems(shares=params["mix"], path="params.mix", present=present,
                                   possible=possible)
        elif dimension in sel["mixes"]:
            errors += mix_problems(shares=sel["mixes"][dimension],
                                   path=f"plan.deployment_mix.{dimension}", present=present,
                                   possible=possible)
    elif params.get("mix"):
        errors.append({"path": "params.mix", "message": "a mix needs a strata dimension "
                                                        "(params.dimension or the plan's)"})
    if params.get("judge") is not None and not JudgeVersion.objects.filter(
            pk=params["judge"], judge__study=study).exists():
        errors.append({"path": "params.judge", "message": "not a judge version of this study"})
    if params.get("candidates"):
        known = set(Candidate.objects.filter(study=study).values_list("name", flat=True))
        for name in params["candidates"]:
            if name not in known:
                errors.append({"path": "params.candidates",
                               "message": f"'{name}' is not a candidate of this study"})
    _raise(errors)


def _frame(qs: Any, names: Sequence[str], text: Sequence[str] = ()) -> pd.DataFrame:
    return frames.values_frame(qs, names, text=text)


@dataclass
class _Plan:
    """The plan the report follows: the snapshot's (locked) plan, else the study's latest."""

    spec: dict[str, Any] | None
    selection: dict[str, Any]
    locked: bool
    draft_version: int | None


@dataclass
class _Labels:
    """The human labels of the outputs: annotations, gold labels, adjudications."""

    annotations: pd.DataFrame
    gold: pd.DataFrame
    adjudicated: pd.DataFrame


@dataclass
class _Readings:
    """Per criterion id: the judge's predictor and level, the human label and level, and the
    annotators' mean severity of a failure (NaN where none)."""

    f: dict[int, FloatArray]
    level_f: dict[int, FloatArray]
    y: dict[int, FloatArray]
    level_y: dict[int, FloatArray]
    severity: dict[int, FloatArray]


def selection_inputs_load(study: Any, params: Mapping[str, Any], plan: Any) -> SelectionInputs:
    """Load a selection snapshot's inputs (module docstring); at most `LOAD_MAX_QUERIES`
    queries."""
    in_force = _plan_in_force(study, plan)
    spec = in_force.spec
    costs, _ = plan_costs(spec)
    warnings: list[str] = []
    dimension = resolve_dimension(params, in_force.selection)
    _, possible = _dimension_info(study, dimension)
    criteria, rule = _criteria_load(study, warnings)
    crit_ids = [c.id for c in criteria if c.scale != "pairwise"]
    pair_crit = pairwise_criterion(criteria, spec, warnings)
    judge = _judge_pick(study, params, crit_ids, pair_crit)
    candidates = _candidates_load(study, params)
    outs, item_rows = _outputs_load(study, candidates, dimension)
    n = len(outs)
    index = pd.Index(outs["output"].to_numpy())
    verdicts = _verdicts_load(judge, criteria, crit_ids, n)
    labels = _labels_load(crit_ids, n, index)
    comparisons = empty_comparisons()
    if pair_crit is not None and n:
        comparisons, _ = comparisons_load(
            study, pair_crit, judge, list(candidates), item_rows, dimension, warnings)
    outs["weight"] = _weights(labels, index, warnings)
    readings = _Readings({}, {}, {}, {}, {})
    for c in criteria:
        if c.scale != "pairwise":
            _judge_reading(c, verdicts, index, readings)
            _human_reading(c, labels, index, readings)
    metrics, columns = _metric_columns(criteria, readings, rule, costs, n, params, warnings)
    for m in metrics:
        outs[f"f:{m.key}"] = columns[f"f:{m.key}"]
        outs[f"y:{m.key}"] = columns[f"y:{m.key}"]
    return SelectionInputs(
        study_id=study.pk, study_simulated=bool(study.is_simulated),
        plan_version=plan.version if plan is not None else None, plan_spec=spec,
        plan=in_force.selection, plan_locked=in_force.locked,
        draft_plan_version=in_force.draft_version, rubric_rule=rule,
        costs=costs, dimension=dimension, possible_labels=possible, judge=judge,
        candidates=candidates, criteria=criteria, metrics=metrics, outputs=outs,
        # Simulated annotators exist only in studies recorded as simulated (the demo seed):
        # the flag is the study's, never guessed from a name.
        annotators_simulated=bool(study.is_simulated), warnings=warnings,
        pairwise_criterion=pair_crit, comparisons=comparisons,
    )


def _plan_in_force(study: Any, plan: Any) -> _Plan:
    """The snapshot's plan; without one, the study's latest plan, locked or not, which still
    states the primary metric, thresholds and gates the team meant: the report follows it
    and says it is exploratory (docs/selection.md)."""
    if plan is not None:
        spec = dict(plan.spec or {})
        return _Plan(spec, plan_read(spec), plan.locked_at is not None, None)
    draft = AnalysisPlan.objects.filter(study=study).order_by("-version").first()
    draft_spec = dict(draft.spec or {}) if draft is not None else None
    return _Plan(draft_spec, plan_read(draft_spec), False,
                 draft.version if draft is not None else None)


def _criteria_load(study: Any, warnings: list[str]) -> tuple[list[CriterionMeta], dict[str, Any]]:
    """The criteria of the study's latest rubric and its pass rule."""
    crit_rows = list(
        Criterion.objects.filter(rubric__study=study).select_related("rubric")
        .order_by("-rubric__version", "position", "id")
    )
    latest = crit_rows[0].rubric.version if crit_rows else None
    rule = frames.rubric_rule(crit_rows[0].rubric.aggregate if crit_rows else None)
    criteria = [
        CriterionMeta(
            id=c.pk, key=c.key, name=c.name, scale=c.scale,
            values=tuple(criterion_allowed_values(c)), pass_threshold=c.pass_threshold,
            pass_labels=tuple(str(x) for x in (c.pass_labels or [])),
            is_hard_gate=bool(c.is_hard_gate), weight=float(c.weight), points=c.points,
        )
        for c in crit_rows if c.rubric.version == latest
    ]
    for c in criteria:
        if c.scale == "interval" and c.pass_threshold is None:
            warnings.append(f"criterion '{c.key}' is an interval score without a pass_threshold: "
                            "no pass rate and no part in the rubric pass rate (its mean score "
                            "is reported)")
    return criteria, rule


def _judge_pick(
    study: Any, params: Mapping[str, Any], crit_ids: list[int], pair_crit: CriterionMeta | None,
) -> dict[str, Any] | None:
    """The judge the report reads: the parameter's, else the one with most scored verdicts."""
    judge_id = params.get("judge")
    if judge_id is None and (crit_ids or pair_crit is not None):
        # The judge with most verdicts on the outputs' criteria; a study with pairwise
        # criteria only counts its verdicts on comparisons instead (one query either way).
        counted = (
            Verdict.objects.filter(criterion_id__in=crit_ids, output__isnull=False)
            if crit_ids else
            Verdict.objects.filter(criterion_id=pair_crit.id if pair_crit else 0,
                                   comparison__isnull=False)
        )
        top = (
            counted.filter(is_scored=True)
            .values("judge_version_id").annotate(n=Count("id")).order_by("-n", "judge_version_id")
            .values_list("judge_version_id", flat=True).first()
        )
        judge_id = int(top) if top is not None else None
    if judge_id is None:
        return None
    jv = JudgeVersion.objects.select_related("judge").filter(
        pk=judge_id, judge__study=study).first()
    if jv is None:
        return None
    label = str((jv.config or {}).get("label", "")) if jv.judge.kind == "imported" else ""
    return {"id": jv.pk, "display": judge_display(jv.judge.name, jv.version, label),
            "simulated": bool(study.is_simulated) or bool(jv.simulated)}


def _candidates_load(study: Any, params: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    names = params.get("candidates")
    cand_qs = Candidate.objects.filter(study=study).order_by("id")
    if names:
        cand_qs = cand_qs.filter(name__in=list(names))
    return {
        c.pk: {"name": c.name, "model_family": c.model_family,
               "public_scores": dict(c.public_scores or {})}
        for c in cand_qs
    }


def _outputs_load(
    study: Any, candidates: Mapping[int, Any], dimension: str | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """One row per output of the candidates with its stratum label, and the items' labels."""
    out_qs = (
        Output.objects.filter(study=study, candidate_id__in=list(candidates))
        .annotate(
            s_tokens=Coalesce(F("tokens_in"), Value(0)) + Coalesce(F("tokens_out"), Value(0)),
            s_no_tokens=Case(When(tokens_in__isnull=True, tokens_out__isnull=True, then=1),
                             default=0, output_field=IntegerField()),
            s_error=Case(When(error="", then=0), default=1, output_field=IntegerField()),
            s_valid=Case(When(schema_valid=True, then=1.0), When(schema_valid=False, then=0.0),
                         default=None, output_field=FloatField()),
        )
        .order_by("id")
        .values_list("id", "item_id", "candidate_id", "latency_ms", "s_tokens",
                     "s_no_tokens", "cost", "s_error", "s_valid")
    )
    outs = _frame(out_qs, ["output", "item", "candidate", "latency_ms", "tokens",
                           "no_tokens", "cost", "error", "schema_valid"])
    # The items' labels are read once per item, not once per output (a JSON key extraction
    # and a join per output cost more than the rest of the outputs' read).
    item_rows: pd.DataFrame | None = None
    if dimension is not None and len(outs):
        item_rows = _frame(
            Item.objects.filter(study=study).annotate(
                s_label=Coalesce(KeyTextTransform(dimension, "strata"), Value(UNKNOWN),
                                 output_field=CharField()))
            .values_list("id", "s_label"), ["item", "label"], text=["label"])
        at = pd.Index(item_rows["item"].to_numpy(dtype=np.int64)).get_indexer(
            outs["item"].to_numpy(dtype=np.int64))
        item_labels = item_rows["label"].astype(object).to_numpy()
        outs["stratum"] = np.where(at >= 0, item_labels[np.maximum(at, 0)] if len(item_labels)
                                   else UNKNOWN, UNKNOWN)
    else:
        outs["stratum"] = ALL if dimension is None else UNKNOWN
    outs = outs.astype({"output": "int64", "item": "int64", "candidate": "int64"})
    outs["stratum"] = outs["stratum"].astype(object).astype(str)
    tokens = outs["tokens"].to_numpy(dtype=np.float64)
    tokens[outs["no_tokens"].to_numpy(dtype=np.float64) == 1] = np.nan
    outs["tokens"] = tokens
    outs = outs.drop(columns=["no_tokens"])
    for col in ("latency_ms", "cost", "schema_valid"):
        outs[col] = outs[col].astype(np.float64)
    outs["error"] = outs["error"].to_numpy(dtype=np.float64) == 1
    return outs, item_rows


def _verdicts_load(
    judge: Mapping[str, Any] | None, criteria: Sequence[CriterionMeta], crit_ids: list[int],
    n: int,
) -> pd.DataFrame:
    """The judge's scored verdicts on the outputs: value and probability, one judge version."""
    numeric = [c.id for c in criteria if c.scale in ("binary", "ordinal", "interval")]
    nominal = [c.id for c in criteria if c.scale == "categorical"]
    verdicts: list[pd.DataFrame] = []
    if judge is not None and n:
        # The judge version and the criteria are the study's: no join to the outputs.
        base = Verdict.objects.filter(judge_version_id=judge["id"], is_scored=True,
                                      output__isnull=False, criterion_id__in=crit_ids)
        if numeric:
            verdicts.append(_frame(
                base.filter(criterion_id__in=numeric).values_list(
                    "output_id", "criterion_id", "value_num", "probability"),
                ["output", "criterion", "num", "probability"]))
        if nominal:
            verdicts.append(_frame(
                base.filter(criterion_id__in=nominal).values_list(
                    "output_id", "criterion_id", "value", "probability"),
                ["output", "criterion", "value", "probability"], text=["value"]))
    verdict_all = pd.concat(verdicts, ignore_index=True) if verdicts else pd.DataFrame(
        {"output": [], "criterion": [], "num": [], "probability": [], "value": []})
    if len(verdict_all):
        verdict_all = verdict_all.astype({"output": "int64", "criterion": "int64"})
    return verdict_all


def _labels_load(crit_ids: list[int], n: int, index: pd.Index) -> _Labels:
    """The annotations, gold labels and adjudications of the outputs' criteria."""
    ann_cols = ["output", "criterion", "annotator", "num", "value", "severity", "inclusion",
                "draw_kind"]
    ann = pd.DataFrame({c: pd.Series(dtype="float64") for c in ann_cols})
    gold = adjudicated = pd.DataFrame({"output": [], "criterion": [], "label": []})
    if not (crit_ids and n):
        return _Labels(ann, gold, adjudicated)
    abase = Annotation.objects.filter(criterion_id__in=crit_ids,
                                      output__isnull=False).annotate(
        a_inclusion=F("assignment__entry__inclusion_probability"),
        a_draw=Coalesce("assignment__entry__draw_kind", Value(""),
                        output_field=CharField()),
        a_severity=Coalesce(F("severity"), Value(0)),
    )
    ann = _frame(
        abase.values_list("output_id", "criterion_id", "annotator_id", "value_num", "value",
                          "a_severity", "a_inclusion", "a_draw"),
        ann_cols, text=["value", "draw_kind"])
    if len(ann):
        ann = ann.astype({"output": "int64", "criterion": "int64", "annotator": "int64"})
        ann = ann[ann["output"].isin(index)]
    gold = _frame(GoldLabel.objects.filter(criterion_id__in=crit_ids, output__isnull=False)
                  .order_by("id").values_list("output_id", "criterion_id", "value"),
                  ["output", "criterion", "label"], text=["label"])
    adjudicated = _frame(
        Adjudication.objects.filter(criterion_id__in=crit_ids, output__isnull=False)
        .order_by("id").values_list("output_id", "criterion_id", "value"),
        ["output", "criterion", "label"], text=["label"])
    return _Labels(ann, gold, adjudicated)


def _weights(labels: _Labels, index: pd.Index, warnings: list[str]) -> FloatArray:
    """Per output the weight of its human labels: 1 / the largest inclusion probability of a
    random draw, else 1; notes the outputs labelled only through escalations."""
    n = len(index)
    ann = labels.annotations
    weight = np.ones(n)
    countable = np.zeros(n, dtype=bool)  # has a label that is not an escalation-only draw
    escalated_only = 0
    if len(ann):
        at = index.get_indexer(ann["output"].to_numpy())
        kinds = ann["draw_kind"].astype(object).to_numpy()
        not_escalated = kinds != "escalation"
        has_any = np.zeros(n, dtype=bool)
        has_any[at] = True
        np.logical_or.at(countable, at, not_escalated)
        escalated_only = int((has_any & ~countable).sum())
        pi = ann["inclusion"].to_numpy(dtype=np.float64)
        rnd = (kinds == "random") & np.isfinite(pi) & (pi > 0)
        pi_max = np.full(n, np.nan)
        if rnd.any():
            np.fmax.at(pi_max, at[rnd], pi[rnd])
        weight = np.where(np.isfinite(pi_max), 1.0 / np.where(np.isfinite(pi_max), pi_max, 1.0),
                          1.0)
    if escalated_only:
        warnings.append(f"{escalated_only} output(s) labelled only through escalations (not a "
                        "random draw) are left out of the estimates")
    return weight


def _codes(c: CriterionMeta, num: FloatArray, text: Any) -> FloatArray:
    """A categorical criterion's values as their category index (NaN for an unknown one)."""
    if c.scale != "categorical" or text is None:
        return num
    codes = pd.Index(list(c.values)).get_indexer(pd.Index(text)).astype(np.float64)
    codes[codes < 0] = np.nan
    return codes


def _judge_reading(
    c: CriterionMeta, verdicts: pd.DataFrame, index: pd.Index, out: _Readings,
) -> None:
    """The judge's predictor of one criterion per output (its probability where it recorded
    one on every verdict, else its pass reading) and its mean level."""
    n = len(index)
    v = verdicts[verdicts["criterion"].to_numpy() == c.id] if len(verdicts) else verdicts
    at = index.get_indexer(v["output"].to_numpy(dtype=np.int64)) if len(v) else \
        np.empty(0, dtype=np.intp)
    keep = at >= 0
    num = v["num"].to_numpy(dtype=np.float64)[keep] if "num" in v and len(v) else \
        np.full(int(keep.sum()), np.nan)
    text = v["value"].astype(object).to_numpy()[keep] if "value" in v and len(v) else None
    num = _codes(c, num, text)
    prob = v["probability"].to_numpy(dtype=np.float64)[keep] if len(v) else np.empty(0)
    at = at[keep]
    reading = pass_reading(c, num, text)
    # Probabilities are used only when every verdict of the judge on the criterion has
    # one (calibration's rule): a mix of probabilities and 0/1 readings is no one scale.
    use_prob = bool(prob.size) and bool(np.all(np.isfinite(prob)))
    out.f[c.id] = mean_at(at, prob if use_prob else reading, n)
    if c.scale in ("ordinal", "interval"):
        out.level_f[c.id] = mean_at(at, num, n)


def _stored_readings(
    c: CriterionMeta, labels: _Labels, index: pd.Index, level: FloatArray,
) -> dict[str, dict[int, float]]:
    """The gold and adjudicated pass readings by output position; their levels are written
    into `level` (the adjudication last: it wins)."""
    stored: dict[str, dict[int, float]] = {"gold": {}, "adjudicated": {}}
    for name, lab in (("gold", labels.gold), ("adjudicated", labels.adjudicated)):
        if not len(lab):
            continue
        lc = lab[lab["criterion"].to_numpy(dtype=np.int64) == c.id].drop_duplicates(
            "output", keep="last")
        l_at = index.get_indexer(lc["output"].to_numpy(dtype=np.int64))
        texts = lc["label"].astype(object).to_numpy()
        for pos, t in zip(l_at.tolist(), texts.tolist(), strict=True):
            if pos < 0:
                continue
            stored[name][pos] = label_reading(c, str(t), mean_score=False)
            lv = label_reading(c, str(t), mean_score=True)
            if math.isfinite(lv):
                level[pos] = lv
    return stored


def _human_reading(c: CriterionMeta, labels: _Labels, index: pd.Index, out: _Readings) -> None:
    """The human label of one criterion per output by the one rule, its level, and the
    annotators' mean severity of a failure."""
    n = len(index)
    ann = labels.annotations
    a = ann[ann["criterion"].to_numpy() == c.id] if len(ann) else ann
    a_at = index.get_indexer(a["output"].to_numpy(dtype=np.int64)) if len(a) else \
        np.empty(0, dtype=np.intp)
    a_num = a["num"].to_numpy(dtype=np.float64) if len(a) else np.empty(0)
    a_text = a["value"].astype(object).to_numpy() if len(a) else None
    a_num = _codes(c, a_num, a_text)
    a_read = pass_reading(c, a_num, a_text)
    level = np.full(n, np.nan)
    if c.scale in ("ordinal", "interval"):
        level = mean_at(a_at[np.isfinite(a_num)], a_num[np.isfinite(a_num)], n)
    stored = _stored_readings(c, labels, index, level)
    # The one human-label rule of the evidence read model (subjects: output positions).
    keep_a = a_at >= 0
    hl = frames.human_labels(
        subject=a_at[keep_a], reading=a_read[keep_a],
        draw_kind=a["draw_kind"].astype(object).to_numpy()[keep_a] if len(a)
        else np.empty(0, dtype=object),
        inclusion=a["inclusion"].to_numpy(dtype=np.float64)[keep_a] if len(a)
        else np.empty(0),
        gold=stored["gold"], adjudicated=stored["adjudicated"])
    y = np.full(n, np.nan)
    counts = np.zeros(n, dtype=bool)
    y[hl.subjects] = hl.label
    counts[hl.subjects] = hl.countable
    y[~counts] = np.nan
    level[~counts] = np.nan
    sev = a["severity"].to_numpy(dtype=np.float64) if len(a) else np.empty(0)
    failing = (a_read == 0.0) & (sev > 0)
    out.severity[c.id] = mean_at(a_at[failing], sev[failing], n)
    out.y[c.id] = y
    out.level_y[c.id] = level


def _metric_columns(
    criteria: Sequence[CriterionMeta], r: _Readings, rule: Mapping[str, Any],
    costs: Mapping[str, Any], n: int, params: Mapping[str, Any], warnings: list[str],
) -> tuple[list[Any], dict[str, FloatArray]]:
    """The metrics the report estimates and their predictor ("f:") and label ("y:") columns."""
    metrics = metric_catalogue([c for c in criteria if c.scale != "pairwise"],
                               str(costs.get("unit", "points")))
    wanted = params.get("metrics")
    if wanted:
        known = {m.key for m in metrics}
        _raise([{"path": "params.metrics", "message": f"unknown metric '{k}' for this rubric"}
                for k in wanted if k not in known])
    columns: dict[str, FloatArray] = {}
    rubric = rubric_criteria(criteria)
    if rubric:
        gates = [c.is_hard_gate for c in rubric]
        weights = [c.weight for c in rubric]
        f_r = frames.rubric_predictor_columns([r.f[c.id] for c in rubric], gates, weights,
                                              rule)
        y_r = frames.rubric_pass_columns([r.y[c.id] for c in rubric], gates, weights, rule)
    else:
        f_r = np.full(n, np.nan)
        y_r = np.full(n, np.nan)
        warnings.append("the rubric has no pass/fail criterion: no rubric pass rate")
    columns["f:rubric_pass_rate"], columns["y:rubric_pass_rate"] = f_r, y_r
    columns["f:expected_cost"], columns["y:expected_cost"] = _cost_columns(
        rubric, r, f_r, y_r, costs, n)
    for c in criteria:
        if c.has_pass_reading() and c.scale != "pairwise":
            columns[f"f:pass_rate:{c.key}"] = r.f[c.id]
            columns[f"y:pass_rate:{c.key}"] = r.y[c.id]
        if c.scale in ("ordinal", "interval"):
            columns[f"f:mean_score:{c.key}"] = r.level_f.get(c.id, np.full(n, np.nan))
            columns[f"y:mean_score:{c.key}"] = r.level_y[c.id]
    if wanted:
        metrics = [m for m in metrics if m.key in set(wanted)]
    return metrics, columns


def _cost_columns(
    rubric: Sequence[CriterionMeta], r: _Readings, f_r: FloatArray, y_r: FloatArray,
    costs: Mapping[str, Any], n: int,
) -> tuple[FloatArray, FloatArray]:
    """The expected cost per output: predicted from the rubric predictor at the middle level's
    cost, observed from the human label at its failure's severity."""
    severity_cost = {str(k): float(v) for k, v in costs["severity"].items()}
    unit_cost = severity_cost[SEVERITY_COST_LEVEL]
    f_cost = (1.0 - f_r) * unit_cost
    if not rubric:
        return f_cost, np.full(n, np.nan)
    sev = np.fmax.reduce([np.where(np.isfinite(r.severity[c.id]), r.severity[c.id], -np.inf)
                          for c in rubric])
    by_level = np.array([severity_cost[str(k)] for k in range(1, 6)])
    finite = np.isfinite(sev)
    # A failure's severity is the worst of its criteria's (mean annotator severity,
    # rounded to a level); a failure nobody rated for severity costs the middle level.
    level_at = np.clip(np.rint(np.where(finite, sev, 3.0)), 1, 5).astype(np.intp) - 1
    fail_cost = np.where(finite, by_level[level_at], unit_cost)
    return f_cost, np.where(np.isfinite(y_r), (1.0 - y_r) * fail_cost, np.nan)


def selection_fingerprint(inputs: SelectionInputs) -> str:
    """sha256 over every input the snapshot reads: the outputs' columns (in output order), the
    judge, candidates, criteria, metrics, dimension and the plan's selection sections."""
    h = hashlib.sha256()
    if len(inputs.outputs):
        h.update(pd.util.hash_pandas_object(inputs.outputs, index=False).to_numpy().tobytes())
    if len(inputs.comparisons):
        h.update(b"comparisons")
        h.update(pd.util.hash_pandas_object(inputs.comparisons, index=False).to_numpy()
                 .tobytes())
    meta = {
        "judge": inputs.judge, "candidates": sorted(inputs.candidates.items()),
        "criteria": [c.__dict__ for c in inputs.criteria],
        "metrics": [m.key for m in inputs.metrics], "dimension": inputs.dimension,
        "plan": inputs.plan, "plan_criteria": (inputs.plan_spec or {}).get("criteria"),
        "costs": inputs.costs, "simulated": [inputs.study_simulated,
                                             inputs.annotators_simulated],
        "rubric_rule": inputs.rubric_rule, "plan_locked": inputs.plan_locked,
        "draft_plan_version": inputs.draft_plan_version,
    }
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    return h.hexdigest()


__all__ = [
    "LOAD_MAX_QUERIES",
    "LOAD_PAIRWISE_QUERIES",
    "plan_read",
    "selection_fingerprint",
    "selection_inputs_check",
    "selection_inputs_load",
]
