"""Bulk ingest of items, candidates and outputs from JSON arrays, JSON Lines and CSV.

One code path serves the REST bulk endpoints (`studies/ingest_views.py`) and the `import_*`
management commands, so both accept the same files and report the same errors:

1. `iter_records` streams a binary file and yields one raw record per row with its 1-based line
   number (and, inside a JSON array, its 0-based element index). The whole file is never held
   in memory.
2. `RowValidator` turns a raw record into database-ready values or a list of `RowError`.
3. `ingest_run` makes two passes over the (seekable) file. Pass 1 validates every row and checks
   duplicates and references, keeping only compact keys. Pass 2 re-reads the file and upserts
   in batches inside ONE transaction. Any error in pass 1 means pass 2 never starts, so an
   invalid file writes nothing; re-reading instead of keeping the rows is what lets a 1 GB file
   import in bounded memory.

On PostgreSQL each batch is COPYed into a temporary table and merged by one
``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` statement that also classifies the rows as
created / updated / unchanged (unchanged rows are not touched at all). Other databases use
``bulk_create(update_conflicts=True)`` after comparing the batch with the stored rows.
"""

from __future__ import annotations

import codecs
import csv
import json
import math
import operator
import pickle
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import jsonschema
from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from reviewhub.api.strictjson import decoder_fast
from reviewhub.errors import Conflict, PayloadTooLarge, UnsupportedMediaType, ValidationFailed

from .models import Candidate, Item, Output, Study
from .services import study_strata_recompute

Kind = Literal["items", "candidates", "outputs"]
Format = Literal["json", "ndjson", "csv"]
Strategy = Literal["auto", "copy", "orm"]
KINDS: tuple[Kind, ...] = ("items", "candidates", "outputs")

# The 400 body lists at most this many errors and says how many more there were.
ERROR_LIMIT = 50
DEFAULT_BATCH_SIZE = 5000
_READ_CHUNK = 1 << 16
_PROGRESS_STEP = 1 << 18
# REST bodies are spooled to disk beyond this size so that two passes need no big buffer.
_SPOOL_IN_MEMORY = 8 << 20
_PG_MAX_INT = 2_147_483_647

CONTENT_TYPES: dict[str, Format] = {
    "application/json": "json",
    "application/x-ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/x-jsonlines": "ndjson",
    "text/csv": "csv",
}
EXTENSIONS: dict[str, Format] = {
    ".json": "json",
    ".jsonl": "ndjson",
    ".ndjson": "ndjson",
    ".csv": "csv",
}

# NUL cannot be stored in PostgreSQL text or jsonb; lone surrogates cannot be encoded as UTF-8.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_CSV_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
                         re.IGNORECASE)
_CSV_INTEGER = re.compile(r"[+-]?\d+(?:\.0*)?")
# What a CSV `metadata.<key>` cell must look like to be stored as a JSON number rather than a
# string: JSON's own number grammar, so "007" and "1e" stay strings.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?(?:[eE][+-]?\d+)?")


# --------------------------------------------------------------------------------------------
# Errors and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    """One problem in an ingest file: where (line, JSON array element), which field, why."""

    line: int
    field: str
    reason: str
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "field": self.field, "reason": self.reason}
        if self.index is not None:
            out["index"] = self.index
        return out

    def __str__(self) -> str:
        where = f"line {self.line}"
        if self.index is not None:
            where += f" (element [{self.index}])"
        return f"{where}: {self.field}: {self.reason}"


class IngestRejected(ValidationFailed):
    """The file had invalid rows; nothing was written. Renders as a 400 listing the errors."""

    def __init__(
        self, *, errors: list[RowError], error_count: int, rows_with_errors: int, rows: int
    ) -> None:
        more = error_count - len(errors)
        if rows:
            message = (
                f"{rows_with_errors} of {rows} rows are invalid ({error_count} errors); "
                "nothing was written."
            )
        else:
            message = f"The file was rejected ({error_count} errors); nothing was written."
        super().__init__(
            message,
            details={
                "errors": [e.as_dict() for e in errors],
                "error_count": error_count,
                "more_errors": more,
                "rows_with_errors": rows_with_errors,
            },
        )
        self.errors = errors
        self.error_count = error_count
        self.more_errors = more


@dataclass(frozen=True)
class IngestResult:
    created: int
    updated: int
    unchanged: int

    def as_dict(self) -> dict[str, int]:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged}


class IngestProgress(Protocol):
    """Progress of an import; the CLI implements it with tqdm.

    Phase "validating" advances by bytes of the file read (total None: the caller knows the
    file size), phase "writing" by rows written (total: the number of rows).
    """

    def phase(self, name: str, total: int | None) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def close(self) -> None: ...


class _ErrorCollector:
    def __init__(self, limit: int = ERROR_LIMIT) -> None:
        self.limit = limit
        self.shown: list[RowError] = []
        self.total = 0
        self.rows = 0

    def add_row(self, errors: list[RowError]) -> None:
        if not errors:
            return
        self.rows += 1
        self.total += len(errors)
        room = self.limit - len(self.shown)
        if room > 0:
            self.shown.extend(errors[:room])

    def rejection(self, rows: int) -> IngestRejected:
        shown = sorted(self.shown, key=lambda e: (e.line, e.index or 0))
        return IngestRejected(
            errors=shown, error_count=self.total, rows_with_errors=self.rows, rows=rows
        )


# --------------------------------------------------------------------------------------------
# Content types and REST upload spooling
# --------------------------------------------------------------------------------------------


def format_for_content_type(content_type: str) -> Format:
    """The ingest format of a request's Content-Type, or raise UnsupportedMediaType (415)."""
    mime, _, params = (content_type or "").partition(";")
    fmt = CONTENT_TYPES.get(mime.strip().lower())
    if fmt is None:
        raise UnsupportedMediaType(
            f"Content-Type '{mime.strip() or '(none)'}' is not supported; send "
            "application/json (a JSON array), application/x-ndjson (JSON Lines) or text/csv.",
            details={"supported": sorted(CONTENT_TYPES)},
        )
    for param in params.split(";"):
        key, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if key.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(
                f"charset '{charset}' is not supported; ingest files must be UTF-8."
            )
    return fmt


def format_for_path(path: str | Path) -> Format | None:
    """The ingest format implied by a file name's extension, if any."""
    return EXTENSIONS.get(Path(path).suffix.lower())


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than the limit of {limit:,} bytes "
        "(REVIEWHUB_MAX_UPLOAD_BYTES). Split the file, or import it with "
        "`python manage.py import_outputs`, which has no size limit.",
        details={"limit_bytes": limit},
    )


def upload_spool(
    stream: IO[bytes] | None, *, content_length: int | None, limit: int | None = None
) -> IO[bytes]:
    """Copy a request body into a seekable temporary file, enforcing the upload size limit.

    The declared Content-Length is checked before anything is read, and the byte count is
    checked again while reading, so a body that lies about its length is cut off as well.
    """
    limit = settings.REVIEWHUB_MAX_UPLOAD_BYTES if limit is None else limit
    if content_length is not None and content_length > limit:
        raise _too_large(limit)
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - returned to the caller
        max_size=_SPOOL_IN_MEMORY, mode="w+b"
    )
    total = 0
    if stream is not None:
        while chunk := stream.read(_READ_CHUNK):
            total += len(chunk)
            if total > limit:
                spool.close()
                raise _too_large(limit)
            spool.write(chunk)
    spool.seek(0)
    return spool


