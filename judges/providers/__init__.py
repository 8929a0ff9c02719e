"""Provider clients on httpx: `provider_call` / `provider_call_async` and pooled clients.

The interface is `ProviderRequest` in, `ProviderResult` out, `TransientProviderError` or
`PermanentProviderError` raised (see docs/judges.md for the mapping). Retrying is the caller's
job (the judge queue owns the retry policy); a call here is exactly one HTTP request.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

import httpx

from . import anthropic, openai, streaming
from .base import (
    PROVIDERS,
    ChatMessage,
    PermanentProviderError,
    PreparedCall,
    ProviderConfigError,
    ProviderError,
    ProviderRequest,
    ProviderResult,
    TokenLogprob,
    TransientProviderError,
    retry_after_seconds,
)
from .http1 import LeanAsyncTransport, LeanResponse
from .transport import ShardedTransport, pool_limits

__all__ = [
    "PROVIDERS",
    "AsyncRequester",
    "ChatMessage",
    "LeanAsyncTransport",
    "LeanResponse",
    "PermanentProviderError",
    "PreparedCall",
    "ProviderAsyncClient",
    "ProviderConfigError",
    "ProviderError",
    "ProviderRequest",
    "ProviderResult",
    "TokenLogprob",
    "TransientProviderError",
    "WireTemplate",
    "http_client",
    "http_client_async",
    "provider_call",
    "provider_call_async",
    "provider_prepare",
    "retry_after_seconds",
    "serialize_body",
]

USER_AGENT = f"ReviewHub (python-httpx/{httpx.__version__})"

# Distinct URLs a `ProviderAsyncClient` keeps parsed.
URL_CACHE_SIZE = 64

# Connecting is quick or not at all; a provider still thinking is what the long read is for.
CONNECT_TIMEOUT_S = 10.0


@functools.lru_cache(maxsize=32)
def _timeout(timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(
        connect=min(CONNECT_TIMEOUT_S, timeout_s), read=timeout_s, write=timeout_s, pool=timeout_s
    )


class ProviderAsyncClient:
    """The part of `httpx.AsyncClient` a judge call uses: one request through one transport.

    `httpx.AsyncClient.request` also merges a base URL, cookies and params, runs auth and
    redirect flows and stores response cookies: a fifth of the client's CPU per call in the
    judge benchmark, none of which a provider call needs (redirects are refused anyway: a judge
    talks to the allow-listed URL it was configured with). Same `request()` signature and the
    same `httpx.HTTPError`s, so `provider_call_async` takes either. On a
    `LeanAsyncTransport` (what `http_client_async` gives) the request goes to the transport
    as it is, without an `httpx.Request`, and the answer is a `LeanResponse` (status code,
    case-insensitive headers, content, text, json(), request); on any other httpx transport it
    is an `httpx.Response`.
    """

    def __init__(self, *, transport: httpx.AsyncBaseTransport, timeout: httpx.Timeout) -> None:
        self._transport = transport
        self._lean = transport if isinstance(transport, LeanAsyncTransport) else None
        self._timeout = timeout
        # Parsed once per URL: a client talks to a handful of endpoints, and parsing the same
        # URL for every call was ~4% of a judge worker's CPU.
        self._urls: dict[str, httpx.URL] = {}

    async def request(
        self, method: str, url: str, *, headers: Mapping[str, str], content: bytes,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response | LeanResponse:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= URL_CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        if self._lean is not None:  # adds the User-Agent itself when none is given
            return await self._lean.send(method, parsed, headers, content,
                                         timeout or self._timeout)
        all_headers = dict(headers)
        if not any(k.lower() == "user-agent" for k in all_headers):
            all_headers["User-Agent"] = USER_AGENT
        request = httpx.Request(
            method, parsed, headers=all_headers, content=content,
            extensions={"timeout": (timeout or self._timeout).as_dict()},
        )
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> ProviderAsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class ProviderResponse(Protocol):
    """What a provider call reads of an answer (`httpx.Response` and `LeanResponse` have it)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


