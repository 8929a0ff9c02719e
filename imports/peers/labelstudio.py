"""Label Studio JSON export (Export -> JSON): a list of tasks, each with `data`, `annotations[]`
and `predictions[]`, each annotation's `result[]` holding `{from_name, type, value}` entries.

A task's `data` says nothing about which field is the model output that annotators rated, and
which of two texts a `pairwise` result's "left" means: both are options (`output_field`, or
`pair_fields` "LEFT,RIGHT" in the order of the `<Pairwise toName>` tag; Label Studio's "left"
is the first). Predictions are pre-labels unless the user says they are a judge's verdicts.

The CSV (and TSV) export (`file_format=csv|tsv`; label-studio-sdk `converter/exports/csv2.py`) has
one row per annotation that was not cancelled, columns in name order: the task's `id`, each
`data` field, each control tag's result under its `from_name`, and `annotator` (the e-mail, else
the user id), `annotation_id`, `created_at`, `updated_at`, `lead_time` (plus `agreement`,
`history`). A result cell holds a single choice as its text and anything else as the JSON list
of the tag's values without their type (`[{"rating": 4}]`, `[{"number": 2}]`,
`[{"selected": "left"}]`, `[{"choices": ["a", "b"]}]`). Nothing in the header tells a result
column from a data column, so the result columns are an option (`results`). The rows are read
back into the JSON export's tasks and translated as those are; a CSV has no predictions.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from studies.ingest.reading import csv_dict_reader, csv_error_reason

from .translation import ExportError, Translation, load_json, obj, text_of

# Result types read as a rating: value key -> how to read it.
_RATING_TYPES = {"choices", "rating", "number", "pairwise"}


def _names(raw: Any, what: str, n: int) -> list[str]:
    parts = [p.strip() for p in str(raw).split(",")] if raw else []
    if len(parts) != n or not all(parts):
        raise ExportError(what, f"give {n} comma-separated names, got {raw!r}")
    return parts


def _rater(task_key: str, k: int, ann: Mapping[str, Any], anonymous: str) -> str | None:
    who = ann.get("completed_by")
    if isinstance(who, Mapping):
        who = who.get("email") or who.get("id")
    if who not in (None, ""):
        return f"ls-{who}" if isinstance(who, int) else str(who)
    if anonymous == "per-annotation":
        return f"ls-{task_key}-annotation-{ann.get('id', k + 1)}"
    return None


def _value(res: Mapping[str, Any]) -> tuple[str | None, str]:
    """(value, reason it is dropped)."""
    kind = res.get("type")
    value = res.get("value")
    if not isinstance(value, Mapping):
        return None, f"'{kind}' results without a value object"
    if kind == "choices":
        choices = value.get("choices")
        if isinstance(choices, list) and len(choices) == 1:
            return str(choices[0]), ""
        return None, "'choices' results with several choices (a multi-label answer)"
    if kind in ("rating", "number"):
        num = value.get(kind)
        if isinstance(num, (int, float)) and not isinstance(num, bool):
            return text_of(num), ""
        return None, f"'{kind}' results without a number"
    if kind == "pairwise":
        sel = value.get("selected")
        if sel == "left":
            return "A", ""
        if sel == "right":
            return "B", ""
        return None, "'pairwise' results with neither left nor right selected"
    return None, f"'{kind}' results (not a rating: no criterion value to map)"


# Columns every row of the CSV export has besides the data fields and the results.
_CSV_FIXED = ("annotator", "annotation_id", "created_at", "updated_at", "lead_time", "id",
              "agreement", "history")
# A result cell's JSON value (the tag's value without its type): the key that names the type.
_VALUE_KEYS = {"choices": "choices", "rating": "rating", "number": "number",
               "selected": "pairwise", "text": "textarea", "ranker": "ranker",
               "taxonomy": "taxonomy", "datetime": "datetime", "labels": "labels"}


def _format(filename: str, options: Mapping[str, Any]) -> str:
    fmt = options.get("file_format") or ""
    if not fmt:
        lower = filename.lower()
        fmt = "csv" if lower.endswith(".csv") else "tsv" if lower.endswith(".tsv") else "json"
    if fmt not in ("json", "csv", "tsv"):
        raise ExportError("file_format", f"'json', 'csv' or 'tsv', got {fmt!r}")
    return str(fmt)


def _csv_results(name: str, cell: str) -> list[dict[str, Any]]:
    """The results of one result cell, as the JSON export holds them."""
    if cell == "":
        return []
    if cell[:1] in "[{":
        try:
            parsed = json.loads(cell)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            parsed = [parsed]
        if isinstance(parsed, list) and parsed and all(isinstance(x, Mapping) for x in parsed):
            out = []
            for value in parsed:
                kind = next((_VALUE_KEYS[k] for k in value if k in _VALUE_KEYS),
                            "/".join(sorted(value)) or "empty")
                out.append({"from_name": name, "type": kind, "value": value})
            return out
    # A single choice is written as its text (csv2's prettify_result).
    return [{"from_name": name, "type": "choices", "value": {"choices": [cell]}}]


def _csv_tasks(data: bytes, sep: str, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CSV export's rows read back into tasks with their annotations (module docstring)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExportError("(file)", f"the Label Studio export is not UTF-8 text ({exc.reason})") \
            from None
    reader = csv_dict_reader(io.StringIO(text, newline=""), delimiter=sep)
    try:
        header = list(reader.fieldnames or [])
    except csv.Error as exc:
        raise ExportError("line 1", f"not a CSV header ({csv_error_reason(exc)})") from None
    raw_results = options.get("results") or ""
    results = [r.strip() for r in str(raw_results).split(",") if r.strip()]
    others = [c for c in header if c not in _CSV_FIXED]
    if not results:
        raise ExportError(
            "results",
            "say which columns of the CSV export hold annotation results (results=NAME,NAME: "
            "the from_name of each control tag); nothing in the header tells them from the "
            f"task's data fields. Its columns besides the fixed ones: "
            f"{', '.join(others[:20]) or 'none'}",
        )
    missing = [r for r in results if r not in header]
    if missing:
        raise ExportError("results", f"no column {', '.join(map(repr, missing))} in the export "
                          f"(columns: {', '.join(header[:30])})")
    if "id" not in header:
        raise ExportError("(file)", "the CSV has no 'id' column (the task id), so the "
                          "annotations of one task cannot be told from another's; import the "
                          "JSON export")
    if options.get("predictions") == "judge":
        raise ExportError("predictions", "the CSV export holds annotations only; import the "
                          "JSON export for predictions")
    data_cols = [c for c in others if c not in results
                 and not any(c == f"{r}_transcript" for r in results)]
    tasks: dict[str, dict[str, Any]] = {}
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise ExportError(f"line {reader.line_num}",
                          f"not a CSV row ({csv_error_reason(exc)})") from None
    for n, row in enumerate(rows, start=2):
        task_id = (row.get("id") or "").strip()
        if not task_id:
            raise ExportError(f"line {n}.id", "a row without its task id")
        task = tasks.setdefault(task_id, {
            "id": int(task_id) if task_id.isdigit() else task_id,
            "data": {c: row.get(c) or "" for c in data_cols},
            "annotations": [],
        })
        res = [r for name in results for r in _csv_results(name, row.get(name) or "")]
        ann_id = (row.get("annotation_id") or "").strip()
        if not ann_id and not res:
            continue  # a task without annotations: one row with the task alone
        who = (row.get("annotator") or "").strip()
        ann: dict[str, Any] = {"id": ann_id or f"line {n}", "result": res}
        if who:
            ann["completed_by"] = int(who) if who.isdigit() else who
        if (row.get("lead_time") or "").strip():
            ann["lead_time"] = row["lead_time"]
        task["annotations"].append(ann)
    return list(tasks.values())


@dataclass(frozen=True)
class _Options:
    """The translation options, checked against the tasks (see the module docstring)."""

    output_field: str
    pair: list[str]  # pair_fields LEFT,RIGHT (empty: one output per task)
    pair_cands: list[str]
    input_field: str
    candidate: str
    ids: str  # "id" | "position"
    anonymous: str  # "drop" | "per-annotation"
    predictions: str  # "drop" | "judge"


def _options(tasks: list[Any], options: Mapping[str, Any]) -> _Options:
    output_field = options.get("output_field") or ""
    pair_fields = options.get("pair_fields") or ""
    if bool(output_field) == bool(pair_fields):
        seen = sorted({k for t in tasks if isinstance(t, Mapping)
                       for k in (obj(t.get("data")) or t)})
        raise ExportError(
            "output_field",
            "say which task data field holds the rated output: output_field (one output per "
            "task) or pair_fields LEFT,RIGHT (two outputs, a pairwise template); the tasks' "
            f"data fields are: {', '.join(seen[:20]) or 'none'}",
        )
    input_field = options.get("input_field") or ""
    candidate = options.get("candidate") or ""
    pair = _names(pair_fields, "pair_fields", 2) if pair_fields else []
    pair_cands = _names(options.get("pair_candidates"), "pair_candidates", 2) if pair else []
    if output_field and not candidate:
        raise ExportError("candidate", "name the candidate whose outputs the tasks hold "
                          "(candidate), e.g. the model that wrote them")
    ids = options.get("task_ids") or "id"
    if ids not in ("id", "position"):
        raise ExportError("task_ids", f"'id' or 'position', got {ids!r}")
    anonymous = options.get("anonymous_annotators") or "drop"
    if anonymous not in ("drop", "per-annotation"):
        raise ExportError("anonymous_annotators", f"'drop' or 'per-annotation', got {anonymous!r}")
    predictions = options.get("predictions") or "drop"
    if predictions not in ("drop", "judge"):
        raise ExportError("predictions", f"'drop' or 'judge', got {predictions!r}")
    no_id = [i for i, t in enumerate(tasks) if isinstance(t, Mapping) and "id" not in t]
    if ids == "id" and no_id:
        raise ExportError(
            f"tasks[{no_id[0]}].id",
            f"{len(no_id)} task(s) have no id: pass task_ids=position to key the tasks by "
            "their position in this file (re-importing another export then keys them "
            "differently)",
        )
    return _Options(output_field=output_field, pair=pair, pair_cands=pair_cands,
                    input_field=input_field, candidate=candidate, ids=ids, anonymous=anonymous,
                    predictions=predictions)


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    fmt = _format(filename, options)
    if fmt == "json":
        doc = load_json(data, what="the Label Studio export")
        tasks = doc if isinstance(doc, list) else [doc] if isinstance(doc, Mapping) else None
    else:
        tasks = _csv_tasks(data, "," if fmt == "csv" else "\t", options)
    if tasks is None:
        raise ExportError("(file)", "a Label Studio JSON export is a list of task objects")
    tr = Translation()
    opts = _options(tasks, options)
    lead_times = 0
    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise ExportError(f"tasks[{i}]", "each task is a JSON object")
        # A bare task (no "data" wrapper) is its own data, as Label Studio imports it.
        data_ = task.get("data")
        dat: Mapping[str, Any] = data_ if isinstance(data_, Mapping) else task
        key = str(task["id"]) if opts.ids == "id" else f"task-{i + 1}"
        label = f"task {key}" if opts.ids == "id" else f"task #{i + 1}"
        anns = [a for a in task.get("annotations") or [] if isinstance(a, Mapping)]
        preds = [p for p in task.get("predictions") or [] if isinstance(p, Mapping)]
        if not anns and not (preds and opts.predictions == "judge"):
            tr.drop("tasks without annotations")
            if preds:
                tr.drop("predictions (pre-labels; pass predictions=judge to import them as "
                        "judge verdicts)", len(preds))
            continue
        fields = opts.pair or [opts.output_field]
        missing = [f for f in fields if f not in dat]
        if missing:
            tr.drop(f"tasks without the output field(s) {', '.join(missing)}")
            continue
        base = _task_base(opts, i, key, dat)
        raters = _task_raters(tr, opts, key, label, anns, preds)
        lead_times += sum("lead_time" in ann for _, kind, _, ann, _ in raters if kind == "human")
        _results_add(tr, opts, base, raters)
    if lead_times:
        tr.notes.append(f"{lead_times} annotation lead_time(s) (seconds spent) are not stored")
    return tr


def _task_base(opts: _Options, i: int, key: str, dat: Mapping[str, Any]) -> dict[str, Any]:
    """The row fields a task's ratings share: its item and its output (or pair of outputs)."""
    base: dict[str, Any] = {"item_id": key}
    if opts.input_field:
        if opts.input_field not in dat:
            raise ExportError(f"tasks[{i}].data.{opts.input_field}", "the input field is missing")
        base["item_input"] = text_of(dat[opts.input_field])
    if opts.pair:
        pair, pair_cands = opts.pair, opts.pair_cands
        base.update({
            "output_a": f"{key}:{pair_cands[0]}", "output_b": f"{key}:{pair_cands[1]}",
            "candidate_a": pair_cands[0], "candidate_b": pair_cands[1],
            "output_a_text": text_of(dat[pair[0]]), "output_b_text": text_of(dat[pair[1]]),
            # "left" is the first field of pair_fields: A names output_a, known from them.
            "pairwise_values": "outputs",
        })
    else:
        base.update({"output_id": f"{key}:{opts.candidate}", "candidate": opts.candidate,
                     "output_text": text_of(dat[opts.output_field])})
    return base


