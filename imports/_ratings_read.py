"""Reading a ratings file: (line, row) pairs from CSV or JSON Lines; errors name the line.

The parsing is the ingest's (studies/ingest/reading.py): one CSV dialect (`csv_reader`: strict
quoting, the ingest's field-size cap) and one strict JSON decoder (duplicate keys and numbers
beyond a double are refused), with this format's own row shape and messages.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from studies.ingest.reading import STRICT_JSON, csv_error_reason, csv_reader, json_error


class ReadError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


def _detect_format(name: str, head: str) -> str:
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    return "jsonl" if head.lstrip().startswith("{") else "csv"


def ratings_read(
    source: str | Path | IO[str], *, fmt: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line, row) from a CSV (header row: line 1) or JSON Lines file.

    CSV cells are strings ("" = absent). JSON Lines rows may also give ``"stratum": {dim: label}``
    and ``"meta": {key: value}`` objects instead of dotted columns. Unreadable lines raise
    `ReadError` naming the line.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        with path.open(encoding="utf-8", newline="") as opened:
            yield from ratings_read(opened, fmt=fmt or _detect_format(path.name, ""))
        return
    fh: IO[str] = source
    if fmt is None:
        text = fh.read()
        fmt = _detect_format("", text)
        fh = io.StringIO(text)
    if fmt == "csv":
        yield from _csv_rows(fh)
        return
    for i, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        try:
            obj = STRICT_JSON.decode(raw.removeprefix("\ufeff") if i == 1 else raw)
        except json.JSONDecodeError as exc:
            raise ReadError(i, f"row: not valid JSON ({exc.msg})") from exc
        except (ValueError, RecursionError) as exc:
            # The ingest's refusals: a duplicate key, a number beyond a double, nesting too deep.
            raise ReadError(i, f"row: {json_error(exc)}") from exc
        if not isinstance(obj, dict):
            raise ReadError(i, "row: each line must be a JSON object")
        yield i, obj


def _csv_rows(fh: IO[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a CSV file as ``csv.DictReader`` gives them (missing trailing cells None, blank
    lines skipped, the line a row ends on), read with the ingest's dialect (`csv_reader`)."""
    reader = csv_reader(fh)
    try:
        header = next(reader)
    except StopIteration:
        header = []
    except csv.Error as exc:
        raise ReadError(1, f"file: malformed CSV header: {csv_error_reason(exc)}") from exc
    if not header:
        raise ReadError(1, "file: the CSV file is empty (no header row)")
    header[0] = header[0].removeprefix("\ufeff")
    while True:
        previous = reader.line_num
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ReadError(previous + 1, f"row: malformed CSV: {csv_error_reason(exc)}") from exc
        if not cells:
            continue
        line = reader.line_num
        if len(cells) > len(header):
            raise ReadError(line, "row: more cells than header columns")
        row: dict[str, Any] = dict.fromkeys(header)
        row.update(zip(header, cells, strict=False))
        yield line, row
