"""The selection report's inputs: one lean read of a study (docs/reports.md, "Selection report").

`selection_inputs_load` reads, per output of the compared candidates: its item, the item's
stratum label in the report's dimension ("unknown" when the item has none), latency, tokens
(in + out), cost, whether it errored and whether it was schema-valid; and per output and
metric the judge's predictor ``f``, the human label ``Y`` (NaN without one) and the inclusion
probability of that label. It does not go through `calibration.frames.rating_data_load`:
that reader carries every rating's evidence for every judge version (about 7 s for a million
verdicts), while this report needs one judge version's value and probability plus the few
thousand human labels; it uses the same COPY-based reader (`calibration.frames`'
`_values_frame`) on statements that select only those columns. A load costs at most
`LOAD_MAX_QUERIES` queries whatever the study's size.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from reviewhub.errors import Problems

from .params import MIX_TOLERANCE

FloatArray = npt.NDArray[np.float64]

# Queries of one load, whatever the study's size: dimension, criteria, verdict counts (when no
# judge is given), judge version, candidates, outputs, items, verdicts x2 (numeric and
# categorical criteria), annotations, gold labels, adjudications, annotator names; and for a
# pairwise criterion comparisons, their verdicts, annotations, gold labels and adjudications.
LOAD_MAX_QUERIES = 18
# Of which the pairwise criterion's (a study without one costs at most 13).
LOAD_PAIRWISE_QUERIES = 5
# A pairwise verdict or label as the score of candidate A (ties count half).
A_WINS = {"A": 1.0, "B": 0.0, "tie": 0.5}
COMPARISON_COLUMNS = ("comparison", "item", "a", "b", "stratum", "f", "y", "weight")
# The severity level whose plan cost prices a failure the predictor cannot grade: the middle
# of the 1-5 scale (docs/reports.md).
SEVERITY_COST_LEVEL = "3"
UNKNOWN = "unknown"
# Label of the one stratum of a report without a dimension (never shown: only "mix" is).
ALL = "all"


@dataclass(frozen=True)
class CriterionMeta:
    """A criterion of the study's latest rubric as the report reads it."""

    id: int
    key: str
    name: str
    scale: str
    values: tuple[str, ...]
    pass_threshold: int | float | None
    pass_labels: tuple[str, ...]
    is_hard_gate: bool
    weight: float
    points: Any = None

    def has_pass_reading(self) -> bool:
        if self.scale == "binary":
            return True
        if self.scale in ("ordinal", "interval"):  # interval without a threshold: none
            return self.pass_threshold is not None
        if self.scale == "categorical":
            return bool(self.pass_labels)
        return False


@dataclass(frozen=True)
class MetricMeta:
    key: str
    label: str
    unit: str  # "rate" | "score" | "cost"
    higher_is_better: bool


@dataclass
class SelectionInputs:
    """Everything a selection snapshot reads (`selection_inputs_load`)."""

    study_id: int
    study_simulated: bool
    plan_version: int | None
    plan_spec: dict[str, Any] | None
    # studies.spec.plan_selection of the plan ({} sections when there is no plan).
    plan: dict[str, Any]
    costs: dict[str, Any]
    dimension: str | None
    # Labels the dimension can produce without data (None: open), for the mix's check.
    possible_labels: list[str] | None
    judge: dict[str, Any] | None  # {"id", "display", "simulated"}
    candidates: dict[int, dict[str, Any]]  # id -> {"name", "model_family", "public_scores"}
    criteria: list[CriterionMeta]
    metrics: list[MetricMeta]
    # One row per output: output, item, candidate, stratum, latency_ms, tokens, cost, error,
    # schema_valid (1/0/NaN), weight (1 / inclusion probability of its human labels; 1 when
    # unknown), and per metric "f:<key>" and "y:<key>" (NaN when missing).
    outputs: pd.DataFrame
    annotators_simulated: bool
    warnings: list[str] = field(default_factory=list)
    # The pairwise criterion the report estimates win rates and strengths on (None: none).
    pairwise_criterion: CriterionMeta | None = None
    # One row per comparison of two compared candidates on that criterion
    # (`COMPARISON_COLUMNS`): comparison, item, a and b (candidate ids of output A and B),
    # stratum, f (the judge's "A wins" score: A 1, B 0, tie 0.5, or its P(A wins)), y (the
    # human consensus on the same scale, NaN without one) and weight (1 / inclusion
    # probability of its human labels, 1 when unknown).
    comparisons: pd.DataFrame = field(default_factory=lambda: empty_comparisons())
    # Whether `plan_version` is a locked plan; without one, the version of the study's latest
    # (unlocked) plan the report follows as exploratory (None: the study has no plan).
    plan_locked: bool = True
    draft_plan_version: int | None = None
    # calibration.frames.rubric_rule of the rubric version the report reads.
    rubric_rule: dict[str, Any] = field(
        default_factory=lambda: {"kind": "all", "pass_share": None,
                                 "text": "an output passes the rubric when every criterion "
                                         "with a pass/fail reading passes"})


