"""What the agreement and selection kinds' versioned result types share
(`reports.agreement.results`, `reports.selection.results`): refusing a stored result that is
no object, decoding it with the result codec, writing it back and deriving its JSON Schema
with the values its version fixes.

Each kind keeps its own `from_json` (which versions it reads and how it upgrades them).

Pure module: no Django, no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from reports.results import ResultFormatError, decode_dataclass, encode, json_schema_of

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

R = TypeVar("R", bound="StoredResult")


def result_object(data: Any) -> Mapping[str, Any]:
    """`data` when it is an object (a stored result always is), else ResultFormatError."""
    if not isinstance(data, Mapping):
        raise ResultFormatError("result", "must be an object")
    return data


class StoredResult:
    """A base of a kind's result dataclass (it adds no field)."""

    # Properties whose value the JSON Schema fixes (the version the code writes, the kind).
    SCHEMA_CONSTS: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def decode(cls: type[R], data: Mapping[str, Any]) -> R:
        """`data` (already at the version the code writes) read as this type."""
        return decode_dataclass(cls, dict(data), "")

    def to_json(self) -> dict[str, Any]:
        """The stored (and served) JSON form: from_json(to_json()) == self."""
        out: dict[str, Any] = encode(self)
        return out

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of `to_json()`, derived from the dataclasses."""
        schema = json_schema_of(cls)
        for name, value in cls.SCHEMA_CONSTS.items():
            schema["properties"][name] = {"const": value}
        return {"$schema": SCHEMA_DIALECT, **schema}


__all__ = ["SCHEMA_DIALECT", "StoredResult", "result_object"]
