"""`import_ratings --pass-threshold KEY=N`: which points of an ordinal criterion the import
creates pass (points >= N), refused where it could not hold or would silently change a rubric
(docs/import-ratings.md, "Scales")."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from studies.models import Criterion, Study
from tests.imports.cli import import_error, run_import

pytestmark = pytest.mark.django_db


def _import(path: Path, *args: str) -> tuple[dict[str, Any], str]:
    summary, notes, _ = run_import(path, *args)
    return summary, notes


def _file(path: Path, values: list[Any], criterion: str = "quality") -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["item_id", "output_id", "rater_id", "rater_kind", "criterion", "value"])
        for i, v in enumerate(values):
            w.writerow([f"q{i}", f"o{i}", "r0", "human", criterion, v])
    return path



def _criterion(study: Study, key: str = "quality") -> Criterion:
    return Criterion.objects.get(rubric__study=study, key=key)


def test_pass_threshold_sets_the_created_criterion_and_shows_in_the_dry_run(
    study: Study, tmp_path: Path
) -> None:
    path = _file(tmp_path / "q.csv", [1, 3, 4, 5])
    summary, notes = _import(
        path, "--study", study.slug, "--scale", "quality=ordinal:1-5",
        "--pass-threshold", "quality=4", "--dry-run",
    )
    assert summary["dry_run"] is True
    assert summary["criteria"]["quality"] == {
        "scale": "ordinal 1..5, pass >= 4", "how": "stated (--scale)", "pass_threshold": 4,
        "rubric": "v1"}
    assert "criterion 'quality': ordinal 1..5, pass >= 4 (stated (--scale))" in notes
    assert not Criterion.objects.filter(rubric__study=study).exists()
    # An inferred ordinal scale takes it too.
    summary, notes = _import(path, "--study", study.slug, "--pass-threshold", "quality=4")
    assert summary["criteria"]["quality"]["pass_threshold"] == 4
    assert "criterion 'quality' created in rubric v1 as ordinal 1..5, pass >= 4" in notes
    crit = _criterion(study)
    assert crit.scale == "ordinal" and crit.pass_threshold == 4
    # Without the option the importer still leaves it unset (the file cannot say).
    _import(_file(tmp_path / "t.csv", [1, 2], "tone"), "--study", study.slug)
    assert _criterion(study, "tone").pass_threshold is None


def test_pass_threshold_must_be_an_integer_point_of_the_scale(
    study: Study, tmp_path: Path
) -> None:
    path = _file(tmp_path / "q.csv", [1, 3, 4, 5])
    for bad in ("6", "0"):
        error = import_error(path, "--study", study.slug, "--scale", "quality=ordinal:1-5",
                       "--pass-threshold", f"quality={bad}")
        assert f"--pass-threshold quality={bad}: {bad} is outside the scale 1..5" in error
    error = import_error(path, "--study", study.slug, "--pass-threshold", "quality=3.5")
    assert "--pass-threshold quality=3.5: N must be an integer" in error and "'quality'" in error
    assert "--pass-threshold needs KEY=N" in import_error(
        path, "--study", study.slug, "--pass-threshold", "4")
    error = import_error(path, "--study", study.slug, "--pass-threshold", "tone=4")
    assert "--pass-threshold names 'tone', not a criterion of the file" in error
    assert not Criterion.objects.filter(rubric__study=study).exists()


def test_pass_threshold_is_refused_on_a_criterion_that_is_not_ordinal(
    study: Study, tmp_path: Path
) -> None:
    binary = _file(tmp_path / "b.csv", ["pass", "fail"], "correct")
    error = import_error(binary, "--study", study.slug, "--pass-threshold", "correct=1")
    assert (
        "--pass-threshold correct=1: 'correct' is binary; only an ordinal criterion has a "
        "pass threshold"
    ) in error
    labels = _file(tmp_path / "c.csv", ["a", "b"], "style")
    error = import_error(labels, "--study", study.slug, "--scale", "style=categorical:a,b",
                   "--pass-threshold", "style=1")
    assert "'style' is categorical; only an ordinal criterion" in error
    assert not Criterion.objects.filter(rubric__study=study).exists()
    # ... and on an existing binary criterion.
    _import(binary, "--study", study.slug)
    error = import_error(binary, "--study", study.slug, "--pass-threshold", "correct=1")
    assert "'correct' is binary; only an ordinal criterion" in error


def test_pass_threshold_never_changes_an_existing_criterion(
    study: Study, tmp_path: Path
) -> None:
    path = _file(tmp_path / "q.csv", [1, 3, 4, 5])
    _import(path, "--study", study.slug, "--pass-threshold", "quality=4")
    # The same threshold again is accepted (and said); a different one is refused.
    summary, _ = _import(path, "--study", study.slug, "--pass-threshold", "quality=4")
    assert summary["criteria"]["quality"] == {
        "scale": "ordinal", "how": "existing", "pass_threshold": 4}
    error = import_error(path, "--study", study.slug, "--pass-threshold", "quality=3")
    assert (
        "--pass-threshold quality=3: 'quality' exists with pass_threshold 4; an import does "
        "not change a criterion's threshold"
    ) in error
    assert _criterion(study).pass_threshold == 4
    # A criterion imported without one has none: setting it is a rubric change too.
    tone = _file(tmp_path / "t.csv", [1, 2], "tone")
    _import(tone, "--study", study.slug)
    error = import_error(tone, "--study", study.slug, "--pass-threshold", "tone=2")
    assert "'tone' exists with no pass_threshold" in error
    assert _criterion(study, "tone").pass_threshold is None
