"""Role checks and plan look-ups shared by every annotation service."""

from __future__ import annotations

from django.contrib.auth.models import User

from reviewhub.capabilities import Capability
from reviewhub.errors import Forbidden
from studies.access import study_capabilities
from studies.models import Criterion, RubricVersion, Study

from ..models import Annotation, SamplingPlan


def require_lead(*, study: Study, user: User) -> None:
    if Capability.LEAD not in study_capabilities(user=user, study=study):
        raise Forbidden(f"This needs the 'lead' role in study '{study.slug}'.")


def require_annotator(*, study: Study, user: User) -> None:
    if Capability.GRADE not in study_capabilities(user=user, study=study):
        raise Forbidden(f"This needs the 'annotator' role in study '{study.slug}'.")


def active_plan(study: Study) -> SamplingPlan | None:
    return (
        SamplingPlan.objects.select_related("rubric")
        .filter(study=study, is_active=True)
        .order_by("-version")
        .first()
    )


def latest_rubric(study: Study) -> RubricVersion | None:
    return RubricVersion.objects.filter(study=study).order_by("-version").first()


def plan_criteria(plan: SamplingPlan) -> list[Criterion]:
    """The criteria annotators answer under this plan (pairwise ones for comparisons only)."""
    qs = Criterion.objects.filter(rubric_id=plan.rubric_id).order_by("position", "id")
    if plan.spec.get("subject", "output") == "comparison":
        return list(qs.filter(scale=Criterion.Scale.PAIRWISE))
    return list(qs.exclude(scale=Criterion.Scale.PAIRWISE))


_CRITERIA_CACHE_MAX = 256
_criteria_cache: dict[tuple[int, float, str], list[Criterion]] = {}


def cached_plan_criteria(plan: SamplingPlan) -> list[Criterion]:
    """plan_criteria, cached per process once the rubric version is frozen.

    studies.rubric_update edits a version in place only until annotations (or verdicts, ...)
    refer to it, so a version with annotations never changes again; caching it saves every
    submit a round trip. The key includes created_at so that a reused id is never confused.
    """
    rubric = plan.rubric
    key = (rubric.pk, rubric.created_at.timestamp(), plan.spec.get("subject", "output"))
    hit = _criteria_cache.get(key)
    if hit is not None:
        return hit
    criteria = plan_criteria(plan)
    if Annotation.objects.filter(criterion__in=[c.pk for c in criteria]).exists():
        if len(_criteria_cache) >= _CRITERIA_CACHE_MAX:
            _criteria_cache.clear()
        _criteria_cache[key] = criteria
    return criteria


def is_failure(criterion: Criterion, value: str) -> bool:
    """Whether a canonical value fails the criterion (pairwise has no pass/fail reading)."""
    if criterion.scale == Criterion.Scale.BINARY:
        return value == "fail"
    if criterion.scale == Criterion.Scale.ORDINAL:
        return criterion.pass_threshold is not None and int(value) < criterion.pass_threshold
    if criterion.scale == Criterion.Scale.CATEGORICAL:
        return bool(criterion.pass_labels) and value not in criterion.pass_labels
    if criterion.scale == Criterion.Scale.INTERVAL:
        return criterion.pass_threshold is not None and float(value) < criterion.pass_threshold
    return False
