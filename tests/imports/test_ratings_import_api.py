"""Issue 25: the generic ratings import over REST, with its texts file as the CLI takes it
(`POST /api/studies/<slug>/imports/ratings`: the file as the body, or the `file` and `texts`
parts of a multipart form)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from annotations.models import Annotation
from studies.models import Comparison, Item, Membership, Study

pytestmark = pytest.mark.django_db

# The multi-turn pairwise release of docs/import-ratings.md ("Candidates from the texts
# file"): the ratings name only the outputs, the texts file names each output's model.
RATINGS = """item_id,output_a,output_b,rater_id,rater_kind,criterion,value,pairwise_values
q0-t1,q0-t1-gpt-4,q0-t1-claude-v1,expert0,human,overall,A,outputs
q0-t1,q0-t1-gpt-4,q0-t1-vicuna-13b,expert1,human,overall,B,outputs
q0-t1,q0-t1-claude-v1,q0-t1-vicuna-13b,expert2,human,overall,A,outputs
"""
TEXTS = "".join(json.dumps(line) + "\n" for line in [
    {"item_id": "q0-t1", "input": "Write a haiku.", "output_id": "q0-t1-gpt-4",
     "text": "g", "candidate": "gpt-4"},
    {"item_id": "q0-t1", "output_id": "q0-t1-claude-v1", "text": "c", "candidate": "claude-v1"},
    {"item_id": "q0-t1", "output_id": "q0-t1-vicuna-13b", "text": "v",
     "candidate": "vicuna-13b"},
])


@pytest.fixture
def client(client_for: Any, study: Study, lead: Any) -> Any:
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    return client_for(lead)


def _url(study: Study, query: str = "") -> str:
    return f"/api/studies/{study.slug}/imports/ratings" + (f"?{query}" if query else "")


def _form(ratings: str = RATINGS, texts: str | None = TEXTS, **extra: str) -> dict[str, Any]:
    form: dict[str, Any] = {"file": SimpleUploadedFile("ratings.csv", ratings.encode(),
                                                       content_type="text/csv")}
    if texts is not None:
        form["texts"] = SimpleUploadedFile("texts.jsonl", texts.encode(),
                                           content_type="application/x-ndjson")
    for name, content in extra.items():
        form[name] = SimpleUploadedFile(name, content.encode())
    return form


def _pairs(study: Study) -> set[tuple[str, str]]:
    return {(c.output_a.candidate.name, c.output_b.candidate.name) for c in
            Comparison.objects.filter(item__study=study).select_related(
                "output_a__candidate", "output_b__candidate")}


def test_the_texts_file_gives_the_candidates_as_the_cli_does(
    client: Any, study: Study, lead: Any, tmp_path: Path
) -> None:
    resp = client.post(_url(study), data=_form(), format="multipart")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["created"]["comparison"] == 3 and body["created"]["annotation"] == 3
    assert body["dry_run"] is False
    assert _pairs(study) == {("gpt-4", "claude-v1"), ("gpt-4", "vicuna-13b"),
                             ("claude-v1", "vicuna-13b")}
    assert Item.objects.get(study=study).input == "Write a haiku."
    # The command on the same two files writes the same.
    (tmp_path / "r.csv").write_text(RATINGS)
    (tmp_path / "t.jsonl").write_text(TEXTS)
    out = io.StringIO()
    call_command("import_ratings", str(tmp_path / "r.csv"), "--study", "cli", "--owner",
                 lead.username, "--texts", str(tmp_path / "t.jsonl"), stdout=out,
                 stderr=io.StringIO())
    cli = json.loads(out.getvalue()[out.getvalue().index("{\n"):])
    assert cli["created"] == body["created"]
    assert _pairs(Study.objects.get(slug="cli")) == _pairs(study)
    # Re-sending changes nothing.
    again = client.post(_url(study), data=_form(), format="multipart").json()
    assert again["unchanged"]["annotation"] == 3 and not again["created"].get("annotation")


def test_without_the_texts_file_the_outputs_collide(client: Any, study: Study) -> None:
    resp = client.post(_url(study), data=RATINGS.encode(), content_type="text/csv")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert "candidate_a" in err["message"] and Annotation.objects.count() == 0


def test_the_ratings_file_alone_as_the_body(client: Any, study: Study) -> None:
    rows = "".join(json.dumps(r) + "\n" for r in [
        {"item_id": "q1", "output_id": "o1", "rater_id": "h", "rater_kind": "human",
         "criterion": "ok", "value": "pass"},
        {"item_id": "q1", "output_id": "o1", "rater_id": "j", "rater_kind": "judge",
         "criterion": "ok", "value": "fail"},
    ])
    resp = client.post(_url(study, "dry_run=1"), data=rows.encode(),
                       content_type="application/x-ndjson")
    assert resp.status_code == 200, resp.content
    assert resp.json()["dry_run"] is True and resp.json()["created"]["verdict"] == 1
    assert Item.objects.filter(study=study).count() == 0
    resp = client.post(_url(study, "scale=ok=binary"), data=rows.encode(),
                       content_type="application/x-ndjson")
    assert resp.status_code == 200 and resp.json()["created"]["annotation"] == 1


def test_a_bad_texts_line_is_named_and_nothing_is_written(client: Any, study: Study) -> None:
    bad = TEXTS + '{"input": "no id"}\n'
    resp = client.post(_url(study), data=_form(texts=bad), format="multipart")
    assert resp.status_code == 400
    [entry] = [e for e in resp.json()["error"]["details"]["errors"] if e.get("file") == "texts"]
    assert entry["line"] == 4 and entry["path"] == "item_id"
    assert Comparison.objects.count() == 0 and Item.objects.count() == 0


def test_parameters_and_parts_are_checked(client: Any, study: Study) -> None:
    resp = client.post(_url(study, "colour=red&pairwise_values=sideways"), data=_form(),
                       format="multipart")
    assert resp.status_code == 400
    paths = [e["path"] for e in resp.json()["error"]["details"]["errors"]]
    assert paths == ["colour", "pairwise_values"]
    resp = client.post(_url(study), data=_form(scores="x"), format="multipart")
    assert resp.status_code == 400 and "`texts`" in resp.json()["error"]["message"]
    resp = client.post(_url(study), data={"texts": _form()["texts"]}, format="multipart")
    assert resp.status_code == 400
    assert resp.json()["error"]["details"]["errors"][0]["path"] == "file"
    resp = client.post(_url(study), data=b"\xff\xfe bad", content_type="text/csv")
    assert resp.status_code == 400 and "not UTF-8" in resp.json()["error"]["message"]
    assert Item.objects.count() == 0


def test_a_form_over_the_upload_limit_is_refused_before_it_is_read(
    client: Any, study: Study, settings: Any
) -> None:
    settings.REVIEWHUB_MAX_UPLOAD_BYTES = 100
    resp = client.post(_url(study), data=_form(), format="multipart")
    assert resp.status_code == 413 and Item.objects.count() == 0
