"""Celery adapters for reports: take ids, call the service, own the retry policy."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from .services import report_compute


@shared_task(
    bind=True,
    acks_late=True,
    max_retries=3,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=60,
)
def agreement_report_compute(self: object, report_id: int) -> str:
    """Compute one agreement report; a redelivery finds it done or running and does nothing."""
    return str(report_compute(report_id=report_id).status)
