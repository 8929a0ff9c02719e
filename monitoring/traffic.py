"""Validation of live traffic rows and their labels (pure: no Django).

A batch is a JSON array of row objects. Each row is checked on its own and every problem is
named by the row's position and field (``[3].latency_ms``, with ``index`` 3), in the one
`details` shape of ingest (reviewhub.errors): nothing of a batch with a bad row is written.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from reviewhub.errors import Problems

ROW_FIELDS = ("request_id", "occurred_at", "input", "context", "output", "metadata",
              "latency_ms", "tokens_in", "tokens_out", "cost", "error", "finish_reason",
              "schema_valid", "request")
LABEL_FIELDS = ("request_id", "source", "rater", "value", "decision")
LABEL_SOURCES = ("judge", "human")
LABEL_DECISIONS = ("", "pass", "fail", "escalate")


class _Bad(Exception):
    pass


def _text(value: Any, *, max_length: int, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _Bad("must be a string")
    if required and not value.strip():
        raise _Bad("may not be empty")
    if len(value) > max_length:
        raise _Bad(f"is longer than {max_length} characters")
    return value


def _number(value: Any, *, minimum: float = 0.0) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Bad("must be a number")
    if value < minimum:
        raise _Bad(f"must be >= {minimum:g}")
    return float(value)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 2**31 - 1:
        raise _Bad("must be a non-negative integer")
    return int(value)


def _when(value: Any, now: dt.datetime) -> dt.datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise _Bad("must be an ISO 8601 date-time")
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise _Bad("must be an ISO 8601 date-time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC)


def traffic_rows_validate(rows: Any, *, now: dt.datetime, max_rows: int,
                          max_chars: int) -> list[dict[str, Any]]:
    """The rows of a traffic batch, typed; raises one `ValidationFailed` naming every bad
    row and field (``details.rows_with_errors`` counts the rows)."""
    problems = Problems(keep=50)
    if not isinstance(rows, list):
        problems.add("$", "the body must be a JSON array of traffic rows")
        problems.raise_if_any("The traffic batch", rows_with_errors=0)
    if not rows:
        problems.add("$", "the batch has no rows")
    if len(rows) > max_rows:
        problems.add("$", f"at most {max_rows} rows per batch (got {len(rows)})")
    problems.raise_if_any("The traffic batch", rows_with_errors=0)
    out: list[dict[str, Any]] = []
    bad_rows = 0
    seen: dict[str, int] = {}
    for i, raw in enumerate(rows):
        before = problems.count

        def bad(field: str, message: str, i: int = i) -> None:
            problems.add(f"[{i}].{field}" if field else f"[{i}]", message, index=i)

        if not isinstance(raw, Mapping):
            bad("", "each row must be a JSON object")
            bad_rows += 1
            continue
        for key in raw:
            if key not in ROW_FIELDS:
                bad(str(key), "unknown field (see docs/monitoring.md for the row's fields)")
        row: dict[str, Any] = {}
        checks: dict[str, Any] = {
            "request_id": lambda v: _text(v, max_length=200, required=True),
            "occurred_at": lambda v: _when(v, now),
            "input": lambda v: _text(v, max_length=max_chars, required=True),
            "context": lambda v: _text(v, max_length=max_chars),
            "output": lambda v: _text(v, max_length=max_chars),
            "latency_ms": _number,
            "tokens_in": _count,
            "tokens_out": _count,
            "cost": _number,
            "error": lambda v: _text(v, max_length=max_chars),
            "finish_reason": lambda v: _text(v, max_length=50),
        }
        for name, check in checks.items():
            try:
                row[name] = check(raw.get(name))
            except _Bad as exc:
                bad(name, str(exc))
        metadata = raw.get("metadata", {})
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, Mapping):
            bad("metadata", "must be an object")
        row["metadata"] = metadata
        valid = raw.get("schema_valid")
        if valid is not None and not isinstance(valid, bool):
            bad("schema_valid", "must be true, false or null")
        row["schema_valid"] = valid
        request = raw.get("request")
        if request is not None and not isinstance(request, Mapping | list):
            bad("request", "must be an object or an array (the full request as sent)")
        row["request"] = request
        rid = row.get("request_id")
        if isinstance(rid, str) and rid:
            if rid in seen:
                bad("request_id", f"repeats row [{seen[rid]}] of this batch")
            else:
                seen[rid] = i
        if problems.count > before:
            bad_rows += 1
        else:
            out.append(row)
    problems.raise_if_any("The traffic batch", message=(
        f"{bad_rows} of {len(rows)} rows are invalid ({problems.count} errors); nothing was "
        f"written. First: {problems.summary()}") if problems else None,
        rows_with_errors=bad_rows)
    return out


def traffic_labels_validate(labels: Any, *, max_rows: int) -> list[dict[str, Any]]:
    """The labels of a batch, typed: ``{"request_id", "source": "judge"|"human", "rater",
    "value": 0..1 or true/false, "decision": ""|"pass"|"fail"|"escalate"}``."""
    problems = Problems(keep=50)
    if not isinstance(labels, list) or not labels:
        problems.add("$", "the body must be a non-empty JSON array of labels")
    elif len(labels) > max_rows:
        problems.add("$", f"at most {max_rows} labels per batch (got {len(labels)})")
    problems.raise_if_any("The label batch", rows_with_errors=0)
    out: list[dict[str, Any]] = []
    bad_rows = 0
    for i, raw in enumerate(labels):
        before = problems.count

        def bad(field: str, message: str, i: int = i) -> None:
            problems.add(f"[{i}].{field}" if field else f"[{i}]", message, index=i)

        if not isinstance(raw, Mapping):
            bad("", "each label must be a JSON object")
            bad_rows += 1
            continue
        for key in raw:
            if key not in LABEL_FIELDS:
                bad(str(key), "unknown field")
        label: dict[str, Any] = {}
        try:
            label["request_id"] = _text(raw.get("request_id"), max_length=200, required=True)
        except _Bad as exc:
            bad("request_id", str(exc))
        source = raw.get("source")
        if source not in LABEL_SOURCES:
            bad("source", "must be 'judge' or 'human'")
        label["source"] = source
        try:
            label["rater"] = _text(raw.get("rater"), max_length=200, required=True)
        except _Bad as exc:
            bad("rater", str(exc))
        value = raw.get("value")
        if isinstance(value, bool):
            value = 1.0 if value else 0.0
        if not isinstance(value, int | float) or not math.isfinite(value) or not (
            0.0 <= value <= 1.0
        ):
            bad("value", "must be true/false or a number in [0, 1] (1 = pass)")
        label["value"] = value
        decision = raw.get("decision", "") or ""
        if decision not in LABEL_DECISIONS:
            bad("decision", "must be 'pass', 'fail', 'escalate' or empty")
        elif decision and source != "judge":
            bad("decision", "only a judge's label carries the policy's decision")
        label["decision"] = decision
        if problems.count > before:
            bad_rows += 1
        else:
            out.append(label)
    problems.raise_if_any("The label batch", rows_with_errors=bad_rows)
    return out
