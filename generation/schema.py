"""Schema validity of an output: the JSON Schema validator library decides (pure, no ORM)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MAX_VIOLATION_CHARS = 500


@dataclass(frozen=True)
class SchemaVerdict:
    valid: bool
    # The first violation (jsonschema's own ordering of the errors it finds, `best_match`),
    # or why the text is not JSON at all; "" when valid.
    violation: str = ""


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    cls = validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _strip_fence(text: str) -> str:
    # Models often wrap JSON in a Markdown code fence even when asked not to; the application
    # would strip it too, so the fence alone does not make an answer invalid.
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and body.count("\n") >= 1:
        body = body[body.index("\n") + 1 : -3].strip()
    return body


def schema_check(text: str, schema: Mapping[str, Any]) -> SchemaVerdict:
    """Whether `text` is a JSON document valid against `schema`, with the first violation."""
    from jsonschema.exceptions import best_match

    try:
        document = json.loads(_strip_fence(text))
    except ValueError as exc:
        return SchemaVerdict(False, f"not JSON: {exc}"[:MAX_VIOLATION_CHARS])
    validator = _validator(json.dumps(schema, sort_keys=True))
    error = best_match(validator.iter_errors(document))
    if error is None:
        return SchemaVerdict(True)
    where = "/".join(str(p) for p in error.absolute_path)
    return SchemaVerdict(False, (f"at /{where}: " if where else "at /: ")
                         + error.message[:MAX_VIOLATION_CHARS])
