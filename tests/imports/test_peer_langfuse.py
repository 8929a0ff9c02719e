"""Issue 25 §3, Langfuse traces and scores -> items (trace input), outputs (the generation, with
latency, tokens and cost), judge verdicts (EVAL scores) and human labels (ANNOTATION scores):
on the real trace exports of `peer-exports/langfuse/`, and on a larger export built from
Langfuse's documented trace and score objects (named annotators, CATEGORICAL and BOOLEAN
scores, a scores export as CSV and as JSON), which the fixtures do not have."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from annotations.models import Annotation
from judges.models import Verdict
from studies.models import Item, Output

from .cli import peer_error, run_peer

pytestmark = pytest.mark.django_db


@pytest.fixture
def lf_dir(data_dir: Path) -> Path:
    path = data_dir / "peer-exports" / "langfuse"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


SCALES = ["--scale", "hallucination=interval:0-1", "--scale", "toxicity=interval:0-1",
          "--scale", "correctness=interval:0-1"]


def test_one_generation_trace(lead: Any, lf_dir: Path) -> None:
    f = lf_dir / "google-gemini-2025-08-01.trace.json"
    # A continuous 0.1 fits no scale the importer may infer: it asks for one.
    err = peer_error("langfuse", f, "--study", "lf", "--owner", "lead")
    assert "hallucination" in err and "--scale" in err
    summary, _ = run_peer("langfuse", f, "--study", "lf", "--owner", "lead", *SCALES[:4])
    doc = json.loads(f.read_text())
    trace = doc["trace"]
    assert summary["created"]["item"] == 1 and summary["created"]["verdict"] == 2
    out = Output.objects.get()
    assert out.candidate.name == "gemini-2.5-flash"
    # 12.032 s, 6 in / 2055 out tokens, $0.0051392999 (README of the fixtures).
    assert out.latency_ms == pytest.approx(12032.0)
    assert (out.tokens_in, out.tokens_out) == (6, 2055)
    assert out.cost == pytest.approx(0.005139299999)
    assert Item.objects.get().external_id == trace["id"]
    got = {v.criterion.key: v.value_num for v in Verdict.objects.select_related("criterion")}
    assert got == {"hallucination": pytest.approx(0.1), "toxicity": 0.0}
    assert any("comment" in n for n in summary["notes"])


def test_several_generations_need_a_choice(lead: Any, lf_dir: Path) -> None:
    f = lf_dir / "claude-agent-2025-12-22.trace.json"
    err = peer_error("langfuse", f, "--study", "lf", "--owner", "lead", *SCALES)
    assert "has 4 generations" in err and "generation=last" in err
    summary, err = run_peer("langfuse", f, "--study", "lf", "--owner", "lead",
                            "--option", "generation=last", *SCALES)
    assert "dropped: 3 other generations of multi-generation traces" in err
    doc = json.loads(f.read_text())
    gens = [o for o in doc["observations"] if o["type"] == "GENERATION"]
    last = max(gens, key=lambda o: (o["endTime"], o["id"]))
    out = Output.objects.get()
    assert out.latency_ms == pytest.approx(float(last["latency"]) * 1000)
    assert out.cost == pytest.approx(float(last["totalCost"]))
    assert summary["created"]["verdict"] == 3


@pytest.mark.parametrize("name", ["openai-agents-2025-09-30.trace.json",
                                  "langgraph-python-2025-08-22.trace.json"])
def test_agent_traces(lead: Any, lf_dir: Path, name: str) -> None:
    summary, _ = run_peer("langfuse", lf_dir / name, "--study", "lf", "--owner", "lead",
                          "--option", "generation=last", *SCALES)
    doc = json.loads((lf_dir / name).read_text())
    assert summary["created"]["verdict"] == len(doc["trace"]["scores"])
    assert Output.objects.get().tokens_in is not None


# Built from Langfuse's documented objects: a list of {trace, observations} with one
# GENERATION each (two models), ANNOTATION scores by two named users (a CATEGORICAL one and a
# BOOLEAN one) and an EVAL score inside the traces, plus a scores export (CSV or JSON) holding
# more ANNOTATION scores and API scores.
def _traces(path: Path) -> Path:
    out = []
    for t in range(30):
        tid = f"tr-{t:03d}"
        model = "model-a" if t % 2 else "model-b"
        gen = {"id": f"gen-{t}", "type": "GENERATION", "model": model, "latency": 0.5 + t / 10,
               "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z",
               "input": json.dumps([{"role": "user", "content": f"q{t}"}]),
               "output": json.dumps({"role": "assistant", "content": f"a{t}"}),
               "usageDetails": {"input": 10 + t, "output": 20 + t, "total": 30 + 2 * t},
               "totalCost": 0.001 * t}
        scores = [
            {"id": f"s-{t}-1", "traceId": tid, "observationId": None, "name": "helpful",
             "dataType": "CATEGORICAL", "stringValue": "yes" if t % 3 else "no", "value": None,
             "source": "ANNOTATION", "authorUserId": "user-ann"},
            {"id": f"s-{t}-2", "traceId": tid, "observationId": f"gen-{t}", "name": "safe",
             "dataType": "BOOLEAN", "value": 1 if t % 4 else 0, "stringValue": None,
             "source": "ANNOTATION", "authorUserId": "user-bob"},
            {"id": f"s-{t}-3", "traceId": tid, "observationId": None, "name": "safe",
             "dataType": "BOOLEAN", "value": 1, "source": "EVAL", "authorUserId": None,
             "comment": "looks safe", "configId": "safety-v1"},
        ]
        if t == 0:
            scores.append({"id": "s-0-x", "traceId": tid, "observationId": None, "name": "safe",
                           "dataType": "BOOLEAN", "value": 1, "source": "ANNOTATION",
                           "authorUserId": None})
        out.append({"trace": {"id": tid, "input": json.dumps(f"question {t}"),
                              "scores": scores}, "observations": [gen]})
    path.write_text(json.dumps(out))
    return path


SCORE_COLUMNS = ["id", "timestamp", "traceId", "observationId", "name", "value", "stringValue",
                 "dataType", "source", "comment", "authorUserId", "configId"]


def _score_rows() -> list[dict[str, Any]]:
    rows = []
    for t in range(30):
        rows.append({"id": f"c-{t}", "timestamp": "2026-01-02T00:00:00Z", "traceId": f"tr-{t:03d}",
                     "observationId": "", "name": "helpful", "value": "",
                     "stringValue": "yes" if t % 5 else "no", "dataType": "CATEGORICAL",
                     "source": "ANNOTATION", "comment": "", "authorUserId": "user-cy",
                     "configId": ""})
        rows.append({"id": f"api-{t}", "timestamp": "2026-01-02T00:00:00Z",
                     "traceId": f"tr-{t:03d}", "observationId": "", "name": "safe",
                     "value": "0", "stringValue": "", "dataType": "BOOLEAN", "source": "API",
                     "comment": "", "authorUserId": "", "configId": ""})
    return rows


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _scores_csv(path: Path, *, snake: bool = False) -> Path:
    """The scores table as CSV; `snake`: with the snake_case column names of Langfuse's
    blob-storage export (trace_id, data_type, string_value, author_user_id, ...)."""
    name = _snake if snake else str
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=[name(c) for c in SCORE_COLUMNS])
        w.writeheader()
        w.writerows({name(k): v for k, v in row.items()} for row in _score_rows())
    return path


def test_human_and_judge_scores_with_a_scores_csv(lead: Any, tmp_path: Path) -> None:
    f = _traces(tmp_path / "traces.json")
    summary, err = run_peer("langfuse", f, "--study", "big", "--owner", "lead",
                            "--scores", str(_scores_csv(tmp_path / "scores.csv")))
    assert summary["created"]["item"] == 30 and summary["created"]["output"] == 30
    assert "dropped: 1 human scores without authorUserId" in err
    assert "dropped: 30 API scores" in err
    # 30 x (ann helpful, bob safe, cy helpful) human labels; 30 EVAL verdicts.
    assert summary["created"]["annotation"] == 90 and summary["created"]["verdict"] == 30
    helpful = {(a.annotator.username.split(":", 1)[1], a.output.item.external_id): a.value
               for a in Annotation.objects.filter(criterion__key="helpful").select_related(
                   "annotator", "output__item")}
    assert helpful[("user-ann", "tr-003")] == "no" and helpful[("user-ann", "tr-004")] == "yes"
    assert helpful[("user-cy", "tr-005")] == "no" and helpful[("user-cy", "tr-006")] == "yes"
    safe = {a.output.item.external_id: a.value for a in Annotation.objects.filter(
        criterion__key="safe").select_related("output__item")}
    assert safe["tr-004"] == "fail" and safe["tr-005"] == "pass"
    out = Output.objects.get(item__external_id="tr-007")
    assert out.candidate.name == "model-a" and out.latency_ms == pytest.approx(1200.0)
    assert (out.tokens_in, out.tokens_out, out.cost) == (17, 27, pytest.approx(0.007))
    assert Item.objects.get(external_id="tr-007").input == "question 7"
    assert {v.judge_version.judge.name for v in Verdict.objects.all()} == {"langfuse-eval"}
    # API scores are what the user says they are.
    summary, _ = run_peer("langfuse", f, "--study", "big", "--option", "api_scores=judge",
                          "--scores", str(_scores_csv(tmp_path / "scores.csv")))
    assert summary["created"]["verdict"] == 30


def test_scores_csv_with_snake_case_columns(lead: Any, tmp_path: Path) -> None:
    f = _traces(tmp_path / "traces.json")
    summary, _ = run_peer("langfuse", f, "--study", "snake", "--owner", "lead",
                          "--scores", str(_scores_csv(tmp_path / "s.csv", snake=True)))
    assert summary["created"]["annotation"] == 90
    assert Annotation.objects.filter(annotator__username__endswith=":user-cy").count() == 30


def test_scores_export_as_json_and_dry_run(lead: Any, tmp_path: Path) -> None:
    f = _traces(tmp_path / "traces.json")
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"data": [
        {k: (v if v != "" else None) for k, v in r.items()} for r in _score_rows()]}))
    summary, _ = run_peer("langfuse", f, "--study", "dry", "--owner", "lead", "--dry-run",
                          "--scores", str(scores), "--option", "api_scores=human")
    assert summary["dry_run"] and summary["created"]["annotation"] == 90
    assert Item.objects.count() == 0 and Annotation.objects.count() == 0


def test_a_bad_score_writes_nothing(lead: Any, tmp_path: Path) -> None:
    f = _traces(tmp_path / "traces.json")
    doc = json.loads(f.read_text())
    doc[12]["trace"]["scores"][0]["stringValue"] = 7  # a number among the "helpful" labels
    doc[12]["trace"]["scores"][0]["dataType"] = "NUMERIC"
    doc[12]["trace"]["scores"][0]["value"] = 7
    f.write_text(json.dumps(doc))
    err = peer_error("langfuse", f, "--study", "bad", "--owner", "lead",
                     "--scale", "helpful=categorical:yes,no")
    assert "trace tr-012, score helpful" in err
    assert Item.objects.count() == 0 and Output.objects.count() == 0


def test_traces_and_a_scores_export_through_the_rest_endpoint(
    client_for: Any, study: Any, lead: Any, tmp_path: Path
) -> None:
    """The command's `--scores` file goes beside the traces as the `scores` part of a multipart
    form; the same import as the command's."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from studies.models import Membership
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    client = client_for(lead)
    url = f"/api/studies/{study.slug}/imports/langfuse"
    traces = _traces(tmp_path / "traces.json").read_bytes()
    scores = _scores_csv(tmp_path / "scores.csv").read_bytes()

    def form(**parts: bytes) -> dict[str, Any]:
        return {name: SimpleUploadedFile(f"{name}.bin", data) for name, data in parts.items()}

    resp = client.post(url, data=form(file=traces, scores=scores), format="multipart")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["created"]["annotation"] == 90 and body["created"]["verdict"] == 30
    assert any(k.startswith("API scores") and n == 30 for k, n in body["dropped"].items())
    assert Annotation.objects.filter(annotator__username__endswith=":user-cy").count() == 30
    # Only the tool's own second file is a part; the export itself is `file`.
    resp = client.post(url, data=form(file=traces, texts=scores), format="multipart")
    assert resp.status_code == 400 and "`scores`" in resp.json()["error"]["message"]
    resp = client.post(f"/api/studies/{study.slug}/imports/promptfoo",
                       data=form(file=b"{}", scores=scores), format="multipart")
    assert resp.status_code == 400
    assert resp.json()["error"]["details"]["errors"][0]["path"] == "scores"
