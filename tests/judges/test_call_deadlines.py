"""The total bound on a judge call, kept by one timer per call session (judges/calls.py).

Before, each call ran under its own `asyncio.timeout`; the session's `_Deadlines` must give
the same outcomes: a call past its bound ends in TimeoutError (a transient "timeout: no
complete answer" error for the job), one within it returns its answer with its task left
uncancelled, and a cancellation from elsewhere stays a cancellation.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from judges import calls
from judges.calls import AsyncCaller, PreparedCall, _Deadlines
from judges.providers import ChatMessage, ProviderRequest, TransientProviderError, provider_prepare


@pytest.fixture
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "DEADLINE_CHECK_S", 0.02)
    monkeypatch.setattr(calls, "TOTAL_TIMEOUT_SLACK_S", 0.0)


def test_a_call_past_its_bound_raises_timeout(quick_checks: None) -> None:
    async def main() -> float:
        deadlines = _Deadlines(asyncio.get_running_loop())
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await deadlines.run(asyncio.sleep(30), 0.1)
        deadlines.close()
        return time.monotonic() - t0

    elapsed = asyncio.run(main())
    assert 0.1 <= elapsed < 1.0


def test_a_call_within_its_bound_returns_and_leaves_its_task_uncancelled(
    quick_checks: None,
) -> None:
    async def answer() -> str:
        await asyncio.sleep(0.01)
        return "ok"

    async def main() -> tuple[list[str], int]:
        deadlines = _Deadlines(asyncio.get_running_loop())
        got = [await deadlines.run(answer(), 5.0) for _ in range(3)]
        await asyncio.sleep(0.1)  # checks run meanwhile, with nothing armed
        task = asyncio.current_task()
        assert task is not None
        deadlines.close()
        return got, task.cancelling()

    assert asyncio.run(main()) == (["ok", "ok", "ok"], 0)


def test_a_cancellation_from_elsewhere_is_not_turned_into_a_timeout(quick_checks: None) -> None:
    async def main() -> None:
        deadlines = _Deadlines(asyncio.get_running_loop())
        task = asyncio.create_task(deadlines.run(asyncio.sleep(30), 60.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadlines.close()

    asyncio.run(main())


class _Answer:
    status_code = 200
    headers: dict[str, str] = {}
    content = b'{"choices": [{"message": {"content": "{\\"verdict\\": \\"pass\\"}"}}]}'


class _FakeClient:
    """Answers at once, except for a URL ending in /slow, which never answers."""

    async def request(self, method: str, url: str, **kwargs: Any) -> _Answer:
        if url.endswith("/slow/chat/completions"):
            await asyncio.sleep(3600)
        return _Answer()


def _prepared(job_id: int, base_url: str) -> PreparedCall:
    request = ProviderRequest(provider="openai", base_url=base_url, model="m", api_key=None,
                              messages=(ChatMessage("user", "hi"),), timeout_s=0.1)
    call = provider_prepare(request)
    return PreparedCall(job_id=job_id, request=request, limit=None, est_tokens=1,
                        wire=(call, b"{}"))


def test_a_session_times_out_the_slow_call_and_answers_the_others(quick_checks: None) -> None:
    caller = AsyncCaller(max_connections=4)
    caller.client = _FakeClient()
    session = caller.session(3)
    try:
        t0 = time.monotonic()
        session.submit([_prepared(1, "http://h/slow"), _prepared(2, "http://h/v1"),
                        _prepared(3, "http://h/v1")])
        got: dict[int, Any] = {}
        while len(got) < 3 and time.monotonic() - t0 < 10:
            got.update((p.job_id, o) for p, o in session.take(min_n=3, timeout_s=1.0))
        elapsed = time.monotonic() - t0
    finally:
        session.close()
        caller.loop.call_soon_threadsafe(caller.loop.stop)
    assert set(got) == {1, 2, 3}
    assert isinstance(got[1].error, TransientProviderError)
    assert str(got[1].error) == "timeout: no complete answer within 0s"  # 2 x 0.1 s, rounded
    assert got[2].result is not None and got[2].result.text == '{"verdict": "pass"}'
    assert got[3].error is None
    assert elapsed < 5.0  # cut at its bound (0.2 s) plus a check interval, not at 3600 s
