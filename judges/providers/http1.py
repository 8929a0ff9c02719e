"""A lean HTTP/1.1 client pool on asyncio protocols, for the judge executor's provider calls.

Profiled in the judge throughput benchmark (docs/benchmarks.md, issue 31), httpx over httpcore
was half of a judge worker's CPU per job even on the asyncio network backend: an
`httpx.Request` and `httpx.Response` per call, h11's event machinery, httpcore's pool scan
(a poll() system call per idle connection on every request and again on every response),
its anyio locks and cancellation shields, a coroutine per socket read. A provider call is one
small POST answered by one small JSON body over a keep-alive connection; this module does
exactly that and nothing else:

- connections are `asyncio.Protocol`s: the event loop hands them the bytes it read and the
  response is parsed right there (status line, headers, then a Content-Length, chunked or
  read-until-close body), one future per request, no coroutine per read;
- one pool for the whole client (at most `max_connections` open, to any number of origins),
  most recently used idle connection first, idle ones closed after `keepalive_expiry`; a
  connection the server closed while idle is dropped when the event loop sees the close;
- TLS through asyncio's own SSL transport, with the client's `ssl.SSLContext` (the CA bundle
  httpx uses, or one given) and the host name checked;
- the timeouts httpx has: connect (TCP and TLS handshake), write, read (the longest silence
  between two reads of the answer) and pool (waiting for a free connection);
- errors are httpx's (`httpx.ConnectError`, `ReadTimeout`, `RemoteProtocolError`, ...), with
  the messages httpcore gives, so `providers._transport_error` classifies them as before;
- gzip and deflate bodies are decoded (nothing asks for them; a server may send them anyway).

What it does not do: proxies (`http_client_async` returns a stock `httpx.AsyncClient` when the
environment names one), HTTP/2, redirects (never followed for a judge), cookies, auth flows,
Expect: 100-continue, content-encoded streamed bodies. `LeanAsyncTransport.stream` reads a
body incrementally (server-sent events): each piece is handed over as the event loop reads
it (a chunk of a chunked body, or whatever bytes arrived of a sized or read-until-close one),
under the same read timeout between pieces (`LeanResponse` and its headers are in
`http1_response.py`).
Which base URLs may be called at all is decided before a request is built (`judges.config`),
not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from .http1_response import LeanResponse, ResponseHeaders, decode_body

# A response head longer than this is refused (h11's default limit is 16 KiB).
MAX_HEAD_BYTES = 64 * 1024
# Distinct URLs (and per URL, distinct header sets) whose request heads are kept encoded.
ROUTE_CACHE_SIZE = 64
# A chunk-size line longer than this is refused.
MAX_LINE_BYTES = 4096

_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _UNTIL_CLOSE, _DONE = range(7)

_NO_RESPONSE = "Server disconnected without sending a response."
_INCOMPLETE = "peer closed connection without sending complete message body"


class _ProtocolViolation(Exception):
    """The server's bytes are not an HTTP/1.1 response (raised as httpx.RemoteProtocolError)."""


