"""Writes of the calibration app: the one writer of `CalibratedScore`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, transaction

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


def calibrated_scores_write(
    *, study_id: int, snapshot_id: int, rows: Iterable[Mapping[str, Any]]
) -> int:
    """Store a calibration snapshot's calibrated scores; returns the number of rows written.

    Atomic and idempotent: the snapshot's existing rows are deleted and the given ones
    inserted in one transaction, so a retried computation never leaves duplicates or a
    half-written snapshot. PostgreSQL streams the rows with COPY (reviewhub/bulkcopy.py).
    The report lifecycle calls this inside the transaction that records the snapshot's
    result (reports/services.py), so rows and result appear together.
    """
    postgres = connection.vendor == "postgresql"
    prepared: list[dict[str, Any]] = []
    for row in rows:
        out: dict[str, Any] = {"study_id": study_id, "snapshot_id": snapshot_id}
        for name in ROW_FIELDS:
            value = row.get(name)
            if name == "strata":
                value = dict(value or {})
                # COPY writes JSON columns verbatim; bulk_create wants the object.
                value = json.dumps(value) if postgres else value
            elif name in ("judge_version_hash", "stratum", "raw_value") and value is None:
                value = ""
            out[name] = value
        prepared.append(out)
    with transaction.atomic():
        CalibratedScore.objects.filter(snapshot_id=snapshot_id).delete()
        bulk_insert(CalibratedScore, prepared)
    return len(prepared)


__all__ = ["ROW_FIELDS", "calibrated_scores_write"]
