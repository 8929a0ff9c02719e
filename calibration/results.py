"""The typed, versioned result of a calibration snapshot (``ReportSnapshot.result`` of kind
"calibration") and its JSON form.

Version 1 types the top level and every cell's identity, counts and flags; the nested figures
computed by `evalstats` (diagnostics, false-pass cost, thresholds, policy costs, trust
thresholds, the cascade) are kept as the objects their own ``to_json`` writes. `from_json`
checks every typed field and refuses an unknown ``version``, so a reader never silently
misreads a result written by another version of the code. docs/calibration.md describes the
figures.

The per-output calibrated scores are not part of the JSON: they go to
`calibration.models.CalibratedScore` in the same transaction as the result (``scores`` holds
them in memory between the computation and that write, as columns: `ScoreRows`).

Pure module: no Django.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

CALIBRATION_RESULT_VERSION = 1


class CalibrationResultError(ValueError):
    """A stored calibration result does not have the shape its version promises."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null; numpy scalars Python numbers; tuples lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _json_safe(value.item())
    if hasattr(value, "tolist") and callable(value.tolist):
        return _json_safe(value.tolist())
    return value


def _fields_json(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A result dataclass's fields (but `skip`) as JSON values, in declaration order: the
    stored key order."""
    return {f.name: _json_safe(getattr(obj, f.name)) for f in fields(obj) if f.name not in skip}


def _get(d: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in d:
        raise CalibrationResultError(f"{path}.{key}", "missing")
    return d[key]


def _int(d: Mapping[str, Any], key: str, path: str, *, null: bool = False) -> Any:
    v = _get(d, key, path)
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise CalibrationResultError(f"{path}.{key}", "must be an integer")
    return v


def _float(d: Mapping[str, Any], key: str, path: str, *, null: bool = False) -> Any:
    v = _get(d, key, path)
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CalibrationResultError(f"{path}.{key}", "must be a number")
    return float(v)


def _str(d: Mapping[str, Any], key: str, path: str, *, null: bool = False) -> Any:
    v = _get(d, key, path)
    if v is None and null:
        return None
    if not isinstance(v, str):
        raise CalibrationResultError(f"{path}.{key}", "must be a string")
    return v


def _bool(d: Mapping[str, Any], key: str, path: str) -> bool:
    v = _get(d, key, path)
    if not isinstance(v, bool):
        raise CalibrationResultError(f"{path}.{key}", "must be true or false")
    return v


def _obj(d: Mapping[str, Any], key: str, path: str, *, null: bool = False) -> Any:
    v = _get(d, key, path)
    if v is None and null:
        return None
    if not isinstance(v, Mapping):
        raise CalibrationResultError(f"{path}.{key}", "must be an object")
    return dict(v)


@dataclass(frozen=True, kw_only=True)
class CalibrationCell:
    """One judge version x criterion x calibration cell ("" = the whole study).

    ``too_few_labels``: fewer human labels than ``min_labels``: no curve of its own (``method``
    and the figures are null, ``pooled_only`` true: the cell's outputs get the whole-study
    curve). ``curve``: the fitted map on a grid (``{"x": [...], "y": [...]}``, empty lists when
    the cell has no curve of its own).
    """

    judge_version: int
    judge: str
    criterion: str
    stratum: str
    n_labels: int
    too_few_labels: bool
    method: str | None
    own_weight: float | None
    borrowed: float | None
    pooled_only: bool
    cv_log_loss: dict[str, float]
    diagnostics: dict[str, Any]  # {"before": ... | None, "after": ... | None}
    curve: dict[str, list[float]]
    false_pass_cost: dict[str, Any] | None
    false_fail_cost: float
    thresholds: dict[str, Any] | None
    policy_costs: dict[str, Any] | None
    trust: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return _fields_json(self)

    @classmethod
    def from_json(cls, d: Any, path: str = "cells[]") -> CalibrationCell:
        if not isinstance(d, Mapping):
            raise CalibrationResultError(path, "must be an object")
        diagnostics = _obj(d, "diagnostics", path)
        for key in ("before", "after"):
            if key not in diagnostics:
                raise CalibrationResultError(f"{path}.diagnostics.{key}", "missing")
            if diagnostics[key] is not None and not isinstance(diagnostics[key], Mapping):
                raise CalibrationResultError(f"{path}.diagnostics.{key}", "must be an object")
        curve = _obj(d, "curve", path)
        for key in ("x", "y"):
            values = curve.get(key)
            if not isinstance(values, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            ):
                raise CalibrationResultError(f"{path}.curve.{key}", "must be a list of numbers")
        losses = _obj(d, "cv_log_loss", path)
        for k, v in losses.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise CalibrationResultError(f"{path}.cv_log_loss.{k}", "must be a number")
        false_fail = _float(d, "false_fail_cost", path, null=True)
        return cls(
            judge_version=_int(d, "judge_version", path),
            judge=_str(d, "judge", path),
            criterion=_str(d, "criterion", path),
            stratum=_str(d, "stratum", path),
            n_labels=_int(d, "n_labels", path),
            too_few_labels=_bool(d, "too_few_labels", path),
            method=_str(d, "method", path, null=True),
            own_weight=_float(d, "own_weight", path, null=True),
            borrowed=_float(d, "borrowed", path, null=True),
            pooled_only=_bool(d, "pooled_only", path),
            cv_log_loss={str(k): (math.nan if v is None else float(v)) for k, v in losses.items()},
            diagnostics=diagnostics,
            curve={"x": [float(v) for v in curve["x"]], "y": [float(v) for v in curve["y"]]},
            false_pass_cost=_obj(d, "false_pass_cost", path, null=True),
            false_fail_cost=math.nan if false_fail is None else false_fail,
            thresholds=_obj(d, "thresholds", path, null=True),
            policy_costs=_obj(d, "policy_costs", path, null=True),
            trust=_obj(d, "trust", path, null=True),
        )


# The keys of a calibrated-score row, in the order `ScoreRows` yields them.
ROW_KEYS = (
    "study_id", "output_id", "comparison_id", "candidate_id", "criterion_id", "criterion_key",
    "judge_version_id", "judge_version_hash", "stratum", "strata", "raw_value",
    "raw_confidence", "p_pass", "p_low", "p_high", "decision", "expected_cost", "source",
    "plan_version", "n_labels", "evidence_at",
)


@dataclass(frozen=True, kw_only=True)
class ScoreBlock:
    """Calibrated-score rows of one criterion (or the rubric) as columns, one entry per row.

    A million rows as dicts cost seconds to build and, alive, slow every later garbage
    collection; as columns they cost a few arrays, and the writer (calibration/services.py)
    encodes them for PostgreSQL's binary COPY without a Python object per row.

    Conventions: ``subject`` is the encoded subject (2 x output id, 2 x comparison id + 1);
    ``candidate`` and ``judge_version`` hold -1 for null; the floats ``raw_confidence``,
    ``p_low`` and ``p_high`` hold NaN for null (``p_pass`` and ``expected_cost`` are written
    as they are); ``raw_value`` is codes into ``raw_uniques``; ``evidence_at`` is
    datetime64[us] UTC with NaT for null; ``strata`` holds one dict per row, shared between
    the rows of a label combination (never changed).
    """

    study_id: int
    subject: npt.NDArray[np.int64]
    candidate: npt.NDArray[np.int64]
    criterion_id: int | None
    criterion_key: str
    judge_version: npt.NDArray[np.int64]
    judge_hashes: Mapping[int, str]
    stratum: npt.NDArray[np.object_]
    strata: npt.NDArray[np.object_]
    raw_codes: npt.NDArray[np.intp]
    raw_uniques: tuple[str, ...]
    raw_confidence: npt.NDArray[np.float64]
    p_pass: npt.NDArray[np.float64]
    p_low: npt.NDArray[np.float64]
    p_high: npt.NDArray[np.float64]
    decision: npt.NDArray[np.object_]
    expected_cost: npt.NDArray[np.float64]
    source: npt.NDArray[np.object_]
    plan_version: int | None
    n_labels: npt.NDArray[np.int64]
    evidence_at: npt.NDArray[np.datetime64]

    def __len__(self) -> int:
        return int(self.subject.size)

    def columns(self) -> tuple[Sequence[Any] | Iterator[Any], ...]:
        """The rows' values as Python objects, one sequence per `ROW_KEYS` entry."""
        n = len(self)
        s = self.subject
        is_output = (s % 2 == 0).tolist()
        ids = (s // 2).tolist()
        jvs = _ints_or_none(self.judge_version)
        hashes = [self.judge_hashes.get(jv, "") if jv is not None else "" for jv in jvs]
        raw = [self.raw_uniques[c] for c in self.raw_codes.tolist()]
        return (
            repeat(self.study_id, n),
            [i if o else None for i, o in zip(ids, is_output, strict=True)],
            [None if o else i for i, o in zip(ids, is_output, strict=True)],
            _ints_or_none(self.candidate), repeat(self.criterion_id, n),
            repeat(self.criterion_key, n), jvs, hashes, self.stratum.tolist(),
            self.strata.tolist(), raw, _floats_or_none(self.raw_confidence),
            self.p_pass.tolist(), _floats_or_none(self.p_low), _floats_or_none(self.p_high),
            self.decision.tolist(), self.expected_cost.tolist(), self.source.tolist(),
            repeat(self.plan_version, n), self.n_labels.tolist(), _datetimes(self.evidence_at),
        )


def _ints_or_none(values: npt.NDArray[np.int64]) -> list[int | None]:
    out: list[int | None] = values.tolist()
    for i in np.flatnonzero(values < 0).tolist():
        out[i] = None
    return out


def _floats_or_none(values: npt.NDArray[np.float64]) -> list[float | None]:
    out: list[float | None] = values.tolist()
    for i in np.flatnonzero(~np.isfinite(values)).tolist():
        out[i] = None
    return out


def _datetimes(values: npt.NDArray[np.datetime64]) -> list[Any]:
    """Aware (UTC) Python datetimes, None where NaT."""
    out: list[Any] = [None] * values.size
    present = ~np.isnat(values)
    if present.any():
        stamps = pd.DatetimeIndex(values[present], tz="UTC").to_pydatetime().tolist()
        for i, v in zip(np.flatnonzero(present).tolist(), stamps, strict=True):
            out[i] = v
    return out


@dataclass(frozen=True)
class ScoreRows:
    """A snapshot's calibrated-score rows as column blocks (`ScoreBlock`).

    Iterating yields each row as a dict keyed by `ROW_KEYS` (made one at a time, on demand:
    what tests and non-PostgreSQL writers read); `calibration.services` writes the blocks
    to PostgreSQL without making them.
    """

    blocks: tuple[ScoreBlock, ...] = ()

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for block in self.blocks:
            for values in zip(*block.columns(), strict=True):
                yield dict(zip(ROW_KEYS, values, strict=True))

    def __bool__(self) -> bool:
        return len(self) > 0


def strata_json(strata: Any) -> str:
    """The JSON text a row's strata dict is stored as (one spelling for every writer)."""
    return json.dumps(strata if type(strata) is dict else dict(strata or {}))


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """A calibration snapshot's result (version 1; the JSON shape is in docs/calibration.md).

    ``cascade``: the guaranteed-agreement cascade of the first criterion it decided (null
    otherwise); ``cascades``: every criterion's, by criterion key. ``n_scores``: calibrated
    score rows written with the snapshot (criterion rows and rubric rows).
    """

    version: int = CALIBRATION_RESULT_VERSION
    kind: str = "calibration"
    plan_version: int | None
    fingerprint: str
    params: dict[str, Any]
    costs: dict[str, Any]
    policy: dict[str, Any]
    cells: tuple[CalibrationCell, ...]
    cascade: dict[str, Any] | None
    cascades: dict[str, dict[str, Any]] = field(default_factory=dict)
    n_scores: int
    warnings: tuple[str, ...] = ()
    # The `policy` report parameter tried beside the plan's (exploratory: it drives no served
    # decision): {"exploratory": true, "policy", "judges": {criterion: {judge: trust}},
    # "cascades": {criterion: cascade}}; null when the parameter was not given.
    policy_trial: dict[str, Any] | None = None
    # The CalibratedScore rows (iterating yields dicts of field attname -> value), not
    # serialised.
    scores: ScoreRows = field(default_factory=ScoreRows, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        # The score rows are written apart; "cells" keeps its place, each cell as its JSON.
        return {**_fields_json(self, skip=("scores",)), "cells": [c.to_json() for c in self.cells]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CalibrationResult:
        """Read a stored result back; CalibrationResultError names the first bad field."""
        if not isinstance(d, Mapping):
            raise CalibrationResultError("$", "must be an object")
        version = _int(d, "version", "$")
        if version != CALIBRATION_RESULT_VERSION:
            raise CalibrationResultError(
                "$.version", f"unknown calibration result version {version}"
            )
        if _str(d, "kind", "$") != "calibration":
            raise CalibrationResultError("$.kind", "must be 'calibration'")
        cells = _get(d, "cells", "$")
        if not isinstance(cells, list):
            raise CalibrationResultError("$.cells", "must be a list")
        warnings = _get(d, "warnings", "$")
        if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
            raise CalibrationResultError("$.warnings", "must be a list of strings")
        cascades = d.get("cascades", {})
        if not isinstance(cascades, Mapping):
            raise CalibrationResultError("$.cascades", "must be an object")
        costs = _obj(d, "costs", "$")
        policy = _obj(d, "policy", "$")
        for key in ("unit", "severity", "false_fail", "review", "is_default"):
            if key not in costs:
                raise CalibrationResultError(f"$.costs.{key}", "missing")
        for key in ("kind", "is_default"):
            if key not in policy:
                raise CalibrationResultError(f"$.policy.{key}", "missing")
        return cls(
            version=version,
            plan_version=_int(d, "plan_version", "$", null=True),
            fingerprint=_str(d, "fingerprint", "$"),
            params=_obj(d, "params", "$"),
            costs=costs,
            policy=policy,
            cells=tuple(
                CalibrationCell.from_json(c, f"$.cells[{i}]") for i, c in enumerate(cells)
            ),
            cascade=_obj(d, "cascade", "$", null=True),
            cascades={str(k): dict(v) for k, v in cascades.items()},
            n_scores=_int(d, "n_scores", "$"),
            warnings=tuple(warnings),
            policy_trial=(_obj(d, "policy_trial", "$", null=True)
                          if d.get("policy_trial") is not None else None),
        )


__all__ = [
    "CALIBRATION_RESULT_VERSION",
    "ROW_KEYS",
    "CalibrationCell",
    "CalibrationResult",
    "CalibrationResultError",
    "ScoreBlock",
    "ScoreRows",
    "strata_json",
]
