"""Streaming readers: one raw record per row of a JSON array, JSON Lines or CSV file, with
its 1-based line number (and, inside a JSON array, its 0-based element index). The whole
file is never held in memory.

Importable without Django; only a CSV file reads one setting
(REVIEWHUB_MAX_FIELD_CHARS) when it is opened.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from reviewhub.api.strictjson import decoder_fast

from .errors import RowError
from .formats import Format
from .schema import KindSpec

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

READ_CHUNK = 1 << 16
_PROGRESS_STEP = 1 << 18


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


def looks_suspicious(text: str) -> bool:
    return "\\u" in text or "NaN" in text or "Infinity" in text


def json_error(exc: Exception) -> str:
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
STRICT_JSON = decoder_fast(allow_nan_literals=True)
# Only to find where a refused array element ends, so that the next one can be read.
_LENIENT_JSON = json.JSONDecoder()


def type_name(value: Any) -> str:
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
    loads = STRICT_JSON.decode
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
            yield RawRecord(line_no, None, None, [RowError(line_no, "(row)", json_error(exc))])
            continue
        if type(obj) is not dict:
            yield RawRecord(line_no, None, None, [RowError(
                line_no, "(row)", f"each line must be a JSON object, got {type_name(obj)}"
            )])
            continue
        yield RawRecord(line_no, None, obj, None, looks_suspicious(text), None, len(text))
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
        self.decoder_json = STRICT_JSON
        self.buf = ""
        self.pos = 0
        self.line = 1  # line of buf[pos]
        self.eof = False
        self.decoded_newlines = 0
        self.first_chunk = True

    def _fill(self, want: int = READ_CHUNK) -> bool:
        """Append at least one more chunk to the buffer; False at end of file."""
        if self.eof:
            return False
        # Keep reading until `want` bytes (or EOF): a stream that returns short reads must not
        # make every refill re-parse a big element for a few new bytes (quadratic time).
        want = max(want, READ_CHUNK)
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
        if self.pos > READ_CHUNK * 4:
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
                    f"{type_name(obj)}", index,
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
        want = READ_CHUNK
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
                            return None, end, json_error(exc)
                if not self.eof and self._fill(want):
                    want *= 2
                    continue
                line = self.line
                if isinstance(exc, json.JSONDecodeError):
                    line += self.buf.count("\n", self.pos, exc.pos)
                raise _FatalRecord(RawRecord(line, index, None, [
                    RowError(line, "(row)", json_error(exc), index)
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


def csv_reader(lines: Iterable[str], *, delimiter: str = ",") -> CsvReader:
    """The one CSV dialect of every file ReviewHub reads (ingest files and ratings files):
    strict quoting, and a field-size cap that admits the longest field ingest accepts.

    A field may legitimately be as long as REVIEWHUB_MAX_FIELD_CHARS (and is then rejected by
    name); the csv module's own cap stays finite so an unclosed quote cannot swallow a whole
    1 GB file into memory. The returned reader's ``line_num`` counts physical lines.
    """
    _field_size_cap()
    return csv.reader(lines, strict=True, delimiter=delimiter)


def csv_dict_reader(lines: Iterable[str], *, delimiter: str = ",") -> csv.DictReader[str]:
    """`csv_reader`'s dialect read by column name (`csv.DictReader`'s rows), for the importers
    of other tools' exports."""
    _field_size_cap()
    return csv.DictReader(lines, strict=True, delimiter=delimiter)


def _field_size_cap() -> None:
    # Imported here, not at the top, so that the readers load without Django settings.
    from django.conf import settings

    csv.field_size_limit(max(16 << 20, 2 * settings.REVIEWHUB_MAX_FIELD_CHARS + 1))


def csv_error_reason(exc: csv.Error) -> str:
    """What a `csv_reader` error means, in words a user can act on."""
    reason = str(exc)
    if "field larger than field limit" in reason:
        reason = (f"a field is longer than {csv.field_size_limit():,} characters "
                  "(an unclosed quote?)")
    return reason


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

    reader = csv_reader(lines())
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
            reason = csv_error_reason(exc)
            yield RawRecord(line, None, None, [RowError(line, "(row)", f"malformed CSV: {reason}")])
            return
        start, previous = previous + 1, reader.line_num
        if decode_errors:
            rows += 1  # a row all the same: the file is not "a header but no rows"
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
