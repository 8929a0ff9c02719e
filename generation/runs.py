"""Candidate runs on the judge queue's lease machinery: start, cancel, claim, record, sweep.

Services for writes (house style): keyword-only, typed, each owning its transaction, no
network I/O inside. The executor (`generation/executor.py`) claims, calls with no transaction
open, then records.

- **Jobs are unique per (config version, item, sample index)**, across runs: a second run of
  the same config version over the same items does not call the provider again for a job that
  finished; it adopts jobs earlier runs left cancelled or failed for a transient reason.
- **Claims** lease jobs through `judges/runs/leases.py` (the judge queue's rules: attempts,
  lapsed leases first taken back, backoff held in `available_at`), scoped to one candidate of
  one run, under the run row lock so that `calls_made` and the budget are exact.
- **Budget**: a claim never puts more calls in flight than the budget left covers at the
  average recorded cost of a call (the estimate, `est_request_cost`, before any is priced);
  spent cost is what was recorded, so a run overshoots by at most the spread of the calls in
  flight. Exhausted: queued jobs are cancelled and the run is `stopped` with the figures.
- **One drain per candidate** (`drain_slot_take`): the slot on `RunCandidate` is leased like a
  job, so two batch tasks of the same candidate never add up to 2 x C requests in flight.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, Min, OuterRef, Q, Sum
from django.utils import timezone

from judges.runs import leases
from judges.runs.sweep import SweepCounts, running_runs_sweep
from reviewhub.errors import ValidationFailed
from studies.models import Item, Study
from studies.services import (
    GeneratedOutput,
    outputs_generated_conflicts,
    outputs_record_generated,
)
from studies.services.recordset import finite_or_text, rows_json

from .config import missing_placeholders
from .estimate import run_estimate
from .models import GenerationConfig, GenerationJob, GenerationRun, PromptTemplate, RunCandidate
from .replay import NotReplayable, recorded_of

# The API and the pages take the selection from here.
from .selection import selection_items as selection_items

logger = logging.getLogger(__name__)

ACTIVE = (GenerationJob.Status.QUEUED, GenerationJob.Status.RUNNING)
MAX_SAMPLES = 50
MAX_CONCURRENCY = 1024
JOB_BULK_BATCH = 2000
Enqueue = Callable[[int, int], None]  # (run id, config id)


# The Celery task module imports these services (its tasks call them), so this module does not
# import it: GenerationAppConfig.ready registers the task module's enqueue here when Django
# starts.
_registered_enqueue: list[Enqueue] = []


def run_enqueue_register(enqueue: Enqueue) -> None:
    """Make `enqueue` what a run queues a candidate's batch task with when the caller passes
    none."""
    _registered_enqueue[:] = [enqueue]


def _default_enqueue(run_id: int, config_id: int) -> None:
    if not _registered_enqueue:
        raise RuntimeError(
            "no generation enqueue registered (generation.apps.GenerationAppConfig.ready)")
    _registered_enqueue[0](run_id, config_id)


# --- start, cancel --------------------------------------------------------------------------


def _item_values(item: Item) -> dict[str, Any]:
    return {"input": item.input, "context": item.context, "reference": item.reference,
            "external_id": item.external_id, "metadata": item.metadata}


def _start_args_check(*, study: Study, template: PromptTemplate,
                      configs: Sequence[GenerationConfig], concurrency: int, samples: int,
                      rate: float | None, replay: bool) -> list[GenerationConfig]:
    """The run's scalar arguments and its configs checked; the configs deduplicated."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not (
            1 <= concurrency <= MAX_CONCURRENCY):
        raise ValidationFailed.at("concurrency", f"concurrency (C, requests in flight per "
                                  f"candidate) must be an integer from 1 to {MAX_CONCURRENCY}.")
    if isinstance(samples, bool) or not isinstance(samples, int) or not (
            1 <= samples <= MAX_SAMPLES):
        raise ValidationFailed.at("samples", f"samples must be an integer from 1 to "
                                  f"{MAX_SAMPLES}.")
    if template.study_id != study.pk:
        raise ValidationFailed.at("template", "the prompt template belongs to another study.")
    configs = list(dict.fromkeys(configs))
    if not configs:
        raise ValidationFailed.at("configs", "at least one generation config is required.")
    for cfg in configs:
        if cfg.candidate.study_id != study.pk:
            raise ValidationFailed.at("configs", f"config {cfg.pk} belongs to another study.")
    if len({c.candidate_id for c in configs}) != len(configs):
        raise ValidationFailed.at("configs", "one config version per candidate.")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not math.isfinite(rate) or not 0 < rate <= 100_000):
        raise ValidationFailed.at("rate", "rate (requests started per second per candidate) "
                                          "must be a positive number, or null for a closed "
                                          "loop at C.")
    if not isinstance(replay, bool):
        raise ValidationFailed.at("replay", "replay must be true or false.")
    return configs


