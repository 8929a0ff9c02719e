"""The registry of report kinds: what differs between kinds of report snapshot.

Every kind shares one lifecycle (reports/services.py: validate, record the plan, claim,
fingerprint, compute with no transaction open, record conditionally, retry) and one Celery
task; a kind only says how to validate its parameters, load its inputs, fingerprint them,
compute a typed result, and read a stored result back: agreement, calibration and
selection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reviewhub.errors import ValidationFailed
from studies.models import AnalysisPlan, Study


class SnapshotResult(Protocol):
    """What every kind's typed result offers the lifecycle."""

    @property
    def version(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ReportKind:
    """One kind of report snapshot.

    ``compute`` receives the loaded inputs, the validated parameters, the plan version and the
    inputs' fingerprint, and returns the typed result; ``result_from_json`` reads a stored
    result of ``result_version`` back into the same type.

    Optional hooks: ``load_with_plan`` replaces ``load`` for kinds whose inputs include the
    snapshot's analysis plan (calibration reads its costs and policy); ``record(study_id,
    snapshot_id, result)`` writes the kind's own rows (calibration's calibrated scores) in
    the transaction that records the result, and is called only when that conditional update
    matched the snapshot, so rows and result are written together or not at all.
    ``check(study, params, plan)`` validates the parameters against the study's data when a
    snapshot is created (selection: the mix against the dimension's labels), so that a bad
    request is refused with a 400 naming the field rather than stored as a failed snapshot.
    """

    key: str
    result_version: int
    params_validate: Callable[[Mapping[str, Any] | None], dict[str, Any]]
    plan_defaults: Callable[[dict[str, Any], AnalysisPlan | None], dict[str, Any]]
    load: Callable[[Study, Mapping[str, Any]], Any]
    fingerprint: Callable[[Any], str]
    compute: Callable[[Any, Mapping[str, Any], int | None, str], SnapshotResult]
    result_from_json: Callable[[Mapping[str, Any]], SnapshotResult]
    load_with_plan: Callable[[Study, Mapping[str, Any], AnalysisPlan | None], Any] | None = None
    record: Callable[[int, int, SnapshotResult], None] | None = None
    check: Callable[[Study, Mapping[str, Any], AnalysisPlan | None], None] | None = None


def _agreement_plan_defaults(params: dict[str, Any], plan: AnalysisPlan | None) -> dict[str, Any]:
    """Parameters the caller left out are taken from the analysis plan where it says them."""
    if plan is None:
        return params
    spec = plan.spec or {}
    out = dict(params)
    if "strata" not in out and isinstance(spec.get("strata"), list) and spec["strata"]:
        out["strata"] = [str(s) for s in spec["strata"]]
    min_labels = spec.get("min_human_labels_per_stratum")
    if "min_items" not in out and isinstance(min_labels, int) and min_labels >= 2:
        out["min_items"] = min_labels
    return out


def _agreement_load(study: Study, params: Mapping[str, Any]) -> Any:
    from calibration.frames import rating_data_load, stored_labels_load

    data = rating_data_load(
        study=study,
        criterion_keys=params.get("criteria"),
        judge_version_ids=params.get("judges"),
        candidate_names=params.get("candidates"),
        # The report reads only the six agreement columns; the evidence ones would double
        # the load of a million-rating study.
        columns="agreement",
    )
    # The gold labels and adjudications the one human-label rule puts first (two queries).
    data.stored_labels = stored_labels_load(list(data.criteria))
    return data


def _agreement_compute(
    data: Any, params: Mapping[str, Any], plan_version: int | None, fingerprint: str
) -> SnapshotResult:
    from .agreement import compute_report
    from .results import AgreementResult, json_safe

    raw = compute_report(data, params)
    raw["plan_version"] = plan_version
    raw["fingerprint"] = fingerprint
    return AgreementResult.from_json(json_safe(raw))


def _judge_versions_check(study: Study, params: Mapping[str, Any],
                          plan: AnalysisPlan | None) -> None:
    """Every judge version id in `judges` belongs to this study (a 400 naming each id that
    does not: another study's, or none at all), as the selection report checks its judge;
    otherwise the report would silently leave the id out."""
    from judges.models import JudgeVersion
    from reviewhub.errors import Problems

    wanted = params.get("judges")
    if not wanted:
        return
    known = set(JudgeVersion.objects.filter(pk__in=wanted, judge__study=study)
                .values_list("pk", flat=True))
    problems = Problems()
    for index, pk in enumerate(wanted):
        if pk not in known:
            problems.add(f"params.judges[{index}]",
                         f"{pk} is not a judge version of this study")
    problems.raise_if_any("The report parameters")


def _agreement_kind() -> ReportKind:
    from .agreement import input_fingerprint, params_validate
    from .results import AGREEMENT_RESULT_VERSION, AgreementResult

    return ReportKind(
        key="agreement",
        result_version=AGREEMENT_RESULT_VERSION,
        params_validate=params_validate,
        plan_defaults=_agreement_plan_defaults,
        load=_agreement_load,
        fingerprint=input_fingerprint,
        compute=_agreement_compute,
        result_from_json=AgreementResult.from_json,
        check=_judge_versions_check,
    )


def _calibration_plan_defaults(
    params: dict[str, Any], plan: AnalysisPlan | None
) -> dict[str, Any]:
    """Strata, the minimum labels per cell and the confidence level come from the plan when
    the caller leaves them out."""
    if plan is None:
        return params
    spec = plan.spec or {}
    out = dict(params)
    if "strata" not in out and isinstance(spec.get("strata"), list) and spec["strata"]:
        out["strata"] = [str(s) for s in spec["strata"]]
    min_labels = spec.get("min_human_labels_per_stratum")
    if (
        "min_labels" not in out
        and isinstance(min_labels, int)
        and not isinstance(min_labels, bool)
        and min_labels >= 2
    ):
        out["min_labels"] = min_labels
    level = spec.get("confidence_level")
    if "level" not in out and isinstance(level, (int, float)) and 0.5 <= level < 1:
        out["level"] = float(level)
    return out


def _calibration_load(study: Study, params: Mapping[str, Any]) -> Any:
    from calibration.compute import calibration_inputs_load

    return calibration_inputs_load(study, params, None)


def _calibration_load_with_plan(
    study: Study, params: Mapping[str, Any], plan: AnalysisPlan | None
) -> Any:
    from calibration.compute import calibration_inputs_load

    return calibration_inputs_load(study, params, plan)


def _calibration_record(study_id: int, snapshot_id: int, result: SnapshotResult) -> None:
    from calibration.results import CalibrationResult
    from calibration.services import calibrated_scores_write

    if not isinstance(result, CalibrationResult):
        raise TypeError(f"a calibration snapshot records a CalibrationResult, not {result!r}")
    calibrated_scores_write(study_id=study_id, snapshot_id=snapshot_id, rows=result.scores)


def _calibration_kind() -> ReportKind:
    from calibration.compute import calibration_compute, calibration_fingerprint
    from calibration.params import params_validate
    from calibration.results import CALIBRATION_RESULT_VERSION, CalibrationResult

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
        check=_judge_versions_check,
    )