# --------------------------------------------------------------------------------------------
# Row schemas
# --------------------------------------------------------------------------------------------

FieldKind = Literal[
    "key", "text", "char", "input", "input_format", "object", "scores", "any_json", "number",
    "count",
]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: FieldKind
    required: bool = False
    max_length: int | None = None


@dataclass(frozen=True)
class KindSpec:
    kind: Kind
    fields: tuple[FieldSpec, ...]
    # Object fields that a CSV may spread over `<field>.<key>` columns.
    prefix_fields: tuple[str, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)


def _max_length(model: type[models.Model], name: str) -> int:
    value = model._meta.get_field(name).max_length  # type: ignore[union-attr]
    assert value is not None
    return int(value)


SPECS: dict[Kind, KindSpec] = {
    "items": KindSpec(
        kind="items",
        fields=(
            FieldSpec("external_id", "key", True, _max_length(Item, "external_id")),
            FieldSpec("input", "input", True),
            FieldSpec("input_format", "input_format"),
            FieldSpec("context", "text"),
            FieldSpec("reference", "text"),
            FieldSpec("metadata", "object"),
        ),
        prefix_fields=("metadata",),
    ),
    "candidates": KindSpec(
        kind="candidates",
        fields=(
            FieldSpec("name", "key", True, _max_length(Candidate, "name")),
            FieldSpec("provider", "char", False, _max_length(Candidate, "provider")),
            FieldSpec("model_id", "char", False, _max_length(Candidate, "model_id")),
            FieldSpec("model_version", "char", False, _max_length(Candidate, "model_version")),
            FieldSpec("model_family", "char", False, _max_length(Candidate, "model_family")),
            FieldSpec("parameters", "object"),
            FieldSpec("notes", "text"),
            FieldSpec("public_scores", "scores"),
        ),
        prefix_fields=("parameters", "public_scores"),
    ),
    "outputs": KindSpec(
        kind="outputs",
        fields=(
            FieldSpec("item", "key", True, _max_length(Item, "external_id")),
            FieldSpec("candidate", "key", True, _max_length(Candidate, "name")),
            FieldSpec("text", "text"),
            FieldSpec("parsed_json", "any_json"),
            FieldSpec("latency_ms", "number"),
            FieldSpec("tokens_in", "count"),
            FieldSpec("tokens_out", "count"),
            FieldSpec("cost", "number"),
            FieldSpec("error", "text"),
            FieldSpec("finish_reason", "char", False, _max_length(Output, "finish_reason")),
            FieldSpec("metadata", "object"),
        ),
        prefix_fields=("metadata",),
    ),
}


# json.dumps(...) with options builds a new encoder per call; these are built once.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The stored text of a JSON item input: sorted keys, no insignificant whitespace."""
    return _CANONICAL.encode(value)


def _compact_json(value: Any) -> str:
    return _COMPACT.encode(value)


# --------------------------------------------------------------------------------------------
# Streaming readers
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RawRecord:
    line: int
    index: int | None
    # JSON formats: the decoded object. CSV: column name -> cell text.
    data: dict[str, Any] | None
    # Set when the row could not even be parsed; `data` is then None.
    errors: list[RowError] | None = None
    # The JSON text had \u escapes or NaN/Infinity: nested values need the slow checks.
    suspicious: bool = False
    # CSV only: {"metadata": {"lang": "en"}} from `metadata.lang` columns.
    prefixed: dict[str, dict[str, str]] | None = None
    # Characters of the row's source text: no value in it can be longer.
    size: int = 0
    # False for file-level problems (empty file, bad header) that are not a row.
    is_row: bool = True


def _suspicious(text: str) -> bool:
    return "\\u" in text or "NaN" in text or "Infinity" in text


def _json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON: {exc.msg} at column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "not valid JSON: nested too deeply"
    # The strict decoder's refusals (a non-finite number such as 1e400, a duplicate key) and
    # int()'s digit limit: the message says what is wrong.
    return f"not accepted: {exc}"


# Every JSON document in an ingest file refuses duplicate keys and numbers that overflow a
# double (1e400, which json.loads turns into inf: jsonb refuses it, and no "Infinity" in the
# text would flag the row for the deep check) as row errors naming the key or the number. The
# NaN / Infinity literals, NUL and lone surrogates are checked per field (RowValidator), so
# that the error names the field.
_STRICT_JSON = decoder_fast(allow_nan_literals=True)
# Only to find where a refused array element ends, so that the next one can be read.
_LENIENT_JSON = json.JSONDecoder()


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _file_error(reason: str, field: str = "(file)", line: int = 1) -> RawRecord:
    return RawRecord(line=line, index=None, data=None, errors=[RowError(line, field, reason)],
                     is_row=False)


def _bad_utf8(exc: UnicodeDecodeError, line: int) -> RowError:
    return RowError(
        line, "(row)",
        f"invalid UTF-8 (byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1} of the "
        "line); ingest files must be UTF-8 encoded",
    )


class _ByteCounter:
    """Batches progress callbacks: one call per ~256 KB rather than per line."""

    def __init__(self, on_bytes: Callable[[int], None] | None) -> None:
        self.on_bytes = on_bytes
        self.pending = 0

    def add(self, n: int) -> None:
        if self.on_bytes is None:
            return
        self.pending += n
        if self.pending >= _PROGRESS_STEP:
            self.on_bytes(self.pending)
            self.pending = 0

    def flush(self) -> None:
        if self.on_bytes is not None and self.pending:
            self.on_bytes(self.pending)
            self.pending = 0


def _iter_ndjson(stream: IO[bytes], counter: _ByteCounter) -> Iterator[RawRecord]:
    # The hot loop of a big import: progress is counted inline and records are built with
    # positional arguments, because per-line overhead here is most of pass 1's cost.
    on_bytes, pending = counter.on_bytes, 0
    loads = _STRICT_JSON.decode
    line_no = 0
    seen = False
    for raw in stream:
        line_no += 1
        if on_bytes is not None:
            pending += len(raw)
            if pending >= _PROGRESS_STEP:
                on_bytes(pending)
                pending = 0
        if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        if raw.isspace() or not raw:
            continue
        seen = True
        if b"\x00" in raw:
            yield RawRecord(line_no, None, None, [RowError(
                line_no, "(row)",
                "contains a NUL byte (0x00), which neither JSON nor PostgreSQL text can hold",
            )])
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRecord(line_no, None, None, [_bad_utf8(exc, line_no)])
            continue
        try:
            obj = loads(text)
        except (ValueError, RecursionError) as exc:
            yield RawRecord(line_no, None, None, [RowError(line_no, "(row)", _json_error(exc))])
            continue
        if type(obj) is not dict:
            yield RawRecord(line_no, None, None, [RowError(
                line_no, "(row)", f"each line must be a JSON object, got {_type_name(obj)}"
            )])
            continue
        yield RawRecord(line_no, None, obj, None, _suspicious(text), None, len(text))
    if on_bytes is not None and pending:
        on_bytes(pending)
    if not seen:
        yield _file_error("the file is empty: no rows to import")


