"""Writes of the calibration app: the one writer of `CalibratedScore`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from reviewhub.bulkcopy import bulk_insert

from .models import CalibratedScore

# The fields a calibrated score row may carry (attnames); `snapshot_id` and `study_id` are
# set by the writer.
ROW_FIELDS = (
    "output_id", "comparison_id", "candidate_id", "criterion_id", "criterion_key",
    "judge_version_id", "judge_version_hash", "stratum", "strata", "raw_value",
    "raw_confidence", "p_pass", "p_low", "p_high", "decision", "expected_cost", "source",
    "plan_version", "n_labels", "evidence_at",
)
# Text fields stored as "" rather than NULL.
_BLANK_TEXT = frozenset(("judge_version_hash", "stratum", "raw_value"))


def calibrated_scores_write(
    *, study_id: int, snapshot_id: int, rows: Iterable[Mapping[str, Any]]
) -> int:
    """Store a calibration snapshot's calibrated scores; returns the number of rows written.

    Atomic and idempotent: the snapshot's existing rows are deleted and the given ones
    inserted in one transaction, so a retried computation never leaves duplicates or a
    half-written snapshot. PostgreSQL streams the rows with a binary COPY (below); other
    databases get bulk_create (reviewhub/bulkcopy.py). The report lifecycle calls this
    inside the transaction that records the snapshot's result (reports/services.py), so
    rows and result appear together.
    """
    if connection.vendor != "postgresql":
        prepared = [
            {"study_id": study_id, "snapshot_id": snapshot_id,
             **{name: _field_value(name, row.get(name)) for name in ROW_FIELDS}}
            for row in rows
        ]
        with transaction.atomic():
            CalibratedScore.objects.filter(snapshot_id=snapshot_id).delete()
            bulk_insert(CalibratedScore, prepared)
        return len(prepared)
    with transaction.atomic():
        CalibratedScore.objects.filter(snapshot_id=snapshot_id).delete()
        return _copy_binary(study_id, snapshot_id, rows)


def _field_value(name: str, value: Any) -> Any:
    if name == "strata":
        return value if type(value) is dict else dict(value or {})
    if name in _BLANK_TEXT and value is None:
        return ""
    return value


def _copy_type(field: models.Field[Any, Any]) -> str:
    """The PostgreSQL type name psycopg dumps a column's values as ("varchar(64)" ->
    "varchar")."""
    db_type = field.db_type(connection) or "text"
    return re.sub(r"\(.*\)", "", db_type).strip()


def _encoded(data: bytes) -> bytes:
    """The JSON "dumps" of strata encoded beforehand (psycopg's Jsonb wrapper calls it)."""
    return data


def _copy_binary(study_id: int, snapshot_id: int, rows: Iterable[Mapping[str, Any]]) -> int:
    """COPY the rows in PostgreSQL's binary format; returns the number written.

    A million-row snapshot is the case this serves: psycopg's C dumpers write the binary
    values straight from the Python objects (no text formatting or parsing of floats and
    timestamps: about half the time of a text COPY of the same rows), and the strata JSON
    is encoded once per distinct dict (the rows of a cell share theirs) rather than per row.
    Columns the rows do not carry get their model default, as reviewhub/bulkcopy.py does.
    """
    from psycopg.types.json import Jsonb

    by_attname = {f.attname: f for f in CalibratedScore._meta.concrete_fields
                  if not f.primary_key}
    given = ("study_id", "snapshot_id", *ROW_FIELDS)
    now = timezone.now()
    defaults: dict[str, Any] = {}
    for attname, f in by_attname.items():
        if attname in given:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[attname] = now
        else:
            defaults[attname] = f.get_default()
    names = [*given, *defaults]
    columns = ", ".join(f'"{by_attname[a].column}"' for a in names)
    types = [_copy_type(by_attname[a]) for a in names]
    head = (study_id, snapshot_id)
    tail = tuple(defaults.values())
    every = itemgetter(*ROW_FIELDS)
    strata_at = ROW_FIELDS.index("strata")
    blank_at = [ROW_FIELDS.index(n) for n in sorted(_BLANK_TEXT)]
    # Strata JSON by the identity of its dict, holding the dict so that its id cannot be
    # reused meanwhile.
    encoded: dict[int, tuple[Any, Any]] = {}

    sql = f'COPY "{CalibratedScore._meta.db_table}" ({columns}) FROM STDIN (FORMAT BINARY)'
    count = 0
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        copy.set_types(types)
        for row in rows:
            try:
                values = list(every(row))
            except KeyError:  # a row that leaves fields out: those are NULL
                values = [row.get(name) for name in ROW_FIELDS]
            strata = values[strata_at]
            hit = encoded.get(id(strata))
            if hit is None or hit[0] is not strata:
                text = json.dumps(strata if type(strata) is dict else dict(strata or {}))
                hit = encoded[id(strata)] = (strata, Jsonb(text.encode(), _encoded))
            values[strata_at] = hit[1]
            for i in blank_at:
                if values[i] is None:
                    values[i] = ""
            copy.write_row((*head, *values, *tail))
            count += 1
    return count


__all__ = ["ROW_FIELDS", "calibrated_scores_write"]
