"""The provider interface: a request dataclass in, a result dataclass out, typed errors.

Nothing here touches the ORM or leaks an `httpx.Response`; callers (the judge queue, the
preview) only ever see these types. The wire formats live in `openai.py` and `anthropic.py`.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROVIDERS = ("openai", "anthropic")

# Error bodies are recorded for the operator; a few hundred characters identify the problem
# without storing (or rendering) a whole HTML page per failed call.
BODY_EXCERPT_CHARS = 500


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log probability and the top alternatives at its position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ProviderRequest:
    provider: str  # "openai" (any OpenAI-compatible chat completions) | "anthropic"
    base_url: str  # e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1
    model: str
    api_key: str | None  # resolved by the caller from the env var NAME in the config
    messages: tuple[ChatMessage, ...]
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    # A JSON schema for structured output ({"name": ..., "schema": {...}}); see docs/judges.md.
    response_format: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    timeout_s: float = 60.0
    # Extra top-level JSON body fields (vendor parameters such as top_p, top_k,
    # max_completion_tokens); they never override the fields above.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print the key, not even in a traceback
        key = "None" if self.api_key is None else "'<redacted>'"
        return (
            f"ProviderRequest(provider={self.provider!r}, base_url={self.base_url!r}, "
            f"model={self.model!r}, api_key={key}, messages={len(self.messages)} messages)"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class ProviderResult:
    text: str
    finish_reason: str | None
    http_status: int
    request_id: str | None
    tokens_in: int | None
    tokens_out: int | None
    latency_ms: float
    logprobs: tuple[TokenLogprob, ...] | None  # generated tokens with their top alternatives
    raw: Mapping[str, Any]  # the parsed JSON body (for the record)
    # Streamed calls: time from sending the request to the first text piece.
    ttft_ms: float | None = None


@dataclass(frozen=True)
class PreparedCall:
    """The exact HTTP request a `ProviderRequest` becomes (used by the preview, too)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]

    def __repr__(self) -> str:
        return f"PreparedCall({self.method} {self.url}, headers={self.redacted_headers()})"

    __str__ = __repr__

    def redacted_headers(self) -> dict[str, str]:
        return {
            k: ("REDACTED" if k.lower() in SECRET_HEADERS else v) for k, v in self.headers.items()
        }


SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


class ProviderError(Exception):
    """A provider call that produced no usable result. `reason` is short and human-readable."""

    transient = False

    def __init__(
        self, reason: str, *, http_status: int | None = None, body_excerpt: str = ""
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.http_status = http_status
        self.body_excerpt = body_excerpt

    def __str__(self) -> str:
        return self.reason


class TransientProviderError(ProviderError):
    """Worth retrying: 408, 429, 5xx, timeouts, connection errors, bodies cut off mid-stream."""

    transient = True

    def __init__(
        self,
        reason: str,
        *,
        http_status: int | None = None,
        body_excerpt: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(reason, http_status=http_status, body_excerpt=body_excerpt)
        self.retry_after_s = retry_after_s


class PermanentProviderError(ProviderError):
    """Retrying will not help: other 4xx, or a 2xx whose body is unusable."""


class ProviderConfigError(PermanentProviderError):
    """The judge config cannot be turned into a call here (key env var unset, URL refused)."""


def body_excerpt(content: bytes) -> str:
    text = content[: BODY_EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    text = " ".join(text.split())
    if len(text) > BODY_EXCERPT_CHARS:
        return text[:BODY_EXCERPT_CHARS] + "…"
    return text


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` (delta-seconds or HTTP-date).

    Header lookup is case-insensitive (httpx.Headers is; plain dicts are normalised here).
    Unparseable values give None rather than an error: the caller falls back to its backoff.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0 and value == value:  # NaN check
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
        return seconds if seconds >= 0 and seconds == seconds else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def error_message_from_body(content: bytes) -> str | None:
    """The `error.message` of an OpenAI/Anthropic-style JSON error body, when there is one."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:300]
        if isinstance(err, str):
            return err[:300]
        if isinstance(data.get("message"), str):
            return data["message"][:300]
    return None


def looks_like_html(content: bytes) -> bool:
    head = content[:200].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or (
        head.startswith(b"<") and b"<html" in content[:2000].lower()
    )
