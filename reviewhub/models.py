"""Project-level tables: the background-work heartbeat."""

from __future__ import annotations

from django.db import models


class BackgroundHeartbeat(models.Model):
    """The last time a periodic task sent by celery beat ran on a worker.

    One row per source (`beat`): its age tells the pages whether background work (judge runs,
    reports, sweeps) is being done. A row in the database, not a cache key, because the
    embedded default's cache is per process and the worker is another process.
    """

    name = models.CharField(max_length=40, primary_key=True)
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.beat_at:%Y-%m-%d %H:%M:%S}"
