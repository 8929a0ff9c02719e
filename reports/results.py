"""The typed result codec every report kind uses: frozen dataclasses, their JSON form and
their JSON schema, driven by the dataclasses' type hints.

A snapshot's `result` column holds `to_json()` of a kind's result type (the agreement result in
`reports.agreement.results`, the selection result in `reports.selection.results`); its readers
call `from_json`, which decodes with `decode_dataclass`: every field's type is checked and a
field that does not fit raises `ResultFormatError` naming its path, so a reader never silently
misreads a result written by another version of the code. The JSON schema is derived from the
same dataclasses (`json_schema_of`), so it cannot drift from them. A field whose metadata holds
`OMIT_IF_NONE` is left out of the JSON when None (and may be missing).

Pure module: no Django, no numpy (a test imports it without settings).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from calibration.refs import OMIT_IF_NONE

T = TypeVar("T")


class ResultFormatError(ValueError):
    """A stored result does not have the shape its version promises (the path names where)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def json_safe(value: Any) -> Any:
    """Non-finite floats become null (PostgreSQL's JSON has no NaN); numpy scalars become
    Python numbers; tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_safe(value.item())
    return value


# --- the generic codec and schema, driven by the dataclasses' type hints -----------------------


def _hints(cls: type) -> dict[str, Any]:
    # The class's own module resolves its annotations (other result modules, e.g. the
    # selection result, reuse this codec with their own dataclasses).
    return get_type_hints(cls)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


# A decoder reads the JSON of one type: (value, path) -> the typed value, or ResultFormatError
# naming the path. Each type's decoder is built once from its type hints and kept: a result has
# tens of thousands of rows (a disagreement example each), and resolving the hints per row made
# reading a large report ten times slower than reading it untyped.
_Decoder = Callable[[Any, str], Any]


def _decode(tp: Any, value: Any, path: str) -> Any:
    return _decoder(tp)(value, path)


@functools.cache
def _decoder(tp: Any) -> _Decoder:
    if tp is Any:
        return lambda value, path: value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_decoder(tp)
    if _is_union(tp):
        args = get_args(tp)
        nullable = type(None) in args
        others = [_decoder(a) for a in args if a is not type(None)]

        def union(value: Any, path: str) -> Any:
            if value is None and nullable:
                return None
            errors = []
            for decode in others:
                try:
                    return decode(value, path)
                except ResultFormatError as exc:
                    errors.append(str(exc))
            raise ResultFormatError(path, "; ".join(errors) or "unexpected null")

        return union
    origin = get_origin(tp)
    if origin is tuple:
        (item_type,) = [a for a in get_args(tp) if a is not Ellipsis]
        item = _decoder(item_type)

        def sequence(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise ResultFormatError(path, "must be a list")
            return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

        return sequence
    if origin in (Mapping, dict, typing.Mapping):
        entry = _decoder(get_args(tp)[1])

        def mapping(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise ResultFormatError(path, "must be an object")
            return {str(k): entry(v, f"{path}.{k}") for k, v in value.items()}

        return mapping
    if tp is bool:

        def boolean(value: Any, path: str) -> Any:
            if not isinstance(value, bool):
                raise ResultFormatError(path, "must be a boolean")
            return value

        return boolean
    if tp is int:

        def integer(value: Any, path: str) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ResultFormatError(path, "must be an integer")
            return value

        return integer
    if tp is float:

        def number(value: Any, path: str) -> Any:
            # An integer is a number too; it is kept as stored so the JSON round trip is exact.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ResultFormatError(path, "must be a number")
            return value

        return number
    if tp is str:

        def string(value: Any, path: str) -> Any:
            if not isinstance(value, str):
                raise ResultFormatError(path, "must be a string")
            return value

        return string
    raise TypeError(f"no decoder for {tp!r}")  # pragma: no cover - a programming error


def _dataclass_decoder(cls: type) -> _Decoder:
    hints = _hints(cls)
    fields = [
        (f.name, _decoder(hints[f.name]), bool(f.metadata.get(OMIT_IF_NONE)))
        for f in dataclasses.fields(cls)
    ]
    names = frozenset(name for name, _, _ in fields)

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise ResultFormatError(path, "must be an object")
        if not names.issuperset(value):
            unknown = sorted(set(value) - names)
            raise ResultFormatError(path, f"unknown field(s) {', '.join(unknown)}")
        kwargs = {}
        for name, field_decoder, omittable in fields:
            where = f"{path}.{name}" if path else name
            if name not in value:
                if omittable:
                    continue
                raise ResultFormatError(where, "is required")
            kwargs[name] = field_decoder(value[name], where)
        return cls(**kwargs)

    return decode


def decode_dataclass(cls: type[T], value: Any, path: str) -> T:
    """`value` read as the dataclass `cls` (ResultFormatError names where it does not fit)."""
    result: T = _decoder(typing.cast(Any, cls))(value, path)
    return result


@functools.cache
def _encoded_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, omitted when None) of each field of a dataclass, in order."""
    return tuple(
        (f.name, bool(f.metadata.get(OMIT_IF_NONE)))
        for f in dataclasses.fields(cls)
    )


def encode(value: Any) -> Any:
    """The JSON form of a result dataclass (or of a list, tuple or mapping of them)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for name, omittable in _encoded_fields(type(value)):
            v = getattr(value, name)
            if not (omittable and v is None):
                out[name] = encode(v)
        return out
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def json_schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a type of the codec (a result dataclass, a union, a tuple, ...)."""
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        return {
            "type": "object",
            "title": tp.__name__,
            "properties": {f.name: json_schema_of(hints[f.name]) for f in fields},
            "required": [f.name for f in fields if not f.metadata.get(OMIT_IF_NONE)],
            "additionalProperties": False,
        }
    if _is_union(tp):
        return {"anyOf": [json_schema_of(a) for a in get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    origin = get_origin(tp)
    if origin is tuple:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        return {"type": "array", "items": json_schema_of(item)}
    if origin in (Mapping, dict, typing.Mapping):
        return {"type": "object", "additionalProperties": json_schema_of(get_args(tp)[1])}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no schema for {tp!r}")  # pragma: no cover - a programming error


__all__ = [
    "OMIT_IF_NONE",
    "ResultFormatError",
    "decode_dataclass",
    "encode",
    "json_safe",
    "json_schema_of",
]