def _items_sendable_check(*, template: PromptTemplate, item_ids: Sequence[int],
                          replay: bool) -> None:
    """Every selected item can be sent: it carries a recorded request (replay) or provides
    every placeholder of the template."""
    for item in Item.objects.filter(id__in=item_ids).only(
            "input", "context", "reference", "external_id", "metadata",
            "recorded_request").iterator():
        if replay:
            try:
                recorded_of(item.metadata, item.recorded_request)
            except NotReplayable as exc:
                raise ValidationFailed.at(
                    "replay", f"item {item.external_id!r} cannot be replayed: {exc}.",
                    item=item.external_id) from None
            continue
        missing = missing_placeholders(template.template, _item_values(item))
        if missing:
            raise ValidationFailed.at(
                "template", f"item {item.external_id!r} provides no {{{missing[0]}}}; every "
                "selected item must provide every placeholder of the template.",
                item=item.external_id, placeholder=missing[0], code="unknown_placeholder")


def _clashes_check(*, configs: Sequence[GenerationConfig], item_ids: Sequence[int]) -> None:
    for cfg in configs:
        clash = outputs_generated_conflicts(candidate_id=cfg.candidate_id, item_ids=item_ids,
                                            config_hash=cfg.content_hash)
        if clash:
            raise ValidationFailed.at(
                "configs", f"candidate {cfg.candidate.name!r} already has outputs on {clash} "
                "of these items from another source; a run never overwrites them (make a new "
                "candidate for this config).", candidate=cfg.candidate.name)


def _budget_check(max_cost: Any, per_request_max: float | None) -> None:
    """`max_cost` (None: no budget) covers at least one request at its estimated cost."""
    if max_cost is None:
        return
    if isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or not (
            math.isfinite(max_cost) and max_cost > 0):
        raise ValidationFailed.at("max_cost", "max_cost must be a positive number (USD).")
    if per_request_max is None:
        raise ValidationFailed.at("max_cost", "max_cost needs a price for every candidate's "
                                  "model: add prices to its config or to "
                                  "REVIEWHUB_JUDGE_PRICES.")
    if max_cost < per_request_max:
        raise ValidationFailed.at(
            "max_cost", f"max_cost {max_cost:.6f} is below the estimated cost of one "
            f"request ({per_request_max:.6f} USD).", estimated_request_cost=per_request_max)


def generation_run_start(
    *,
    study: Study,
    template: PromptTemplate,
    configs: Sequence[GenerationConfig],
    concurrency: int,
    samples: int = 1,
    selection: Mapping[str, Any] | None = None,
    max_cost: float | None = None,
    replay: bool = False,
    rate: float | None = None,
    created_by: Any = None,
    enqueue: Enqueue | None = None,
) -> GenerationRun:
    """Create a run and its jobs (config version x item x sample), then one batch-task chain
    per candidate after commit. ValidationFailed names the field of any bad input."""
    configs = _start_args_check(study=study, template=template, configs=configs,
                                concurrency=concurrency, samples=samples, rate=rate,
                                replay=replay)
    sel, item_ids = selection_items(study=study, selection=selection)
    if not item_ids:
        raise ValidationFailed.at("selection", "the selection has no items.")
    _items_sendable_check(template=template, item_ids=item_ids, replay=replay)
    _clashes_check(configs=configs, item_ids=item_ids)
    estimate = run_estimate(template=template, configs=configs, item_ids=item_ids,
                            samples=samples, replay=replay)
    _budget_check(max_cost, estimate.per_request_max)
    now = timezone.now()
    with transaction.atomic():
        run = GenerationRun.objects.create(
            study=study, template=template, concurrency=concurrency, samples=samples,
            selection=sel, replay=replay, rate=rate, max_cost=max_cost,
            est_request_cost=estimate.per_request_max,
            created_by=created_by, last_activity_at=now)
        RunCandidate.objects.bulk_create([RunCandidate(run=run, config=c) for c in configs])
        stats = _jobs_sync(run=run, configs=configs, item_ids=item_ids)
        stats["estimated_cost"] = estimate.total
        run.creation_stats = stats
        _run_kick(run, configs, now, enqueue)
    logger.info("generation run %s started: %s", run.pk, run.creation_stats)
    return run