class _JsonArrayReader:
    """Streams the elements of a top-level JSON array without loading the whole document.

    `json.JSONDecoder.raw_decode` parses one element from a text buffer; when it fails and the
    file has more data, the buffer is grown (doubling the read size, so a huge element costs
    amortised linear time) and the element is parsed again. Structural errors are fatal: after
    a broken element there is no reliable way to find the next one.
    """

    def __init__(self, stream: IO[bytes], counter: _ByteCounter) -> None:
        self.stream = stream
        self.counter = counter
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.decoder_json = _STRICT_JSON
        self.buf = ""
        self.pos = 0
        self.line = 1  # line of buf[pos]
        self.eof = False
        self.decoded_newlines = 0
        self.first_chunk = True

    def _fill(self, want: int = _READ_CHUNK) -> bool:
        """Append at least one more chunk to the buffer; False at end of file."""
        if self.eof:
            return False
        # Keep reading until `want` bytes (or EOF): a stream that returns short reads must not
        # make every refill re-parse a big element for a few new bytes (quadratic time).
        want = max(want, _READ_CHUNK)
        parts: list[bytes] = []
        got = 0
        while got < want:
            part = self.stream.read(want - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        raw = b"".join(parts)
        self.counter.add(len(raw))
        if self.first_chunk:
            self.first_chunk = False
            if raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
        final = not raw
        try:
            text = self.decoder.decode(raw, final=final)
        except UnicodeDecodeError as exc:
            line = 1 + self.decoded_newlines + raw[: exc.start].count(b"\n")
            raise _FatalRecord(_file_error(
                f"invalid UTF-8 (byte 0x{exc.object[exc.start]:02x}); ingest files must be "
                "UTF-8 encoded", field="(row)", line=line,
            )) from None
        self.decoded_newlines += text.count("\n")
        if self.pos > _READ_CHUNK * 4:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += text
        if final:
            self.eof = True
        return bool(text) or not final

    def _skip_ws(self) -> str:
        """Skip whitespace (counting lines); return the next character or "" at EOF."""
        while True:
            buf, pos, n = self.buf, self.pos, len(self.buf)
            while pos < n and buf[pos] in " \t\r\n":
                if buf[pos] == "\n":
                    self.line += 1
                pos += 1
            self.pos = pos
            if pos < n:
                return buf[pos]
            if not self._fill():
                return ""

    def _advance_to(self, end: int) -> None:
        self.line += self.buf.count("\n", self.pos, end)
        self.pos = end

    def __iter__(self) -> Iterator[RawRecord]:
        try:
            yield from self._elements()
        except _FatalRecord as fatal:
            yield fatal.record
        self.counter.flush()

    def _elements(self) -> Iterator[RawRecord]:
        first = self._skip_ws()
        if first == "":
            yield _file_error("the file is empty: no rows to import")
            return
        if first != "[":
            hint = " (JSON Lines files go as application/x-ndjson)" if first == "{" else ""
            yield _file_error(f"a JSON file must hold one array of row objects{hint}",
                              line=self.line)
            return
        self.pos += 1
        index = 0
        if self._skip_ws() == "]":
            self.pos += 1
            yield _file_error("the JSON array is empty: no rows to import")
            self._expect_end()
            return
        while True:
            line = self.line
            obj, end, refused = self._decode_element(index)
            buf, start = self.buf, self.pos
            suspicious = (buf.find("\\u", start, end) != -1 or buf.find("NaN", start, end) != -1
                          or buf.find("Infinity", start, end) != -1)
            self._advance_to(end)
            if refused is not None:
                yield RawRecord(line, index, None, [RowError(line, "(row)", refused, index)])
            elif isinstance(obj, dict):
                yield RawRecord(line, index, obj, None, suspicious, size=end - start)
            else:
                yield RawRecord(line, index, None, [RowError(
                    line, "(row)", f"each array element must be a JSON object, got "
                    f"{_type_name(obj)}", index,
                )])
            index += 1
            sep = self._skip_ws()
            if sep == ",":
                self.pos += 1
                if self._skip_ws() == "]":
                    raise _FatalRecord(RawRecord(self.line, index, None, [RowError(
                        self.line, "(row)", "not valid JSON: trailing comma before ']'", index
                    )]))
                continue
            if sep == "]":
                self.pos += 1
                self._expect_end()
                return
            reason = "the array is not closed with ']'" if sep == "" else (
                f"not valid JSON: expected ',' or ']' after element [{index - 1}], got {sep!r}"
            )
            raise _FatalRecord(RawRecord(self.line, index, None, [
                RowError(self.line, "(row)", reason, index)
            ]))

    def _decode_element(self, index: int) -> tuple[Any, int, str | None]:
        """(element, end, None), or (None, end, reason) for a well-formed element that the
        strict decoder refuses (a row error: the next element can still be read)."""
        want = _READ_CHUNK
        while True:
            try:
                obj, end = self.decoder_json.raw_decode(self.buf, self.pos)
            except (ValueError, RecursionError) as exc:
                if type(exc) is ValueError:
                    try:
                        _, end = _LENIENT_JSON.raw_decode(self.buf, self.pos)
                    except (ValueError, RecursionError):
                        pass  # cut short by the buffer: read more, as below
                    else:
                        if end < len(self.buf) or self.eof:
                            return None, end, _json_error(exc)
                if not self.eof and self._fill(want):
                    want *= 2
                    continue
                line = self.line
                if isinstance(exc, json.JSONDecodeError):
                    line += self.buf.count("\n", self.pos, exc.pos)
                raise _FatalRecord(RawRecord(line, index, None, [
                    RowError(line, "(row)", _json_error(exc), index)
                ])) from None
            # A number or literal that ends exactly at the buffer's end may be cut short.
            if end == len(self.buf) and not self.eof and self._fill(want):
                continue
            return obj, end, None

    def _expect_end(self) -> None:
        if self._skip_ws() != "":
            raise _FatalRecord(_file_error(
                "unexpected data after the closing ']' of the array", field="(file)",
                line=self.line,
            ))


class _FatalRecord(Exception):
    def __init__(self, record: RawRecord) -> None:
        self.record = record


@dataclass(frozen=True)
class _CsvLayout:
    # Per column: ("field", name, "") or ("prefix", object field, key).
    columns: tuple[tuple[str, str, str], ...]


def _csv_layout(header: list[str], spec: KindSpec) -> tuple[_CsvLayout, list[RowError]]:
    errors: list[RowError] = []
    columns: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    names = spec.names
    for position, raw_name in enumerate(header, start=1):
        name = raw_name.strip()
        if name in seen:
            errors.append(RowError(1, name or f"column {position}", "duplicate column name"))
            columns.append(("skip", "", ""))
            continue
        seen.add(name)
        prefix, dot, key = name.partition(".")
        if name in names:
            columns.append(("field", name, ""))
        elif dot and prefix in spec.prefix_fields:
            if not key:
                errors.append(RowError(1, name, f"column name needs a key after '{prefix}.'"))
            columns.append(("prefix", prefix, key))
        elif not name:
            errors.append(RowError(1, f"column {position}", "empty column name"))
            columns.append(("skip", "", ""))
        else:
            allowed = ", ".join(f.name for f in spec.fields)
            prefixes = " or ".join(f"'{p}.<key>'" for p in spec.prefix_fields)
            errors.append(RowError(
                1, name, f"unknown column (allowed: {allowed}; put extra data in {prefixes} "
                "columns)",
            ))
            columns.append(("skip", "", ""))
    for required in spec.required:
        if required not in seen:
            errors.append(RowError(1, required, "required column is missing from the header"))
    return _CsvLayout(tuple(columns)), errors


def _iter_csv(stream: IO[bytes], spec: KindSpec, counter: _ByteCounter) -> Iterator[RawRecord]:
    decode_errors: list[RowError] = []

    def lines() -> Iterator[str]:
        for line_no, raw in enumerate(stream, start=1):
            counter.add(len(raw))
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                decode_errors.append(_bad_utf8(exc, line_no))
                # Keep parsing with replacement characters so later rows are still checked.
                yield raw.decode("utf-8", "replace")

    # A field may legitimately be as long as REVIEWHUB_MAX_FIELD_CHARS (and is then rejected
    # by name); the csv module's own cap stays finite so an unclosed quote cannot swallow a
    # whole 1 GB file into memory.
    csv.field_size_limit(max(16 << 20, 2 * settings.REVIEWHUB_MAX_FIELD_CHARS + 1))
    reader = csv.reader(lines(), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        yield _file_error("the file is empty: no header line and no rows")
        return
    except csv.Error as exc:
        yield _file_error(f"malformed CSV header: {exc}")
        return
    if decode_errors:
        yield RawRecord(1, None, None, list(decode_errors), is_row=False)
        return
    if not any(cell.strip() for cell in header):
        yield _file_error("the first line must be a header naming the columns")
        return
    layout, header_errors = _csv_layout(header, spec)
    if header_errors:
        yield RawRecord(1, None, None, header_errors, is_row=False)
        return
    width = len(layout.columns)
    previous = reader.line_num
    rows = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            line = previous + 1
            reason = str(exc)
            if "field larger than field limit" in reason:
                reason = (f"a field is longer than {csv.field_size_limit():,} characters "
                          "(an unclosed quote?)")
            yield RawRecord(line, None, None, [RowError(line, "(row)", f"malformed CSV: {reason}")])
            return
        start, previous = previous + 1, reader.line_num
        if decode_errors:
            yield RawRecord(start, None, None, list(decode_errors))
            decode_errors.clear()
            continue
        if not cells:
            continue  # a blank line
        rows += 1
        if len(cells) != width:
            yield RawRecord(start, None, None, [RowError(
                start, "(row)", f"has {len(cells)} cells but the header has {width} columns"
            )])
            continue
        data: dict[str, Any] = {}
        prefixed: dict[str, dict[str, str]] | None = None
        size = 0
        for (what, name, key), cell in zip(layout.columns, cells, strict=True):
            size += len(cell)
            if what == "field":
                data[name] = cell
            elif what == "prefix":
                if prefixed is None:
                    prefixed = {}
                prefixed.setdefault(name, {})[key] = cell
        yield RawRecord(start, None, data, None, False, prefixed, size=size)
    counter.flush()
    if rows == 0:
        yield _file_error("the file has a header line but no rows")


def iter_records(
    stream: IO[bytes],
    fmt: Format,
    spec: KindSpec,
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[RawRecord]:
    """Yield the rows of an ingest file one by one, with line numbers; never loads it whole."""
    counter = _ByteCounter(on_bytes)
    if fmt == "ndjson":
        return _iter_ndjson(stream, counter)
    if fmt == "json":
        return iter(_JsonArrayReader(stream, counter))
    if fmt == "csv":
        return _iter_csv(stream, spec, counter)
    raise ValueError(f"unknown ingest format {fmt!r}")


# --------------------------------------------------------------------------------------------
# Row validation
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _bad_char_reason(match: re.Match[str], where: str = "") -> str:
    char, pos = match.group(), match.start() + 1
    at = f"{where} " if where else ""
    if char == "\x00":
        return (f"{at}contains a NUL character (U+0000) at position {pos}; PostgreSQL text "
                "cannot store it, so remove it before importing")
    return (f"{at}contains an unpaired surrogate (U+{ord(char):04X}) at position {pos}, which is "
            "not valid Unicode")


def _json_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _deep_check(value: Any, top: str = "") -> None:
    """Reject NUL / lone surrogates anywhere in a JSON value, and NaN / Infinity numbers."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            match = _BAD_CHARS.search(node)
            if match:
                where = f"at {_json_path(path)}" if path else top
                raise _Invalid(_bad_char_reason(match, where))
        elif isinstance(node, float):
            if not math.isfinite(node):
                where = f"at {_json_path(path)}: " if path else ""
                name = "NaN" if math.isnan(node) else ("Infinity" if node > 0 else "-Infinity")
                raise _Invalid(f"{where}NaN and Infinity are not valid JSON numbers (PostgreSQL "
                               f"jsonb rejects them): got {name}")
        elif isinstance(node, dict):
            for key, child in node.items():
                match = _BAD_CHARS.search(key)
                if match:
                    where = f"key {key!r}" + (f" at {_json_path(path)}" if path else "")
                    raise _Invalid(_bad_char_reason(match, where))
                stack.append((child, (*path, key)))
        elif isinstance(node, list):
            stack.extend((child, (*path, i)) for i, child in enumerate(node))


Converter = Callable[[Any], Any]
# Field kinds whose values can hold strings (and so NUL or lone surrogates) in a JSON row.
_DEEP_KINDS = frozenset({"key", "text", "char", "input", "object", "scores", "any_json"})
_JSON_KINDS = frozenset({"object", "scores", "any_json"})


class RowValidator:
    """Checks one raw record against the kind's schema and returns database-ready values.

    The converters are chosen once per file format, so the per-row loop is a dictionary
    lookup and one call per field; a JSON row's strings are searched for NUL and surrogates
    only when its text had a `\\u` escape (the only way JSON can carry them).
    """

    def __init__(self, *, study: Study, kind: Kind, fmt: Format, json_as_text: bool = False
                 ) -> None:
        self.study = study
        self.kind = kind
        # COPY wants JSON columns as text; the ORM wants Python objects.
        self.json_as_text = json_as_text
        self.spec = SPECS[kind]
        self.is_csv = fmt == "csv"
        self.max_chars: int = settings.REVIEWHUB_MAX_FIELD_CHARS
        self.names = self.spec.names
        self.allowed = ", ".join(f.name for f in self.spec.fields)
        self.converters: dict[str, Converter] = {
            f.name: self._converter(f) for f in self.spec.fields
        }
        self.required = self.spec.required
        self.json_fields = [f.name for f in self.spec.fields if f.kind in _JSON_KINDS]
        # Every optional field starts at its model default, so a row tuple is one itemgetter.
        self.defaults: dict[str, Any] = {
            f.name: ({} if f.kind in ("object", "scores") else None if f.kind in (
                "any_json", "number", "count", "input_format") else "")
            for f in self.spec.fields if not f.required
        }
        fields = _ROW_FIELDS[kind]
        self.row_getter = operator.itemgetter(*(fields[2:] if kind == "outputs" else fields))
        self.deep_fields = [f.name for f in self.spec.fields if f.kind in _DEEP_KINDS]
        self.schema_validator: Any = None
        if kind == "outputs" and study.output_schema is not None:
            schema = study.output_schema
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ValidationFailed(
                    f"The study's output_schema is not a valid JSON Schema ({exc.message}); fix "
                    "it before importing outputs.", code="invalid_output_schema",
                ) from None
            self.schema_validator = cls(schema)

    # -- converters (raise _Invalid(reason)) --------------------------------------------------

    def _converter(self, spec: FieldSpec) -> Converter:
        kind, csv_mode = spec.kind, self.is_csv
        if kind == "key":
            return self._key_converter(spec.max_length)
        if kind in ("text", "char"):
            return self._text_converter(spec.max_length)
        if kind == "input":
            return lambda value: value  # resolved together with input_format
        if kind == "input_format":
            return self._input_format
        if kind == "object":
            return self._object_cell if csv_mode else self._object
        if kind == "scores":
            return self._scores
        if kind == "any_json":
            return self._any_json_cell if csv_mode else (lambda value: value)
        if kind == "number":
            return self._number_cell if csv_mode else self._number
        if kind == "count":
            return self._count
        raise ValueError(kind)

    def _text_converter(self, max_length: int | None) -> Converter:
        max_chars, csv_mode = self.max_chars, self.is_csv

        limit = min(max_chars, max_length if max_length is not None else max_chars)

        def convert(value: Any) -> str:
            if type(value) is str and len(value) <= limit and not (csv_mode and "\x00" in value):
                return value  # the common case, checked in one line
            if type(value) is not str:
                raise _Invalid(f"must be a string, got {_type_name(value)}")
            size = len(value)
            if max_length is not None and size > max_length:
                raise _Invalid(f"is {size:,} characters long; at most {max_length} allowed")
            if size > max_chars:
                raise _Invalid(f"is {size:,} characters long; the limit is {max_chars:,} "
                               "(REVIEWHUB_MAX_FIELD_CHARS)")
            # CSV cells are decoded UTF-8, so a NUL is possible but a surrogate is not; JSON
            # strings get the full check via _deep_check when their row had escapes.
            if csv_mode and "\x00" in value:
                match = _BAD_CHARS.search(value)
                assert match is not None
                raise _Invalid(_bad_char_reason(match))
            return value

        return convert

    def _key_converter(self, max_length: int | None) -> Converter:
        text = self._text_converter(max_length)
        limit = max_length if max_length is not None else self.max_chars

        def convert(value: Any) -> str:
            if type(value) is str and 0 < len(value) <= limit and "\x00" not in value:
                return value
            if type(value) is int:
                return str(value)
            if value == "":
                raise _Invalid("must not be empty")
            return text(value)

        return convert

    @staticmethod
    def _input_format(value: Any) -> str | None:
        if value not in ("text", "json", ""):
            raise _Invalid(f"must be 'text' or 'json', got {value!r}")
        return value or None

    @staticmethod
    def _parse_cell_json(cell: str) -> Any:
        try:
            value = _STRICT_JSON.decode(cell)
        except (ValueError, RecursionError) as exc:
            raise _Invalid(f"the cell is {_json_error(exc)}") from None
        if _suspicious(cell):
            _deep_check(value)
        return value

    @staticmethod
    def _object(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Invalid(f"must be a JSON object, got {_type_name(value)}")
        return value

    def _object_cell(self, cell: str) -> dict[str, Any]:
        if not cell.strip():
            return {}
        return self._object(self._parse_cell_json(cell))

    def _scores(self, value: Any) -> dict[str, float]:
        obj = self._object_cell(value) if self.is_csv else self._object(value)
        out: dict[str, float] = {}
        for name, score in obj.items():
            if type(score) not in (int, float):
                raise _Invalid(f"score {name!r} must be a number, got {_type_name(score)}")
            if not math.isfinite(score):
                raise _Invalid(f"score {name!r} must be a finite number")
            if not name.strip():
                raise _Invalid("benchmark names must not be empty")
            out[name] = float(score)
        return out

    def _any_json_cell(self, cell: str) -> Any:
        return self._parse_cell_json(cell) if cell.strip() else None

    @staticmethod
    def _finite(number: float, allow_negative: bool = False) -> float:
        if not math.isfinite(number):
            raise _Invalid(f"must be a finite number, got {number}")
        if number < 0 and not allow_negative:
            raise _Invalid(f"must not be negative, got {number:g}")
        return number

    def _number_cell(self, cell: str, *, allow_negative: bool = False) -> float | None:
        text = cell.strip()
        if not text:
            return None
        if not _CSV_NUMBER.fullmatch(text):
            raise _Invalid(f"must be a number, got {cell!r}")
        return self._finite(float(text), allow_negative)

    def _number(self, value: Any) -> float:
        kind = type(value)
        if kind is float and 0.0 <= value < math.inf:  # NaN fails the comparison
            return value
        if kind is float:
            return self._finite(value)
        if kind is int:
            try:
                return self._finite(float(value))
            except OverflowError:
                raise _Invalid("is too large") from None
        raise _Invalid(f"must be a number, got {_type_name(value)}")

    def _count(self, value: Any) -> int | None:
        if type(value) is int and 0 <= value <= _PG_MAX_INT:
            return value
        if self.is_csv:
            text = value.strip()
            if not text:
                return None
            if not _CSV_NUMBER.fullmatch(text):
                raise _Invalid(f"must be a whole number, got {value!r}")
            value = float(text) if not text.lstrip("+-").isdigit() else int(text)
        kind = type(value)
        if kind is float:
            self._finite(value)
            if not value.is_integer():
                raise _Invalid(f"must be a whole number, got {value}")
            value = int(value)
        elif kind is not int:
            raise _Invalid(f"must be a whole number, got {_type_name(value)}")
        if value < 0:
            raise _Invalid(f"must not be negative, got {value}")
        if value > _PG_MAX_INT:
            raise _Invalid(f"must be at most {_PG_MAX_INT:,}, got {value:,}")
        return int(value)

    @staticmethod
    def _csv_scalar(cell: str) -> Any:
        if cell in ("true", "false"):
            return cell == "true"
        if _JSON_NUMBER.fullmatch(cell):
            number = json.loads(cell)
            return number if not isinstance(number, float) or math.isfinite(number) else cell
        return cell

    # -- the row -----------------------------------------------------------------------------

    def validate(self, rec: RawRecord) -> tuple[dict[str, Any] | None, list[RowError]]:
        """Return (values, []) for a valid row or (None, errors)."""
        data = rec.data
        assert data is not None
        errors: list[RowError] = []
        line, index = rec.line, rec.index
        skip: set[str] = set()
        if rec.suspicious:
            for name in self.deep_fields:
                if name in data:
                    try:
                        _deep_check(data[name])
                    except _Invalid as exc:
                        errors.append(RowError(line, name, exc.reason, index))
                        skip.add(name)
        values: dict[str, Any] = self.defaults.copy()
        converters = self.converters
        # Only the keys the row has: absent optional fields keep their defaults.
        for name, raw in data.items():
            convert = converters.get(name)
            if convert is None:
                errors.append(RowError(line, str(name), f"unknown field (allowed: "
                                       f"{self.allowed})", index))
                continue
            if raw is None or (skip and name in skip):
                continue
            try:
                values[name] = convert(raw)
            except _Invalid as exc:
                errors.append(RowError(line, name, exc.reason, index))
        for name in self.required:
            if data.get(name) is None:
                reason = ("required field is missing" if name not in data
                          else "required field must not be null")
                errors.append(RowError(line, name, reason, index))
        if rec.size > self.max_chars:
            # Only a row longer than the limit can hold a JSON value longer than the limit, so
            # ordinary rows skip the serialisation.
            for name in self.json_fields:
                if values.get(name):
                    size = len(_compact_json(values[name]))
                    if size > self.max_chars:
                        errors.append(RowError(line, name, f"is {size:,} characters long as "
                                               f"JSON; the limit is {self.max_chars:,} "
                                               "(REVIEWHUB_MAX_FIELD_CHARS)", index))
        if rec.prefixed:
            self._merge_prefixed(rec, values, errors)
        if "input" in values:
            try:
                values["input"], values["input_format"] = self._input(
                    values["input"], values.get("input_format")
                )
            except _Invalid as exc:
                errors.append(RowError(line, "input", exc.reason, index))
        if errors:
            return None, errors
        return values, errors

    def _merge_prefixed(
        self, rec: RawRecord, values: dict[str, Any], errors: list[RowError]
    ) -> None:
        assert rec.prefixed is not None
        text = self._text_converter(None)
        for field_name, cells in rec.prefixed.items():
            target = dict(values.get(field_name) or {})
            for key, cell in cells.items():
                column = f"{field_name}.{key}"
                if cell == "":
                    continue  # an empty cell means "no value": the key stays absent
                if key in target:
                    errors.append(RowError(rec.line, column, f"key {key!r} is also given in the "
                                           f"'{field_name}' column", rec.index))
                    continue
                try:
                    if field_name == "public_scores":
                        target[key] = self._number_cell(cell, allow_negative=True)
                    else:
                        target[key] = self._csv_scalar(text(cell))
                except _Invalid as exc:
                    errors.append(RowError(rec.line, column, exc.reason, rec.index))
            values[field_name] = target

    def _input(self, raw: Any, declared: str | None) -> tuple[str, str]:
        text = self._text_converter(None)
        if type(raw) is str:
            if declared != "json":
                return text(raw), Item.InputFormat.TEXT
            try:
                parsed = _STRICT_JSON.decode(raw)
            except (ValueError, RecursionError) as exc:
                raise _Invalid(f"input_format is 'json' but input is {_json_error(exc)}"
                               ) from None
            if not isinstance(parsed, dict | list):
                raise _Invalid(f"a JSON input must be an object or array, got "
                               f"{_type_name(parsed)}")
            _deep_check(parsed)
            return text(canonical_json(parsed)), Item.InputFormat.JSON
        if isinstance(raw, dict | list):
            if declared == "text":
                raise _Invalid(f"input_format is 'text' but input is a JSON {_type_name(raw)}")
            return text(canonical_json(raw)), Item.InputFormat.JSON
        raise _Invalid(f"must be a string or a JSON object/array, got {_type_name(raw)}")

    def schema_valid(self, values: dict[str, Any]) -> bool | None:
        """Whether the output conforms to the study's output_schema (None: no schema)."""
        if self.schema_validator is None:
            return None
        instance = values.get("parsed_json")
        if instance is None:
            try:
                instance = json.loads(values.get("text") or "")
            except (ValueError, RecursionError):
                return False
        return bool(self.schema_validator.is_valid(instance))

    def db_row(self, values: dict[str, Any], refs: tuple[int, int] | None = None
               ) -> tuple[Any, ...]:
        """The row tuple in the upserter's column order (`_ROW_FIELDS[kind]`)."""
        if self.kind == "outputs":
            assert refs is not None
            values["schema_valid"] = self.schema_valid(values)
        if self.json_as_text:
            for name in self.json_fields:
                value = values[name]
                if value is not None:
                    values[name] = "{}" if value == {} else _compact_json(value)
        row = self.row_getter(values)
        return (*refs, *row) if refs is not None else row


_ROW_FIELDS: dict[Kind, tuple[str, ...]] = {
    "items": ("external_id", "input", "input_format", "context", "reference", "metadata"),
    "candidates": ("name", "provider", "model_id", "model_version", "model_family",
                   "parameters", "notes", "public_scores"),
    # Outputs: the two resolved ids first, then the values in the validator's dict.
    "outputs": ("candidate_id", "item_id", "schema_valid", "text", "parsed_json", "latency_ms",
                "tokens_in", "tokens_out", "cost", "error", "finish_reason", "metadata"),
}
_UNIQUE: dict[Kind, tuple[str, ...]] = {
    "items": ("study", "external_id"),
    "candidates": ("study", "name"),
    "outputs": ("candidate", "item"),
}
_MODELS: dict[Kind, type[models.Model]] = {"items": Item, "candidates": Candidate,
                                           "outputs": Output}


# --------------------------------------------------------------------------------------------
# Pass 1 bookkeeping: duplicates and references, with compact keys only
# --------------------------------------------------------------------------------------------


class _KeyedTracker:
    """Items and candidates: one key per row, unique within the file."""

    def __init__(self, validator: RowValidator, key_field: str) -> None:
        self.validator = validator
        self.key_field = key_field
        # key -> where it first appeared: the line, or the element index in a JSON array.
        self.first: dict[str, int] = {}

    def add(self, rec: RawRecord, values: dict[str, Any], stage: bool
            ) -> tuple[list[list[RowError]], list[tuple[Any, ...]]]:
        key = values[self.key_field]
        # Lines (JSON Lines, CSV) and element indexes (JSON arrays) are unique per record.
        where = rec.line if rec.index is None else rec.index
        first = self.first.setdefault(key, where)
        if first != where:
            at = f"line {first}" if rec.index is None else f"element [{first}]"
            return [[RowError(rec.line, self.key_field, f"duplicate {self.key_field} {key!r}: "
                              f"already at {at} of this file", rec.index)]], []
        return [], [self.validator.db_row(values)] if stage else []

    def finish(self, stage: bool) -> tuple[list[list[RowError]], list[tuple[Any, ...]]]:
        return [], []


class _OutputTracker:
    """Outputs: resolve item external ids and candidate names to ids (one query per batch of
    new external ids) and check that each (item, candidate) pair appears once. Holds at most
    one batch of rows; beyond that only ids."""

    def __init__(self, *, validator: RowValidator, study: Study, batch_size: int) -> None:
        self.validator = validator
        self.study = study
        self.batch_size = batch_size
        self.candidates: dict[str, int] = dict(
            Candidate.objects.filter(study=study).values_list("name", "id")
        )
        self.candidate_index = {pk: i for i, pk in enumerate(self.candidates.values())}
        self.items: dict[str, int] = {}
        self.missing_items: set[str] = set()
        self.pairs: set[int] = set()
        self.pending: list[tuple[RawRecord, dict[str, Any]]] = []

    def add(self, rec: RawRecord, values: dict[str, Any], stage: bool
            ) -> tuple[list[list[RowError]], list[tuple[Any, ...]]]:
        rec.data = None  # the decoded row is no longer needed; `values` has what counts
        self.pending.append((rec, values))
        if len(self.pending) >= self.batch_size:
            return self._resolve(stage)
        return [], []

    def finish(self, stage: bool) -> tuple[list[list[RowError]], list[tuple[Any, ...]]]:
        return self._resolve(stage)

    def _resolve(self, stage: bool) -> tuple[list[list[RowError]], list[tuple[Any, ...]]]:
        pending, self.pending = self.pending, []
        items = self.items
        unknown = {v["item"] for _, v in pending
                   if v["item"] not in items and v["item"] not in self.missing_items}
        if unknown:
            found = dict(Item.objects.filter(study=self.study, external_id__in=unknown)
                         .values_list("external_id", "id"))
            items.update(found)
            self.missing_items.update(unknown.difference(found))
        errors_out: list[list[RowError]] = []
        rows: list[tuple[Any, ...]] = []
        width = max(len(self.candidates), 1)
        slug = self.study.slug
        for rec, values in pending:
            ext, name = values["item"], values["candidate"]
            errors: list[RowError] = []
            item_id = items.get(ext)
            candidate_id = self.candidates.get(name)
            if item_id is None:
                errors.append(RowError(rec.line, "item", f"unknown item {ext!r}: no item with "
                                       f"this external_id in study '{slug}' (import the items "
                                       "first)", rec.index))
            if candidate_id is None:
                errors.append(RowError(rec.line, "candidate", f"unknown candidate {name!r}: no "
                                       f"candidate with this name in study '{slug}' (import "
                                       "the candidates first)", rec.index))
            if item_id is not None and candidate_id is not None:
                pair = item_id * width + self.candidate_index[candidate_id]
                if pair in self.pairs:
                    errors.append(RowError(rec.line, "(item, candidate)", f"duplicate output "
                                           f"for item {ext!r} and candidate {name!r}: the pair "
                                           "already appears earlier in this file", rec.index))
                else:
                    self.pairs.add(pair)
                    if stage and not errors_out:
                        rows.append(self.validator.db_row(values, (candidate_id, item_id)))
            if errors:
                errors_out.append(errors)
        return errors_out, rows


# --------------------------------------------------------------------------------------------
# The spool between the passes, and the batched upsert
# --------------------------------------------------------------------------------------------


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


class _Spool:
    """Validated rows waiting for pass 2, pickled in blocks of one batch, in a temporary file:
    they live on disk, not in memory, and pass 2 neither re-reads nor re-validates the input."""

    def __init__(self, *, batch_size: int) -> None:
        self.batch_size = batch_size
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.blocks: list[tuple[int, int, int]] = []  # (offset, length, rows)
        self.pending: list[tuple[Any, ...]] = []
        self.rows = 0

    def extend(self, rows: list[tuple[Any, ...]]) -> None:
        self.pending.extend(rows)
        while len(self.pending) >= self.batch_size:
            block, self.pending = (self.pending[: self.batch_size],
                                   self.pending[self.batch_size:])
            self._write(block)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        payload = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        offset = self.file.seek(0, 2)
        self.file.write(payload)
        self.blocks.append((offset, len(payload), len(rows)))
        self.rows += len(rows)

    def seal(self) -> None:
        self._write(self.pending)
        self.pending = []

    def replay(self) -> Iterator[list[tuple[Any, ...]]]:
        for offset, length, _rows in self.blocks:
            self.file.seek(offset)
            # Unpickling is safe here: the file is our own, written by _write above.
            yield pickle.loads(self.file.read(length))

    def close(self) -> None:
        self.file.close()


class _Upserter:
    """Upserts blocks of rows keyed by a unique constraint, counting created / updated /
    unchanged. Unchanged rows are never written, so re-sending a file writes nothing."""

    def __init__(self, *, kind: Kind, study: Study, use_copy: bool) -> None:
        self.model = _MODELS[kind]
        meta: Any = self.model._meta
        self.meta = meta
        self.const = {"study_id": study.pk}
        self.unique = _UNIQUE[kind]  # field names of the unique constraint (ON CONFLICT)
        self.row_fields = _ROW_FIELDS[kind]  # attnames, the order of every row tuple
        keys = {meta.get_field(n).attname for n in self.unique}
        self.compare_fields = tuple(a for a in self.row_fields if a not in keys)
        by_attname = {f.attname: f for f in meta.concrete_fields}
        self.fields: list[Any] = [by_attname[a] for a in self.row_fields]
        self.json_positions = frozenset(i for i, f in enumerate(self.fields)
                                        if isinstance(f, models.JSONField))
        self.use_copy = use_copy
        self.created = self.updated = self.unchanged = 0
        self.tmp: str | None = None
        self.copy_sql = ""
        self.merge_sql = ""
        self.merge_params: list[Any] = []

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        if self.use_copy:
            self._write_copy(rows)
        else:
            self._write_orm(rows)

    def close(self) -> IngestResult:
        if self.tmp is not None:
            with connection.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {self.tmp}")
            self.tmp = None
        return IngestResult(self.created, self.updated, self.unchanged)

    # -- PostgreSQL: COPY into a temporary table, then one merge statement -------------------

    def _setup_copy(self) -> None:
        meta = self.meta
        self.tmp = _qn(f"rh_ingest_{uuid.uuid4().hex[:16]}")
        cols = ", ".join(f"{_qn(f.column)} {f.db_type(connection)}" for f in self.fields)
        with connection.cursor() as cur:
            cur.execute(f"CREATE TEMPORARY TABLE {self.tmp} ({cols}) ON COMMIT DROP")
        table = _qn(meta.db_table)
        pk = _qn(meta.pk.column)
        now = timezone.now()
        row_columns = {f.attname for f in self.fields}
        params: list[Any] = []
        where = []
        for name in self.unique:
            key_field = meta.get_field(name)
            column = _qn(key_field.column)
            if key_field.attname in row_columns:
                where.append(f"o.{column} = t.{column}")
            else:
                where.append(f"o.{column} = %s")
                params.append(self.const[key_field.attname])
        compare = [_qn(meta.get_field(self._name(a)).column) for a in self.compare_fields]
        insert_cols: list[str] = []
        select: list[str] = []
        updates: list[str] = []
        for f in meta.concrete_fields:
            if f.primary_key:
                continue
            column = _qn(f.column)
            insert_cols.append(column)
            if f.attname in row_columns:
                select.append(f"t.{column}")
                if f.attname in self.compare_fields:
                    updates.append(f"{column} = EXCLUDED.{column}")
            elif f.attname in self.const:
                select.append("%s")
                params.append(self.const[f.attname])
            elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                select.append("%s")
                params.append(now)
                if getattr(f, "auto_now", False):
                    updates.append(f"{column} = EXCLUDED.{column}")
            else:
                # Columns this import does not set get the model default, as an ORM insert
                # would; listing every column keeps this SQL right when fields are added.
                select.append("%s")
                params.append(f.get_db_prep_save(f.get_default(), connection))
        unique_cols = ", ".join(_qn(meta.get_field(n).column) for n in self.unique)
        # LATERAL ... LIMIT 1 keeps the stored-row lookup an index probe per row: a plain
        # join lets the planner pick a full scan of a big table for each batch.
        self.merge_sql = f"""
            WITH src AS (
                SELECT t.*, o.rh_id AS rh_existing,
                       (o.rh_id IS NOT NULL AND
                        ROW({', '.join('o.' + c for c in compare)}) IS NOT DISTINCT FROM
                        ROW({', '.join('t.' + c for c in compare)})) AS rh_same
                FROM {self.tmp} t
                LEFT JOIN LATERAL (
                    SELECT o.{pk} AS rh_id, {', '.join('o.' + c for c in compare)}
                    FROM {table} o WHERE {' AND '.join(where)} LIMIT 1
                ) o ON true
            ), merged AS (
                INSERT INTO {table} ({', '.join(insert_cols)})
                SELECT {', '.join(select)} FROM src t WHERE NOT t.rh_same
                ON CONFLICT ({unique_cols}) DO UPDATE SET {', '.join(updates)}
                RETURNING 1
            )
            SELECT count(*) FILTER (WHERE rh_existing IS NULL),
                   count(*) FILTER (WHERE rh_existing IS NOT NULL AND NOT rh_same),
                   count(*) FILTER (WHERE rh_same),
                   (SELECT count(*) FROM merged)
            FROM src
        """
        self.merge_params = params
        self.copy_sql = (f"COPY {self.tmp} ({', '.join(_qn(f.column) for f in self.fields)}) "
                         "FROM STDIN")

    def _name(self, attname: str) -> str:
        return str(next(f.name for f in self.meta.concrete_fields if f.attname == attname))

    def _write_copy(self, rows: list[tuple[Any, ...]]) -> None:
        if self.tmp is None:
            self._setup_copy()
        with connection.cursor() as cur:
            cur.execute(f"TRUNCATE {self.tmp}")
            with cur.copy(self.copy_sql) as copy:
                write_row = copy.write_row
                for row in rows:
                    write_row(row)
            cur.execute(self.merge_sql, self.merge_params)
            created, updated, unchanged, merged = cur.fetchone()
        if merged != created + updated:
            # Another transaction wrote the same keys between our read and our write.
            raise Conflict("Rows were changed by another import while this one ran; nothing "
                           "was written. Try again.")
        self.created += created
        self.updated += updated
        self.unchanged += unchanged

    # -- other databases: compare with the stored rows, bulk_create the rest -----------------

    def _write_orm(self, rows: list[tuple[Any, ...]]) -> None:
        meta = self.meta
        positions = {a: i for i, a in enumerate(self.row_fields)}
        unique_attnames: list[str] = [meta.get_field(n).attname for n in self.unique]
        # The key columns that vary per row; the others (study_id) are constants.
        varying = [(a, positions[a]) for a in unique_attnames if a in positions]
        const = self.const
        filters: dict[str, Any] = {a: const[a] for a in unique_attnames if a not in positions}
        for attname, pos in varying:
            filters[f"{attname}__in"] = {row[pos] for row in rows}
        existing: dict[tuple[Any, ...], dict[str, Any]] = {}
        for found in self.model._default_manager.filter(**filters).values(
            *unique_attnames, *self.compare_fields
        ):
            existing[tuple(found[a] for a, _ in varying)] = found
        json_fields = {self.row_fields[i] for i in self.json_positions}
        to_write = []
        for row in rows:
            stored = existing.get(tuple(row[p] for _, p in varying))
            if stored is None:
                self.created += 1
            elif all(_same_value(stored[a], row[positions[a]], a in json_fields)
                     for a in self.compare_fields):
                self.unchanged += 1
                continue
            else:
                self.updated += 1
            to_write.append(self.model(**const, **dict(zip(self.row_fields, row, strict=True))))
        if to_write:
            self.model._default_manager.bulk_create(
                to_write,
                update_conflicts=True,
                unique_fields=list(self.unique),
                update_fields=[self._name(a) for a in self.compare_fields]
                + [f.name for f in meta.concrete_fields if getattr(f, "auto_now", False)],
            )


def _same_value(stored: Any, new: Any, is_json: bool) -> bool:
    if is_json:
        # {"a": 1} == {"a": True} in Python; compare the JSON texts instead.
        return json.dumps(stored, sort_keys=True) == json.dumps(new, sort_keys=True)
    return bool(stored == new)


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


def ingest_run(
    *,
    study: Study,
    kind: Kind,
    stream: IO[bytes],
    fmt: Format,
    batch_size: int = DEFAULT_BATCH_SIZE,
    strategy: Strategy = "auto",
    progress: IngestProgress | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> IngestResult:
    """Validate and upsert every row of an ingest file, all or nothing.

    Pass 1 streams `stream` once, validating every row and checking duplicates and references
    (raising `IngestRejected`, a 400 listing up to ERROR_LIMIT errors by line, field and
    reason); while no error has been seen, each row's database values go to an on-disk spool.
    Pass 2 upserts the spool in batches of `batch_size` inside one transaction: COPY plus one
    merge statement per batch on PostgreSQL (`strategy="copy"`), `bulk_create` elsewhere
    (`"orm"`). Items are keyed by external_id, candidates by name, outputs by (candidate,
    item). After an items import that changed anything, the study's strata are recomputed in
    the same transaction. `on_batch` is told the size of each batch written (for tests).
    """
    if kind not in SPECS:
        raise ValueError(f"unknown ingest kind {kind!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if study.status == Study.Status.CLOSED:
        raise Conflict(f"Study '{study.slug}' is closed; no more {kind} can be imported.")
    use_copy = connection.vendor == "postgresql" if strategy == "auto" else strategy == "copy"
    if use_copy and connection.vendor != "postgresql":
        raise ValueError("the COPY strategy needs PostgreSQL")
    validator = RowValidator(study=study, kind=kind, fmt=fmt, json_as_text=use_copy)
    upserter = _Upserter(kind=kind, study=study, use_copy=use_copy)
    spool = _Spool(batch_size=batch_size)
    try:
        rows = _validate_pass(study, kind, stream, fmt, validator, spool, batch_size, progress)
        return _write_pass(study, kind, upserter, spool, rows, progress, on_batch)
    finally:
        spool.close()
        if progress is not None:
            progress.close()


def _validate_pass(
    study: Study,
    kind: Kind,
    stream: IO[bytes],
    fmt: Format,
    validator: RowValidator,
    spool: _Spool,
    batch_size: int,
    progress: IngestProgress | None,
) -> int:
    """Pass 1: check every row and spool the valid ones; raise IngestRejected on any error."""
    if progress is not None:
        progress.phase("validating", None)
    tracker: _KeyedTracker | _OutputTracker
    if kind == "outputs":
        tracker = _OutputTracker(validator=validator, study=study, batch_size=batch_size)
    else:
        tracker = _KeyedTracker(validator, "external_id" if kind == "items" else "name")
    errors = _ErrorCollector()
    rows = 0
    on_bytes = progress.advance if progress is not None else None
    for rec in iter_records(stream, fmt, validator.spec, on_bytes):
        rows += rec.is_row
        if rec.errors:
            errors.add_row(rec.errors)
            continue
        values, row_errors = validator.validate(rec)
        if values is None:
            errors.add_row(row_errors)
            continue
        # Once any row is bad nothing will be written, so stop spooling (keep checking).
        found, ready = tracker.add(rec, values, stage=not errors.total)
        for row_errors in found:
            errors.add_row(row_errors)
        if ready and not errors.total:
            spool.extend(ready)
    found, ready = tracker.finish(stage=not errors.total)
    for row_errors in found:
        errors.add_row(row_errors)
    if errors.total:
        raise errors.rejection(rows)
    spool.extend(ready)
    spool.seal()
    return rows


def _write_pass(
    study: Study,
    kind: Kind,
    upserter: _Upserter,
    spool: _Spool,
    rows: int,
    progress: IngestProgress | None,
    on_batch: Callable[[int], None] | None,
) -> IngestResult:
    """Pass 2: upsert the spooled rows in batches inside one transaction."""
    if spool.rows != rows:  # every row was validated, so every row must have been spooled
        raise RuntimeError(f"ingest spooled {spool.rows} of {rows} rows")
    if progress is not None:
        progress.phase("writing", rows)
    try:
        with transaction.atomic():
            for batch in spool.replay():
                if on_batch is not None:
                    on_batch(len(batch))
                upserter.write(batch)
                if progress is not None:
                    progress.advance(len(batch))
            result = upserter.close()
            if kind == "items" and (result.created or result.updated):
                study_strata_recompute(study=study)
    except IntegrityError as exc:
        raise Conflict(f"The import conflicted with a concurrent change ({exc}); nothing was "
                       "written.") from None
    return result
