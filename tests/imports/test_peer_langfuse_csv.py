"""Issue 25 §3, Langfuse's CSV exports of the traces and observations tables (with a scores
export): they import exactly what the trace JSON they were written from imports (items and their
inputs, outputs with latency, tokens and cost, judge verdicts).

The CSVs are written from the real trace fixtures of `peer-exports/langfuse/` the way Langfuse's
batch export writes them, as read in its source (imports/peers/langfuse.py names the files and
commits): the observations row is `convertObservation` (dates, `latency` as end minus start in
ms, `totalCost` as `costDetails.total` or 0, input/output parsed once from their JSON text) plus
the trace's name, tags, timestamp and user, model prices, comments and one column per score
name; the traces row holds the trace's fields with its input and output as ClickHouse holds
them; the scores table's row is the scores export's. Every cell is quoted; a string is written
as it is, anything else as JSON (a date as a quoted ISO string), null as an empty cell."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from imports.generic import scale_parse
from imports.management.commands._common import study_for_import
from imports.peers import ExportError, Translation, peer_import
from imports.peers.langfuse import translate
from judges.models import Verdict
from studies.models import Item, Output

pytestmark = pytest.mark.django_db

NAMES = ["claude-agent-2025-12-22.trace.json", "google-gemini-2025-08-01.trace.json",
         "langgraph-python-2025-08-22.trace.json", "openai-agents-2025-09-30.trace.json"]


class Date(str):
    """A JavaScript Date in a row: JSON.stringify writes it as a quoted ISO string."""


def _cell(value: Any) -> str:
    """`stringifyForCsv`: a string as it is, null empty, anything else JSON.stringify'd."""
    if value is None:
        return ""
    if isinstance(value, Date):
        return json.dumps(str(value))
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _write(rows: list[dict[str, Any]]) -> bytes:
    """`transformStreamToCsv`: the first row's keys as the header, every field quoted."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(list(rows[0]))
    for row in rows:
        w.writerow([_cell(row[k]) for k in rows[0]])
    return buf.getvalue().encode()


def _parsed(text: Any) -> Any:
    """Input/output as the observations export holds them: parsed once from their JSON text."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _date(value: Any) -> Date | None:
    return Date(value) if value else None


def _ms(start: str, end: str | None) -> int | None:
    if not end:
        return None
    t0, t1 = (datetime.fromisoformat(v.replace("Z", "+00:00")) for v in (start, end))
    return round((t1 - t0).total_seconds() * 1000)


def _observation_row(o: Mapping[str, Any], trace: Mapping[str, Any],
                     score_names: list[str]) -> dict[str, Any]:
    usage, cost = o.get("usageDetails") or {}, o.get("costDetails") or {}
    row = {
        "id": o["id"], "traceId": o["traceId"], "projectId": o.get("projectId"),
        "type": o["type"], "environment": o.get("environment"),
        "parentObservationId": o.get("parentObservationId"),
        "startTime": _date(o["startTime"]), "endTime": _date(o.get("endTime")),
        "name": o.get("name"), "metadata": _parsed(o.get("metadata")), "level": o.get("level"),
        "statusMessage": o.get("statusMessage"), "version": o.get("version"),
        "input": _parsed(o.get("input")), "output": _parsed(o.get("output")),
        "modelParameters": o.get("modelParameters"),
        "completionStartTime": _date(o.get("completionStartTime")),
        "promptId": o.get("promptId"), "createdAt": _date(o.get("createdAt")),
        "updatedAt": _date(o.get("updatedAt")), "usageDetails": usage, "costDetails": cost,
        "providedCostDetails": o.get("providedCostDetails") or {}, "model": o.get("model"),
        "internalModelId": o.get("internalModelId"), "promptName": o.get("promptName"),
        "promptVersion": o.get("promptVersion"),
        "latency": _ms(o["startTime"], o.get("endTime")),
        "timeToFirstToken": o.get("timeToFirstToken"),
        "inputCost": cost.get("input"), "outputCost": cost.get("output"),
        "totalCost": cost.get("total", 0),
        "inputUsage": usage.get("input", 0), "outputUsage": usage.get("output", 0),
        "totalUsage": usage.get("total", 0),
        "traceName": trace.get("name"), "traceTags": trace.get("tags") or [],
        "traceTimestamp": _date(trace.get("timestamp")), "userId": trace.get("userId"),
        "modelId": o.get("internalModelId"), "inputPrice": None, "outputPrice": None,
        "totalPrice": None, "comments": [],
    }
    # One column per score name of the project: averages of the observation's own scores
    # (the fixtures' scores are all on the trace).
    row.update({name: None for name in score_names})
    return row


