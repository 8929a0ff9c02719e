"""Provider wire formats and error mapping with httpx.MockTransport (no sockets)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from judges.providers import (
    ChatMessage,
    PermanentProviderError,
    ProviderConfigError,
    ProviderRequest,
    TransientProviderError,
    provider_call,
    provider_call_async,
    provider_prepare,
    retry_after_seconds,
    serialize_body,
)
from judges.providers.transport import ShardedAsyncTransport, _shard_sizes

MESSAGES = (ChatMessage("system", "Be strict."), ChatMessage("user", "Grade this."))
SCHEMA = {"name": "verdict", "schema": {"type": "object"}, "strict": True}


def make(provider: str = "openai", **kw: object) -> ProviderRequest:
    base = "https://api.openai.com/v1" if provider == "openai" else "https://api.anthropic.com"
    fields: dict[str, object] = {"provider": provider, "base_url": base, "model": "m",
                                 "api_key": "sk-secret-value-1234", "messages": MESSAGES}
    fields.update(kw)
    return ProviderRequest(**fields)  # type: ignore[arg-type]


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def openai_body(content: object = '{"verdict": "pass"}', **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5},
    }
    body.update(extra)
    return body


def test_openai_request_shape() -> None:
    call = provider_prepare(make(temperature=0.0, max_tokens=64, seed=3, response_format=SCHEMA,
                                 logprobs=True, top_logprobs=4, extra={"top_p": 0.5,
                                                                       "model": "evil"}))
    assert call.method == "POST"
    assert call.url == "https://api.openai.com/v1/chat/completions"
    assert call.headers["Authorization"] == "Bearer sk-secret-value-1234"
    assert call.body == {
        "model": "m",
        "messages": [{"role": "system", "content": "Be strict."},
                     {"role": "user", "content": "Grade this."}],
        "temperature": 0.0, "max_tokens": 64, "seed": 3,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "verdict", "schema": {"type": "object"},
                                            "strict": True}},
        "logprobs": True, "top_logprobs": 4, "top_p": 0.5,
    }


def test_openai_max_completion_tokens_replaces_max_tokens() -> None:
    call = provider_prepare(make(max_tokens=64, extra={"max_completion_tokens": 64}))
    assert "max_tokens" not in call.body and call.body["max_completion_tokens"] == 64


def test_no_key_no_auth_header() -> None:
    assert "Authorization" not in provider_prepare(make(api_key=None)).headers
    assert "x-api-key" not in provider_prepare(make("anthropic", api_key=None)).headers


def test_anthropic_request_shape() -> None:
    call = provider_prepare(make("anthropic", temperature=0.2, seed=9, response_format=SCHEMA,
                                 logprobs=True))
    assert call.url == "https://api.anthropic.com/v1/messages"
    assert call.headers["x-api-key"] == "sk-secret-value-1234"
    assert call.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in call.headers
    assert call.body["system"] == "Be strict."
    assert call.body["messages"] == [{"role": "user", "content": "Grade this."}]
    assert call.body["max_tokens"] == 1024  # required by the API
    assert "seed" not in call.body and "logprobs" not in call.body
    assert call.body["tools"][0]["input_schema"] == {"type": "object"}
    assert call.body["tool_choice"] == {"type": "tool", "name": "record_verdict"}


@pytest.mark.parametrize(("base", "url"), [
    ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
    ("https://api.anthropic.com/", "https://api.anthropic.com/v1/messages"),
    ("http://127.0.0.1:4000/v1", "http://127.0.0.1:4000/v1/messages"),
])
def test_anthropic_base_url_convention(base: str, url: str) -> None:
    assert provider_prepare(make("anthropic", base_url=base)).url == url


def test_repr_never_shows_key() -> None:
    request = make()
    assert "sk-secret" not in repr(request) and "sk-secret" not in str(request)
    call = provider_prepare(request)
    assert "sk-secret" not in repr(call)
    assert call.redacted_headers()["Authorization"] == "REDACTED"


def test_openai_result_fields_and_logprobs() -> None:
    logprobs = {"content": [
        {"token": "pass", "logprob": -0.1, "top_logprobs": [{"token": "pass", "logprob": -0.1},
                                                             {"token": "fail", "logprob": -2.4}]},
        {"token": "!", "logprob": "bad"},  # malformed entries are skipped, not fatal
    ]}
    body = openai_body("pass")
    body["choices"][0]["logprobs"] = logprobs  # type: ignore[index]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body, headers={"x-request-id": "req_abc"})

    result = provider_call(mock(handler), make(logprobs=True))
    assert (result.text, result.request_id, result.tokens_in, result.tokens_out) == (
        "pass", "req_abc", 11, 5)
    assert result.logprobs is not None and len(result.logprobs) == 1
    assert result.logprobs[0].top == (("pass", -0.1), ("fail", -2.4))
    assert result.raw["id"] == "chatcmpl-1"


def test_request_id_falls_back_to_body_id() -> None:
    result = provider_call(mock(lambda r: httpx.Response(200, json=openai_body())), make())
    assert result.request_id == "chatcmpl-1"


def test_sent_bytes_equal_serialized_body() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, json=openai_body())

    request = make(messages=(ChatMessage("user", "naïve «quotes» ✓"),))
    provider_call(mock(handler), request)
    assert seen == [serialize_body(provider_prepare(request).body)]


@pytest.mark.parametrize(("body", "reason"), [
    (openai_body(None), "message has no text content"),
    (openai_body(None, choices=[{"message": {"content": None, "refusal": "no way"}}]),
     "model refused: no way"),
    ({"choices": []}, "empty choice list"),
    ({"object": "chat.completion"}, "empty choice list"),
    ({"choices": ["x"]}, "choice has no message"),
    ([1, 2], "not an object"),
])
def test_unusable_2xx_bodies_are_permanent(body: object, reason: str) -> None:
    with pytest.raises(PermanentProviderError) as info:
        provider_call(mock(lambda r: httpx.Response(200, json=body)), make())
    assert reason in info.value.reason


def test_non_json_2xx_is_permanent() -> None:
    with pytest.raises(PermanentProviderError) as info:
        provider_call(mock(lambda r: httpx.Response(200, content=b"OK")), make())
    assert "not JSON" in info.value.reason and info.value.body_excerpt == "OK"


def test_redirect_is_not_followed() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(302, headers={"Location": "https://evil.example/"})

    from judges.providers import http_client

    client = http_client()
    client._transport = httpx.MockTransport(handler)
    with pytest.raises(PermanentProviderError) as info:
        provider_call(client, make())
    assert info.value.http_status == 302 and len(calls) == 1


def test_anthropic_result_text_blocks_and_usage() -> None:
    body = {"id": "msg_1", "type": "message", "content": [
        {"type": "text", "text": "Fine.\n"}, {"type": "text", "text": "VERDICT: pass"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 20, "output_tokens": 4}}
    result = provider_call(mock(lambda r: httpx.Response(200, json=body,
                                                         headers={"request-id": "req_9"})),
                           make("anthropic"))
    assert result.text == "Fine.\nVERDICT: pass"
    assert (result.tokens_in, result.tokens_out, result.request_id) == (20, 4, "req_9")
    assert result.finish_reason == "end_turn"


def test_anthropic_without_text_or_tool_is_permanent() -> None:
    body = {"type": "message", "content": [{"type": "tool_use", "name": "other", "input": {}}]}
    with pytest.raises(PermanentProviderError) as info:
        provider_call(mock(lambda r: httpx.Response(200, json=body)), make("anthropic"))
    assert "no text content" in info.value.reason


def test_anthropic_overloaded_529_is_transient() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(TransientProviderError) as info:
        provider_call(mock(lambda r: httpx.Response(529, json=body)), make("anthropic"))
    assert "Overloaded" in info.value.reason


def test_timeout_and_network_errors_map_to_transient() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def reset(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("Connection reset by peer", request=request)

    with pytest.raises(TransientProviderError, match="timeout"):
        provider_call(mock(timeout), make())
    with pytest.raises(TransientProviderError, match="Connection reset"):
        provider_call(mock(reset), make())


def test_unknown_provider_is_config_error() -> None:
    with pytest.raises(ProviderConfigError):
        provider_prepare(make(provider="cohere"))


def test_nan_in_body_refused_before_sending() -> None:
    with pytest.raises(ProviderConfigError):
        provider_call(mock(lambda r: httpx.Response(200, json=openai_body())),
                      make(temperature=float("nan")))


def test_async_call_with_mock_transport() -> None:
    async def run() -> str:
        transport = httpx.MockTransport(lambda r: httpx.Response(200, json=openai_body("ok")))
        async with httpx.AsyncClient(transport=transport) as client:
            return (await provider_call_async(client, make())).text

    assert asyncio.run(run()) == "ok"


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "3"}, 3.0),
    ({"retry-after": "0.5"}, 0.5),
    ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # in the past: no wait
    ({"Retry-After": "soon"}, None),
    ({"Retry-After": "-4"}, None),
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
    ({"retry-after-ms": "x", "Retry-After": "9"}, 9.0),
    ({}, None),
])
def test_retry_after_parsing(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_http_date_relative_to_now() -> None:
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT"},
                               now=1445412480.0) == pytest.approx(30.0)


def test_shard_sizes_cover_max_connections() -> None:
    for total in (1, 3, 4, 5, 64, 256, 257):
        sizes = _shard_sizes(total)
        assert sum(sizes) == total and max(sizes) - min(sizes) <= 1


def test_sharded_transport_spreads_load() -> None:
    transport = ShardedAsyncTransport(max_connections=8)
    assert len(transport._shards) == 2
    transport._in_flight = [2, 0]
    assert transport._pick() == 1
    asyncio.run(transport.aclose())


def test_body_excerpt_is_bounded() -> None:
    big = b"<html>" + b"x" * 100_000
    with pytest.raises(TransientProviderError) as info:
        provider_call(mock(lambda r: httpx.Response(503, content=big)), make())
    assert len(info.value.body_excerpt) <= 501
    assert json.dumps(info.value.reason)


@pytest.mark.parametrize("template", [
    make(),
    make(temperature=0.0, max_tokens=64, seed=7, response_format=SCHEMA, logprobs=True,
         top_logprobs=5),
    # A nested "messages" member in a vendor parameter: the splice is the top-level one.
    make(model='m "messages":[] x', extra={"metadata": {"messages": []}, "top_p": 0.5}),
    make("anthropic", response_format=SCHEMA),  # encoded in full
])
def test_wire_template_bytes_equal_the_full_encoding(template: ProviderRequest) -> None:
    from dataclasses import replace

    from judges.providers import WireTemplate

    wire = WireTemplate(template)
    for messages in [MESSAGES, (ChatMessage("user", 'naïve «quotes» ✓ "x" \\ \n'),), (),
                     (ChatMessage("system", "s"), ChatMessage("user", "a" * 5000))]:
        request = replace(template, messages=messages)
        call, content = wire.wire(request)
        full = provider_prepare(request)
        assert content == serialize_body(full.body)
        assert (call.method, call.url, dict(call.headers)) == (full.method, full.url,
                                                               dict(full.headers))


def test_async_call_sends_the_given_wire_bytes() -> None:
    from judges.providers import WireTemplate

    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, json=openai_body("ok"))

    async def run() -> str:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            request = make(response_format=SCHEMA)
            wire = WireTemplate(request).wire(request)
            return (await provider_call_async(client, request, wire)).text

    assert asyncio.run(run()) == "ok"
    assert seen == [serialize_body(provider_prepare(make(response_format=SCHEMA)).body)]
