"""Typed application errors and the one place where every API error is rendered.

Every 4xx/5xx body has the shape ``{"error": {"code", "message", "details"}}`` so that clients
need one parser. Services raise the subclasses below; views never build error bodies by hand.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found, server_error
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response


class AppError(Exception):
    """Base class of errors that services raise for the API layer to render."""

    status_code: int = status.HTTP_400_BAD_REQUEST
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
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


class Forbidden(AppError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "forbidden"


class Conflict(AppError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    code = "unsupported_media_type"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


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
    # Imported here: rest_framework.views loads the parser classes (reviewhub.api.parsers,
    # which import this module) when it is first imported.
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
        message = "The request did not validate; see details for each field."
        details: Any = response.data
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