def _jobs_sync(*, run: GenerationRun, configs: Sequence[GenerationConfig],
               item_ids: Sequence[int]) -> dict[str, Any]:
    """Give `run` every (item, config version, sample) job it lacks, in the caller's
    transaction: jobs that never existed are created; jobs left cancelled or failed for a
    transient reason (by this run or an earlier one) are adopted and re-queued; finished jobs
    and jobs active in another run are left alone (the unique key makes a duplicate
    impossible whatever runs at the same time). Returns the counts."""
    samples = run.samples
    stats: dict[str, Any] = {"items": len(item_ids), "jobs_created": 0, "jobs_adopted": 0,
                             "already_finished": 0, "in_other_runs": 0}
    for cfg in configs:
        keys = {(i, s) for i in item_ids for s in range(samples)}
        existing = {(j.item_id, j.sample_index): j for j in GenerationJob.objects.filter(
            config=cfg, item_id__in=item_ids, sample_index__lt=samples).only(
            "id", "item_id", "sample_index", "status", "error_kind", "run_id")}
        adopt = [j.pk for j in existing.values()
                 if j.status == GenerationJob.Status.CANCELLED
                 or (j.status == GenerationJob.Status.FAILED
                     and j.error_kind in _TRANSIENT_KINDS)]
        stats["already_finished"] += sum(
            1 for j in existing.values()
            if j.status in (GenerationJob.Status.DONE, GenerationJob.Status.FAILED)
            and j.pk not in adopt)
        stats["in_other_runs"] += sum(1 for j in existing.values()
                                      if j.status in ACTIVE and j.run_id != run.pk)
        if adopt:
            stats["jobs_adopted"] += GenerationJob.objects.filter(id__in=adopt).update(
                run=run, status=GenerationJob.Status.QUEUED, attempts=0, available_at=None,
                error="", error_kind="", finished_at=None, details={})
        new = [GenerationJob(run=run, config=cfg, item_id=i, sample_index=s)
               for (i, s) in sorted(keys - set(existing))]
        GenerationJob.objects.bulk_create(new, batch_size=JOB_BULK_BATCH,
                                          ignore_conflicts=True)
        stats["jobs_created"] += len(new)
    return stats


def _run_kick(run: GenerationRun, configs: Sequence[GenerationConfig], now: datetime,
              enqueue: Enqueue | None) -> None:
    """Save the run (done at once when it has nothing to do) and, after commit, give each
    candidate a batch task (its drain slot admits one drain, so an extra one is harmless)."""
    if not GenerationJob.objects.filter(run=run, status__in=ACTIVE).exists():
        run.status = GenerationRun.Status.DONE
        run.finished_at = now
    run.save(update_fields=["creation_stats", "status", "finished_at", "stop_reason",
                            "max_cost", "last_activity_at"])
    if run.status == GenerationRun.Status.RUNNING:
        send = enqueue or _default_enqueue
        ids = [c.pk for c in configs]
        transaction.on_commit(lambda: [send(run.pk, cid) for cid in ids])


def generation_run_resume(*, run: GenerationRun, max_cost: Any = None,
                          enqueue: Enqueue | None = None) -> GenerationRun:
    """Resume a cancelled, stopped, stalled or finished-with-failures run: the run is running
    again and re-queues only the (item, config version, sample) jobs that have no result yet
    (cancelled, failed for a transient reason, or never created), through the same adoption
    rule as a start; finished jobs and jobs another run is working on are left alone. Calling
    it twice creates nothing more (idempotent) and a live drain keeps its slot, so nothing is
    sent twice. `max_cost` (optional) replaces the budget, e.g. after a budget stop."""
    with transaction.atomic():
        locked = (GenerationRun.objects.select_for_update().select_related("study")
                  .get(pk=run.pk))
        if max_cost is not None:
            _budget_check(max_cost, locked.est_request_cost)
            locked.max_cost = max_cost
        configs = [rc.config for rc in RunCandidate.objects.filter(run=locked)
                   .select_related("config__candidate")]
        item_ids = _run_item_ids(locked)
        now = timezone.now()
        stats = _jobs_sync(run=locked, configs=configs, item_ids=item_ids)
        history = list((locked.creation_stats or {}).get("resumed", []))[-19:]
        history.append({"at": now.isoformat(), "jobs_created": stats["jobs_created"],
                        "jobs_adopted": stats["jobs_adopted"]})
        locked.creation_stats = {**(locked.creation_stats or {}), "resumed": history}
        locked.status = GenerationRun.Status.RUNNING
        locked.stop_reason = ""
        locked.finished_at = None
        locked.last_activity_at = now
        _run_kick(locked, configs, now, enqueue)
    logger.info("generation run %s resumed: %s", locked.pk, stats)
    return locked


