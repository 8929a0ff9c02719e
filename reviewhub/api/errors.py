"""The one place where every API error is rendered.

Every 4xx/5xx body has the shape ``{"error": {"code", "message", "details"}}`` so that clients
need one parser. Services raise the typed errors of `reviewhub.errors` (plain Python, so that
pure modules can raise them without importing Django or DRF); views never build error bodies by
hand. The error classes are re-exported here so that existing imports keep working. DRF's
own validation errors (serializer field errors) are converted to the one `details` shape of
validation errors, ``{"errors": [{"path", "message"}], "error_count"}``, here too.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found, server_error
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response

from reviewhub.errors import (
    AppError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    Problems,
    UnsupportedMediaType,
    ValidationFailed,
    error_body,
)

__all__ = [
    "AppError",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "ValidationFailed",
    "error_body",
    "exception_handler",
    "not_found_handler",
    "server_error_handler",
]

_DRF_CODES = {
    drf_exceptions.NotAuthenticated: "not_authenticated",
    drf_exceptions.AuthenticationFailed: "authentication_failed",
    drf_exceptions.PermissionDenied: "forbidden",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.ParseError: "parse_error",
    drf_exceptions.ValidationError: "validation_failed",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.NotAcceptable: "not_acceptable",
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: AppError and DRF's own exceptions in the one error shape."""
    # Imported here: rest_framework.views resolves DRF's settings (parser classes, this
    # handler) when it is first imported, so importing it at module level invites a cycle.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, AppError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status_code)
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, drf_exceptions.ValidationError):
        # Serializer errors ({"field": ["message"], "nested": {...}}) in the one details shape.
        problems = Problems.from_field_errors(response.data)
        message = problems.summary("The request")
        details: Any = problems.details()
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        message = str(detail) or code.replace("_", " ")
        details = {}
    response.data = error_body(code, message, details)
    return response


def not_found_handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: under /api/ a URL that matches no route (e.g. `/api/tokens/abc`) answers in
    the one error shape, like every other API 404; pages keep Django's HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "No such API endpoint or resource."),
                            status=status.HTTP_404_NOT_FOUND)
    return page_not_found(request, exception or Http404())


def server_error_handler(request: HttpRequest) -> HttpResponse:
    """handler500: API clients get the one error shape (never a traceback: DEBUG is off)."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("server_error", "Internal server error."),
                            status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    return server_error(request)
