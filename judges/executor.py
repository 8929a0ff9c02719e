"""The in-worker executor: keeps many judge calls in flight inside one worker process.

Shape of one batch task (`run_drain`):

    task thread (database)                    event-loop thread (network only)
    ──────────────────────                    ────────────────────────────────
    jobs_claim (one statement)         ──►    `concurrency` coroutines pull requests from an
    build requests (no query;          ──►    asyncio queue, wait for the rate limiter, call
      drain_requests.py)                      the provider over one lean HTTP/1.1 pool
    outcomes, in chunks                ◄──    and hand each result back (calls.py)
        │
        ▼
    recorder thread (its own connection): jobs_record_with_verdicts, one statement per
    chunk recording its jobs and the verdicts of its one-job subjects (then verdicts_build
    for subjects aggregated over several jobs); lease renewals, in turn with the chunks

The task thread claims ahead (up to 2 x concurrency outstanding), so the coroutines never
wait for the database: claiming, recording and aggregating overlap with calls in flight, and
no transaction is ever open during network I/O. Recording on a thread of its own lets the
next claim run while a chunk is written (a drain inside a transaction, as in tests, records
on the task thread instead). The event loop, the HTTP pool and the limiter live for the whole
worker process (one per process, re-created after a fork) and are shared by every batch task
that process runs.

The threads share one GIL, so every microsecond the task thread spends per job is taken from
the calls: claims and records work in chunks (one statement per chunk, whatever its size),
claimed jobs are plain values (`ClaimedJob`), what is the same for every job of a drain is
built once (`DrainContext`: a request body is its criterion's template with the subject's
texts spliced in), the calls' total bound is one timer per session, and a one-sample verdict
is combined from the outcome just recorded instead of being read back.

Each drain stops claiming after `REVIEWHUB_JUDGE_TASK_SLICE_S` and returns once its calls are
recorded; the Celery task then re-enqueues a successor, so long runs are a chain of bounded
tasks (a worker can shut down warm between them) rather than one task that runs for hours.
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.utils import timezone

from studies.criteria import interval_bounds
from studies.models import Criterion, Output

from .calls import (
    TOTAL_TIMEOUT_FACTOR,
    AsyncCaller,
    CallOutcome,
    CallResults,
    CallSession,
    PreparedCall,
    async_caller,
)
from .drain_pacing import DrainPacing
from .drain_requests import (
    DrainContext,
    allowed_values_for,
    prepare_call,
    subject_views,
)
from .models import JudgeJob, JudgeRun
from .parsing import Unparseable, verdict_parse
from .pricing import cost_for
from .programmatic import programmatic_evaluate
from .providers import (
    ProviderConfigError,
    ProviderError,
    ProviderResult,
    TransientProviderError,
)
from .runs import (
    ACTIVE_JOB_STATUSES,
    ClaimedJob,
    JobOutcome,
    JobRow,
    SubjectKey,
    job_row_for_outcome,
    jobs_claim,
    jobs_record_with_verdicts,
    run_finish_if_complete,
    subject_key,
    verdicts_build,
)

# Re-exported: the executor's public names (generation/executor.py and tests import them here).
__all__ = [
    "TOTAL_TIMEOUT_FACTOR",
    "AsyncCaller",
    "CallOutcome",
    "CallResults",
    "CallSession",
    "DrainContext",
    "DrainReport",
    "PreparedCall",
    "allowed_values_for",
    "async_caller",
    "backoff_delay",
    "error_reason_shown",
    "outcome_for_call",
    "prepare_call",
    "run_drain",
    "subject_views",
]

logger = logging.getLogger(__name__)

RAW_RESPONSE_MAX_CHARS = 20_000
ERROR_MAX_CHARS = 1_000



# --- outcomes (no network) ----------------------------------------------------------------


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


def _attempt_errors(job: ClaimedJob, entry: Mapping[str, Any]) -> dict[str, Any]:
    details = dict(job.details or {})
    errors = list(details.get("attempt_errors", []))
    errors.append(dict(entry))
    details["attempt_errors"] = errors[-20:]
    return details


# The start of the reasons `providers._transport_error` gives; anything else said about an
# unlisted endpoint's answer is replaced by "provider error".
_GENERIC_REASONS = ("timeout", "connection error", "cannot send request",
                    "undecodable response body")


def error_reason_shown(exc: ProviderError, *, show_body: bool) -> str:
    """The reason recorded (and shown to leads) for a failed call.

    From an unlisted endpoint only the HTTP status and a generic reason: its body (an error
    message, a refusal, the bytes of a status line a non-HTTP service sent back) is never
    repeated. Our own configuration errors are always shown in full.
    """
    if show_body or isinstance(exc, ProviderConfigError):
        return str(exc)[:ERROR_MAX_CHARS]
    text = str(exc)
    label = next((g for g in _GENERIC_REASONS if text.startswith(g)), "provider error")
    status = f" (HTTP {exc.http_status})" if exc.http_status is not None else ""
    return (f"{label}{status}; the provider's answer is not shown because the base URL is not "
            "listed in REVIEWHUB_JUDGE_ALLOWED_BASE_URLS")


def _error_outcome(job: ClaimedJob, token: str, exc: ProviderError, now: datetime, *,
                   show_body: bool = True) -> JobOutcome:
    transient = isinstance(exc, TransientProviderError)
    retry_after = getattr(exc, "retry_after_s", None) if transient else None
    reason = error_reason_shown(exc, show_body=show_body)
    entry = {"attempt": job.attempts, "reason": reason, "http_status": exc.http_status,
             "transient": transient, "retry_after_s": retry_after}
    details = _attempt_errors(job, entry)
    excerpt = (exc.body_excerpt or "")[:RAW_RESPONSE_MAX_CHARS] if show_body else ""
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
    job: ClaimedJob, token: str, text: str, dctx: DrainContext, result: ProviderResult | None
) -> JobOutcome:
    criterion = dctx.criterion(job.criterion_id)
    config = dctx.config
    outcome = JobOutcome(job_id=job.pk, lease_token=token, status=JudgeJob.Status.DONE,
                         raw_response=text[:RAW_RESPONSE_MAX_CHARS],
                         details=dict(job.details or {}))
    if result is not None:
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
            allowed_values=dctx.allowed_values(job.criterion_id),
            parser=config.get("parser") or {},
            logprobs=result.logprobs if result is not None else None,
            pass_threshold=criterion.pass_threshold,
            bounds=interval_bounds(criterion) if criterion.scale == "interval" else None,
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


def _programmatic_outcome(
    job: ClaimedJob, token: str, dctx: DrainContext, output: Output | None
) -> JobOutcome:
    try:
        if output is None:
            raise LookupError(f"output {job.output_id} no longer exists")
        parsed = programmatic_evaluate(config=dctx.config, output=output,
                                       criterion=dctx.criterion(job.criterion_id))
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
    job: ClaimedJob, token: str, dctx: DrainContext, call: CallOutcome,
    now: datetime | None = None,
) -> JobOutcome:
    """Turn one call's result or error into the outcome to record (pure, no I/O)."""
    if call.error is not None:
        return _error_outcome(job, token, call.error, now or timezone.now(),
                              show_body=dctx.show_error_bodies)
    assert call.result is not None
    return _parsed_outcome(job, token, call.result.text, dctx, call.result)


