"""Issue 25 §3, promptfoo results JSON -> items (test cases), candidate outputs per provider
(latency, tokens, cost) and assertion results as programmatic or LLM judge verdicts: on the
real `peer-exports/promptfoo/` files, and on a larger results file built from promptfoo's
documented results format (three providers, model-graded scores on a scale)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judges.models import Verdict
from studies.models import Item, Output

from .cli import peer_error, run_peer

pytestmark = pytest.mark.django_db


@pytest.fixture
def pf_dir(data_dir: Path) -> Path:
    path = data_dir / "peer-exports" / "promptfoo"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


def test_sample_export(lead: Any, pf_dir: Path) -> None:
    f = pf_dir / "sample-export.json"
    summary, _ = run_peer("promptfoo", f, "--study", "pf", "--owner", "lead")
    doc = json.loads(f.read_text())
    rows = doc["results"]["results"]
    assert summary["created"]["item"] == 2 and summary["created"]["candidate"] == 2
    assert summary["created"]["output"] == 4
    n_assertions = sum(len(r["gradingResult"]["componentResults"]) for r in rows)
    assert summary["created"]["verdict"] == n_assertions == 14
    for r in rows:
        out = Output.objects.get(item__external_id=f"test-{r['testIdx']}",
                                 candidate__name=r["provider"]["id"])
        assert out.text == r["response"]["output"]
        assert out.latency_ms == r["latencyMs"] and out.cost == pytest.approx(r["cost"])
        assert out.tokens_in == r["response"]["tokenUsage"]["prompt"]
        assert out.error == ""  # failing assertions are verdicts, not a failed call
        got = {v.criterion.key: v.value for v in Verdict.objects.filter(
            output=out).select_related("criterion")}
        want = {c["assertion"]["type"]: ("pass" if c["pass"] else "fail")
                for c in r["gradingResult"]["componentResults"]}
        assert got == want
    # All four fail on latency (README of the fixtures).
    assert set(Verdict.objects.filter(criterion__key="latency").values_list(
        "value", flat=True)) == {"fail"}
    judges = set(Verdict.objects.values_list("judge_version__judge__name", flat=True))
    assert judges == {"promptfoo-llm-rubric", "promptfoo-contains", "promptfoo-cost",
                      "promptfoo-latency"}
    item = Item.objects.get(external_id="test-0")
    assert json.loads(item.input) == rows[0]["vars"]


def test_weighted_metrics_and_an_assert_set(lead: Any, pf_dir: Path) -> None:
    summary, _ = run_peer("promptfoo", pf_dir / "french-greeting-output.json", "--study", "fr",
                          "--owner", "lead")
    got = {v.criterion.key: v.value for v in Verdict.objects.select_related("criterion")}
    # Metrics name the criteria; the assert-set's members once each, not its aggregate.
    assert got == {"correctness": "pass", "tone": "pass", "topicality": "fail",
                   "cost": "pass", "latency": "fail"}
    assert summary["created"]["verdict"] == 5


def test_scores_need_a_scale(lead: Any, pf_dir: Path) -> None:
    f = pf_dir / "french-greeting-output.json"
    err = peer_error("promptfoo", f, "--study", "fr", "--owner", "lead",
                     "--option", "values=score")
    assert "topicality" in err and "--scale" in err
    run_peer("promptfoo", f, "--study", "fr", "--owner", "lead", "--option", "values=score",
             *[a for k in ("correctness", "tone", "topicality", "cost", "latency")
               for a in ("--scale", f"{k}=interval:0-1")])
    v = Verdict.objects.get(criterion__key="topicality")
    assert v.value_num == pytest.approx(0.6015003324002018)


# Built from promptfoo's documented results format (version 3): 20 test cases x 3 providers,
# each graded by two `contains` assertions (numbered), an llm-rubric with a grader provider
# and an answer-relevance score; one provider call failed (failureReason 2).
def _built(path: Path) -> Path:
    results = []
    providers = ["openai:gpt-4o-mini", "anthropic:claude-3-haiku", "ollama:llama3"]
    for t in range(20):
        for p, prov in enumerate(providers):
            failed = t == 3 and p == 2
            comps = [
                {"pass": t % 2 == 0, "score": float(t % 2 == 0), "reason": "r",
                 "assertion": {"type": "contains", "value": "x"}},
                {"pass": p != 1, "score": float(p != 1), "reason": "r",
                 "assertion": {"type": "contains", "value": "y"}},
                {"pass": (t + p) % 3 != 0, "score": 1.0 if (t + p) % 3 else 0.0,
                 "reason": "the grader's reason",
                 "assertion": {"type": "llm-rubric", "value": "is polite",
                               "provider": "openai:gpt-4o"}},
            ]
            results.append({
                "id": f"r{t}-{p}", "testIdx": t, "promptIdx": p,
                "provider": {"id": prov, "label": ""}, "vars": {"question": f"q{t}"},
                "prompt": {"raw": f"Answer: q{t}", "label": "answer"},
                "response": {"output": "" if failed else f"{prov} says {t}",
                             "tokenUsage": {"prompt": 5, "completion": t, "total": 5 + t}},
                "latencyMs": 100 * p + t, "cost": 0.0001 * p, "success": not failed,
                "score": 1.0, "namedScores": {},
                "error": "API error: 500" if failed else None,
                "failureReason": 2 if failed else (0 if t % 2 == 0 else 1),
                "gradingResult": {"pass": True, "score": 1.0, "reason": "",
                                  "componentResults": [] if failed else comps},
            })
    prompts = [{"raw": "Answer: {{question}}", "label": "answer", "provider": prov}
               for prov in providers]
    path.write_text(json.dumps({"evalId": "eval-x", "results": {
        "version": 3, "timestamp": "2026-12-01T00:00:00Z", "prompts": prompts,
        "results": results, "stats": {}}, "config": {}}))
    return path


def test_larger_results_file(lead: Any, tmp_path: Path) -> None:
    f = _built(tmp_path / "results.json")
    summary, err = run_peer("promptfoo", f, "--study", "big", "--owner", "lead")
    assert summary["created"]["item"] == 20 and summary["created"]["output"] == 59
    assert summary["created"]["verdict"] == 59 * 3
    assert "dropped: 1 results without assertion results" in err
    assert set(Verdict.objects.values_list("criterion__key", flat=True)) == {
        "contains", "contains-2", "llm-rubric"}
    v = Verdict.objects.get(criterion__key="contains-2", output__item__external_id="test-4",
                            output__candidate__name="anthropic:claude-3-haiku")
    assert v.value == "fail"
    rubric = Verdict.objects.filter(criterion__key="llm-rubric").select_related(
        "judge_version__judge").first()
    assert rubric is not None and rubric.judge_version.judge.name == "promptfoo-llm-rubric"
    assert Output.objects.get(item__external_id="test-7",
                              candidate__name="ollama:llama3").latency_ms == 207
    again, _ = run_peer("promptfoo", f, "--study", "big")
    assert again["unchanged"]["verdict"] == 177 and again["created"].get("verdict", 0) == 0


def test_not_a_results_file(lead: Any, tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"results": []}))
    err = peer_error("promptfoo", f, "--study", "x", "--owner", "lead")
    assert "results.results" in err
