"""An httpcore network backend on plain asyncio streams.

httpcore's default async backend goes through anyio, which wraps every socket read and write in
a cancel scope, a `fail_after` deadline and typed-attribute lookups. Profiled in the judge
throughput benchmark (docs/benchmarks.md, fourth session), that layer was about a quarter of
the client's CPU per call. The judge executor only ever runs on asyncio, so this backend talks
to asyncio directly: `asyncio.open_connection`, `StreamReader.read`, `StreamWriter.write`,
`asyncio.timeout` for the per-operation deadlines httpcore asks for, and
`StreamWriter.start_tls` for HTTPS.

It implements httpcore's public `AsyncNetworkBackend` / `AsyncNetworkStream` interface and
raises httpcore's own exceptions (ConnectError, ReadTimeout, ...), so the connection pool, h11
and httpx's error types above it behave exactly as with the default backend.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

# httpcore's own alias for a socket option tuple is not exported on every version.
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)

# The reader's buffer limit: asyncio pauses reading from the socket once twice this much is
# buffered unread. Provider answers are small; 256 KiB keeps a long one in few reads.
READ_LIMIT = 256 * 1024


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP (or TLS) connection as an asyncio reader/writer pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc) or "read timed out") from exc
        except OSError as exc:  # reset by peer, broken pipe, TLS errors (ssl.SSLError)
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        writer = self._writer
        if writer.transport.is_closing():
            # asyncio would drop the bytes with only a logged warning; say it like a socket would.
            raise httpcore.WriteError("connection closed")
        try:
            writer.write(buffer)
            if timeout is None or not writer.transport.get_write_buffer_size():
                # Everything went to the socket at once (the usual case for a request):
                # drain() only re-raises a connection error here, it does not wait.
                await writer.drain()
                return
            async with asyncio.timeout(timeout):
                await writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc) or "write timed out") from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        # No wait_closed(): httpcore closes connections from its pool bookkeeping, and waiting
        # there for the peer would stall the request that triggered the close.
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            self._writer.close()
            raise httpcore.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except OSError as exc:  # ssl.SSLError (certificate, protocol) is an OSError
            self._writer.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        # start_tls swaps the transport under the same reader and writer.
        return self

    def get_extra_info(self, info: str) -> Any:
        writer = self._writer
        if info == "ssl_object":
            return writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return writer.get_extra_info("sockname")
        if info == "server_addr":
            return writer.get_extra_info("peername")
        if info == "socket":
            return writer.get_extra_info("socket")
        if info == "is_readable":
            # httpcore asks before reusing an idle keep-alive connection: anything readable
            # there (data or EOF) means the server closed it or will. The event loop may already
            # have read an EOF off the socket, which only the reader or transport still shows.
            if writer.transport.is_closing() or self._reader.at_eof():
                return True
            return _socket_readable(writer.get_extra_info("socket"))
        return None


def _socket_readable(sock: Any) -> bool:
    """True when a zero-timeout poll says the socket has data, EOF or an error pending."""
    # A socket already gone (fd -1) counts as readable: the connection must not be reused.
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Opens `AsyncioStream` connections (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=local, limit=READ_LIMIT
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:  # refused, unreachable, DNS failure (socket.gaierror)
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        # asyncio already sets TCP_NODELAY on TCP transports, as anyio does.
        _apply_options(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path, limit=READ_LIMIT)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        _apply_options(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _apply_options(writer: asyncio.StreamWriter, options: Iterable[SocketOption] | None) -> None:
    sock: socket.socket | None = writer.get_extra_info("socket")
    if sock is None:
        return
    for option in options or ():
        sock.setsockopt(*option)
