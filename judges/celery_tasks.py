"""Celery adapters for judge runs: ids in, a service call, the retry policy.

- `judges.run_work(run_id)`: one batch task = one `executor.run_drain` time slice. It keeps a
  successor queued while the run has work, so a run is a chain of bounded tasks; several
  chains run per run (`REVIEWHUB_JUDGE_TASKS_PER_RUN`) so the queue never drains while one
  hands over. Job-level retries (transient provider errors) are NOT Celery retries: the job
  goes back to `queued` in the database with its backoff (`available_at`), which survives any
  worker or broker loss. The task itself retries only on database/broker connection errors.
- `judges.sweep()`: the sweeper (see `runs.judge_sweep`), run by celery beat
  (`CELERY_BEAT_SCHEDULE` in settings; start a worker with `-B` or a separate `celery beat`),
  once when a worker starts (`worker_ready`), or by `manage.py judge_sweep`.

All tasks are `acks_late` (the project default, repeated here on purpose): a SIGKILLed worker's
message stays unacknowledged. Redis only redelivers it after the visibility timeout, so the
sweeper is what brings a run back quickly; the database is the source of truth either way.

Worker processes tune the garbage collector when they start (`worker_gc_tune`).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_ready
from django.db import InterfaceError, OperationalError
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from . import executor, runs

logger = logging.getLogger(__name__)

QUEUE = "judges"
# Bounds on how long a successor waits for the next retry or lease expiry.
MIN_COUNTDOWN_S = 0.05
MAX_COUNTDOWN_S = 300.0


def judge_run_enqueue(*, run_id: int, n: int = 1, countdown: float | None = None) -> int:
    """Queue `n` batch tasks for a run; returns how many were sent.

    A broker outage is logged, not raised: the run is in the database, and the sweeper kicks
    runs that stay idle for a lease once the broker is back.
    """
    sent = 0
    for _ in range(n):
        try:
            judge_run_work.apply_async(args=(run_id,), queue=QUEUE, countdown=countdown)
            sent += 1
        except (BrokerOperationalError, OSError) as exc:
            logger.error("could not queue run %s (%s); the sweeper will re-kick it", run_id, exc)
            break
    return sent


@shared_task(
    name="judges.run_work",
    acks_late=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=8,
)
def judge_run_work(run_id: int) -> dict[str, Any]:
    """Drain one time slice of a run, then keep the chain going while work remains."""
    report = executor.run_drain(run_id=run_id)
    if report.state == "sliced":
        judge_run_enqueue(run_id=run_id)
    elif report.state == "idle" and report.remaining and report.next_available_at is not None:
        wait = (report.next_available_at - timezone.now()).total_seconds()
        judge_run_enqueue(run_id=run_id,
                          countdown=min(MAX_COUNTDOWN_S, max(MIN_COUNTDOWN_S, wait)))
    logger.info(
        "judge run %s slice: state=%s claimed=%s recorded=%s discarded=%s verdicts=%s "
        "max_in_flight=%s remaining=%s finished=%s", run_id, report.state, report.claimed,
        report.recorded, report.discarded, report.verdicts, report.max_in_flight,
        report.remaining, report.run_finished,
    )
    return {"state": report.state, "claimed": report.claimed, "recorded": report.recorded,
            "remaining": report.remaining, "finished": report.run_finished}


def _enqueue(run_id: int, n: int) -> None:
    judge_run_enqueue(run_id=run_id, n=n)


@shared_task(name="judges.sweep", acks_late=True,
             autoretry_for=(OperationalError, InterfaceError), retry_backoff=2, max_retries=3)
def judge_sweep_task() -> dict[str, Any]:
    result = runs.judge_sweep(enqueue=_enqueue)
    return {"requeued": result.requeued, "failed": result.failed,
            "runs_finished": result.runs_finished, "runs_kicked": result.runs_kicked}


# Young-generation threshold for worker processes (CPython's default is 700 allocations).
GC_GEN0_THRESHOLD = 10_000


def worker_gc_tune() -> None:
    """Freeze what start-up allocated, and collect the young generation less often.

    A judge worker keeps hundreds of calls in flight, each a few dozen objects that live for
    the whole call; with the default threshold the collector traverses them again and again,
    and every full collection walks the whole of Django besides (together ~15% of a busy
    worker's CPU, measured: docs/benchmarks.md, judge throughput). What start-up imported
    lives as long as the process; frozen, it is not traversed again. Objects are still
    collected, only in larger batches.
    """
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)
    logger.info("worker gc: %s objects frozen, thresholds %s", gc.get_freeze_count(),
                gc.get_threshold())


@worker_process_init.connect
def _gc_tune_child(sender: Any = None, **_: Any) -> None:
    worker_gc_tune()  # a prefork pool child


@worker_ready.connect
def _gc_tune_worker(sender: Any = None, **_: Any) -> None:
    worker_gc_tune()  # the worker process itself (threads and solo pools run tasks in it)


@worker_ready.connect
def _sweep_on_start(sender: Any = None, **_: Any) -> None:
    # A fresh worker after a crash should not wait for the first beat tick.
    try:
        judge_sweep_task.apply_async(queue=QUEUE)
    except (BrokerOperationalError, OSError):
        logger.warning("could not queue the start-up sweep", exc_info=True)
