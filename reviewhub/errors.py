"""Typed application errors: what services and pure modules raise when a request cannot be served.

This module imports neither Django nor DRF, so that the pure modules (sampling designs, judge
config validation, the analysis plan spec, report parameters) can raise them and still import
with no Django settings (tests/test_pure_imports.py). They are rendered to the one error body
``{"error": {"code", "message", "details"}}`` in one place, `reviewhub.api.errors`.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

__all__ = [
    "AppError",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "ValidationFailed",
    "error_body",
]


class AppError(Exception):
    """Base class of errors that services raise for the API layer to render."""

    status_code: int = HTTPStatus.BAD_REQUEST.value
    code = "bad_request"

    def __init__(self, message: str, *, details: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details if details is not None else {}
        if code is not None:
            self.code = code


class ValidationFailed(AppError):
    code = "validation_failed"


class NotFound(AppError):
    status_code = HTTPStatus.NOT_FOUND.value
    code = "not_found"


class Forbidden(AppError):
    status_code = HTTPStatus.FORBIDDEN.value
    code = "forbidden"


class Conflict(AppError):
    status_code = HTTPStatus.CONFLICT.value
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = HTTPStatus.REQUEST_ENTITY_TOO_LARGE.value
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status_code = HTTPStatus.UNSUPPORTED_MEDIA_TYPE.value
    code = "unsupported_media_type"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The one error body every 4xx/5xx answer carries."""
    return {"error": {"code": code, "message": message, "details": details or {}}}
