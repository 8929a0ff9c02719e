"""The fields of each kind of row, the order of a row tuple, and the JSON texts stored.

Pure Python (no Django). The per-kind field lists, which take their maximum lengths from the
models, are `validation.SPECS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .formats import Kind

# --------------------------------------------------------------------------------------------
# Row schemas
# --------------------------------------------------------------------------------------------

FieldKind = Literal[
    "key", "text", "char", "input", "input_format", "object", "scores", "any_json", "number",
    "count", "request",
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


# json.dumps(...) with options builds a new encoder per call; these are built once.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The stored text of a JSON item input: sorted keys, no insignificant whitespace."""
    return _CANONICAL.encode(value)


def compact_json(value: Any) -> str:
    return _COMPACT.encode(value)


# The column order of every row tuple, shared by `RowValidator.db_row` and the upserter.
ROW_FIELDS: dict[Kind, tuple[str, ...]] = {
    "items": ("external_id", "input", "input_format", "context", "reference", "metadata",
              "recorded_request"),
    "candidates": ("name", "provider", "model_id", "model_version", "model_family",
                   "parameters", "notes", "public_scores"),
    # Outputs: the two resolved ids first, then the values in the validator's dict.
    "outputs": ("candidate_id", "item_id", "schema_valid", "text", "parsed_json", "latency_ms",
                "tokens_in", "tokens_out", "cost", "error", "finish_reason", "metadata"),
}
