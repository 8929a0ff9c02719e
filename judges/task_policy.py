"""The Celery retry policies of the apps' tasks, and the start-up sweep a worker queues.

Every task is `acks_late` (the project default, repeated on purpose: a SIGKILLed worker's
message stays unacknowledged) and is retried by Celery only when the database connection
failed; any other error is the service's to record. Work a task leaves undone is in the
database, so a retry, a redelivery or the next beat tick picks it up alike.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerOperationalError

DB_CONNECTION_ERRORS = (OperationalError, InterfaceError)

# Periodic tasks (sweeps, lease expiry): the next tick does the same work, so a few tries.
PERIODIC_TASK: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": DB_CONNECTION_ERRORS,
    "retry_backoff": 2,
    "max_retries": 3,
}

# Batch tasks of a run (one drain slice): a chain breaks if its task gives up, so more tries,
# spread out (jitter) so that the workers of a database blip do not come back in step.
BATCH_TASK: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": DB_CONNECTION_ERRORS,
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 8,
}


def queue_start_up_sweep(task: Any, *, queue: str, what: str, logger: logging.Logger) -> None:
    """Queue `task` (a sweep) once, as a worker starts: after a crash a fresh worker should not
    wait for the first beat tick. A broker outage is logged; beat sweeps once it is back."""
    try:
        task.apply_async(queue=queue)
    except (BrokerOperationalError, OSError):
        logger.warning("could not queue the %s", what, exc_info=True)
