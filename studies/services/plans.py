"""The analysis plan: validated against the study, versioned, locked."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from reviewhub.errors import Conflict

from ..models import (
    AnalysisPlan,
    Study,
)
from ..selectors import dimensions_current, rubric_current
from ..spec import (
    PlanContext,
    plan_spec_validate,
)
from ._common import _lock_study


def plan_context(*, study: Study) -> PlanContext:
    """The rubric and strata a plan of this study is checked against."""
    rubric = rubric_current(study=study)
    criteria = {c.key: c for c in rubric.criteria.all()} if rubric else {}
    dims = {d["key"]: d for d in dimensions_current(study=study)}
    return PlanContext(rubric_version=rubric.version if rubric else None, criteria=criteria,
                       dimensions=dims)


def _plan_validate(study: Study, spec: Any) -> dict[str, Any]:
    return plan_spec_validate(spec, context=plan_context(study=study))


def plan_create(
    *, study: Study, spec: Any, created_by: User | None, notes: str = ""
) -> AnalysisPlan:
    """Create the study's first analysis plan (v1); later versions use `plan_new_version`."""
    normalised = _plan_validate(study, spec)
    with transaction.atomic():
        _lock_study(study)
        if AnalysisPlan.objects.filter(study=study).exists():
            raise Conflict("The study already has an analysis plan; edit it, or save a new "
                           "version (POST .../plans/<version>/new-version).")
        return AnalysisPlan.objects.create(study=study, version=1, spec=normalised,
                                           notes=notes or "", created_by=created_by)


def plan_update(*, plan: AnalysisPlan, spec: Any, notes: str | None = None) -> AnalysisPlan:
    """Edit an unlocked plan in place; a locked plan is refused with 409."""
    normalised = _plan_validate(plan.study, spec)
    with transaction.atomic():
        plan = AnalysisPlan.objects.select_for_update().get(pk=plan.pk)
        if plan.is_locked:
            raise Conflict(
                f"Plan v{plan.version} is locked (by {plan.locked_by or 'unknown'} at "
                f"{plan.locked_at:%Y-%m-%d %H:%M} UTC); save it as a new version instead.",
                details={"version": plan.version, "locked_at": plan.locked_at.isoformat()
                         if plan.locked_at else None},
            )
        plan.spec = normalised
        update = ["spec"]
        if notes is not None:
            plan.notes = notes
            update.append("notes")
        plan.save(update_fields=update)
    return plan


def plan_new_version(
    *, study: Study, spec: Any, created_by: User | None, notes: str = ""
) -> AnalysisPlan:
    """Save `spec` as the next plan version; earlier versions (locked or not) stay as they are."""
    normalised = _plan_validate(study, spec)
    with transaction.atomic():
        _lock_study(study)
        last = AnalysisPlan.objects.filter(study=study).aggregate(m=Max("version"))["m"] or 0
        return AnalysisPlan.objects.create(study=study, version=last + 1, spec=normalised,
                                           notes=notes or "", created_by=created_by)


def plan_lock(*, plan: AnalysisPlan, user: User) -> AnalysisPlan:
    """Lock (pre-register) a plan, recording who and when. The spec is re-checked against the
    current rubric and strata first: a plan must not be frozen against a rubric it no longer
    matches."""
    _plan_validate(plan.study, plan.spec)
    with transaction.atomic():
        plan = AnalysisPlan.objects.select_for_update().get(pk=plan.pk)
        if plan.is_locked:
            raise Conflict(f"Plan v{plan.version} is already locked.")
        plan.locked_at = timezone.now()
        plan.locked_by = user
        plan.save(update_fields=["locked_at", "locked_by"])
    return plan
