"""Adjudications: a lead's adjudicated label for a subject, kept apart from the raw annotations."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from studies.models import Comparison, Criterion, Output, Study

from ..models import Adjudication
from .common import require_lead
from .gold import canonical_value, subject_check
from .labels import text_clean


def adjudication_record(
    *,
    study: Study,
    criterion: Criterion,
    output: Output | None = None,
    comparison: Comparison | None = None,
    value: str,
    note: str,
    user: User,
) -> Adjudication:
    """Record a lead's adjudicated label (canonical encoding), kept apart from the raw
    annotations; the latest adjudication of a (subject, criterion) is the one in force."""
    require_lead(study=study, user=user)
    subject = subject_check(study=study, criterion=criterion, output=output, comparison=comparison)
    clean = canonical_value(criterion, value)
    note = text_clean(note, "note")
    with transaction.atomic():
        return Adjudication.objects.create(
            criterion=criterion, value=clean, note=note, adjudicated_by=user, **subject
        )
