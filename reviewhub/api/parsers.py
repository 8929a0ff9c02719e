"""The JSON parser of every API view: strict JSON (see `reviewhub.api.strictjson`).

A body holding NaN/Infinity, an overflowing number, a NUL, a lone surrogate or a duplicate key
is refused here with a 400 that names the JSON path, once for every endpoint and every field,
instead of reaching a serializer, a JSON column or PostgreSQL (which answered 500).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.parsers import JSONParser

from reviewhub.errors import AppError

from .strictjson import StrictJSONError, loads


class InvalidJSON(AppError):
    code = "invalid_json"


def invalid_json(exc: StrictJSONError, *, where: str = "The request body") -> InvalidJSON:
    details: dict[str, Any] = {"path": exc.path, "message": exc.reason}
    if exc.line is not None:
        details.update(line=exc.line, column=exc.column)
    return InvalidJSON(f"{where} is not accepted: {exc}.",
                       details={"errors": [details], "error_count": 1})


class StrictJSONParser(JSONParser):
    """DRF's JSONParser, decoding with `strictjson.loads` (UTF-8 only, as RFC 8259 says)."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            return loads(raw)
        except StrictJSONError as exc:
            raise invalid_json(exc) from None
