"""Rows as one JSON parameter for PostgreSQL's `json_to_recordset`, with text it can store.

Every bulk write of recorded answers (judge jobs and verdicts, candidate jobs, generated
outputs) sends its rows this way; an answer is recorded rather than refused, so what
PostgreSQL cannot hold is replaced here rather than failing the statement.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def finite_or_text(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    # JSON has no NaN/Infinity; as strings they still reach a double precision column intact.
    for name in names:
        value = row[name]
        if isinstance(value, float) and not math.isfinite(value):
            row[name] = str(value).replace("inf", "Infinity").replace("nan", "NaN")
    return row


def rows_json(rows: Iterable[Mapping[str, Any]]) -> str:
    """A chunk's rows as ONE JSON parameter for `json_to_recordset`.

    One text parameter instead of a VALUES list of (rows x columns) placeholders: psycopg
    parses and caches the statement once, the rows are encoded by the C JSON encoder and
    decoded by PostgreSQL, and nothing is adapted value by value in Python.
    """
    items = list(rows)
    text = json.dumps(items, ensure_ascii=False, default=_json_default)
    if "\\u0000" in text or _LONE_SURROGATE.search(text):
        # PostgreSQL text and jsonb cannot hold NUL, and a lone UTF-16 surrogate (which
        # json.loads makes of a "\\ud800" in a provider's answer) cannot even be encoded to
        # send; one such answer would fail the statement for the whole chunk. Both become
        # U+FFFD. (The NUL check can also hit an escaped backslash followed by "u0000"; the
        # slow path then changes nothing.)
        text = json.dumps(storable(items), ensure_ascii=False, default=_json_default)
    return text


# NUL and unpaired surrogates: what ingest refuses (studies/ingest/validation.py) and a
# judge's answer, which is recorded rather than refused, has replaced. Every write of job and
# verdict rows goes through `storable`: here on PostgreSQL (only when the chunk's JSON shows
# one), on the ORM path value by value (SQLite cannot encode a lone surrogate either).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(storable(v) for v in value)
    return value
