"""Spotting a running run that nothing is working on and nothing is due to wake (run page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from .sweep import run_wake

# How long past its due time (the last claim, or the next retry) a run may sit with queued
# jobs and no claim before its page calls it stalled. Longer than the waits the chain of batch
# tasks schedules itself for ready work (a second at most) and than a worker's start-up; at
# least two sweeps, so that a sweeper that runs has had its chance.
STALL_GRACE_MIN_S = 60.0


def run_stall_grace_s() -> float:
    return max(STALL_GRACE_MIN_S, 2 * float(settings.REVIEWHUB_JUDGE_SWEEP_INTERVAL_S))


@dataclass(frozen=True)
class RunStall:
    """A running run that nothing is working on and nothing is due to wake."""

    queued: int
    lapsed: int
    idle_since: datetime  # the later of the last claim and the earliest retry time


def run_stall(*, run_id: int, now: datetime | None = None) -> RunStall | None:
    """The run's stall, if it has one: queued jobs, no job under a live lease, and neither a
    claim nor a retry time within `run_stall_grace_s()` of now. Jobs still marked running
    with an expired lease count as lost (their worker died), not as running."""
    now = now or timezone.now()
    wake = run_wake(run_id=run_id, now=now)
    if wake is None or wake.running:
        return None
    marks = [t for t in (wake.last_activity_at, wake.claimable_from) if t is not None]
    if not marks:
        return None
    idle_since = max(marks)
    if (now - idle_since).total_seconds() <= run_stall_grace_s():
        return None
    return RunStall(queued=wake.queued, lapsed=wake.lapsed, idle_since=idle_since)
