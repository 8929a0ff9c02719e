"""promptfoo results (`promptfoo eval -o results.json`, results `version` 2 or 3).

Each `results.results[]` row is one (test case x prompt x provider) cell: the test case ->
item (`testIdx`; input = its `vars`), the provider (and prompt, when several prompts ran) ->
candidate, `response.output` -> output with `latencyMs`, tokens and `cost`; each assertion of
`gradingResult.componentResults[]` -> a verdict of the judge `promptfoo-<type>` on the
criterion named by the assertion's `metric` (else its type). Model-graded assertions
(llm-rubric, answer-relevance, ...) are LLM judges, the others programmatic checks. The value
is promptfoo's own pass/fail, or its score with values=score (the scale is then yours to give).

The CSV (`promptfoo eval -o results.csv`, or the web UI's download; `file_format=csv`) is the
results table (promptfoo `src/server/utils/evalTableUtils.ts`, `evalTableToCsv`): an optional
`Description`, one column per var, then per prompt the columns `[provider] label` (the output),
`Status` (PASS, FAIL, ERROR), `Score`, `Named Scores`, one `Metric: <name>` per named metric,
`Grader Reason` and `Comment`. It has no assertion results, latency, tokens or cost: each cell's
overall result is one verdict of the judge `promptfoo-overall` on the criterion `overall` (its
Status, or its Score with values=score), and with values=score each named metric one of the
judge `promptfoo-metric` on the criterion named by the metric. Rows are the tests in testIdx
order, numbered from 0 (`test-<n>`, the JSON export's items for an unfiltered export).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from studies.ingest.reading import csv_error_reason, csv_reader

from .translation import ExportError, Translation, load_json, number_or_none, obj, text_of

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


_GROUP = ["Status", "Score", "Named Scores"]
_GROUP_END = ["Grader Reason", "Comment"]
_HEADER = re.compile(r"^\[(?P<provider>[^\]]*)\] (?P<label>.*)$", re.S)


def _number_text(num: float) -> str:
    return text_of(int(num) if num.is_integer() else num)


def _csv_groups(header: list[str]) -> list[tuple[int, str, str, dict[str, int]]]:
    """(output column, provider, prompt label, {metric name: column}) per prompt."""
    groups = []
    i = 0
    while i < len(header):
        if header[i + 1:i + 4] != _GROUP:
            i += 1
            continue
        j = i + 4
        metrics = {}
        while j < len(header) and header[j].startswith("Metric: "):
            metrics[header[j][len("Metric: "):]] = j
            j += 1
        if header[j:j + 2] != _GROUP_END:
            raise ExportError(f"column {j + 1}", f"expected 'Grader Reason', 'Comment' after "
                              f"the columns of '{header[i]}', got {header[j:j + 2]}")
        m = _HEADER.match(header[i])
        provider, label = (m["provider"], m["label"]) if m else ("", header[i])
        groups.append((i, provider, label, metrics))
        i = j + 2
    return groups


def _csv_table(data: bytes) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a promptfoo results CSV."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExportError("(file)", f"the promptfoo CSV is not UTF-8 text ({exc.reason})") \
            from None
    try:
        table = list(csv_reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ExportError("(file)", f"not a CSV file ({csv_error_reason(exc)})") from None
    if not table:
        raise ExportError("(file)", "the CSV is empty")
    return table[0], table[1:]


def _csv_cell(tr: Translation, where: str, base: dict[str, Any], row: list[str], col: int,
              metrics: Mapping[str, int], values: str) -> None:
    """The verdicts of one (test, prompt) cell whose Status is PASS or FAIL."""
    status = row[col + 1].strip()
    if values == "pass":
        tr.add(where, {**base, "rater_id": "promptfoo-overall", "criterion": "overall",
                       "value": "pass" if status == "PASS" else "fail"})
        given = sum(bool(row[c].strip()) for c in metrics.values())
        if given:
            tr.drop("named metric scores (numbers: pass values=score to import them)", given)
        return
    score = number_or_none(row[col + 2].strip() or None)
    if score is None:
        tr.drop("results without a score")
    else:
        tr.add(where, {**base, "rater_id": "promptfoo-overall", "criterion": "overall",
                       "value": _number_text(score)})
    for name, c in metrics.items():
        num = number_or_none(row[c].strip() or None)
        if num is None:
            continue
        tr.add(f"{where}, metric {name}",
               {**base, "rater_id": "promptfoo-metric", "criterion": _slug(name),
                "value": _number_text(num)})


def _translate_csv(data: bytes, values: str) -> Translation:
    header, body = _csv_table(data)
    groups = _csv_groups(header)
    if not groups:
        raise ExportError(
            "(file)", "no prompt's columns ('[provider] label', 'Status', 'Score', 'Named "
            "Scores', ..., 'Grader Reason', 'Comment') in the header: this reader takes the "
            "CSV of promptfoo versions that write them; import the JSON results otherwise "
            "(`promptfoo eval -o results.json`)")
    first = groups[0][0]
    start = 1 if header[:1] == ["Description"] else 0
    var_names = header[start:first]
    # One provider with several prompts: the prompt's label tells the candidates apart, as in
    # the JSON export.
    by_provider = Counter(provider for _, provider, _, _ in groups)
    tr = Translation()
    reasons = 0
    for n, row in enumerate(body):
        line = n + 2
        if len(row) < len(header):
            if not any(row):
                continue
            raise ExportError(f"line {line}", f"{len(row)} cells, the header has {len(header)}")
        item = f"test-{n}"
        inputs = {name: row[start + k] for k, name in enumerate(var_names)}
        for col, provider, label, metrics in groups:
            candidate = provider or label
            if provider and by_provider[provider] > 1:
                candidate = f"{provider} [prompt {label}]"
            status = row[col + 1].strip()
            if not status:
                tr.drop("cells without a result (the prompt did not run on the test)")
                continue
            if status == "ERROR":
                tr.drop("results that ended in an error (ERROR: the provider call failed)")
                continue
            if status not in ("PASS", "FAIL"):
                raise ExportError(f"line {line}, column {col + 2}",
                                  f"Status must be PASS, FAIL or ERROR, got {status!r}")
            reasons += bool(row[len(metrics) + col + 4].strip())
            base = {"item_id": item, "item_input": text_of(inputs),
                    "output_id": f"{item}:{candidate}", "candidate": candidate,
                    "output_text": row[col], "rater_kind": "judge",
                    "judge_version": "imported"}
            _csv_cell(tr, f"line {line} ({item}, {candidate})", base, row, col, metrics,
                      values)
    if reasons:
        tr.notes.append(f"{reasons} grader reasons (the judges' rationales) are not stored")
    tr.notes.append("a promptfoo CSV has no latency, tokens, cost, assertion results or the "
                    "prompt as sent (no recorded request): import the JSON results for them")
    return tr


# Providers that speak a chat API (promptfoo ids `<provider>:<model>` or
# `<provider>:chat:<model>` / `anthropic:messages:<model>`), whose raw prompt promptfoo sends
# as chat messages; completion, embedding, exec, script and HTTP providers are not.
_CHAT_PROVIDERS = ("openai", "azure", "azureopenai", "anthropic", "openrouter", "groq",
                   "mistral", "deepseek", "togetherai", "fireworks", "perplexity", "xai",
                   "vertex", "bedrock", "litellm", "ollama")
_NOT_CHAT = ("completion", "embedding", "embeddings", "assistant", "realtime", "responses")
# Request fields a prompt's (or provider's) config may carry into the chat request.
_CONFIG_FIELDS = ("tools", "tool_choice", "response_format", "temperature", "max_tokens",
                  "max_completion_tokens", "top_p", "seed", "stop", "frequency_penalty",
                  "presence_penalty")


def _chat_messages(raw: Any) -> list[dict[str, Any]] | None:
    """The messages promptfoo sends for a rendered prompt: a JSON array of messages (a chat
    prompt) as it is, any other text as one user message (promptfoo's `parseChatPrompt`)."""
    if not isinstance(raw, str) or not raw:
        return None
    text = raw.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and parsed and all(
                isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in parsed):
            return [dict(m) for m in parsed]
    return [{"role": "user", "content": raw}]


def recorded_request(r: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chat request one result sent (model, messages of its rendered prompt, the tools,
    response format and parameters of its prompt's `config`), or None when its provider is not
    a chat API."""
    prov = r.get("provider")
    pid = str(prov.get("id") or "") if isinstance(prov, Mapping) else str(prov or "")
    parts = pid.split(":")
    if len(parts) < 2 or parts[0] not in _CHAT_PROVIDERS or any(p in _NOT_CHAT for p in parts):
        return None
    model = ":".join(parts[2:] if parts[1] in ("chat", "messages") and len(parts) > 2
                     else parts[1:])
    prompt = obj(r.get("prompt"))
    messages = _chat_messages(prompt.get("raw"))
    if messages is None or not model:
        return None
    body: dict[str, Any] = {"model": model, "messages": messages}
    config = {**obj(prov.get("config") if isinstance(prov, Mapping) else None),
              **obj(prompt.get("config"))}
    for key in _CONFIG_FIELDS:
        if config.get(key) is not None:
            body[key] = config[key]
    return body


def _candidate_of(r: Mapping[str, Any], provider: str, several_prompts: bool,
                  prompts: list[Any]) -> str:
    if not several_prompts:
        return provider
    idx = r.get("promptIdx")
    label = ""
    if isinstance(idx, int) and 0 <= idx < len(prompts) and isinstance(prompts[idx], Mapping):
        label = str(prompts[idx].get("label") or "")
    return f"{provider} [prompt {label or idx}]"


def _measured(r: Mapping[str, Any]) -> dict[str, Any]:
    """Latency, tokens, cost and the provider error of one result."""
    response = obj(r.get("response"))
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
    return measured


def _verdicts(tr: Translation, where: str, base: Mapping[str, Any],
              comps: list[Mapping[str, Any]], values: str) -> None:
    """One verdict per assertion result of a result."""
    used: Counter[str] = Counter()
    for comp in comps:
        assertion = comp["assertion"]
        atype = str(assertion.get("type") or "")
        crit = _slug(str(assertion.get("metric") or atype))
        used[crit] += 1
        if used[crit] > 1:
            # The same assertion type twice on one result (two `contains`): numbered in the
            # order the result lists them, which is the test's order of assertions.
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
            value = _number_text(num)
        base_type = atype[4:] if atype.startswith("not-") else atype
        kind = "llm" if base_type in MODEL_GRADED else "check"
        grader = assertion.get("provider")
        version = (text_of(grader) if isinstance(grader, str) else "imported")
        tr.add(f"{where}, assertion {atype}",
               {**base, "rater_id": f"promptfoo-{_slug(atype)}", "rater_kind": "judge",
                "judge_version": version if kind == "llm" else "imported",
                "criterion": crit, "value": value})


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    fmt = options.get("file_format") or ("csv" if filename.lower().endswith(".csv") else "json")
    if fmt not in ("json", "csv"):
        raise ExportError("file_format", f"'json' or 'csv', got {fmt!r}")
    values = options.get("values") or "pass"
    if values not in ("pass", "score"):
        raise ExportError("values", f"'pass' or 'score', got {values!r}")
    if fmt == "csv":
        return _translate_csv(data, values)
    doc = load_json(data, what="the promptfoo results")
    results = obj(obj(doc).get("results"))
    rows = results.get("results")
    if not isinstance(rows, list):
        raise ExportError("results.results",
                          "a promptfoo results file (`promptfoo eval -o results.json`) holds "
                          "results.results[]")
    tr = Translation()
    listed = results.get("prompts")
    prompts: list[Any] = listed if isinstance(listed, list) else []
    pairs = {(_provider(r), r.get("promptIdx")) for r in rows if isinstance(r, Mapping)}
    several_prompts = len(pairs) > len({p for p, _ in pairs})
    recorded = 0
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ExportError(f"results.results[{i}]", "each result is a JSON object")
        if "testIdx" not in r:
            raise ExportError(f"results.results[{i}].testIdx", "a result needs its testIdx")
        item = f"test-{r['testIdx']}"
        provider = _provider(r)
        if not provider:
            raise ExportError(f"results.results[{i}].provider", "a result needs its provider")
        candidate = _candidate_of(r, provider, several_prompts, prompts)
        vars_ = r.get("vars")
        if vars_ is None and isinstance(r.get("testCase"), Mapping):
            vars_ = r["testCase"].get("vars")
        base: dict[str, Any] = {
            "item_id": item, "item_input": text_of(vars_ or {}),
            "output_id": f"{item}:{candidate}", "candidate": candidate,
            "output_text": text_of(obj(r.get("response")).get("output"))}
        request = recorded_request(r)
        if request is not None:
            # The item's first result names it (each prompt x provider renders its own).
            base["item_recorded_request"] = request
            recorded += 1
        tr.measurements[(item, candidate)] = _measured(r)
        comps = list(_components(obj(r.get("gradingResult"))))
        if not comps:
            tr.drop("results without assertion results (an output without a verdict)")
            continue
        _verdicts(tr, f"results.results[{i}] ({item}, {candidate})", base, comps, values)
    if tr.rows:
        tr.notes.append("assertion reasons (the judges' rationales) are not stored")
    if recorded:
        tr.notes.append(f"{recorded} result(s) of chat providers name the request sent (the "
                        "rendered prompt as messages, its config's tools, response format and "
                        "parameters): kept as the items' recorded_request, from the first "
                        "result of each test")
    return tr


def _provider(r: Mapping[str, Any]) -> str:
    prov = r.get("provider")
    if isinstance(prov, Mapping):
        return str(prov.get("label") or prov.get("id") or "")
    return str(prov or "")
