"""Validation of the labels, flags and free text an annotator sends (submit, revise, gold)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from reviewhub.errors import ValidationFailed
from studies.criteria import interval_bounds, interval_value, number_text
from studies.models import Criterion

from ..constants import FLAG_KEYS, PAIRWISE_VALUES, SEVERITY_MAX, SEVERITY_MIN
from .common import is_failure

MAX_TEXT_CHARS = 20_000


class LabelInput(TypedDict, total=False):
    """One criterion's label as an annotator sends it.

    `value` uses the criterion's encoding (judges/models.py); for pairwise criteria it is AS
    PRESENTED ("A" = the left text) and is mapped back to canonical terms with `swapped`.
    """

    value: str
    severity: int | None
    severity_note: str


@dataclass(frozen=True)
class CleanLabel:
    criterion: Criterion
    value: str  # canonical
    value_num: float | None
    severity: int | None
    severity_note: str


def _point_values(criterion: Criterion) -> list[str]:
    return [str(p.get("value")) for p in criterion.points if isinstance(p, dict)]


def _swap(value: str) -> str:
    return {"A": "B", "B": "A"}.get(value, value)


def label_clean(
    *, criterion: Criterion, raw: Any, swapped: bool = False, field: str | None = None
) -> CleanLabel:
    """Validate one criterion's label and return it in canonical encoding.

    Severity (1..5) is required exactly when the value is a failure and refused otherwise.
    """
    name = field or f"labels.{criterion.key}"
    if not isinstance(raw, Mapping):
        raise ValidationFailed(
            f"{name} must be an object with a 'value'.", details={name: "must be an object"}
        )
    unknown = sorted(set(raw) - {"value", "severity", "severity_note"})
    if unknown:
        raise ValidationFailed(
            f"{name} has unknown field(s): {', '.join(unknown)}.",
            details={f"{name}.{k}": "unknown field" for k in unknown},
        )
    value = raw.get("value")
    if criterion.scale == Criterion.Scale.INTERVAL and isinstance(value, float):
        value = number_text(value)  # a JSON number; NaN / inf are refused below
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ValidationFailed(f"{name}.value is required.", details={f"{name}.value": "required"})
    value_num: float | None
    if criterion.scale == Criterion.Scale.BINARY:
        if value not in ("pass", "fail"):
            raise ValidationFailed(
                f"{name}.value must be 'pass' or 'fail'.", details={f"{name}.value": "invalid"}
            )
        value_num = 1.0 if value == "pass" else 0.0
    elif criterion.scale == Criterion.Scale.ORDINAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed(
                f"{name}.value must be one of {', '.join(allowed)}.",
                details={f"{name}.value": "invalid"},
            )
        value_num = float(value)
    elif criterion.scale == Criterion.Scale.INTERVAL:
        try:
            value_num = interval_value(criterion, value)
        except ValueError as exc:
            lo, hi = interval_bounds(criterion)
            raise ValidationFailed(
                f"{name}.value must be a number from {number_text(lo)} to "
                f"{number_text(hi)} ({exc}).",
                details={f"{name}.value": "invalid"},
            ) from None
        value = number_text(value_num)
    elif criterion.scale == Criterion.Scale.CATEGORICAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed(
                f"{name}.value must be one of {', '.join(allowed)}.",
                details={f"{name}.value": "invalid"},
            )
        value_num = None
    else:
        if value not in PAIRWISE_VALUES:
            raise ValidationFailed(
                f"{name}.value must be 'A', 'B' or 'tie'.", details={f"{name}.value": "invalid"}
            )
        if swapped:
            value = _swap(value)
        value_num = {"A": 1.0, "B": 0.0, "tie": 0.5}[value]
    severity = raw.get("severity")
    note = raw.get("severity_note") or ""
    if not isinstance(note, str):
        raise ValidationFailed(
            f"{name}.severity_note must be text.", details={f"{name}.severity_note": "invalid"}
        )
    if len(note) > MAX_TEXT_CHARS:
        raise ValidationFailed(
            f"{name}.severity_note is longer than {MAX_TEXT_CHARS} characters.",
            details={f"{name}.severity_note": "too long"},
        )
    if is_failure(criterion, value):
        if severity is None:
            raise ValidationFailed(
                f"{name}.severity (1..5) is required when the label is a failure.",
                details={f"{name}.severity": "required for a failing label"},
            )
        if (
            isinstance(severity, bool)
            or not isinstance(severity, int)
            or not SEVERITY_MIN <= severity <= SEVERITY_MAX
        ):
            raise ValidationFailed(
                f"{name}.severity must be an integer from 1 to 5.",
                details={f"{name}.severity": "must be 1..5"},
            )
    else:
        if severity is not None:
            raise ValidationFailed(
                f"{name}.severity is only asked when the label is a failure.",
                details={f"{name}.severity": "not allowed for a passing label"},
            )
        if note:
            raise ValidationFailed(
                f"{name}.severity_note is only asked when the label is a failure.",
                details={f"{name}.severity_note": "not allowed for a passing label"},
            )
    return CleanLabel(criterion, value, value_num, severity, note)


def labels_clean(*, criteria: list[Criterion], labels: Any, swapped: bool) -> list[CleanLabel]:
    """Every criterion of the plan answered exactly once; unknown keys refused by name."""
    if not isinstance(labels, Mapping):
        raise ValidationFailed(
            "labels must be an object keyed by criterion key.", details={"labels": "invalid"}
        )
    by_key = {c.key: c for c in criteria}
    unknown = sorted(set(labels) - set(by_key))
    if unknown:
        raise ValidationFailed(
            f"Unknown criterion key(s): {', '.join(map(str, unknown))}.",
            details={f"labels.{k}": "unknown criterion" for k in unknown},
        )
    missing = [c.key for c in criteria if c.key not in labels]
    if missing:
        raise ValidationFailed(
            f"Missing label(s) for criterion: {', '.join(missing)}.",
            details={f"labels.{k}": "required" for k in missing},
        )
    return [label_clean(criterion=c, raw=labels[c.key], swapped=swapped) for c in criteria]


def flags_clean(flags: Any) -> dict[str, bool]:
    if flags is None:
        return {}
    if not isinstance(flags, Mapping):
        raise ValidationFailed("flags must be an object.", details={"flags": "invalid"})
    unknown = sorted(set(flags) - set(FLAG_KEYS))
    if unknown:
        raise ValidationFailed(
            f"Unknown flag(s): {', '.join(map(str, unknown))}; allowed: {', '.join(FLAG_KEYS)}.",
            details={f"flags.{k}": "unknown flag" for k in unknown},
        )
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValidationFailed(
                f"flags.{key} must be true or false.", details={f"flags.{key}": "invalid"}
            )
    return {k: bool(v) for k, v in flags.items() if v}


def _text_clean(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{name} must be text.", details={name: "invalid"})
    if len(value) > MAX_TEXT_CHARS:
        raise ValidationFailed(
            f"{name} is longer than {MAX_TEXT_CHARS} characters.", details={name: "too long"}
        )
    return value
