"""Label Studio JSON export (Export -> JSON): a list of tasks, each with `data`, `annotations[]`
and `predictions[]`, each annotation's `result[]` holding `{from_name, type, value}` entries.

A task's `data` says nothing about which field is the model output that annotators rated, and
which of two texts a `pairwise` result's "left" means: both are options (`output_field`, or
`pair_fields` "LEFT,RIGHT" in the order of the `<Pairwise toName>` tag; Label Studio's "left"
is the first). Predictions are pre-labels unless the user says they are a judge's verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import ExportError, Translation, load_json, obj, text_of

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


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    doc = load_json(data, what="the Label Studio export")
    tasks = doc if isinstance(doc, list) else [doc] if isinstance(doc, Mapping) else None
    if tasks is None:
        raise ExportError("(file)", "a Label Studio JSON export is a list of task objects")
    tr = Translation()
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
    lead_times = 0
    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise ExportError(f"tasks[{i}]", "each task is a JSON object")
        # A bare task (no "data" wrapper) is its own data, as Label Studio imports it.
        data_ = task.get("data")
        dat: Mapping[str, Any] = data_ if isinstance(data_, Mapping) else task
        key = str(task["id"]) if ids == "id" else f"task-{i + 1}"
        label = f"task {key}" if ids == "id" else f"task #{i + 1}"
        anns = [a for a in task.get("annotations") or [] if isinstance(a, Mapping)]
        preds = [p for p in task.get("predictions") or [] if isinstance(p, Mapping)]
        if not anns and not (preds and predictions == "judge"):
            tr.drop("tasks without annotations")
            if preds:
                tr.drop("predictions (pre-labels; pass predictions=judge to import them as "
                        "judge verdicts)", len(preds))
            continue
        fields = pair or [output_field]
        missing = [f for f in fields if f not in dat]
        if missing:
            tr.drop(f"tasks without the output field(s) {', '.join(missing)}")
            continue
        base: dict[str, Any] = {"item_id": key}
        if input_field:
            if input_field not in dat:
                raise ExportError(f"tasks[{i}].data.{input_field}", "the input field is missing")
            base["item_input"] = text_of(dat[input_field])
        if pair:
            base.update({
                "output_a": f"{key}:{pair_cands[0]}", "output_b": f"{key}:{pair_cands[1]}",
                "candidate_a": pair_cands[0], "candidate_b": pair_cands[1],
                "output_a_text": text_of(dat[pair[0]]), "output_b_text": text_of(dat[pair[1]]),
                # "left" is the first field of pair_fields: A names output_a, known from them.
                "pairwise_values": "outputs",
            })
        else:
            base.update({"output_id": f"{key}:{candidate}", "candidate": candidate,
                         "output_text": text_of(dat[output_field])})
        raters: list[tuple[str, str, str, Mapping[str, Any], str]] = []
        for k, ann in enumerate(anns):
            where = f"{label}, annotation {ann.get('id', k + 1)}"
            if ann.get("was_cancelled"):
                tr.drop("cancelled (skipped) annotations")
                continue
            who = _rater(key, k, ann, anonymous)
            if who is None:
                tr.drop("annotations without completed_by (annotator unknown; pass "
                        "anonymous_annotators=per-annotation to count each as its own rater)")
                continue
            lead_times += "lead_time" in ann
            raters.append((who, "human", "", ann, where))
        for k, pred in enumerate(preds):
            if predictions != "judge":
                tr.drop("predictions (pre-labels; pass predictions=judge to import them as "
                        "judge verdicts)")
                continue
            version = str(pred.get("model_version") or "imported")
            where = f"{label}, prediction {pred.get('id', k + 1)}"
            raters.append(("ls-predictions", "judge", version, pred, where))
        for who, kind, version, ann, where in raters:
            for res in ann.get("result") or []:
                if not isinstance(res, Mapping):
                    continue
                rtype = res.get("type")
                if pair and rtype != "pairwise" and rtype in _RATING_TYPES:
                    tr.drop(f"'{rtype}' results on a pairwise task (pair_fields given)")
                    continue
                if not pair and rtype == "pairwise":
                    tr.drop("'pairwise' results on a single-output task (give pair_fields)")
                    continue
                value, why = _value(res)
                if value is None:
                    tr.drop(why)
                    continue
                tr.add(where, {**base, "rater_id": who, "rater_kind": kind,
                               "judge_version": version,
                               "criterion": str(res.get("from_name") or ""), "value": value})
    if lead_times:
        tr.notes.append(f"{lead_times} annotation lead_time(s) (seconds spent) are not stored")
    return tr