def _trace_row(t: Mapping[str, Any], score_names: list[str]) -> dict[str, Any]:
    row = {
        "id": t["id"], "timestamp": _date(t.get("timestamp")), "name": t.get("name") or "",
        "userId": t.get("userId"), "sessionId": t.get("sessionId"), "release": t.get("release"),
        "version": t.get("version"), "environment": t.get("environment"),
        "tags": t.get("tags") or [], "bookmarked": bool(t.get("bookmarked")),
        "public": bool(t.get("public")), "input": t.get("input"), "output": t.get("output"),
        "metadata": t.get("metadata"), "comments": [],
    }
    for name in score_names:
        values = [s["value"] for s in t.get("scores") or [] if s["name"] == name]
        row[name] = values or None
    return row


def _score_row(s: Mapping[str, Any], t: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": s["id"], "traceId": s["traceId"], "sessionId": s.get("sessionId"),
        "datasetRunId": s.get("datasetRunId"), "timestamp": _date(s.get("timestamp")),
        "source": s["source"], "name": s["name"], "dataType": s["dataType"],
        "value": s.get("value"), "stringValue": s.get("stringValue"),
        "comment": s.get("comment"), "metadata": s.get("metadata"),
        "observationId": s.get("observationId"), "traceName": t.get("name"),
        "userId": t.get("userId"), "traceTags": t.get("tags") or [],
        "environment": s.get("environment"),
    }


@pytest.fixture
def exports(data_dir: Path) -> dict[str, bytes]:
    """The four fixtures as one trace JSON list and as the three CSV exports."""
    folder = data_dir / "peer-exports" / "langfuse"
    if not folder.is_dir():
        pytest.skip(f"{folder} is missing")
    docs = [json.loads((folder / n).read_text()) for n in NAMES]
    names = sorted({s["name"] for d in docs for s in d["trace"].get("scores") or []})
    return {
        "json": json.dumps(docs).encode(),
        "observations": _write([_observation_row(o, d["trace"], names)
                                for d in docs for o in d["observations"]]),
        "traces": _write([_trace_row(d["trace"], names) for d in docs]),
        "scores": _write([_score_row(s, d["trace"])
                          for d in docs for s in d["trace"].get("scores") or []]),
    }


def _content(tr: Translation) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for _, row in tr.rows)


def test_the_csv_exports_translate_as_the_trace_json(exports: dict[str, bytes]) -> None:
    from_json = translate(exports["json"], "traces.json", {"generation": "last"})
    from_csv = translate(exports["observations"], "observations.csv",
                         {"generation": "last", "traces": exports["traces"],
                          "scores": exports["scores"]})
    # Items with their inputs, outputs, raters, criteria and values: the same rows.
    assert len(from_json.rows) == 9
    assert _content(from_csv) == _content(from_json)
    assert from_csv.dropped == from_json.dropped
    assert from_json.dropped["other generations of multi-generation traces"] > 0
    assert from_csv.measurements.keys() == from_json.measurements.keys()
    for key, measured in from_json.measurements.items():
        assert from_csv.measurements[key] == pytest.approx(measured)
    # The gemini trace: 12.032 s, 6 in / 2055 out tokens, $0.0051392999 (fixture README).
    gemini = next(v for (_, cand), v in from_csv.measurements.items()
                  if cand == "gemini-2.5-flash")
    assert gemini == pytest.approx({"latency_ms": 12032.0, "tokens_in": 6, "tokens_out": 2055,
                                    "cost": 0.005139299999})
    # The per-name score columns carry no source or author: said, not read.
    assert any("hallucination" in n and "scores export" in n for n in from_csv.notes)


