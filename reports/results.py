"""Typed, versioned report results: frozen dataclasses, their JSON form and their JSON schema.

A snapshot's `result` column holds `to_json()` of one of these; readers (the API's exports,
the CLI, the audit pages as they move over) call `from_json`, which checks every field's type
and refuses an unknown `version`, so a reader never silently misreads a result written by
another version of the code. The JSON schema is derived from the same dataclasses
(`json_schema`), so it cannot drift from them.

Pure module: no Django, no numpy (a test imports it without settings).

Version 1 of the agreement result types the top level, every cell's identity, counts and
verdict, and its coefficients (`Estimate`); a cell's `ceiling` and `alt_test`, and the rows of
the confusion, bias, ceiling, system and disagreement tables, are still objects keyed by name
(typed in a later version: the JSON would not change, only how it is read).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

AGREEMENT_RESULT_VERSION = 1
# Field metadata: the key is left out of the JSON when the value is None (and may be missing).
OMIT_IF_NONE = "omit_if_none"

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
    return get_type_hints(cls, globalns=globals())


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _decode(tp: Any, value: Any, path: str) -> Any:
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, value, path)
    if _is_union(tp):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        errors = []
        for arg in others:
            try:
                return _decode(arg, value, path)
            except ResultFormatError as exc:
                errors.append(str(exc))
        raise ResultFormatError(path, "; ".join(errors) or "unexpected null")
    origin = get_origin(tp)
    if origin is tuple:
        if not isinstance(value, list):
            raise ResultFormatError(path, "must be a list")
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        return tuple(_decode(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict, typing.Mapping):
        if not isinstance(value, dict):
            raise ResultFormatError(path, "must be an object")
        _, item = get_args(tp)
        return {str(k): _decode(item, v, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ResultFormatError(path, "must be a boolean")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ResultFormatError(path, "must be an integer")
        return value
    if tp is float:
        # An integer is a number too; it is kept as stored so the JSON round trip is exact.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultFormatError(path, "must be a number")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ResultFormatError(path, "must be a string")
        return value
    raise TypeError(f"no decoder for {tp!r}")  # pragma: no cover - a programming error


def _decode_dataclass(cls: type[T], value: Any, path: str) -> T:
    if not isinstance(value, dict):
        raise ResultFormatError(path, "must be an object")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ResultFormatError(path, f"unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in value:
            if f.metadata.get(OMIT_IF_NONE):
                continue
            raise ResultFormatError(where, "is required")
        kwargs[name] = _decode(hints[name], value[name], where)
    return cls(**kwargs)


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _encode(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get(OMIT_IF_NONE) and getattr(value, f.name) is None)
        }
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _schema(tp: Any) -> dict[str, Any]:
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        return {
            "type": "object",
            "title": tp.__name__,
            "properties": {f.name: _schema(hints[f.name]) for f in fields},
            "required": [f.name for f in fields if not f.metadata.get(OMIT_IF_NONE)],
            "additionalProperties": False,
        }
    if _is_union(tp):
        return {"anyOf": [_schema(a) for a in get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    origin = get_origin(tp)
    if origin is tuple:
        (item,) = [a for a in get_args(tp) if a is not Ellipsis]
        return {"type": "array", "items": _schema(item)}
    if origin in (Mapping, dict, typing.Mapping):
        return {"type": "object", "additionalProperties": _schema(get_args(tp)[1])}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no schema for {tp!r}")  # pragma: no cover - a programming error


# --- the agreement result -----------------------------------------------------------------------

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Estimate:
    """A coefficient with its interval (null where it could not be computed) and its n."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    method: str
    warnings: tuple[str, ...]
    # Only tests report a p-value; the key is absent from the JSON of other estimates.
    p_value: float | None = field(default=None, metadata={OMIT_IF_NONE: True})


@dataclass(frozen=True)
class CriterionRef:
    """A criterion as the report read it (the rubric may change after the report)."""

    id: int
    key: str
    name: str
    scale: str
    values: tuple[str, ...]
    rubric_version: int


@dataclass(frozen=True)
class JudgeRef:
    """A judge version as the report read it."""

    id: int
    judge: str
    version: int
    label: str
    display: str
    model_family: str
    value_type: str
    kind: str


@dataclass(frozen=True)
class StratumRef:
    """A stratum: dimension "" and label "overall" is every subject."""

    dimension: str
    label: str


@dataclass(frozen=True)
class AgreementCell:
    """One judge version x criterion x stratum: coefficients, ceiling, test and verdict."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    n_subjects: int
    n_items: int
    n_humans: int
    primary_metric: str
    metrics: Mapping[str, Estimate]
    ceiling: Row
    alt_test: Row | None
    verdict: str
    verdict_basis: str
    verdict_reason: str

    @property
    def primary(self) -> Estimate | None:
        """The primary coefficient's estimate (None when the cell has none)."""
        return self.metrics.get(self.primary_metric)


@dataclass(frozen=True)
class AgreementResult:
    """The agreement report (docs/reports.md), version `AGREEMENT_RESULT_VERSION`."""

    version: int
    rule: str
    params: Mapping[str, Any]
    plan_version: int | None
    fingerprint: str
    criteria: tuple[CriterionRef, ...]
    judges: tuple[JudgeRef, ...]
    strata: tuple[StratumRef, ...]
    cells: tuple[AgreementCell, ...]
    confusion: tuple[Row, ...]
    bias: tuple[Row, ...]
    ceiling: tuple[Row, ...]
    system: tuple[Row, ...]
    disagreements: tuple[Row, ...]
    warnings: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgreementResult:
        """Read a stored result; ResultFormatError names the first field that does not fit."""
        if not isinstance(data, Mapping):
            raise ResultFormatError("result", "must be an object")
        version = data.get("version")
        if version != AGREEMENT_RESULT_VERSION:
            raise ResultFormatError(
                "version", f"agreement result version {version!r} is not "
                f"{AGREEMENT_RESULT_VERSION}, the version this code reads"
            )
        return _decode_dataclass(cls, dict(data), "")

    def to_json(self) -> dict[str, Any]:
        """The stored (and served) JSON form: from_json(to_json()) == self."""
        out: dict[str, Any] = _encode(self)
        return out

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of `to_json()`, derived from the dataclasses."""
        schema = _schema(cls)
        schema["properties"]["version"] = {"const": AGREEMENT_RESULT_VERSION}
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}

    def criteria_by_id(self) -> dict[int, CriterionRef]:
        return {c.id: c for c in self.criteria}

    def judges_by_id(self) -> dict[int, JudgeRef]:
        return {j.id: j for j in self.judges}

    def cells_for(
        self, *, criterion: int | None = None, judge_version: int | None = None
    ) -> list[AgreementCell]:
        """Cells filtered by criterion and/or judge version, in report order."""
        return [
            c
            for c in self.cells
            if (criterion is None or c.criterion == criterion)
            and (judge_version is None or c.judge_version == judge_version)
        ]

    def rows(self, table: str) -> Iterable[Row]:
        """The untyped rows of one of the other tables (confusion, bias, ceiling, system,
        disagreements)."""
        if table not in ("confusion", "bias", "ceiling", "system", "disagreements"):
            raise ValueError(f"unknown table {table!r}")
        rows: tuple[Row, ...] = getattr(self, table)
        return rows


__all__ = [
    "AGREEMENT_RESULT_VERSION",
    "AgreementCell",
    "AgreementResult",
    "CriterionRef",
    "Estimate",
    "JudgeRef",
    "ResultFormatError",
    "StratumRef",
    "json_safe",
]
