"""The in-worker executor: keeps many judge calls in flight inside one worker process.

Shape of one batch task (`run_drain`):

    task thread (database)                    event-loop thread (network only)
    ──────────────────────                    ────────────────────────────────
    jobs_claim (one statement)         ──►    `concurrency` coroutines pull requests from an
    build requests (no query)          ──►    asyncio queue, wait for the rate limiter, call
                                              the provider over one lean HTTP/1.1 pool
    outcomes, in chunks                ◄──    and hand each result back (`_Results`)
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
built once (`DrainContext`), and a one-sample verdict is combined from the outcome just
recorded instead of being read back.

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
import random
import threading
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

from studies.models import Comparison, Criterion, Item, Output

from .config import JudgeNetworkPolicy
from .models import Judge, JudgeJob, JudgeRun, JudgeVersion
from .prompts import PromptRenderer
from .providers import PreparedCall as WirePreparedCall
from .providers import (
    ProviderConfigError,
    ProviderError,
    ProviderRequest,
    ProviderResult,
    TransientProviderError,
    WireTemplate,
    http_client_async,
    provider_call_async,
)
from .ratelimit import Limiter, ProviderLimits, estimate_tokens, limiter_create, limits_for
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


class _Results:
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


class CallSession:
    """`concurrency` coroutines on the shared loop serving one drain's requests."""

    def __init__(self, caller: AsyncCaller, concurrency: int) -> None:
        self.caller = caller
        self.concurrency = concurrency
        self.results = _Results()
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


# --- building requests and outcomes (no network) -------------------------------------------


def allowed_values_for(criterion: Any) -> list[str]:
    """The values a verdict on this criterion may take (see judges/models.py)."""
    scale = criterion.scale
    if scale == "binary":
        return ["pass", "fail"]
    if scale == "pairwise":
        return ["A", "B", "tie"]
    return [str(p.get("value")) for p in (criterion.points or []) if isinstance(p, dict)]


# Read-only stand-ins for the rows `prompts.subject_context_for` reads: loaded as plain values
# (with the claim, or one query per claimed chunk) instead of as model instances per job.
# Named tuples: a few of them per job, and they are the cheapest objects to build.
class _ItemView(NamedTuple):
    input: str
    context: str
    reference: str


class _StudyView(NamedTuple):
    run_conditions: Any


class _OutputView(NamedTuple):
    pk: int
    text: str
    item: _ItemView
    study: _StudyView


class _ComparisonView(NamedTuple):
    pk: int
    item: _ItemView
    study: _StudyView
    output_a: _OutputView
    output_b: _OutputView


