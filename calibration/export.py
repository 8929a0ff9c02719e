"""The calibrated-score export: JSON Lines (the API's row shape, one object a line) or CSV (the
same fields flat, provenance spread into columns, strata as JSON), streamed chunk by chunk.

Rows are read by keyset chunks, so memory stays flat for any number of rows and no model
instance is built. On PostgreSQL each line is built by the database and streamed by COPY
(`row_to_json` for a JSON line, PostgreSQL's own CSV writer for CSV): formatting a million rows
in Python costs more than reading them, and COPY hands over whole blocks instead of one Python
object per row. Elsewhere (SQLite) the same lines are built in Python from the list's own row
(`selectors.score_row`); tests/calibration/test_api.py checks that both paths give the same
rows.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import F, Func, QuerySet, TextField
from django.db.models.functions import Coalesce

from .models import CalibratedScore
from .selectors import calibrated_scores_chunks, score_row

FORMATS = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}

# Free text that a spreadsheet could read as a formula gets a leading apostrophe (OWASP's
# CSV-injection advice); a number such as a raw score of "-0.5" is left alone. The same two
# patterns are written as SQL below.
_TEXT_COLUMNS = frozenset({"item_external_id", "candidate", "stratum", "criterion", "raw_value"})
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$"
_NUMBER_RE = re.compile(_NUMBER)

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def csv_cell(column: str, value: Any) -> str:
    """One CSV cell: empty for null, JSON for objects, repr for floats (round-trips exactly)."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return _dumps(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if column in _TEXT_COLUMNS and text.startswith(_FORMULA_START) and not _NUMBER_RE.match(text):
        return "'" + text
    return text


def _flat(row: dict[str, Any]) -> list[str]:
    prov = row["provenance"]
    return [csv_cell(c, prov[c] if c in prov else row[c]) for c in CSV_COLUMNS]


def _fast(qs: QuerySet[CalibratedScore]) -> bool:
    return connections[qs.db].vendor == "postgresql"


# --- lines built by PostgreSQL -------------------------------------------------------------------

def _external_id() -> Coalesce:
    return Coalesce(F("output__item__external_id"), F("comparison__item__external_id"),
                    output_field=TextField())


_JSON_KEYS: tuple[tuple[str, Any], ...] = (
    ("id", F("id")), ("output_id", F("output_id")), ("comparison_id", F("comparison_id")),
    ("item_external_id", None), ("candidate", F("candidate__name")), ("strata", F("strata")),
    ("stratum", F("stratum")), ("criterion", F("criterion_key")),
    ("raw_value", F("raw_value")), ("raw_confidence", F("raw_confidence")),
    ("p_pass", F("p_pass")), ("p_low", F("p_low")), ("p_high", F("p_high")),
    ("decision", F("decision")), ("expected_cost", F("expected_cost")),
    ("source", F("source")), ("evidence_at", F("evidence_at")),
)
_PROVENANCE_KEYS: tuple[tuple[str, Any], ...] = (
    ("judge_version", F("judge_version_id")), ("judge_version_hash", F("judge_version_hash")),
    ("snapshot_id", F("snapshot_id")), ("plan_version", F("plan_version")),
    ("n_labels", F("n_labels")),
)
# The CSV's columns: a JSON line's keys, with the provenance spread flat after them.
CSV_COLUMNS = tuple(key for key, _ in (*_JSON_KEYS, *_PROVENANCE_KEYS))


def _json_fields() -> dict[str, Any]:
    """The columns of a JSON line, aliased `x_<key>` (the bare names clash with model fields);
    `_json_select` renames them and nests the provenance."""
    return {f"x_{key}": _external_id() if expr is None else expr
            for key, expr in (*_JSON_KEYS, *_PROVENANCE_KEYS)}


def _json_select(inner: str) -> str:
    # row_to_json over a renamed row costs half of one json_build_object of 36 arguments
    # (which looks up the type of every argument on every row); the provenance object is
    # spliced as text (its numbers need no escaping) rather than built by a second row_to_json.
    top = ", ".join(f"t.x_{key} AS {key}" for key, _ in _JSON_KEYS)
    provenance = (
        "('{\"judge_version\":' || COALESCE(t.x_judge_version::text, 'null')"
        " || ',\"judge_version_hash\":' || to_json(t.x_judge_version_hash)::text"
        " || ',\"snapshot_id\":' || t.x_snapshot_id::text"
        " || ',\"plan_version\":' || COALESCE(t.x_plan_version::text, 'null')"
        " || ',\"n_labels\":' || t.x_n_labels::text || '}')::json"
    )
    return (f"SELECT row_to_json(u)::text FROM (SELECT {top}, {provenance} AS provenance "
            "FROM (" + inner + ") t) u ORDER BY u.id")


