"""Adjudications: a lead's adjudicated label for a subject, kept apart from the raw annotations."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from studies.models import Comparison, Criterion, Output, Study

from ..models import Adjudication
from .common import _require_lead
from .gold import _canonical_value, _subject_check
from .labels import _text_clean


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
    _require_lead(study=study, user=user)
    subject = _subject_check(study=study, criterion=criterion, output=output, comparison=comparison)
    clean = _canonical_value(criterion, value)
    note = _text_clean(note, "note")
    with transaction.atomic():
        return Adjudication.objects.create(
            criterion=criterion, value=clean, note=note, adjudicated_by=user, **subject
        )