class LeanStream:
    """An answer being read: `status_code`, `headers` and `http_version` at once, the body
    from `pieces()` as it arrives. The connection goes back to the pool when the body has
    been read to its end, and is closed by `aclose()` before that (a stream left half-read
    cannot be reused)."""

    def __init__(self, pool: LeanAsyncTransport, conn: _Connection,
                 done: asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes, bool, str]],
                 queue: asyncio.Queue[bytes | None], status_code: int,
                 headers: ResponseHeaders, http_version: str) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._done = done
        self._queue = queue
        self.status_code = status_code
        self.headers = headers
        self.http_version = http_version

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive; raises httpx's errors (`ReadTimeout` after a
        silence longer than the read timeout, `RemoteProtocolError` when the server closes
        the connection before the body's end)."""
        while True:
            piece = await self._queue.get()
            if piece is None:
                break
            yield piece
        try:
            keep_alive = self._done.result()[3]
        except BaseException:
            await self.aclose()
            raise
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._release(conn, keep_alive)

    async def read(self) -> bytes:
        return b"".join([p async for p in self.pieces()])

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if not self._done.done():
                conn._fail(httpx.ReadError("stream closed by the client"))
            if self._done.done() and not self._done.cancelled():
                self._done.exception()  # retrieved: nobody awaits a stream let go of
            self._pool._drop(conn)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses the answer as it arrives."""

    def __init__(self, pool: LeanAsyncTransport, origin: tuple[str, str, int]) -> None:
        self.pool = pool
        self.origin = origin
        self.loop = pool.loop_now()
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.idle = False
        self.dropped = False  # closed and no longer counted by the pool
        self.lost = False  # the transport is gone (or closing)
        self._buf = bytearray()
        self._state = _DONE
        self._waiter: asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes, bool,
                                           str]] | None = None
        self._head_only = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._version = ""
        self._keep_alive = True
        self._remaining = 0
        self._chunks: list[bytes] = []
        self._got_bytes = False
        self._timer: asyncio.TimerHandle | None = None
        self._read_timeout: float | None = None
        self._last_read = 0.0
        self._write_paused = False
        self._drain: asyncio.Future[None] | None = None
        # Streaming: the head's future and where body pieces go as they are parsed.
        self._head_waiter: asyncio.Future[None] | None = None
        self._on_piece: Callable[[bytes], None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes nobody asked for (or after the answer): the connection cannot be reused.
            self._lose()
            return
        self._got_bytes = True
        if self._read_timeout is not None:
            self._last_read = self.loop.time()
        self._buf += data
        try:
            self._parse()
        except _ProtocolViolation as exc:
            self._fail(httpx.RemoteProtocolError(str(exc)))
            self._lose()

    def eof_received(self) -> bool:
        if self._waiter is not None and self._state == _UNTIL_CLOSE:
            body = bytes(self._buf)
            self._buf.clear()
            self._keep_alive = False
            if self._on_piece is not None:
                self._piece(body)
                body = b""
            self._complete(body)
        self._lose_quietly()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None:
            if self._state == _UNTIL_CLOSE and exc is None:
                body = bytes(self._buf)
                self._buf.clear()
                self._keep_alive = False
                if self._on_piece is not None:
                    self._piece(body)
                    body = b""
                self._complete(body)
            elif exc is not None:
                self._fail(httpx.ReadError(str(exc) or type(exc).__name__))
            else:
                self._fail(httpx.RemoteProtocolError(
                    _INCOMPLETE if self._got_bytes else _NO_RESPONSE))
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(httpx.WriteError(str(exc) if exc else "connection closed"))
        self._lose_quietly()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # -- one exchange ----------------------------------------------------------------------

    async def exchange(
        self, data: bytes, *, head_only: bool, read_timeout: float | None,
        write_timeout: float | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool, str]:
        """Send `data` (a whole request) and return (status, headers, body, keep-alive,
        HTTP version) once the answer is complete."""
        waiter = await self.begin(data, head_only=head_only, read_timeout=read_timeout,
                                  write_timeout=write_timeout)
        return await waiter

    async def begin(
        self, data: bytes, *, head_only: bool, read_timeout: float | None,
        write_timeout: float | None, on_piece: Callable[[bytes], None] | None = None,
    ) -> asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes, bool, str]]:
        """Send `data` and return the future of the complete answer. With `on_piece`, the
        body is handed to it piece by piece as it is parsed (the answer's body is then
        empty) and `head_waiter` resolves once the status and headers are in."""
        transport = self.transport
        if self.lost or transport is None or transport.is_closing():
            raise httpx.WriteError("connection closed")
        waiter = self.loop.create_future()
        self._waiter = waiter
        self._on_piece = on_piece
        self._head_waiter = self.loop.create_future() if on_piece is not None else None
        self._state = _HEAD
        self._head_only = head_only
        self._got_bytes = False
        self._keep_alive = True
        self._chunks = []
        transport.write(data)
        if self._write_paused:
            await self._drained(write_timeout)
        self._read_timeout = read_timeout
        if read_timeout is not None:
            self._last_read = self.loop.time()
            self._timer = self.loop.call_later(read_timeout, self._check_read_timeout)
        return waiter

    async def _drained(self, write_timeout: float | None) -> None:
        self._drain = self.loop.create_future()
        try:
            async with asyncio.timeout(write_timeout):
                await self._drain
        except TimeoutError:
            raise httpx.WriteTimeout("write timed out") from None
        finally:
            self._drain = None

    def _check_read_timeout(self) -> None:
        self._timer = None
        if self._waiter is None or self._read_timeout is None:
            return
        left = self._last_read + self._read_timeout - self.loop.time()
        if left > 0.001:  # bytes came in meanwhile: the silence started later
            self._timer = self.loop.call_later(left, self._check_read_timeout)
            return
        self._fail(httpx.ReadTimeout("timed out"))
        self._lose()

    def _head_done(self, exc: Exception | None = None) -> None:
        head = self._head_waiter
        self._head_waiter = None
        if head is not None and not head.done():
            if exc is None:
                head.set_result(None)
            else:
                head.set_exception(exc)

    def _piece(self, data: bytes) -> None:
        if data and self._on_piece is not None:
            self._on_piece(data)

    def _complete(self, body: bytes) -> None:
        self._head_done()
        self._on_piece = None
        waiter = self._waiter
        self._waiter = None
        self._state = _DONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buf:  # bytes beyond the answer: not a connection to reuse
            self._keep_alive = False
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, self._headers, body, self._keep_alive,
                               self._version))

    def _fail(self, exc: Exception) -> None:
        self._head_done(exc)
        self._on_piece = None
        waiter = self._waiter
        self._waiter = None
        self._state = _DONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _lose(self) -> None:
        """Close the transport; the pool stops counting it (now if idle, else on release)."""
        if self.transport is not None:
            self.transport.close()
        self._lose_quietly()

    def _lose_quietly(self) -> None:
        if not self.lost:
            self.lost = True
            if self.idle:
                self.pool._discard_idle(self)

    def close(self) -> None:
        self._fail(httpx.ReadError("connection closed by the client"))
        self._lose()

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while self._waiter is not None:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise _ProtocolViolation("response head too long")
                    return
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._start_body(head)
            elif state == _LENGTH and self._on_piece is not None:
                take = min(len(buf), self._remaining)
                piece = bytes(buf[:take])
                del buf[:take]
                self._remaining -= take
                self._piece(piece)
                if self._remaining:
                    return
                self._complete(b"")
            elif state == _LENGTH:
                if len(buf) < self._remaining:
                    return
                body = bytes(buf[: self._remaining])
                del buf[: self._remaining]
                self._complete(body)
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_LINE_BYTES:
                        raise _ProtocolViolation("chunk size line too long")
                    return
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise _ProtocolViolation(f"bad chunk size {line[:40]!r}") from None
                if size < 0:
                    raise _ProtocolViolation("bad chunk size")
                if size == 0:
                    self._state = _TRAILERS
                else:
                    self._remaining = size
                    self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                if len(buf) < self._remaining + 2:
                    return
                if buf[self._remaining: self._remaining + 2] != b"\r\n":
                    raise _ProtocolViolation("chunk not followed by CRLF")
                data = bytes(buf[: self._remaining])
                del buf[: self._remaining + 2]
                if self._on_piece is not None:
                    self._piece(data)
                else:
                    self._chunks.append(data)
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise _ProtocolViolation("trailers too long")
                    return
                del buf[: end + 2]
                if end == 0:  # the empty line that ends the trailers
                    self._complete(b"".join(self._chunks))
            else:  # _UNTIL_CLOSE: the body ends when the server closes the connection
                if self._on_piece is not None and buf:
                    piece = bytes(buf)
                    buf.clear()
                    self._piece(piece)
                return

    def _start_body(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        parts = status_line.split(b" ", 2)
        if (len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
                or len(parts[1]) != 3 or not parts[1].isdigit()):
            raise _ProtocolViolation(f"illegal status line: {status_line[:80]!r}")
        status = int(parts[1])
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        transfer_coded = False
        close = parts[0] == b"HTTP/1.0"
        for line in lines[1:]:
            if line[:1] in (b" ", b"\t"):  # obsolete line folding: part of the last value
                if not headers:
                    raise _ProtocolViolation("continuation line before any header")
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip(b" \t"))
                continue
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip(b" \t"):
                raise _ProtocolViolation(f"illegal header line: {line[:80]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lowered = name.lower()
            if lowered == b"content-length":
                try:
                    values = {int(v) for v in value.split(b",")}
                except ValueError:
                    raise _ProtocolViolation("bad Content-Length") from None
                if length is not None:
                    values.add(length)
                if len(values) != 1 or min(values) < 0:
                    raise _ProtocolViolation("bad Content-Length")
                length = values.pop()
            elif lowered == b"transfer-encoding":
                transfer_coded = True
                chunked = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
            elif lowered == b"connection":
                tokens = {t.strip().lower() for t in value.split(b",")}
                if b"close" in tokens:
                    close = True
        if 100 <= status <= 199:
            if status == 101:
                raise _ProtocolViolation("unexpected protocol switch (101)")
            return  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        self._status = status
        self._headers = headers
        self._version = parts[0].decode("ascii")
        self._keep_alive = not close
        self._head_done()
        if self._head_only or status in (204, 304):
            self._complete(b"")
        elif transfer_coded:
            if chunked:
                self._state = _CHUNK_SIZE
            else:
                self._keep_alive = False
                self._state = _UNTIL_CLOSE
        elif length is not None:
            self._remaining = length
            self._state = _LENGTH
            if length == 0:
                self._complete(b"")
        else:
            self._keep_alive = False
            self._state = _UNTIL_CLOSE


class _Route:
    """A URL's origin, request target and Host header, and its encoded request heads."""

    __slots__ = ("heads", "netloc", "origin", "target", "url")

    def __init__(self, url: httpx.URL, origin: tuple[str, str, int], target: bytes,
                 netloc: bytes) -> None:
        self.url = url
        self.origin = origin
        self.target = target
        self.netloc = netloc
        self.heads: dict[tuple[Any, ...], bytes] = {}


class LeanAsyncTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over a pool of at most `max_connections` keep-alive connections (see the
    module docstring). One event loop only: the pool is bound to the loop of its first call.

    `send` is the direct path (`ProviderAsyncClient` uses it); `handle_async_request` serves
    an `httpx.AsyncClient` too.
    """

    def __init__(
        self, *, max_connections: int, keepalive_expiry: float = 30.0,
        ssl_context: ssl.SSLContext | None = None, user_agent: str = "",
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        # The CA bundle httpx uses (certifi's) unless a caller trusts other roots.
        self._ssl_context = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._routes: dict[int, _Route] = {}
        # Sent when the caller's headers name no User-Agent.
        self.user_agent = user_agent
        self._closed = False

    def loop_now(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context()
        return self._ssl_context

    # -- the pool --------------------------------------------------------------------------

    async def _acquire(self, origin: tuple[str, str, int], connect_timeout: float | None,
                       pool_timeout: float | None) -> _Connection:
        loop = self.loop_now()
        while True:
            if self._closed:
                raise httpx.ConnectError("the client has been closed")
            idle = self._idle.get(origin)
            if idle:
                now = loop.time()
                while idle:
                    conn = idle.pop()
                    conn.idle = False
                    if conn.lost or now - conn.idle_since > self.keepalive_expiry:
                        self._drop(conn)
                        continue
                    return conn
            if self._open >= self.max_connections and not self._evict_one_idle():
                await self._wait_for_room(pool_timeout)
                continue
            self._open += 1
            try:
                return await self._connect(origin, connect_timeout)
            except BaseException:
                self._open -= 1
                self._wake_one()
                raise

    def _evict_one_idle(self) -> bool:
        """Close the longest-idle connection (to any origin) to make room for a new one."""
        oldest: _Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is None:
            return False
        self._idle[oldest.origin].popleft()
        oldest.idle = False
        self._drop(oldest)
        return True

    async def _wait_for_room(self, pool_timeout: float | None) -> None:
        waiter: asyncio.Future[None] = self.loop_now().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(pool_timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken, but leaving: the room goes to the next in line
            else:
                waiter.cancel()
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("timed out waiting for a free connection") from None
            raise

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not conn.lost and not self._closed:
            conn.idle_since = conn.loop.time()
            conn.idle = True
            idle = self._idle.get(conn.origin)
            if idle is None:
                idle = self._idle[conn.origin] = deque()
            idle.append(conn)
            # Connections idle past their expiry sit at the left end: close them as we pass.
            while idle and conn.idle_since - idle[0].idle_since > self.keepalive_expiry:
                stale = idle.popleft()
                stale.idle = False
                self._drop(stale)
        else:
            self._drop(conn)
        self._wake_one()

    def _drop(self, conn: _Connection) -> None:
        if not conn.dropped:
            conn.dropped = True
            self._open -= 1
            conn.close()

    def _discard_idle(self, conn: _Connection) -> None:
        """An idle connection the server closed: no longer in the pool."""
        idle = self._idle.get(conn.origin)
        conn.idle = False
        if idle is not None:
            with contextlib.suppress(ValueError):
                idle.remove(conn)
        self._drop(conn)
        self._wake_one()

    async def _connect(self, origin: tuple[str, str, int],
                       connect_timeout: float | None) -> _Connection:
        scheme, host, port = origin
        loop = self.loop_now()
        conn = _Connection(self, origin)
        tls = scheme == "https"
        try:
            async with asyncio.timeout(connect_timeout):
                if tls:
                    await loop.create_connection(
                        lambda: conn, host, port, ssl=self._context(), server_hostname=host)
                else:
                    await loop.create_connection(lambda: conn, host, port)
        except TimeoutError:
            conn.close()
            what = "TLS handshake" if tls and conn.transport is not None else "connect"
            raise httpx.ConnectTimeout(f"{what} timed out") from None
        except OSError as exc:  # refused, unreachable, DNS failure, ssl.SSLError
            conn.close()
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        # asyncio sets TCP_NODELAY on its TCP transports, as httpcore's backends do.
        return conn

    # -- requests --------------------------------------------------------------------------

    def _route(self, url: httpx.URL) -> _Route:
        """Where `url` goes and its request line (cached per URL object: a client passes the
        same parsed URL for every call to an endpoint)."""
        cached = self._routes.get(id(url))
        if cached is not None and cached.url is url:
            return cached
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{scheme}://'.")
        if not url.raw_host:
            raise httpx.UnsupportedProtocol("Request URL is missing a host.")
        port = url.port or (443 if scheme == "https" else 80)
        route = _Route(url, (scheme, url.raw_host.decode("ascii"), port), url.raw_path,
                       url.netloc)
        if len(self._routes) >= ROUTE_CACHE_SIZE:
            self._routes.clear()
        # The route holds the URL object, so its id() cannot be reused while cached.
        self._routes[id(url)] = route
        return route

    def _head_bytes(self, route: _Route, method: str, headers: Mapping[str, str]) -> bytes:
        """The request line and headers up to Content-Length (cached per route: a drain
        sends the same ones for every call)."""
        key = (method, tuple(headers.items()))
        head = route.heads.get(key)
        if head is not None:
            return head
        lines = [method.encode("ascii") + b" " + route.target + b" HTTP/1.1",
                 b"Host: " + route.netloc]
        has_agent = False
        for name, value in headers.items():
            if (not name or any(c in name for c in " \t\r\n:")
                    or any(c in value for c in "\r\n\x00")):
                raise httpx.LocalProtocolError(f"illegal header {name!r}")
            lowered = name.lower()
            if lowered in ("host", "content-length", "transfer-encoding"):
                continue  # framed here
            has_agent = has_agent or lowered == "user-agent"
            try:
                lines.append(name.encode("ascii") + b": " + value.encode("ascii"))
            except UnicodeEncodeError:
                raise httpx.LocalProtocolError(f"header {name!r} is not ASCII") from None
        if not has_agent and self.user_agent:
            lines.append(b"User-Agent: " + self.user_agent.encode("ascii"))
        head = b"\r\n".join(lines) + b"\r\n"
        if len(route.heads) >= ROUTE_CACHE_SIZE:
            route.heads.clear()
        route.heads[key] = head
        return head

    async def send(self, method: str, url: httpx.URL, headers: Mapping[str, str],
                   content: bytes, timeout: httpx.Timeout) -> LeanResponse:
        """One request, its answer read in full; raises httpx's errors."""
        route = self._route(url)
        data = b"".join((self._head_bytes(route, method, headers), b"Content-Length: ",
                         str(len(content)).encode("ascii"), b"\r\n\r\n", content))
        connect_timeout, read_timeout, write_timeout, pool_timeout = (
            timeout.connect, timeout.read, timeout.write, timeout.pool)
        conn = await self._acquire(route.origin, connect_timeout, pool_timeout)
        try:
            status, raw_headers, body, keep_alive, version = await conn.exchange(
                data, head_only=method == "HEAD", read_timeout=read_timeout,
                write_timeout=write_timeout)
        except BaseException:
            self._drop(conn)  # its state is unknown: never reuse it
            raise
        self._release(conn, keep_alive)
        response_headers = ResponseHeaders(raw_headers)
        coding = response_headers.get("content-encoding")
        if coding:
            body = decode_body(body, coding)
        return LeanResponse(status, response_headers, body, version, method, url)

    async def stream(self, method: str, url: httpx.URL, headers: Mapping[str, str],
                     content: bytes, timeout: httpx.Timeout) -> LeanStream:
        """One request whose answer is read incrementally: returns once the status and
        headers are in; the body comes from `LeanStream.pieces()`. Raises httpx's errors."""
        route = self._route(url)
        data = b"".join((self._head_bytes(route, method, headers), b"Content-Length: ",
                         str(len(content)).encode("ascii"), b"\r\n\r\n", content))
        conn = await self._acquire(route.origin, timeout.connect, timeout.pool)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        try:
            waiter = await conn.begin(data, head_only=False, read_timeout=timeout.read,
                                      write_timeout=timeout.write, on_piece=queue.put_nowait)
            waiter.add_done_callback(lambda _f: queue.put_nowait(None))
            head = conn._head_waiter
            if head is not None:
                await head
            elif waiter.done():  # answered in full already (no body, or an error)
                waiter.result()
        except BaseException:
            self._drop(conn)
            raise
        response_headers = ResponseHeaders(conn._headers)
        if response_headers.get("content-encoding", "identity").lower() != "identity":
            self._drop(conn)
            raise httpx.DecodingError("a streamed body must not be content-encoded")
        return LeanStream(self, conn, waiter, queue, conn._status, response_headers,
                          conn._version)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        timeout = httpx.Timeout(**request.extensions.get("timeout", {})) \
            if request.extensions.get("timeout") else httpx.Timeout(None)
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "transfer-encoding")}
        answer = await self.send(request.method, request.url, headers, content, timeout)
        # The body is decoded already: its coding and length headers no longer describe it.
        raw = [(k, v) for k, v in answer.headers.raw
               if k.lower() not in (b"content-encoding", b"content-length")]
        return httpx.Response(answer.status_code, headers=raw,
                              content=answer.content, request=request,
                              extensions={"http_version": answer.http_version.encode()})

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                conn = idle.popleft()
                conn.idle = False
                self._drop(conn)
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
