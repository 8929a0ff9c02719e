"""The in-worker executor: keeps many judge calls in flight inside one worker process.

Shape of one batch task (`run_drain`):

    task thread (ORM)                         event-loop thread (network only)
    ─────────────────                         ────────────────────────────────
    jobs_claim (one short transaction) ──►    `concurrency` coroutines pull requests from an
    build requests (bulk-loaded rows)  ──►    asyncio queue, wait for the rate limiter, call
                                              the provider over one pooled httpx.AsyncClient
    jobs_record + verdicts_build       ◄──    and push each result to a thread-safe queue
    (bulk, conditional on the lease)

The task thread claims ahead (up to 1.5 x concurrency outstanding), so the coroutines never
wait for the database: claiming, recording and aggregating overlap with calls in flight, and
no transaction is ever open during network I/O. The event loop, the httpx pool and the
limiter live for the whole worker process (one per process, re-created after a fork) and are
shared by every batch task that process runs.

Each drain stops claiming after `REVIEWHUB_JUDGE_TASK_SLICE_S` and returns once its calls are
recorded; the Celery task then re-enqueues a successor, so long runs are a chain of bounded
tasks (a worker can shut down warm between them) rather than one task that runs for hours.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from .models import Judge, JudgeJob, JudgeRun, JudgeVersion
from .providers import (
    ProviderError,
    ProviderRequest,
    ProviderResult,
    TransientProviderError,
    http_client_async,
    provider_call_async,
)
from .ratelimit import Limiter, ProviderLimits, estimate_tokens, limiter_create, limits_for
from .runs import (
    ClaimResult,
    JobOutcome,
    SubjectKey,
    jobs_claim,
    jobs_record,
    run_finish_if_complete,
    subject_key,
    verdicts_build,
)

logger = logging.getLogger(__name__)

RAW_RESPONSE_MAX_CHARS = 20_000
ERROR_MAX_CHARS = 1_000
# A slow-drip server can keep httpx's per-read timeout from ever firing; this bounds a call.
TOTAL_TIMEOUT_FACTOR = 2.0


# --- the process-wide event loop ------------------------------------------------------------


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

    async def call(self, prepared: PreparedCall) -> CallOutcome:
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
            try:
                async with asyncio.timeout(req.timeout_s * TOTAL_TIMEOUT_FACTOR + 5):
                    out.result = await provider_call_async(self.client, req)
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


class CallSession:
    """`concurrency` coroutines on the shared loop serving one drain's requests."""

    def __init__(self, caller: AsyncCaller, concurrency: int) -> None:
        self.caller = caller
        self.concurrency = concurrency
        self.results: queue.Queue[tuple[PreparedCall, CallOutcome]] = queue.Queue()
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
        await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))

    async def _worker(self) -> None:
        assert self._inbox is not None
        while True:
            item = await self._inbox.get()
            if item is None:
                return
            outcome = await self.caller.call(item)
            self.results.put((item, outcome))

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


# --- building requests and outcomes (no network) -------------------------------------------


def allowed_values_for(criterion: Any) -> list[str]:
    """The values a verdict on this criterion may take (see judges/models.py)."""
    scale = criterion.scale
    if scale == "binary":
        return ["pass", "fail"]
    if scale == "pairwise":
        return ["A", "B", "tie"]
    return [str(p.get("value")) for p in (criterion.points or []) if isinstance(p, dict)]


def _prepare(job: JudgeJob, version: JudgeVersion) -> PreparedCall:
    from .prompts import provider_request_for, subject_context_for

    config = version.config
    ctx = subject_context_for(
        criterion=job.criterion, output=job.output, comparison=job.comparison, order=job.order
    )
    request = provider_request_for(config=config, ctx=ctx)
    if job.sample_index and request.seed is not None:
        # Identical seeds would make every sample the same answer; offset them per sample.
        request = dataclasses.replace(request, seed=request.seed + job.sample_index)
    limit = limits_for(base_url=request.base_url, model=request.model)
    prompt_chars = sum(len(m.content) for m in request.messages)
    return PreparedCall(job_id=job.pk, request=request, limit=limit,
                        est_tokens=estimate_tokens(prompt_chars=prompt_chars,
                                                   max_tokens=request.max_tokens))


