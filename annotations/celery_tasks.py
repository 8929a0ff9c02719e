"""Celery adapters for the annotation queue.

`annotations.expire_leases` returns expired leases to the pool (run by celery beat every
minute; `assignment_next` also sweeps inline, throttled, so the queue works without beat).
"""

from __future__ import annotations

from celery import shared_task

from judges.task_policy import PERIODIC_TASK

from .services import assignments_expire_stale


@shared_task(name="annotations.expire_leases", **PERIODIC_TASK)
def expire_leases_task(limit: int = 1000) -> int:
    """Idempotent: each lease is expired by a conditional update under its entry's lock."""
    return assignments_expire_stale(limit=limit)
