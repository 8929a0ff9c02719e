"""Escalations go to humans: the outputs a calibration snapshot's policy escalated become a new
sampling plan version (annotations' `escalation_plan_create`), drawn as "escalation" so that no
estimate treats them as a random sample. Once graded, the next snapshot replaces the judge's
decision for them with the human consensus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F, Min
from django.db.models.functions import Abs

from annotations.models import SamplingPlan
from annotations.services import escalation_plan_create
from reviewhub.errors import NotFound, ValidationFailed
from studies.models import Study
from studies.subjects import subject_field

from .models import CalibratedScore
from .selectors import snapshot_resolve


@dataclass(frozen=True, kw_only=True)
class EscalationPlan:
    plan: SamplingPlan
    snapshot_id: int
    subject: str  # "output" or "comparison"
    subjects: int  # entries of the plan
    created: bool  # False: the plan made for this snapshot earlier
    escalated: int = 0  # escalation entries (an escalated subject already drawn keeps its draw)
    carried_over: int = 0  # unfinished entries of the active plan carried into this version


def escalation_source(snapshot_id: int) -> str:
    """The idempotency key of a snapshot's escalation plan."""
    return f"calibration:{snapshot_id}"


def escalated_subjects(*, study: Study, snapshot_id: int, subject: str) -> list[int]:
    """Ids of the snapshot's escalated outputs (or comparisons), the most uncertain first
    (smallest |P(pass) - 0.5| over their escalated criteria), then by id."""
    field = subject_field(subject)
    rows = (
        CalibratedScore.objects.filter(
            study=study, snapshot_id=snapshot_id, decision=CalibratedScore.Decision.ESCALATE,
            **{f"{field}__isnull": False},
        )
        .values(field)
        .annotate(u=Min(Abs(F("p_pass") - 0.5)))
        .order_by("u", field)
        .values_list(field, flat=True)
    )
    return [int(r) for r in rows]


def escalations_plan_create(
    *, study: Study, snapshot_id: int | None, created_by: Any, limit: int | None = None,
    keep_sampling: bool = True,
) -> EscalationPlan:
    """Send the escalated outputs of a snapshot (the latest by default) to humans as a new
    sampling plan version; returns the plan and whether it was made now.

    Idempotent: a snapshot whose escalations were sent before answers with that plan (and
    `limit` is not applied again). `limit` keeps the most uncertain outputs. A snapshot that
    escalated only comparisons sends those; one that escalated both sends the outputs (a plan
    has one kind of subject) and says how many comparisons it left in the plan summary.
    `keep_sampling` (the default) carries the active plan's unfinished entries into the new
    version, so random sampling goes on beside the escalations (`escalation_plan_create`).
    """
    resolved = snapshot_resolve(study=study, snapshot_id=snapshot_id)
    if resolved is None:
        raise NotFound("The study has no calibration snapshot yet.")
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise ValidationFailed("limit must be a positive integer.",
                               details={"errors": [{"path": "limit", "message": "must be >= 1"}]})
    source = escalation_source(resolved)
    existing = SamplingPlan.objects.filter(
        study=study, spec__mode="escalation", spec__source=source
    ).order_by("version").first()
    if existing is not None:
        return _result(existing, resolved, created=False)
    outputs = escalated_subjects(study=study, snapshot_id=resolved, subject="output")
    comparisons = escalated_subjects(study=study, snapshot_id=resolved, subject="comparison")
    subject, ids = ("output", outputs) if outputs else ("comparison", comparisons)
    if not ids:
        raise ValidationFailed(
            f"Calibration snapshot {resolved} escalated nothing to humans.",
            details={"errors": [{"path": "snapshot", "message": "no escalated outputs"}]},
        )
    escalated = len(ids)
    if limit is not None:
        ids = ids[:limit]
    plan, created = escalation_plan_create(
        study=study, subject=subject, subject_ids=ids, source=source, created_by=created_by,
        keep_sampling=keep_sampling, details={"snapshot_id": resolved, "escalated": escalated,
                 "left_out_comparisons": len(comparisons) if subject == "output" else 0},
    )
    return _result(plan, resolved, created=created)


def _result(plan: SamplingPlan, snapshot_id: int, *, created: bool) -> EscalationPlan:
    summary = plan.summary if isinstance(plan.summary, dict) else {}
    return EscalationPlan(
        plan=plan, snapshot_id=snapshot_id, subject=str(plan.spec.get("subject", "output")),
        subjects=int(summary.get("entries", 0)), created=created,
        # Plans made before carry-over existed hold escalations only.
        escalated=int(summary["escalated_entries"] if "escalated_entries" in summary
                      else summary.get("entries", 0)),
        carried_over=int(summary.get("carried_over_entries", 0)),
    )


__all__ = ["EscalationPlan", "escalated_subjects", "escalation_source", "escalations_plan_create"]
