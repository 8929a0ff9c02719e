"""One writer per table: the ratings importer applies the owning apps' rules, not its own.

Imported human labels must be refused exactly as the annotation API refuses them (the
annotations app's `label_clean`), imported verdicts as the judge path reads them (studies'
`criterion_value_num`), new criteria by the rubric rules (`studies.spec`); and the importer
modules write no table themselves.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from annotations import services as annotation_services
from annotations.models import Annotation
from imports.generic import ratings_import, ratings_read
from judges.services import VerdictImport, verdicts_import_bulk
from reviewhub.api.errors import ValidationFailed
from reviewhub.errors import problem_text
from studies.models import Criterion, Study
from tests.annotations.factories import World, annotators_make, world_build

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
HEADER = "item_id,output_id,candidate,rater_id,rater_kind,criterion,value,severity\n"


@pytest.fixture
def world(study: Study) -> World:
    return world_build(study=study, strata={"en": 2})


def _import(study: Study, body: str) -> Any:
    return ratings_import(study=study, rows=ratings_read(io.StringIO(HEADER + body), fmt="csv"))


def _import_error(study: Study, body: str) -> str:
    with pytest.raises(ValidationFailed) as info:
        _import(study, body)
    errors = info.value.details["errors"]
    assert len(errors) == 1, errors
    return problem_text(errors[0])


def _api_submit_error(study: Study, client_for: Callable[..., APIClient], labels: Any) -> Any:
    [annotator] = annotators_make(study, 1)
    annotation_services.sampling_plan_create(
        study=study, spec={"mode": "all", "dimension": "lang", "seed": 1}, k=1, gold_rate=0,
        created_by=study.owner,
    )
    client = client_for(annotator)
    nxt = client.post(f"/api/studies/{study.slug}/queue/next")
    assert nxt.status_code == 200, nxt.content
    aid = nxt.json()["assignment"]["assignment_id"]
    r = client.post(
        f"/api/studies/{study.slug}/assignments/{aid}/submit",
        {"submission_id": str(uuid.uuid4()), "labels": labels},
        format="json",
    )
    assert r.status_code == 400, r.content
    return r.json()["error"]


def test_severity_on_a_passing_label_is_refused_with_the_api_message(
    world: World, client_for: Callable[..., APIClient]
) -> None:
    study = world.study
    api = _api_submit_error(
        study, client_for,
        {"correct": {"value": "pass", "severity": 2}, "helpful": {"value": "4"}},
    )
    assert api["code"] == "validation_failed"
    assert api["details"] == {"errors": [{"path": "labels.correct.severity",
                                          "message": api["message"]}], "error_count": 1}
    # The importer names the line and column, then gives the annotations app's own message.
    error = _import_error(study, "q1,o1,m1,ann,human,correct,pass,2\n")
    assert error == "line 2: severity: " + api["message"].removeprefix("labels.")
    assert not Annotation.objects.filter(criterion__rubric__study=study).exists()


def test_the_criterion_decides_what_a_failure_is(world: World) -> None:
    study = world.study
    # helpful is ordinal with pass_threshold 3: "4" passes (no severity), "2" fails.
    error = _import_error(study, "q1,o1,m1,ann,human,helpful,4,3\n")
    assert error.startswith("line 2: severity: helpful.severity is only asked")
    error = _import_error(study, "q1,o1,m1,ann,human,helpful,2,9\n")
    assert error == "line 2: severity: helpful.severity must be an integer from 1 to 5."
    summary = _import(study, "q1,o1,m1,ann,human,helpful,2,3\nq2,o2,m1,ann,human,correct,fail,\n")
    assert summary.created["annotation"] == 2
    stored = dict(
        Annotation.objects.filter(criterion__rubric__study=study).values_list(
            "criterion__key", "severity"
        )
    )
    # A file may lack the severity of a failure (its source never asked): stored as unknown.
    assert stored == {"helpful": 3, "correct": None}


def test_verdicts_follow_the_judge_path_value_rules(world: World) -> None:
    study = world.study
    error = _import_error(study, "q1,o1,m1,gpt,judge,helpful,7,\n")
    assert error.startswith("line 2: value: '7' is not a value of the ordinal criterion")
    helpful = Criterion.objects.get(rubric__study=study, key="helpful")
    correct = Criterion.objects.get(rubric__study=study, key="correct")
    # The bulk service itself refuses what a judge run could never record, whoever calls it.
    with pytest.raises(ValidationFailed, match="'7' is not a value of this ordinal criterion"):
        verdicts_import_bulk(verdicts={(1, helpful.pk, "output", 1): VerdictImport(
            criterion=helpful, orders={"": "7"})})
    with pytest.raises(ValidationFailed, match="continuous scores are finite numbers"):
        verdicts_import_bulk(verdicts={(1, correct.pk, "output", 1): VerdictImport(
            criterion=correct, orders={"": "0.5"}, continuous=True)})


def test_new_criteria_obey_the_rubric_rules(study: Study) -> None:
    error = _import_error(study, "q1,o1,m1,ann,human,Bad Key,pass,\n")
    assert error.startswith("line 2: criterion: criterion 'Bad Key': key must be a slug")


WRITES = re.compile(
    r"\.objects\.(create|bulk_create|bulk_update|update|get_or_create|update_or_create)\b"
    r"|\bbulk_create\(|\bCOPY\b|\.save\(|\.delete\(|\)\.update\(|\bcursor\("
)


@pytest.mark.parametrize("module", [
    "generic.py", "datasets.py", "api.py", "peers/__init__.py", "peers/labelstudio.py",
    "peers/langfuse.py", "peers/promptfoo.py", "peers/inspect_ai.py",
])
def test_the_importer_writes_no_table_itself(module: str) -> None:
    source = (ROOT / "imports" / module).read_text()
    assert [m.group(0) for m in WRITES.finditer(source)] == []
