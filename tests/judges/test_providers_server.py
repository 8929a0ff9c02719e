"""Provider clients against the simulated provider over real sockets with real httpx."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from judges.providers import (
    ChatMessage,
    PermanentProviderError,
    ProviderRequest,
    ProviderResult,
    TransientProviderError,
    http_client,
    http_client_async,
    provider_call,
    provider_call_async,
)
from tests.judges.provider_server import (
    ProviderServer,
    connection_reset,
    empty_choices,
    html_page,
    rate_limited,
    raw,
    server_error,
    slow,
    success,
    truncated_body,
    truncated_json,
)

OUT = "<<<OUTPUT 0a1b2c3d>>>\n{text}\n<<<END OUTPUT 0a1b2c3d>>>"


def req(server: ProviderServer, provider: str = "openai", text: str = "fine", **kw: object
        ) -> ProviderRequest:
    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    fields: dict[str, object] = {
        "provider": provider, "base_url": base, "model": "sim", "api_key": "k-test-123",
        "messages": (ChatMessage("system", "Grade it."),
                     ChatMessage("user", OUT.format(text=text))),
        "timeout_s": 5.0,
    }
    fields.update(kw)
    return ProviderRequest(**fields)  # type: ignore[arg-type]


@pytest.fixture
def sim_server() -> Iterator[ProviderServer]:
    """The simulated provider on a random loopback port (see provider_server.py)."""
    with ProviderServer() as server:
        yield server


class AsyncOnRunner:
    """The async client (`http_client_async`: the executor's path, on the asyncio network
    backend) driven from a synchronous test by one event loop kept for the whole test, so that
    its pooled connections live across calls as they do in a worker."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.client = http_client_async(max_connections=8)

    def call(self, request: ProviderRequest) -> ProviderResult:
        return self.runner.run(provider_call_async(self.client, request))

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.close()


Client = httpx.Client | AsyncOnRunner


def call(client: Client, request: ProviderRequest) -> ProviderResult:
    """One provider call through the sync client or through the async one."""
    if isinstance(client, AsyncOnRunner):
        return client.call(request)
    return provider_call(client, request)


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """Every wire-protocol test runs through both clients: the sync one (previews, CLI) and
    the async one the judge executor uses."""
    if request.param == "sync":
        with http_client(max_connections=8) as c:
            yield c
    else:
        adapter = AsyncOnRunner()
        try:
            yield adapter
        finally:
            adapter.close()


def test_openai_success_records_usage_id_and_headers(sim_server: ProviderServer,
                                                      client: Client) -> None:
    result = call(client, req(sim_server, text="good answer"))
    assert json.loads(result.text)["verdict"] == "pass"
    assert result.http_status == 200
    assert result.request_id and result.request_id.startswith("req_sim_")
    assert result.tokens_in and result.tokens_out
    assert result.finish_reason == "stop"
    assert result.latency_ms > 0
    assert result.logprobs is None
    recorded = sim_server.requests[-1]
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer k-test-123"
    assert recorded.json["messages"][0] == {"role": "system", "content": "Grade it."}


def test_rule_judge_fails_bad_outputs(sim_server: ProviderServer, client: Client) -> None:
    result = call(client, req(sim_server, text="wrong [bad]"))
    assert json.loads(result.text)["verdict"] == "fail"


def test_openai_logprobs_and_structured_output(sim_server: ProviderServer,
                                               client: Client) -> None:
    schema = {"type": "object", "properties": {"verdict": {"type": "string",
                                                          "enum": ["1", "2", "3"]}}}
    result = call(client, req(sim_server, text="meh [score=2] [p=0.7]", logprobs=True,
                                       top_logprobs=3,
                                       response_format={"name": "verdict", "schema": schema}))
    assert json.loads(result.text)["verdict"] == "2"
    assert result.logprobs is not None
    verdict_tokens = [t for t in result.logprobs if t.token == "2"]
    assert len(verdict_tokens) == 1
    top = dict(verdict_tokens[0].top)
    assert set(top) == {"1", "2", "3"}
    assert top["2"] == pytest.approx(-0.35667, abs=1e-4)  # log(0.7)
    body = sim_server.requests[-1].json
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == schema
    assert body["logprobs"] is True and body["top_logprobs"] == 3


def test_anthropic_success_tool_call_and_headers(sim_server: ProviderServer,
                                                 client: Client) -> None:
    schema = {"type": "object", "properties": {"verdict": {"type": "string",
                                                          "enum": ["pass", "fail"]}}}
    result = call(client, req(sim_server, "anthropic", text="ok",
                                       response_format={"name": "verdict", "schema": schema}))
    assert json.loads(result.text) == {"verdict": "pass",
                                       "rationale": "simulated judge: rule-based verdict pass"}
    assert result.finish_reason == "tool_use"
    assert result.request_id and result.request_id.startswith("req_sim_")
    assert result.logprobs is None
    recorded = sim_server.requests[-1]
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-api-key"] == "k-test-123"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers
    assert recorded.json["system"] == "Grade it."
    assert [m["role"] for m in recorded.json["messages"]] == ["user"]
    assert recorded.json["max_tokens"] == 1024
    assert recorded.json["tool_choice"] == {"type": "tool", "name": "record_verdict"}


def test_anthropic_text_answer(sim_server: ProviderServer, client: Client) -> None:
    sim_server.enqueue(success("Looks fine.\nVERDICT: pass"))
    result = call(client, req(sim_server, "anthropic"))
    assert result.text == "Looks fine.\nVERDICT: pass"
    assert result.finish_reason == "end_turn"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_429_retry_after_seconds(sim_server: ProviderServer, client: Client,
                                 provider: str) -> None:
    sim_server.enqueue(rate_limited("7"))
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server, provider))
    assert info.value.http_status == 429
    assert info.value.retry_after_s == 7.0
    assert "rate limited" in info.value.reason
    assert "Rate limit reached" in info.value.body_excerpt