def _run_item_ids(run: GenerationRun) -> list[int]:
    """The run's items: its selection drawn again (seeded, so the same items while the study's
    items are unchanged) together with the items its jobs already cover."""
    try:
        _, ids = selection_items(study=run.study, selection=run.selection)
    except ValidationFailed:
        ids = []  # an item or dimension removed since: resume what the jobs name
    have = GenerationJob.objects.filter(run=run).values_list("item_id", flat=True).distinct()
    return sorted(set(ids) | set(have))


_TRANSIENT_KINDS = frozenset({GenerationJob.ErrorKind.TIMEOUT, GenerationJob.ErrorKind.RATE_LIMITED,
                              GenerationJob.ErrorKind.SERVER_ERROR,
                              GenerationJob.ErrorKind.CONNECTION})


def generation_run_cancel(*, run: GenerationRun) -> GenerationRun:
    """Cancel a running run: queued jobs are cancelled now, calls in flight finish and are
    recorded (a retry one of them asks for is cancelled by `run_settle`)."""
    with transaction.atomic():
        locked = GenerationRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != GenerationRun.Status.RUNNING:
            return locked
        now = timezone.now()
        GenerationJob.objects.filter(run=locked, status=GenerationJob.Status.QUEUED).update(
            status=GenerationJob.Status.CANCELLED, finished_at=now, error="run cancelled")
        locked.status = GenerationRun.Status.CANCELLED
        locked.finished_at = now
        locked.stop_reason = "cancelled"
        locked.save(update_fields=["status", "finished_at", "stop_reason"])
    return locked


# --- the drain slot ---------------------------------------------------------------------------


def drain_slot_take(*, run_id: int, config_id: int, token: str, lease_s: float) -> bool:
    """Hold the (run, candidate) drain slot for `lease_s` (taken, renewed, or False: another
    drain holds it)."""
    now = timezone.now()
    return bool(RunCandidate.objects.filter(run_id=run_id, config_id=config_id).filter(
        Q(drain_token="") | Q(drain_token=token) | Q(drain_expires_at__lt=now)
        | Q(drain_expires_at__isnull=True)
    ).update(drain_token=token, drain_expires_at=now + timedelta(seconds=lease_s)))


def drains_so_far(*, run_id: int, config_id: int) -> int:
    """How many drains of this candidate have ended (the index of the next one's arrival
    seed)."""
    load = (RunCandidate.objects.filter(run_id=run_id, config_id=config_id)
            .values_list("load", flat=True).first()) or {}
    return int(load.get("drains", 0))


def drain_slot_release(*, run_id: int, config_id: int, token: str,
                       load: Mapping[str, float] | None = None,
                       arrivals: Mapping[str, Any] | None = None) -> None:
    """Give the slot back and add this drain's measured load to the candidate's; an open-loop
    drain's arrival process (kind, rate, seed, requests started) is appended to the
    candidate's `load["arrivals"]`, so every gap drawn can be drawn again."""
    with transaction.atomic():
        rc = (RunCandidate.objects.select_for_update()
              .filter(run_id=run_id, config_id=config_id).first())
        if rc is None:
            return
        if load:
            merged = dict(rc.load or {})
            for key in ("busy_s", "window_s", "calls"):
                merged[key] = float(merged.get(key, 0.0)) + float(load.get(key, 0.0))
            merged["max_in_flight"] = max(float(merged.get("max_in_flight", 0)),
                                          float(load.get("max_in_flight", 0)))
            merged["drains"] = int(merged.get("drains", 0)) + 1
            if arrivals is not None:
                merged["arrivals"] = [*list(merged.get("arrivals", []))[-99:], dict(arrivals)]
            rc.load = merged
        if rc.drain_token == token:
            rc.drain_token = ""
            rc.drain_expires_at = None
        rc.save(update_fields=["load", "drain_token", "drain_expires_at"])


