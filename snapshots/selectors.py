"""Reads of finished report snapshots for the apps that use a snapshot's result without running
the report lifecycle (monitoring reads the selection-time evidence of a deployment's study)."""

from __future__ import annotations

from .models import ReportSnapshot


def snapshot_done(*, snapshot_id: int | None) -> ReportSnapshot | None:
    """The snapshot `snapshot_id` if it finished (None for no id, or one not done)."""
    if snapshot_id is None:
        return None
    return ReportSnapshot.objects.filter(pk=snapshot_id,
                                         status=ReportSnapshot.Status.DONE).first()


def latest_done(*, study_id: int, kind: str) -> ReportSnapshot | None:
    """The study's newest finished snapshot of `kind` that recorded a result."""
    return (ReportSnapshot.objects.filter(study_id=study_id, kind=kind,
                                          status=ReportSnapshot.Status.DONE,
                                          result__isnull=False)
            .order_by("-id").first())


__all__ = ["latest_done", "snapshot_done"]