class AsyncRequester(Protocol):
    """What `provider_call_async` needs: `ProviderAsyncClient` or an `httpx.AsyncClient`."""

    async def request(
        self, method: str, url: str, *, headers: dict[str, str], content: bytes,
        timeout: httpx.Timeout,
    ) -> ProviderResponse: ...


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def _environment_sets_proxy() -> bool:
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES)


def http_client_async(
    *, max_connections: int = 256, timeout_s: float = 60.0
) -> ProviderAsyncClient | httpx.AsyncClient:
    """A pooled async client with explicit connect/read/write/pool timeouts.

    At most `max_connections` keep-alive connections in one `LeanAsyncTransport` (HTTP/1.1 on
    asyncio protocols, see `http1.py`). Redirects are not followed: a judge must talk to the
    allow-listed URL it was configured with.

    When the environment names an HTTP(S) proxy, this is a stock `httpx.AsyncClient` with its
    own transport instead: httpx only routes through environment proxies (and honours
    NO_PROXY) when it builds the transport itself, so the lean pool cannot be used there.
    """
    if _environment_sets_proxy():
        return httpx.AsyncClient(
            timeout=_timeout(timeout_s), limits=pool_limits(max_connections),
            follow_redirects=False, headers={"User-Agent": USER_AGENT},
        )
    return ProviderAsyncClient(
        transport=LeanAsyncTransport(max_connections=max_connections, user_agent=USER_AGENT),
        timeout=_timeout(timeout_s),
    )


def http_client(*, max_connections: int = 64, timeout_s: float = 60.0) -> httpx.Client:
    """A pooled sync client with explicit timeouts (see `http_client_async`, proxies too)."""
    if _environment_sets_proxy():
        return httpx.Client(
            timeout=_timeout(timeout_s), limits=pool_limits(max_connections),
            follow_redirects=False, headers={"User-Agent": USER_AGENT},
        )
    return httpx.Client(
        timeout=_timeout(timeout_s),
        transport=ShardedTransport(max_connections=max_connections),
        follow_redirects=False, headers={"User-Agent": USER_AGENT},
    )


def _module(provider: str) -> Any:
    if provider == "openai":
        return openai
    if provider == "anthropic":
        return anthropic
    raise ProviderConfigError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")


def provider_prepare(request: ProviderRequest) -> PreparedCall:
    """The exact HTTP request (method, URL, headers, JSON body) a call would send."""
    return _module(request.provider).prepare(request)


def serialize_body(body: Mapping[str, Any]) -> bytes:
    # The bytes on the wire are produced here (not by httpx) so that the preview shows them
    # exactly. NaN/Infinity are not JSON and are refused before anything is sent.
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:
        raise ProviderConfigError(f"request body is not valid JSON: {exc}") from None


