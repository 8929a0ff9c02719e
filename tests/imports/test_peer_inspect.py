"""Issue 25 §3, Inspect AI eval logs (.eval zip and .json) -> samples (items), the model's
outputs (tokens, time) and scores (judge verdicts): on the real `peer-exports/inspect-ai/`
logs, read with zipfile/json, and on a larger .eval built from Inspect's documented log
format with a numeric model-graded score and P/N values the fixtures do not have."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from judges.models import Verdict
from studies.models import Item, Output

from .cli import peer_error, run_peer

pytestmark = pytest.mark.django_db


@pytest.fixture
def ia_dir(data_dir: Path) -> Path:
    path = data_dir / "peer-exports" / "inspect-ai"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


def test_match_scorer_eval(lead: Any, ia_dir: Path) -> None:
    f = ia_dir / "popularity_10-samples_match.eval"
    summary, _ = run_peer("inspect", f, "--study", "ia", "--owner", "lead")
    assert summary["created"]["item"] == 10 and summary["created"]["verdict"] == 10
    z = zipfile.ZipFile(f)
    header = json.loads(z.read("header.json"))
    [acc] = [m["value"] for s in header["results"]["scores"] for k, m in s["metrics"].items()
             if k == "accuracy"]
    values = list(Verdict.objects.values_list("value", flat=True))
    # The log's own accuracy (0.8) from the imported pass/fail verdicts.
    assert values.count("pass") / len(values) == pytest.approx(acc) == pytest.approx(0.8)
    sample = json.loads(z.read("samples/3_epoch_1.json"))
    out = Output.objects.get(item__external_id="3")
    assert out.candidate.name == header["eval"]["model"] == "openai/gpt-4o-mini"
    assert out.text == sample["output"]["choices"][0]["message"]["content"]
    assert out.tokens_in == sample["output"]["usage"]["input_tokens"]
    assert Item.objects.get(external_id="3").metadata["target"] == sample["target"]


def test_cancelled_json_log(lead: Any, ia_dir: Path) -> None:
    f = ia_dir / "popularity_3-samples_cancelled.json"
    summary, _ = run_peer("inspect", f, "--study", "ia", "--owner", "lead")
    assert any("status is 'cancelled'" in n for n in summary["notes"])
    doc = json.loads(f.read_text())
    s = doc["samples"][0]
    out = Output.objects.get(item__external_id=str(s["id"]))
    assert out.latency_ms == pytest.approx(s["total_time"] * 1000)
    usage = next(iter(s["model_usage"].values()))
    assert (out.tokens_in, out.tokens_out) == (usage["input_tokens"], usage["output_tokens"])
    assert summary["created"]["verdict"] == len(doc["samples"])


@pytest.mark.parametrize("name", ["input-task_model-graded-fact.json",
                                  "input-task_model-graded-fact.eval",
                                  "mmlu-summary-choices.eval"])
def test_model_graded_and_choice_logs(lead: Any, ia_dir: Path, name: str) -> None:
    summary, _ = run_peer("inspect", ia_dir / name, "--study", "ia", "--owner", "lead")
    assert summary["created"]["verdict"] >= 1
    if name.startswith("mmlu"):
        v = Verdict.objects.get()
        assert (v.criterion.key, v.value) == ("choice", "fail")  # "I": answered C, target A
        assert "ANSWER: C" in Output.objects.get().text
    else:
        assert Verdict.objects.get().criterion.key == "model_graded_fact"


def _built(path: Path) -> Path:
    """An .eval of 30 samples x 2 epochs: a `model_graded_qa`-style numeric score (0-10) and a
    `match` scorer with C, I, P and N values; one sample ended in an error."""
    header = {"version": 2, "status": "success",
              "eval": {"task": "qa", "model": "anthropic/claude-x", "packages": {}},
              "results": {"scores": []}, "stats": {}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", json.dumps(header))
        for i in range(30):
            for epoch in (1, 2):
                sample = {
                    "id": i + 1, "epoch": epoch,
                    "input": [{"role": "user", "content": f"q{i}"}], "target": f"t{i}",
                    "output": {"model": "claude-x", "time": 1.5, "choices": [{"message": {
                        "role": "assistant",
                        "content": [{"type": "reasoning", "reasoning": "hmm"},
                                    {"type": "text", "text": f"answer {i}"}]}}],
                               "usage": {"input_tokens": 10, "output_tokens": i}},
                    "scores": {"quality": {"value": i % 11, "explanation": "why"},
                               "match": {"value": "CIPN"[i % 4], "answer": "x"}},
                    "error": {"message": "boom"} if i == 29 else None,
                }
                z.writestr(f"samples/{i + 1}_epoch_{epoch}.json", json.dumps(sample))
    return path


def test_larger_eval_with_numeric_scores_and_partial_values(lead: Any, tmp_path: Path) -> None:
    f = _built(tmp_path / "big.eval")
    err = peer_error("inspect", f, "--study", "big", "--owner", "lead")
    assert "quality" in err  # 0..10 needs a stated scale
    scale = ["--scale", "quality=interval:0-10"]
    summary, err = run_peer("inspect", f, "--study", "big", "--owner", "lead", *scale)
    assert "dropped: 30 samples of epochs after the first" in err
    assert "dropped: 1 samples that ended in an error" in err
    # 29 samples: the P and N values of match (i % 4 in 2, 3) have no pass/fail reading.
    n_pn = sum(1 for i in range(29) if i % 4 in (2, 3))
    n_p = sum(1 for i in range(29) if i % 4 == 2)
    assert f"dropped: {n_p} scores with the value 'P'" in err
    assert f"dropped: {n_pn - n_p} scores with the value 'N'" in err
    assert summary["created"]["verdict"] == 29 + (29 - n_pn)
    out = Output.objects.get(item__external_id="5")
    assert out.text == "answer 4" and out.latency_ms == pytest.approx(1500.0)
    assert Verdict.objects.get(criterion__key="quality", output=out).value_num == 4.0
    summary, _ = run_peer("inspect", f, "--study", "big", *scale,
                          "--option", "partial_as=fail", "--option", "noanswer_as=fail")
    assert summary["created"]["verdict"] == n_pn


def test_not_an_eval_log(lead: Any, tmp_path: Path) -> None:
    f = tmp_path / "x.eval"
    f.write_bytes(b"PK\x03\x04 not really")
    assert "zip" in peer_error("inspect", f, "--study", "x", "--owner", "lead")


def test_rest_endpoint_takes_the_zip(client_for: Any, study: Any, lead: Any,
                                     ia_dir: Path) -> None:
    from studies.models import Membership
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    body = (ia_dir / "popularity_10-samples_match.eval").read_bytes()
    resp = client_for(lead).post(f"/api/studies/{study.slug}/imports/inspect", data=body,
                                 content_type="application/zip")
    assert resp.status_code == 200, resp.content
    answer = resp.json()
    assert answer["created"]["verdict"] == 10 and answer["dropped"] == {}
    assert answer["updated"]["output_measurements"] == 10
    # A read-only token may not import.
    ro = client_for(lead, can_write=False)
    assert ro.post(f"/api/studies/{study.slug}/imports/inspect", data=body,
                   content_type="application/zip").status_code == 403