def _csv_sql(column: str, expr: Any) -> Any:
    """One CSV field for COPY: text neutralised like `csv_cell`, JSON for strata, ISO 8601 for
    the time; PostgreSQL's CSV writer does the quoting (and writes null as an empty field)."""
    if column == "strata":
        template = "(%(expressions)s)::text"
    elif column == "evidence_at":
        template = "to_json(%(expressions)s) #>> '{}'"
    elif column in _TEXT_COLUMNS:
        template = (
            "CASE WHEN (%(expressions)s) ~ '^[=+@\\t\\r-]' AND "
            f"(%(expressions)s) !~ '{_NUMBER}' THEN '''' || (%(expressions)s) "
            "ELSE (%(expressions)s) END"
        )
    else:
        return expr
    return Func(expr, template=template, output_field=TextField())


_CSV_SOURCES: dict[str, Any] = {
    "id": F("id"), "output_id": F("output_id"), "comparison_id": F("comparison_id"),
    "candidate": F("candidate__name"), "strata": F("strata"),
    "stratum": F("stratum"), "criterion": F("criterion_key"), "raw_value": F("raw_value"),
    "raw_confidence": F("raw_confidence"), "p_pass": F("p_pass"), "p_low": F("p_low"),
    "p_high": F("p_high"), "decision": F("decision"), "expected_cost": F("expected_cost"),
    "source": F("source"), "evidence_at": F("evidence_at"),
    "judge_version": F("judge_version_id"), "judge_version_hash": F("judge_version_hash"),
    "snapshot_id": F("snapshot_id"), "plan_version": F("plan_version"),
    "n_labels": F("n_labels"),
}


def _csv_fields() -> dict[str, Any]:
    return {
        f"export_{c}": _csv_sql(c, _external_id() if c == "item_external_id"
                                else _CSV_SOURCES[c])
        for c in CSV_COLUMNS
    }


# JSON Lines go through COPY's CSV mode with a delimiter and a quote character that JSON text
# never holds raw (JSON escapes every control character), so each line comes out verbatim.
_COPY_JSON = "COPY ({}) TO STDOUT (FORMAT csv, DELIMITER E'\\x1f', QUOTE E'\\x01')"
_COPY_CSV = "COPY ({}) TO STDOUT (FORMAT csv)"
COPY_CHUNK = 20_000


def _copy_chunks(qs: QuerySet[CalibratedScore], fields: dict[str, Any], statement: str,
                 select: Callable[[str], str] = str, chunk: int | None = None
                 ) -> Iterator[bytes]:
    """COPY the rows of `qs` (selecting `fields`) by keyset chunks: each chunk's last id is
    found first (an index walk), then the chunk is copied in one statement. A chunk is read
    whole before it is yielded, so no COPY stays open while a slow client reads the stream."""
    size = chunk or COPY_CHUNK
    conn = connections[qs.db]
    base = qs.annotate(**fields)
    names = list(fields)
    last = 0
    while True:
        bound = list(qs.filter(id__gt=last).order_by("id")
                     .values_list("id", flat=True)[size - 1:size])
        part = base.filter(id__gt=last)
        if bound:
            part = part.filter(id__lte=bound[0])
        try:
            sql, params = part.order_by("id").values_list(*names).query.sql_with_params()
        except EmptyResultSet:  # a queryset that can match nothing (no snapshot yet)
            return
        blocks: list[bytes] = []
        copy_sql = statement.replace("{}", select(sql), 1)
        with conn.cursor() as cursor, cursor.cursor.copy(copy_sql, params) as copy:
            for block in copy:
                blocks.append(bytes(block))
        if blocks:
            yield b"".join(blocks)
        if not bound:
            return
        last = bound[0]


# --- the two formats -------------------------------------------------------------------------

def export_jsonl(qs: QuerySet[CalibratedScore], *, fast: bool | None = None) -> Iterator[bytes]:
    """JSON Lines, one chunk of rows per yielded block (`fast`: built by PostgreSQL; default:
    whenever the database is PostgreSQL)."""
    if _fast(qs) if fast is None else fast:
        yield from _copy_chunks(qs, _json_fields(), _COPY_JSON, _json_select)
        return
    for rows in calibrated_scores_chunks(qs):
        yield ("\n".join(_dumps(score_row(r)) for r in rows) + "\n").encode()


def export_csv(qs: QuerySet[CalibratedScore], *, fast: bool | None = None) -> Iterator[bytes]:
    """CSV with a header line, one chunk of rows per yielded block."""
    yield (",".join(CSV_COLUMNS) + "\n").encode()
    if _fast(qs) if fast is None else fast:
        yield from _copy_chunks(qs, _csv_fields(), _COPY_CSV)
        return
    for rows in calibrated_scores_chunks(qs):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(_flat(score_row(r)) for r in rows)
        yield buf.getvalue().encode()


__all__ = ["CSV_COLUMNS", "FORMATS", "csv_cell", "export_csv", "export_jsonl"]