def test_the_csv_exports_import_as_the_trace_json(lead: Any,
                                                  exports: dict[str, bytes]) -> None:
    scales = {k: scale_parse("interval:0-1")
              for k in ("hallucination", "toxicity", "correctness")}

    def run(slug: str, data: bytes, **options: Any) -> dict[str, Any]:
        study = study_for_import(slug, owner="lead", name=None)
        summary, _ = peer_import(study=study, tool="langfuse", data=data, filename="x",
                                 options={"generation": "last", **options}, scales=scales)
        outputs = {(o.item.external_id, o.item.input, o.candidate.name, o.text):
                   (o.latency_ms, o.tokens_in, o.tokens_out, o.cost)
                   for o in Output.objects.filter(item__study=study).select_related(
                       "item", "candidate")}
        verdicts = sorted(Verdict.objects.filter(output__item__study=study).values_list(
            "output__item__external_id", "criterion__key", "value_num",
            "judge_version__judge__name"))
        return {"created": summary.created, "outputs": outputs, "verdicts": verdicts}

    from_json = run("lf-json", exports["json"])
    from_csv = run("lf-csv", exports["observations"], traces=exports["traces"],
                   scores=exports["scores"])
    assert from_csv["created"] == from_json["created"]
    assert from_csv["verdicts"] == from_json["verdicts"] and len(from_json["verdicts"]) == 9
    assert from_csv["outputs"].keys() == from_json["outputs"].keys()
    for key, measured in from_json["outputs"].items():
        assert from_csv["outputs"][key] == pytest.approx(measured)
    assert Item.objects.filter(study__slug="lf-csv").count() == 4


def test_what_the_csv_import_asks_for(exports: dict[str, bytes]) -> None:
    with pytest.raises(ExportError) as info:
        translate(exports["observations"], "observations.csv", {"generation": "last"})
    assert info.value.path == "traces" and "traces table's CSV" in info.value.message
    with pytest.raises(ExportError) as info:
        translate(exports["traces"], "traces.csv", {"traces": exports["traces"]})
    assert "this is the traces table's CSV export" in info.value.message
    with pytest.raises(ExportError) as info:
        translate(b'"id","name"\n"a","b"\n', "x.csv", {"traces": exports["traces"]})
    assert "traceId" in info.value.message and "model" in info.value.message
    with pytest.raises(ExportError) as info:
        translate(exports["observations"], "o.csv", {"traces": b'"id","name"\n"a","b"\n'})
    assert info.value.path == "traces" and "input" in info.value.message
    # Observations of traces outside the traces export are counted, not imported.
    body = exports["traces"].decode()
    first = next(csv.reader(io.StringIO(body)))
    rows = list(csv.DictReader(io.StringIO(body)))
    gemini_only = _write([{k: r[k] for k in first} for r in rows if "gemini" in r["input"]])
    tr = translate(exports["observations"], "o.csv",
                   {"generation": "last", "traces": gemini_only, "scores": exports["scores"]})
    assert {c for _, c in tr.measurements} == {"gemini-2.5-flash"}
    assert tr.dropped["observations of traces not in the traces export"] > 0


def test_the_csv_exports_through_the_command_and_the_rest_endpoint(
    client_for: Any, lead: Any, exports: dict[str, bytes], tmp_path: Path
) -> None:
    """The observations CSV as the file, the traces CSV as `--traces` (the `traces` part of a
    multipart form) and the scores export as `--scores`: the same import either way."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from studies.models import Membership

    from .cli import run_peer

    paths = {}
    for name in ("observations", "traces", "scores"):
        paths[name] = tmp_path / f"{name}.csv"
        paths[name].write_bytes(exports[name])
    scales = [a for k in ("hallucination", "toxicity", "correctness")
              for a in ("--scale", f"{k}=interval:0-1")]
    summary, _ = run_peer("langfuse", paths["observations"], "--study", "lf-cli", "--owner",
                          "lead", "--option", "generation=last", "--traces",
                          str(paths["traces"]), "--scores", str(paths["scores"]), *scales)
    assert summary["created"]["verdict"] == 9 and summary["created"]["item"] == 4

    study = study_for_import("lf-rest", owner="lead", name=None)
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    query = "generation=last&" + "&".join(
        f"scale={k}=interval:0-1" for k in ("hallucination", "toxicity", "correctness"))
    resp = client_for(lead).post(
        f"/api/studies/{study.slug}/imports/langfuse?{query}",
        data={name if name != "observations" else "file":
              SimpleUploadedFile(f"{name}.csv", exports[name])
              for name in ("observations", "traces", "scores")},
        format="multipart")
    assert resp.status_code == 200, resp.content
    assert resp.json()["created"] == summary["created"]
