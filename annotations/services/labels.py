"""Validation of the labels, flags and free text an annotator sends (submit, revise, gold)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from reviewhub.errors import Problems, ValidationFailed
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
        raise ValidationFailed.at(name, f"{name} must be an object with a 'value'.")
    unknown = sorted(set(raw) - {"value", "severity", "severity_note"})
    if unknown:
        raise Problems.from_mapping({f"{name}.{k}": "unknown field" for k in unknown}).error(
            message=f"{name} has unknown field(s): {', '.join(unknown)}."
        )
    value = raw.get("value")
    if criterion.scale == Criterion.Scale.INTERVAL and isinstance(value, float):
        value = number_text(value)  # a JSON number; NaN / inf are refused below
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ValidationFailed.at(f"{name}.value", f"{name}.value is required.")
    value, value_num = _value_on_scale(criterion, value, name, swapped)
    severity, note = _severity_clean(criterion, value, raw, name)
    return CleanLabel(criterion, value, value_num, severity, note)



def _value_on_scale(
    criterion: Criterion, value: str, name: str, swapped: bool
) -> tuple[str, float | None]:
    """The value checked against the criterion's scale, in canonical encoding, and its number
    (None for categorical labels)."""
    value_num: float | None
    if criterion.scale == Criterion.Scale.BINARY:
        if value not in ("pass", "fail"):
            raise ValidationFailed.at(f"{name}.value", f"{name}.value must be 'pass' or 'fail'.")
        value_num = 1.0 if value == "pass" else 0.0
    elif criterion.scale == Criterion.Scale.ORDINAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed.at(
                f"{name}.value", f"{name}.value must be one of {', '.join(allowed)}.",
            )
        value_num = float(value)
    elif criterion.scale == Criterion.Scale.INTERVAL:
        try:
            value_num = interval_value(criterion, value)
        except ValueError as exc:
            lo, hi = interval_bounds(criterion)
            raise ValidationFailed.at(
                f"{name}.value",
                f"{name}.value must be a number from {number_text(lo)} to "
                f"{number_text(hi)} ({exc}).",
            ) from None
        value = number_text(value_num)
    elif criterion.scale == Criterion.Scale.CATEGORICAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed.at(
                f"{name}.value", f"{name}.value must be one of {', '.join(allowed)}.",
            )
        value_num = None
    else:
        if value not in PAIRWISE_VALUES:
            raise ValidationFailed.at(f"{name}.value", f"{name}.value must be 'A', 'B' or 'tie'.")
        if swapped:
            value = _swap(value)
        value_num = {"A": 1.0, "B": 0.0, "tie": 0.5}[value]
    return value, value_num


def _severity_clean(
    criterion: Criterion, value: str, raw: Mapping[str, Any], name: str
) -> tuple[int | None, str]:
    """Severity and its note: required (1..5) exactly when the value is a failure, refused
    otherwise."""
    severity = raw.get("severity")
    note = raw.get("severity_note") or ""
    if not isinstance(note, str):
        raise ValidationFailed.at(f"{name}.severity_note", f"{name}.severity_note must be text.")
    if len(note) > MAX_TEXT_CHARS:
        raise ValidationFailed.at(
            f"{name}.severity_note",
            f"{name}.severity_note is longer than {MAX_TEXT_CHARS} characters.",
        )
    if is_failure(criterion, value):
        if severity is None:
            raise ValidationFailed.at(
                f"{name}.severity",
                f"{name}.severity (1..5) is required when the label is a failure.",
            )
        if (
            isinstance(severity, bool)
            or not isinstance(severity, int)
            or not SEVERITY_MIN <= severity <= SEVERITY_MAX
        ):
            raise ValidationFailed.at(
                f"{name}.severity", f"{name}.severity must be an integer from 1 to 5.",
            )
    else:
        if severity is not None:
            raise ValidationFailed.at(
                f"{name}.severity", f"{name}.severity is only asked when the label is a failure.",
            )
        if note:
            raise ValidationFailed.at(
                f"{name}.severity_note",
                f"{name}.severity_note is only asked when the label is a failure.",
            )
    return severity, note


def labels_clean(*, criteria: list[Criterion], labels: Any, swapped: bool) -> list[CleanLabel]:
    """Every criterion of the plan answered exactly once; unknown keys refused by name."""
    if not isinstance(labels, Mapping):
        raise ValidationFailed.at("labels", "labels must be an object keyed by criterion key.")
    by_key = {c.key: c for c in criteria}
    unknown = sorted(set(labels) - set(by_key))
    if unknown:
        raise Problems.from_mapping({f"labels.{k}": "unknown criterion" for k in unknown}).error(
            message=f"Unknown criterion key(s): {', '.join(map(str, unknown))}."
        )
    missing = [c.key for c in criteria if c.key not in labels]
    if missing:
        raise Problems.from_mapping({f"labels.{k}": "required" for k in missing}).error(
            message=f"Missing label(s) for criterion: {', '.join(missing)}."
        )
    return [label_clean(criterion=c, raw=labels[c.key], swapped=swapped) for c in criteria]


def flags_clean(flags: Any) -> dict[str, bool]:
    if flags is None:
        return {}
    if not isinstance(flags, Mapping):
        raise ValidationFailed.at("flags", "flags must be an object.")
    unknown = sorted(set(flags) - set(FLAG_KEYS))
    if unknown:
        raise Problems.from_mapping({f"flags.{k}": "unknown flag" for k in unknown}).error(
            message=f"Unknown flag(s): {', '.join(map(str, unknown))}; "
            f"allowed: {', '.join(FLAG_KEYS)}."
        )
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValidationFailed.at(f"flags.{key}", f"flags.{key} must be true or false.")
    return {k: bool(v) for k, v in flags.items() if v}


def text_clean(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed.at(name, f"{name} must be text.")
    if len(value) > MAX_TEXT_CHARS:
        raise ValidationFailed.at(name, f"{name} is longer than {MAX_TEXT_CHARS} characters.")
    return value