class DrainContext:
    """What is the same for every job of a drain, loaded or built once rather than per job:
    the judge version and its config, the run's criteria, the study's run conditions, and per
    criterion the provider request minus its messages (only the prompt differs per subject).

    Read when the drain starts: an edit to the study's run conditions reaches the prompts of
    the next drain (a time slice at most), not of calls already being claimed.
    """

    def __init__(self, run: JudgeRun) -> None:
        self.version: JudgeVersion = run.judge_version
        self.config: Mapping[str, Any] = self.version.config
        self.is_llm = self.version.judge.kind == Judge.Kind.LLM
        # Samples per subject and criterion (judge_run_start validated it); one sample means
        # a single-output subject has exactly one job.
        self.samples = self.config.get("samples", 1) if self.is_llm else 1
        self.study = _StudyView(run_conditions=run.study.run_conditions)
        self.criteria: dict[int, Criterion] = {c.pk: c for c in run.criteria.all()}
        self.allowed: dict[int, list[str]] = {}
        self._templates: dict[int, ProviderRequest] = {}
        self._template_fields: dict[int, dict[str, Any]] = {}
        self._wires: dict[int, WireTemplate] = {}
        self._limits: dict[tuple[str, str], tuple[str, ProviderLimits] | None] = {}
        self._renderer: PromptRenderer | None = None
        # What a provider says on error reaches leads (job errors, raw excerpts) only from a
        # base URL the operator listed; an endpoint admitted as a private-network host could be
        # any local service (see judges/config.py).
        self.show_error_bodies = bool(self.is_llm and JudgeNetworkPolicy.from_settings()
                                      .base_url_listed(str(self.config.get("base_url", ""))))

    def criterion(self, crit_id: int) -> Criterion:
        crit = self.criteria.get(crit_id)
        if crit is None:  # not one of the run's criteria (should not happen); load it anyway
            crit = self.criteria[crit_id] = Criterion.objects.get(pk=crit_id)
        return crit

    def allowed_values(self, crit_id: int) -> list[str]:
        values = self.allowed.get(crit_id)
        if values is None:
            values = self.allowed[crit_id] = allowed_values_for(self.criterion(crit_id))
        return values

    def request_for(self, crit_id: int, ctx: Any) -> ProviderRequest:
        """`prompts.provider_request_for(config, ctx)`, built in full once per criterion.

        Everything in the request but the messages depends on the config and the criterion
        only (allow-list check, API key, JSON schema, parameters); the messages are rendered
        for each subject. A failure (key unset, URL refused) is not cached: every job then
        fails with the reason, as it would have on its own.
        """
        from .prompts import provider_request_for

        template = self._templates.get(crit_id)
        if template is None:
            template = self._templates[crit_id] = provider_request_for(config=self.config,
                                                                       ctx=ctx)
            if self._renderer is None:
                self._renderer = PromptRenderer(self.config)
            self._template_fields[crit_id] = {
                f.name: getattr(template, f.name) for f in dataclasses.fields(template)
                if f.name != "messages"
            }
            return template
        # The constructor with the template's other fields (what dataclasses.replace does,
        # without looking the fields up again for every job).
        renderer = self._renderer
        assert renderer is not None  # made with the first template
        return ProviderRequest(**self._template_fields[crit_id], messages=renderer.render(ctx))

    def wire_for(self, crit_id: int, request: ProviderRequest) -> tuple[WirePreparedCall, bytes]:
        """The HTTP form of a request `request_for(crit_id, …)` built (its template with the
        subject's messages), without encoding the template's fields again."""
        wire = self._wires.get(crit_id)
        if wire is None:
            wire = self._wires[crit_id] = WireTemplate(self._templates[crit_id])
        return wire.wire(request)

    def limit_for(self, request: ProviderRequest) -> tuple[str, ProviderLimits] | None:
        key = (request.base_url, request.model)
        if key not in self._limits:
            self._limits[key] = limits_for(base_url=request.base_url, model=request.model)
        return self._limits[key]


_SUBJECTS_SQL = """
SELECT o.id, NULL, o.text, NULL, NULL, NULL, NULL, i.input, i.context, i.reference
FROM {output} o JOIN {item} i ON i.id = o.item_id WHERE o.id = ANY(%s)
UNION ALL
SELECT NULL, c.id, NULL, c.output_a_id, a.text, c.output_b_id, b.text, i.input,
    i.context, i.reference
FROM {comparison} c JOIN {item} i ON i.id = c.item_id
    JOIN {output} a ON a.id = c.output_a_id JOIN {output} b ON b.id = c.output_b_id
WHERE c.id = ANY(%s)
"""


def _subject_views(
    jobs: Sequence[ClaimedJob], study: _StudyView
) -> tuple[dict[int, _OutputView], dict[int, _ComparisonView]]:
    """The outputs and comparisons (with their items) of a claimed chunk: from the texts the
    claim returned (PostgreSQL), else loaded in one query."""
    outputs: dict[int, _OutputView] = {}
    comparisons: dict[int, _ComparisonView] = {}
    rows: list[tuple[Any, ...]] = []
    missing = []
    for j in jobs:
        t = j.texts
        if t is None:
            missing.append(j)
        else:
            rows.append((j.output_id, j.comparison_id, t.output_text, t.output_a_id,
                         t.output_a_text, t.output_b_id, t.output_b_text, t.item_input,
                         t.item_context, t.item_reference))
    if missing:
        rows += _subject_rows(missing)
    for oid, cid, text, a_id, a_text, b_id, b_text, inp, context, reference in rows:
        item = _ItemView(inp, context, reference)
        if oid is not None:
            outputs[oid] = _OutputView(oid, text, item, study)
        else:
            comparisons[cid] = _ComparisonView(cid, item, study,
                                               _OutputView(a_id, a_text, item, study),
                                               _OutputView(b_id, b_text, item, study))
    return outputs, comparisons


