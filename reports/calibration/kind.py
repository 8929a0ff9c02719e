"""The calibration kind's registration (reports/kinds.py): parameters taken from the plan,
the load of its inputs, and the hook that writes the calibrated scores in the transaction that
records the snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from calibration import services as calibration_services
from calibration.compute import (
    calibration_compute,
    calibration_fingerprint,
    calibration_inputs_load,
)
from calibration.params import params_validate
from calibration.results import CALIBRATION_RESULT_VERSION, CalibrationResult
from reports.kinds import ReportKind, SnapshotResult, judge_versions_check
from studies.models import AnalysisPlan, Study
from studies.spec import plan_strata_defaults


def _calibration_plan_defaults(
    params: dict[str, Any], plan: AnalysisPlan | None
) -> dict[str, Any]:
    """Strata, the minimum labels per cell and the confidence level come from the plan when
    the caller leaves them out."""
    if plan is None:
        return params
    out = plan_strata_defaults(params, plan.spec, min_labels_key="min_labels")
    spec = plan.spec or {}
    level = spec.get("confidence_level")
    if "level" not in out and isinstance(level, (int, float)) and 0.5 <= level < 1:
        out["level"] = float(level)
    return out


def _calibration_load(study: Study, params: Mapping[str, Any]) -> Any:
    return calibration_inputs_load(study, params, None)


def _calibration_load_with_plan(
    study: Study, params: Mapping[str, Any], plan: AnalysisPlan | None
) -> Any:
    return calibration_inputs_load(study, params, plan)


def _calibration_record(study_id: int, snapshot_id: int, result: SnapshotResult) -> None:
    if not isinstance(result, CalibrationResult):
        raise TypeError(f"a calibration snapshot records a CalibrationResult, not {result!r}")
    calibration_services.calibrated_scores_write(
        study_id=study_id, snapshot_id=snapshot_id, rows=result.scores)


def calibration_kind() -> ReportKind:
    return ReportKind(
        key="calibration",
        result_version=CALIBRATION_RESULT_VERSION,
        params_validate=params_validate,
        plan_defaults=_calibration_plan_defaults,
        load=_calibration_load,
        fingerprint=calibration_fingerprint,
        compute=calibration_compute,
        result_from_json=CalibrationResult.from_json,
        load_with_plan=_calibration_load_with_plan,
        record=_calibration_record,
        check=judge_versions_check,
    )


__all__ = ["calibration_kind"]
