"""promptfoo results (`promptfoo eval -o results.json`, results `version` 2 or 3).

Each `results.results[]` row is one (test case x prompt x provider) cell: the test case ->
item (`testIdx`; input = its `vars`), the provider (and prompt, when several prompts ran) ->
candidate, `response.output` -> output with `latencyMs`, tokens and `cost`; each assertion of
`gradingResult.componentResults[]` -> a verdict of the judge `promptfoo-<type>` on the
criterion named by the assertion's `metric` (else its type). Model-graded assertions
(llm-rubric, answer-relevance, ...) are LLM judges, the others programmatic checks. The value
is promptfoo's own pass/fail, or its score with values=score (the scale is then yours to give).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from . import ExportError, Translation, load_json, number_or_none, obj, text_of

# promptfoo's model-graded assertion types (docs: "Model-graded metrics").
MODEL_GRADED = frozenset({
    "llm-rubric", "g-eval", "model-graded-closedqa", "model-graded-factuality", "factuality",
    "answer-relevance", "context-faithfulness", "context-recall", "context-relevance",
    "select-best", "search-rubric", "conversation-relevance", "moderation", "classifier",
    "similar", "pi",
})
_FAILURE_ERROR = 2  # promptfoo's ResultFailureReason.ERROR: the provider call failed


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-") or "assertion"


def _components(grading: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every assertion result once: an assert-set's aggregate has no `assertion` of its own,
    its members are listed (promptfoo lists them at the top level too; seen once)."""
    seen: set[str] = set()
    stack = list(grading.get("componentResults") or [])
    stack.reverse()
    while stack:
        comp = stack.pop()
        if not isinstance(comp, Mapping):
            continue
        if isinstance(comp.get("assertion"), Mapping):
            key = json.dumps([comp["assertion"], comp.get("pass"), comp.get("score")],
                             sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                yield comp
        nested = comp.get("componentResults")
        if isinstance(nested, list):
            stack.extend(reversed(nested))


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    doc = load_json(data, what="the promptfoo results")
    results = obj(obj(doc).get("results"))
    rows = results.get("results")
    if not isinstance(rows, list):
        raise ExportError("results.results",
                          "a promptfoo results file (`promptfoo eval -o results.json`) holds "
                          "results.results[]")
    values = options.get("values") or "pass"
    if values not in ("pass", "score"):
        raise ExportError("values", f"'pass' or 'score', got {values!r}")
    tr = Translation()
    listed = results.get("prompts")
    prompts: list[Any] = listed if isinstance(listed, list) else []
    pairs = {(_provider(r), r.get("promptIdx")) for r in rows if isinstance(r, Mapping)}
    several_prompts = len(pairs) > len({p for p, _ in pairs})
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ExportError(f"results.results[{i}]", "each result is a JSON object")
        if "testIdx" not in r:
            raise ExportError(f"results.results[{i}].testIdx", "a result needs its testIdx")
        item = f"test-{r['testIdx']}"
        provider = _provider(r)
        if not provider:
            raise ExportError(f"results.results[{i}].provider", "a result needs its provider")
        candidate = provider
        if several_prompts:
            idx = r.get("promptIdx")
            label = ""
            if isinstance(idx, int) and 0 <= idx < len(prompts) and isinstance(prompts[idx],
                                                                               Mapping):
                label = str(prompts[idx].get("label") or "")
            candidate = f"{provider} [prompt {label or idx}]"
        response = obj(r.get("response"))
        vars_ = r.get("vars")
        if vars_ is None and isinstance(r.get("testCase"), Mapping):
            vars_ = r["testCase"].get("vars")
        base = {"item_id": item, "item_input": text_of(vars_ or {}),
                "output_id": f"{item}:{candidate}", "candidate": candidate,
                "output_text": text_of(response.get("output"))}
        measured: dict[str, Any] = {}
        latency = number_or_none(r.get("latencyMs"))
        if latency is not None and latency >= 0:
            measured["latency_ms"] = latency
        usage = obj(response.get("tokenUsage"))
        for ours, key in (("tokens_in", "prompt"), ("tokens_out", "completion")):
            num = number_or_none(usage.get(key))
            if num is not None and num >= 0:
                measured[ours] = int(num)
        cost = number_or_none(r.get("cost"))
        if cost is not None and cost >= 0:
            measured["cost"] = cost
        if r.get("failureReason") == _FAILURE_ERROR and r.get("error"):
            measured["error"] = str(r["error"])
        tr.measurements[(item, candidate)] = measured
        grading = obj(r.get("gradingResult"))
        comps = list(_components(grading))
        if not comps:
            tr.drop("results without assertion results (an output without a verdict)")
            continue
        used: Counter[str] = Counter()
        for comp in comps:
            assertion = comp["assertion"]
            atype = str(assertion.get("type") or "")
            crit = _slug(str(assertion.get("metric") or atype))
            used[crit] += 1
            if used[crit] > 1:
                # The same assertion type twice on one result (two `contains`): numbered in
                # the order the result lists them, which is the test's order of assertions.
                crit = f"{crit}-{used[crit]}"
            if values == "pass":
                if not isinstance(comp.get("pass"), bool):
                    tr.drop("assertion results without pass")
                    continue
                value = "pass" if comp["pass"] else "fail"
            else:
                num = number_or_none(comp.get("score"))
                if num is None:
                    tr.drop("assertion results without a score")
                    continue
                value = text_of(int(num) if num.is_integer() else num)
            base_type = atype[4:] if atype.startswith("not-") else atype
            kind = "llm" if base_type in MODEL_GRADED else "check"
            grader = assertion.get("provider")
            version = (text_of(grader) if isinstance(grader, str) else "imported")
            tr.add(f"results.results[{i}] ({item}, {candidate}), assertion {atype}",
                   {**base, "rater_id": f"promptfoo-{_slug(atype)}", "rater_kind": "judge",
                    "judge_version": version if kind == "llm" else "imported",
                    "criterion": crit, "value": value})
    if tr.rows:
        tr.notes.append("assertion reasons (the judges' rationales) are not stored")
    return tr


def _provider(r: Mapping[str, Any]) -> str:
    prov = r.get("provider")
    if isinstance(prov, Mapping):
        return str(prov.get("label") or prov.get("id") or "")
    return str(prov or "")
