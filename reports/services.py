"""Writes for reports: create an agreement report snapshot and compute it (see docs/reports.md).

`report_build` validates the parameters, stores a pending report and enqueues its computation
on commit; `report_compute` (called by the Celery task) claims the row, computes with no
transaction open and records the result with a conditional update, so a redelivered task
neither computes twice nor overwrites a finished report.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from reviewhub.api.errors import NotFound, ValidationFailed
from studies.models import AnalysisPlan, Study

from .agreement import compute_report, input_fingerprint, params_validate
from .models import AgreementReport
from .selectors import rating_data_load

logger = logging.getLogger(__name__)


def _plan_defaults(params: dict[str, Any], plan: AnalysisPlan | None) -> dict[str, Any]:
    """Parameters the caller left out are taken from the analysis plan where it says them."""
    if plan is None:
        return params
    spec = plan.spec or {}
    out = dict(params)
    if "strata" not in out and isinstance(spec.get("strata"), list) and spec["strata"]:
        out["strata"] = [str(s) for s in spec["strata"]]
    min_labels = spec.get("min_human_labels_per_stratum")
    if "min_items" not in out and isinstance(min_labels, int) and min_labels >= 2:
        out["min_items"] = min_labels
    return out


def report_build(
    *,
    study: Study,
    params: dict[str, Any] | None,
    plan: AnalysisPlan | None = None,
    created_by: Any,
) -> AgreementReport:
    """Create a pending agreement report and enqueue its computation once the row is committed.

    Without an explicit `plan` the study's latest locked analysis plan (if any) is recorded and
    supplies defaults for `strata` and `min_items`.
    """
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
    resolved = params_validate(_plan_defaults(dict(params or {}), plan))
    from .celery_tasks import agreement_report_compute

    with transaction.atomic():
        report = AgreementReport.objects.create(
            study=study, plan=plan, params=resolved, created_by=created_by
        )
        transaction.on_commit(lambda: agreement_report_compute.delay(report.pk))
    return report


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null: PostgreSQL's JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_safe(value.item())
    return value


def report_compute(*, report_id: int) -> AgreementReport:
    """Compute a pending report (idempotent: a finished or running report is left alone)."""
    with transaction.atomic():
        report = AgreementReport.objects.select_for_update().filter(pk=report_id).first()
        if report is None:
            raise NotFound(f"Agreement report {report_id} not found.")
        stale = (
            report.status == AgreementReport.Status.RUNNING
            and report.started_at is not None
            and (timezone.now() - report.started_at).total_seconds()
            > settings.REVIEWHUB_REPORT_STALE_S
        )
        if report.status != AgreementReport.Status.PENDING and not stale:
            return report
        report.status = AgreementReport.Status.RUNNING
        report.started_at = timezone.now()
        report.save(update_fields=["status", "started_at"])
    try:
        p = report.params
        data = rating_data_load(
            study=report.study,
            criterion_keys=p.get("criteria"),
            judge_version_ids=p.get("judges"),
            candidate_names=p.get("candidates"),
        )
        fingerprint = input_fingerprint(data)
        result = compute_report(data, p)
        result["plan_version"] = report.plan.version if report.plan is not None else None
        result["fingerprint"] = fingerprint
        result = _json_safe(result)
    except Exception as exc:
        logger.exception("agreement report %s failed", report_id)
        AgreementReport.objects.filter(pk=report_id, status=AgreementReport.Status.RUNNING).update(
            status=AgreementReport.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            computed_at=timezone.now(),
        )
        report.refresh_from_db()
        return report
    AgreementReport.objects.filter(pk=report_id, status=AgreementReport.Status.RUNNING).update(
        status=AgreementReport.Status.DONE,
        result=result,
        input_fingerprint=fingerprint,
        error="",
        computed_at=timezone.now(),
    )
    report.refresh_from_db()
    return report


def report_retry(*, report: AgreementReport) -> AgreementReport:
    """Put a failed report back to pending and enqueue it again."""
    from .celery_tasks import agreement_report_compute

    with transaction.atomic():
        updated = AgreementReport.objects.filter(
            pk=report.pk, status=AgreementReport.Status.FAILED
        ).update(status=AgreementReport.Status.PENDING, error="")
        if updated:
            transaction.on_commit(lambda: agreement_report_compute.delay(report.pk))
    report.refresh_from_db()
    return report
