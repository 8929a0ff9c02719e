"""Reads of calibrated scores: which snapshot a request means, and its rows with the filters of
the calibrated-score API (docs/calibration.md, "API").

Rows are read as plain tuples (`values_list`), never as model instances: the export streams a
million of them, and the list page serialises 50 to 500 of them per request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db.models import Max, QuerySet
from django.utils.dateparse import parse_date, parse_datetime

from reviewhub.errors import NotFound, ValidationFailed
from studies.models import Study

from .models import CalibratedScore

# Identifiers are BigAutoField: anything outside a signed 64-bit integer names no row (and
# PostgreSQL would refuse the literal rather than answer "no rows").
MAX_ID = 2**63 - 1
FILTERS = ("candidate", "criterion", "stratum", "judge_version", "decision", "source",
           "changed_since")
DECISIONS = tuple(CalibratedScore.Decision.values)
SOURCES = tuple(CalibratedScore.Source.values)

# The columns of one row, in the order `score_row` reads them.
COLUMNS = (
    "id",
    "output_id",
    "comparison_id",
    "output__item__external_id",
    "comparison__item__external_id",
    "candidate__name",
    "strata",
    "stratum",
    "criterion_key",
    "raw_value",
    "raw_confidence",
    "p_pass",
    "p_low",
    "p_high",
    "decision",
    "expected_cost",
    "source",
    "judge_version_id",
    "judge_version_hash",
    "snapshot_id",
    "plan_version",
    "n_labels",
    "evidence_at",
)


def _bad(param: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"Bad value for {param}: {message}.",
                            details={"errors": [{"path": param, "message": message}]})


def parse_id(raw: Any, param: str) -> int:
    """A positive 64-bit id from a query parameter or body field, or a 400 naming `param`."""
    if isinstance(raw, bool):
        raise _bad(param, "must be a positive integer")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        if not text.isascii() or not text.isdigit():
            raise _bad(param, "must be a positive integer")
        value = int(text)
    if not 1 <= value <= MAX_ID:
        raise _bad(param, "must be a positive integer")
    return value


def parse_since(raw: str, param: str = "changed_since") -> dt.datetime:
    """An ISO 8601 date-time (or date: its midnight UTC); a naive time is taken as UTC."""
    text = raw.strip()
    try:
        value = parse_datetime(text)
        if value is None:
            day = parse_date(text)
            if day is None:
                raise ValueError(text)
            value = dt.datetime(day.year, day.month, day.day)
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        # Normalised here so that an offset near year 1 or 9999 fails as a 400, not later.
        return value.astimezone(dt.UTC)
    except (ValueError, OverflowError) as exc:
        raise _bad(param, "must be an ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z") from exc


def latest_snapshot_id(*, study: Study) -> int | None:
    """The study's latest calibration snapshot: the greatest snapshot id among its rows."""
    value = CalibratedScore.objects.filter(study=study).aggregate(m=Max("snapshot_id"))["m"]
    return int(value) if value is not None else None


def snapshot_resolve(*, study: Study, snapshot_id: int | None) -> int | None:
    """The snapshot a request means: the given one (404 unless the study has rows of it) or
    the latest (None when the study has no calibrated scores yet)."""
    if snapshot_id is None:
        return latest_snapshot_id(study=study)
    if not CalibratedScore.objects.filter(study=study, snapshot_id=snapshot_id).exists():
        raise NotFound(f"Calibration snapshot {snapshot_id} not found in this study.")
    return snapshot_id


def _values(filters: Mapping[str, Any], name: str) -> list[str]:
    raw = filters.get(name)
    if raw is None:
        return []
    items = [raw] if isinstance(raw, str) else list(raw)
    return [str(v) for v in items if str(v) != ""]


