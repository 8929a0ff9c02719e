"""The lean HTTP/1.1 pool reads a body incrementally (`LeanAsyncTransport.stream`): each
piece is handed over when the server sends it, not when the body ends, so a streamed answer's
time to first token can be measured. Raw asyncio servers in the test process send the pieces
with programmed delays."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from judges.providers.http1 import LeanAsyncTransport
from tests.judges.test_http1 import read_request

Send = Callable[[asyncio.StreamWriter], Awaitable[None]]


class Paced:
    """A raw server answering each request with `send(writer)`; counts connections."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    await read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await self.send(writer)
        except _Cut:
            return
        finally:
            writer.close()

    async def __aenter__(self) -> httpx.URL:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return httpx.URL(f"http://127.0.0.1:{port}/v1/chat/completions")

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


class _Cut(Exception):
    """The server hangs up mid-body."""


def chunked(pieces: list[tuple[float, bytes]], *, cut: bool = False) -> Send:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        for delay, data in pieces:
            await asyncio.sleep(delay)
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
        if cut:
            raise _Cut
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    return send


async def _timed(transport: LeanAsyncTransport, url: httpx.URL,
                 timeout: float = 5.0) -> tuple[int, list[tuple[float, bytes]]]:
    start = time.perf_counter()
    stream = await transport.stream("POST", url, {"Content-Type": "application/json"}, b"{}",
                                    httpx.Timeout(timeout))
    got = [(time.perf_counter() - start, p) async for p in stream.pieces()]
    return stream.status_code, got


def test_chunks_arrive_when_sent_and_the_connection_is_reused() -> None:
    async def main() -> None:
        server = Paced(chunked([(0.0, b"data: one\n\n"), (0.3, b"data: two\n\n"),
                                (0.3, b"data: [DONE]\n\n")]))
        async with server as url:
            transport = LeanAsyncTransport(max_connections=2)
            status, got = await _timed(transport, url)
            assert status == 200
            assert [p for _, p in got] == [b"data: one\n\n", b"data: two\n\n",
                                           b"data: [DONE]\n\n"]
            # The first piece is handed over before the body ends (0.6 s later).
            assert got[0][0] < 0.15
            assert 0.28 <= got[1][0] - got[0][0] < 0.45
            assert 0.28 <= got[2][0] - got[1][0] < 0.45
            # Read to its end: the connection goes back to the pool and is reused.
            await _timed(transport, url)
            assert server.connections == 1
            await transport.aclose()
    asyncio.run(main())


def test_a_sized_body_is_handed_over_as_it_arrives() -> None:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nabcd")
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(b"efgh")
        await writer.drain()

    async def main() -> None:
        async with Paced(send) as url:
            transport = LeanAsyncTransport(max_connections=1)
            _, got = await _timed(transport, url)
            assert b"".join(p for _, p in got) == b"abcdefgh"
            assert got[0][0] < 0.15 and got[-1][0] >= 0.28
            await transport.aclose()
    asyncio.run(main())


def test_a_stream_cut_mid_way_raises_and_the_connection_is_not_reused() -> None:
    async def main() -> None:
        server = Paced(chunked([(0.0, b"data: one\n\n")], cut=True))
        async with server as url:
            transport = LeanAsyncTransport(max_connections=1)
            stream = await transport.stream("POST", url, {}, b"{}", httpx.Timeout(5.0))
            seen: list[bytes] = []
            with pytest.raises(httpx.RemoteProtocolError):
                async for piece in stream.pieces():
                    seen.append(piece)
            assert seen == [b"data: one\n\n"]
            # The pool's only connection was dropped, so the next request gets a new one.
            server.send = chunked([(0.0, b"x")])
            _, got = await _timed(transport, url)
            assert [p for _, p in got] == [b"x"]
            assert server.connections == 2
            await transport.aclose()
    asyncio.run(main())


def test_silence_between_pieces_longer_than_the_read_timeout_is_a_read_timeout() -> None:
    async def main() -> None:
        async with Paced(chunked([(0.0, b"a"), (1.0, b"b")])) as url:
            transport = LeanAsyncTransport(max_connections=1)
            stream = await transport.stream("POST", url, {}, b"{}", httpx.Timeout(0.3))
            seen: list[bytes] = []
            with pytest.raises(httpx.ReadTimeout):
                async for piece in stream.pieces():
                    seen.append(piece)
            assert seen == [b"a"]
            await transport.aclose()
    asyncio.run(main())


def test_a_stream_closed_half_read_frees_its_connection() -> None:
    async def main() -> None:
        server = Paced(chunked([(0.0, b"a"), (0.2, b"b")]))
        async with server as url:
            transport = LeanAsyncTransport(max_connections=1)
            stream = await transport.stream("POST", url, {}, b"{}", httpx.Timeout(5.0))
            async for piece in stream.pieces():
                assert piece == b"a"
                break
            await stream.aclose()
            # The only slot of the pool is free again (else this would wait for the pool).
            _, got = await asyncio.wait_for(_timed(transport, url), 3.0)
            assert b"".join(p for _, p in got) == b"ab"
            await transport.aclose()
    asyncio.run(main())