# --- the drain loop ------------------------------------------------------------------------

# Results are recorded in chunks of RECORD_MIN (at most the concurrency), or once the oldest
# has waited RECORD_WAIT_S: recording later holds up no call, it only delays the verdict.
RECORD_MIN = 64
RECORD_WAIT_S = 0.2
# How long the task thread waits for results before looking at claims and records again.
TAKE_WAIT_S = 0.05
# A drain claims again once concurrency / CLAIM_DIVISOR calls are done, and keeps
# CLAIM_AHEAD such chunks claimed beyond the calls in flight (see run_drain).
CLAIM_DIVISOR = 2
CLAIM_AHEAD = 2


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
    run = (JudgeRun.objects.select_related("judge_version__judge", "study")
           .filter(pk=run_id).first())
    if run is None:
        return DrainReport(state="inactive")
    dctx = DrainContext(run)
    session = (caller or async_caller()).session(concurrency) if dctx.is_llm else None
    # Chunks are recorded on a thread of their own (its own database connection) while this
    # one claims and builds the next requests; inside a transaction (tests) another
    # connection would not see the jobs, so they are recorded here.
    recorder = (_Recorder() if session is not None and connection.vendor == "postgresql"
                and not connection.in_atomic_block else None)
    drain = _Drain(run_id=run_id, dctx=dctx, concurrency=concurrency, slice_s=slice_s,
                   session=session, recorder=recorder)
    try:
        while drain.step():
            pass
    finally:
        if session is not None:
            session.close()
        if recorder is not None:
            recorder.close()
    report = drain.report
    if report.state == "sliced":
        report.remaining = JudgeJob.objects.filter(
            run_id=run_id, status__in=ACTIVE_JOB_STATUSES).count()
    report.run_finished = run_finish_if_complete(run_id=run_id)
    return report


