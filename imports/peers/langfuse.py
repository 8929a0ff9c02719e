"""Langfuse traces with their observations (the trace JSON its API and UI serve: `{"trace",
"observations"}`, a list of them, or `{"data": [...]}`; or the observations table's CSV export
with the traces table's CSV export as the `traces` option), and scores (inside each trace's
`scores[]`, and/or a scores export, CSV or JSON, as the `scores` option).

trace -> item (the trace input); the GENERATION observation -> the output of the candidate
named by its `model` (latency, tokens, cost); scores -> ratings: `source` EVAL -> judge
verdicts, ANNOTATION -> human labels by `authorUserId`. Which generation is "the answer" when
a trace holds several, and what API scores are, cannot be read from the file: options.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from typing import Any

from studies.ingest.reading import csv_dict_reader, csv_error_reason

from .translation import ExportError, Translation, load_json, number_or_none, obj, text_of

GENERATION_CHOICES = ("only", "first", "last")
API_SCORES = ("drop", "judge", "human")


def _decoded(value: Any) -> Any:
    """Langfuse serves inputs/outputs as JSON-encoded strings: decode one level when it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _traces(doc: Any) -> list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    if isinstance(doc, Mapping) and isinstance(doc.get("data"), list):
        doc = doc["data"]
    items = doc if isinstance(doc, list) else [doc]
    out = []
    for i, entry in enumerate(items):
        if not isinstance(entry, Mapping):
            raise ExportError(f"[{i}]", "each trace is a JSON object")
        trace: Mapping[str, Any] = obj(entry.get("trace")) or entry
        if "id" not in trace:
            raise ExportError(f"[{i}].trace.id", "a trace needs its id")
        obs = entry.get("observations")
        if not isinstance(obs, list):
            nested = trace.get("observations")
            obs = nested if isinstance(nested, list) else []
        out.append((trace, [o for o in obs if isinstance(o, Mapping)]))
    return out


def _camel(key: str) -> str:
    """Langfuse's table and blob-storage exports name score columns in snake_case
    (`trace_id`, `data_type`), its API in camelCase (`traceId`): read both."""
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _scores_file(raw: Any) -> list[dict[str, Any]]:
    """A scores export: JSON (a list, or {"data": [...]}) or CSV with a header row; column
    names in camelCase or snake_case."""
    if raw in (None, b"", ""):
        return []
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    head = data.lstrip()[:1]
    if head in (b"[", b"{"):
        doc = load_json(data, what="the scores export")
        rows = doc.get("data") if isinstance(doc, Mapping) else doc
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise ExportError("scores", "a JSON scores export is a list of score objects")
        return [{_camel(str(k)): v for k, v in r.items()} for r in rows]
    header, rows = _csv_table(data, "scores", "the scores export")
    need = {"name", "traceId", "source"}
    missing = need - {_camel(c) for c in header}
    if missing:
        raise ExportError("scores",
                          f"the scores CSV needs the columns {', '.join(sorted(missing))}")
    return [{_camel(k): (v if v != "" else None) for k, v in row.items()} for row in rows]


def _score_value(score: Mapping[str, Any]) -> str | None:
    kind = str(score.get("dataType") or "NUMERIC").upper()
    if kind == "CATEGORICAL":
        label = score.get("stringValue")
        return str(label) if label not in (None, "") else None
    num = number_or_none(score.get("value"))
    if kind == "BOOLEAN":
        if num is None:
            label = str(score.get("stringValue") or "").lower()
            return {"true": "pass", "false": "fail"}.get(label)
        return {1.0: "pass", 0.0: "fail"}.get(num)
    return text_of(int(num) if num is not None and num.is_integer() else num) \
        if num is not None else None


