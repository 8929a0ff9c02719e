"""Claiming queued jobs under a lease, within the run's call and cost budgets."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from studies.models import Comparison, Item, Output

from ..models import JudgeJob, JudgeRun
from . import leases
from .common import ACTIVE_JOB_STATUSES, logger

# Before the first priced call finishes, a cost-limited run claims this many calls at most.
COST_PROBE_CALLS = 8



@dataclass
class ClaimedJob:
    """A claimed job's own columns, no related rows: what a worker needs to run and record it.

    Plain values rather than a `JudgeJob` with its related rows: building seven model
    instances per job was most of a worker's CPU (see docs/benchmarks.md, judge throughput).
    """

    id: int
    run_id: int
    judge_version_id: int
    criterion_id: int
    output_id: int | None
    comparison_id: int | None
    sample_index: int
    order: str
    attempts: int
    details: dict[str, Any]
    # The subject's texts, when the claim fetched them with the job (PostgreSQL does).
    texts: SubjectTexts | None = None

    @property
    def pk(self) -> int:
        return self.id


class SubjectTexts(NamedTuple):
    """What a prompt shows of a claimed job's subject: the item, and the output (single-output
    criteria) or both outputs of the comparison, in canonical order (pairwise)."""

    item_input: str
    item_context: str
    item_reference: str
    output_text: str | None = None
    output_a_id: int | None = None
    output_a_text: str | None = None
    output_b_id: int | None = None
    output_b_text: str | None = None


_CLAIMED_COLUMNS = ("id", "run_id", "judge_version_id", "criterion_id", "output_id",
                    "comparison_id", "sample_index", "order", "attempts", "details")


@dataclass
class ClaimResult:
    jobs: list[ClaimedJob]
    # "ok" (claimed or nothing claimable right now), "inactive" (run not running),
    # "stopped" (a budget stopped it now), "budget_wait" (waiting for in-flight costs).
    state: str = "ok"
    next_available_at: datetime | None = None
    # Queued + running jobs of the run after this claim. Counted only when the claim got no
    # job (it then tells "wait for a retry" from "finished"); a claim that got jobs reports
    # len(jobs), a lower bound: counting scans every active job of the run, on every claim.
    remaining: int = 0


def _cost_so_far(run: JudgeRun, now: datetime | None = None) -> tuple[float, int, int]:
    """(cost recorded, calls priced, calls in flight).

    In flight = running under a live lease. A job whose lease lapsed is not in flight (its
    worker is presumed dead, and this claim may take it again); counted, a probe of
    `COST_PROBE_CALLS` lost with its worker would hold a cost-limited run in "budget_wait"
    until the sweeper re-queued the jobs, or for ever without one.
    """
    agg = JudgeJob.objects.filter(run=run).aggregate(
        spent=Sum("cost"), priced=Count("cost"),
        running=Count("id", filter=Q(status=JudgeJob.Status.RUNNING,
                                     lease_expires_at__gte=now or timezone.now())),
    )
    return float(agg["spent"] or 0.0), int(agg["priced"] or 0), int(agg["running"] or 0)


def budget_exhausted(run: JudgeRun) -> str:
    if run.max_calls is not None and run.calls_made >= run.max_calls:
        return f"max_calls reached: {run.calls_made} calls made of {run.max_calls} allowed"
    if run.max_cost is not None:
        spent, _, _ = _cost_so_far(run)
        if spent >= run.max_cost:
            return f"max_cost reached: {spent:.6f} spent of {run.max_cost:.6f} allowed"
    return ""


def _stop_run(run: JudgeRun, reason: str) -> None:
    now = timezone.now()
    JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).update(
        status=JudgeJob.Status.CANCELLED, finished_at=now, error="run stopped: " + reason
    )
    run.status = JudgeRun.Status.STOPPED
    run.stop_reason = reason
    run.finished_at = now
    run.save(update_fields=["status", "stop_reason", "finished_at"])
    logger.info("judge run %s stopped: %s", run.pk, reason)


def _claimable(run_id: int, now: datetime, max_attempts: int) -> QuerySet[JudgeJob]:
    return leases.claimable(JudgeJob, now=now, max_attempts=max_attempts, run_id=run_id)


def _exhausted_lease_error(max_attempts: int) -> str:
    return leases.exhausted_lease_error(max_attempts)


def _fail_exhausted_leases(qs: QuerySet[JudgeJob], now: datetime, max_attempts: int) -> int:
    return leases.fail_exhausted_leases(qs, now, max_attempts,
                                        exhausted_kind=JudgeJob.ErrorKind.TRANSIENT)


# One statement claims a batch on PostgreSQL, in autocommit: lock the run row (first: every
# other part depends on it, so locks are always taken run first, jobs second, as cancel and the
# budget path do), then (optionally) fail the leases that lapsed on their last attempt and take
# the other lapsed ones first (older work), then queued jobs; lease them, count the calls on
# the run row, and return the run's state with the jobs' own columns and their subjects' texts.
# Nothing is claimed unless the run is running without a budget (budgets need the checks in
# `jobs_claim`). The queued pick is not ordered by id: that would sort every queued job of the
# run on every claim. Its ORDER BY (constant within the result) is what makes the planner read
# the (run, status) index, which hands the jobs out in insertion order and stops at the
# LIMIT, whatever the statistics say: with fresh statistics of a new run ("all queued") it
# otherwise scans the table from the start, past every job the run claimed already, on every
# claim. Rows another claimer took since this statement's snapshot are re-checked by
# FOR UPDATE and skipped. The lease update finds the picked ids by primary key.
_LAPSED_CTES = """
lapsed AS (
    SELECT id, attempts FROM {job}
    WHERE status = 'running' AND lease_expires_at < %(now)s AND run_id = (SELECT id FROM go)
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE {job} SET status = 'failed', error_kind = 'transient', error = %(fail_error)s,
        lease_token = '', lease_expires_at = NULL, finished_at = %(now)s
    WHERE id = ANY(ARRAY(SELECT id FROM lapsed WHERE attempts >= %(max_attempts)s))
), expired AS (
    SELECT id FROM lapsed WHERE attempts < %(max_attempts)s ORDER BY id LIMIT %(n)s
),"""
_CLAIM_SQL = """
WITH r AS (
    SELECT id, status, max_calls IS NULL AND max_cost IS NULL AS free
    FROM {run} WHERE id = %(run)s FOR UPDATE
), go AS (
    SELECT id FROM r WHERE status = 'running' AND free
), {lapsed} queued AS (
    SELECT id FROM {job}
    WHERE run_id = (SELECT id FROM go) AND status = 'queued'
        AND (available_at IS NULL OR available_at <= %(now)s)
    ORDER BY run_id, status LIMIT %(n)s FOR UPDATE SKIP LOCKED
), picked AS (
    {expired} SELECT id FROM queued LIMIT %(n)s
), claimed AS (
    UPDATE {job} AS j SET status = 'running', lease_token = %(token)s,
        lease_expires_at = %(lease_until)s, attempts = j.attempts + 1, available_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING {returning}
), counted AS (
    UPDATE {run} SET calls_made = calls_made + (SELECT count(*) FROM claimed),
        last_activity_at = %(now)s
    WHERE id = (SELECT id FROM go)
)
SELECT r.status, r.free, {claimed_cols}, o.text, c.output_a_id, a.text, c.output_b_id, b.text,
    i.input, i.context, i.reference
