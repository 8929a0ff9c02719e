"""Issue 25 §3, promptfoo's CSV output (`promptfoo eval -o results.csv`, the web UI's download).

The fixtures hold JSON results only, so each CSV here is written from a JSON results file by
`_pf_csv`, promptfoo's own CSV writer (`src/server/utils/evalTableUtils.ts`: `buildCsvHeaders`,
`tableRowToCsvValues` and the streaming CLI path's `batchToStreamRows`) followed line by line:
an optional `Description`, the vars, then per prompt `[provider] label`, `Status`, `Score`,
`Named Scores`, `Metric: <name>`..., `Grader Reason`, `Comment`. The CSV must give the items,
candidates and outputs of the JSON it was written from, and each result's overall verdict.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from judges.models import Verdict
from studies.models import Item, Output

from .cli import peer_error, run_peer
from .test_peer_promptfoo import _built

pytestmark = pytest.mark.django_db

_ASSERT = 1  # promptfoo's ResultFailureReason.ASSERT


def _pf_csv(doc: dict[str, Any]) -> str:
    results = doc["results"]["results"]
    prompts = doc["results"]["prompts"]
    var_names = sorted({k for r in results for k in r.get("testCase", r).get("vars") or {}})
    metric_names = [sorted({k for r in results if r["promptIdx"] == i
                            for k, v in (r.get("namedScores") or {}).items()
                            if isinstance(v, (int, float))}) for i in range(len(prompts))]
    rows: dict[int, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: r["testIdx"]):
        case = r.get("testCase") or {}
        vars_ = case.get("vars") or r.get("vars") or {}
        row = rows.setdefault(r["testIdx"], {
            "vars": ["" if vars_.get(v) is None else str(vars_[v]) for v in var_names],
            "outputs": [None] * len(prompts), "description": case.get("description")})
        row["outputs"][r["promptIdx"]] = r
    has_descriptions = any(row["description"] for row in rows.values())
    header = (["Description"] if has_descriptions else []) + var_names
    for i, p in enumerate(prompts):
        label = f"[{p['provider']}] {p['label']}" if p.get("provider") else p["label"]
        header += [label, "Status", "Score", "Named Scores",
                   *[f"Metric: {m}" for m in metric_names[i]], "Grader Reason", "Comment"]
    lines = [header]
    for row in rows.values():
        values = ([row["description"] or ""] if has_descriptions else []) + row["vars"]
        for i, r in enumerate(row["outputs"]):
            if r is None:
                values += [""] * (6 + len(metric_names[i]))
                continue
            status = "PASS" if r["success"] else (
                "FAIL" if r.get("failureReason") == _ASSERT else "ERROR")
            named = r.get("namedScores") or {}
            grading = r.get("gradingResult") or {}
            values += [
                r["response"].get("output") or "", status,
                f"{r['score']:.2f}" if r.get("score") is not None else "",
                json.dumps({k: round(v, 2) for k, v in named.items()},
                           separators=(",", ":")) if named else "",
                *[f"{named[m]:.2f}" if m in named else "" for m in metric_names[i]],
                grading.get("reason") or "", grading.get("comment") or "",
            ]
        lines.append(values)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(lines)
    return buf.getvalue()


@pytest.fixture
def pf_dir(data_dir: Path) -> Path:
    path = data_dir / "peer-exports" / "promptfoo"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


def test_the_sample_export_as_csv(lead: Any, pf_dir: Path, tmp_path: Path) -> None:
    f = pf_dir / "sample-export.json"
    doc = json.loads(f.read_text())
    path = tmp_path / "results.csv"
    path.write_text(_pf_csv(doc), encoding="utf-8")
    assert path.read_text().splitlines()[0].startswith(
        "riddle,[openai:gpt-5] Solve this riddle: {{riddle}},Status,Score,Named Scores,")
    summary, _ = run_peer("promptfoo", path, "--study", "pfcsv", "--owner", "lead")
    assert summary["created"]["item"] == 2 and summary["created"]["output"] == 4
    assert summary["created"]["verdict"] == 4
    rows = doc["results"]["results"]
    for r in rows:
        out = Output.objects.get(item__external_id=f"test-{r['testIdx']}",
                                 candidate__name=r["provider"]["id"])
        assert out.text == r["response"]["output"]
        [v] = Verdict.objects.filter(output=out)
        assert (v.criterion.key, v.judge_version.judge.name) == ("overall", "promptfoo-overall")
        assert v.value == ("pass" if r["success"] else "fail")
    assert json.loads(Item.objects.get(external_id="test-0").input) == rows[0]["vars"]
    assert any("no latency, tokens, cost" in n for n in summary["notes"])
    # The JSON results of the same eval: the same items, candidates and outputs.
    again, _ = run_peer("promptfoo", f, "--study", "pfcsv")
    assert not again["created"].get("item") and not again["created"].get("output")
    # The JSON adds what the CSV lacks to the same two items: the request each test sent.
    assert again["updated"]["item"] == 2
    assert Item.objects.get(external_id="test-0").recorded_request["messages"] == [
        {"role": "user", "content": rows[0]["prompt"]["raw"]}]
    assert Output.objects.filter(item__study__slug="pfcsv").count() == 4


def test_named_metrics_as_scores(lead: Any, pf_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((pf_dir / "french-greeting-output.json").read_text())
    path = tmp_path / "fr.csv"
    path.write_text(_pf_csv(doc), encoding="utf-8")
    _, err = run_peer("promptfoo", path, "--study", "fr0", "--owner", "lead")
    assert "dropped: 4 named metric scores" in err
    scales = [a for k in ("overall", "correctness", "tone", "topicality", "performance")
              for a in ("--scale", f"{k}=interval:0-1")]
    summary, _ = run_peer("promptfoo", path, "--study", "fr", "--owner", "lead",
                          "--option", "values=score", *scales)
    got = {v.criterion.key: (v.judge_version.judge.name, v.value_num) for v in
           Verdict.objects.filter(criterion__rubric__study__slug="fr").select_related(
               "criterion", "judge_version__judge")}
    [r] = doc["results"]["results"]
    # The CSV holds each score to two places.
    assert got == {"overall": ("promptfoo-overall", round(r["score"], 2)),
                   **{k.lower(): ("promptfoo-metric", round(v, 2))
                      for k, v in r["namedScores"].items()}}
    assert summary["created"]["verdict"] == 5


def test_a_larger_csv_with_a_failed_call(lead: Any, tmp_path: Path) -> None:
    doc = json.loads(_built(tmp_path / "big.json").read_text())
    path = tmp_path / "big.csv"
    path.write_text(_pf_csv(doc), encoding="utf-8")
    summary, err = run_peer("promptfoo", path, "--study", "big", "--owner", "lead")
    assert summary["created"]["item"] == 20 and summary["created"]["candidate"] == 3
    # The failed call (test 3, ollama) has no verdict and no output.
    assert summary["created"]["output"] == summary["created"]["verdict"] == 59
    assert "dropped: 1 results that ended in an error" in err
    want = {(f"test-{r['testIdx']}", r["provider"]["id"]): "pass" if r["success"] else "fail"
            for r in doc["results"]["results"] if r["failureReason"] != 2}
    got = {(v.output.item.external_id, v.output.candidate.name): v.value
           for v in Verdict.objects.select_related("output__item", "output__candidate")}
    assert got == want


def test_csv_problems_are_named(lead: Any, tmp_path: Path) -> None:
    old = tmp_path / "old.csv"
    old.write_text("[openai:gpt-4o] answer,question\n[PASS] (1.00) yes,q0\n")
    err = peer_error("promptfoo", old, "--study", "x", "--owner", "lead")
    assert "'Status', 'Score'" in err and "results.json" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("q,[p] l,Status,Score,Named Scores,Grader Reason,Comment\n"
                   "q0,out,MAYBE,1.00,,,\n")
    err = peer_error("promptfoo", bad, "--study", "x", "--owner", "lead")
    assert "line 2, column 3" in err and "'MAYBE'" in err
    assert Item.objects.count() == 0
