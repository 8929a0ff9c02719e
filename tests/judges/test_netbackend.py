"""The asyncio network backend under the async provider client: HTTPS, keep-alive reuse, a
server that closes idle connections, and errors mapped as httpx's own transport maps them.

The plain-HTTP fault cases (429, 5xx, resets, truncated bodies, timeouts) run through this
backend too: every test of test_providers_server.py runs once with the sync client and once
with `http_client_async`.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpcore
import httpx
import pytest

from judges.providers import (
    ChatMessage,
    PermanentProviderError,
    ProviderAsyncClient,
    ProviderRequest,
    ProviderResult,
    TransientProviderError,
    http_client,
    http_client_async,
    provider_call,
    provider_call_async,
)
from judges.providers.netbackend import AsyncioBackend
from judges.providers.transport import ShardedAsyncTransport
from tests.judges.provider_server import ProviderServer, judge, raw, then_close


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with the openssl command line."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed to make a test certificate"
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[ProviderServer]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with ProviderServer(ssl_context=context) as server:
        yield server


def request_to(base_url: str, **kw: object) -> ProviderRequest:
    fields: dict[str, object] = {
        "provider": "openai", "base_url": base_url, "model": "sim", "api_key": "k",
        "messages": (ChatMessage("user", "<<<OUTPUT x>>>\nfine\n<<<END OUTPUT x>>>"),),
        "timeout_s": 5.0,
    }
    fields.update(kw)
    return ProviderRequest(**fields)  # type: ignore[arg-type]


def client_trusting(cert: Path, max_connections: int = 4) -> ProviderAsyncClient:
    context = ssl.create_default_context(cafile=str(cert))
    transport = ShardedAsyncTransport(max_connections=max_connections, ssl_context=context)
    return ProviderAsyncClient(transport=transport, timeout=httpx.Timeout(5.0))


def test_https_calls_reuse_their_connections(tls_server: ProviderServer,
                                             certificate: tuple[Path, Path]) -> None:
    async def run() -> list[int]:
        async with client_trusting(certificate[0], max_connections=2) as client:
            results = []
            for _ in range(3):  # in turn: one connection serves all three
                results.append(await provider_call_async(
                    client, request_to(tls_server.openai_base_url)))
            results += await asyncio.gather(*(
                provider_call_async(client, request_to(tls_server.openai_base_url))
                for _ in range(6)))
            return [r.http_status for r in results]

    assert asyncio.run(run()) == [200] * 9
    assert tls_server.count() == 9
    # Two connections at most (the pool's size), however many requests went over them.
    assert len({r.client_port for r in tls_server.requests}) <= 2


def test_https_untrusted_certificate_is_a_connect_error(tls_server: ProviderServer) -> None:
    async def run() -> None:
        # The default client trusts the public CA bundle only, not this self-signed server.
        async with http_client_async(max_connections=2) as client:
            await provider_call_async(client, request_to(tls_server.openai_base_url))

    with pytest.raises(TransientProviderError) as info:
        asyncio.run(run())
    assert "ConnectError" in info.value.reason
    assert "CERTIFICATE_VERIFY_FAILED" in info.value.reason


def test_server_closing_idle_connection_is_noticed_before_reuse() -> None:
    """A keep-alive connection the server has closed is not reused for the next request."""
    with ProviderServer() as server:
        server.enqueue(then_close(raw(200, '{"ok": 1}')))

        async def run() -> list[int]:
            transport = ShardedAsyncTransport(max_connections=1)
            async with ProviderAsyncClient(transport=transport,
                                           timeout=httpx.Timeout(5.0)) as client:
                statuses = []
                for _ in range(3):
                    response = await client.request(
                        "POST", server.openai_base_url + "/chat/completions",
                        headers={"Content-Type": "application/json"}, content=b"{}")
                    statuses.append(response.status_code)
                    await asyncio.sleep(0.05)  # let the close arrive
                return statuses

        assert asyncio.run(run()) == [200, 200, 200]
        ports = [r.client_port for r in server.requests]
        assert ports[0] != ports[1]  # a new connection after the server's close
        assert ports[1] == ports[2]  # and that one kept alive


def test_gzip_body_is_decoded() -> None:
    body = gzip.compress(b'{"hello": "world"}')
    with ProviderServer() as server:
        server.enqueue(raw(200, body, headers={"Content-Encoding": "gzip"}))

        async def run() -> httpx.Response:
            async with http_client_async(max_connections=1) as client:
                return await client.request(
                    "POST", server.openai_base_url + "/chat/completions",
                    headers={"Content-Type": "application/json"}, content=b"{}",
                    timeout=httpx.Timeout(5.0))

        response = asyncio.run(run())
    assert response.json() == {"hello": "world"}
    assert response.request.url.path == "/v1/chat/completions"


def test_user_agent_and_exact_body_are_sent() -> None:
    with ProviderServer() as server:
        server.enqueue(judge())

        async def run() -> None:
            async with http_client_async(max_connections=1) as client:
                await provider_call_async(client, request_to(server.openai_base_url))

        asyncio.run(run())
        recorded = server.requests[-1]
    assert recorded.headers["user-agent"].startswith("ReviewHub")
    assert int(recorded.headers["content-length"]) == len(recorded.body)


def test_refused_connection_is_a_connect_error() -> None:
    async def refused() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)

    with pytest.raises(httpcore.ConnectError):
        asyncio.run(refused())


def test_silent_tls_handshake_times_out_as_connect_timeout() -> None:
    """A server that accepts the TCP connection but never answers the TLS hello."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]

        async def run() -> None:
            transport = ShardedAsyncTransport(max_connections=1)
            client = ProviderAsyncClient(
                transport=transport, timeout=httpx.Timeout(5.0, connect=0.3))
            async with client:
                await provider_call_async(
                    client, request_to(f"https://127.0.0.1:{port}/v1", timeout_s=0.3))

        start = time.perf_counter()
        with pytest.raises(TransientProviderError) as info:
            asyncio.run(run())
    assert time.perf_counter() - start < 2.0
    assert "ConnectTimeout" in info.value.reason


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call_with(kind: str, request: ProviderRequest) -> ProviderResult:
    if kind == "sync":
        with http_client(max_connections=2) as client:
            return provider_call(client, request)

    async def run() -> ProviderResult:
        async with http_client_async(max_connections=2) as client:
            return await provider_call_async(client, request)

    return asyncio.run(run())


