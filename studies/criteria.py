"""Criterion value semantics: which values a criterion accepts and how they read as numbers and
as pass/fail. Pure functions (no ORM access), shared by judges, annotations and reports.

The encoding is the one documented at the top of `judges/models.py`:

- binary: "pass" | "fail" -> 1.0 | 0.0; pass iff "pass"
- ordinal: "1".."k" -> the point; pass iff point >= pass_threshold
- pairwise: "A" | "B" | "tie" -> 1.0 | 0.0 | 0.5; no pass/fail reading (None)
- categorical: the label -> None; pass iff label in pass_labels (None when no pass_labels)
- interval: a finite number within [min, max], stored as its shortest text ("2.2", "3") ->
  the number; pass iff number >= pass_threshold (None when there is no pass_threshold)

The empty string is the "unscored" value (a parse failure): it has no number and no pass/fail
reading. Any other value outside `criterion_allowed_values` raises ValueError, because reading
a value the rubric does not define as a number would silently corrupt every statistic.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

BINARY_VALUES = ("pass", "fail")
PAIRWISE_VALUES = ("A", "B", "tie")
_BINARY_NUM = {"pass": 1.0, "fail": 0.0}
_PAIRWISE_NUM = {"A": 1.0, "B": 0.0, "tie": 0.5}
UNSCORED = ""


class CriterionLike(Protocol):
    """What the helpers read: a `studies.models.Criterion` or anything shaped like one."""

    scale: str
    points: Any
    pass_threshold: int | float | None
    pass_labels: Any


def interval_bounds(criterion: Any) -> tuple[float, float]:
    """(min, max) of an interval criterion (its closed range)."""
    lo, hi = getattr(criterion, "min", None), getattr(criterion, "max", None)
    if lo is None or hi is None:
        raise ValueError(f"interval criterion {getattr(criterion, 'key', '')!r} has no range")
    return float(lo), float(hi)


def number_text(num: float) -> str:
    """The canonical text of a number: "3" for 3.0, the shortest round-trip form otherwise."""
    value = float(num)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def interval_value(criterion: Any, raw: Any) -> float:
    """The number an interval criterion's value stands for; ValueError when it is not a finite
    number inside the criterion's [min, max] (the message says which)."""
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a number")
    try:
        num = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise ValueError(f"{str(raw)[:50]!r} is not a number") from None
    if not math.isfinite(num):
        raise ValueError(f"{str(raw)[:50]!r} is not a finite number")
    lo, hi = interval_bounds(criterion)
    if not lo <= num <= hi:
        raise ValueError(
            f"{number_text(num)} is outside the range {number_text(lo)}..{number_text(hi)}"
        )
    return num


def criterion_allowed_values(criterion: CriterionLike) -> list[str]:
    """The stored values the criterion accepts, in display order ("1".."k" for ordinal)."""
    scale = criterion.scale
    if scale == "binary":
        return list(BINARY_VALUES)
    if scale == "pairwise":
        return list(PAIRWISE_VALUES)
    if scale == "ordinal":
        values = sorted(int(p["value"]) for p in (criterion.points or []))
        return [str(v) for v in values]
    if scale == "categorical":
        return [str(p["value"]) for p in (criterion.points or [])]
    if scale == "interval":
        return []  # a continuous range: no list of values (see `interval_value`)
    raise ValueError(f"unknown criterion scale {scale!r}")


def criterion_value_labels(criterion: CriterionLike) -> dict[str, str]:
    """Stored value -> the label shown to people (ordinal point labels, categorical labels)."""
    scale = criterion.scale
    if scale == "binary":
        return {"pass": "Pass", "fail": "Fail"}
    if scale == "pairwise":
        return {"A": "A is better", "B": "B is better", "tie": "Tie"}
    if scale == "interval":
        return {}
    out: dict[str, str] = {}
    for p in criterion.points or []:
        value = str(int(p["value"])) if scale == "ordinal" else str(p["value"])
        out[value] = str(p.get("label") or value)
    if scale == "ordinal":
        out = dict(sorted(out.items(), key=lambda kv: int(kv[0])))
    return out


def _check(criterion: CriterionLike, value: str) -> None:
    if criterion.scale == "interval":
        interval_value(criterion, value)
        return
    if value not in criterion_allowed_values(criterion):
        raise ValueError(
            f"{value!r} is not a value of this {criterion.scale} criterion "
            f"(allowed: {', '.join(criterion_allowed_values(criterion))})"
        )


def criterion_value_num(criterion: CriterionLike, value: str) -> float | None:
    """The numeric reading of a stored value (see module docstring); None when there is none.

    Raises ValueError for a value the criterion does not define ("" is unscored -> None).
    """
    if value == UNSCORED:
        return None
    _check(criterion, value)
    scale = criterion.scale
    if scale == "binary":
        return _BINARY_NUM[value]
    if scale == "pairwise":
        return _PAIRWISE_NUM[value]
    if scale == "ordinal":
        return float(int(value))
    if scale == "interval":
        return float(value)
    return None


def criterion_is_pass(criterion: CriterionLike, value: str) -> bool | None:
    """Whether a stored value counts as a pass; None when the criterion has no pass/fail reading
    (pairwise, categorical without pass_labels, ordinal without a threshold) or the value is
    unscored. Raises ValueError for a value the criterion does not define."""
    if value == UNSCORED:
        return None
    _check(criterion, value)
    scale = criterion.scale
    if scale == "binary":
        return value == "pass"
    if scale == "ordinal":
        if criterion.pass_threshold is None:
            return None
        return int(value) >= int(criterion.pass_threshold)
    if scale == "categorical":
        labels = [str(v) for v in (criterion.pass_labels or [])]
        if not labels:
            return None
        return value in labels
    if scale == "interval":
        if criterion.pass_threshold is None:
            return None
        return float(value) >= float(criterion.pass_threshold)
    return None


def criterion_has_pass_reading(criterion: CriterionLike) -> bool:
    """True when values of this criterion can be read as pass/fail (pass rates make sense)."""
    scale = criterion.scale
    if scale == "binary":
        return True
    if scale in ("ordinal", "interval"):
        return criterion.pass_threshold is not None
    if scale == "categorical":
        return bool(criterion.pass_labels)
    return False