def _selection_plan_defaults(params: dict[str, Any], plan: AnalysisPlan | None) -> dict[str, Any]:
    """Nothing is copied from the plan into the parameters: the selection report reads the
    plan it records (`load_with_plan`), so that a parameter given means a deviation from it."""
    return params


def _selection_load_with_plan(
    study: Study, params: Mapping[str, Any], plan: AnalysisPlan | None
) -> Any:
    from .selection.load import selection_inputs_load

    return selection_inputs_load(study, params, plan)


def _selection_load(study: Study, params: Mapping[str, Any]) -> Any:
    return _selection_load_with_plan(study, params, None)


def _selection_kind() -> ReportKind:
    from .selection.compute import selection_compute
    from .selection.load import selection_fingerprint, selection_inputs_check
    from .selection.params import params_validate
    from .selection.results import SELECTION_RESULT_VERSION, SelectionResult

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


_FACTORIES: dict[str, Callable[[], ReportKind]] = {
    "agreement": _agreement_kind,
    "calibration": _calibration_kind,
    "selection": _selection_kind,
}
_CACHE: dict[str, ReportKind] = {}


def kind_names() -> list[str]:
    """The registered kinds, in registration order."""
    return list(_FACTORIES)


def kind_get(key: str) -> ReportKind:
    """The registered kind, or a 400 naming `kind`."""
    factory = _FACTORIES.get(key)
    if factory is None:
        raise ValidationFailed(
            f"Unknown report kind {key!r}; known kinds: {', '.join(_FACTORIES)}.",
            details={"errors": [{"path": "kind", "message": "unknown report kind"}]},
        )
    if key not in _CACHE:
        _CACHE[key] = factory()
    return _CACHE[key]


__all__ = ["ReportKind", "SnapshotResult", "kind_get", "kind_names"]