def _measured(gen: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    latency = number_or_none(gen.get("latency"))
    if latency is not None and latency >= 0:
        out["latency_ms"] = latency * 1000.0
    usage = obj(gen.get("usageDetails"))
    for ours, keys in (("tokens_in", ("input", "inputUsage", "promptTokens")),
                       ("tokens_out", ("output", "outputUsage", "completionTokens"))):
        for key in keys:
            num = number_or_none(usage.get(key) if key in usage else gen.get(key))
            if num is not None and num >= 0:
                out[ours] = int(num)
                break
    cost = number_or_none(gen.get("totalCost", gen.get("calculatedTotalCost")))
    if cost is not None and cost >= 0:
        out["cost"] = cost
    return out


# The traces and observations tables' CSV exports, as Langfuse's batch export writes them,
# confirmed from the source of langfuse/langfuse (path @ commit):
# - worker/src/features/database-read-stream/observation-stream.ts
#   @ f16e02975ad6c4a251d0b9485a7c8618fe6fcc26: a row is `convertObservation` (below) of the
#   observation, then traceName, traceTags, traceTimestamp, userId, modelId, inputPrice,
#   outputPrice, totalPrice, comments, and one column per score name;
# - packages/shared/src/server/repositories/observations_converters.ts
#   @ f8c6c7982b92ecd97005a6e6a3c2418e2b2c558a (`convertObservation`): id, traceId, projectId,
#   type, environment, parentObservationId, startTime, endTime, name, metadata, level,
#   statusMessage, version, input, output (both parsed from their JSON text), modelParameters,
#   completionStartTime, promptId, createdAt, updatedAt, usageDetails, costDetails,
#   providedCostDetails, model, internalModelId, promptName, promptVersion, latency,
#   timeToFirstToken, inputCost, outputCost, totalCost, inputUsage, outputUsage, totalUsage;
# - worker/src/features/database-read-stream/trace-stream.ts
#   @ 6454d0a55b40a1545ade077482b97e1b3a181e16: id, timestamp, name, userId, sessionId,
#   release, version, environment, tags, bookmarked, public, input, output, metadata (as
#   ClickHouse holds them), comments, and one column per score name;
# - packages/shared/src/server/utils/transforms/transformStreamToCsv.ts
#   @ 0248e054c61fe16de4639144c1907e9973146bb0 with `stringifyForCsv` of stringify.ts beside
#   it: the header is the first row's keys, every cell quoted ("" for a quote); a string is
#   written as it is, anything else as JSON (objects, arrays, numbers; a date as a quoted ISO
#   string), null as an empty cell.
# `latency` there is end minus start in milliseconds (the trace JSON's is in seconds), and
# `totalCost` is `costDetails.total` or 0 when there is none, so the cost is read from
# `costDetails`. The score columns are averages per score name with no source or author: scores
# come from the scores export.
OBSERVATION_CSV_NEEDS = ("id", "traceId", "type", "model", "output")
TRACES_CSV_NEEDS = ("id", "input")
_JSON_CELLS = ("startTime", "endTime", "usageDetails", "costDetails", "latency")
_OBSERVATION_COLUMNS = frozenset((
    "id", "traceId", "projectId", "type", "environment", "parentObservationId", "startTime",
    "endTime", "name", "metadata", "level", "statusMessage", "version", "input", "output",
    "modelParameters", "completionStartTime", "promptId", "createdAt", "updatedAt",
    "usageDetails", "costDetails", "providedCostDetails", "model", "internalModelId",
    "promptName", "promptVersion", "latency", "timeToFirstToken", "inputCost", "outputCost",
    "totalCost", "inputUsage", "outputUsage", "totalUsage", "traceName", "traceTags",
    "traceTimestamp", "userId", "modelId", "inputPrice", "outputPrice", "totalPrice", "comments",
))
_TRACE_COLUMNS = frozenset((
    "id", "timestamp", "name", "userId", "sessionId", "release", "version", "environment", "tags",
    "bookmarked", "public", "input", "output", "metadata", "comments",
))


def _csv_table(data: bytes, where: str, what: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExportError(where, f"{what} is not UTF-8 text ({exc.reason})") from None
    reader = csv_dict_reader(io.StringIO(text, newline=""))
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise ExportError(where, f"{what} is not valid CSV (line {reader.line_num}: "
                                 f"{csv_error_reason(exc)})") from None
    return list(reader.fieldnames or []), rows


def _json_cell(text: str | None) -> Any:
    """A non-string value written as JSON into its cell, decoded; an empty cell is null."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _score_columns_note(tr: Translation, header: list[str], known: frozenset[str],
                        what: str) -> None:
    extra = [c for c in header if c not in known]
    if extra:
        tr.notes.append(
            f"the {what} CSV's columns {', '.join(extra)} are not read (the table export "
            "writes one column per score name, averaged, with no source or author: scores "
            "are read from the scores export)")


def _traces_csv(data: bytes, raw_traces: Any,
                tr: Translation) -> list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    """The observations table's CSV (`data`) with the traces table's CSV (`raw_traces`), as the
    {trace, observations} pairs the trace JSON gives."""
    header, rows = _csv_table(data, "(file)", "the Langfuse export")
    if "traceId" not in header and set(TRACES_CSV_NEEDS) <= set(header):
        raise ExportError("(file)", "this is the traces table's CSV export: the file is the "
                          "observations table's CSV export, the traces CSV goes as traces")
    missing = [c for c in OBSERVATION_CSV_NEEDS if c not in header]
    if missing:
        raise ExportError("(file)", "a Langfuse export is trace JSON or the observations "
                          f"table's CSV export; this CSV lacks the columns {', '.join(missing)}")
    if not isinstance(raw_traces, bytes) or not raw_traces.strip():
        raise ExportError("traces", "the observations CSV holds no trace input: give the "
                          "traces table's CSV export (same time range) as traces")
    t_header, t_rows = _csv_table(raw_traces, "traces", "the traces export")
    t_missing = [c for c in TRACES_CSV_NEEDS if c not in t_header]
    if t_missing:
        raise ExportError("traces", f"the traces CSV needs the columns {', '.join(t_missing)}")
    _score_columns_note(tr, header, _OBSERVATION_COLUMNS, "observations")
    _score_columns_note(tr, t_header, _TRACE_COLUMNS, "traces")
    by_trace: dict[str, list[Mapping[str, Any]]] = {}
    for k, row in enumerate(t_rows, start=1):
        tid = row.get("id") or ""
        if not tid:
            raise ExportError(f"traces row {k}", "a trace needs its id")
        # The trace input is written as ClickHouse holds it (a string, as it is): the same
        # value the trace JSON serves, decoded once by the same code below.
        by_trace.setdefault(tid, [])
    traces = [{"id": row["id"], "input": row.get("input") if row.get("input") != "" else None}
              for row in t_rows]
    for k, row in enumerate(rows, start=1):
        tid = row.get("traceId") or ""
        if not row.get("id"):
            raise ExportError(f"row {k}", "an observation needs its id")
        if tid not in by_trace:
            tr.drop("observations of traces not in the traces export")
            continue
        cells = {c: _json_cell(row.get(c)) for c in _JSON_CELLS}
        latency_ms = number_or_none(cells["latency"])
        total = obj(cells["costDetails"]).get("total")
        by_trace[tid].append({
            "id": row["id"], "traceId": tid, "type": row.get("type") or "",
            "model": row.get("model") or None,
            "startTime": cells["startTime"], "endTime": cells["endTime"],
            # Written as JSON text (the export parses it once, then stringifies it): decoded
            # once below, as the trace JSON's JSON-encoded string is.
            "output": row.get("output") or None,
            "input": row.get("input") or None,
            "modelParameters": _json_cell(row.get("modelParameters")),
            "usageDetails": obj(cells["usageDetails"]),
            "latency": latency_ms / 1000.0 if latency_ms is not None else None,
            "totalCost": total,
        })
    return [(t, by_trace[str(t["id"])]) for t in traces]


def _options(options: Mapping[str, Any]) -> tuple[str, str, str]:
    """(which generation is the answer, what API scores are, the candidate named by option)."""
    pick = options.get("generation") or "only"
    if pick not in GENERATION_CHOICES:
        raise ExportError("generation", f"one of {', '.join(GENERATION_CHOICES)}, got {pick!r}")
    api = options.get("api_scores") or "drop"
    if api not in API_SCORES:
        raise ExportError("api_scores", f"one of {', '.join(API_SCORES)}, got {api!r}")
    return pick, api, options.get("candidate") or ""


# Chat roles a recorded request may hold (OpenAI chat completions; `function` is the legacy
# form of `tool`), and the generation's model parameters that belong in the request body.
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id", "tool_calls", "function_call")
_NUMERIC_PARAMS = ("temperature", "max_tokens", "max_completion_tokens", "top_p",
                   "frequency_penalty", "presence_penalty", "seed")


def recorded_request(gen: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chat request a GENERATION observation logged, as an OpenAI chat-completions body,
    or None when its input is not chat messages (Gemini `contents`, Responses API items).

    Langfuse's OpenAI integration logs `input` as the messages list, or as
    `{"messages", "tools", "tool_choice"}` when the call had tools; its LangChain handler logs
    the messages with an assistant's tool calls under `additional_kwargs.tool_calls` and each
    tool definition as a `role: tool` message whose content is the `{"type": "function"}`
    definition. `modelParameters` holds the sampling parameters (numbers may come as text)."""
    raw = _decoded(gen.get("input"))
    extra: dict[str, Any] = {}
    if isinstance(raw, Mapping) and isinstance(raw.get("messages"), list):
        extra = {k: raw[k] for k in ("tools", "tool_choice", "functions", "function_call")
                 if raw.get(k) is not None}
        raw = raw["messages"]
    if not isinstance(raw, list) or not raw:
        return None
    messages: list[dict[str, Any]] = []
    tools: list[Any] = list(extra.pop("tools", None) or [])
    for m in raw:
        if not isinstance(m, Mapping) or m.get("role") not in _CHAT_ROLES:
            return None
        content = m.get("content")
        if m["role"] == "tool" and isinstance(content, Mapping) and content.get(
                "type") == "function":
            tools.append(dict(content))
            continue
        msg = {k: m[k] for k in _MESSAGE_KEYS if k in m}
        calls = obj(m.get("additional_kwargs")).get("tool_calls")
        if isinstance(calls, list) and calls and "tool_calls" not in msg:
            msg["tool_calls"] = calls
        messages.append(msg)
    if not messages:
        return None
    body: dict[str, Any] = {"model": str(gen.get("model") or ""), "messages": messages}
    if tools:
        body["tools"] = tools
    body.update(extra)
    params = obj(_decoded(gen.get("modelParameters")))
    for key in _NUMERIC_PARAMS:
        num = number_or_none(params.get(key))
        if num is not None:
            body[key] = int(num) if key in ("max_tokens", "max_completion_tokens", "seed") \
                else num
    if params.get("stop") not in (None, "", []):
        body["stop"] = params["stop"]
    fmt = _decoded(params.get("response_format"))
    if isinstance(fmt, Mapping):
        body["response_format"] = dict(fmt)
    return body


def generation_mapped(gen: Mapping[str, Any]) -> dict[str, Any]:
    """One GENERATION observation as this importer reads it: its input and output as text
    (JSON-encoded strings decoded once, anything else as compact JSON), the chat request it
    logged (`recorded_request`, or None), and what was measured (latency_ms, tokens_in,
    tokens_out, cost; only those present). The monitoring app's Langfuse pull maps the
    observations it fetches through this, so a file import and a pull read a generation alike."""
    return {"input": text_of(_decoded(gen.get("input"))),
            "output": text_of(_decoded(gen.get("output"))),
            "request": recorded_request(gen), **_measured(gen)}


Scored = list[tuple[str, Mapping[str, Any]]]


def _answers(traces: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]], pick: str,
             fixed_candidate: str, tr: Translation
             ) -> tuple[dict[str, dict[str, Any]], dict[str, str], Scored]:
    """Per trace: the base of its rating rows (item, candidate, output, the recorded request),
    the id of the generation taken as the answer; and the scores the traces hold."""
    base_of: dict[str, dict[str, Any]] = {}
    gen_of: dict[str, str] = {}
    scores: Scored = []
    for i, (trace, observations) in enumerate(traces):
        tid = str(trace["id"])
        gens = [o for o in observations if o.get("type") == "GENERATION"]
        if not gens:
            tr.drop("traces without a GENERATION observation")
            continue
        if len(gens) > 1 and pick == "only":
            raise ExportError(
                f"[{i}].observations",
                f"trace '{tid}' has {len(gens)} generations: say which one is the answer to "
                "import (generation=last: the one that ended last; generation=first)",
            )
        gens.sort(key=lambda o: (str(o.get("endTime") or o.get("startTime") or ""),
                                 str(o.get("id"))))
        gen = gens[-1] if pick in ("last", "only") else gens[0]
        if len(gens) > 1:
            tr.drop("other generations of multi-generation traces", len(gens) - 1)
        candidate = fixed_candidate or str(gen.get("model") or "")
        if not candidate:
            raise ExportError(f"[{i}].observations",
                              f"trace '{tid}': the generation names no model; give candidate")
        base_of[tid] = {
            "item_id": tid,
            "item_input": text_of(_decoded(trace.get("input"))),
            "output_id": f"{tid}:{candidate}",
            "candidate": candidate,
            "output_text": text_of(_decoded(gen.get("output"))),
        }
        request = recorded_request(gen)
        if request is not None:
            base_of[tid]["item_recorded_request"] = request
        gen_of[tid] = str(gen.get("id"))
        measured = _measured(gen)
        if measured:
            tr.measurements[(tid, candidate)] = measured
        scores.extend((f"trace {tid}, score {s.get('name')}", s)
                      for s in trace.get("scores") or [] if isinstance(s, Mapping))
    _recorded_note(base_of, tr)
    return base_of, gen_of, scores


