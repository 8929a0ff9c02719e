"""Reads for reports: report snapshot lookups and the texts of subjects.

The ratings themselves (verdicts, annotations, their evidence) are read through
`calibration.frames`, the one reader of ratings for statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from snapshots.models import ReportSnapshot
from studies.models import Comparison, Output, Study
from studies.subjects import SubjectRef


def reports_for_study(
    *, study: Study, kind: str = ReportSnapshot.Kind.AGREEMENT
) -> QuerySet[ReportSnapshot]:
    """The study's report snapshots of one kind, newest first, without the (large) result."""
    return (
        ReportSnapshot.objects.filter(study=study, kind=kind)
        .defer("result")
        .select_related("plan")
    )


# The one next step a lead reads beside each state of the decision table.
NEXT_STEPS = {
    "not_enough_evidence": "Label more outputs: {missing} human labels are missing on the "
                           "primary metric.",
    "no_candidate_passes_gates": "No candidate passes the gates: fix or replace the failing "
                                 "candidates, or revisit the gates in a new plan version.",
    "no_candidate_meets_threshold": "No candidate meets {threshold}: try other candidates, or "
                                    "revisit the threshold in a new plan version.",
    "too_close": "Label more: send the next labels the selection report proposes, then "
                 "rebuild it.",
    "leads_unproven": "Label about {needed} more outputs of {candidate} to settle {threshold}.",
    "ship": "Ship {candidate}, and watch the strata where another candidate is better.",
}


# The few keys of a selection result that the decision summary shows (a result can be
# megabytes, so only these are read).
_DECISION_KEYS = ("id", "study_id", "computed_at", "result__decision", "result__plan_version",
                  "result__exploratory", "result__margin", "result__primary_metric",
                  "result__judge")


def _finished_selections() -> QuerySet[ReportSnapshot]:
    return ReportSnapshot.objects.filter(kind=ReportSnapshot.Kind.SELECTION,
                                         status=ReportSnapshot.Status.DONE)


def study_decision_summary(*, study: Study) -> dict[str, Any] | None:
    """The study's current decision for its overview and the home page: the latest finished
    selection snapshot's state, candidate, deciding difference against the margin, date,
    whether it followed a locked plan, and the one next step; None without one. Reads only
    the result's few keys it shows (a result can be megabytes)."""
    row = (_finished_selections().filter(study=study).order_by("-computed_at", "-id")
           .values(*_DECISION_KEYS).first())
    return None if row is None else _decision_summary(row)


def study_decision_summaries(*, studies: Sequence[Study]) -> dict[int, dict[str, Any]]:
    """`study_decision_summary` of several studies in one query (the home page's list), by
    study id; a study without a finished selection snapshot is absent."""
    latest = (_finished_selections().filter(study=OuterRef("pk"))
              .order_by("-computed_at", "-id").values("id")[:1])
    latest_ids = (Study.objects.filter(pk__in=[s.pk for s in studies])
                  .annotate(latest=Subquery(latest)).values("latest"))
    rows = _finished_selections().filter(id__in=latest_ids).values(*_DECISION_KEYS)
    return {row["study_id"]: _decision_summary(row) for row in rows}


def _decision_summary(row: dict[str, Any]) -> dict[str, Any]:
    decision = row["result__decision"] if isinstance(row["result__decision"], dict) else {}
    state = str(decision.get("verdict") or "")
    locked = row["result__plan_version"] is not None and not row["result__exploratory"]
    diff = decision.get("difference") if isinstance(decision.get("difference"), dict) else None
    headline = str(decision.get("headline") or "") or (
        f"Ship {decision.get('candidate')}" if state == "ship" else state.replace("_", " "))
    step = NEXT_STEPS.get(state, "Open the selection report.").format(
        missing=decision.get("labels_needed") or "some",
        needed=decision.get("labels_needed") or "some",
        candidate=decision.get("candidate") or "the leader",
        threshold=decision.get("threshold") or "the threshold")
    if not locked and state in ("ship", "leads_unproven", "too_close"):
        step = ("Lock the analysis plan, then rebuild the report: this decision is "
                "exploratory. " + step)
    if row["result__judge"] is None and state == "not_enough_evidence":
        step += " Or run a judge on the outputs."
    return {
        "snapshot_id": row["id"], "computed_at": row["computed_at"], "state": state,
        "headline": headline, "candidate": decision.get("candidate"),
        "runner_up": decision.get("runner_up"),
        "difference": diff, "margin": row["result__margin"],
        "primary_metric": row["result__primary_metric"], "locked": locked, "next_step": step,
    }


def reports_of_every_kind(*, study: Study) -> QuerySet[ReportSnapshot]:
    """The study's report snapshots of every kind, newest first, without the result."""
    return ReportSnapshot.objects.filter(study=study).defer("result").order_by("-id")


def report_get(
    *, study: Study, report_id: int, kind: str = ReportSnapshot.Kind.AGREEMENT
) -> ReportSnapshot | None:
    """One snapshot of the study, or None; another kind's snapshot is not found here either,
    so an agreement URL never shows a calibration result."""
    return (
        ReportSnapshot.objects.filter(study=study, pk=report_id, kind=kind)
        .select_related("plan")
        .first()
    )


def subjects_describe(*, study: Study, subjects: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Item input and output texts of encoded subjects (for the disagreeing-examples page)."""
    refs = [SubjectRef.from_code(s) for s in subjects]
    out_ids = [r.id for r in refs if r.is_output]
    cmp_ids = [r.id for r in refs if not r.is_output]
    result: dict[int, dict[str, Any]] = {}
    for oid, ext, inp, cand, text in Output.objects.filter(study=study, pk__in=out_ids).values_list(
        "id", "item__external_id", "item__input", "candidate__name", "text"
    ):
        result[SubjectRef.output(oid).code] = {"item": ext, "input": inp, "outputs": [(cand, text)]}
    for cid, ext, inp, ca, ta, cb, tb in Comparison.objects.filter(
        study=study, pk__in=cmp_ids
    ).values_list(
        "id",
        "item__external_id",
        "item__input",
        "output_a__candidate__name",
        "output_a__text",
        "output_b__candidate__name",
        "output_b__text",
    ):
        result[SubjectRef.comparison(cid).code] = {
            "item": ext,
            "input": inp,
            "outputs": [(f"A: {ca}", ta), (f"B: {cb}", tb)],
        }
    return result


__all__ = [
    "report_get",
    "reports_for_study",
    "subjects_describe",
]
