"""Gold labels: a lead's known answer for a subject and criterion (canonical encoding)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from reviewhub.errors import NotFound, Problems, ValidationFailed
from studies.models import Comparison, Criterion, Output, Study

from ..constants import SEVERITY_MIN
from ..models import GoldLabel
from .common import require_lead
from .labels import label_clean


def subject_check(
    *, study: Study, criterion: Criterion, output: Output | None, comparison: Comparison | None
) -> dict[str, Any]:
    if criterion.rubric.study_id != study.pk:
        raise NotFound("Criterion not found in this study.")
    if (output is None) == (comparison is None):
        raise Problems.from_mapping(
            {"output": "give exactly one of output or comparison",
             "comparison": "give exactly one of output or comparison"}
        ).error(message="Give exactly one of output or comparison.")
    if criterion.scale == Criterion.Scale.PAIRWISE and comparison is None:
        raise ValidationFailed.at("comparison", "A pairwise criterion labels a comparison.")
    if criterion.scale != Criterion.Scale.PAIRWISE and output is None:
        raise ValidationFailed.at("output", f"Criterion '{criterion.key}' labels an output.")
    if output is not None:
        if output.study_id != study.pk:
            raise NotFound("Output not found in this study.")
        return {"output": output}
    assert comparison is not None
    if comparison.study_id != study.pk:
        raise NotFound("Comparison not found in this study.")
    return {"comparison": comparison}


def gold_label_set(
    *,
    study: Study,
    criterion: Criterion,
    value: str,
    user: User,
    output: Output | None = None,
    comparison: Comparison | None = None,
) -> GoldLabel:
    """A lead's known answer for a subject (canonical encoding); replaces an earlier one."""
    require_lead(study=study, user=user)
    subject = subject_check(study=study, criterion=criterion, output=output, comparison=comparison)
    clean = canonical_value(criterion, value)
    with transaction.atomic():
        gold, _ = GoldLabel.objects.update_or_create(
            criterion=criterion, **subject, defaults={"value": clean, "created_by": user}
        )
    return gold


def canonical_value(criterion: Criterion, value: Any) -> str:
    """Validate a value in canonical encoding (no severity involved)."""
    raw: dict[str, Any] = {"value": value}
    try:
        clean = label_clean(criterion=criterion, raw=raw, field="value")
    except ValidationFailed as exc:
        # A failing value without severity is fine here: only the value matters.
        if "value.severity" not in {e["path"] for e in exc.details["errors"]}:
            raise
        raw["severity"] = SEVERITY_MIN
        clean = label_clean(criterion=criterion, raw=raw, field="value")
    return clean.value
