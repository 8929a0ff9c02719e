"""The action of a too-close selection report: send the next labels to humans.

`next_labels_plan_create` turns a snapshot's ``next_labels`` (extra human labels per stratum,
Neyman-allocated on the PPI variances of the decisive paired difference) into a new sampling
plan version through the annotations app's `sampling_plan_create`.

The plan draws, in each stratum, the count the allocation asks for times the number of
compared candidates (``per_stratum`` mode with ``counts``): the plan draws outputs of every
candidate, and the difference needs labels on the outputs of both candidates of an item, so
about that many labels land on each candidate. The plan is drawn as "random", with its
inclusion probabilities, so the next snapshot weighs the new labels correctly. Outputs
already labelled count toward k, as for any new plan version, and the new plan supersedes the
active one. Left for later: drawing whole items (every candidate's output of a drawn item),
which would label pairs by design rather than by chance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from annotations.models import SamplingPlan
from annotations.services import sampling_plan_create
from reviewhub.errors import Conflict, NotFound, ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import Study

from ..results import ResultFormatError
from .results import SelectionResult


@dataclass(frozen=True, kw_only=True)
class NextLabelsPlan:
    plan: SamplingPlan
    snapshot_id: int
    dimension: str | None
    requested: dict[str, int]  # extra labels per stratum the report asked for
    drawn_per_stratum: int  # the largest count the plan draws in one stratum
    note: str


def next_labels_plan_create(*, study: Study, snapshot: ReportSnapshot | int,
                            user: Any) -> NextLabelsPlan:
    """Create the sampling plan of a too-close selection snapshot's next labels.

    Refused (409) unless the snapshot is a finished selection snapshot of the study whose
    report recommends extra labels; the lead role is checked by `sampling_plan_create`.
    """
    if not isinstance(snapshot, ReportSnapshot):
        found = ReportSnapshot.objects.filter(pk=snapshot, study=study).first()
        if found is None:
            raise NotFound(f"Selection report {snapshot} not found.")
        snapshot = found
    if snapshot.study_id != study.pk or snapshot.kind != ReportSnapshot.Kind.SELECTION:
        raise NotFound(f"Selection report {snapshot.pk} not found.")
    if snapshot.status != ReportSnapshot.Status.DONE or not snapshot.result:
        raise Conflict(f"Report {snapshot.pk} is {snapshot.status}; the next labels need a "
                       "finished report.")
    try:
        result = SelectionResult.from_json(snapshot.result)
    except ResultFormatError as exc:
        # A result written by another version of the code (or damaged) is not guessed at.
        raise Conflict(f"Report {snapshot.pk}'s stored result cannot be read ({exc}); build "
                       "a new selection report.") from exc
    nxt = result.next_labels
    if nxt is None or nxt.total <= 0:
        raise Conflict(
            f"Report {snapshot.pk} asks for no extra labels (decision: "
            f"{result.decision.verdict}).")
    requested = {k: int(v) for k, v in nxt.per_stratum.items() if v > 0}
    n_candidates = max(1, len(result.candidates))
    if not requested:
        raise Conflict(f"Report {snapshot.pk} asks for no extra labels.")
    if result.dimension is None:
        # A sampling spec draws at random only within the strata of a dimension.
        raise ValidationFailed(
            "The report has no strata dimension; a sampling plan draws at random within the "
            "strata of a dimension. Build the report with params.dimension first.",
            details={"errors": [{"path": "params.dimension", "message": "required"}]})
    counts = {label: n * n_candidates for label, n in requested.items()}
    per = max(counts.values())
    spec: dict[str, Any] = {"mode": "per_stratum", "dimension": result.dimension,
                            "counts": counts, "seed": snapshot.pk}
    note = (f"the plan draws, per stratum of '{result.dimension}', the requested labels times "
            f"{n_candidates} candidates ({', '.join(f'{k}: {v}' for k, v in counts.items())}); "
            "strata not listed get no new draw")
    plan = sampling_plan_create(study=study, spec=spec, k=1, gold_rate=0.0, created_by=user)
    return NextLabelsPlan(plan=plan, snapshot_id=snapshot.pk, dimension=result.dimension,
                          requested=requested, drawn_per_stratum=per, note=note)


__all__ = ["NextLabelsPlan", "next_labels_plan_create"]
