"""Rubric validation and versioning: in place while unused, a new version once verdicts or
annotations refer to it."""

from __future__ import annotations

import copy

import pytest

from annotations.models import Annotation
from judges.models import Judge, JudgeVersion, Verdict
from reviewhub.api.errors import ValidationFailed
from studies.models import Criterion, RubricVersion
from studies.selectors import rubric_current
from studies.services import rubric_create, rubric_update
from tests.factories import OutputFactory

from .factories import BINARY, CATEGORICAL, ORDINAL, PAIRWISE


def errors_of(exc: pytest.ExceptionInfo[ValidationFailed]) -> list[dict[str, str]]:
    return exc.value.details["errors"]


@pytest.mark.django_db
def test_first_update_creates_v1_then_edits_in_place(study, lead):
    rubric, outcome = rubric_update(study=study, criteria=[BINARY, ORDINAL], created_by=lead)
    assert (rubric.version, outcome) == (1, "created")
    assert [c.key for c in rubric.criteria.all()] == ["ok", "quality"]
    ordinal_id = rubric.criteria.get(key="quality").pk

    again, outcome = rubric_update(study=study, criteria=[BINARY, ORDINAL], created_by=lead)
    assert (again.pk, outcome) == (rubric.pk, "unchanged")

    changed = copy.deepcopy(ORDINAL)
    changed["pass_threshold"] = 3
    updated, outcome = rubric_update(study=study, criteria=[changed, CATEGORICAL],
                                     created_by=lead)
    assert (updated.pk, updated.version, outcome) == (rubric.pk, 1, "updated")
    assert RubricVersion.objects.filter(study=study).count() == 1
    crits = list(updated.criteria.order_by("position"))
    assert [c.key for c in crits] == ["quality", "tone"]
    assert crits[0].pk == ordinal_id and crits[0].pass_threshold == 3


def _judge_version(study):
    judge = Judge.objects.create(study=study, name="j", kind=Judge.Kind.IMPORTED)
    return JudgeVersion.objects.create(judge=judge, version=1, content_hash="h" * 64)


@pytest.mark.django_db
@pytest.mark.parametrize("downstream", ["verdict", "annotation"])
def test_new_version_once_used(study, lead, downstream):
    rubric, _ = rubric_update(study=study, criteria=[BINARY, ORDINAL], created_by=lead)
    ok = rubric.criteria.get(key="ok")
    output = OutputFactory(candidate__study=study)
    if downstream == "verdict":
        Verdict.objects.create(judge_version=_judge_version(study), criterion=ok, output=output,
                               value="pass", value_num=1.0)
    else:
        Annotation.objects.create(annotator=lead, criterion=ok, output=output, value="pass",
                                  value_num=1.0)

    # Unchanged criteria never make a version, used or not.
    assert rubric_update(study=study, criteria=[BINARY, ORDINAL], created_by=lead)[1] == \
        "unchanged"

    new, outcome = rubric_update(study=study, criteria=[PAIRWISE], created_by=lead,
                                 notes="pairwise only")
    assert (new.version, outcome) == (2, "created")
    # The new version holds exactly the new criteria; nothing was copied over.
    assert [c.key for c in new.criteria.all()] == ["pref"]
    assert new.notes == "pairwise only"
    # v1 is untouched, and what referred to it still does.
    assert [c.key for c in rubric.criteria.order_by("position")] == ["ok", "quality"]
    assert Criterion.objects.get(pk=ok.pk).rubric_id == rubric.pk
    assert rubric_current(study).pk == new.pk


@pytest.mark.django_db
def test_an_active_sampling_plan_freezes_the_rubric(study, lead):
    """Annotators lease outputs under the plan before any annotation exists: an edit must not
    change the criteria under them."""
    from annotations.services import sampling_plan_create, sampling_plan_deactivate

    OutputFactory(study=study)
    v1, _ = rubric_update(study=study, criteria=[BINARY], created_by=lead)
    plan = sampling_plan_create(study=study, spec={"mode": "all"}, k=1, gold_rate=0.0,
                                created_by=lead)
    edited = {**BINARY, "guidance": "Stricter wording."}
    v2, outcome = rubric_update(study=study, criteria=[edited], created_by=lead)
    assert (outcome, v2.version) == ("created", 2)
    assert v1.criteria.get().guidance == BINARY.get("guidance", "")
    # Once the plan is superseded and nothing else refers to v2, it is edited in place again.
    sampling_plan_deactivate(plan=plan, by=lead)
    again, outcome = rubric_update(study=study, criteria=[{**edited, "guidance": "x"}],
                                   created_by=lead)
    assert (outcome, again.version) == ("updated", 2)


