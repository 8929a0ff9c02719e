"""The judge calls' event loop: one per worker process, in a thread of its own.

`AsyncCaller` owns the loop, the pooled HTTP client and the rate limiter; a drain (judges and
candidate runs alike) opens a `CallSession` on it: `concurrency` coroutines pulling prepared
calls from a queue and handing each outcome back to the drain's thread (`CallResults`). The
per-call deadline (a bound on the whole answer, which httpx's per-read timeout does not give
against a slow-drip server) is kept by one timer per session (`_Deadlines`), not by an
`asyncio.timeout` per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings

from .providers import PreparedCall as WirePreparedCall
from .providers import (
    ProviderError,
    ProviderRequest,
    ProviderResult,
    TransientProviderError,
    http_client_async,
    provider_call_async,
)
from .ratelimit import Limiter, ProviderLimits, limiter_create

logger = logging.getLogger(__name__)

# A slow-drip server can keep httpx's per-read timeout from ever firing; this bounds a call:
# its answer must be complete within timeout_s x TOTAL_TIMEOUT_FACTOR + TOTAL_TIMEOUT_SLACK_S.
TOTAL_TIMEOUT_FACTOR = 2.0
TOTAL_TIMEOUT_SLACK_S = 5.0
# How often a session looks for calls past that bound: a call is cut at most this much later
# than its bound (a bound of minutes; one timer per session instead of one per call).
DEADLINE_CHECK_S = 1.0

_T = TypeVar("_T")


@dataclass
class CallOutcome:
    result: ProviderResult | None = None
    error: ProviderError | None = None
    started_at: float = 0.0
    ended_at: float = 0.0


@dataclass
class PreparedCall:
    job_id: int
    request: ProviderRequest
    limit: tuple[str, ProviderLimits] | None
    est_tokens: int
    # The HTTP request and body bytes, when built from the drain's template (see DrainContext).
    wire: tuple[WirePreparedCall, bytes] | None = None


class AsyncCaller:
    """An event loop in a daemon thread, one pooled AsyncClient and the rate limiter."""

    def __init__(self, *, max_connections: int) -> None:
        self.pid = os.getpid()
        self.max_connections = max_connections
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="judge-calls",
                                        daemon=True)
        self._thread.start()
        self.client: Any = None
        self.limiter: Limiter | None = None
        asyncio.run_coroutine_threadsafe(self._setup(), self.loop).result(timeout=30)

    async def _setup(self) -> None:
        self.client = http_client_async(max_connections=self.max_connections)
        self.limiter = limiter_create()

    async def call(self, prepared: PreparedCall,
                   deadlines: _Deadlines | None = None) -> CallOutcome:
        """One call, its rate-limit slot held around it. The answer must be complete within
        the total bound: kept by `deadlines` (the session's timer) when given, else by an
        `asyncio.timeout` of its own."""
        out = CallOutcome(started_at=time.monotonic())
        holder = ""
        limit = prepared.limit
        req = prepared.request
        try:
            if limit is not None and self.limiter is not None:
                holder = await self.limiter.acquire(
                    limit[0], limit[1], tokens=prepared.est_tokens,
                    ttl_s=req.timeout_s * TOTAL_TIMEOUT_FACTOR + 30,
                )
            bound_s = req.timeout_s * TOTAL_TIMEOUT_FACTOR + TOTAL_TIMEOUT_SLACK_S
            try:
                if deadlines is not None:
                    out.result = await deadlines.run(
                        provider_call_async(self.client, req, prepared.wire), bound_s)
                else:
                    async with asyncio.timeout(bound_s):
                        out.result = await provider_call_async(self.client, req, prepared.wire)
            except TimeoutError:
                out.error = TransientProviderError(
                    "timeout: no complete answer within "
                    f"{req.timeout_s * TOTAL_TIMEOUT_FACTOR:.0f}s"
                )
        except ProviderError as exc:
            out.error = exc
        except Exception as exc:  # an unexpected bug must not kill the other calls
            logger.exception("judge call failed unexpectedly")
            out.error = TransientProviderError(f"unexpected error: {type(exc).__name__}: {exc}")
        finally:
            if holder and limit is not None and self.limiter is not None:
                used = None
                if out.result is not None and out.result.tokens_in is not None:
                    used = out.result.tokens_in + (out.result.tokens_out or 0)
                delta = (used - prepared.est_tokens) if used is not None else 0
                try:
                    await self.limiter.release(limit[0], limit[1], holder=holder,
                                               token_delta=delta)
                except Exception:  # the slot expires on its own; never fail the call for it
                    logger.warning("rate limiter release failed", exc_info=True)
        out.ended_at = time.monotonic()
        return out

    def session(self, concurrency: int) -> CallSession:
        return CallSession(self, concurrency)


class CallResults:
    """Results handed from the event loop to the task thread.

    A `queue.Queue` wakes the waiting thread for every result, and each wake-up takes the GIL
    away from the event loop; here the waiter says how many results it wants and is woken
    once, when that many have arrived (or at its timeout).
    """

    def __init__(self) -> None:
        self._items: deque[tuple[PreparedCall, CallOutcome]] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._want = 1

    def put(self, item: tuple[PreparedCall, CallOutcome]) -> None:
        with self._cond:
            self._items.append(item)
            if len(self._items) >= self._want:
                self._cond.notify()

    def take(self, *, min_n: int, timeout_s: float) -> list[tuple[PreparedCall, CallOutcome]]:
        """Everything available once `min_n` results are there or `timeout_s` has passed."""
        with self._cond:
            if len(self._items) < min_n:
                self._want = max(1, min_n)
                self._cond.wait_for(lambda: len(self._items) >= self._want, timeout_s)
                self._want = 1
            out = list(self._items)
            self._items.clear()
            return out


class _Deadlines:
    """The total bound of each call in flight in one session, checked every
    DEADLINE_CHECK_S by one timer: a call past its bound is cancelled and raises
    TimeoutError, as under `asyncio.timeout`, but without a timer handle (and its heap
    entry) created and cancelled per call. Used on the event loop's thread only."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._armed: dict[asyncio.Task[Any], float] = {}
        self._fired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    async def run(self, coro: Coroutine[Any, Any, _T], bound_s: float) -> _T:
        """`await coro`, cancelled once `bound_s` have passed (then TimeoutError)."""
        task = asyncio.current_task()
        assert task is not None
        self._armed[task] = self._loop.time() + bound_s
        if self._timer is None and not self._closed:
            self._timer = self._loop.call_later(DEADLINE_CHECK_S, self._check)
        try:
            return await coro
        except asyncio.CancelledError:
            if task not in self._fired:
                raise
            self._fired.discard(task)
            if task.uncancel() > 0:  # also cancelled from elsewhere: that cancellation wins
                raise
            raise TimeoutError from None
        finally:
            del self._armed[task]
            if task in self._fired:  # cancelled as it finished: the cancellation is void
                self._fired.discard(task)
                task.uncancel()

    def _check(self) -> None:
        self._timer = None
        now = self._loop.time()
        for task, at in self._armed.items():
            if at <= now and task not in self._fired:
                self._fired.add(task)
                task.cancel()
        if self._armed and not self._closed:
            self._timer = self._loop.call_later(DEADLINE_CHECK_S, self._check)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class CallSession:
    """`concurrency` coroutines on the shared loop serving one drain's requests."""

    def __init__(self, caller: AsyncCaller, concurrency: int) -> None:
        self.caller = caller
        self.concurrency = concurrency
        self.results = CallResults()
        self._deadlines = _Deadlines(caller.loop)
        self._inbox: asyncio.Queue[PreparedCall | None] | None = None
        self._started = threading.Event()
        self._workers: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            self._start(), caller.loop
        )
        if not self._started.wait(30):
            raise RuntimeError("the judge call loop did not start")

    async def _start(self) -> None:
        self._inbox = asyncio.Queue()
        self._started.set()
        try:
            await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))
        finally:
            self._deadlines.close()

    async def _worker(self) -> None:
        assert self._inbox is not None
        while True:
            item = await self._inbox.get()
            if item is None:
                return
            outcome = await self.caller.call(item, self._deadlines)
            self.results.put((item, outcome))

    def take(self, *, min_n: int, timeout_s: float) -> list[tuple[PreparedCall, CallOutcome]]:
        return self.results.take(min_n=min_n, timeout_s=timeout_s)

    def submit(self, items: list[PreparedCall]) -> None:
        inbox = self._inbox
        assert inbox is not None

        def put_all() -> None:
            for item in items:
                inbox.put_nowait(item)

        self.caller.loop.call_soon_threadsafe(put_all)

    def close(self) -> None:
        self.submit_stop()
        try:
            self._workers.result(timeout=30)
        except Exception:
            logger.warning("call session did not stop cleanly", exc_info=True)

    def submit_stop(self) -> None:
        inbox = self._inbox
        assert inbox is not None
        n = self.concurrency

        def put_stops() -> None:
            for _ in range(n):
                inbox.put_nowait(None)

        self.caller.loop.call_soon_threadsafe(put_stops)


_caller: AsyncCaller | None = None
_caller_lock = threading.Lock()


def async_caller() -> AsyncCaller:
    """This process's caller (created on first use; re-created in a forked child)."""
    global _caller
    with _caller_lock:
        if _caller is None or _caller.pid != os.getpid():
            conns = max(256, settings.REVIEWHUB_JUDGE_CONCURRENCY * 2)
            _caller = AsyncCaller(max_connections=conns)
        return _caller