class WireTemplate:
    """The wire form shared by requests that differ only in their messages.

    A judge run sends one request per subject that differs from the others only in its
    messages; encoding the rest (model, parameters, the verdict's JSON schema) again for every
    call was ~4% of a worker's CPU. For the OpenAI format the body is this template's JSON
    with the messages array spliced in, byte for byte what `serialize_body(provider_prepare(
    request).body)` gives (`json.dumps` writes the members of an object in order, each
    encoded on its own). Other formats (Anthropic moves system messages to a field of their
    own) are encoded in full.
    """

    _MARKER = b'"messages":[]'

    def __init__(self, template: ProviderRequest) -> None:
        self.template = template
        self.call = provider_prepare(dataclasses.replace(template, messages=()))
        head, tail = b"", b""
        if template.provider in ("openai", "anthropic"):
            text = serialize_body(self.call.body)
            # The first occurrence is the top-level member: only "model" (a string, in which
            # a quote is always escaped) and Anthropic's "max_tokens" come before it.
            at = text.find(self._MARKER)
            if at >= 0:
                head, tail = text[: at + len(b'"messages":')], text[at + len(self._MARKER):]
        self._head, self._tail = head, tail
        self._head_text, self._tail_text = head.decode(), tail.decode()
        self._anthropic = template.provider == "anthropic"

    def prompt_body(self, system: str, user: str) -> bytes | None:
        """The body bytes of the template with the messages (system `system`, user `user`),
        byte for byte what `serialize_body(provider_prepare(request).body)` gives for such a
        request: the two texts JSON-escaped (each character on its own, as `json.dumps`
        does) between the template's encoded parts. Anthropic takes the system text as a
        member of its own, right after "messages" (omitted when empty). None when the
        template cannot be spliced or a text cannot be encoded (the caller then encodes the
        request in full, which raises what it raises)."""
        if not self._head:
            return None
        if self._anthropic:
            text = "".join((self._head_text, '[{"role":"user","content":', _json_string(user),
                            "}]", ',"system":' + _json_string(system) if system else "",
                            self._tail_text))
        else:
            text = "".join((self._head_text, '[{"role":"system","content":',
                            _json_string(system), '},{"role":"user","content":',
                            _json_string(user), "}]", self._tail_text))
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return None

    def wire(self, request: ProviderRequest) -> tuple[PreparedCall, bytes]:
        """(the HTTP request, its body bytes) for `request`, which must be the template with
        other messages (every other field equal: the caller builds it from the template)."""
        if not self._head or self._anthropic:
            call = provider_prepare(request)
            return call, serialize_body(call.body)
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        return self.call, self._head + serialize_body({"m": messages})[5:-1] + self._tail


# The string encoder `json.dumps(..., ensure_ascii=False)` uses (C when available), so a text
# escaped here is the same bytes as inside a body `serialize_body` writes.
_json_string = json.encoder.encode_basestring


