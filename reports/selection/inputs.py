"""What a selection snapshot reads, as plain types: the criteria and metrics, the inputs'
frames (`SelectionInputs`) and the pure rules on them (the metric catalogue, the strata
dimension in force, the checks of a mix). Pure: no Django; reports/selection/load.py fills
these from the database and reports/selection/compute.py reads them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .params import MIX_TOLERANCE
from .results import MetricRef  # a catalogue metric is the reference its result rows carry

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
    metrics: list[MetricRef]
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


def metric_catalogue(criteria: Sequence[CriterionMeta], cost_unit: str) -> list[MetricRef]:
    """Every metric the rubric supports, in report order."""
    out = [MetricRef("rubric_pass_rate", "Rubric pass rate", "rate", True),
           MetricRef("expected_cost", f"Expected cost per output ({cost_unit})", "cost", False)]
    for c in criteria:
        if c.has_pass_reading():
            out.append(MetricRef(f"pass_rate:{c.key}", f"Pass rate: {c.name}", "rate", True))
    for c in criteria:
        if c.scale in ("ordinal", "interval"):
            out.append(MetricRef(f"mean_score:{c.key}", f"Mean score: {c.name}", "score", True))
    return out


def rubric_criteria(criteria: Sequence[CriterionMeta]) -> list[CriterionMeta]:
    """The criteria the rubric pass rate reads (a pass/fail reading, not pairwise)."""
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


def empty_comparisons() -> pd.DataFrame:
    """A comparisons frame without rows (the columns of `SelectionInputs.comparisons`)."""
    return pd.DataFrame({
        "comparison": pd.Series(dtype="int64"), "item": pd.Series(dtype="int64"),
        "a": pd.Series(dtype="int64"), "b": pd.Series(dtype="int64"),
        "stratum": pd.Series(dtype=object), "f": pd.Series(dtype="float64"),
        "y": pd.Series(dtype="float64"), "weight": pd.Series(dtype="float64"),
    })


__all__ = [
    "ALL",
    "A_WINS",
    "COMPARISON_COLUMNS",
    "SEVERITY_COST_LEVEL",
    "UNKNOWN",
    "CriterionMeta",
    "SelectionInputs",
    "empty_comparisons",
    "metric_catalogue",
    "mix_problems",
    "resolve_dimension",
    "rubric_criteria",
]
