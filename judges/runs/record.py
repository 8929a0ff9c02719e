"""Recording call outcomes on claimed jobs while their lease token still matches."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from studies.services.recordset import finite_or_text, rows_json, storable

from ..models import JudgeJob


@dataclass
class JobOutcome:
    """The result of one claimed job, ready to record (built by the executor, no ORM)."""

    job_id: int
    lease_token: str
    status: str  # done | unparseable | failed | queued (transient, retry later)
    error_kind: str = ""
    error: str = ""
    raw_response: str = ""
    parsed_value: str = ""
    value_num: float | None = None
    probability: float | None = None
    rationale: str = ""
    http_status: int | None = None
    provider_request_id: str = ""
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_ms: float | None = None
    cost: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    available_at: datetime | None = None


_RECORD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("status", "varchar"), ("error_kind", "varchar"), ("error", "text"),
    ("raw_response", "text"), ("parsed_value", "varchar"), ("value_num", "double precision"),
    ("probability", "double precision"), ("rationale", "text"), ("http_status", "integer"),
    ("provider_request_id", "varchar"), ("tokens_in", "integer"), ("tokens_out", "integer"),
    ("latency_ms", "double precision"), ("cost", "double precision"), ("details", "jsonb"),
    ("available_at", "timestamptz"), ("finished_at", "timestamptz"),
)


def _outcome_row(o: JobOutcome, now: datetime | str) -> tuple[Any, ...]:
    """The values of `_RECORD_COLUMNS`, in that order."""
    return (
        o.status, o.error_kind, o.error, o.raw_response, o.parsed_value[:200], o.value_num,
        o.probability, o.rationale, o.http_status, o.provider_request_id[:200], o.tokens_in,
        o.tokens_out, o.latency_ms, o.cost, o.details, o.available_at,
        None if o.status == JudgeJob.Status.QUEUED else now,
    )


_RECORD_FLOATS = tuple(name for name, pgtype in _RECORD_COLUMNS if pgtype == "double precision")


def record_rows_json(outcomes: Sequence[JobOutcome], now: datetime) -> str:
    """The `json_to_recordset` parameter of `record_update_sql`."""
    names = [name for name, _ in _RECORD_COLUMNS]
    # finished_at as JSON once per chunk, not through the encoder's fallback once per row.
    now_text = now.isoformat()
    rows = (
        finite_or_text({"id": o.job_id, "token": o.lease_token,
                         **dict(zip(names, _outcome_row(o, now_text), strict=True))},
                        _RECORD_FLOATS)
        for o in outcomes
    )
    return rows_json(rows)


@functools.cache
def record_update_sql(param: str) -> str:
    """UPDATE … FROM json_to_recordset(<param>) … RETURNING j.id: records a chunk's outcomes,
    each conditional on its lease (the statement text is the same for every chunk)."""
    names = [name for name, _ in _RECORD_COLUMNS]
    # The recordset declares `details` as json; the column is jsonb.
    decl = ", ".join(f"{name} {'json' if name == 'details' else pgtype}"
                     for name, pgtype in _RECORD_COLUMNS)
    sets = ", ".join(f"{name} = v.{name}" + ("::jsonb" if name == "details" else "")
                     for name in names)
    return (
        f"UPDATE {JudgeJob._meta.db_table} AS j SET {sets}, lease_token = '', "
        "lease_expires_at = NULL "
        f"FROM json_to_recordset({param}::json) AS v(id bigint, token varchar, {decl}) "
        "WHERE j.id = v.id AND j.lease_token = v.token AND j.status = 'running' RETURNING j.id"
    )


def _record_postgres(outcomes: Sequence[JobOutcome], now: datetime) -> list[int]:
    """One UPDATE … FROM json_to_recordset(…) for the whole chunk, conditional on each lease."""
    with connection.cursor() as cursor:
        cursor.execute(record_update_sql("%s"), [record_rows_json(outcomes, now)])
        return [row[0] for row in cursor.fetchall()]


def jobs_record(*, outcomes: Sequence[JobOutcome]) -> list[int]:
    """Record call outcomes; return the ids actually recorded.

    Each row is updated only while it is still `running` under the same lease token, so a late
    or duplicate delivery (the lease expired and another worker re-claimed the job, or the same
    outcome is recorded twice) changes nothing: every job ends exactly once.
    """
    if not outcomes:
        return []
    now = timezone.now()
    if connection.vendor == "postgresql":
        # A single statement is atomic on its own; BEGIN/COMMIT would only add round trips.
        return _record_postgres(outcomes, now)
    recorded = []
    names = [name for name, _ in _RECORD_COLUMNS]
    with transaction.atomic():
        for o in outcomes:
            n = JudgeJob.objects.filter(
                id=o.job_id, lease_token=o.lease_token, status=JudgeJob.Status.RUNNING
            ).update(lease_token="", lease_expires_at=None,
                     **dict(zip(names, storable(_outcome_row(o, now)), strict=True)))
            if n:
                recorded.append(o.job_id)
    return recorded