def _transport_error(exc: httpx.HTTPError) -> ProviderError:
    kind = type(exc).__name__
    detail = str(exc)[:200]
    if isinstance(exc, httpx.TimeoutException):
        return TransientProviderError(f"timeout ({kind}){': ' + detail if detail else ''}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        return PermanentProviderError(f"cannot send request ({kind}): {detail}")
    if isinstance(exc, httpx.DecodingError):
        return PermanentProviderError(f"undecodable response body ({kind}): {detail}")
    # ConnectError, ReadError, WriteError, RemoteProtocolError (reset, closed mid-body), proxy
    # errors: the request may never have reached the model, so it is worth another try.
    return TransientProviderError(f"connection error ({kind}){': ' + detail if detail else ''}")


def _interpret(
    request: ProviderRequest, response: ProviderResponse, latency_ms: float, *,
    tool_calls_ok: bool = False,
) -> ProviderResult:
    try:
        return _module(request.provider).interpret(
            request,
            status=response.status_code,
            headers=response.headers,
            content=response.content,
            latency_ms=latency_ms,
        )
    except PermanentProviderError:
        if not tool_calls_ok:
            raise
        calls = _tool_call_answer(request, response, latency_ms)
        if calls is None:
            raise
        return calls


def _tool_call_answer(request: ProviderRequest, response: ProviderResponse,
                      latency_ms: float) -> ProviderResult | None:
    """A 2xx answer with tool calls and no text (which the interpreters refuse as having no
    text): its text is the calls as JSON (`streaming.tool_calls_of`), the body kept as raw."""
    if not 200 <= response.status_code <= 299:
        return None
    try:
        data = json.loads(response.content)
    except ValueError:
        return None
    calls = streaming.tool_calls_of(request.provider, data)
    if not calls:
        return None
    if request.provider == "anthropic":
        finish, usage = data.get("stop_reason"), data.get("usage") or {}
        tokens = (usage.get("input_tokens"), usage.get("output_tokens"))
    else:
        finish = (data.get("choices") or [{}])[0].get("finish_reason")
        usage = data.get("usage") or {}
        tokens = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    return ProviderResult(
        text=json.dumps(calls, ensure_ascii=False), http_status=response.status_code,
        finish_reason=finish if isinstance(finish, str) else None,
        request_id=response.headers.get("x-request-id") or response.headers.get("request-id")
        or (data.get("id") if isinstance(data.get("id"), str) else None),
        tokens_in=tokens[0] if isinstance(tokens[0], int) else None,
        tokens_out=tokens[1] if isinstance(tokens[1], int) else None,
        latency_ms=latency_ms, logprobs=None, raw=data)


def provider_call(client: httpx.Client, request: ProviderRequest) -> ProviderResult:
    """Send one request and return its result; raise Transient/PermanentProviderError."""
    call = provider_prepare(request)
    content = serialize_body(call.body)
    start = time.perf_counter()
    try:
        response = client.request(
            call.method, call.url, headers=dict(call.headers), content=content,
            timeout=_timeout(request.timeout_s),
        )
    except httpx.HTTPError as exc:
        raise _transport_error(exc) from exc
    latency_ms = (time.perf_counter() - start) * 1000.0
    return _interpret(request, response, latency_ms)


async def provider_call_async(
    client: AsyncRequester, request: ProviderRequest,
    wire: tuple[PreparedCall, bytes] | None = None,
) -> ProviderResult:
    """Async twin of `provider_call` (same request, same result, same errors).

    `wire`: the request's HTTP form and body bytes when the caller has them already
    (`WireTemplate.wire(request)`).
    """
    if wire is None:
        call = provider_prepare(request)
        content = serialize_body(call.body)
    else:
        call, content = wire
    if call.body.get("stream") is True:
        return await _provider_stream_async(client, request, call, content)
    start = time.perf_counter()
    try:
        response = await client.request(
            call.method, call.url, headers=dict(call.headers), content=content,
            timeout=_timeout(request.timeout_s),
        )
    except httpx.HTTPError as exc:
        raise _transport_error(exc) from exc
    latency_ms = (time.perf_counter() - start) * 1000.0
    # A request that offered the model its own tools (a candidate run's template or recorded
    # request; not a judge's forced verdict tool) may be answered by tool calls alone.
    tools = bool(call.body.get("tools")) and request.response_format is None
    return _interpret(request, response, latency_ms, tool_calls_ok=tools)


@dataclasses.dataclass(frozen=True)
class _ReadResponse:
    status_code: int
    headers: Mapping[str, str]
    content: bytes


async def _provider_stream_async(client: AsyncRequester, request: ProviderRequest,
                                 call: PreparedCall, content: bytes) -> ProviderResult:
    """A call whose body asks for a streamed answer (`"stream": true`): read through the lean
    pool piece by piece (`judges.providers.streaming`), with the time to the first text piece
    (`ttft_ms`) beside the time to the last byte (`latency_ms`). An answer that is not 2xx is
    read whole and interpreted as an unstreamed one (its error)."""
    lean = getattr(client, "_lean", None)
    if not isinstance(lean, LeanAsyncTransport):
        raise PermanentProviderError("streaming needs the direct HTTP/1.1 pool (not through "
                                     "a proxy)")
    url = httpx.URL(call.url)
    start = time.perf_counter()
    try:
        stream = await lean.stream(call.method, url, dict(call.headers), content,
                                   _timeout(request.timeout_s))
        try:
            if not 200 <= stream.status_code <= 299:
                body = await stream.read()
                latency_ms = (time.perf_counter() - start) * 1000.0
                return _interpret(request, _ReadResponse(stream.status_code, stream.headers,
                                                         body), latency_ms)
            answer = await streaming.assemble(request.provider, stream.pieces(),
                                              started_at=start)
        finally:
            await stream.aclose()
    except httpx.HTTPError as exc:
        raise _transport_error(exc) from exc
    end = time.perf_counter()
    return ProviderResult(
        text=answer.text, finish_reason=answer.finish_reason, http_status=stream.status_code,
        request_id=stream.headers.get("x-request-id") or answer.request_id,
        tokens_in=answer.tokens_in, tokens_out=answer.tokens_out,
        latency_ms=(end - start) * 1000.0, logprobs=None,
        raw={"streamed": True, "events": answer.events, "tool_calls": answer.tool_calls()},
        ttft_ms=None if answer.first_token_at is None
        else (answer.first_token_at - start) * 1000.0)
