"""Celery adapters for candidate runs: ids in, a service call, the retry policy.

- `generation.run_work(run_id, config_id)`: one time slice of one candidate's drain
  (`executor.run_drain`). Each candidate of a run is one chain of such tasks (a successor is
  queued while the candidate has work, due when its earliest retry becomes claimable); the
  drain slot keeps a redelivered or re-kicked task from doubling the candidate's load.
- `generation.sweep()`: lapsed leases re-queued, finished runs closed, idle candidates
  re-kicked (celery beat, `CELERY_BEAT_SCHEDULE["generation-sweep"]`, and once when a worker
  starts).

Both run on the `judges` queue (`CELERY_TASK_ROUTES`): the workers that call providers.
Tasks are `acks_late`; job-level retries live in the database (`available_at`), never in
Celery, which retries only on database connection errors.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from judges.task_policy import BATCH_TASK, PERIODIC_TASK, queue_start_up_sweep

from . import executor, runs

logger = logging.getLogger(__name__)

QUEUE = "judges"
MIN_COUNTDOWN_S = 0.05
MAX_COUNTDOWN_S = 300.0
# The candidate still has jobs but all are in flight elsewhere (another drain, or a lost
# worker's leases): look again after this long.
BUSY_RECHECK_S = 1.0


def generation_enqueue(*, run_id: int, config_id: int, countdown: float | None = None) -> bool:
    """Queue one batch task for a candidate of a run. A broker outage is logged, not raised:
    the sweeper re-kicks idle runs once the broker is back."""
    try:
        generation_run_work.apply_async(args=(run_id, config_id), queue=QUEUE,
                                        countdown=countdown)
        return True
    except (BrokerOperationalError, OSError) as exc:
        logger.error("could not queue generation run %s/%s (%s); the sweeper will re-kick it",
                     run_id, config_id, exc)
        return False


@shared_task(name="generation.run_work", **BATCH_TASK)
def generation_run_work(run_id: int, config_id: int) -> dict[str, Any]:
    report = executor.run_drain(run_id=run_id, config_id=config_id)
    if report.state != "busy":
        has_work, due = runs.next_due(run_id=run_id, config_id=config_id)
        if has_work:
            wait = 0.0 if due is None and report.claimed else BUSY_RECHECK_S
            if due is not None:
                wait = (due - timezone.now()).total_seconds()
            generation_enqueue(run_id=run_id, config_id=config_id,
                               countdown=min(MAX_COUNTDOWN_S, max(MIN_COUNTDOWN_S, wait)))
        else:
            runs.run_settle(run_id=run_id)
    logger.info("generation run %s candidate %s slice: state=%s claimed=%s recorded=%s "
                "discarded=%s max_in_flight=%s", run_id, config_id, report.state,
                report.claimed, report.recorded, report.discarded, report.max_in_flight)
    return {"state": report.state, "claimed": report.claimed, "recorded": report.recorded}


def _enqueue(run_id: int, config_id: int) -> None:
    generation_enqueue(run_id=run_id, config_id=config_id)


@shared_task(name="generation.sweep", **PERIODIC_TASK)
def generation_sweep_task() -> dict[str, Any]:
    return dataclasses.asdict(runs.generation_sweep(enqueue=_enqueue))


@worker_ready.connect
def _sweep_on_start(sender: Any = None, **_: Any) -> None:
    queue_start_up_sweep(generation_sweep_task, queue=QUEUE, what="generation start-up sweep",
                         logger=logger)
