"""Compute one report snapshot of any kind: the lifecycle's claim, compute and record.

`report_compute` (called by the Celery task, and directly by `manage.py report`) claims the
row, computes with no transaction open and records the result with a conditional update, so a
redelivered task neither computes twice nor overwrites a finished snapshot. It sits below
reports/services.py (which enqueues the task) and reports/celery_tasks.py (which calls it), so
neither needs the other at call time; callers take it from reports.services.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from reviewhub.errors import NotFound
from snapshots.models import ReportSnapshot

from .kinds import kind_get

logger = logging.getLogger(__name__)


def report_compute(*, report_id: int) -> ReportSnapshot:
    """Compute a pending snapshot (idempotent: a finished or running one is left alone).

    A snapshot "running" for longer than REVIEWHUB_REPORT_STALE_S is reclaimed: its worker
    died before recording. A failure is recorded on the row (status failed, the error text)
    rather than raised, so a redelivery does not loop on it; `report_retry` starts it again.
    """
    with transaction.atomic():
        report = ReportSnapshot.objects.select_for_update().filter(pk=report_id).first()
        if report is None:
            raise NotFound(f"Report {report_id} not found.")
        stale = (
            report.status == ReportSnapshot.Status.RUNNING
            and report.started_at is not None
            and (timezone.now() - report.started_at).total_seconds()
            > settings.REVIEWHUB_REPORT_STALE_S
        )
        if report.status != ReportSnapshot.Status.PENDING and not stale:
            return report
        report.status = ReportSnapshot.Status.RUNNING
        report.started_at = timezone.now()
        report.save(update_fields=["status", "started_at"])
    try:
        spec = kind_get(report.kind)
        if spec.load_with_plan is not None:
            inputs = spec.load_with_plan(report.study, report.params, report.plan)
        else:
            inputs = spec.load(report.study, report.params)
        fingerprint = spec.fingerprint(inputs)
        plan_version = report.plan.version if report.plan is not None else None
        typed = spec.compute(inputs, report.params, plan_version, fingerprint)
        result = typed.to_json()
    except Exception as exc:
        _record_failure(report_id, exc, report.kind)
        report.refresh_from_db()
        return report
    # The result and the kind's own rows are recorded together: the rows only when the
    # conditional update found the snapshot still running (not finished by another worker
    # after a stale reclaim), in the same transaction. A failing row write rolls the result
    # back and marks the snapshot failed; an error of the update itself propagates as before.
    hook_error: Exception | None = None
    try:
        with transaction.atomic():
            updated = ReportSnapshot.objects.filter(
                pk=report_id, status=ReportSnapshot.Status.RUNNING
            ).update(
                status=ReportSnapshot.Status.DONE,
                result=result,
                result_version=typed.version,
                input_fingerprint=fingerprint,
                error="",
                computed_at=timezone.now(),
            )
            if updated and spec.record is not None:
                try:
                    spec.record(report.study_id, report_id, typed)
                except Exception as exc:
                    hook_error = exc
                    raise
    except Exception:
        if hook_error is None:
            raise
        _record_failure(report_id, hook_error, report.kind)
    report.refresh_from_db()
    return report


def _record_failure(report_id: int, exc: Exception, kind: str) -> None:
    """Mark a running snapshot failed with the error's text (nothing else is recorded)."""
    logger.exception("%s report %s failed", kind, report_id, exc_info=exc)
    ReportSnapshot.objects.filter(pk=report_id, status=ReportSnapshot.Status.RUNNING).update(
        status=ReportSnapshot.Status.FAILED,
        error=f"{type(exc).__name__}: {exc}",
        computed_at=timezone.now(),
    )
