"""The lean HTTP/1.1 pool (`judges.providers.http1`) against scripted raw servers: framing
(Content-Length, chunked, read-until-close, interim 1xx, HEAD), keep-alive and its expiry,
Connection: close, the pool's limit and pool timeout, the silence (read) timeout, refused
headers, decoding, and errors as httpx's types."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Awaitable, Callable

import httpx
import pytest

from judges.providers import ProviderAsyncClient
from judges.providers.http1 import LeanAsyncTransport, LeanResponse

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
    return lines[0], headers, body


class Scripted:
    """A raw TCP server: `answers` are the bytes sent for the 1st, 2nd, ... request on each
    connection (None: close without answering); records requests and connections."""

    def __init__(self, *answers: bytes | None, close_after: bool = False,
                 delay_s: float = 0.0) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.delay_s = delay_s
        self.requests: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    request = await read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.requests.append(request)
                answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def ok(body: bytes = b'{"ok": 1}', extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def client(max_connections: int = 4, **kw: object) -> ProviderAsyncClient:
    transport = LeanAsyncTransport(max_connections=max_connections, user_agent="test-agent",
                                   **kw)  # type: ignore[arg-type]
    return ProviderAsyncClient(transport=transport, timeout=httpx.Timeout(5.0))


async def post(c: ProviderAsyncClient, url: str, body: bytes = b"{}",
               timeout: httpx.Timeout | None = None) -> LeanResponse:
    response = await c.request("POST", url + "/v1/chat/completions",
                               headers={"Content-Type": "application/json",
                                        "Authorization": "Bearer k"},
                               content=body, timeout=timeout)
    assert isinstance(response, LeanResponse)
    return response


def test_request_bytes_and_keep_alive_reuse() -> None:
    server = Scripted(ok())

    async def run() -> list[int]:
        async with server as url, client() as c:
            statuses = [(await post(c, url, b'{"a": "caf\xc3\xa9"}')).status_code
                        for _ in range(3)]
            return statuses

    assert asyncio.run(run()) == [200, 200, 200]
    assert server.connections == 1  # one keep-alive connection served all three
    line, headers, body = server.requests[0]
    assert line == b"POST /v1/chat/completions HTTP/1.1"
    assert headers[b"host"].startswith(b"127.0.0.1:")
    assert headers[b"user-agent"] == b"test-agent"
    assert headers[b"authorization"] == b"Bearer k"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert body == b'{"a": "caf\xc3\xa9"}'


def test_response_reads_like_httpx() -> None:
    server = Scripted(ok(b'{"v": "\xc3\xa9"}',
                         b"X-Request-Id: req_1\r\nSet-Thing: a\r\nset-thing: b\r\n"))

    async def run() -> LeanResponse:
        async with server as url, client() as c:
            return await post(c, url)

    r = asyncio.run(run())
    assert r.status_code == 200 and r.is_success and r.http_version == "HTTP/1.1"
    assert r.headers["x-request-id"] == r.headers.get("X-REQUEST-ID") == "req_1"
    assert r.headers["set-thing"] == "a, b"  # repeated names joined, as httpx.Headers.get
    assert "Content-Type" in r.headers and r.headers.get("missing") is None
    assert r.json() == {"v": "é"} and r.text == '{"v": "é"}'
    assert r.request.method == "POST" and r.request.url.path == "/v1/chat/completions"


def test_chunked_body_with_extensions_and_trailers() -> None:
    body = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4;ext=1\r\n{\"a\"\r\n6\r\n: 1234\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n")
    server = Scripted(body)

    async def run() -> tuple[bytes, bytes]:
        async with server as url, client() as c:
            first = (await post(c, url)).content
            second = (await post(c, url)).content  # the connection is still good
            return first, second

    assert asyncio.run(run()) == (b'{"a": 1234}', b'{"a": 1234}')
    assert server.connections == 1


def test_read_until_close_and_http10_are_not_reused() -> None:
    server = Scripted(b"HTTP/1.0 200 OK\r\n\r\n{\"old\": true}", close_after=True)

    async def run() -> list[bytes]:
        async with server as url, client() as c:
            return [(await post(c, url)).content for _ in range(2)]

    assert asyncio.run(run()) == [b'{"old": true}'] * 2
    assert server.connections == 2


def test_connection_close_header_opens_a_new_connection() -> None:
    server = Scripted(ok(extra=b"Connection: close\r\n"), close_after=True)

    async def run() -> list[int]:
        async with server as url, client() as c:
            return [(await post(c, url)).status_code for _ in range(3)]

    assert asyncio.run(run()) == [200, 200, 200]
    assert server.connections == 3


def test_interim_100_continue_is_skipped() -> None:
    server = Scripted(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"final": 1}'))

    async def run() -> LeanResponse:
        async with server as url, client() as c:
            return await post(c, url)

    assert asyncio.run(run()).json() == {"final": 1}


@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send it
])
def test_encoded_bodies_are_decoded(coding: str, encode: Callable[[bytes], bytes]) -> None:
    server = Scripted(ok(encode(b'{"z": 1}'), f"Content-Encoding: {coding}\r\n".encode()))

    async def run() -> LeanResponse:
        async with server as url, client() as c:
            return await post(c, url)

    assert asyncio.run(run()).json() == {"z": 1}


def test_unknown_or_corrupt_encoding_is_a_decoding_error() -> None:
    server = Scripted(ok(b"not gzip", b"Content-Encoding: gzip\r\n"))

    async def run() -> None:
        async with server as url, client() as c:
            await post(c, url)

    with pytest.raises(httpx.DecodingError):
        asyncio.run(run())


@pytest.mark.parametrize("answer, message", [
    (None, "without sending a response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cut", "complete message body"),
    (b"SMTP ready\r\n\r\n", "illegal status line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "illegal header line"),
])
def test_broken_answers_are_remote_protocol_errors(answer: bytes | None, message: str) -> None:
    server = Scripted(answer, close_after=True)

    async def run() -> None:
        async with server as url, client() as c:
            await post(c, url)

    with pytest.raises(httpx.RemoteProtocolError, match=message):
        asyncio.run(run())


def test_silence_longer_than_the_read_timeout_is_a_read_timeout() -> None:
    server = Scripted(ok(), delay_s=1.0)

    async def run() -> None:
        async with server as url, client() as c:
            await post(c, url, timeout=httpx.Timeout(5.0, read=0.2))

    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(run())


def test_a_slow_but_steady_answer_is_not_a_read_timeout() -> None:
    """The read timeout is the longest silence, not the whole answer's time."""

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        answer = ok(b'{"slow": 1}')
        for i in range(0, len(answer), 8):
            writer.write(answer[i:i + 8])
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.close()

    async def run() -> LeanResponse:
        server = await asyncio.start_server(drip, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            async with client() as c:
                return await post(c, url, timeout=httpx.Timeout(5.0, read=0.3))
        finally:
            server.close()

    assert asyncio.run(run()).json() == {"slow": 1}


def test_pool_limit_and_pool_timeout() -> None:
    server = Scripted(ok(), delay_s=0.3)

    async def run() -> tuple[list[int], int]:
        async with server as url, client(max_connections=2) as c:
            statuses = [r.status_code for r in await asyncio.gather(
                *(post(c, url) for _ in range(4)))]
            # Two calls hold both connections: a third waits, and gives up at the pool timeout.
            busy = [asyncio.create_task(post(c, url)) for _ in range(2)]
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.PoolTimeout):
                await post(c, url, timeout=httpx.Timeout(5.0, pool=0.1))
            await asyncio.gather(*busy)
            return statuses, server.connections

    statuses, connections = asyncio.run(run())
    assert statuses == [200] * 4 and connections == 2