def _recorded_note(base_of: Mapping[str, Mapping[str, Any]], tr: Translation) -> None:
    kept = sum("item_recorded_request" in b for b in base_of.values())
    if kept:
        tr.notes.append(f"{kept} of {len(base_of)} generations logged a chat request: kept "
                        "as the items' recorded_request (a candidate run can replay it)")
    if kept < len(base_of):
        tr.notes.append(f"{len(base_of) - kept} generation(s) logged no chat-completions "
                        "messages (e.g. Gemini contents, Responses API items): no recorded "
                        "request for their items")


def _rating(s: Mapping[str, Any], api: str, tr: Translation
            ) -> tuple[str, str, str] | None:
    """(kind, rater, judge version) of a score, or None (dropped, with the reason)."""
    source = str(s.get("source") or "").upper()
    if source == "EVAL" or (source == "API" and api == "judge"):
        return "judge", f"langfuse-{source.lower()}", str(s.get("configId") or "imported")
    if source == "ANNOTATION" or (source == "API" and api == "human"):
        rater = str(s.get("authorUserId") or "")
        if not rater:
            tr.drop("human scores without authorUserId (annotator unknown)")
            return None
        return "human", rater, ""
    if source == "API":
        tr.drop("API scores (pass api_scores=judge or api_scores=human to say what they are)")
    else:
        tr.drop(f"scores of unknown source {source or '(none)'}")
    return None


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    tr = Translation()
    pick, api, fixed_candidate = _options(options)
    if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{"):
        traces = _traces(load_json(data, what="the Langfuse export"))
    else:
        traces = _traces_csv(data, options.get("traces"), tr)
    extra_scores = _scores_file(options.get("scores"))
    base_of, gen_of, scores = _answers(traces, pick, fixed_candidate, tr)
    scores.extend((f"scores export row {k + 1}", s) for k, s in enumerate(extra_scores))
    seen: set[str] = set()
    comments = 0
    for where, s in scores:
        sid = str(s.get("id") or "")
        if sid and sid in seen:
            continue  # the same score in the trace and in the scores export
        seen.add(sid)
        tid = str(s.get("traceId") or "")
        if tid not in base_of:
            tr.drop("scores of traces not in the export (or without a generation)")
            continue
        obs = s.get("observationId")
        if obs not in (None, "") and str(obs) != gen_of[tid]:
            tr.drop("scores on another observation than the imported generation")
            continue
        rating = _rating(s, api, tr)
        if rating is None:
            continue
        value = _score_value(s)
        if value is None:
            tr.drop("scores without a value")
            continue
        comments += bool(s.get("comment"))
        kind, rater, version = rating
        tr.add(where, {**base_of[tid], "rater_id": rater, "rater_kind": kind,
                       "judge_version": version, "criterion": str(s.get("name") or ""),
                       "value": value})
    if comments:
        tr.notes.append(f"{comments} score comment(s) (rationales) are not stored")
    return tr