class _Drain(DrainPacing[DrainReport]):
    """One drain's state between its steps: the jobs claimed and not recorded, the outcomes
    not recorded yet, the calls outstanding, and when to claim, record and renew next."""

    def __init__(self, *, run_id: int, dctx: DrainContext, concurrency: int, slice_s: float,
                 session: CallSession | None, recorder: _Recorder | None) -> None:
        # Claimed ahead (up to 2 x concurrency outstanding) so that the coroutines never wait
        # for the database, but not much further: a drain holding many leased jobs would keep
        # them from other workers and run past its time slice. Claims take concurrency / 2 at
        # a time (a claim is one statement whatever its size), the moment that many calls are
        # done, so half the concurrency is still queued for the loop while the claim runs.
        # Results are recorded in chunks of at least `record_min` (or whatever is older than
        # RECORD_WAIT_S): one statement per chunk.
        refill = max(1, concurrency // CLAIM_DIVISOR)
        super().__init__(target=concurrency + refill * CLAIM_AHEAD, refill=refill,
                         slice_s=slice_s, lease_s=settings.REVIEWHUB_JUDGE_LEASE_S)
        self.run_id, self.dctx, self.concurrency = run_id, dctx, concurrency
        self.session, self.recorder = session, recorder
        self.report = DrainReport()
        self.token = uuid.uuid4().hex
        self.record_min = max(self.refill, min(RECORD_MIN, concurrency))
        self.jobs: dict[int, ClaimedJob] = {}  # claimed and not recorded yet
        self.pending: list[JobOutcome] = []  # finished, not recorded yet

    def step(self) -> bool:
        """Results first, then the claim they make room for, then (maybe) the record: the
        next requests reach the loop before this chunk's statements run. False when done."""
        session, report = self.session, self.report
        if session is not None and self.outstanding:
            jobs, pending, token, dctx = self.jobs, self.pending, self.token, self.dctx
            for prepared, call in session.take(min_n=min(self.refill, self.outstanding),
                                               timeout_s=TAKE_WAIT_S):
                self.outstanding -= 1
                pending.append(outcome_for_call(jobs[prepared.job_id], token, dctx, call))
        now_m = time.monotonic()
        finishing = self.claim_turn(now_m)
        self._record_if_due(now_m, finishing)
        if time.monotonic() >= self.next_renew:
            if self.recorder is not None:  # after the records queued before it, never beside
                self.recorder.renew(run_id=self.run_id, token=self.token, lease_s=self.lease_s)
            else:
                _leases_renew(run_id=self.run_id, token=self.token, lease_s=self.lease_s)
            self.next_renew = time.monotonic() + self.lease_s / 3
        if finishing and self.recorder is not None:
            self.recorder.wait(report)
        return not finishing

    def claim(self, now_m: float) -> None:
        report = self.report
        claim = jobs_claim(run_id=self.run_id, limit=self.target - self.outstanding,
                           lease_token=self.token, lapsed=self.lapsed_due(now_m))
        report.remaining = claim.remaining
        if claim.state in ("inactive", "stopped"):
            self.claim_open = False
            report.state = claim.state
        elif claim.jobs:
            report.claimed += len(claim.jobs)
            self.jobs.update((j.pk, j) for j in claim.jobs)
            self.outstanding += _dispatch(claim.jobs, self.dctx, self.token, self.session,
                                          self.pending)
            report.max_in_flight = max(report.max_in_flight,
                                       min(self.outstanding, self.concurrency))
        elif self.outstanding == 0:
            report.next_available_at = claim.next_available_at
            if report.state == "ok":
                report.state = "idle"
            self.claim_open = False
        else:
            # Nothing claimable now; check again shortly rather than on every result.
            self.retry_claim_at = now_m + 0.25

    def _record_if_due(self, now_m: float, finishing: bool) -> None:
        pending = self.pending
        if not pending:
            return
        if not self.pending_since:
            self.pending_since = now_m
        if (finishing or len(pending) >= self.record_min
                or now_m - self.pending_since >= RECORD_WAIT_S):
            if self.recorder is not None:
                self.recorder.submit(pending, jobs=self.jobs, report=self.report,
                                     dctx=self.dctx)
            else:
                _record(pending, jobs=self.jobs, report=self.report, dctx=self.dctx)
            self.pending = []
            self.pending_since = 0.0


def _dispatch(
    claimed: Sequence[ClaimedJob], dctx: DrainContext, token: str, session: CallSession | None,
    ready: list[JobOutcome],
) -> int:
    """Build requests and hand them to the loop; programmatic checks run right here."""
    if session is None:
        outputs = Output.objects.select_related("item", "study").in_bulk(
            [j.output_id for j in claimed if j.output_id is not None])
        for job in claimed:
            output = outputs.get(job.output_id) if job.output_id is not None else None
            ready.append(_programmatic_outcome(job, token, dctx, output))
        return 0
    batch: list[PreparedCall] = []
    now = timezone.now()
    views, pairs = subject_views(claimed, dctx.study)
    for job in claimed:
        try:
            prepared = prepare_call(job, dctx, views, pairs)
        except ProviderError as exc:
            ready.append(_error_outcome(job, token, exc, now, show_body=dctx.show_error_bodies))
            continue
        except Exception as exc:  # a config that cannot become a request fails the job
            ready.append(JobOutcome(
                job_id=job.pk, lease_token=token, status=JudgeJob.Status.FAILED,
                error_kind=JudgeJob.ErrorKind.PERMANENT,
                error=f"cannot build the request: {type(exc).__name__}: {exc}"[:ERROR_MAX_CHARS],
            ))
            continue
        batch.append(prepared)
    if batch:
        session.submit(batch)
    return len(batch)


def _leases_renew(*, run_id: int, token: str, lease_s: float) -> None:
    JudgeJob.objects.filter(
        run_id=run_id, status=JudgeJob.Status.RUNNING, lease_token=token
    ).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_s))


