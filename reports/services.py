"""Writes for report snapshots: create one and compute it, for every kind (docs/reports.md).

`report_build` validates the parameters with the kind's rules, stores a pending snapshot and
enqueues its computation on commit; `report_compute` (called by the Celery task, and directly
by `manage.py report`) claims the row, computes with no transaction open and records the
result with a conditional update, so a redelivered task neither computes twice nor overwrites
a finished snapshot. A kind with rows of its own (calibration's calibrated scores) writes them
in the transaction of that update, only when it matched. What differs between kinds lives in
reports/kinds.py.

`report_compute` is defined in reports/compute.py, below both this module and the Celery task
that calls it (this module enqueues that task), and is exported from here with the other writes.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from reviewhub.errors import NotFound, ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import AnalysisPlan, Study

from .celery_tasks import report_compute_task
from .compute import report_compute
from .kinds import kind_get

__all__ = ["report_build", "report_compute", "report_retry", "report_snapshot_create"]


def report_snapshot_create(
    *,
    study: Study,
    kind: str = ReportSnapshot.Kind.AGREEMENT,
    params: dict[str, Any] | None,
    plan: AnalysisPlan | None = None,
    created_by: Any,
) -> ReportSnapshot:
    """Validate and store a pending snapshot without enqueueing it (see `report_build`).

    Without an explicit `plan` the study's latest locked analysis plan (if any) is recorded and
    supplies the defaults the kind takes from a plan.
    """
    spec = kind_get(kind)
    if plan is not None and plan.study_id != study.pk:
        raise NotFound("Analysis plan not found in this study.")
    if plan is None:
        plan = (
            AnalysisPlan.objects.filter(study=study, locked_at__isnull=False)
            .order_by("-version")
            .first()
        )
    if params is not None and not isinstance(params, dict):
        raise ValidationFailed(
            "params must be an object",
            details={"errors": [{"path": "params", "message": "must be an object"}]},
        )
    resolved = spec.params_validate(spec.plan_defaults(dict(params or {}), plan))
    if spec.check is not None:
        spec.check(study, resolved, plan)
    return ReportSnapshot.objects.create(
        study=study, kind=spec.key, plan=plan, params=resolved, created_by=created_by
    )


def report_build(
    *,
    study: Study,
    kind: str = ReportSnapshot.Kind.AGREEMENT,
    params: dict[str, Any] | None,
    plan: AnalysisPlan | None = None,
    created_by: Any,
) -> ReportSnapshot:
    """Create a pending snapshot of `kind` and enqueue its computation once it is committed."""

    with transaction.atomic():
        report = report_snapshot_create(
            study=study, kind=kind, params=params, plan=plan, created_by=created_by
        )
        transaction.on_commit(lambda: report_compute_task.delay(report.pk))
    return report


def report_retry(*, report: ReportSnapshot) -> ReportSnapshot:
    """Put a failed snapshot back to pending and enqueue it again."""

    with transaction.atomic():
        updated = ReportSnapshot.objects.filter(
            pk=report.pk, status=ReportSnapshot.Status.FAILED
        ).update(status=ReportSnapshot.Status.PENDING, error="")
        if updated:
            transaction.on_commit(lambda: report_compute_task.delay(report.pk))
    report.refresh_from_db()
    return report