def _subject_rows(jobs: Sequence[ClaimedJob]) -> list[tuple[Any, ...]]:
    out_ids = [j.output_id for j in jobs if j.output_id is not None]
    cmp_ids = [j.comparison_id for j in jobs if j.comparison_id is not None]
    if connection.vendor == "postgresql":
        # Raw SQL: compiling these two ORM queries cost more CPU than running them.
        sql = _SUBJECTS_SQL.format(output=Output._meta.db_table, item=Item._meta.db_table,
                                   comparison=Comparison._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(sql, [out_ids, cmp_ids])
            return list(cursor.fetchall())
    rows: list[tuple[Any, ...]] = [
        (oid, None, text, None, None, None, None, inp, ctx, ref)
        for oid, text, inp, ctx, ref in Output.objects.filter(id__in=out_ids).values_list(
            "id", "text", "item__input", "item__context", "item__reference")]
    rows += [(None, cid, None, *rest) for cid, *rest in Comparison.objects.filter(
        id__in=cmp_ids).values_list(
        "id", "output_a_id", "output_a__text", "output_b_id", "output_b__text",
        "item__input", "item__context", "item__reference")]
    return rows


def _prepare(
    job: ClaimedJob, dctx: DrainContext, outputs: Mapping[int, _OutputView],
    comparisons: Mapping[int, _ComparisonView],
) -> PreparedCall:
    from .prompts import subject_context_for

    criterion = dctx.criterion(job.criterion_id)
    if job.output_id is not None:
        output = outputs.get(job.output_id)
        if output is None:
            raise LookupError(f"output {job.output_id} no longer exists")
        ctx = subject_context_for(criterion=criterion, output=output)
    else:
        assert job.comparison_id is not None
        comparison = comparisons.get(job.comparison_id)
        if comparison is None:
            raise LookupError(f"comparison {job.comparison_id} no longer exists")
        ctx = subject_context_for(criterion=criterion, comparison=comparison, order=job.order)
    request = dctx.request_for(job.criterion_id, ctx)
    wire = None
    if job.sample_index and request.seed is not None:
        # Identical seeds would make every sample the same answer; offset them per sample.
        request = dataclasses.replace(request, seed=request.seed + job.sample_index)
    else:
        wire = dctx.wire_for(job.criterion_id, request)
    prompt_chars = sum(len(m.content) for m in request.messages)
    return PreparedCall(job_id=job.pk, request=request, limit=dctx.limit_for(request),
                        est_tokens=estimate_tokens(prompt_chars=prompt_chars,
                                                   max_tokens=request.max_tokens), wire=wire)


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
    from studies.criteria import interval_bounds

    from .parsing import Unparseable, verdict_parse

    criterion = dctx.criterion(job.criterion_id)
    config = dctx.config
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
    from .parsing import Unparseable
    from .programmatic import programmatic_evaluate

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
# How often a drain's claims also look for jobs whose lease lapsed (their worker died):
# leases last minutes, and the look is a scan of the run's running jobs.
LAPSED_CHECK_S = 5.0


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
    report = DrainReport()
    if run is None:
        report.state = "inactive"
        return report
    dctx = DrainContext(run)
    token = uuid.uuid4().hex
    # Claimed ahead (up to 2 x concurrency outstanding) so that the coroutines never wait for
    # the database, but not much further: a drain holding many leased jobs would keep them
    # from other workers and run past its time slice. Claims take concurrency / 2 at a time (a
    # claim is one statement whatever its size), the moment that many calls are done, so
    # half the concurrency is still queued for the loop while the claim runs. Results are
    # recorded in chunks of at least `record_min` (or whatever is older than RECORD_WAIT_S):
    # two statements per chunk.
    target = concurrency + max(1, concurrency // CLAIM_DIVISOR) * CLAIM_AHEAD
    refill = max(1, concurrency // CLAIM_DIVISOR)
    record_min = max(refill, min(RECORD_MIN, concurrency))
    lease_s = settings.REVIEWHUB_JUDGE_LEASE_S
    deadline = time.monotonic() + slice_s
    next_renew = time.monotonic() + lease_s / 3
    next_lapsed = 0.0
    session = (caller or async_caller()).session(concurrency) if dctx.is_llm else None
    # Chunks are recorded on a thread of their own (its own database connection) while this
    # one claims and builds the next requests; inside a transaction (tests) another
    # connection would not see the jobs, so they are recorded here.
    recorder = (_Recorder() if session is not None and connection.vendor == "postgresql"
                and not connection.in_atomic_block else None)
    jobs: dict[int, ClaimedJob] = {}  # claimed and not recorded yet
    pending: list[JobOutcome] = []  # finished, not recorded yet
    pending_since = 0.0
    outstanding = 0
    claim_open = True
    retry_claim_at = 0.0
    try:
        while True:
            if session is not None and outstanding:
                # Results first, then the claim they make room for, then (maybe) the record:
                # the next requests reach the loop before this chunk's statements run.
                for prepared, call in session.take(min_n=min(refill, outstanding),
                                                   timeout_s=TAKE_WAIT_S):
                    outstanding -= 1
                    pending.append(outcome_for_call(jobs[prepared.job_id], token, dctx, call))
            now_m = time.monotonic()
            if claim_open and now_m >= deadline:
                claim_open = False
                report.state = "sliced"
            if claim_open and target - outstanding >= refill and now_m >= retry_claim_at:
                lapsed = now_m >= next_lapsed
                claim = jobs_claim(run_id=run_id, limit=target - outstanding, lease_token=token,
                                   lapsed=lapsed)
                if lapsed:
                    next_lapsed = now_m + LAPSED_CHECK_S
                report.remaining = claim.remaining
                if claim.state in ("inactive", "stopped"):
                    claim_open = False
                    report.state = claim.state
                elif claim.jobs:
                    report.claimed += len(claim.jobs)
                    jobs.update((j.pk, j) for j in claim.jobs)
                    outstanding += _dispatch(claim.jobs, dctx, token, session, pending)
                    report.max_in_flight = max(report.max_in_flight, min(outstanding, concurrency))
                elif outstanding == 0:
                    report.next_available_at = claim.next_available_at
                    if report.state == "ok":
                        report.state = "idle"
                    claim_open = False
                else:
                    # Nothing claimable now; check again shortly rather than on every result.
                    retry_claim_at = now_m + 0.25
            finishing = not claim_open and outstanding == 0
            if pending and not pending_since:
                pending_since = now_m
            if pending and (finishing or len(pending) >= record_min
                            or now_m - pending_since >= RECORD_WAIT_S):
                if recorder is not None:
                    recorder.submit(pending, jobs=jobs, report=report, dctx=dctx)
                else:
                    _record(pending, jobs=jobs, report=report, dctx=dctx)
                pending = []
                pending_since = 0.0
            if time.monotonic() >= next_renew:
                if recorder is not None:  # after the records queued before it, never beside
                    recorder.renew(run_id=run_id, token=token, lease_s=lease_s)
                else:
                    _leases_renew(run_id=run_id, token=token, lease_s=lease_s)
                next_renew = time.monotonic() + lease_s / 3
            if finishing:
                if recorder is not None:
                    recorder.wait(report)
                break
    finally:
        if session is not None:
            session.close()
        if recorder is not None:
            recorder.close()
    if report.state == "sliced":
        report.remaining = JudgeJob.objects.filter(
            run_id=run_id, status__in=ACTIVE_JOB_STATUSES).count()
    report.run_finished = run_finish_if_complete(run_id=run_id)
    return report


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
    views, pairs = _subject_views(claimed, dctx.study)
    for job in claimed:
        try:
            prepared = _prepare(job, dctx, views, pairs)
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