class _Chunk(NamedTuple):
    """A chunk of outcomes ready to record, with the subjects whose verdicts follow."""

    outcomes: list[JobOutcome]
    one_job: dict[int, tuple[SubjectKey, JobRow]]
    others: dict[int, SubjectKey]


def _chunk_for(ready: list[JobOutcome], jobs: dict[int, ClaimedJob],
               dctx: DrainContext) -> _Chunk:
    """The chunk to record (its jobs leave `jobs`: they are no longer the drain's)."""
    one_job: dict[int, tuple[SubjectKey, JobRow]] = {}
    others: dict[int, SubjectKey] = {}
    for o in ready:
        job = jobs.pop(o.job_id)
        if o.status == JudgeJob.Status.QUEUED:
            continue
        key = subject_key(job)
        if dctx.samples == 1 and job.output_id is not None:
            one_job[o.job_id] = (key, job_row_for_outcome(
                outcome=o, run_id=job.run_id, sample_index=job.sample_index, order=job.order))
        else:
            others[o.job_id] = key
    return _Chunk(ready, one_job, others)


def _chunk_write(chunk: _Chunk, criteria: Mapping[int, Criterion]) -> tuple[int, int, int]:
    """Record a chunk and build its verdicts: (recorded, discarded, verdicts changed).

    A one-sample single-output subject has no other job, so its verdict is combined from the
    outcome just recorded, in the recording statement itself (for the jobs it recorded).
    Other subjects are aggregated after the recording statement committed: two workers
    finishing the last two samples of one subject at the same time each see the other's
    commit at least from the later of the two, so the verdict is never missed (and built at
    most twice, the unique constraint keeping one).
    """
    recorded_ids, verdicts = jobs_record_with_verdicts(
        outcomes=chunk.outcomes, one_job=chunk.one_job, criteria=criteria)
    recorded = set(recorded_ids)
    finished = {key for job_id, key in chunk.others.items() if job_id in recorded}
    if finished:
        verdicts += verdicts_build(subjects=finished, criteria=criteria)
    return len(recorded), len(chunk.outcomes) - len(recorded), verdicts


