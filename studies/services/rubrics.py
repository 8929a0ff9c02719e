"""Rubric versions and their criteria: created, updated while nothing refers to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, QuerySet

from ..models import (
    Criterion,
    RubricVersion,
    Study,
)
from ..selectors import rubric_criteria_as_specs, rubric_current
from ..spec import (
    criteria_validate,
    rubric_aggregate_validate,
)
from ._common import Outcome, _lock_study

# The apps above studies answer whether something of theirs refers to a rubric version (given
# its criteria): each registers its check here when it is ready (AppConfig.ready), so that
# studies neither imports them nor reaches their tables.
RubricUseCheck = Callable[[RubricVersion, QuerySet[Criterion]], bool]
_RUBRIC_USE_CHECKS: dict[str, RubricUseCheck] = {}


def rubric_use_register(app: str, check: RubricUseCheck) -> None:
    """Register (or replace) `app`'s answer to "does anything of yours refer to this rubric
    version?", asked by `rubric_in_use`."""
    _RUBRIC_USE_CHECKS[app] = check


def rubric_in_use(*, rubric: RubricVersion) -> bool:
    """Whether anything downstream refers to the rubric's criteria: an active sampling plan,
    verdicts, annotations, judge jobs (queued work would judge against changed text), gold
    labels, adjudications; each app above studies answers for its own tables
    (`rubric_use_register`)."""
    criteria = Criterion.objects.filter(rubric=rubric)
    return any(check(rubric, criteria) for check in _RUBRIC_USE_CHECKS.values())


def _criteria_write(rubric: RubricVersion, criteria: list[dict[str, Any]]) -> None:
    existing = {c.key: c for c in rubric.criteria.all()}
    keys = {c["key"] for c in criteria}
    Criterion.objects.filter(rubric=rubric).exclude(key__in=keys).delete()
    for position, c in enumerate(criteria):
        obj = existing.get(c["key"]) or Criterion(rubric=rubric, key=c["key"])
        for name, value in c.items():
            setattr(obj, name, value)
        obj.position = position
        obj.save()


def rubric_create(
    *, study: Study, criteria: list[dict[str, Any]], created_by: User | None,
    notes: str = "", aggregate: Any = None,
) -> RubricVersion:
    """Create the next rubric version (v1 for a new study) holding exactly `criteria`, with
    the rubric's rule `aggregate` (default: every pass/fail criterion must pass)."""
    normalised = criteria_validate(criteria)
    rule = rubric_aggregate_validate(aggregate)
    with transaction.atomic():
        _lock_study(study)
        last = RubricVersion.objects.filter(study=study).aggregate(m=Max("version"))["m"] or 0
        rubric = RubricVersion.objects.create(study=study, version=last + 1, notes=notes or "",
                                              created_by=created_by, aggregate=rule)
        _criteria_write(rubric, normalised)
    return rubric


def rubric_update(
    *, study: Study, criteria: list[dict[str, Any]], created_by: User | None,
    notes: str = "", aggregate: Any = None,
) -> tuple[RubricVersion, Outcome]:
    """Make `criteria` the study's rubric.

    - no rubric yet: creates v1 ("created");
    - same criteria as the current version: nothing changes ("unchanged");
    - current version not yet used (no verdict, annotation, judge job, gold label or
      adjudication refers to its criteria): edited in place ("updated");
    - otherwise: version n+1 holding exactly the new criteria ("created"); the old version
      stays as it was for everything that refers to it.
    """
    normalised = criteria_validate(criteria)
    rule = rubric_aggregate_validate(aggregate)
    with transaction.atomic():
        _lock_study(study)
        current = rubric_current(study=study)
        if current is None:
            return rubric_create(study=study, criteria=normalised, created_by=created_by,
                                 notes=notes, aggregate=rule), "created"
        same_rule = (current.aggregate or {"kind": "all"}) == rule
        if rubric_criteria_as_specs(rubric=current) == normalised and same_rule and (
            not notes or notes == current.notes
        ):
            return current, "unchanged"
        if rubric_in_use(rubric=current):
            return rubric_create(study=study, criteria=normalised, created_by=created_by,
                                 notes=notes, aggregate=rule), "created"
        _criteria_write(current, normalised)
        if notes and notes != current.notes:
            current.notes = notes
            current.save(update_fields=["notes"])
        if not same_rule:
            current.aggregate = rule
            current.save(update_fields=["aggregate"])
    return current, "updated"