@pytest.fixture
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_environment_proxy_carries_the_call(kind: str,
                                            no_proxy_environment: pytest.MonkeyPatch) -> None:
    """With HTTP_PROXY set, the request goes to the proxy in absolute form, not to the host."""
    unreachable = f"http://127.0.0.1:{free_port()}/v1"
    with ProviderServer() as proxy:
        no_proxy_environment.setenv("HTTP_PROXY", proxy.url)
        # The simulated server is no proxy: it answers the absolute-form target with a 404,
        # which is enough to show where the request went.
        with pytest.raises(PermanentProviderError) as info:
            call_with(kind, request_to(unreachable))
        recorded = proxy.requests[-1]
    assert info.value.http_status == 404
    assert recorded.path == unreachable + "/chat/completions"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_no_proxy_bypasses_the_environment_proxy(kind: str,
                                                 no_proxy_environment: pytest.MonkeyPatch) -> None:
    no_proxy_environment.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    no_proxy_environment.setenv("NO_PROXY", "127.0.0.1")
    with ProviderServer() as server:
        server.enqueue(judge())
        result = call_with(kind, request_to(server.openai_base_url))
        recorded = server.requests[-1]
    assert result.http_status == 200
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["user-agent"].startswith("ReviewHub")


def test_client_parses_each_url_once_and_keeps_few() -> None:
    import judges.providers as providers

    with ProviderServer() as server:

        async def run() -> dict[str, httpx.URL]:
            async with http_client_async(max_connections=2) as client:
                assert isinstance(client, ProviderAsyncClient)
                for _ in range(3):
                    await provider_call_async(client, request_to(server.openai_base_url))
                first = dict(client._urls)
                assert len(first) == 1
                # The same parsed object serves every call to that URL.
                await provider_call_async(client, request_to(server.openai_base_url))
                assert client._urls == first and all(
                    client._urls[k] is v for k, v in first.items())
                # Bounded: past URL_CACHE_SIZE distinct URLs it starts again.
                for i in range(providers.URL_CACHE_SIZE + 1):
                    response = await client.request(
                        "POST", f"{server.openai_base_url}/chat/completions?i={i}",
                        headers={"content-type": "application/json"},
                        content=b'{"model": "m", "messages": []}')
                    assert response.status_code == 200
                assert len(client._urls) <= providers.URL_CACHE_SIZE
                return first

        first = asyncio.run(run())
    assert [str(u) for u in first.values()] == [server.openai_base_url + "/chat/completions"]


def test_transport_marks_its_loop_thread_as_asyncio_for_sniffio() -> None:
    import threading

    import sniffio

    seen: list[str | None] = []

    def thread_main() -> None:
        with ProviderServer() as server:
            seen.append(sniffio.thread_local.name)

            async def run() -> str:
                # The httpcore-based transport (the lean pool uses neither anyio nor sniffio).
                transport = ShardedAsyncTransport(max_connections=1)
                async with ProviderAsyncClient(transport=transport,
                                               timeout=httpx.Timeout(5.0)) as client:
                    return (await provider_call_async(client,
                                                      request_to(server.openai_base_url))).text

            text = asyncio.run(run())
            seen.append(sniffio.thread_local.name)
            seen.append(text)

    worker = threading.Thread(target=thread_main)
    worker.start()
    worker.join(30)
    assert seen[:2] == [None, "asyncio"] and seen[2]
