"""The background-work heartbeat: stamped by a beat task on the worker, read by the pages.

Celery beat sends `reviewhub.heartbeat` every REVIEWHUB_HEARTBEAT_INTERVAL_S; a worker running
it stamps the `beat` row. A stamp older than REVIEWHUB_HEARTBEAT_STALE_S means that the worker,
its beat or the broker is not working, and lead pages say so (templates/base.html). No row at
all (a fresh database whose worker has not run its first beat yet) says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from reviewhub.models import BackgroundHeartbeat

SOURCE = "beat"


@dataclass(frozen=True)
class BackgroundStatus:
    last_beat_at: datetime | None
    stale: bool


def heartbeat_stamp(*, name: str = SOURCE, at: datetime | None = None) -> None:
    """Record that background work ran at `at` (now by default)."""
    BackgroundHeartbeat.objects.update_or_create(
        name=name, defaults={"beat_at": at or timezone.now()}
    )


def background_status(*, now: datetime | None = None) -> BackgroundStatus:
    """Whether the heartbeat is stale: older than REVIEWHUB_HEARTBEAT_STALE_S."""
    last = (BackgroundHeartbeat.objects.filter(name=SOURCE)
            .values_list("beat_at", flat=True).first())
    if last is None:
        return BackgroundStatus(last_beat_at=None, stale=False)
    age = (now or timezone.now()) - last
    return BackgroundStatus(
        last_beat_at=last,
        stale=age > timedelta(seconds=settings.REVIEWHUB_HEARTBEAT_STALE_S),
    )