def backoff_delay(*, attempt: int, retry_after_s: float | None) -> float:
    """Seconds before the next attempt: full-jitter exponential backoff, capped, but never
    sooner than the provider's Retry-After (which is honoured even above the cap)."""
    base = settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S
    cap = settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S
    backoff = random.uniform(0, min(cap, base * (2 ** max(0, attempt - 1))))
    if retry_after_s is not None:
        # A little jitter on top so that a burst of 429s does not come back in lockstep.
        return max(retry_after_s * (1 + random.uniform(0, 0.1)), min(backoff, cap))
    return backoff


def _attempt_errors(job: JudgeJob, entry: Mapping[str, Any]) -> dict[str, Any]:
    details = dict(job.details or {})
    errors = list(details.get("attempt_errors", []))
    errors.append(dict(entry))
    details["attempt_errors"] = errors[-20:]
    return details


def _error_outcome(job: JudgeJob, token: str, exc: ProviderError, now: datetime) -> JobOutcome:
    transient = isinstance(exc, TransientProviderError)
    retry_after = getattr(exc, "retry_after_s", None) if transient else None
    reason = str(exc)[:ERROR_MAX_CHARS]
    entry = {"attempt": job.attempts, "reason": reason, "http_status": exc.http_status,
             "transient": transient, "retry_after_s": retry_after}
    details = _attempt_errors(job, entry)
    excerpt = (exc.body_excerpt or "")[:RAW_RESPONSE_MAX_CHARS]
    if transient and job.attempts < settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS:
        delay = backoff_delay(attempt=job.attempts, retry_after_s=retry_after)
        return JobOutcome(
            job_id=job.pk, lease_token=token, status=JudgeJob.Status.QUEUED,
            error_kind=JudgeJob.ErrorKind.TRANSIENT, error=f"retrying in {delay:.1f}s: {reason}",
            http_status=exc.http_status, raw_response=excerpt, details=details,
            available_at=now + timedelta(seconds=delay),
        )
    if transient:
        reason = f"gave up after {job.attempts} attempts: {reason}"
    return JobOutcome(
        job_id=job.pk, lease_token=token, status=JudgeJob.Status.FAILED,
        error_kind=JudgeJob.ErrorKind.TRANSIENT if transient else JudgeJob.ErrorKind.PERMANENT,
        error=reason, http_status=exc.http_status, raw_response=excerpt, details=details,
    )


def _parsed_outcome(
    job: JudgeJob, token: str, text: str, version: JudgeVersion, result: ProviderResult | None
) -> JobOutcome:
    from .parsing import Unparseable, verdict_parse

    criterion = job.criterion
    config = version.config
    outcome = JobOutcome(job_id=job.pk, lease_token=token, status=JudgeJob.Status.DONE,
                         raw_response=text[:RAW_RESPONSE_MAX_CHARS],
                         details=dict(job.details or {}))
    if result is not None:
        from .pricing import cost_for

        outcome.http_status = result.http_status
        outcome.provider_request_id = result.request_id or ""
        outcome.tokens_in = result.tokens_in
        outcome.tokens_out = result.tokens_out
        outcome.latency_ms = result.latency_ms
        outcome.cost = cost_for(provider=str(config.get("provider", "")),
                                model=str(config.get("model", "")), tokens_in=result.tokens_in,
                                tokens_out=result.tokens_out, override=config.get("prices"))
        outcome.details["finish_reason"] = result.finish_reason
    try:
        parsed = verdict_parse(
            text=text, criterion_scale=criterion.scale,
            allowed_values=allowed_values_for(criterion), parser=config.get("parser") or {},
            logprobs=result.logprobs if result is not None else None,
            pass_threshold=criterion.pass_threshold,
        )
    except Unparseable as exc:
        outcome.status = JudgeJob.Status.UNPARSEABLE
        outcome.error_kind = JudgeJob.ErrorKind.PARSE
        outcome.error = f"unparseable: {getattr(exc, 'reason', str(exc))}"[:ERROR_MAX_CHARS]
        return outcome
    outcome.parsed_value = parsed.value
    outcome.value_num = parsed.value_num
    outcome.probability = parsed.probability
    outcome.rationale = parsed.rationale
    return outcome