def metric_catalogue(criteria: Sequence[CriterionMeta], cost_unit: str) -> list[MetricMeta]:
    """Every metric the rubric supports, in report order."""
    out = [MetricMeta("rubric_pass_rate", "Rubric pass rate", "rate", True),
           MetricMeta("expected_cost", f"Expected cost per output ({cost_unit})", "cost", False)]
    for c in criteria:
        if c.has_pass_reading():
            out.append(MetricMeta(f"pass_rate:{c.key}", f"Pass rate: {c.name}", "rate", True))
    for c in criteria:
        if c.scale in ("ordinal", "interval"):
            out.append(MetricMeta(f"mean_score:{c.key}", f"Mean score: {c.name}", "score", True))
    return out


def _rubric_criteria(criteria: Sequence[CriterionMeta]) -> list[CriterionMeta]:
    return [c for c in criteria if c.scale != "pairwise" and c.has_pass_reading()]


def resolve_dimension(params: Mapping[str, Any], plan: Mapping[str, Any]) -> str | None:
    """The report's strata dimension: the parameter, else the plan's deployment-mix dimension,
    else the plan's first stratum, else none (the report is on the whole study only)."""
    if params.get("dimension"):
        return str(params["dimension"])
    mix = plan.get("mix") or {}
    if mix.get("dimension"):
        return str(mix["dimension"])
    strata = plan.get("strata") or []
    return str(strata[0]) if strata else None