# --- claim ------------------------------------------------------------------------------------


@dataclass
class ClaimedJob:
    id: int
    item_id: int
    sample_index: int
    attempts: int
    details: dict[str, Any]
    item: dict[str, Any]


@dataclass
class Claim:
    jobs: list[ClaimedJob]
    state: str = "ok"  # ok | inactive | stopped
    remaining: int = 0
    next_available_at: datetime | None = None


def _stop(run: GenerationRun, reason: str) -> None:
    now = timezone.now()
    GenerationJob.objects.filter(run=run, status=GenerationJob.Status.QUEUED).update(
        status=GenerationJob.Status.CANCELLED, finished_at=now, error="run stopped: " + reason)
    run.status = GenerationRun.Status.STOPPED
    run.stop_reason = reason
    run.finished_at = now
    run.save(update_fields=["status", "stop_reason", "finished_at"])
    logger.info("generation run %s stopped: %s", run.pk, reason)


# One statement leases a chunk on PostgreSQL once the run row is locked (and the budget's
# allowance known): pick claimable jobs of the candidate in id order, skipping rows another
# claimer holds, lease them, count the calls on the run row and return them with their
# items' fields. A drain claims many times a second; the ORM path's five statements per claim
# were most of its database time.
_CLAIM_SQL = """
WITH picked AS (
    SELECT id FROM {job}
    WHERE run_id = %(run)s AND config_id = %(config)s AND (
        (status = 'queued' AND (available_at IS NULL OR available_at <= %(now)s))
        OR (status = 'running' AND lease_expires_at < %(now)s AND attempts < %(max)s))
    ORDER BY id LIMIT %(n)s FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {job} AS j SET status = 'running', lease_token = %(token)s,
        lease_expires_at = %(until)s, attempts = j.attempts + 1, available_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.item_id, j.sample_index, j.attempts, j.details
), counted AS (
    UPDATE {run} SET calls_made = calls_made + (SELECT count(*) FROM claimed),
        last_activity_at = %(now)s WHERE id = %(run)s
)
SELECT c.id, c.item_id, c.sample_index, c.attempts, c.details, i.input, i.context,
    i.reference, i.external_id, i.metadata, i.recorded_request
FROM claimed c JOIN {item} i ON i.id = c.item_id ORDER BY c.id
"""


def _json(raw: Any) -> Any:
    import json

    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def _budget_allowance(run: GenerationRun, limit: int, now: datetime, max_attempts: int
                      ) -> int | None:
    """How many calls the budget left allows to start now (at most `limit`); None when the
    run has just been stopped because the next request would exceed it. Called with the run
    row locked."""
    if run.max_cost is None:
        return limit
    agg = GenerationJob.objects.filter(run_id=run.pk).aggregate(
        spent=Sum("cost"), priced=Count("cost"), running=Count("id", filter=Q(
            status=GenerationJob.Status.RUNNING, lease_expires_at__gte=now)))
    spent, running = float(agg["spent"] or 0.0), int(agg["running"] or 0)
    # Calls in flight are priced at the average recorded so far, or at the estimate (which
    # the budget covers at least once: checked at start) before any is priced.
    priced = int(agg["priced"] or 0)
    per = spent / priced if priced and spent > 0 else (run.est_request_cost or 0.0)
    allowance = limit
    if per > 0:
        allowance = min(allowance, math.floor((run.max_cost - spent) / per + 1e-9) - running)
    if allowance <= 0 and running == 0 and leases.claimable(
            GenerationJob, now=now, max_attempts=max_attempts, run_id=run.pk).exists():
        _stop(run, f"max_cost reached: {spent:.6f} spent of {run.max_cost:.6f} allowed; the "
                   "next request would exceed it")
        return None
    return allowance