def _programmatic_outcome(job: JudgeJob, token: str, version: JudgeVersion) -> JobOutcome:
    from .parsing import Unparseable
    from .programmatic import programmatic_evaluate

    try:
        parsed = programmatic_evaluate(config=version.config, output=job.output,
                                       criterion=job.criterion)
    except Unparseable as exc:
        return JobOutcome(job_id=job.pk, lease_token=token, status=JudgeJob.Status.UNPARSEABLE,
                          error_kind=JudgeJob.ErrorKind.PARSE,
                          error=f"unscorable: {getattr(exc, 'reason', str(exc))}")
    except Exception as exc:
        return JobOutcome(job_id=job.pk, lease_token=token, status=JudgeJob.Status.FAILED,
                          error_kind=JudgeJob.ErrorKind.PERMANENT,
                          error=f"check failed: {type(exc).__name__}: {exc}"[:ERROR_MAX_CHARS])
    return JobOutcome(job_id=job.pk, lease_token=token, status=JudgeJob.Status.DONE,
                      parsed_value=parsed.value, value_num=parsed.value_num,
                      probability=parsed.probability, rationale=parsed.rationale,
                      latency_ms=0.0, cost=0.0)


def outcome_for_call(
    job: JudgeJob, token: str, version: JudgeVersion, call: CallOutcome,
    now: datetime | None = None,
) -> JobOutcome:
    """Turn one call's result or error into the outcome to record (pure, no I/O)."""
    now = now or timezone.now()
    if call.error is not None:
        return _error_outcome(job, token, call.error, now)
    assert call.result is not None
    return _parsed_outcome(job, token, call.result.text, version, call.result)


# --- the drain loop ------------------------------------------------------------------------


@dataclass
class DrainReport:
    claimed: int = 0
    recorded: int = 0
    discarded: int = 0  # outcomes whose lease was lost (another worker owns the job now)
    verdicts: int = 0
    state: str = "ok"  # ok | inactive | stopped | sliced | idle
    remaining: int = 0
    next_available_at: datetime | None = None
    run_finished: bool = False
    max_in_flight: int = 0
    errors: list[str] = field(default_factory=list)