def plan_read(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """studies.spec.plan_selection of a plan spec (the one reader of the plan's selection
    sections)."""
    from studies.spec import plan_selection

    return plan_selection(spec)


def mix_problems(
    *,
    shares: Mapping[str, float] | None,
    path: str,
    present: Mapping[str, int],
    possible: Sequence[str] | None,
) -> list[dict[str, str]]:
    """What is wrong with a mix against the dimension's labels: shares that do not sum to 1,
    labels that are not labels of the dimension, and labels that have items but no share
    (the "unknown" label included: a mix must say how much of the traffic it stands for)."""
    if not shares:
        return []
    errors: list[dict[str, str]] = []
    total = math.fsum(float(v) for v in shares.values())
    if abs(total - 1.0) > MIX_TOLERANCE:
        errors.append({"path": path, "message": f"shares must sum to 1 (±{MIX_TOLERANCE:g}); "
                                                f"they sum to {total:.9g}"})
    known = set(present) | set(possible or ())
    for label in shares:
        if label not in known:
            having = ", ".join(sorted(present)) or "none"
            errors.append({"path": f"{path}.{label}",
                           "message": f"'{label}' is not a stratum label of this dimension "
                                      f"(labels with items: {having})"})
    for label, n in sorted(present.items()):
        if n > 0 and label not in shares:
            what = ("items without a label in this dimension fall in 'unknown'"
                    if label == UNKNOWN else f"label '{label}' has items")
            errors.append({"path": f"{path}.{label}",
                           "message": f"{n} {what} but the mix gives it no share (give it one, "
                                      "0 to leave those items out knowingly)"})
    return errors


def _raise(errors: list[dict[str, str]]) -> None:
    problems = Problems()
    problems.extend(errors)
    problems.raise_if_any("The selection report's inputs")


def _dimension_info(study: Any, dimension: str | None) -> tuple[bool, list[str] | None]:
    """Whether the study has the dimension, and the labels it can produce without data."""
    from studies.models import StratumDimension
    from studies.strata import dimension_possible_labels

    if dimension is None:
        return True, None
    row = StratumDimension.objects.filter(study=study, key=dimension).values(
        "kind", "config").first()
    if row is None:
        return False, None
    return True, dimension_possible_labels(row)


def _labels_present(study: Any, dimension: str) -> dict[str, int]:
    from django.db.models import CharField, Count, Value
    from django.db.models.fields.json import KeyTextTransform
    from django.db.models.functions import Coalesce

    from studies.models import Item

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
    from judges.models import JudgeVersion
    from studies.models import Candidate

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
    from calibration.frames import _values_frame

    return _values_frame(qs, names, text=text)


def _pass_reading(c: CriterionMeta, num: FloatArray, text: Any = None) -> FloatArray:
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


def _label_reading(c: CriterionMeta, label: str, mean_score: bool) -> float:
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


def selection_inputs_load(study: Any, params: Mapping[str, Any], plan: Any) -> SelectionInputs:
    """Load a selection snapshot's inputs (module docstring); at most `LOAD_MAX_QUERIES`
    queries."""
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
    from calibration.frames import (
        human_labels,
        rubric_pass_columns,
        rubric_predictor_columns,
        rubric_rule,
    )
    from judges.models import JudgeVersion, Verdict
    from studies.criteria import criterion_allowed_values
    from studies.models import Candidate, Criterion, Item, Output
    from studies.spec import plan_costs

    plan_locked = plan is not None and plan.locked_at is not None
    draft_version: int | None = None
    if plan is None:
        # No locked plan: the study's latest plan, locked or not, still states the primary
        # metric, thresholds and gates the team meant; the report follows it and says it is
        # exploratory (docs/selection.md).
        from studies.models import AnalysisPlan

        draft = AnalysisPlan.objects.filter(study=study).order_by("-version").first()
        if draft is not None:
            draft_version = draft.version
        spec = dict(draft.spec or {}) if draft is not None else None
    else:
        spec = dict(plan.spec or {})
    sel = plan_read(spec)
    costs, _ = plan_costs(spec)
    warnings: list[str] = []
    dimension = resolve_dimension(params, sel)
    _, possible = _dimension_info(study, dimension)

    crit_rows = list(
        Criterion.objects.filter(rubric__study=study).select_related("rubric")
        .order_by("-rubric__version", "position", "id")
    )
    latest = crit_rows[0].rubric.version if crit_rows else None
    rule = rubric_rule(crit_rows[0].rubric.aggregate if crit_rows else None)
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
    crit_ids = [c.id for c in criteria if c.scale != "pairwise"]
    pair_crit = pairwise_criterion(criteria, spec, warnings)

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
    judge: dict[str, Any] | None = None
    if judge_id is not None:
        jv = JudgeVersion.objects.select_related("judge").filter(
            pk=judge_id, judge__study=study).first()
        if jv is not None:
            label = str((jv.config or {}).get("label", "")) if jv.judge.kind == "imported" else ""
            from calibration.refs import judge_display

            display = judge_display(jv.judge.name, jv.version, label)
            judge = {"id": jv.pk, "display": display,
                     "simulated": bool(study.is_simulated) or bool(jv.simulated)}

    names = params.get("candidates")
    cand_qs = Candidate.objects.filter(study=study).order_by("id")
    if names:
        cand_qs = cand_qs.filter(name__in=list(names))
    candidates = {
        c.pk: {"name": c.name, "model_family": c.model_family,
               "public_scores": dict(c.public_scores or {})}
        for c in cand_qs
    }

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
    n = len(outs)
    # The items' labels are read once per item, not once per output (a JSON key extraction
    # and a join per output cost more than the rest of the outputs' read).
    item_rows: pd.DataFrame | None = None
    if dimension is not None and n:
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
    index = pd.Index(outs["output"].to_numpy())

    numeric = [c.id for c in criteria if c.scale in ("binary", "ordinal", "interval")]
    nominal = [c.id for c in criteria if c.scale == "categorical"]

    # --- the judge's verdicts: value and probability, one judge version ------------------------
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
            df = _frame(
                base.filter(criterion_id__in=nominal).values_list(
                    "output_id", "criterion_id", "value", "probability"),
                ["output", "criterion", "value", "probability"], text=["value"])
            verdicts.append(df)

    # --- human labels ------------------------------------------------------------------------
    ann_parts: list[pd.DataFrame] = []
    ann_cols = ["output", "criterion", "annotator", "num", "value", "severity", "inclusion",
                "draw_kind"]
    if crit_ids and n:
        abase = Annotation.objects.filter(criterion_id__in=crit_ids,
                                          output__isnull=False).annotate(
            a_inclusion=F("assignment__entry__inclusion_probability"),
            a_draw=Coalesce("assignment__entry__draw_kind", Value(""),
                            output_field=CharField()),
            a_severity=Coalesce(F("severity"), Value(0)),
        )
        ann_parts.append(_frame(
            abase.values_list("output_id", "criterion_id", "annotator_id", "value_num", "value",
                              "a_severity", "a_inclusion", "a_draw"),
            ann_cols, text=["value", "draw_kind"]))
    ann = pd.concat(ann_parts, ignore_index=True) if ann_parts else pd.DataFrame(
        {c: pd.Series(dtype="float64") for c in ann_cols})
    if len(ann):
        ann = ann.astype({"output": "int64", "criterion": "int64", "annotator": "int64"})
        ann = ann[ann["output"].isin(index)]
    gold = adjudicated = pd.DataFrame({"output": [], "criterion": [], "label": []})
    if crit_ids and n:
        gold = _frame(GoldLabel.objects.filter(criterion_id__in=crit_ids, output__isnull=False)
                      .order_by("id").values_list("output_id", "criterion_id", "value"),
                      ["output", "criterion", "label"], text=["label"])
        adjudicated = _frame(
            Adjudication.objects.filter(criterion_id__in=crit_ids, output__isnull=False)
            .order_by("id").values_list("output_id", "criterion_id", "value"),
            ["output", "criterion", "label"], text=["label"])
    # --- comparisons of a pairwise criterion ----------------------------------------------------
    comparisons = empty_comparisons()
    if pair_crit is not None and n:
        comparisons, _ = _comparisons_load(
            study, pair_crit, judge, list(candidates), item_rows, dimension, warnings)

    # Simulated annotators exist only in studies recorded as simulated (the demo seed): the
    # flag is the study's, never guessed from a name.
    annotators_simulated = bool(study.is_simulated)

    # --- per output: weight and which labels count -------------------------------------------
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
    for lab in (gold, adjudicated):
        if len(lab):
            at = index.get_indexer(lab["output"].to_numpy(dtype=np.int64))
            at = at[at >= 0]
            # A gold or adjudicated label with no annotation is a deliberate (non-random)
            # label; it counts with weight 1 like calibration's gold-only subjects.
            countable[at] = True
    if escalated_only:
        warnings.append(f"{escalated_only} output(s) labelled only through escalations (not a "
                        "random draw) are left out of the estimates")
    outs["weight"] = weight

    # --- per criterion: predictor and label ----------------------------------------------------
    verdict_all = pd.concat(verdicts, ignore_index=True) if verdicts else pd.DataFrame(
        {"output": [], "criterion": [], "num": [], "probability": [], "value": []})
    if len(verdict_all):
        verdict_all = verdict_all.astype({"output": "int64", "criterion": "int64"})
    crit_f: dict[int, FloatArray] = {}
    crit_level_f: dict[int, FloatArray] = {}
    crit_y: dict[int, FloatArray] = {}
    crit_level_y: dict[int, FloatArray] = {}
    crit_sev: dict[int, FloatArray] = {}
    for c in criteria:
        if c.scale == "pairwise":
            continue
        v = verdict_all[verdict_all["criterion"].to_numpy() == c.id] if len(verdict_all) else \
            verdict_all
        at = index.get_indexer(v["output"].to_numpy(dtype=np.int64)) if len(v) else \
            np.empty(0, dtype=np.intp)
        keep = at >= 0
        num = v["num"].to_numpy(dtype=np.float64)[keep] if "num" in v and len(v) else \
            np.full(int(keep.sum()), np.nan)
        text = v["value"].astype(object).to_numpy()[keep] if "value" in v and len(v) else None
        if c.scale == "categorical" and text is not None:
            lookup = pd.Index(list(c.values))
            num = lookup.get_indexer(pd.Index(text)).astype(np.float64)
            num[num < 0] = np.nan
        prob = v["probability"].to_numpy(dtype=np.float64)[keep] if len(v) else np.empty(0)
        at = at[keep]
        reading = _pass_reading(c, num, text)
        # Probabilities are used only when every verdict of the judge on the criterion has
        # one (calibration's rule): a mix of probabilities and 0/1 readings is no one scale.
        use_prob = bool(prob.size) and bool(np.all(np.isfinite(prob)))
        score = prob if use_prob else reading
        crit_f[c.id] = _mean_at(at, score, n)
        if c.scale in ("ordinal", "interval"):
            crit_level_f[c.id] = _mean_at(at, num, n)

        a = ann[ann["criterion"].to_numpy() == c.id] if len(ann) else ann
        a_at = index.get_indexer(a["output"].to_numpy(dtype=np.int64)) if len(a) else \
            np.empty(0, dtype=np.intp)
        a_num = a["num"].to_numpy(dtype=np.float64) if len(a) else np.empty(0)
        a_text = a["value"].astype(object).to_numpy() if len(a) else None
        if c.scale == "categorical" and a_text is not None:
            a_num = pd.Index(list(c.values)).get_indexer(pd.Index(a_text)).astype(np.float64)
            a_num[a_num < 0] = np.nan
        a_read = _pass_reading(c, a_num, a_text)
        level = np.full(n, np.nan)
        if c.scale in ("ordinal", "interval"):
            level = _mean_at(a_at[np.isfinite(a_num)], a_num[np.isfinite(a_num)], n)
        stored: dict[str, dict[int, float]] = {"gold": {}, "adjudicated": {}}
        for name, lab in (("gold", gold), ("adjudicated", adjudicated)):
            if not len(lab):
                continue
            lc = lab[lab["criterion"].to_numpy(dtype=np.int64) == c.id].drop_duplicates(
                "output", keep="last")
            l_at = index.get_indexer(lc["output"].to_numpy(dtype=np.int64))
            texts = lc["label"].astype(object).to_numpy()
            for pos, t in zip(l_at.tolist(), texts.tolist(), strict=True):
                if pos < 0:
                    continue
                stored[name][pos] = _label_reading(c, str(t), mean_score=False)
                lv = _label_reading(c, str(t), mean_score=True)
                if math.isfinite(lv):
                    level[pos] = lv  # adjudication last: it wins
        # The one human-label rule of the evidence read model (subjects: output positions).
        keep_a = a_at >= 0
        hl = human_labels(
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
        crit_sev[c.id] = _mean_at(a_at[failing], sev[failing], n)
        crit_y[c.id] = y
        crit_level_y[c.id] = level

    # --- metrics -----------------------------------------------------------------------------
    metrics = metric_catalogue([c for c in criteria if c.scale != "pairwise"],
                               str(costs.get("unit", "points")))
    wanted = params.get("metrics")
    if wanted:
        known = {m.key for m in metrics}
        _raise([{"path": "params.metrics", "message": f"unknown metric '{k}' for this rubric"}
                for k in wanted if k not in known])
    columns: dict[str, FloatArray] = {}
    rubric = _rubric_criteria(criteria)
    if rubric:
        gates = [c.is_hard_gate for c in rubric]
        weights = [c.weight for c in rubric]
        f_r = rubric_predictor_columns([crit_f[c.id] for c in rubric], gates, weights,
                                       rule)
        y_r = rubric_pass_columns([crit_y[c.id] for c in rubric], gates, weights, rule)
    else:
        f_r = np.full(n, np.nan)
        y_r = np.full(n, np.nan)
        warnings.append("the rubric has no pass/fail criterion: no rubric pass rate")
    columns["f:rubric_pass_rate"], columns["y:rubric_pass_rate"] = f_r, y_r
    severity_cost = {str(k): float(v) for k, v in costs["severity"].items()}
    unit_cost = severity_cost[SEVERITY_COST_LEVEL]
    columns["f:expected_cost"] = (1.0 - f_r) * unit_cost
    if rubric:
        sev = np.fmax.reduce([np.where(np.isfinite(crit_sev[c.id]), crit_sev[c.id], -np.inf)
                              for c in rubric])
        by_level = np.array([severity_cost[str(k)] for k in range(1, 6)])
        finite = np.isfinite(sev)
        # A failure's severity is the worst of its criteria's (mean annotator severity,
        # rounded to a level); a failure nobody rated for severity costs the middle level.
        level_at = np.clip(np.rint(np.where(finite, sev, 3.0)), 1, 5).astype(np.intp) - 1
        fail_cost = np.where(finite, by_level[level_at], unit_cost)
        columns["y:expected_cost"] = np.where(np.isfinite(y_r), (1.0 - y_r) * fail_cost, np.nan)
    else:
        columns["y:expected_cost"] = np.full(n, np.nan)
    for c in criteria:
        if c.has_pass_reading() and c.scale != "pairwise":
            columns[f"f:pass_rate:{c.key}"] = crit_f[c.id]
            columns[f"y:pass_rate:{c.key}"] = crit_y[c.id]
        if c.scale in ("ordinal", "interval"):
            columns[f"f:mean_score:{c.key}"] = crit_level_f.get(c.id, np.full(n, np.nan))
            columns[f"y:mean_score:{c.key}"] = crit_level_y[c.id]
    if wanted:
        metrics = [m for m in metrics if m.key in set(wanted)]
    for m in metrics:
        outs[f"f:{m.key}"] = columns[f"f:{m.key}"]
        outs[f"y:{m.key}"] = columns[f"y:{m.key}"]
    return SelectionInputs(
        study_id=study.pk, study_simulated=bool(study.is_simulated),
        plan_version=plan.version if plan is not None else None, plan_spec=spec, plan=sel,
        plan_locked=plan_locked, draft_plan_version=draft_version, rubric_rule=rule,
        costs=costs, dimension=dimension, possible_labels=possible, judge=judge,
        candidates=candidates, criteria=criteria, metrics=metrics, outputs=outs,
        annotators_simulated=annotators_simulated, warnings=warnings,
        pairwise_criterion=pair_crit, comparisons=comparisons,
    )


def empty_comparisons() -> pd.DataFrame:
    """A comparisons frame without rows (the columns of `SelectionInputs.comparisons`)."""
    return pd.DataFrame({
        "comparison": pd.Series(dtype="int64"), "item": pd.Series(dtype="int64"),
        "a": pd.Series(dtype="int64"), "b": pd.Series(dtype="int64"),
        "stratum": pd.Series(dtype=object), "f": pd.Series(dtype="float64"),
        "y": pd.Series(dtype="float64"), "weight": pd.Series(dtype="float64"),
    })


def pairwise_criterion(
    criteria: Sequence[CriterionMeta], spec: Mapping[str, Any] | None, warnings: list[str],
) -> CriterionMeta | None:
    """The pairwise criterion the report estimates: the first one the plan gives a win_rate
    threshold, else the rubric's first pairwise criterion (the others are named in a
    warning)."""
    pairs = [c for c in criteria if c.scale == "pairwise"]
    if not pairs:
        return None
    planned = [k for k, e in ((spec or {}).get("criteria") or {}).items()
               if isinstance(e, Mapping) and e.get("metric") == "win_rate"]
    chosen = next((c for k in planned for c in pairs if c.key == k), pairs[0])
    others = [c.key for c in pairs if c is not chosen]
    if others:
        warnings.append(f"win rates and Bradley-Terry strengths are estimated on the pairwise "
                        f"criterion '{chosen.key}' only; not on {', '.join(others)}")
    return chosen


def _a_wins(num: FloatArray, text: Any) -> FloatArray:
    """The "A wins" score of stored pairwise values: value_num when stored (A 1, B 0, tie
    0.5, as the judges and importers write it), else the value's text."""
    out = np.where(np.isin(num, (0.0, 0.5, 1.0)), num, np.nan)
    if text is not None:
        from_text = pd.Series(np.asarray(text, dtype=object)).map(A_WINS).to_numpy(
            dtype=np.float64, na_value=np.nan)
        out = np.where(np.isfinite(out), out, from_text)
    return np.asarray(out, dtype=np.float64)


def _comparisons_load(
    study: Any, crit: CriterionMeta, judge: Mapping[str, Any] | None, cand_ids: list[int],
    item_rows: pd.DataFrame | None, dimension: str | None, warnings: list[str],
) -> tuple[pd.DataFrame, list[int]]:
    """The comparisons of two compared candidates with the judge's "A wins" score, the human
    label by the one rule (adjudication, then gold, then the side most annotators chose) and the
    inclusion weight, by the rules of the outputs' labels (module docstring); five queries.
    Returns the frame and the ids of the annotators who labelled them."""
    from django.db.models import CharField, F, Value
    from django.db.models.functions import Coalesce

    from annotations.models import Adjudication, Annotation, GoldLabel
    from calibration.frames import human_labels, pairwise_a_wins, pairwise_side
    from judges.models import Verdict
    from studies.models import Comparison

    cmps = _frame(
        Comparison.objects.filter(study=study, output_a__candidate_id__in=cand_ids,
                                  output_b__candidate_id__in=cand_ids)
        .order_by("id").values_list("id", "item_id", "output_a__candidate_id",
                                    "output_b__candidate_id"),
        ["comparison", "item", "a", "b"])
    m = len(cmps)
    if not m:
        return empty_comparisons(), []
    cmps = cmps.astype({"comparison": "int64", "item": "int64", "a": "int64", "b": "int64"})
    index = pd.Index(cmps["comparison"].to_numpy())
    if item_rows is not None and len(item_rows):
        at = pd.Index(item_rows["item"].to_numpy(dtype=np.int64)).get_indexer(
            cmps["item"].to_numpy())
        labels = item_rows["label"].astype(object).to_numpy()
        stratum = np.where(at >= 0, labels[np.maximum(at, 0)], UNKNOWN)
    else:
        stratum = np.full(m, ALL if dimension is None else UNKNOWN, dtype=object)
    cmps["stratum"] = pd.Series(stratum, dtype=object).astype(str).to_numpy()

    f = np.full(m, np.nan)
    if judge is not None:
        v = _frame(
            Verdict.objects.filter(judge_version_id=judge["id"], criterion_id=crit.id,
                                   is_scored=True, comparison__isnull=False)
            .values_list("comparison_id", "value_num", "value", "probability"),
            ["comparison", "num", "value", "probability"], text=["value"])
        if len(v):
            at = index.get_indexer(v["comparison"].to_numpy(dtype=np.int64))
            keep = at >= 0
            score = _a_wins(v["num"].to_numpy(dtype=np.float64)[keep],
                            v["value"].astype(object).to_numpy()[keep])
            prob = v["probability"].to_numpy(dtype=np.float64)[keep]
            # P(A wins) only when every verdict has one (the outputs' rule).
            use_prob = bool(prob.size) and bool(np.all(np.isfinite(prob)))
            f = _mean_at(at[keep], prob if use_prob else score, m)
        if not np.isfinite(f).any():
            warnings.append(f"the judge has no verdict on the comparisons of '{crit.key}': "
                            "its win rates are the humans' only")

    ann = _frame(
        Annotation.objects.filter(criterion_id=crit.id, comparison__isnull=False).annotate(
            a_inclusion=F("assignment__entry__inclusion_probability"),
            a_draw=Coalesce("assignment__entry__draw_kind", Value(""),
                            output_field=CharField()),
        ).values_list("comparison_id", "annotator_id", "value_num", "value", "a_inclusion",
                      "a_draw"),
        ["comparison", "annotator", "num", "value", "inclusion", "draw_kind"],
        text=["value", "draw_kind"])
    annotators: list[int] = []
    at = np.empty(0, dtype=np.intp)
    if len(ann):
        at = index.get_indexer(ann["comparison"].to_numpy(dtype=np.int64))
        keep = at >= 0
        ann = ann[keep]
        at = at[keep]
        annotators = sorted({int(x) for x in ann["annotator"].to_numpy(dtype=np.int64)})
        kinds = ann["draw_kind"].astype(object).to_numpy()
        has_any = np.zeros(m, dtype=bool)
        has_any[at] = True
        seen = np.zeros(m, dtype=bool)
        np.logical_or.at(seen, at, kinds != "escalation")
        escalated_only = int((has_any & ~seen).sum())
        if escalated_only:
            warnings.append(f"{escalated_only} comparison(s) labelled only through escalations "
                            "(not a random draw) are left out of the win rates")
    stored: dict[str, dict[int, float]] = {"gold": {}, "adjudicated": {}}
    for name, model in (("gold", GoldLabel), ("adjudicated", Adjudication)):
        lab = _frame(model.objects.filter(criterion_id=crit.id, comparison__isnull=False)
                     .order_by("id").values_list("comparison_id", "value"),
                     ["comparison", "label"], text=["label"])
        if not len(lab):
            continue
        lab = lab.drop_duplicates("comparison", keep="last")  # the latest by id
        l_at = index.get_indexer(lab["comparison"].to_numpy(dtype=np.int64))
        sides = pairwise_side(_a_wins(np.full(len(lab), np.nan),
                                      lab["label"].astype(object).to_numpy()))
        for pos, side in zip(l_at.tolist(), sides.tolist(), strict=True):
            if pos >= 0 and math.isfinite(side):
                stored[name][pos] = side
    # The one human-label rule (calibration.frames.human_labels) on the side codes: the
    # adjudication, then gold, then the side most annotators chose (a tie for the most
    # frequent: none), read as the "A wins" score (A 1, tie 0.5, B 0).
    hl = human_labels(
        subject=at,
        reading=pairwise_side(_a_wins(ann["num"].to_numpy(dtype=np.float64),
                                      ann["value"].astype(object).to_numpy()))
        if len(ann) else np.empty(0),
        draw_kind=ann["draw_kind"].astype(object).to_numpy() if len(ann)
        else np.empty(0, dtype=object),
        inclusion=ann["inclusion"].to_numpy(dtype=np.float64) if len(ann) else np.empty(0),
        gold=stored["gold"], adjudicated=stored["adjudicated"])
    y = np.full(m, np.nan)
    weight = np.ones(m)
    countable = np.zeros(m, dtype=bool)
    y[hl.subjects] = pairwise_a_wins(hl.label)
    countable[hl.subjects] = hl.countable
    weight[hl.subjects] = hl.weight
    y[~countable] = np.nan
    cmps["f"] = f
    cmps["y"] = y
    cmps["weight"] = weight
    return cmps[list(COMPARISON_COLUMNS)].reset_index(drop=True), annotators


def _mean_at(at: npt.NDArray[np.intp], values: FloatArray, n: int) -> FloatArray:
    """Mean of `values` per position `at` over n positions (NaN where none): several verdicts
    of one judge version on an output (samples, orders) average into one predictor."""
    ok = np.isfinite(values)
    if n == 0:
        return np.zeros(0)
    s = np.bincount(at[ok], weights=values[ok], minlength=n)
    k = np.bincount(at[ok], minlength=n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, s / np.where(k > 0, k, 1.0), np.nan)


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
    "A_WINS",
    "COMPARISON_COLUMNS",
    "LOAD_MAX_QUERIES",
    "LOAD_PAIRWISE_QUERIES",
    "SEVERITY_COST_LEVEL",
    "CriterionMeta",
    "MetricMeta",
    "SelectionInputs",
    "empty_comparisons",
    "metric_catalogue",
    "mix_problems",
    "pairwise_criterion",
    "plan_read",
    "resolve_dimension",
    "selection_fingerprint",
    "selection_inputs_check",
    "selection_inputs_load",
]
