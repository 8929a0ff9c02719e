"""Request limits and response headers that every view gets, whoever wrote it.

- `RequestLimitsMiddleware`: request bodies are bounded before anything reads them (413 past
  the limit, 411 without a Content-Length), and clients presenting bad API tokens are
  throttled (429).
- `StaticFilesMiddleware`: WhiteNoise, serving /static/ from the web process.
- `SecurityHeadersMiddleware`: a default Content-Security-Policy on every HTML page that sets
  none of its own, `Cache-Control: no-store` on API responses, and Secure session and CSRF
  cookies on every https response.

Error bodies use the API's one shape, `{"error": {"code", "message", "details"}}`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware

from reviewhub.errors import AppError, error_body

from .throttling import CACHE_ERRORS, TokenFailureThrottle

# A view class with this attribute set reads its body itself, from the stream, under a limit of
# its own (the bulk-ingest views: REVIEWHUB_MAX_UPLOAD_BYTES, checked against Content-Length
# before reading and again while spooling). Every other view gets REVIEWHUB_MAX_REQUEST_BYTES.
STREAMS_BODY_ATTRIBUTE = "streams_request_body"

logger = logging.getLogger(__name__)

_TOKEN_KEYWORDS = ("bearer", "token")

# Seconds a client is asked to wait when the throttle's cache (Redis) cannot be reached.
CACHE_DOWN_RETRY_AFTER = 30


class LengthRequired(AppError):
    status_code = 411
    code = "length_required"


def _error(status: int, code: str, message: str, details: Any = None) -> JsonResponse:
    return JsonResponse(error_body(code, message, details), status=status)


def length_required_message() -> str:
    return ("This endpoint needs a Content-Length header; chunked transfer encoding is not "
            "accepted. Send the body in one piece (for example `curl --data-binary @file`).")


def _cache_down(exc: BaseException) -> JsonResponse:
    """503 for a token request while the throttle's cache (Redis) is unreachable: without the
    failure count the throttle cannot decide, and letting the request through unthrottled
    would reopen token guessing whenever Redis is down."""
    logger.warning("throttle cache unavailable: %s", exc)
    response = _error(
        503, "service_unavailable",
        "A service this server depends on (the cache that counts failed API tokens, Redis) "
        f"is unavailable; retry in {CACHE_DOWN_RETRY_AFTER} s.",
        {"retry_after_s": CACHE_DOWN_RETRY_AFTER, "dependency": "cache"},
    )
    response["Retry-After"] = str(CACHE_DOWN_RETRY_AFTER)
    return response


def _content_length(request: HttpRequest) -> int | None:
    raw = request.META.get("CONTENT_LENGTH")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _has_token(request: HttpRequest) -> bool:
    words = str(request.META.get("HTTP_AUTHORIZATION", "")).split()
    return bool(words) and words[0].lower() in _TOKEN_KEYWORDS


def _streams_body(view_func: Callable[..., Any]) -> bool:
    view_class = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None)
    return bool(getattr(view_class, STREAMS_BODY_ATTRIBUTE, False))


class RequestLimitsMiddleware:
    """Body size limits (checked before any body is read) and the bad-token throttle.

    Placed before CsrfViewMiddleware, whose process_view reads form bodies. WSGI servers hand
    Django at most Content-Length bytes, so checking the declared length bounds every read; a
    body without one (chunked transfer encoding) would be read as empty and is refused with
    411 instead of being mistaken for an empty request; so is one with both headers.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.META.get("HTTP_TRANSFER_ENCODING"):
            # Refused even beside a Content-Length: HTTP lets Transfer-Encoding override it, so
            # a server that framed the body by the length would read the chunk markers as data
            # (and a chunked body missing its last chunk would look whole).
            return _error(411, LengthRequired.code, length_required_message())
        throttle: TokenFailureThrottle | None = None
        if _has_token(request):
            throttle = TokenFailureThrottle()
            try:
                wait = throttle.seconds_locked(request)
            except CACHE_ERRORS as exc:
                return _cache_down(exc)
            if wait is not None:
                refused = _error(
                    429, "throttled",
                    f"Too many requests with an invalid API token from this address; retry in "
                    f"{math.ceil(wait)} s.",
                    {"retry_after_s": math.ceil(wait)},
                )
                refused["Retry-After"] = str(math.ceil(wait))
                return refused
        response = self.get_response(request)
        if throttle is not None and response.status_code == 401:
            try:
                throttle.record_failure()
            except CACHE_ERRORS as exc:
                return _cache_down(exc)
        return response

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any,
        view_kwargs: Any,
    ) -> HttpResponse | None:
        if _streams_body(view_func):
            return None
        limit = settings.REVIEWHUB_MAX_REQUEST_BYTES
        length = _content_length(request)
        if length is not None and length > limit:
            return _error(
                413, "payload_too_large",
                f"The request body of {length:,} bytes is larger than this endpoint's limit of "
                f"{limit:,} bytes (REVIEWHUB_MAX_REQUEST_BYTES); only the bulk-ingest "
                "endpoints take large bodies.",
                {"limit_bytes": limit},
            )
        return None


def csp_policy(policy: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Give one view its own Content-Security-Policy instead of the site default."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            response = view(request, *args, **kwargs)
            response.headers.setdefault("Content-Security-Policy", policy)
            return response

        return wrapper

    return decorate


class SecurityHeadersMiddleware:
    """Default CSP on HTML responses that set none; `no-store` on API responses.

    Views with a stricter or special policy of their own keep it (the header is only added
    when absent). API responses carry study data and tokens; no shared or browser cache may
    keep them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        content_type = response.get("Content-Type", "")
        if content_type.startswith("text/html"):
            response.headers.setdefault("Content-Security-Policy", settings.REVIEWHUB_CSP)
        if request.path_info.startswith("/api/") and not content_type.startswith("text/html"):
            response["Cache-Control"] = "no-store"
        if request.is_secure():
            # Served over https (directly, or a trusted proxy says so): the cookies that carry
            # the session never travel over plain http later, whatever the settings say.
            for name in (settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME):
                if name in response.cookies:
                    response.cookies[name]["secure"] = True
        return response


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, quiet about a STATIC_ROOT that `collectstatic` has not made.

    Serving from the finders (REVIEWHUB_STATIC_USE_FINDERS, the default) a missing STATIC_ROOT
    is the normal case, and WhiteNoise would warn about it in every process.
    """

    def add_files(self, root: str, prefix: str | None = None) -> None:
        if self.use_finders and not os.path.isdir(root):
            return
        super().add_files(root, prefix)