@pytest.mark.django_db
def test_rubric_create_always_makes_next_version(study, lead):
    assert rubric_create(study=study, criteria=[BINARY], created_by=lead).version == 1
    assert rubric_create(study=study, criteria=[BINARY], created_by=lead).version == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("criterion", "path", "fragment"),
    [
        ({**ORDINAL, "pass_threshold": 4}, "criteria[0].pass_threshold", "outside the scale 1..3"),
        ({**ORDINAL, "pass_threshold": 0}, "criteria[0].pass_threshold", "outside the scale"),
        ({**ORDINAL, "pass_threshold": None}, "criteria[0].pass_threshold",
         "needs a pass_threshold"),
        ({**ORDINAL, "points": [{"value": 1, "label": "a"}, {"value": 3, "label": "c"}]},
         "criteria[0].points", "1..k, contiguous"),
        ({**ORDINAL, "points": [{"value": 1, "label": "a"}, {"value": 2, "label": ""}]},
         "criteria[0].points[1].label", "needs a non-empty label"),
        ({**ORDINAL, "points": [{"value": 1, "label": "a"}, {"value": "2", "label": "b"}]},
         "criteria[0].points[1].value", "must be an integer"),
        ({**CATEGORICAL, "points": ["a", "a"], "pass_labels": []}, "criteria[0].points[1]",
         "appears twice"),
        ({**CATEGORICAL, "points": ["a", " "], "pass_labels": []}, "criteria[0].points[1]",
         "non-empty"),
        ({**CATEGORICAL, "pass_labels": ["nice"]}, "criteria[0].pass_labels", "not one of"),
        ({**BINARY, "points": [{"value": 1, "label": "x"}]}, "criteria[0].points",
         "takes no points"),
        ({**PAIRWISE, "is_hard_gate": True}, "criteria[0].is_hard_gate", "pass/fail reading"),
        ({**BINARY, "weight": -1}, "criteria[0].weight", ">= 0"),
        ({**BINARY, "scale": "likert"}, "criteria[0].scale", "must be one of"),
        ({**BINARY, "key": "Not A Slug"}, "criteria[0].key", "slug"),
        ({**BINARY, "colour": "red"}, "criteria[0].colour", "unknown field"),
    ],
)
def test_criterion_errors_name_the_criterion_and_field(study, lead, criterion, path, fragment):
    with pytest.raises(ValidationFailed) as exc:
        rubric_update(study=study, criteria=[criterion], created_by=lead)
    errs = errors_of(exc)
    assert any(e["path"] == path and fragment in e["message"] for e in errs), errs
    key = criterion.get("key")
    if isinstance(key, str) and key.islower() and " " not in key:
        assert all(f"criterion '{key}'" in e["message"] for e in errs)
    assert not RubricVersion.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_duplicate_and_empty_criteria(study, lead):
    with pytest.raises(ValidationFailed) as exc:
        rubric_update(study=study, criteria=[BINARY, BINARY], created_by=lead)
    assert errors_of(exc)[0]["path"] == "criteria[1].key"
    with pytest.raises(ValidationFailed) as exc:
        rubric_update(study=study, criteria=[], created_by=lead)
    assert errors_of(exc)[0]["path"] == "criteria"


@pytest.mark.django_db
def test_categorical_string_shorthand_and_defaults(study, lead):
    rubric, _ = rubric_update(study=study, criteria=[{"key": "tone", "scale": "categorical",
                                                      "points": ["warm", "cold"]}],
                              created_by=lead)
    c = rubric.criteria.get()
    assert c.points == [{"value": "warm", "label": "warm"}, {"value": "cold", "label": "cold"}]
    assert c.name == "tone" and c.weight == 1.0 and c.pass_labels == []


def test_study_file_rubric_rule_is_validated_with_its_path() -> None:
    from studies.spec import study_file_validate

    doc = {"study": {"name": "S", "slug": "s"},
           "rubric": {"criteria": [BINARY], "aggregate": {"kind": "weighted",
                                                          "pass_share": 0.6}}}
    assert study_file_validate(doc).rubric_aggregate == {"kind": "weighted",
                                                         "pass_share": 0.6}
    assert study_file_validate({"study": {"name": "S", "slug": "s"},
                                "rubric": {"criteria": [BINARY]}}).rubric_aggregate == \
        {"kind": "all"}
    bad = copy.deepcopy(doc)
    bad["rubric"]["aggregate"] = {"kind": "weighted", "pass_share": 1.5}
    with pytest.raises(ValidationFailed) as exc:
        study_file_validate(bad)
    assert [e["path"] for e in exc.value.details["errors"]] == ["rubric.aggregate.pass_share"]
