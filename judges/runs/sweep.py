"""Waking, settling and sweeping runs: re-queueing lapsed leases, cancelling stray retries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q
from django.utils import timezone

from ..models import JudgeJob, JudgeRun
from . import leases
from .common import ACTIVE_JOB_STATUSES, INACTIVE_RUN_STATUSES, logger
from .lifecycle import Enqueue, on_commit_enqueue
from .verdicts import run_finish_if_complete


@dataclass(frozen=True)
class RunWake:
    """What a running run's queue holds: whether, and from when, a batch task has work.

    Read from the database after a drain has recorded everything it claimed, so it sees the
    retries that drain's last chunk put back (the drain's own report may predate them).
    """

    queued: int
    ready: int  # queued and claimable now
    unscheduled: int  # queued with no retry time (claimable since they were queued)
    running: int  # running under a live lease (a worker is on it)
    lapsed: int  # running with an expired lease (its worker is presumed lost)
    next_retry_at: datetime | None  # the earliest `available_at` of the queued jobs
    next_lease_expiry_at: datetime | None  # the earliest live lease's expiry
    last_activity_at: datetime | None

    @property
    def due_at(self) -> datetime | None:
        """When the earliest queued job becomes claimable (None: claimable now)."""
        return None if self.ready else self.next_retry_at

    @property
    def claimable_from(self) -> datetime | None:
        """Since (or from) when the earliest queued job is claimable; None: since queued."""
        return None if self.unscheduled else self.next_retry_at


def run_wake(*, run_id: int, now: datetime | None = None) -> RunWake | None:
    """The queue of a running run with queued jobs (one query); None when there is no such
    run, it is not running, or it has no queued job (nothing to wake up for)."""
    now = now or timezone.now()
    st = JudgeJob.Status
    ready_q = Q(status=st.QUEUED) & (Q(available_at__isnull=True) | Q(available_at__lte=now))
    agg = JudgeJob.objects.filter(
        run_id=run_id, run__status=JudgeRun.Status.RUNNING, status__in=ACTIVE_JOB_STATUSES
    ).aggregate(
        queued=Count("id", filter=Q(status=st.QUEUED)),
        ready=Count("id", filter=ready_q),
        unscheduled=Count("id", filter=Q(status=st.QUEUED, available_at__isnull=True)),
        running=Count("id", filter=Q(status=st.RUNNING, lease_expires_at__gte=now)),
        lapsed=Count("id", filter=Q(status=st.RUNNING, lease_expires_at__lt=now)),
        next_retry_at=Min("available_at", filter=Q(status=st.QUEUED)),
        next_lease_expiry_at=Min("lease_expires_at",
                                 filter=Q(status=st.RUNNING, lease_expires_at__gte=now)),
        last_activity_at=Max("run__last_activity_at"),
    )
    if not agg["queued"]:
        return None
    return RunWake(**agg)


def run_settle(*, run_id: int) -> int:
    """Cancel the queued jobs of a run that is no longer running; return how many.

    A run stops (budget) or is cancelled while calls are in flight; those calls finish and are
    recorded, and a transient error among them is recorded as "queued, retry later", as is a
    lapsed lease the sweeper re-queues. Nothing claims jobs of a run that is not running, so
    they would stay queued for ever, and the run would look half-alive; cancelled, they are
    what `judge_run_resume` picks up. Under the run row lock, as resume changes the status.
    """
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().filter(
            pk=run_id, status__in=INACTIVE_RUN_STATUSES).first()
        if run is None:
            return 0
        n = JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).update(
            status=JudgeJob.Status.CANCELLED, finished_at=timezone.now(),
            available_at=None, error=f"run {run.status} before this job was retried",
        )
    if n:
        logger.info("judge run %s (%s): %s queued jobs cancelled", run_id, run.status, n)
    return n



@dataclass
class SweepCounts:
    """What every sweep of a run queue counts (judge runs here, candidate runs in
    generation/runs.py); each adds what it kicked, then the jobs it settled."""

    requeued: int = 0
    failed: int = 0
    runs_finished: int = 0


@dataclass
class SweepResult(SweepCounts):
    runs_kicked: list[int] = field(default_factory=list)
    settled: int = 0  # queued jobs of runs no longer running, cancelled (`run_settle`)


def running_runs_sweep(run_model: Any, counts: SweepCounts, *, now: datetime,
                       finish_if_complete: Callable[..., bool],
                       kick: Callable[[int], None]) -> None:
    """Finish every running run of `run_model` that has no work left; `kick` one silent (no
    claim or record) for longer than a lease, inside the transaction that marks it active
    again, so that of two sweeps racing only one kicks it."""
    idle_before = now - timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S)
    running = run_model.Status.RUNNING
    for run_id in run_model.objects.filter(status=running).values_list("id", flat=True):
        if finish_if_complete(run_id=run_id):
            counts.runs_finished += 1
            continue
        with transaction.atomic():
            if run_model.objects.filter(
                Q(last_activity_at__isnull=True) | Q(last_activity_at__lt=idle_before),
                pk=run_id, status=running,
            ).update(last_activity_at=now):
                kick(run_id)


def judge_sweep(*, now: datetime | None = None, enqueue: Enqueue | None = None) -> SweepResult:
    """Re-queue jobs left running past their lease, finish complete runs, re-kick idle runs.

    Jobs whose lease expired go back to `queued` (or `failed`, once they have used all their
    attempts); the lease token is cleared, so the lost worker's late result is discarded. A run
    that still has work but no claim or record for longer than a lease gets fresh batch tasks
    (its messages may have died with the worker, e.g. unacknowledged ones that Redis only
    redelivers after the visibility timeout). Queued jobs of runs that are no longer running
    are cancelled (`run_settle`).
    """
    now = now or timezone.now()
    result = SweepResult()
    max_attempts = settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS
    with transaction.atomic():
        result.failed, result.requeued = leases.lapsed_requeue(
            JudgeJob.objects.all(), now, max_attempts,
            exhausted_kind=JudgeJob.ErrorKind.TRANSIENT)
    unsettled = JudgeRun.objects.filter(status__in=INACTIVE_RUN_STATUSES).filter(
        Exists(JudgeJob.objects.filter(run=OuterRef("pk"), status=JudgeJob.Status.QUEUED)))
    for run_id in unsettled.values_list("id", flat=True):
        result.settled += run_settle(run_id=run_id)

    def kick(run_id: int) -> None:
        queued = JudgeJob.objects.filter(run_id=run_id, status=JudgeJob.Status.QUEUED).count()
        if queued:
            on_commit_enqueue(run_id, queued, enqueue)
            result.runs_kicked.append(run_id)

    running_runs_sweep(JudgeRun, result, now=now, finish_if_complete=run_finish_if_complete,
                       kick=kick)
    if result.requeued or result.failed or result.runs_kicked or result.settled:
        logger.info("judge sweep: %s", result)
    return result
