"""Reads for reports: report snapshot lookups and the texts of subjects.

The ratings themselves (verdicts, annotations, their evidence) are read through
`calibration.frames`, the one reader of ratings for statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from studies.models import Comparison, Output, Study
from studies.subjects import SubjectRef

from .models import ReportSnapshot


def reports_for_study(
    *, study: Study, kind: str = ReportSnapshot.Kind.AGREEMENT
) -> QuerySet[ReportSnapshot]:
    """The study's report snapshots of one kind, newest first, without the (large) result."""
    return (
        ReportSnapshot.objects.filter(study=study, kind=kind)
        .defer("result")
        .select_related("plan")
    )


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
