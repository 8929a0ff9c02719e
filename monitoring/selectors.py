"""Reads of the monitoring app: a deployment with the caller's access, lists, JSON shapes."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from reviewhub.errors import NotFound
from studies.access import StudyAccess, judge_data_need, study_access_get
from studies.models import Study

from .models import Alert, Deployment, Window

MAX_ID = 2**63 - 1


def deployment_access_get(*, user: Any, token: Any, deployment_id: int, write: bool = False,
                          need: list[Any] | None = None) -> tuple[Deployment, StudyAccess]:
    """The deployment when the caller may see (or, with `write`, change) its study's judge
    data; 404 for a deployment that does not exist or whose study the caller cannot see."""
    deployment = (Deployment.objects.select_related("study", "plan", "candidate", "live_study")
                  .filter(pk=deployment_id).first() if 0 < deployment_id <= MAX_ID else None)
    if deployment is None:
        raise NotFound(f"Deployment {deployment_id} not found.")
    access = study_access_get(user=user, slug=deployment.study.slug, token=token,
                              need=need or judge_data_need(write=write))
    return deployment, access


def deployments_list(*, study: Study) -> QuerySet[Deployment]:
    return Deployment.objects.filter(study=study).select_related("candidate", "plan", "live_study")


def windows_list(*, deployment: Deployment, granularity: str | None = None
                 ) -> QuerySet[Window]:
    qs = Window.objects.filter(deployment=deployment)
    if granularity:
        qs = qs.filter(granularity=granularity)
    return qs.order_by("start")


def alerts_list(*, deployment: Deployment) -> QuerySet[Alert]:
    return (Alert.objects.filter(deployment=deployment)
            .select_related("acknowledged_by", "resolved_by").prefetch_related("events"))


def alert_get(*, deployment: Deployment, alert_id: int) -> Alert:
    alert = Alert.objects.filter(deployment=deployment, pk=alert_id).first() \
        if 0 < alert_id <= MAX_ID else None
    if alert is None:
        raise NotFound(f"Alert {alert_id} not found in this deployment.")
    return alert


def deployment_json(d: Deployment) -> dict[str, Any]:
    return {
        "id": d.pk, "study": d.study.slug, "name": d.name, "status": d.status,
        "candidate": d.candidate.name,
        "shadow_candidates": sorted(c.name for c in d.shadow_candidates.all()),
        "plan_version": d.plan.version,
        "judge_versions": sorted(v.pk for v in d.judge_versions.all()),
        "calibration_snapshot": d.calibration_snapshot_id,
        "watch_dimension": d.watch_dimension, "sampling": d.sampling,
        "alerting": d.alerting, "created_at": d.created_at.isoformat(),
        # Where the sampled rows are judged and graded (docs/monitoring.md, section 3).
        "live_study": d.live_study.slug if d.live_study_id and d.live_study else None,
    }


def window_json(w: Window) -> dict[str, Any]:
    return {"id": w.pk, "granularity": w.granularity, "start": w.start.isoformat(),
            "end": w.end.isoformat(), "n_rows": w.n_rows, "computed_at":
            w.computed_at.isoformat(), "result_version": w.result_version, "result": w.result}


def alert_json(a: Alert) -> dict[str, Any]:
    def when(x: Any) -> str | None:
        return x.isoformat() if x else None

    return {
        "id": a.pk, "kind": a.kind, "stratum": a.stratum, "status": a.status,
        "message": a.message, "details": a.details, "opened_at": when(a.opened_at),
        "last_seen_at": when(a.last_seen_at), "seen_count": a.seen_count,
        "notified_at": when(a.notified_at), "acknowledged_at": when(a.acknowledged_at),
        "resolved_at": when(a.resolved_at),
        "history": [{"at": when(e.at), "event": e.event, "detail": e.detail}
                    for e in a.events.all()],
    }
