"""What the study services share: the outcome of an upsert and the study row lock."""

from __future__ import annotations

from typing import Literal

from ..models import Study

Outcome = Literal["created", "updated", "unchanged"]


def _lock_study(study: Study) -> Study:
    """Serialise version numbering per study (a no-op lock on SQLite, which serialises
    writers anyway)."""
    return Study.objects.select_for_update().get(pk=study.pk)
