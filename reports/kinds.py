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


def judge_versions_check(study: Study, params: Mapping[str, Any],
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
    from .agreement.kind import agreement_kind

    return agreement_kind()


def _calibration_kind() -> ReportKind:
    from .calibration.kind import calibration_kind

    return calibration_kind()


def _selection_kind() -> ReportKind:
    from .selection.kind import selection_kind

    return selection_kind()


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


__all__ = ["ReportKind", "SnapshotResult", "judge_versions_check", "kind_get", "kind_names"]
