"""Connection pools split into small shards.

httpcore 1.0's pool re-scans every pooled connection for every request it assigns (the
O(connections x queued requests) `_assign_requests_to_connections`; see encode/httpcore#1035),
so one pool of 256 connections spends most of a core on bookkeeping and caps out far below the
latency bound (measured: 83 req/s at 64 connections, 64 req/s at 256, against 100 ms answers).
Several small pools keep each scan short; a request goes to the shard with the fewest requests
in flight, so the shards fill evenly and the total stays at `max_connections`.
"""

from __future__ import annotations

import ssl
import threading

import httpx

# 4 connections per pool keeps the scan cheap (it is quadratic in this number, not in the
# total) while still reusing keep-alive connections well.
SHARD_SIZE = 4


def _shard_sizes(max_connections: int) -> list[int]:
    shards = max(1, -(-max_connections // SHARD_SIZE))
    base, extra = divmod(max_connections, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~30 ms; every shard shares one context.
    return httpx.create_ssl_context()


def _limits(size: int, keepalive_expiry: float) -> httpx.Limits:
    return httpx.Limits(
        max_connections=size, max_keepalive_connections=size, keepalive_expiry=keepalive_expiry
    )


class ShardedAsyncTransport(httpx.AsyncBaseTransport):
    """An async transport made of several `httpx.AsyncHTTPTransport` pools."""

    def __init__(self, *, max_connections: int, keepalive_expiry: float = 30.0) -> None:
        sizes = _shard_sizes(max_connections)
        context = _ssl_context()
        self._shards = [
            httpx.AsyncHTTPTransport(verify=context, limits=_limits(size, keepalive_expiry))
            for size in sizes
        ]
        self._capacity = sizes
        self._in_flight = [0] * len(sizes)

    def _pick(self) -> int:
        # Least loaded relative to its size; one event loop, so no lock is needed.
        return min(range(len(self._shards)), key=lambda i: self._in_flight[i] / self._capacity[i])

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._pick()
        self._in_flight[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
            # Read the body here so that the connection is back in its pool before the
            # in-flight count drops (the pool is free again exactly when we say it is).
            await response.aread()
            return response
        finally:
            self._in_flight[index] -= 1

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


class ShardedTransport(httpx.BaseTransport):
    """The thread-safe sync twin of `ShardedAsyncTransport`."""

    def __init__(self, *, max_connections: int, keepalive_expiry: float = 30.0) -> None:
        sizes = _shard_sizes(max_connections)
        context = _ssl_context()
        self._shards = [
            httpx.HTTPTransport(verify=context, limits=_limits(size, keepalive_expiry))
            for size in sizes
        ]
        self._capacity = sizes
        self._in_flight = [0] * len(sizes)
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            index = min(
                range(len(self._shards)), key=lambda i: self._in_flight[i] / self._capacity[i]
            )
            self._in_flight[index] += 1
        try:
            response = self._shards[index].handle_request(request)
            response.read()
            return response
        finally:
            with self._lock:
                self._in_flight[index] -= 1

    def close(self) -> None:
        for shard in self._shards:
            shard.close()