def run_drain(
    *,
    run_id: int,
    concurrency: int | None = None,
    slice_s: float | None = None,
    caller: AsyncCaller | None = None,
) -> DrainReport:
    """Claim and execute a run's jobs until none is claimable or the time slice ends."""
    concurrency = concurrency or settings.REVIEWHUB_JUDGE_CONCURRENCY
    slice_s = settings.REVIEWHUB_JUDGE_TASK_SLICE_S if slice_s is None else slice_s
    run = JudgeRun.objects.select_related("judge_version__judge").filter(pk=run_id).first()
    report = DrainReport()
    if run is None:
        report.state = "inactive"
        return report
    version = run.judge_version
    token = uuid.uuid4().hex
    is_llm = version.judge.kind == Judge.Kind.LLM
    target = concurrency + max(1, concurrency // 2)
    refill = max(1, concurrency // 4)
    lease_s = settings.REVIEWHUB_JUDGE_LEASE_S
    deadline = time.monotonic() + slice_s
    next_renew = time.monotonic() + lease_s / 3
    session = (caller or async_caller()).session(concurrency) if is_llm else None
    jobs: dict[int, JudgeJob] = {}
    subjects: dict[int, SubjectKey] = {}
    outstanding = 0
    claim_open = True
    retry_claim_at = 0.0
    try:
        while True:
            ready: list[JobOutcome] = []
            now_m = time.monotonic()
            if claim_open and now_m >= deadline:
                claim_open = False
                report.state = "sliced"
            if claim_open and target - outstanding >= refill and now_m >= retry_claim_at:
                claim = jobs_claim(run_id=run_id, limit=target - outstanding, lease_token=token)
                report.remaining = claim.remaining
                if claim.state in ("inactive", "stopped"):
                    claim_open = False
                    report.state = claim.state
                elif claim.jobs:
                    report.claimed += len(claim.jobs)
                    subjects.update((j.pk, subject_key(j)) for j in claim.jobs)
                    outstanding += _dispatch(claim, version, token, session, jobs, ready)
                    report.max_in_flight = max(report.max_in_flight, min(outstanding, concurrency))
                elif outstanding == 0:
                    report.next_available_at = claim.next_available_at
                    if report.state == "ok":
                        report.state = "idle"
                    break
                else:
                    # Nothing claimable now; check again shortly rather than on every result.
                    retry_claim_at = now_m + 0.25
            if session is not None and outstanding:
                for prepared, call in _collect(session, min_n=refill, max_wait_s=0.005):
                    outstanding -= 1
                    job = jobs.pop(prepared.job_id)
                    ready.append(outcome_for_call(job, token, version, call))
            _record(ready, subjects=subjects, report=report)
            if time.monotonic() >= next_renew:
                JudgeJob.objects.filter(
                    run_id=run_id, status=JudgeJob.Status.RUNNING, lease_token=token
                ).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
                next_renew = time.monotonic() + lease_s / 3
            if not claim_open and outstanding == 0:
                break
    finally:
        if session is not None:
            session.close()
    report.run_finished = run_finish_if_complete(run_id=run_id)
    return report


def _dispatch(
    claim: ClaimResult, version: JudgeVersion, token: str, session: CallSession | None,
    jobs: dict[int, JudgeJob], ready: list[JobOutcome],
) -> int:
    """Build requests and hand them to the loop; programmatic checks run right here."""
    batch: list[PreparedCall] = []
    now = timezone.now()
    for job in claim.jobs:
        if session is None:
            ready.append(_programmatic_outcome(job, token, version))
            continue
        try:
            prepared = _prepare(job, version)
        except ProviderError as exc:
            ready.append(_error_outcome(job, token, exc, now))
            continue
        except Exception as exc:  # a config that cannot become a request fails the job
            ready.append(JobOutcome(
                job_id=job.pk, lease_token=token, status=JudgeJob.Status.FAILED,
                error_kind=JudgeJob.ErrorKind.PERMANENT,
                error=f"cannot build the request: {type(exc).__name__}: {exc}"[:ERROR_MAX_CHARS],
            ))
            continue
        jobs[job.pk] = job
        batch.append(prepared)
    if batch and session is not None:
        session.submit(batch)
    return len(batch)


def _collect(
    session: CallSession, *, min_n: int, max_wait_s: float
) -> list[tuple[PreparedCall, CallOutcome]]:
    """Block for the first result, then gather more for up to `max_wait_s` (batching)."""
    out: list[tuple[PreparedCall, CallOutcome]] = []
    try:
        out.append(session.results.get(timeout=0.25))
    except queue.Empty:
        return out
    until = time.monotonic() + max_wait_s
    while len(out) < min_n:
        remaining = until - time.monotonic()
        try:
            out.append(session.results.get(timeout=max(0.0, remaining)) if remaining > 0
                       else session.results.get_nowait())
        except queue.Empty:
            break
    while True:
        try:
            out.append(session.results.get_nowait())
        except queue.Empty:
            return out


def _record(
    ready: list[JobOutcome], *, subjects: dict[int, SubjectKey], report: DrainReport
) -> None:
    """Record a chunk (one statement on PostgreSQL), then aggregate finished subjects.

    Aggregation runs after the recording transaction committed: two workers finishing the
    last two samples of one subject at the same time each see the other's commit at least
    from the later of the two, so the verdict is never missed (and built at most twice, the
    unique constraint keeping one).
    """
    if not ready:
        return
    recorded = set(jobs_record(outcomes=ready))
    report.recorded += len(recorded)
    report.discarded += len(ready) - len(recorded)
    finished = {
        subjects[o.job_id] for o in ready
        if o.job_id in recorded and o.status != JudgeJob.Status.QUEUED
    }
    for o in ready:
        subjects.pop(o.job_id, None)
    if finished:
        report.verdicts += verdicts_build(subjects=finished)
