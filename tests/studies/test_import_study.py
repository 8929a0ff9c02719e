"""`manage.py import_study`: the documented example imports, re-imports unchanged, and a bad
file writes nothing."""

from __future__ import annotations

import copy
import json
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from studies.models import AnalysisPlan, Item, Membership, RubricVersion, StratumDimension, Study
from tests.factories import ItemFactory, UserFactory

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "study.yaml"

pytestmark = pytest.mark.django_db


@pytest.fixture
def users():
    return UserFactory(username="lead"), UserFactory(username="annotator")


def run(path: Path, *args: str) -> str:
    out = StringIO()
    call_command("import_study", str(path), *args, stdout=out)
    return out.getvalue()


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def write(tmp_path: Path, doc: dict, name: str = "study.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return path


def test_example_imports_then_is_unchanged(users):
    out = run(EXAMPLE)
    assert "study: created" in out and "rubric: created (v1, 4 criteria)" in out
    study = Study.objects.get(slug="support-answers")
    assert study.status == "open" and study.owner.username == "lead"
    assert study.output_schema["required"] == ["answer"]
    assert [d.key for d in study.dimensions.all()] == ["language", "length", "noisy",
                                                       "context-size"]
    rubric = RubricVersion.objects.get(study=study)
    correct = rubric.criteria.get(key="correct")
    assert (correct.pass_threshold, correct.weight) == (3, 2.0)
    plan = AnalysisPlan.objects.get(study=study)
    assert plan.spec["rubric_version"] == 1 and not plan.is_locked
    assert Membership.objects.get(study=study, user__username="annotator").role == "annotator"

    again = run(EXAMPLE)
    lines = [line for line in again.splitlines() if ":" in line and "Study '" not in line]
    assert lines and all(": unchanged" in line for line in lines), again
    assert "nothing to change" in again
    assert RubricVersion.objects.filter(study=study).count() == 1
    assert AnalysisPlan.objects.filter(study=study).count() == 1


def test_edit_updates_in_place_and_relabels_items(users, tmp_path):
    run(EXAMPLE)
    study = Study.objects.get(slug="support-answers")
    ItemFactory(study=study, input="x" * 300, metadata={"language": "de", "noisy": False})
    doc = example()
    doc["study"]["name"] = "Support answers v2"
    doc["strata"][1]["config"] = {"edges": [0, 100], "labels": ["short", "long"]}
    doc["plan"]["spec"]["min_human_labels_per_stratum"] = 50
    doc["plan"]["spec"]["strata"] = ["language", "noisy"]
    out = run(write(tmp_path, doc, "study.yaml"))
    assert "study: updated" in out and "plan: updated (v1)" in out
    assert "strata: updated (4 dimensions, 1 items relabelled)" in out
    assert Item.objects.get(study=study).strata["length"] == "long"
    assert AnalysisPlan.objects.get(study=study).spec["min_human_labels_per_stratum"] == 50


def test_locked_plan_needs_new_version_flag(users, tmp_path):
    doc = example()
    doc["plan"]["lock"] = True
    path = write(tmp_path, doc)
    assert "plan lock: updated" in run(path)
    doc["plan"]["spec"]["min_human_labels_per_stratum"] = 99
    path = write(tmp_path, doc)
    with pytest.raises(CommandError, match="--new-plan-version"):
        run(path)
    assert AnalysisPlan.objects.count() == 1
    out = run(path, "--new-plan-version")
    assert "plan: created (v2 (v1 is locked))" in out
    assert AnalysisPlan.objects.get(version=2).is_locked  # the file says lock: true


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d["rubric"]["criteria"][1].update(pass_threshold=7),
         "rubric.criteria[1].pass_threshold: criterion 'correct': pass_threshold 7 is outside"),
        (lambda d: d["plan"]["spec"]["criteria"].update(bogus={"metric": "pass_rate",
                                                               "threshold": 0.5}),
         "plan.spec.criteria.bogus: unknown criterion key 'bogus'"),
        (lambda d: d["plan"]["spec"]["deployment_mix"]["language"].update(en=0.9),
         "plan.spec.deployment_mix.language: shares must sum to 1"),
        (lambda d: d["strata"][0].update(kind="histogram"), "strata[0].kind"),
        (lambda d: d["members"].append({"username": "ghost", "role": "viewer"}),
         "members[1].username: no such user 'ghost'"),
        (lambda d: d["study"].update(status="sideways"), "study.status"),
        (lambda d: d.update(extras=[]), "extras: unknown section"),
    ],
)
def test_bad_file_writes_nothing(users, tmp_path, mutate, fragment):
    doc = copy.deepcopy(example())
    mutate(doc)
    with pytest.raises(CommandError) as exc:
        run(write(tmp_path, doc))
    assert fragment in str(exc.value)
    assert "Nothing was written." in str(exc.value)
    assert not Study.objects.exists() and not StratumDimension.objects.exists()
    assert not RubricVersion.objects.exists()


def test_failure_after_partial_work_rolls_back(users, tmp_path):
    """The plan is checked only after the rubric exists when strata come from the database;
    a failure there must undo the study, rubric and strata already written in the import."""
    doc = example()
    del doc["strata"]
    path = write(tmp_path, doc)
    with pytest.raises(CommandError, match=r"plan\.spec\.strata"):
        run(path)
    assert not Study.objects.exists() and not RubricVersion.objects.exists()


def test_unreadable_files(tmp_path, users):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(CommandError, match="is empty"):
        run(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("study:\n  slug: [unclosed\n")
    with pytest.raises(CommandError, match="line"):
        run(broken)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"study": }')
    with pytest.raises(CommandError, match="line 1"):
        run(bad_json)


def test_new_study_needs_an_owner(tmp_path, users):
    doc = example()
    del doc["study"]["owner"]
    with pytest.raises(CommandError, match="needs an owner"):
        run(write(tmp_path, doc))
    assert "study: created" in run(write(tmp_path, doc), "--owner", "lead")


def test_token_create_command(users):
    out, err = StringIO(), StringIO()
    call_command("token_create", "lead", "--name", "ci", "--write", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert secret.startswith("rh_") and "read-write" in err.getvalue()
    from studies.authentication import token_hash
    from studies.models import ApiToken

    token = ApiToken.objects.get(key_hash=token_hash(secret))
    assert token.can_write and token.study is None and token.name == "ci"
    with pytest.raises(CommandError, match="No study"):
        call_command("token_create", "lead", "--study", "nope", stdout=out, stderr=err)
