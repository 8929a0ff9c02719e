"""Per-row checks: each kind's schema (`SPECS`), `RowValidator` (a raw record to
database-ready values or a list of `RowError`), and pass 1's bookkeeping of duplicates and
references, which keeps compact keys only.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import jsonschema
from django.conf import settings
from django.db import models

from reviewhub.errors import ValidationFailed

from ..models import Candidate, Item, Output, Study
from .errors import RowError
from .formats import Format, Kind
from .reading import STRICT_JSON, RawRecord, json_error, looks_suspicious, type_name
from .schema import ROW_FIELDS, FieldSpec, KindSpec, canonical_json, compact_json

_PG_MAX_INT = 2_147_483_647

# NUL cannot be stored in PostgreSQL text or jsonb; lone surrogates cannot be encoded as UTF-8.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_CSV_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
                         re.IGNORECASE)
_CSV_INTEGER = re.compile(r"[+-]?\d+(?:\.0*)?")
# What a CSV `metadata.<key>` cell must look like to be stored as a JSON number rather than a
# string: JSON's own number grammar, so "007" and "1e" stay strings.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?(?:[eE][+-]?\d+)?")


# --------------------------------------------------------------------------------------------
# Row schemas
# --------------------------------------------------------------------------------------------


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
            FieldSpec("recorded_request", "request"),
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


def recorded_request_check(value: Any) -> dict[str, Any]:
    """A recorded chat request (an item's `recorded_request`), or ValueError saying what is
    wrong: an object whose `messages` is a non-empty list of messages with a role (the shape
    every chat API logs), `tools` an array and `response_format` an object when present; the
    rest is kept as logged. Shared by ingest and the ratings imports."""
    if type(value) is not dict:
        raise ValueError(f"must be a JSON object (a chat request), got {type_name(value)}")
    messages = value.get("messages")
    if type(messages) is not list or not messages:
        raise ValueError("must be a chat request: 'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if type(message) is not dict or type(message.get("role")) is not str:
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
    for key, want in (("tools", list), ("response_format", dict)):
        if value.get(key) is not None and type(value[key]) is not want:
            raise ValueError(f"'{key}' must be a JSON {'array' if want is list else 'object'}, "
                             f"got {type_name(value[key])}")
    return value


Converter = Callable[[Any], Any]
# Field kinds whose values can hold strings (and so NUL or lone surrogates) in a JSON row.
_DEEP_KINDS = frozenset({"key", "text", "char", "input", "object", "scores", "any_json",
                         "request"})
_JSON_KINDS = frozenset({"object", "scores", "any_json", "request"})


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
                "any_json", "number", "count", "input_format", "request") else "")
            for f in self.spec.fields if not f.required
        }
        fields = ROW_FIELDS[kind]
        self.row_getter = operator.itemgetter(*(fields[2:] if kind == "outputs" else fields))
        self.deep_fields = [f.name for f in self.spec.fields if f.kind in _DEEP_KINDS]
        self.schema_validator: Any = None
        if kind == "outputs" and study.output_schema is not None:
            schema = study.output_schema
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ValidationFailed.at(
                    "output_schema",
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
        if kind == "request":
            return self._request_cell if csv_mode else self._request
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
                raise _Invalid(f"must be a string, got {type_name(value)}")
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
            value = STRICT_JSON.decode(cell)
        except (ValueError, RecursionError) as exc:
            raise _Invalid(f"the cell is {json_error(exc)}") from None
        if looks_suspicious(cell):
            _deep_check(value)
        return value

    @staticmethod
    def _object(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Invalid(f"must be a JSON object, got {type_name(value)}")
        return value

    def _object_cell(self, cell: str) -> dict[str, Any]:
        if not cell.strip():
            return {}
        return self._object(self._parse_cell_json(cell))

    @classmethod
    def _request(cls, value: Any) -> dict[str, Any]:
        try:
            return recorded_request_check(value)
        except ValueError as exc:
            raise _Invalid(str(exc)) from None

    def _request_cell(self, cell: str) -> dict[str, Any] | None:
        if not cell.strip():
            return None
        return self._request(self._parse_cell_json(cell))

    def _scores(self, value: Any) -> dict[str, float]:
        obj = self._object_cell(value) if self.is_csv else self._object(value)
        out: dict[str, float] = {}
        for name, score in obj.items():
            if type(score) not in (int, float):
                raise _Invalid(f"score {name!r} must be a number, got {type_name(score)}")
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
        raise _Invalid(f"must be a number, got {type_name(value)}")

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
            raise _Invalid(f"must be a whole number, got {type_name(value)}")
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
                    size = len(compact_json(values[name]))
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
                parsed = STRICT_JSON.decode(raw)
            except (ValueError, RecursionError) as exc:
                raise _Invalid(f"input_format is 'json' but input is {json_error(exc)}"
                               ) from None
            if not isinstance(parsed, dict | list):
                raise _Invalid(f"a JSON input must be an object or array, got "
                               f"{type_name(parsed)}")
            _deep_check(parsed)
            return text(canonical_json(parsed)), Item.InputFormat.JSON
        if isinstance(raw, dict | list):
            if declared == "text":
                raise _Invalid(f"input_format is 'text' but input is a JSON {type_name(raw)}")
            return text(canonical_json(raw)), Item.InputFormat.JSON
        raise _Invalid(f"must be a string or a JSON object/array, got {type_name(raw)}")

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
        """The row tuple in the upserter's column order (`ROW_FIELDS[kind]`)."""
        if self.kind == "outputs":
            assert refs is not None
            values["schema_valid"] = self.schema_valid(values)
        if self.json_as_text:
            for name in self.json_fields:
                value = values[name]
                if value is not None:
                    values[name] = "{}" if value == {} else compact_json(value)
        row = self.row_getter(values)
        return (*refs, *row) if refs is not None else row


# --------------------------------------------------------------------------------------------
# Pass 1 bookkeeping: duplicates and references, with compact keys only
# --------------------------------------------------------------------------------------------


class KeyedTracker:
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


class OutputTracker:
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
