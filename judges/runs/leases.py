"""The lease queue every provider-calling job table shares (judge jobs, generation jobs).

A job table takes part by having the lease fields of `JudgeJob`: `run` (FK), `status`
("queued" | "running" | a final status, "failed" among them), `attempts`, `lease_token`,
`lease_expires_at`, `available_at`, `error_kind`, `error`, `finished_at`. The rules are the
judge queue's (see `judges/runs/__init__.py`): a claim leases a job for `lease_s` and counts
an attempt; a job is claimable when queued and available, or running under a lapsed lease
with attempts left (its worker is presumed dead); a lapsed lease on the last attempt fails
the job with `error_kind="transient"`-like `exhausted_kind`; outcomes are recorded only while
the lease token still matches, so a late or duplicate result changes nothing.

The judge claim has a one-statement PostgreSQL fast path of its own (`claim._CLAIM_SQL`); its
ORM path and the sweeper use these functions, as does every other queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import F, Q, QuerySet


def exhausted_lease_error(max_attempts: int) -> str:
    return f"lease expired on each of {max_attempts} attempts (worker lost)"


def claimable(model: type[models.Model], *, now: datetime, max_attempts: int,
              **scope: Any) -> QuerySet[Any]:
    """Jobs of `scope` (e.g. run_id=…) that a worker may claim now."""
    return model._default_manager.filter(**scope).filter(
        Q(status="queued", available_at__isnull=True)
        | Q(status="queued", available_at__lte=now)
        | Q(status="running", lease_expires_at__lt=now, attempts__lt=max_attempts)
    )


def fail_exhausted_leases(qs: QuerySet[Any], now: datetime, max_attempts: int, *,
                          exhausted_kind: str = "transient") -> int:
    """Fail the jobs of `qs` whose lease lapsed on their last attempt; return how many."""
    return qs.filter(
        status="running", lease_expires_at__lt=now, attempts__gte=max_attempts
    ).update(
        status="failed", error_kind=exhausted_kind, error=exhausted_lease_error(max_attempts),
        lease_token="", lease_expires_at=None, finished_at=now,
    )


def lease_take(model: type[models.Model], *, ids: list[int], token: str, now: datetime,
               lease_s: float) -> int:
    """Lease the jobs `ids` (picked under FOR UPDATE by the caller) to `token`; one attempt."""
    return model._default_manager.filter(id__in=ids).update(
        status="running", lease_token=token, lease_expires_at=now + timedelta(seconds=lease_s),
        attempts=F("attempts") + 1, available_at=None,
    )


def lease_renew(model: type[models.Model], *, token: str, now: datetime, lease_s: float,
                **scope: Any) -> int:
    """Extend the leases `token` holds (a drain still working on them)."""
    return model._default_manager.filter(status="running", lease_token=token, **scope).update(
        lease_expires_at=now + timedelta(seconds=lease_s))


def lapsed_requeue(qs: QuerySet[Any], now: datetime, max_attempts: int, *,
                   exhausted_kind: str = "transient") -> tuple[int, int]:
    """(failed, re-queued): the sweeper's pass over jobs of `qs` whose lease lapsed. The token
    is cleared, so the lost worker's late result is discarded."""
    expired = qs.filter(status="running", lease_expires_at__lt=now)
    failed = fail_exhausted_leases(expired, now, max_attempts, exhausted_kind=exhausted_kind)
    requeued = expired.filter(attempts__lt=max_attempts).update(
        status="queued", lease_token="", lease_expires_at=None,
        error="lease expired (worker lost?); re-queued",
    )
    return failed, requeued


def record_if_leased(model: type[models.Model], *, job_id: int, token: str,
                     values: Mapping[str, Any]) -> bool:
    """Record an outcome only while the job is running under `token`; True if recorded."""
    return bool(model._default_manager.filter(
        id=job_id, lease_token=token, status="running"
    ).update(lease_token="", lease_expires_at=None, **values))
