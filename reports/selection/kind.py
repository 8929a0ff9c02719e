"""The selection kind's registration (reports/kinds.py): the plan is read, not copied into the
parameters; the load takes the snapshot's plan; the mix is checked against the study's data
when a snapshot is created."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reports.kinds import ReportKind
from studies.models import AnalysisPlan, Study

from .compute import selection_compute
from .load import selection_fingerprint, selection_inputs_check, selection_inputs_load
from .params import params_validate
from .results import SELECTION_RESULT_VERSION, SelectionResult


def _selection_plan_defaults(params: dict[str, Any], plan: AnalysisPlan | None) -> dict[str, Any]:
    """Nothing is copied from the plan into the parameters: the selection report reads the
    plan it records (`load_with_plan`), so that a parameter given means a deviation from it."""
    return params


def _selection_load_with_plan(
    study: Study, params: Mapping[str, Any], plan: AnalysisPlan | None
) -> Any:
    return selection_inputs_load(study, params, plan)


def _selection_load(study: Study, params: Mapping[str, Any]) -> Any:
    return _selection_load_with_plan(study, params, None)


def selection_kind() -> ReportKind:
    return ReportKind(
        key="selection",
        result_version=SELECTION_RESULT_VERSION,
        params_validate=params_validate,
        plan_defaults=_selection_plan_defaults,
        load=_selection_load,
        fingerprint=selection_fingerprint,
        compute=selection_compute,
        result_from_json=SelectionResult.from_json,
        load_with_plan=_selection_load_with_plan,
        check=selection_inputs_check,
    )


__all__ = ["selection_kind"]
