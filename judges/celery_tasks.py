"""Celery adapters for judge runs: ids in, a service call, the retry policy.

- `judges.run_work(run_id)`: one batch task = one `executor.run_drain` time slice. After every
  drain it schedules a successor while the run has queued jobs, due when the earliest becomes
  claimable (`successor_countdown`, read from the database once the drain has recorded
  everything), so a run is a chain of bounded tasks that never stalls waiting for the
  sweeper; several chains run per run (`REVIEWHUB_JUDGE_TASKS_PER_RUN`) so the queue never
  drains while one hands over. Job-level retries (transient provider errors) are NOT Celery
  retries: the job goes back to `queued` in the database with its backoff (`available_at`),
  which survives any worker or broker loss. The task itself retries only on database/broker
  connection errors.
- `judges.sweep()`: the sweeper (see `runs.judge_sweep`), run by celery beat
  (`CELERY_BEAT_SCHEDULE` in settings; compose's `beat` service, the demo worker's `-B`),
  once when a worker starts (`worker_ready`), or by `manage.py judge_sweep`. Only it brings
  back a run whose worker was killed (see below), so every deployment runs exactly one beat.

All tasks are `acks_late` (`task_policy`): a SIGKILLed worker's message stays unacknowledged.
Redis only redelivers it after the visibility timeout, so the sweeper is what brings a run back
quickly; the database is the source of truth either way.

Worker processes tune the garbage collector when they start (`worker_gc_tune`).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_ready
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from . import executor, runs
from .task_policy import BATCH_TASK, PERIODIC_TASK, queue_start_up_sweep

logger = logging.getLogger(__name__)

QUEUE = "judges"
# Bounds on how long a successor waits for the next retry or lease expiry. A retry further
# away than the maximum (a long Retry-After) is reached by successors that find nothing yet
# and wait again.
MIN_COUNTDOWN_S = 0.05
MAX_COUNTDOWN_S = 300.0
# A drain that claimed nothing although jobs were claimable (a budget waiting for the costs of
# calls in flight, a claim racing another worker's) and saw no live lease to wait for looks
# again after this long.
IDLE_RECHECK_S = 1.0


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


@shared_task(name="judges.run_work", **BATCH_TASK)
def judge_run_work(run_id: int) -> dict[str, Any]:
    """Drain one time slice of a run, then keep the chain going while work remains."""
    report = executor.run_drain(run_id=run_id)
    countdown = successor_countdown(run_id=run_id, claimed=report.claimed)
    if countdown is not None:
        judge_run_enqueue(run_id=run_id, countdown=countdown or None)
    logger.info(
        "judge run %s slice: state=%s claimed=%s recorded=%s discarded=%s verdicts=%s "
        "max_in_flight=%s remaining=%s finished=%s", run_id, report.state, report.claimed,
        report.recorded, report.discarded, report.verdicts, report.max_in_flight,
        report.remaining, report.run_finished,
    )
    return {"state": report.state, "claimed": report.claimed, "recorded": report.recorded,
            "remaining": report.remaining, "finished": report.run_finished}


def successor_countdown(*, run_id: int, claimed: int) -> float | None:
    """Seconds until this chain's next batch task should run (0: now); None: no successor.

    Decided from the database after the drain has recorded everything it claimed, never from
    the drain's own report: its last claim can predate the retries its last chunk put back
    (they would otherwise wait for the sweeper) and, for a cost-limited run, the costs that
    let the next claim go past the probe calls. So after every drain, a run with queued jobs
    has a successor, due when the earliest of them becomes claimable. A run that is no longer
    running gets none, and its queued jobs are cancelled (`runs.run_settle`).
    """
    wake = runs.run_wake(run_id=run_id)
    if wake is None:
        runs.run_settle(run_id=run_id)
        return None
    now = timezone.now()
    if wake.due_at is not None:  # every queued job waits for its retry time
        wait = (wake.due_at - now).total_seconds()
    elif claimed:
        return 0.0
    elif wake.next_lease_expiry_at is not None:
        # Claimable jobs but this drain got none while other calls are in flight: whoever
        # holds them schedules its own successor when they are recorded (a budget then has
        # the costs it waited for), so this chain waits for their leases (their worker may be
        # lost) rather than polling.
        wait = (wake.next_lease_expiry_at - now).total_seconds()
    else:
        wait = IDLE_RECHECK_S
    return min(MAX_COUNTDOWN_S, max(MIN_COUNTDOWN_S, wait))


def _enqueue(run_id: int, n: int) -> None:
    judge_run_enqueue(run_id=run_id, n=n)


@shared_task(name="judges.sweep", **PERIODIC_TASK)
def judge_sweep_task() -> dict[str, Any]:
    return dataclasses.asdict(runs.judge_sweep(enqueue=_enqueue))


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
    queue_start_up_sweep(judge_sweep_task, queue=QUEUE, what="start-up sweep", logger=logger)
