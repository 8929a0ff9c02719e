"""The generation drain: one candidate of one run, exactly C requests in flight (closed loop),
or requests started at the run's rate (open loop, at most C in flight).

It reuses the judge executor's process-wide event loop, pooled httpx client and rate limiter
(`judges.executor.async_caller`): a `CallSession` of C coroutines pulls requests from a queue,
so as long as the queue holds work there are exactly C requests in flight (closed loop), and
nothing else of this candidate is (the drain slot, `runs.drain_slot_take`, admits one drain
per candidate). The task thread claims ahead (C more than are in flight) so the coroutines
never wait for the database, builds each request, records outcomes with no transaction open
during network I/O, and keeps its leases and its slot alive.

Per call it measures the HTTP exchange (`latency_ms`, time to last byte) and, apart from
it, ReviewHub's own time on the call (`overhead_ms`: the coroutine's wall time on the call
minus the exchange), and over the drain the mean number of requests in flight (the sum of
call wall times over the drain's window), so a slow worker shows as overhead, not latency.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from judges.config import JudgeNetworkPolicy
from judges.drain_pacing import DrainPacing
from judges.executor import (
    AsyncCaller,
    CallOutcome,
    PreparedCall,
    async_caller,
    backoff_delay,
    error_reason_shown,
)
from judges.pricing import cost_for
from judges.prompts import api_key_resolve
from judges.providers import (
    ChatMessage,
    ProviderConfigError,
    ProviderError,
    ProviderRequest,
    TransientProviderError,
    provider_prepare,
    serialize_body,
)
from judges.providers import PreparedCall as WirePreparedCall
from judges.providers.streaming import StreamCut, tool_calls_of
from judges.ratelimit import estimate_tokens, limits_for
from studies.services import GeneratedOutput

from . import runs
from .config import MissingField, render, tools_for
from .models import GenerationConfig, GenerationJob, GenerationRun
from .replay import NotReplayable, prompt_chars, recorded_of, replay_body
from .schema import schema_check

logger = logging.getLogger(__name__)

TEXT_MAX_CHARS = 200_000
ERROR_MAX_CHARS = 1_000
TAKE_WAIT_S = 0.02
RECORD_MIN = 32
RECORD_WAIT_S = 0.2
RETRY_CLAIM_S = 0.1
CLAIM_AHEAD_MIN = 32


def arrival_seed(*, run_id: int, config_id: int, drain_index: int) -> int:
    """The seed of one drain's arrival process: fixed by (run, candidate, drain), so the gaps
    a drain drew can be drawn again from what the candidate's load record says."""
    digest = hashlib.sha256(f"arrivals:{run_id}:{config_id}:{drain_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class PoissonArrivals:
    """Open-loop arrival times at `rate` per second: a Poisson process (independent
    exponential gaps), as requests from many independent users arrive in production. Evenly
    spaced starts would understate queueing: bursts are what push a server's tail latency."""

    def __init__(self, *, rate: float, seed: int) -> None:
        self.rate = rate
        self.seed = seed
        self._rng = random.Random(seed)
        self.next_at: float | None = None

    def take(self, now: float) -> float:
        """The start time of the next request (the first one starts at `now`)."""
        if self.next_at is None:
            self.next_at = now
        at = self.next_at
        self.next_at += self._rng.expovariate(self.rate)
        return at


def submit_at(session: Any, items: list[PreparedCall], times: list[float]) -> None:
    """Hand each request to the session at its own start time, on the event loop's clock
    (`time.monotonic`, asyncio's default): timers on the loop start requests on time even
    while this task thread waits on the database, where pacing from the thread would send the
    requests that fell due meanwhile in one burst."""
    loop = session.caller.loop

    def schedule() -> None:
        for item, at in zip(items, times, strict=True):
            loop.call_at(at, session.submit, [item])

    loop.call_soon_threadsafe(schedule)


def error_kind_for(exc: ProviderError) -> str:
    """The kind a failed call is counted under (see generation/models.py)."""
    kinds = GenerationJob.ErrorKind
    if isinstance(exc, ProviderConfigError):
        return kinds.CONFIG
    status = exc.http_status
    reason = str(exc)
    if status == 429:
        return kinds.RATE_LIMITED
    if status is not None and status >= 500:
        return kinds.SERVER_ERROR
    if status == 408 or reason.startswith("timeout"):
        return kinds.TIMEOUT
    if reason.startswith("connection error"):
        return kinds.CONNECTION
    if reason.startswith("model refused"):
        return kinds.REFUSED
    return kinds.CLIENT_ERROR


_REFUSAL_FINISH = frozenset({"refusal", "content_filter"})
_TRUNCATED_FINISH = frozenset({"length", "max_tokens"})


class DrainContext:
    """What is the same for every request of a (run, candidate): the config, the template,
    the output schema, and the provider request minus its messages."""

    def __init__(self, run: GenerationRun, config: GenerationConfig, *,
                 preview: bool = False) -> None:
        self.run = run
        # A preview builds the exact request without reading the key (the web process need
        # not have it): the header carries a stand-in, shown redacted like a real key.
        self.preview = preview
        self.config_row = config
        self.config: Mapping[str, Any] = config.config
        tpl = run.template.template
        self.template = tpl
        self.schema = tpl.get("output_schema") or run.study.output_schema or None
        policy = JudgeNetworkPolicy.from_settings()
        self.show_error_bodies = policy.base_url_listed(str(self.config.get("base_url", "")))
        self._base: ProviderRequest | None = None
        self._limit: Any = None

    def base_request(self) -> ProviderRequest:
        """The request without messages; ProviderConfigError when it may not be sent (URL no
        longer allowed, key variable refused or unset). Not cached on failure."""
        if self._base is not None:
            return self._base
        c = self.config
        base_url = str(c.get("base_url", ""))
        access = JudgeNetworkPolicy.from_settings().base_url_access(base_url)
        if access.kind == "refused":
            if access.transient:
                raise TransientProviderError(access.reason)
            raise ProviderConfigError(access.reason)
        params = c.get("parameters") or {}
        extra = dict(c.get("extra_body") or {})
        if params.get("top_p") is not None:
            extra["top_p"] = params["top_p"]
        response_format = None
        if self.template.get("structured_output") and self.schema:
            response_format = {"name": "output", "schema": self.schema, "strict": False}
        self._base = ProviderRequest(
            provider=str(c.get("provider")), base_url=base_url, model=str(c.get("model")),
            api_key=self._api_key(), messages=(), temperature=params.get("temperature"),
            max_tokens=params.get("max_tokens"), seed=params.get("seed"),
            response_format=response_format, timeout_s=float(c.get("timeout_s") or 60.0),
            extra=extra)
        self._limit = limits_for(base_url=base_url, model=self._base.model)
        return self._base

    def _api_key(self) -> str | None:
        if self.preview:
            return "preview-key" if self.config.get("api_key_env") else None
        return api_key_resolve(self.config)

    def prepare(self, job: runs.ClaimedJob) -> tuple[PreparedCall, str]:
        """(the call, the sha256 of the exact body sent)."""
        base = self.base_request()
        if self.run.replay:
            return self._prepare_replay(job, base)
        messages = []
        system = render(str(self.template.get("system") or ""), job.item)
        if system:
            messages.append(ChatMessage(role="system", content=system))
        messages.append(ChatMessage(role="user", content=render(self.template["user"],
                                                                job.item)))
        request = dataclasses.replace(base, messages=tuple(messages))
        if job.sample_index and request.seed is not None:
            # Identical seeds would make every sample the same answer.
            request = dataclasses.replace(request, seed=request.seed + job.sample_index)
        call = self._streamed(self._with_tools(provider_prepare(request)))
        body = serialize_body(call.body)
        chars = sum(len(m.content) for m in messages)
        prepared = PreparedCall(job_id=job.id, request=request, limit=self._limit,
                                est_tokens=estimate_tokens(prompt_chars=chars,
                                                           max_tokens=request.max_tokens),
                                wire=(call, body))
        return prepared, hashlib.sha256(body).hexdigest()


    def _with_tools(self, call: WirePreparedCall) -> WirePreparedCall:
        """The call with the template's tool definitions in the provider's shape
        (generation/config.py `tools_for`); the model may answer with tool calls."""
        tools = self.template.get("tools")
        if not tools:
            return call
        body = {**call.body, "tools": tools_for(str(self.config.get("provider")), tools)}
        return dataclasses.replace(call, body=body)

    def _streamed(self, call: WirePreparedCall) -> WirePreparedCall:
        """The call as a streamed one when the config says `stream`: the provider's
        server-sent events (with usage in the last OpenAI chunk), read piece by piece for the
        time to first token (judges/providers/streaming.py)."""
        if not self.config.get("stream"):
            return call
        body = {**call.body, "stream": True}
        if self.config.get("provider") != "anthropic":
            body["stream_options"] = {"include_usage": True}
        return dataclasses.replace(call, body=body)

    def _prepare_replay(self, job: runs.ClaimedJob, base: ProviderRequest
                        ) -> tuple[PreparedCall, str]:
        """The item's recorded request, sent unchanged but for the model (generation/replay.py);
        one that cannot be sent to this provider fails this output with the reason."""
        try:
            recorded = recorded_of(job.item.get("metadata"), job.item.get("recorded_request"))
            body = replay_body(recorded, provider=base.provider, model=base.model,
                               max_tokens=base.max_tokens)
        except NotReplayable as exc:
            raise ProviderConfigError(f"recorded request not replayable: {exc}") from None
        # The URL and headers (key included) of this provider, from the config's request.
        http = provider_prepare(dataclasses.replace(
            base, messages=(ChatMessage(role="user", content="-"),)))
        call = self._streamed(WirePreparedCall(method=http.method, url=http.url,
                                               headers=http.headers, body=body))
        content = serialize_body(body)
        prepared = PreparedCall(job_id=job.id, request=base, limit=self._limit,
                                est_tokens=estimate_tokens(prompt_chars=prompt_chars(recorded),
                                                           max_tokens=base.max_tokens),
                                wire=(call, content))
        return prepared, hashlib.sha256(content).hexdigest()


def _details_fresh(job: runs.ClaimedJob) -> dict[str, Any]:
    """The job's details without what only described its last attempt's answer."""
    details = dict(job.details or {})
    for key in ("partial", "ttft_ms", "tool_calls"):
        details.pop(key, None)
    return details


def request_preview(*, template: Any, config: GenerationConfig, item: Any
                    ) -> dict[str, Any]:
    """The exact HTTP request a run would send for `item` under `template` to `config`'s
    candidate (method, URL, headers with the key redacted, JSON body, its sha256 as the
    outputs record it): the template's tools in the provider's shape, streaming included.
    ProviderConfigError when it may not be sent; MissingField when the item lacks a
    placeholder."""
    run = GenerationRun(study=template.study, template=template, concurrency=1)
    ctx = DrainContext(run, config, preview=True)
    job = runs.ClaimedJob(id=0, item_id=item.pk, sample_index=0, attempts=0, details={},
                          item={"input": item.input, "context": item.context,
                                "reference": item.reference, "external_id": item.external_id,
                                "metadata": item.metadata})
    prepared, request_hash = ctx.prepare(job)
    assert prepared.wire is not None
    call, body = prepared.wire
    return {"method": call.method, "url": call.url, "headers": call.redacted_headers(),
            "body": json.loads(body), "request_hash": request_hash}


def _attempt_errors(job: runs.ClaimedJob, entry: Mapping[str, Any]) -> dict[str, Any]:
    details = _details_fresh(job)
    errors = list(details.get("attempt_errors", []))
    errors.append(dict(entry))
    details["attempt_errors"] = errors[-20:]
    return details


def _output_for(ctx: DrainContext, job: runs.ClaimedJob, values: Mapping[str, Any]
                ) -> GeneratedOutput | None:
    if job.sample_index != 0:
        return None
    error = str(values.get("error") or "")
    kind = str(values.get("error_kind") or "")
    if kind and not error:
        error = kind
    return GeneratedOutput(
        candidate_id=ctx.config_row.candidate_id, item_id=job.item_id,
        text=str(values.get("text") or ""), error=error,
        finish_reason=str(values.get("finish_reason") or ""),
        latency_ms=values.get("latency_ms"), tokens_in=values.get("tokens_in"),
        tokens_out=values.get("tokens_out"), cost=values.get("cost"),
        schema_valid=values.get("schema_valid"),
        metadata={"config_version": ctx.config_row.version,
                  "config_hash": ctx.config_row.content_hash, "run": ctx.run.pk,
                  "request_hash": values.get("request_hash", ""), "error_kind": kind,
                  "overhead_ms": values.get("overhead_ms"),
                  "ttft_ms": (values.get("details") or {}).get("ttft_ms"),
                  # The text is what a cut stream delivered before the error, not an answer.
                  "partial": bool((values.get("details") or {}).get("partial")),
                  "tool_calls": (values.get("details") or {}).get("tool_calls") or [],
                  "schema_violation": values.get("schema_violation", ""),
                  "concurrency": ctx.run.concurrency,
                  "measured_at": timezone.now().isoformat()})


def _partial_answer(values: dict[str, Any], cut: StreamCut) -> None:
    """What a cut stream had delivered, kept beside its error: the text so far, its time to
    first token and latency, and the tokens and finish reason seen (usually none: they come
    in the last events)."""
    values.update(text=cut.partial_text[:TEXT_MAX_CHARS], latency_ms=cut.latency_ms,
                  finish_reason=cut.finish_reason or "", tokens_in=cut.tokens_in,
                  tokens_out=cut.tokens_out,
                  provider_request_id=(cut.request_id or "")[:200])
    details = values["details"]
    details["partial"] = True
    if cut.ttft_ms is not None:
        details["ttft_ms"] = cut.ttft_ms
    details["attempt_errors"][-1]["partial_chars"] = len(cut.partial_text)


def outcome_for_error(ctx: DrainContext, job: runs.ClaimedJob, token: str, exc: ProviderError,
                      now: datetime, request_hash: str = "") -> runs.JobOutcome:
    """A failed call: re-queued with backoff while attempts remain (transient), else final."""
    kind = error_kind_for(exc)
    transient = isinstance(exc, TransientProviderError)
    retry_after = getattr(exc, "retry_after_s", None) if transient else None
    reason = error_reason_shown(exc, show_body=ctx.show_error_bodies)
    details = _attempt_errors(job, {"attempt": job.attempts, "kind": kind, "reason": reason,
                                    "http_status": exc.http_status,
                                    "retry_after_s": retry_after})
    values: dict[str, Any] = {"error_kind": kind, "http_status": exc.http_status,
                              "details": details, "request_hash": request_hash}
    if isinstance(exc, StreamCut):
        _partial_answer(values, exc)
    if transient and job.attempts < settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS:
        delay = backoff_delay(attempt=job.attempts, retry_after_s=retry_after)
        values.update(error=f"retrying in {delay:.1f}s: {reason}"[:ERROR_MAX_CHARS],
                      available_at=now + timedelta(seconds=delay))
        return runs.JobOutcome(job_id=job.id, token=token, status=GenerationJob.Status.QUEUED,
                               values=values)
    if transient:
        reason = f"gave up after {job.attempts} attempts: {reason}"
    values["error"] = reason[:ERROR_MAX_CHARS]
    return runs.JobOutcome(job_id=job.id, token=token, status=GenerationJob.Status.FAILED,
                           values=values, output=_output_for(ctx, job, values))


def outcome_for_call(ctx: DrainContext, job: runs.ClaimedJob, token: str, call: CallOutcome,
                     request_hash: str, now: datetime | None = None) -> runs.JobOutcome:
    """Turn one call's result or error into the outcome to record (pure, no I/O)."""
    now = now or timezone.now()
    if call.error is not None:
        return outcome_for_error(ctx, job, token, call.error, now, request_hash)
    result = call.result
    assert result is not None
    wall_ms = (call.ended_at - call.started_at) * 1000.0
    c = ctx.config
    values: dict[str, Any] = {
        "text": result.text[:TEXT_MAX_CHARS], "finish_reason": result.finish_reason or "",
        "http_status": result.http_status, "provider_request_id": (result.request_id or "")[:200],
        "tokens_in": result.tokens_in, "tokens_out": result.tokens_out,
        "latency_ms": result.latency_ms, "overhead_ms": max(0.0, wall_ms - result.latency_ms),
        "cost": cost_for(provider=str(c.get("provider")), model=str(c.get("model")),
                         tokens_in=result.tokens_in, tokens_out=result.tokens_out,
                         override=c.get("prices")),
        "request_hash": request_hash, "error_kind": "", "error": "",
        "details": _details_fresh(job),
    }
    if result.ttft_ms is not None:
        # No column of its own (no migration): the job's details and the output's metadata.
        values["details"]["ttft_ms"] = result.ttft_ms
    calls = tool_calls_of(str(c.get("provider")), result.raw)
    if calls:
        # The answer called tools: kept in full beside the text; a call-only answer's text is
        # the calls as JSON (what an application would act on).
        values["details"]["tool_calls"] = calls
        if not result.text:
            values["text"] = json.dumps(calls, ensure_ascii=False)[:TEXT_MAX_CHARS]
    finish = (result.finish_reason or "").lower()
    if finish in _REFUSAL_FINISH:
        values.update(error_kind=GenerationJob.ErrorKind.REFUSED,
                      error=f"refused (finish_reason {finish})")
    elif finish in _TRUNCATED_FINISH:
        values.update(error_kind=GenerationJob.ErrorKind.TRUNCATED,
                      error=f"truncated (finish_reason {finish})")
    if ctx.schema:
        verdict = schema_check(result.text, ctx.schema)
        values.update(schema_valid=verdict.valid, schema_violation=verdict.violation)
    return runs.JobOutcome(job_id=job.id, token=token, status=GenerationJob.Status.DONE,
                           values=values, output=_output_for(ctx, job, values))


@dataclass
class DrainReport:
    state: str = "ok"  # ok | busy | inactive | stopped | sliced | idle
    claimed: int = 0
    recorded: int = 0
    discarded: int = 0
    max_in_flight: int = 0
    arrivals: int = 0  # open loop: requests started by the arrival process
    busy_s: float = 0.0
    window_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def run_drain(*, run_id: int, config_id: int, slice_s: float | None = None,
              caller: AsyncCaller | None = None) -> DrainReport:
    """Call one candidate's claimable jobs at exactly C in flight until none is claimable or
    the time slice ends."""
    report = DrainReport()
    run = (GenerationRun.objects.select_related("template", "study")
           .filter(pk=run_id).first())
    config = GenerationConfig.objects.filter(pk=config_id).first()
    if run is None or config is None or run.status != GenerationRun.Status.RUNNING:
        report.state = "inactive"
        return report
    token = runs.new_token()
    if not runs.drain_slot_take(run_id=run_id, config_id=config_id, token=token,
                                lease_s=settings.REVIEWHUB_JUDGE_LEASE_S):
        report.state = "busy"
        return report
    slice_s = settings.REVIEWHUB_GENERATION_TASK_SLICE_S if slice_s is None else slice_s
    drain = _Drain(DrainContext(run, config), token, report, caller, slice_s)
    try:
        drain.loop()
    finally:
        drain.close()
    runs.run_finish_if_complete(run_id=run_id)
    return report


class _Drain(DrainPacing[DrainReport]):
    """The state of one drain: the jobs claimed and in flight, the outcomes waiting to be
    recorded, and the clocks of the next claim, record and lease renewal. `loop` turns
    each round: collect finished calls, claim more, record, renew."""

    def __init__(self, ctx: DrainContext, token: str, report: DrainReport,
                 caller: AsyncCaller | None, slice_s: float) -> None:
        c = ctx.run.concurrency
        # Claimed ahead of the calls in flight: at least CLAIM_AHEAD_MIN jobs (and C),
        # refilled once half of that is left, so a claim's and a record's round trips (tens
        # of ms on a busy database) never leave a coroutine without its next request, and
        # each claim takes a chunk large enough that its statements cost little per job.
        ahead = max(c, CLAIM_AHEAD_MIN)
        super().__init__(target=c + ahead, refill=max(1, ahead // 2), slice_s=slice_s,
                         lease_s=settings.REVIEWHUB_JUDGE_LEASE_S)
        self.ctx, self.token, self.report = ctx, token, report
        self.run_id, self.config_id = ctx.run.pk, ctx.config_row.pk
        self.c = c
        self.session = (caller or async_caller()).session(c)
        self.rate = float(ctx.run.rate or 0.0)
        self.arrivals: PoissonArrivals | None = None
        if self.rate > 0:
            drain_index = runs.drains_so_far(run_id=self.run_id, config_id=self.config_id)
            self.arrivals = PoissonArrivals(rate=self.rate, seed=arrival_seed(
                run_id=self.run_id, config_id=self.config_id, drain_index=drain_index))
        self.jobs: dict[int, tuple[runs.ClaimedJob, str]] = {}
        self.pending: list[runs.JobOutcome] = []
        self.first_start: float | None = None
        self.last_end: float | None = None

    def loop(self) -> None:
        while True:
            if self.outstanding:
                self._collect()
            now_m = time.monotonic()
            finishing = self.claim_turn(now_m)
            self._record(now_m, finishing)
            if time.monotonic() >= self.next_renew:
                runs.lease_renew(run_id=self.run_id, token=self.token)
                runs.drain_slot_take(run_id=self.run_id, config_id=self.config_id,
                                     token=self.token, lease_s=self.lease_s)
                self.next_renew = time.monotonic() + self.lease_s / 3
            if finishing:
                return

    def _collect(self) -> None:
        """The calls that ended since the last round, as outcomes waiting to be recorded."""
        for prepared, call in self.session.take(min_n=1, timeout_s=TAKE_WAIT_S):
            self.outstanding -= 1
            job, request_hash = self.jobs[prepared.job_id]
            self.report.busy_s += call.ended_at - call.started_at
            self.first_start = call.started_at if self.first_start is None else min(
                self.first_start, call.started_at)
            self.last_end = call.ended_at if self.last_end is None else max(
                self.last_end, call.ended_at)
            self.pending.append(outcome_for_call(self.ctx, job, self.token, call,
                                                 request_hash))

    def claim(self, now_m: float) -> None:
        """Lease more jobs and hand their requests to the session (at once in a closed loop,
        at their arrival times in an open one)."""
        report = self.report
        claim = runs.jobs_claim(run_id=self.run_id, config_id=self.config_id,
                                limit=self.target - self.outstanding, token=self.token,
                                lapsed=self.lapsed_due(now_m))
        if claim.state in ("inactive", "stopped"):
            self.claim_open = False
            report.state = claim.state
        elif claim.jobs:
            report.claimed += len(claim.jobs)
            batch = _dispatch(self.ctx, claim.jobs, self.token, self.jobs, self.pending)
            self.outstanding += len(batch)
            if self.arrivals is None:
                self.session.submit(batch)
            elif batch:
                now_a = time.monotonic()
                submit_at(self.session, batch, [self.arrivals.take(now_a) for _ in batch])
                report.arrivals += len(batch)
            report.max_in_flight = max(report.max_in_flight, min(self.outstanding, self.c))
        elif self.outstanding == 0 and not self.pending:
            report.state = "idle"
            self.claim_open = False
        else:
            self.retry_claim_at = now_m + RETRY_CLAIM_S

    def _record(self, now_m: float, finishing: bool) -> None:
        """Record the waiting outcomes in one go once enough wait, or they waited long
        enough, or the drain is finishing."""
        pending = self.pending
        if pending and not self.pending_since:
            self.pending_since = now_m
        if not pending or not (finishing or len(pending) >= max(self.refill, min(RECORD_MIN,
                                                                                  self.c))
                               or now_m - self.pending_since >= RECORD_WAIT_S):
            return
        recorded = set(runs.jobs_record(outcomes=pending))
        self.report.recorded += len(recorded)
        self.report.discarded += len(pending) - len(recorded)
        for o in pending:
            self.jobs.pop(o.job_id, None)
        self.pending = []
        self.pending_since = 0.0
        # Re-queued retries may be claimable at once: look again now.
        self.retry_claim_at = 0.0

    def close(self) -> None:
        """Close the session and give the slot back with the load this drain measured."""
        report = self.report
        self.session.close()
        if self.first_start is not None and self.last_end is not None:
            report.window_s = self.last_end - self.first_start
        runs.drain_slot_release(
            run_id=self.run_id, config_id=self.config_id, token=self.token, load={
                "busy_s": report.busy_s, "window_s": report.window_s,
                "calls": report.recorded, "max_in_flight": report.max_in_flight},
            arrivals=None if self.arrivals is None else {
                "process": "poisson", "rate": self.rate, "seed": self.arrivals.seed,
                "started": report.arrivals})


def _dispatch(ctx: DrainContext, claimed: list[runs.ClaimedJob], token: str,
              jobs: dict[int, tuple[runs.ClaimedJob, str]],
              ready: list[runs.JobOutcome]) -> list[PreparedCall]:
    """The claimed jobs' requests; a job whose request cannot be built fails right here."""
    batch: list[PreparedCall] = []
    now = timezone.now()
    for job in claimed:
        try:
            prepared, request_hash = ctx.prepare(job)
        except ProviderError as exc:
            jobs[job.id] = (job, "")
            ready.append(outcome_for_error(ctx, job, token, exc, now))
            continue
        except MissingField as exc:
            jobs[job.id] = (job, "")
            ready.append(outcome_for_error(
                ctx, job, token, ProviderConfigError(f"cannot build the request: {exc}"), now))
            continue
        jobs[job.id] = (job, request_hash)
        batch.append(prepared)
    return batch
