"""The agreement kind's registration (reports/kinds.py): parameters filled from the analysis
plan where the caller left them out, the ratings loaded through the evidence read model, the
result computed and read back as the typed `AgreementResult`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from calibration.frames import RatingData
from reports.kinds import ReportKind, SnapshotResult, judge_versions_check

from .compute import compute_report
from .load import agreement_load, input_fingerprint
from .params import params_validate, plan_defaults
from .results import AGREEMENT_RESULT_VERSION, AgreementResult, json_safe


def _agreement_compute(
    data: RatingData, params: Mapping[str, Any], plan_version: int | None, fingerprint: str
) -> SnapshotResult:
    raw = compute_report(data, params)
    raw["plan_version"] = plan_version
    raw["fingerprint"] = fingerprint
    return AgreementResult.from_json(json_safe(raw))


def agreement_kind() -> ReportKind:
    return ReportKind(
        key="agreement",
        result_version=AGREEMENT_RESULT_VERSION,
        params_validate=params_validate,
        plan_defaults=plan_defaults,
        load=agreement_load,
        fingerprint=input_fingerprint,
        compute=_agreement_compute,
        result_from_json=AgreementResult.from_json,
        check=judge_versions_check,
    )


__all__ = ["agreement_kind"]
