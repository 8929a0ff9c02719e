"""A judge version's name in reports: the imported label is not repeated when the judge's name
already says it (the demo showed "sim-judge (simulated) simulated")."""

from __future__ import annotations

from typing import Any

import pytest

from calibration.frames import rating_data_load
from calibration.refs import judge_display
from judges.models import Judge, JudgeVersion
from judges.services import judge_imported_version_get_or_create


@pytest.mark.parametrize(("name", "version", "label", "shown"), [
    ("sim-judge (simulated)", 1, "simulated", "sim-judge (simulated)"),
    ("sim-judge (simulated)", 2, "Simulated", "sim-judge (simulated)"),
    ("rater-7", 1, "gpt-4o 2024-08", "rater-7 gpt-4o 2024-08"),
    # A label that is only part of the name stays: "gpt-4-0613 gpt-4" and "gpt-4-0613 0613"
    # must not both become "gpt-4-0613".
    ("gpt-4-0613", 1, "gpt-4", "gpt-4-0613 gpt-4"),
    ("gpt-4-0613", 2, "0613", "gpt-4-0613 0613"),
    ("judge (simulated) extra", 1, "simulated", "judge (simulated) extra simulated"),
    ("house judge", 3, "", "house judge v3"),
])
def test_display_names(name: str, version: int, label: str, shown: str) -> None:
    assert judge_display(name, version, label) == shown


@pytest.mark.django_db
def test_the_evidence_read_model_names_the_demo_judge_once(study: Any) -> None:
    outcome = judge_imported_version_get_or_create(
        study=study, name="sim-judge (simulated)", label="simulated", value_type="label")
    other = judge_imported_version_get_or_create(
        study=study, name="sim-judge (simulated)", label="second pass", value_type="label")
    llm = Judge.objects.create(study=study, name="house", kind="llm")
    v = JudgeVersion.objects.create(judge=llm, version=2, content_hash="h" * 64, config={})
    judges = rating_data_load(study=study).judges
    assert judges[outcome.version.pk].display == "sim-judge (simulated)"
    assert judges[other.version.pk].display == "sim-judge (simulated) second pass"
    assert judges[v.pk].display == "house v2"