def jobs_claim(*, run_id: int, config_id: int, limit: int, token: str,
               lapsed: bool = True) -> Claim:
    """Lease up to `limit` claimable jobs of one candidate of a run (see the module docstring).

    `lapsed=False` skips failing the jobs whose lease lapsed on their last attempt (a scan a
    drain claiming many times a second need not repeat: the sweeper and every few seconds'
    claim do it); lapsed leases with attempts left are taken back either way.
    """
    now = timezone.now()
    max_attempts = settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != GenerationRun.Status.RUNNING:
            return Claim(jobs=[], state="inactive")
        scope = GenerationJob.objects.filter(run_id=run_id, config_id=config_id)
        if lapsed:
            leases.fail_exhausted_leases(scope, now, max_attempts,
                                         exhausted_kind=GenerationJob.ErrorKind.CONNECTION)
        allowance = _budget_allowance(run, limit, now, max_attempts)
        if allowance is None:
            return Claim(jobs=[], state="stopped")
        rows: list[tuple[Any, ...]] = []
        if allowance > 0 and connection.vendor == "postgresql":
            sql = _CLAIM_SQL.format(job=GenerationJob._meta.db_table,
                                    run=GenerationRun._meta.db_table, item=Item._meta.db_table)
            with connection.cursor() as cursor:
                cursor.execute(sql, {
                    "run": run_id, "config": config_id, "now": now, "max": max_attempts,
                    "n": allowance, "token": token,
                    "until": now + timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S)})
                rows = [(*r[:4], _json(r[4]), *r[5:9], _json(r[9]), _json(r[10]))
                        for r in cursor.fetchall()]
        else:
            ids: list[int] = []
            if allowance > 0:
                qs = (leases.claimable(GenerationJob, now=now, max_attempts=max_attempts,
                                       run_id=run_id, config_id=config_id)
                      .order_by("id").select_for_update(skip_locked=True))
                ids = list(qs.values_list("id", flat=True)[:allowance])
            if ids:
                leases.lease_take(GenerationJob, ids=ids, token=token, now=now,
                                  lease_s=settings.REVIEWHUB_JUDGE_LEASE_S)
                run.calls_made += len(ids)
            run.last_activity_at = now
            run.save(update_fields=["calls_made", "last_activity_at"])
            rows = list(GenerationJob.objects.filter(id__in=ids, lease_token=token)
                        .order_by("id").values_list(
                            "id", "item_id", "sample_index", "attempts", "details",
                            "item__input", "item__context", "item__reference",
                            "item__external_id", "item__metadata",
                            "item__recorded_request"))
    jobs = [ClaimedJob(id=r[0], item_id=r[1], sample_index=r[2], attempts=r[3],
                       details=dict(r[4] or {}),
                       item={"input": r[5], "context": r[6], "reference": r[7],
                             "external_id": r[8], "metadata": r[9] or {},
                             "recorded_request": r[10]})
            for r in rows]
    if jobs:
        return Claim(jobs=jobs, remaining=len(jobs))
    rest = GenerationJob.objects.filter(run_id=run_id, config_id=config_id, status__in=ACTIVE)
    remaining = rest.count()
    next_at = None
    if remaining:
        next_at = (rest.filter(status=GenerationJob.Status.QUEUED, available_at__isnull=False)
                   .aggregate(m=Min("available_at"))["m"])
    return Claim(jobs=[], remaining=remaining, next_available_at=next_at)


# --- record -----------------------------------------------------------------------------------


@dataclass
class JobOutcome:
    job_id: int
    token: str
    status: str  # done | failed | queued (retry later)
    values: dict[str, Any] = field(default_factory=dict)
    # The study output to write when the job ends (sample 0 only).
    output: GeneratedOutput | None = None


_RECORD_FIELDS = ("status", "finished_at", "error_kind", "error", "text", "finish_reason",
                  "http_status", "provider_request_id", "tokens_in", "tokens_out", "latency_ms",
                  "overhead_ms", "cost", "schema_valid", "schema_violation", "request_hash",
                  "details", "available_at", "output", "lease_token", "lease_expires_at")


