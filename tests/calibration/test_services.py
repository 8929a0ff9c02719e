"""The calibrated-score writer (calibration/services.py): a computation's column blocks
(`ScoreRows`), encoded for PostgreSQL's binary COPY with numpy, store exactly the rows that
the row-by-row COPY of the same rows' dicts stores, and the values the dicts hold.

The rows are made up to cover every encoding case: outputs and comparisons, null and set
candidates and judge versions, a rubric block (no criterion), NaN confidences and bands
(NULL), NaT evidence times, text of different lengths (padding), non-ASCII strata, strata
dicts shared between rows and equal dicts that are distinct objects, a plan version and none.
The references carry no database constraint, so the ids need no objects behind them, except
the snapshot: the one reference with a constraint, so each write is for a real snapshot row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from django.db import connection

from calibration.models import CalibratedScore
from calibration.results import ROW_KEYS, ScoreBlock, ScoreRows
from calibration.services import calibrated_scores_write
from snapshots.models import ReportSnapshot
from tests.factories import StudyFactory

pytestmark = pytest.mark.django_db

SKIP = ("id", "snapshot_id", "created_at")


def _blocks(n: int = 300, seed: int = 7) -> ScoreRows:
    rng = np.random.default_rng(seed)
    shared = [{"lang": "de", "länge": "lang"}, {"lang": "en"}, {}]
    strata = np.empty(n, dtype=object)
    for i in range(n):
        k = int(rng.integers(0, 4))
        # k == 3: a dict equal to shared[1] but another object.
        strata[i] = {"lang": "en"} if k == 3 else shared[k]
    stratum = np.array([("" if not d else "|".join(f"{a}={b}" for a, b in d.items()))
                        for d in strata], dtype=object)
    subject = rng.integers(1, 10_000, n) * 2 + (rng.random(n) < 0.3)
    stamps = (np.datetime64("2026-01-01T00:00:00", "us")
              + rng.integers(0, 10**12, n).astype("timedelta64[us]"))
    stamps[rng.random(n) < 0.2] = np.datetime64("NaT")

    def nan_some(values: np.ndarray, share: float) -> np.ndarray:
        out = values.copy()
        out[rng.random(n) < share] = np.nan
        return out

    p = rng.random(n)
    judged = ScoreBlock(
        study_id=11, subject=subject.astype(np.int64),
        candidate=np.where(rng.random(n) < 0.1, -1, rng.integers(1, 5, n)).astype(np.int64),
        criterion_id=42, criterion_key="correct",
        judge_version=rng.choice([3, 4, 5], n).astype(np.int64),
        judge_hashes={3: "a" * 64, 4: "short"},  # 5 has no hash: ""
        stratum=stratum, strata=strata,
        raw_codes=rng.integers(0, 4, n).astype(np.intp),
        raw_uniques=("pass", "fail", "", "é-ünïcode"),
        raw_confidence=nan_some(rng.random(n), 0.4), p_pass=p,
        p_low=nan_some(p * 0.9, 0.3), p_high=nan_some(np.minimum(1.0, p * 1.1), 0.3),
        decision=rng.choice(np.array(["pass", "fail", "escalate", "human"], dtype=object), n),
        expected_cost=rng.random(n) * 10,
        source=rng.choice(np.array(["judge", "human", "adjudicated"], dtype=object), n),
        plan_version=2, n_labels=rng.integers(0, 500, n).astype(np.int64), evidence_at=stamps,
    )
    m = n // 3
    rubric = ScoreBlock(
        study_id=11, subject=(rng.integers(1, 10_000, m) * 2).astype(np.int64),
        candidate=rng.integers(1, 5, m).astype(np.int64), criterion_id=None,
        criterion_key="rubric", judge_version=np.full(m, -1, dtype=np.int64), judge_hashes={},
        stratum=stratum[:m], strata=strata[:m], raw_codes=np.zeros(m, dtype=np.intp),
        raw_uniques=("",), raw_confidence=np.full(m, np.nan), p_pass=rng.random(m),
        p_low=np.full(m, np.nan), p_high=np.full(m, np.nan),
        decision=np.full(m, "pass", dtype=object), expected_cost=np.zeros(m),
        source=np.full(m, "judge", dtype=object), plan_version=None,
        n_labels=np.zeros(m, dtype=np.int64), evidence_at=stamps[:m],
    )
    return ScoreRows((judged, rubric))


def _snapshots(n: int) -> list[int]:
    """Ids of `n` calibration snapshots to write rows for (the key to them is constrained)."""
    study = StudyFactory()
    return [ReportSnapshot.objects.create(study=study, kind="calibration").pk for _ in range(n)]


def _stored(snapshot_id: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        dict(r) for r in CalibratedScore.objects.filter(snapshot_id=snapshot_id)
        .order_by("id").values()
    ]
    for r in rows:
        for key in SKIP:
            r.pop(key)
    return rows


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the binary COPY is PostgreSQL's")
def test_columns_store_what_the_rows_dicts_store() -> None:
    scores = _blocks()
    dicts = list(scores)
    assert len(dicts) == len(scores) == 300 + 100
    one, two = _snapshots(2)
    assert calibrated_scores_write(study_id=11, snapshot_id=one, rows=scores) == len(dicts)
    assert calibrated_scores_write(study_id=11, snapshot_id=two, rows=dicts) == len(dicts)
    by_columns, by_dicts = _stored(one), _stored(two)
    assert by_columns == by_dicts
    # And both are the values the rows hold (NULL for None; "" for a text None).
    for stored, given in zip(by_columns, dicts, strict=True):
        for key in ROW_KEYS:
            value = given[key]
            if key in ("judge_version_hash", "stratum", "raw_value") and value is None:
                value = ""
            assert stored[key] == value, key


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the binary COPY is PostgreSQL's")
def test_columns_are_written_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import calibration.services

    scores = _blocks(n=250, seed=8)
    three, four = _snapshots(2)
    calibrated_scores_write(study_id=11, snapshot_id=three, rows=scores)
    monkeypatch.setattr(calibration.services, "_COPY_CHUNK", 7)
    calibrated_scores_write(study_id=11, snapshot_id=four, rows=scores)
    assert _stored(three) == _stored(four) and len(_stored(four)) == len(scores)


def test_rows_iterate_as_dicts_of_python_values() -> None:
    scores = _blocks(n=30, seed=9)
    row = next(iter(scores))
    assert tuple(row) == ROW_KEYS
    stamps = [r["evidence_at"] for r in scores if r["evidence_at"] is not None]
    assert stamps and all(isinstance(s, datetime) and s.tzinfo == UTC for s in stamps)
    assert any(r["p_low"] is None for r in scores)
    assert all(r["comparison_id"] is None for r in scores if r["output_id"] is not None)
    assert all((r["output_id"] is None) != (r["comparison_id"] is None) for r in scores)
    assert not ScoreRows() and len(ScoreRows()) == 0