def calibrated_scores_query(
    *,
    study: Study,
    snapshot_id: int | None = None,
    filters: Mapping[str, Sequence[str] | str],
) -> QuerySet[CalibratedScore]:
    """The rows of one snapshot (the latest unless `snapshot_id`), filtered, in id order.

    Filters (each may repeat: any of the values): `candidate` (name), `criterion` (key, or
    "rubric" for the rubric's aggregate), `stratum` (the calibration cell label, "" for the
    whole study is not a filter), `judge_version` (id), `decision`, `source`; and
    `changed_since` (ISO date-time: rows whose evidence is at least that recent). A value that
    cannot mean anything is a 400 naming the parameter; a snapshot the study does not have is
    a 404. The queryset selects `COLUMNS` as tuples.
    """
    resolved = snapshot_resolve(study=study, snapshot_id=snapshot_id)
    qs: QuerySet[CalibratedScore]
    if resolved is None:
        return CalibratedScore.objects.none()
    qs = CalibratedScore.objects.filter(study=study, snapshot_id=resolved)
    if names := _values(filters, "candidate"):
        qs = qs.filter(candidate__name__in=names)
    if keys := _values(filters, "criterion"):
        qs = qs.filter(criterion_key__in=keys)
    if labels := _values(filters, "stratum"):
        qs = qs.filter(stratum__in=labels)
    if judges := _values(filters, "judge_version"):
        qs = qs.filter(judge_version_id__in=[parse_id(j, "judge_version") for j in judges])
    if decisions := _values(filters, "decision"):
        unknown = [d for d in decisions if d not in DECISIONS]
        if unknown:
            raise _bad("decision", f"must be one of {', '.join(DECISIONS)}")
        qs = qs.filter(decision__in=decisions)
    if sources := _values(filters, "source"):
        if any(s not in SOURCES for s in sources):
            raise _bad("source", f"must be one of {', '.join(SOURCES)}")
        qs = qs.filter(source__in=sources)
    if since := _values(filters, "changed_since"):
        qs = qs.filter(evidence_at__gte=parse_since(since[-1]))
    return qs.order_by("id")


def score_row(values: Sequence[Any]) -> dict[str, Any]:
    """One API row (JSON-ready) from a tuple of `COLUMNS`."""
    (pk, output_id, comparison_id, out_ext, cmp_ext, candidate, strata, stratum, criterion,
     raw_value, raw_confidence, p_pass, p_low, p_high, decision, expected_cost, source,
     judge_version, judge_hash, snapshot_id, plan_version, n_labels, evidence_at) = values
    return {
        "id": pk,
        "output_id": output_id,
        "comparison_id": comparison_id,
        "item_external_id": out_ext if out_ext is not None else cmp_ext,
        "candidate": candidate,
        "strata": strata,
        "stratum": stratum,
        "criterion": criterion,
        "raw_value": raw_value,
        "raw_confidence": raw_confidence,
        "p_pass": p_pass,
        "p_low": p_low,
        "p_high": p_high,
        "decision": decision,
        "expected_cost": expected_cost,
        "source": source,
        "evidence_at": evidence_at.isoformat() if evidence_at is not None else None,
        "provenance": {
            "judge_version": judge_version,
            "judge_version_hash": judge_hash,
            "snapshot_id": snapshot_id,
            "plan_version": plan_version,
            "n_labels": n_labels,
        },
    }


def calibrated_scores_chunks(
    qs: QuerySet[CalibratedScore], *, chunk: int = 5000, columns: Sequence[str] = COLUMNS
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of `qs` as lists of `columns` tuples (the first must be "id"), `chunk` at a
    time, by keyset on id.

    Each chunk is its own short query (`id > last ORDER BY id LIMIT chunk`), so memory stays
    flat and no cursor or transaction is held open while a slow client reads the stream.
    """
    last = 0
    while True:
        rows = list(qs.filter(id__gt=last).order_by("id").values_list(*columns)[:chunk])
        if not rows:
            return
        yield rows
        if len(rows) < chunk:
            return
        last = rows[-1][0]


__all__ = [
    "COLUMNS",
    "DECISIONS",
    "FILTERS",
    "SOURCES",
    "calibrated_scores_chunks",
    "calibrated_scores_query",
    "latest_snapshot_id",
    "parse_id",
    "parse_since",
    "score_row",
    "snapshot_resolve",
]