def jobs_record(*, outcomes: Sequence[JobOutcome]) -> list[int]:
    """Record outcomes while each job's lease still matches; return the ids recorded.

    In one transaction, a few statements per chunk: the jobs still running under their
    outcome's lease are locked and read, updated together, and the outputs of those that
    ended are written with them (the job ends once, so its output is written once). A late or
    duplicate delivery (the lease lapsed and another worker re-claimed the job) changes
    nothing.
    """
    if not outcomes:
        return []
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _record_postgres(outcomes, now)
    by_id = {o.job_id: o for o in outcomes}
    with transaction.atomic():
        rows = [j for j in GenerationJob.objects.select_for_update().filter(
            id__in=list(by_id), status=GenerationJob.Status.RUNNING).only(
            "id", "lease_token", "item_id", "config_id") if j.lease_token == by_id[j.pk].token]
        if not rows:
            return []
        final = [by_id[j.pk].output for j in rows
                 if by_id[j.pk].output is not None
                 and by_id[j.pk].status != GenerationJob.Status.QUEUED]
        output_ids = outputs_record_generated(outs=[o for o in final if o is not None])
        for job in rows:
            o = by_id[job.pk]
            values = dict(_RECORD_DEFAULTS, **o.values)
            values.update(status=o.status, lease_token="", lease_expires_at=None,
                          finished_at=None if o.status == GenerationJob.Status.QUEUED else now)
            if o.output is not None and o.status != GenerationJob.Status.QUEUED:
                values["output_id"] = output_ids.get((o.output.candidate_id, o.output.item_id))
            else:
                values["output_id"] = None
            for name, value in values.items():
                setattr(job, name, value)
        GenerationJob.objects.bulk_update(rows, list(_RECORD_FIELDS))
    return [j.pk for j in rows]


_PG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("status", "varchar"), ("finished_at", "timestamptz"), ("error_kind", "varchar"),
    ("error", "text"), ("text", "text"), ("finish_reason", "varchar"),
    ("http_status", "integer"), ("provider_request_id", "varchar"), ("tokens_in", "integer"),
    ("tokens_out", "integer"), ("latency_ms", "double precision"),
    ("overhead_ms", "double precision"), ("cost", "double precision"),
    ("schema_valid", "boolean"), ("schema_violation", "text"), ("request_hash", "varchar"),
    ("details", "jsonb"), ("available_at", "timestamptz"),
)


def _record_postgres(outcomes: Sequence[JobOutcome], now: datetime) -> list[int]:
    """The same as the ORM path in three statements whatever the chunk's size: one UPDATE …
    FROM json_to_recordset conditional on each lease (the judge queue's recording, see
    judges/runs/record.py), the outputs of the jobs it ended in one upsert, their ids."""
    names = [n for n, _ in _PG_COLUMNS]
    floats = [n for n, t in _PG_COLUMNS if t == "double precision"]
    rows = []
    for o in outcomes:
        values = dict(_RECORD_DEFAULTS, **o.values)
        values.update(status=o.status,
                      finished_at=None if o.status == GenerationJob.Status.QUEUED else now)
        row = {"id": o.job_id, "token": o.token, **{n: values[n] for n in names}}
        rows.append(finite_or_text(row, floats))
    decl = ", ".join(f"{n} {'json' if t == 'jsonb' else t}" for n, t in _PG_COLUMNS)
    sets = ", ".join(f"{n} = v.{n}" + ("::jsonb" if t == "jsonb" else "") for n, t in _PG_COLUMNS)
    table = GenerationJob._meta.db_table
    sql = (f"UPDATE {table} AS j SET {sets}, lease_token = '', lease_expires_at = NULL "
           f"FROM json_to_recordset(%s::json) AS v(id bigint, token varchar, {decl}) "
           "WHERE j.id = v.id AND j.lease_token = v.token AND j.status = 'running' "
           "RETURNING j.id")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, [rows_json(rows)])
            recorded = [r[0] for r in cursor.fetchall()]
        done = set(recorded)
        final = [o for o in outcomes if o.job_id in done and o.output is not None
                 and o.status != GenerationJob.Status.QUEUED]
        if final:
            ids = outputs_record_generated(outs=[o.output for o in final if o.output])
            links = [{"id": o.job_id, "output_id": ids.get((o.output.candidate_id,
                                                            o.output.item_id))}
                     for o in final if o.output is not None]
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {table} AS j SET output_id = v.output_id FROM "
                    "json_to_recordset(%s::json) AS v(id bigint, output_id bigint) "
                    "WHERE j.id = v.id", [rows_json(links)])
    return recorded


# What a recorded outcome leaves in the fields it does not set (a retry clears the last
# attempt's result).
_RECORD_DEFAULTS: dict[str, Any] = {
    "error_kind": "", "error": "", "text": "", "finish_reason": "", "http_status": None,
    "provider_request_id": "", "tokens_in": None, "tokens_out": None, "latency_ms": None,
    "overhead_ms": None, "cost": None, "schema_valid": None, "schema_violation": "",
    "request_hash": "", "details": {}, "available_at": None,
}