_Rater = tuple[str, str, str, Mapping[str, Any], str]  # (who, kind, judge version, ann, where)


def _task_raters(
    tr: Translation, opts: _Options, key: str, label: str,
    anns: list[Mapping[str, Any]], preds: list[Mapping[str, Any]],
) -> list[_Rater]:
    """A task's annotations (annotators) and, with predictions=judge, its predictions (a
    judge), each with the rater it counts for; the others dropped with the reason."""
    raters: list[_Rater] = []
    for k, ann in enumerate(anns):
        where = f"{label}, annotation {ann.get('id', k + 1)}"
        if ann.get("was_cancelled"):
            tr.drop("cancelled (skipped) annotations")
            continue
        who = _rater(key, k, ann, opts.anonymous)
        if who is None:
            tr.drop("annotations without completed_by (annotator unknown; pass "
                    "anonymous_annotators=per-annotation to count each as its own rater)")
            continue
        raters.append((who, "human", "", ann, where))
    for k, pred in enumerate(preds):
        if opts.predictions != "judge":
            tr.drop("predictions (pre-labels; pass predictions=judge to import them as "
                    "judge verdicts)")
            continue
        version = str(pred.get("model_version") or "imported")
        where = f"{label}, prediction {pred.get('id', k + 1)}"
        raters.append(("ls-predictions", "judge", version, pred, where))
    return raters


def _results_add(
    tr: Translation, opts: _Options, base: Mapping[str, Any], raters: list[_Rater]
) -> None:
    """One row per rating result of each rater; results of the wrong kind for the task, or
    without a readable value, dropped with the reason."""
    for who, kind, version, ann, where in raters:
        for res in ann.get("result") or []:
            if not isinstance(res, Mapping):
                continue
            rtype = res.get("type")
            if opts.pair and rtype != "pairwise" and rtype in _RATING_TYPES:
                tr.drop(f"'{rtype}' results on a pairwise task (pair_fields given)")
                continue
            if not opts.pair and rtype == "pairwise":
                tr.drop("'pairwise' results on a single-output task (give pair_fields)")
                continue
            value, why = _value(res)
            if value is None:
                tr.drop(why)
                continue
            tr.add(where, {**base, "rater_id": who, "rater_kind": kind,
                           "judge_version": version,
                           "criterion": str(res.get("from_name") or ""), "value": value})
