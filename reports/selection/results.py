"""The typed, versioned result of a selection snapshot (``ReportSnapshot.result`` of kind
"selection") and its JSON form and JSON Schema.

The dataclasses below are the JSON shape field for field (docs/reports.md, "Selection
report"); `from_json` checks every field's type and refuses an unknown ``version``, and the
schema is derived from the same dataclasses by the generic codec of `reports.results`, so
neither can drift from the other. Estimates keep the shape `evalstats` writes:
``PPIJson`` is `evalstats.ppi.PPIEstimate.to_json()`, ``EstimateJson`` the gate and rank
statistics' `evalstats.results.Estimate`.

Pure module: no Django, no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from reports.results import ResultFormatError
from reports.stored_result import StoredResult, result_object

SELECTION_RESULT_VERSION = 2
# Version 1 results (before the decision table and the stated rubric rule) are still read:
# `from_json` upgrades them in memory, saying which rubric rule they were computed with.
LEGACY_RUBRIC_RULE = {
    "kind": "legacy_half",
    "pass_share": 0.5,
    "text": "an output passes when it passes every hard-gate criterion and at least half "
            "(by weight) of the other criteria (the rule of reports computed before the "
            "rubric stated its rule)",
}
LEGACY_VERDICTS = {"insufficient_data": "Insufficient data",
                   "no_candidate_passes": "No candidate passes",
                   "too_close": "Too close to call", "ship": "Ship"}


@dataclass(frozen=True)
class PPIJson:
    """A mean or difference with its normal interval (`evalstats.ppi.PPIEstimate`)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    se: float | None
    n_labelled: int
    n_unlabelled: int
    lam: float | None
    method: str
    level: float
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class EstimateJson:
    """A gate or rank statistic with its interval (`evalstats.results.Estimate`)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_items: int
    method: str
    level: float | None
    n_resamples: int | None
    p_value: float | None
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Deviation:
    field: str
    message: str


@dataclass(frozen=True)
class JudgeRef:
    id: int
    display: str
    simulated: bool


@dataclass(frozen=True)
class CandidateRef:
    id: int
    name: str
    model_family: str
    public_scores: Mapping[str, Any]


@dataclass(frozen=True)
class MetricRef:
    key: str
    label: str
    unit: str  # "rate" | "score" | "cost"
    higher_is_better: bool


@dataclass(frozen=True)
class EstimateRow:
    """Three estimates of one candidate x metric x stratum ("mix": the deployment mix)."""

    candidate: str
    metric: str
    stratum: str
    n_outputs: int
    n_labelled: int
    no_data: bool
    human: PPIJson | None
    judge: PPIJson | None
    ppi: PPIJson | None


@dataclass(frozen=True)
class DifferenceRow:
    """Paired difference a - b (in the metric's unit) on the items both answered."""

    metric: str
    stratum: str
    a: str
    b: str
    estimate: PPIJson
    p_value: float | None


@dataclass(frozen=True)
class RankingRow:
    stratum: str
    order: tuple[str, ...]
    best: str | None


@dataclass(frozen=True)
class FlipRow:
    """A stratum whose best candidate beats the mix's best there, after Holm's correction."""

    stratum: str
    best: str
    mix_best: str
    difference: PPIJson
    p_value: float
    p_adjusted: float
    correction: str


@dataclass(frozen=True)
class GateRow:
    candidate: str
    stratum: str
    gate: str
    threshold: float
    estimate: EstimateJson
    bound: float | None
    passed: bool | None
    n: int


@dataclass(frozen=True)
class ThresholdRow:
    candidate: str
    metric: str
    stratum: str
    threshold: float
    direction: str
    status: str  # "pass" | "fail" | "uncertain"


@dataclass(frozen=True)
class FrontierRow:
    candidate: str
    quality: float | None
    latency_p95_ms: float | None
    cost_per_1000: float | None
    on_frontier: bool


@dataclass(frozen=True)
class PublicRow:
    candidate: str
    public_score: float | None
    public_rank: float | None
    private_rank: float | None
    private_value: float | None


@dataclass(frozen=True)
class PublicFlag:
    candidate: str
    message: str


@dataclass(frozen=True)
class PublicVsPrivate:
    benchmark: str
    rows: tuple[PublicRow, ...]
    kendall_tau: EstimateJson | None
    flags: tuple[PublicFlag, ...]


@dataclass(frozen=True)
class Decision:
    """The state of the decision table (reports/selection/decision.py, docs/selection.md)."""

    # "ship" | "leads_unproven" | "no_candidate_meets_threshold" |
    # "no_candidate_passes_gates" | "too_close" | "not_enough_evidence" (version 1 results:
    # "no_candidate_passes", "insufficient_data" too)
    verdict: str
    headline: str
    candidate: str | None
    runner_up: str | None
    difference: PPIJson | None
    text: str
    labels_needed: int | None  # how many labels would settle it, when the state says
    threshold: str | None  # the threshold the state names ("correct ≥ 80 %")
    basis: str  # "prediction_powered" | "human_only"


@dataclass(frozen=True)
class RubricRule:
    """When an output passes the rubric (the rule in force when the snapshot was computed)."""

    kind: str  # "all" | "weighted" | "legacy_half"
    pass_share: float | None
    text: str


@dataclass(frozen=True)
class NextLabels:
    """Extra human labels per stratum that would resolve a too-close decision."""

    target_se: float
    per_stratum: Mapping[str, int]
    total: int
    feasible: bool
    # The modelled mix standard error of the decisive difference now and after the labels.
    se_current: float | None
    se_planned: float | None


@dataclass(frozen=True)
class WinRateRow:
    """The win rate of candidate a over candidate b on the comparisons of the two (ties count
    half), in one stratum or on the mix: human-only, judge-only and prediction-powered."""

    a: str
    b: str
    stratum: str
    n_comparisons: int
    n_labelled: int
    human: PPIJson | None
    judge: PPIJson | None
    ppi: PPIJson | None


@dataclass(frozen=True)
class BradleyTerryRow:
    """A candidate's Bradley-Terry strength (log-odds against the reference, whose strength
    is 0 with no interval) in one stratum or on the mix, and its rank there (1 = strongest)."""

    stratum: str
    candidate: str
    strength: float | None
    ci_low: float | None
    ci_high: float | None
    rank: int


@dataclass(frozen=True)
class Pairwise:
    """Win rates and Bradley-Terry strengths on one pairwise criterion."""

    criterion: str
    win_rates: tuple[WinRateRow, ...]
    bradley_terry: tuple[BradleyTerryRow, ...]
    reference: str | None


@dataclass(frozen=True)
class SelectionResult(StoredResult):
    """The selection report (docs/reports.md), version `SELECTION_RESULT_VERSION`."""

    SCHEMA_CONSTS: ClassVar[Mapping[str, Any]] = {
        "version": SELECTION_RESULT_VERSION, "kind": "selection"}

    version: int
    kind: str
    plan_version: int | None
    fingerprint: str
    simulated: bool
    level: float
    dimension: str | None
    strata: tuple[str, ...]
    mix: Mapping[str, float]
    mix_source: str  # "plan" | "params" | "observed"
    plan_followed: bool
    # No locked plan: the report follows the study's latest (unlocked) plan, if any, and is
    # exploratory; its version is `draft_plan_version`.
    exploratory: bool
    draft_plan_version: int | None
    deviations: tuple[Deviation, ...]
    primary_metric: str
    # Where the primary metric came from: "plan" (the plan names it) or "default".
    primary_source: str
    rubric_rule: RubricRule
    margin: float
    judge: JudgeRef | None
    candidates: tuple[CandidateRef, ...]
    metrics: tuple[MetricRef, ...]
    estimates: tuple[EstimateRow, ...]
    differences: tuple[DifferenceRow, ...]
    rankings: tuple[RankingRow, ...]
    flips: tuple[FlipRow, ...]
    gates: tuple[GateRow, ...]
    gate_failures: Mapping[str, tuple[str, ...]]
    thresholds: tuple[ThresholdRow, ...]
    frontier: tuple[FrontierRow, ...]
    public_vs_private: PublicVsPrivate | None
    decision: Decision
    next_labels: NextLabels | None
    pairwise: Pairwise | None
    missing: tuple[str, ...]
    warnings: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelectionResult:
        """Read a stored result; ResultFormatError names the first field that does not fit."""
        version = result_object(data).get("version")
        if version == 1:
            data = upgrade_v1(data)
            version = data.get("version")
        if version != SELECTION_RESULT_VERSION:
            raise ResultFormatError(
                "version", f"selection result version {version!r} is not "
                f"{SELECTION_RESULT_VERSION}, the version this code reads")
        return cls.decode(data)

    def estimate(self, candidate: str, metric: str, stratum: str) -> EstimateRow | None:
        """The estimate row of a candidate x metric x stratum, if the report has one."""
        for row in self.estimates:
            if (row.candidate, row.metric, row.stratum) == (candidate, metric, stratum):
                return row
        return None


def upgrade_v1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version 1 result in the version 2 shape: its rubric rule was the legacy one, its
    plan was locked when it had one, its decision read the prediction-powered estimates."""
    out = dict(data)
    out["version"] = SELECTION_RESULT_VERSION
    out.setdefault("exploratory", False)
    out.setdefault("draft_plan_version", None)
    out.setdefault("primary_source", "plan" if data.get("plan_version") is not None
                   else "default")
    out.setdefault("rubric_rule", dict(LEGACY_RUBRIC_RULE))
    decision = data.get("decision")
    if isinstance(decision, Mapping):
        d = dict(decision)
        verdict = d.get("verdict")
        head = LEGACY_VERDICTS.get(str(verdict), str(verdict))
        if verdict == "ship" and d.get("candidate"):
            head = f"Ship {d['candidate']}"
        d.setdefault("headline", head)
        d.setdefault("labels_needed", None)
        d.setdefault("threshold", None)
        d.setdefault("basis", "prediction_powered")
        out["decision"] = d
    return out


__all__ = [
    "LEGACY_RUBRIC_RULE",
    "SELECTION_RESULT_VERSION",
    "BradleyTerryRow",
    "CandidateRef",
    "Decision",
    "Deviation",
    "DifferenceRow",
    "EstimateJson",
    "EstimateRow",
    "FlipRow",
    "FrontierRow",
    "GateRow",
    "JudgeRef",
    "MetricRef",
    "NextLabels",
    "PPIJson",
    "Pairwise",
    "PublicFlag",
    "PublicRow",
    "PublicVsPrivate",
    "RankingRow",
    "RubricRule",
    "SelectionResult",
    "ThresholdRow",
    "WinRateRow",
    "upgrade_v1",
]
