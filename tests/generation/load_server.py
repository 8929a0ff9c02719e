"""SIMULATED PROVIDER with a count of requests in flight — test and benchmark infrastructure.

`LoadServer` is tests/judges/provider_server.py's server (OpenAI and Anthropic wire formats)
that also records every change in the number of model requests it is serving, on its own
clock, and answers each request after a latency drawn from a programmable distribution, or
with a programmable fault:

    with LoadServer(latencies_s=[...], faults={3: rate_limited("0.1")}) as server:
        ...
        server.max_in_flight, server.mean_in_flight(from_level=C, until_completion=N - C)

`latencies_s[i]` is the delay of the i-th request (cycled); `faults[i]` replaces the i-th
request's answer (i counts requests as they arrive, from 0); `scripts[marker]` replaces the
answers to successive requests whose prompt contains `marker` (one behaviour per attempt;
attempts beyond the list are answered normally).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tests.judges.provider_server import (
    ANTHROPIC_PATHS,
    OPENAI_PATHS,
    Behaviour,
    ProviderServer,
    RecordedRequest,
    slow,
    success,
)


class LoadServer(ProviderServer):
    def __init__(self, *, latencies_s: Sequence[float] = (0.0,),
                 faults: dict[int, Behaviour] | None = None,
                 scripts: dict[str, list[Behaviour]] | None = None,
                 answer: Callable[[RecordedRequest], str] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.latencies_s = list(latencies_s)
        self.faults = dict(faults or {})
        self.scripts = {k: list(v) for k, v in (scripts or {}).items()}
        self.answer = answer or (lambda req: "simulated answer")
        self._arrivals = itertools.count()
        self._load_lock = threading.Lock()
        self.level = 0
        self.max_in_flight = 0
        # (server monotonic time, level after the change, +1 arrival / -1 completion)
        self.events: list[tuple[float, int, int]] = []
        self.delays_s: list[float] = []
        self.handler = self._behaviour

    def _behaviour(self, req: RecordedRequest) -> Behaviour:
        i = next(self._arrivals)
        fault = self.faults.get(i)
        if fault is not None:
            return fault
        prompt = req.prompt_text()
        with self._load_lock:
            for marker, script in self.scripts.items():
                if marker in prompt and script:
                    return script.pop(0)
        delay = self.latencies_s[i % len(self.latencies_s)]
        with self._load_lock:
            self.delays_s.append(delay)
        return slow(delay, success(self.answer(req)))

    async def _respond(self, writer: Any, method: str, path: str, headers: dict[str, str],
                       body: bytes, keep_alive: bool) -> bool:
        model = method == "POST" and (path in OPENAI_PATHS or path in ANTHROPIC_PATHS)
        if model:
            with self._load_lock:
                self.level += 1
                self.max_in_flight = max(self.max_in_flight, self.level)
                self.events.append((time.monotonic(), self.level, 1))
        try:
            return await super()._respond(writer, method, path, headers, body, keep_alive)
        finally:
            if model:
                with self._load_lock:
                    self.level -= 1
                    self.events.append((time.monotonic(), self.level, -1))

    def mean_in_flight(self, *, from_level: int, until_completion: int) -> float:
        """Time-weighted mean of requests in flight, from the moment `from_level` were first
        in flight to the `until_completion`-th completion (the steady state of a closed loop:
        after that, fewer requests remain than the loop holds)."""
        with self._load_lock:
            events = list(self.events)
        start = next(i for i, e in enumerate(events) if e[1] >= from_level)
        done = 0
        end = len(events) - 1
        for i, e in enumerate(events):
            if e[2] < 0:
                done += 1
                if done == until_completion:
                    end = i
                    break
        area = 0.0
        for (t0, level, _), (t1, _, _) in itertools.pairwise(events[start:end + 1]):
            area += level * (t1 - t0)
        span = events[end][0] - events[start][0]
        return area / span
