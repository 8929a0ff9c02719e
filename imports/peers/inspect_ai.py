"""Inspect AI eval logs (log `version` 2): a `.eval` file (a zip of `header.json` and
`samples/<id>_epoch_<n>.json`) or a `.json` log (one document with `samples[]`). Read with
zipfile/json: the format is plain JSON, and the `inspect_ai` package would be a heavy
dependency for reading it.

sample -> item (`id`; input = its `input`, text or chat messages; `target` in the item's
metadata); `output.choices[0].message.content` -> the output of the candidate `eval.model`
(tokens from `output.usage`, else `model_usage`; latency from `total_time`, else
`output.time`); each scorer of `scores` -> a verdict of the judge `inspect-<scorer>` on the
criterion `<scorer>`. Inspect's value constants C / I (correct / incorrect) read as pass /
fail; P (partial) and N (no answer) have no pass/fail reading and are dropped unless given
one (`partial_as`, `noanswer_as`); numbers are kept as numbers (their scale is yours to give).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any

from .translation import ExportError, Translation, load_json, number_or_none, obj, text_of

_CONSTANTS = {"C": "pass", "I": "fail"}


def _read(data: bytes, filename: str) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
    if data[:4] == b"PK\x03\x04" or filename.lower().endswith(".eval"):
        try:
            z = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile:
            raise ExportError("(file)", "an .eval log is a zip file; this one is not") from None
        names = z.namelist()
        if "header.json" not in names:
            # A log still being written (or cancelled early) has only its journal.
            raise ExportError("header.json", "the .eval log has no header.json (unfinished?)")
        header = load_json(z.read("header.json"), what="header.json")
        samples = []
        for name in sorted(n for n in names if n.startswith("samples/") and n.endswith(".json")):
            sample = load_json(z.read(name), what=name)
            if not isinstance(sample, Mapping):
                raise ExportError(name, "a sample is a JSON object")
            samples.append(sample)
        return header, samples
    doc = load_json(data, what="the Inspect log")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("eval"), Mapping):
        raise ExportError("eval", "an Inspect log has an `eval` object")
    samples = doc.get("samples") or []
    if not isinstance(samples, list):
        raise ExportError("samples", "a list of samples")
    return doc, [s for s in samples if isinstance(s, Mapping)]


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list):
        # Content parts: the text ones are the answer (reasoning and images are not).
        return "".join(str(p.get("text") or "") for p in content
                       if isinstance(p, Mapping) and p.get("type") == "text")
    return text_of(content)


def translate(data: bytes, filename: str, options: Mapping[str, Any]) -> Translation:
    header, samples = _read(data, filename)
    tr = Translation()
    spec = obj(header.get("eval"))
    model = str(options.get("candidate") or spec.get("model") or "")
    if not model:
        raise ExportError("eval.model", "the log names no model; give candidate")
    readings = dict(_CONSTANTS)
    for key, const in (("partial_as", "P"), ("noanswer_as", "N")):
        if options.get(key):
            readings[const] = str(options[key])
    status = str(header.get("status") or "")
    if status and status != "success":
        tr.notes.append(f"the log's status is '{status}': only its {len(samples)} recorded "
                        "sample(s) are imported")
    for sample in samples:
        sid = str(sample.get("id"))
        epoch = sample.get("epoch", 1)
        if epoch not in (1, None):
            # Several epochs are several answers of one candidate to one item, which a study
            # holds as one output: the first epoch is imported.
            tr.drop("samples of epochs after the first")
            continue
        where = f"sample {sid}"
        if sample.get("error"):
            tr.drop("samples that ended in an error")
            continue
        output = obj(sample.get("output"))
        choices = output.get("choices") or []
        text = _content(choices[0].get("message")) if choices and isinstance(choices[0],
                                                                            Mapping) else ""
        row: dict[str, Any] = {"item_id": sid, "item_input": text_of(sample.get("input")),
                               "output_id": f"{sid}:{model}", "candidate": model,
                               "output_text": text}
        target = sample.get("target")
        if target not in (None, "", []):
            row["meta.target"] = text_of(target)
        measured = _measured(tr, sample, output)
        if measured:
            tr.measurements[(sid, model)] = measured
        scores = obj(sample.get("scores"))
        if not scores:
            tr.drop("samples without scores")
            continue
        for scorer, score in scores.items():
            value = _score_value(tr, score, readings)
            if value is None:
                continue
            tr.add(f"{where}, scorer {scorer}",
                   {**row, "rater_id": f"inspect-{scorer}", "rater_kind": "judge",
                    "judge_version": "imported", "criterion": str(scorer), "value": value})
    explained = sum(1 for s in samples for sc in (s.get("scores") or {}).values()
                    if isinstance(sc, Mapping) and sc.get("explanation"))
    if explained:
        tr.notes.append(f"{explained} score explanation(s) (the scorers' rationales) are not "
                        "stored")
    return tr


def _measured(
    tr: Translation, sample: Mapping[str, Any], output: Mapping[str, Any]
) -> dict[str, Any]:
    """The sample's token counts and latency as the output's measurements (token counts of a
    sample that used several models dropped: judge calls are among them)."""
    measured: dict[str, Any] = {}
    usage: Mapping[str, Any] | None = obj(output.get("usage")) or None
    if usage is None and isinstance(sample.get("model_usage"), Mapping):
        per_model = [u for u in sample["model_usage"].values() if isinstance(u, Mapping)]
        usage = per_model[0] if len(per_model) == 1 else None
        if len(per_model) > 1:
            tr.drop("token counts of samples that used several models (judge calls "
                    "included)")
    for ours, key in (("tokens_in", "input_tokens"), ("tokens_out", "output_tokens")):
        num = number_or_none((usage or {}).get(key))
        if num is not None and num >= 0:
            measured[ours] = int(num)
    seconds = number_or_none(sample.get("total_time", output.get("time")))
    if seconds is not None and seconds >= 0:
        measured["latency_ms"] = seconds * 1000.0
    return measured


def _score_value(tr: Translation, score: Any, readings: Mapping[str, str]) -> str | None:
    """A scorer's value as a stored value (an Inspect constant by its reading, a boolean as
    pass/fail, a number as its text); None, dropped with the reason, when it has none."""
    raw = score.get("value") if isinstance(score, Mapping) else None
    if isinstance(raw, str):
        value = readings.get(raw)
        if value is None:
            tr.drop(f"scores with the value {raw!r} (no pass/fail reading; "
                    + ("give partial_as / noanswer_as)" if raw in ("P", "N")
                       else "not an Inspect constant)"))
        return value
    if isinstance(raw, bool):
        return "pass" if raw else "fail"
    if (num := number_or_none(raw)) is not None:
        return text_of(int(num) if num.is_integer() else num)
    tr.drop("scores whose value is not a constant, a boolean or a number "
            "(e.g. a dict of several values)")
    return None
