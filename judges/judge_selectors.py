"""Reads for judges and judge versions (runs and verdicts: `judges/selectors.py`)."""

from __future__ import annotations

from django.db.models import Count, Max, QuerySet

from reviewhub.api.errors import NotFound, ValidationFailed
from studies.models import Comparison, Criterion, Output, Study
from studies.selectors import rubric_current

from .models import Judge, JudgeVersion


def judges_list(*, study: Study) -> QuerySet[Judge]:
    """The study's judges with their version count and latest version number (one query)."""
    return (
        Judge.objects.filter(study=study)
        .select_related("created_by")
        .annotate(versions_count=Count("versions"), latest_version=Max("versions__version"))
    )


def judge_get(*, study: Study, judge_id: int) -> Judge:
    judge = judges_list(study=study).filter(pk=judge_id).first()
    if judge is None:
        raise NotFound(f"Judge {judge_id} not found in study '{study.slug}'.")
    return judge


def judge_versions_list(*, judge: Judge) -> QuerySet[JudgeVersion]:
    return JudgeVersion.objects.filter(judge=judge).order_by("-version")


def judge_version_get(*, judge: Judge, version_id: int) -> JudgeVersion:
    version = JudgeVersion.objects.filter(judge=judge, pk=version_id).select_related(
        "judge").first()
    if version is None:
        raise NotFound(f"Version {version_id} of judge {judge.pk} not found.")
    return version


def preview_subject_get(
    *, study: Study, output_id: int | None, comparison_id: int | None
) -> Output | Comparison:
    if output_id is not None:
        output = (Output.objects.filter(study=study, pk=output_id)
                  .select_related("item", "study", "candidate").first())
        if output is None:
            raise NotFound(f"Output {output_id} not found in study '{study.slug}'.")
        return output
    if comparison_id is None:
        raise ValidationFailed("Give output_id or comparison_id.",
                               details={"field": "output_id"})
    comparison = (Comparison.objects.filter(study=study, pk=comparison_id)
                  .select_related("item", "study", "output_a", "output_b").first())
    if comparison is None:
        raise NotFound(f"Comparison {comparison_id} not found in study '{study.slug}'.")
    return comparison


def preview_criterion_get(*, study: Study, criterion_key: str | None, pairwise: bool
                          ) -> Criterion:
    """The criterion to preview with: the named one, else the first of the current rubric
    that fits the subject (pairwise for comparisons, any other scale for outputs)."""
    rubric = rubric_current(study)
    if rubric is None:
        raise ValidationFailed("The study has no rubric yet; a preview needs a criterion.",
                               details={"field": "criterion_key"})
    criteria = list(rubric.criteria.all())
    if criterion_key:
        chosen = next((c for c in criteria if c.key == criterion_key), None)
        if chosen is None:
            raise ValidationFailed(f"No criterion {criterion_key!r} in the current rubric.",
                                   details={"field": "criterion_key"})
    else:
        chosen = next((c for c in criteria if (c.scale == "pairwise") == pairwise), None)
        if chosen is None:
            kind = "pairwise" if pairwise else "single-output"
            raise ValidationFailed(f"The current rubric has no {kind} criterion.",
                                   details={"field": "criterion_key"})
    if (chosen.scale == "pairwise") != pairwise:
        raise ValidationFailed(
            f"Criterion {chosen.key!r} is {chosen.scale}: preview it with "
            f"{'a comparison_id' if chosen.scale == 'pairwise' else 'an output_id'}.",
            details={"field": "criterion_key"})
    return chosen
