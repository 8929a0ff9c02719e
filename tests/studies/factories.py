"""Small helpers for the studies tests."""

from __future__ import annotations

from typing import Any

from studies.models import Criterion, RubricVersion, Study

BINARY: dict[str, Any] = {"key": "ok", "name": "OK", "scale": "binary"}
ORDINAL: dict[str, Any] = {
    "key": "quality", "name": "Quality", "scale": "ordinal",
    "points": [{"value": 1, "label": "bad"}, {"value": 2, "label": "fair"},
               {"value": 3, "label": "good"}],
    "pass_threshold": 2,
}
CATEGORICAL: dict[str, Any] = {
    "key": "tone", "name": "Tone", "scale": "categorical",
    "points": [{"value": "friendly", "label": "Friendly"}, {"value": "curt", "label": "Curt"}],
    "pass_labels": ["friendly"],
}
PAIRWISE: dict[str, Any] = {"key": "pref", "name": "Preference", "scale": "pairwise"}


def rubric_with(study: Study, criteria: list[dict[str, Any]], version: int = 1) -> RubricVersion:
    """A rubric version with the given criteria, written directly (no service)."""
    rubric = RubricVersion.objects.create(study=study, version=version)
    for position, c in enumerate(criteria):
        Criterion.objects.create(rubric=rubric, position=position, **c)
    return rubric
