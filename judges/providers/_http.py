"""Status-code and body classification shared by both wire formats."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from .base import (
    PermanentProviderError,
    ProviderResult,
    TokenLogprob,
    TransientProviderError,
    body_excerpt,
    error_message_from_body,
    looks_like_html,
    retry_after_seconds,
)
from .http1 import ResponseHeaders

# 408 is the server giving up waiting for us: a timeout, so it is retried like one. Every
# other 4xx (bad request, auth, not found, 409/422 validation) will fail the same way again.
TRANSIENT_4XX = frozenset({408, 429})


def json_body_or_raise(
    *, status: int, headers: Mapping[str, str], content: bytes
) -> dict[str, Any]:
    """Return the JSON object of a 2xx body, or raise the right provider error."""
    if status in TRANSIENT_4XX or 500 <= status <= 599:
        message = error_message_from_body(content)
        if message is None and looks_like_html(content):
            message = "HTML error page"
        label = "rate limited (HTTP 429)" if status == 429 else f"HTTP {status}"
        reason = f"{label}: {message}" if message else label
        raise TransientProviderError(
            reason,
            http_status=status,
            body_excerpt=body_excerpt(content),
            retry_after_s=retry_after_seconds(headers),
        )
    if not 200 <= status <= 299:
        message = error_message_from_body(content)
        if message is None and looks_like_html(content):
            message = "HTML error page"
        reason = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        raise PermanentProviderError(reason, http_status=status,
            body_excerpt=body_excerpt(content))
    if looks_like_html(content):
        raise PermanentProviderError(
            "response body is an HTML page, not JSON", http_status=status,
            body_excerpt=body_excerpt(content)
        )
    try:
        data = json.loads(content)
    except UnicodeDecodeError:
        raise PermanentProviderError(
            "response body is not UTF-8", http_status=status, body_excerpt=body_excerpt(content)
        ) from None
    except json.JSONDecodeError as exc:
        reason = (
            "truncated JSON body"
            if content.strip().startswith((b"{", b"["))
            else "response body is not JSON"
        )
        raise PermanentProviderError(
            f"{reason} ({exc.msg} at char {exc.pos})", http_status=status,
            body_excerpt=body_excerpt(content)
        ) from None
    if not isinstance(data, dict):
        raise PermanentProviderError(
            "response body is JSON but not an object", http_status=status,
            body_excerpt=body_excerpt(content)
        )
    return data


def optional_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def header(headers: Mapping[str, str], name: str) -> str | None:
    if isinstance(headers, httpx.Headers | ResponseHeaders):  # case-insensitive, no scan
        return headers.get(name)
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return value
    return None


def result_from_body(
    data: dict[str, Any],
    *,
    text: str,
    finish: Any,
    status: int,
    headers: Mapping[str, str],
    request_id_header: str,
    usage_keys: tuple[str, str],
    latency_ms: float,
    logprobs: tuple[TokenLogprob, ...] | None,
) -> ProviderResult:
    """The result both wire formats build once their text is found.

    The formats differ only in names: the request-id header, the usage keys (tokens in, tokens
    out) and where the finish reason sits; a body without the header still names its id.
    """
    usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
    request_id = header(headers, request_id_header)
    if request_id is None and isinstance(data.get("id"), str):
        request_id = data["id"]
    return ProviderResult(
        text=text,
        finish_reason=finish if isinstance(finish, str) else None,
        http_status=status,
        request_id=request_id,
        tokens_in=optional_int(usage.get(usage_keys[0])),
        tokens_out=optional_int(usage.get(usage_keys[1])),
        latency_ms=latency_ms,
        logprobs=logprobs,
        raw=data,
    )