def test_idle_connections_expire() -> None:
    server = Scripted(ok())

    async def run() -> None:
        async with server as url, client(keepalive_expiry=0.1) as c:
            await post(c, url)
            await post(c, url)
            await asyncio.sleep(0.2)
            await post(c, url)

    asyncio.run(run())
    assert server.connections == 2


def test_header_injection_is_refused_before_sending() -> None:
    server = Scripted(ok())

    async def run() -> None:
        async with server as url, client() as c:
            await c.request("POST", url + "/v1/x", headers={"Authorization": "Bearer k\r\nX: y"},
                            content=b"{}")

    with pytest.raises(httpx.LocalProtocolError):
        asyncio.run(run())
    assert server.requests == []


def test_unsupported_scheme_and_refused_connection() -> None:
    async def scheme() -> None:
        async with client() as c:
            await c.request("POST", "ftp://127.0.0.1/x", headers={}, content=b"")

    with pytest.raises(httpx.UnsupportedProtocol):
        asyncio.run(scheme())

    async def refused() -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        async with client() as c:
            await c.request("POST", f"http://127.0.0.1:{port}/x", headers={}, content=b"")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(refused())


def test_serves_an_httpx_async_client_too() -> None:
    server = Scripted(ok(gzip.compress(b'{"via": "httpx"}'), b"Content-Encoding: gzip\r\n"))

    async def run() -> httpx.Response:
        async with server as url, httpx.AsyncClient(
                transport=LeanAsyncTransport(max_connections=2)) as c:
            return await c.post(url + "/v1/x", content=b"{}")

    response = asyncio.run(run())
    assert response.status_code == 200 and response.json() == {"via": "httpx"}
    assert server.requests[0][1][b"content-length"] == b"2"


def test_a_woken_waiter_that_is_cancelled_passes_the_room_on() -> None:
    """A call waiting for a connection, woken and cancelled before it ran (its deadline, a
    shutdown), must not take the free room with it: the next waiter gets it."""
    server = Scripted(ok(), delay_s=0.2)

    async def run() -> int:
        async with server as url:
            transport = LeanAsyncTransport(max_connections=1)
            c = ProviderAsyncClient(transport=transport, timeout=httpx.Timeout(5.0))
            first = asyncio.create_task(post(c, url))
            await asyncio.sleep(0.05)
            woken = asyncio.create_task(post(c, url))
            await asyncio.sleep(0.01)
            nxt = asyncio.create_task(post(c, url, timeout=httpx.Timeout(5.0, pool=1.0)))
            await asyncio.sleep(0.01)
            wake = transport._wake_one

            def wake_then_cancel() -> None:
                wake()
                if not woken.done():
                    woken.cancel()

            transport._wake_one = wake_then_cancel  # type: ignore[method-assign]
            await first
            transport._wake_one = wake  # type: ignore[method-assign]
            with pytest.raises(asyncio.CancelledError):
                await woken
            response = await nxt
            await c.aclose()
            return response.status_code

    assert asyncio.run(run()) == 200