def _report_add(report: DrainReport, written: tuple[int, int, int]) -> None:
    report.recorded += written[0]
    report.discarded += written[1]
    report.verdicts += written[2]


def _record(
    ready: list[JobOutcome], *, jobs: dict[int, ClaimedJob], report: DrainReport,
    dctx: DrainContext,
) -> None:
    """Record a chunk here and now (one statement on PostgreSQL; see `_chunk_write`)."""
    if ready:
        _report_add(report, _chunk_write(_chunk_for(ready, jobs, dctx), dctx.criteria))


# Chunks a drain may have handed to its recorder and not seen recorded yet; past this the
# drain waits (a slow database slows the claims instead of piling up outcomes).
RECORDS_IN_FLIGHT = 2


def _close_thread_connection() -> None:
    connection.close()


class _Recorder:
    """Records a drain's chunks on one thread of its own, in order, with its own database
    connection, so the drain's thread claims and builds requests while a chunk is written.

    Lease renewals go through the same thread, after the chunks queued before them: two
    UPDATEs of the same job rows from two connections at once could deadlock.
    """

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="judge-record")
        self._futures: deque[concurrent.futures.Future[tuple[int, int, int]]] = deque()

    def submit(self, ready: list[JobOutcome], *, jobs: dict[int, ClaimedJob],
               report: DrainReport, dctx: DrainContext) -> None:
        chunk = _chunk_for(ready, jobs, dctx)
        self._futures.append(self._pool.submit(_chunk_write, chunk, dctx.criteria))
        self._collect(report, keep=RECORDS_IN_FLIGHT)

    def renew(self, *, run_id: int, token: str, lease_s: float) -> None:
        self._futures.append(self._pool.submit(self._renew, run_id, token, lease_s))

    @staticmethod
    def _renew(run_id: int, token: str, lease_s: float) -> tuple[int, int, int]:
        _leases_renew(run_id=run_id, token=token, lease_s=lease_s)
        return 0, 0, 0

    def _collect(self, report: DrainReport, *, keep: int) -> None:
        """Add what has been written to the report; wait while more than `keep` are left.
        A chunk that failed raises here, on the drain's thread."""
        while self._futures and (self._futures[0].done() or len(self._futures) > keep):
            _report_add(report, self._futures.popleft().result())

    def wait(self, report: DrainReport) -> None:
        """Until every chunk handed over is recorded."""
        self._collect(report, keep=0)

    def close(self) -> None:
        # The thread's database connection is closed by the thread itself, after its work
        # (`connection` is per thread: looked up there, not here).
        self._pool.submit(_close_thread_connection)
        self._pool.shutdown(wait=True)