def test_429_retry_after_http_date_and_ms(sim_server: ProviderServer,
                                          client: Client) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    sim_server.enqueue(rate_limited(when))
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert info.value.retry_after_s is not None and 27 <= info.value.retry_after_s <= 31
    sim_server.enqueue(rate_limited("9", retry_after_ms="1500"))
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert info.value.retry_after_s == 1.5  # the finer header wins


@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_5xx_is_transient(sim_server: ProviderServer, client: Client, status: int) -> None:
    sim_server.enqueue(server_error(status, "backend exploded"))
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert info.value.http_status == status
    assert "backend exploded" in info.value.reason


def test_html_error_page_5xx_transient_2xx_permanent(sim_server: ProviderServer,
                                                     client: Client) -> None:
    sim_server.enqueue(html_page(502), html_page(200))
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert "HTML error page" in info.value.reason
    assert "Bad Gateway" in info.value.body_excerpt
    with pytest.raises(PermanentProviderError) as info2:
        call(client, req(sim_server))
    assert "HTML page" in info2.value.reason and info2.value.http_status == 200


def test_truncated_json_is_permanent(sim_server: ProviderServer, client: Client) -> None:
    sim_server.enqueue(truncated_json())
    with pytest.raises(PermanentProviderError) as info:
        call(client, req(sim_server))
    assert "truncated JSON" in info.value.reason
    assert info.value.body_excerpt.startswith('{"id": "chatcmpl-x"')


def test_body_cut_off_mid_stream_is_transient(sim_server: ProviderServer,
                                              client: Client) -> None:
    sim_server.enqueue(truncated_body())
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert "connection error" in info.value.reason


def test_empty_choices_is_permanent(sim_server: ProviderServer, client: Client) -> None:
    sim_server.enqueue(empty_choices())
    with pytest.raises(PermanentProviderError) as info:
        call(client, req(sim_server))
    assert info.value.reason == "empty choice list"


def test_connection_reset_is_transient(sim_server: ProviderServer, client: Client) -> None:
    sim_server.enqueue(connection_reset())
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server))
    assert "connection error" in info.value.reason
    # The pool recovers: the next call on the same client succeeds.
    assert call(client, req(sim_server)).http_status == 200


def test_slow_response_times_out_transient(sim_server: ProviderServer,
                                           client: Client) -> None:
    sim_server.enqueue(slow(2.0))
    start = time.perf_counter()
    with pytest.raises(TransientProviderError) as info:
        call(client, req(sim_server, timeout_s=0.3))
    assert time.perf_counter() - start < 1.5
    assert "timeout (ReadTimeout)" in info.value.reason


def test_slow_response_within_timeout_succeeds(sim_server: ProviderServer,
                                               client: Client) -> None:
    sim_server.enqueue(slow(0.2))
    result = call(client, req(sim_server, timeout_s=3.0))
    assert result.latency_ms >= 200


def test_connection_refused_is_transient(client: Client) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    request = ProviderRequest(provider="openai", base_url=f"http://127.0.0.1:{port}/v1",
                              model="m", api_key=None, messages=(ChatMessage("user", "x"),),
                              timeout_s=2.0)
    with pytest.raises(TransientProviderError) as info:
        call(client, request)
    assert "ConnectError" in info.value.reason


@pytest.mark.parametrize(("status", "message"), [(400, "bad model"), (401, "invalid api key"),
                                                 (404, "no such model"), (422, "bad field")])
def test_other_4xx_is_permanent_with_message(sim_server: ProviderServer, client: Client,
                                             status: int, message: str) -> None:
    sim_server.enqueue(raw(status, json.dumps({"error": {"message": message}})))
    with pytest.raises(PermanentProviderError) as info:
        call(client, req(sim_server))
    assert info.value.http_status == status
    assert message in info.value.reason


def test_408_is_transient(sim_server: ProviderServer, client: Client) -> None:
    sim_server.enqueue(raw(408, "{}"))
    with pytest.raises(TransientProviderError):
        call(client, req(sim_server))


def test_handler_function_and_counts_per_path(sim_server: ProviderServer,
                                              client: Client) -> None:
    sim_server.handler = lambda r: (server_error(503) if "flaky" in r.prompt_text() else None)
    with pytest.raises(TransientProviderError):
        call(client, req(sim_server, text="flaky"))
    call(client, req(sim_server, text="solid"))
    call(client, req(sim_server, "anthropic", text="solid"))
    assert sim_server.count("/v1/chat/completions") == 2
    assert sim_server.count("/v1/messages") == 1
    assert sim_server.count() == 3


def test_async_client_concurrent_calls(sim_server: ProviderServer) -> None:
    sim_server.latency_s = 0.05
    sim_server.enqueue(rate_limited("1"))

    async def run() -> list[object]:
        async with http_client_async(max_connections=32) as aclient:
            return await asyncio.gather(
                *(provider_call_async(aclient, req(sim_server, text=f"n{i}")) for i in range(64)),
                return_exceptions=True)

    start = time.perf_counter()
    results = asyncio.run(run())
    elapsed = time.perf_counter() - start
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], TransientProviderError)
    assert sim_server.count() == 64
    # 64 calls of 50 ms through 32 connections: ~2 rounds, far from 64 sequential ones.
    assert elapsed < 64 * 0.05 / 2
    assert sim_server.max_open_connections <= 32
