"""What every peer tool module shares: the `Translation` it returns, the `ExportError` it
raises, and the helpers for reading a JSON export. Kept apart from the package's `__init__`
(which imports every tool module) so that a tool module imports only downwards.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from studies.ingest.reading import STRICT_JSON, json_error


@dataclass
class Translation:
    """A peer export translated: generic rating rows (line = the row's number in this
    translation), where each line came from (`record`: e.g. "task 2, annotation 1"), the
    measurements of outputs keyed by (item_id, candidate), what was dropped (reason: count)
    and notes."""

    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    record: dict[int, str] = field(default_factory=dict)
    measurements: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def add(self, where: str, row: dict[str, Any]) -> None:
        line = len(self.rows) + 1
        self.rows.append((line, row))
        self.record[line] = where

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] += n


class ExportError(ValueError):
    """The export cannot be read as the tool's format; `path` names where (e.g. `tasks[3]`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def text_of(value: Any) -> str:
    """A value as text: strings as they are, anything else as compact JSON (stable keys)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def obj(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty one (exports leave fields out)."""
    return value if isinstance(value, Mapping) else {}


def number_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        num = float(value)
    except (TypeError, ValueError):
        return None
    return num if num == num and num not in (float("inf"), float("-inf")) else None


def load_json(data: bytes, *, what: str) -> Any:
    """A JSON export read by the ingest's strict decoder (`STRICT_JSON`): a duplicate key or a
    number beyond a double is refused, as in every other file ReviewHub reads."""
    try:
        return STRICT_JSON.decode(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ExportError("(file)", f"{what} is not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ExportError(
            "(file)", f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ExportError("(file)", f"{what}: {json_error(exc)}") from None