FROM r LEFT JOIN claimed ON true
    LEFT JOIN {output} o ON o.id = claimed.output_id
    LEFT JOIN {comparison} c ON c.id = claimed.comparison_id
    LEFT JOIN {output} a ON a.id = c.output_a_id
    LEFT JOIN {output} b ON b.id = c.output_b_id
    LEFT JOIN {item} i ON i.id = COALESCE(o.item_id, c.item_id)
ORDER BY claimed.id
"""


def _claim_postgres(
    *, run_id: int, n: int, token: str, now: datetime, max_attempts: int, lapsed: bool = True
) -> tuple[str | None, bool, list[ClaimedJob]]:
    """(run status or None when there is no such run, whether it has no budget, the jobs)."""
    job = JudgeJob._meta.db_table
    sql = _CLAIM_SQL.format(
        job=job, run=JudgeRun._meta.db_table, output=Output._meta.db_table,
        comparison=Comparison._meta.db_table, item=Item._meta.db_table,
        lapsed=_LAPSED_CTES.format(job=job) if lapsed else "",
        expired="(SELECT id FROM expired) UNION ALL" if lapsed else "",
        returning=", ".join(f'j."{c}"' for c in _CLAIMED_COLUMNS),
        claimed_cols=", ".join(f'claimed."{c}"' for c in _CLAIMED_COLUMNS),
    )
    params: dict[str, Any] = {
        "run": run_id, "n": n, "token": token, "now": now,
        "lease_until": now + timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S),
    }
    if lapsed:
        params.update(max_attempts=max_attempts, fail_error=_exhausted_lease_error(max_attempts))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return None, False, []
    width = len(_CLAIMED_COLUMNS)
    jobs = []
    for row in rows:
        if row[2] is None:  # the run row alone: nothing claimed
            continue
        text, a_id, a_text, b_id, b_text, inp, context, reference = row[2 + width:]
        texts = None if inp is None else SubjectTexts(  # None: the subject is gone
            item_input=inp, item_context=context, item_reference=reference, output_text=text,
            output_a_id=a_id, output_a_text=a_text, output_b_id=b_id, output_b_text=b_text)
        jobs.append(_claimed(row[2 : 2 + width], texts))
    return rows[0][0], bool(rows[0][1]), jobs


def _claimed(row: Sequence[Any], texts: SubjectTexts | None = None) -> ClaimedJob:
    jid, run_id, version_id, crit_id, output_id, comparison_id, sample, order, attempts, det = row
    return ClaimedJob(id=jid, run_id=run_id, judge_version_id=version_id, criterion_id=crit_id,
                      output_id=output_id, comparison_id=comparison_id, sample_index=sample,
                      order=order, attempts=attempts, details=_json_value(det) or {},
                      texts=texts)


def _json_value(raw: Any) -> Any:
    # Django has psycopg hand jsonb over as text (JSONField decodes it); raw SQL does too.
    if raw == "{}":  # a job's details before its first error: most jobs, most of the time
        return {}
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def _claim_orm(
    *, run: JudgeRun, ids: list[int], token: str, now: datetime
) -> list[ClaimedJob]:
    leases.lease_take(JudgeJob, ids=ids, token=token, now=now,
                      lease_s=settings.REVIEWHUB_JUDGE_LEASE_S)
    run.calls_made += len(ids)
    run.last_activity_at = now
    run.save(update_fields=["calls_made", "last_activity_at"])
    return [
        _claimed(row) for row in JudgeJob.objects.filter(id__in=ids, lease_token=token)
        .order_by("id").values_list(*_CLAIMED_COLUMNS)
    ]


def jobs_claim(
    *, run_id: int, limit: int, lease_token: str | None = None, lapsed: bool = True
) -> ClaimResult:
    """Claim up to `limit` claimable jobs of a run for one worker, under a lease.

    Claimable: queued and available now, or running with an expired lease (its worker is
    presumed dead; each claim counts one attempt; these go first). The run row is locked for
    the duration so that budget checks and `calls_made` are exact across workers; the jobs
    themselves are picked with FOR UPDATE SKIP LOCKED on PostgreSQL (one statement, see
    `_CLAIM_SQL`; SQLite serialises writers instead).

    `lapsed=False` lets a worker that claims many times a second skip looking for expired
    leases (they take minutes to expire) while queued jobs are claimable; a claim that finds
    no queued job always looks.
    """
    token = lease_token or uuid.uuid4().hex
    now = timezone.now()
    max_attempts = settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS
    fast = connection.vendor == "postgresql"
    if fast:
        # The common case, a running run without a budget, is one statement (`_CLAIM_SQL`).
        for look in dict.fromkeys((lapsed, True)):  # skipping lapsed leases: retry once
            status, free, claimed = _claim_postgres(run_id=run_id, n=limit, token=token,
                                                    now=now, max_attempts=max_attempts,
                                                    lapsed=look)
            if status != JudgeRun.Status.RUNNING:
                return ClaimResult(jobs=[], state="inactive")
            if not free or claimed:
                break
        if free:
            if claimed:
                return ClaimResult(jobs=claimed, remaining=len(claimed))
            return _claim_nothing(run_id, "ok")
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != JudgeRun.Status.RUNNING:
            return ClaimResult(jobs=[], state="inactive")
        _fail_exhausted_leases(JudgeJob.objects.filter(run=run), now, max_attempts)
        allowance = limit
        state = "ok"
        if run.max_calls is not None:
            allowance = min(allowance, run.max_calls - run.calls_made)
        if run.max_cost is not None:
            spent, priced, running = _cost_so_far(run, now)
            if spent >= run.max_cost:
                allowance = 0
            elif priced:
                avg = spent / priced
                affordable = (
                    math.floor((run.max_cost - spent) / avg) - running if avg > 0 else limit
                )
                allowance = min(allowance, affordable)
            else:
                allowance = min(allowance, max(0, COST_PROBE_CALLS - running))
                if allowance == 0:
                    state = "budget_wait"
        jobs: list[ClaimedJob] = []
        if allowance > 0:
            for look in dict.fromkeys((lapsed, True)):  # skipping lapsed leases: retry once
                qs = _claimable(run.pk, now, max_attempts).order_by("id")
                if not look:
                    qs = qs.filter(status=JudgeJob.Status.QUEUED)
                if connection.features.has_select_for_update_skip_locked:
                    qs = qs.select_for_update(skip_locked=True)
                ids = list(qs.values_list("id", flat=True)[:allowance])
                if ids:
                    jobs = _claim_orm(run=run, ids=ids, token=token, now=now)
                    break
        elif state != "budget_wait" and _claimable(run.pk, now, max_attempts).exists():
            reason = budget_exhausted(run) or (
                f"max_cost reached: {_cost_so_far(run)[0]:.6f} spent of "
                f"{run.max_cost:.6f} allowed; the next calls would exceed it"
            )
            _stop_run(run, reason)
            return ClaimResult(jobs=[], state="stopped")
        if jobs:
            return ClaimResult(jobs=jobs, state=state, remaining=len(jobs))
        run.last_activity_at = now
        run.save(update_fields=["last_activity_at"])
        return _claim_nothing(run_id, state)


def _claim_nothing(run_id: int, state: str) -> ClaimResult:
    """An empty claim: how much work is left, and when the next retry becomes claimable."""
    rest = JudgeJob.objects.filter(run_id=run_id, status__in=ACTIVE_JOB_STATUSES)
    remaining = rest.count()
    next_at = None
    if remaining:
        next_at = (
            rest.filter(status=JudgeJob.Status.QUEUED, available_at__isnull=False)
            .order_by("available_at").values_list("available_at", flat=True).first()
        )
    return ClaimResult(jobs=[], state=state, next_available_at=next_at, remaining=remaining)