def lease_renew(*, run_id: int, token: str) -> None:
    leases.lease_renew(GenerationJob, token=token, now=timezone.now(),
                       lease_s=settings.REVIEWHUB_JUDGE_LEASE_S, run_id=run_id)


# --- finishing, settling, sweeping ------------------------------------------------------------


def run_finish_if_complete(*, run_id: int) -> bool:
    """Mark a running run done once it has no queued or running job; True if it did now."""
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().filter(
            pk=run_id, status=GenerationRun.Status.RUNNING).first()
        if run is None or GenerationJob.objects.filter(run=run, status__in=ACTIVE).exists():
            return False
        run.status = GenerationRun.Status.DONE
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
    return True


def run_settle(*, run_id: int) -> int:
    """Cancel queued jobs (retries asked for by calls in flight) of a run no longer running."""
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().filter(pk=run_id).exclude(
            status=GenerationRun.Status.RUNNING).first()
        if run is None:
            return 0
        return GenerationJob.objects.filter(run=run, status=GenerationJob.Status.QUEUED).update(
            status=GenerationJob.Status.CANCELLED, finished_at=timezone.now(),
            available_at=None, error=f"run {run.status} before this job was retried")


def next_due(*, run_id: int, config_id: int) -> tuple[bool, datetime | None]:
    """(whether the candidate has queued or running jobs in a running run, when the earliest
    queued job becomes claimable: None = now or only leases to wait for)."""
    now = timezone.now()
    agg = GenerationJob.objects.filter(
        run_id=run_id, config_id=config_id, run__status=GenerationRun.Status.RUNNING,
        status__in=ACTIVE,
    ).aggregate(active=Count("id"), ready=Count("id", filter=Q(
        status=GenerationJob.Status.QUEUED) & (Q(available_at__isnull=True)
                                                | Q(available_at__lte=now))),
        queued=Count("id", filter=Q(status=GenerationJob.Status.QUEUED)),
        next_at=Min("available_at", filter=Q(status=GenerationJob.Status.QUEUED)),
        lease_at=Min("lease_expires_at", filter=Q(status=GenerationJob.Status.RUNNING)))
    if not agg["active"]:
        return False, None
    if agg["ready"]:
        return True, None
    if agg["queued"]:
        return True, agg["next_at"]
    return True, agg["lease_at"]


@dataclass
class SweepResult(SweepCounts):
    kicked: list[tuple[int, int]] = field(default_factory=list)
    settled: int = 0


def generation_sweep(*, now: datetime | None = None, enqueue: Enqueue | None = None
                     ) -> SweepResult:
    """Re-queue jobs whose lease lapsed (worker lost), finish complete runs, settle stopped
    ones, and give a fresh batch task to every candidate of a running run that has work and
    no live drain slot after a lease of silence."""
    now = now or timezone.now()
    result = SweepResult()
    with transaction.atomic():
        result.failed, result.requeued = leases.lapsed_requeue(
            GenerationJob.objects.all(), now, settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS,
            exhausted_kind=GenerationJob.ErrorKind.CONNECTION)
    stale = GenerationRun.objects.exclude(status=GenerationRun.Status.RUNNING).filter(
        Exists(GenerationJob.objects.filter(run=OuterRef("pk"),
                                            status=GenerationJob.Status.QUEUED)))
    for run_id in stale.values_list("id", flat=True):
        result.settled += run_settle(run_id=run_id)
    send = enqueue or _default_enqueue

    def kick(run_id: int) -> None:
        for rc in RunCandidate.objects.filter(run_id=run_id).filter(
                Q(drain_expires_at__isnull=True) | Q(drain_expires_at__lt=now)):
            if GenerationJob.objects.filter(run_id=run_id, config_id=rc.config_id,
                                            status=GenerationJob.Status.QUEUED).exists():
                transaction.on_commit(_sender(send, run_id, rc.config_id))
                result.kicked.append((run_id, rc.config_id))

    running_runs_sweep(GenerationRun, result, now=now, finish_if_complete=run_finish_if_complete,
                       kick=kick)
    if result.requeued or result.failed or result.kicked or result.settled:
        logger.info("generation sweep: %s", result)
    return result


def _sender(send: Enqueue, run_id: int, config_id: int) -> Callable[[], None]:
    return lambda: send(run_id, config_id)


def new_token() -> str:
    return uuid.uuid4().hex
