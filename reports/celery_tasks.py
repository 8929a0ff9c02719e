"""Celery adapters for reports: take ids, call the service, own the retry policy."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from .compute import report_compute

_POLICY = {
    "bind": True,
    "acks_late": True,
    "max_retries": 3,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "retry_backoff_max": 60,
}


@shared_task(name="reports.celery_tasks.report_compute_task", **_POLICY)
def report_compute_task(self: object, report_id: int) -> str:
    """Compute one report snapshot of any kind; a redelivery finds it done or running and does
    nothing."""
    return str(report_compute(report_id=report_id).status)


@shared_task(name="reports.celery_tasks.agreement_report_compute", **_POLICY)
def agreement_report_compute(self: object, report_id: int) -> str:
    """The task's former name: messages queued before the rename still find a consumer."""
    return str(report_compute(report_id=report_id).status)
