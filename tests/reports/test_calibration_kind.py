"""The calibration report kind through the one snapshot lifecycle (reports/services.py) on
PostgreSQL: the calibrated scores are written once, with the result, in one transaction; a
redelivery or a stale reclaim leaves no duplicate rows; a failure records neither result nor
rows; the plan supplies strata, minimum labels and costs; the CLI and the demo study work."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from calibration.models import CalibratedScore
from calibration.results import CalibrationResult
from reports import kinds
from reports.services import report_build, report_compute, report_snapshot_create
from snapshots.models import ReportSnapshot
from studies.models import AnalysisPlan, Study
from tests.calibration.test_compute import build_study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

COSTS = {"unit": "EUR", "severity": {"1": 1, "2": 2, "3": 5, "4": 8, "5": 20},
         "false_fail": 2, "review": 0.5}
FAST = {"n_resamples": 50, "curve_resamples": 20, "seed": 1}


@pytest.fixture
def built() -> dict[str, Any]:
    data = build_study()
    AnalysisPlan.objects.create(
        study=data["study"], version=1, locked_at=timezone.now(),
        spec={"criteria": {"correct": {"metric": "pass_rate", "threshold": 0.5}},
              "strata": ["lang"], "min_human_labels_per_stratum": 12, "costs": COSTS},
    )
    return data


def _rows(snapshot_id: int) -> int:
    return CalibratedScore.objects.filter(snapshot_id=snapshot_id).count()


def test_snapshot_writes_its_scores_with_the_result(
    built: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    study: Study = built["study"]
    with django_capture_on_commit_callbacks(execute=True):
        snap = report_build(study=study, kind="calibration", params=FAST, created_by=None)
    snap.refresh_from_db()
    assert (snap.kind, snap.status, snap.result_version) == ("calibration", "done", 1)
    result = CalibrationResult.from_json(snap.result)
    # The plan's strata, minimum labels, version and costs are in force.
    assert snap.params["strata"] == ["lang"] and snap.params["min_labels"] == 12
    assert result.plan_version == 1 and result.costs["is_default"] is False
    assert result.costs["unit"] == "EUR"
    whole = next(c for c in result.cells if c.stratum == "")
    assert whole.false_pass_cost is not None
    assert whole.false_pass_cost["expected"]["value"] == pytest.approx(5.0)
    assert result.fingerprint == snap.input_fingerprint and len(snap.input_fingerprint) == 64
    # One row per judged output plus one rubric row each, all of this snapshot.
    n_outputs = len(built["outputs"])
    assert result.n_scores == _rows(snap.pk) == 2 * n_outputs
    assert set(CalibratedScore.objects.filter(snapshot_id=snap.pk)
               .values_list("criterion_key", flat=True)) == {"correct", "rubric"}
    row = CalibratedScore.objects.filter(snapshot_id=snap.pk, source="judge").first()
    assert row is not None and row.judge_version_hash == "h" * 16 and row.plan_version == 1
    assert row.strata["lang"] in ("en", "de", "fr", "xx") and row.evidence_at is not None

    # A redelivered message finds the snapshot done: nothing is computed or written again.
    assert report_compute(report_id=snap.pk).status == "done"
    assert _rows(snap.pk) == result.n_scores

    # A stale "running" snapshot is reclaimed and recomputed: its rows are replaced, never
    # duplicated.
    ReportSnapshot.objects.filter(pk=snap.pk).update(
        status="running", started_at=timezone.now() - timedelta(days=1)
    )
    assert report_compute(report_id=snap.pk).status == "done"
    assert _rows(snap.pk) == result.n_scores

    # A second snapshot keeps its own rows; the first's are untouched.
    second = report_snapshot_create(study=study, kind="calibration", params=FAST,
                                    created_by=None)
    assert report_compute(report_id=second.pk).status == "done"
    assert _rows(second.pk) == _rows(snap.pk) == result.n_scores


def test_the_writer_is_idempotent(built: dict[str, Any]) -> None:
    from calibration.services import calibrated_scores_write

    snap = report_snapshot_create(study=built["study"], kind="calibration", params=FAST,
                                  created_by=None)
    assert report_compute(report_id=snap.pk).status == "done"
    rows = list(CalibratedScore.objects.filter(snapshot_id=snap.pk).values())
    n = len(rows)
    for r in rows:
        for key in ("id", "study_id", "snapshot_id", "created_at"):
            r.pop(key)
    assert calibrated_scores_write(study_id=built["study"].pk, snapshot_id=snap.pk,
                                   rows=rows) == n
    assert _rows(snap.pk) == n


def test_a_failed_row_write_records_nothing(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import calibration.services

    def broken(**kwargs: Any) -> int:
        calibration.services.CalibratedScore.objects.create(
            study_id=kwargs["study_id"], snapshot_id=kwargs["snapshot_id"],
            output=built["outputs"][0], criterion_key="x", p_pass=0.5, decision="pass",
            expected_cost=0.0, source="judge",
        )
        raise RuntimeError("disk full")

    monkeypatch.setattr(calibration.services, "calibrated_scores_write", broken)
    snap = report_snapshot_create(study=built["study"], kind="calibration", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "failed" and "disk full" in done.error
    # The result update and the row written before the error were rolled back together.
    assert done.result is None and done.result_version is None and _rows(snap.pk) == 0


def test_a_failed_computation_records_nothing(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import calibration.compute

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no costs today")

    monkeypatch.setattr(calibration.compute, "_plan_sections", broken)
    snap = report_snapshot_create(study=built["study"], kind="calibration", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "failed" and "no costs today" in done.error
    assert done.result is None and _rows(snap.pk) == 0


def test_bad_params_are_refused_naming_the_field(built: dict[str, Any]) -> None:
    from reviewhub.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as err:
        report_snapshot_create(study=built["study"], kind="calibration",
                               params={"folds": 1}, created_by=None)
    assert err.value.details["errors"][0]["path"] == "params.folds"
    assert not ReportSnapshot.objects.filter(kind="calibration").exists()


def test_cli_computes_a_calibration_snapshot(built: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "calibration.json"
    call_command("report", "calibration", "--study", built["study"].slug,
                 "--params", json.dumps(FAST), "--out", str(out))
    body = json.loads(out.read_text())
    assert body["status"] == "done" and body["result"]["kind"] == "calibration"
    assert _rows(body["id"]) == body["result"]["n_scores"] > 0


def test_the_agreement_kind_has_no_row_hook() -> None:
    assert kinds.kind_get("agreement").record is None
    assert kinds.kind_get("agreement").load_with_plan is None
    assert kinds.kind_get("calibration").record is not None
    assert "calibration" in kinds.kind_names()


def test_the_demo_study_computes_a_calibration_snapshot() -> None:
    from demo import demo_data

    call_command("demo_seed", verbosity=0)
    study = Study.objects.get(slug=demo_data.DEMO_SLUG)
    snap = report_snapshot_create(study=study, kind="calibration", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done", done.error
    result = CalibrationResult.from_json(done.result)
    assert result.n_scores == _rows(snap.pk) > 0
    assert {c.criterion for c in result.cells} == {"correct", "helpful"}
    # The plan gives no costs: the documented default is used, and the result says so.
    assert result.costs["is_default"] is True
    assert any("default" in w for w in result.warnings)
