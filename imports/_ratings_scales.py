"""Scales of imported criteria: stated (--scale) or inferred, and the values each accepts."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from studies.criteria import (
    interval_value,
    number_text,
)
from studies.models import Criterion
from studies.strata import as_number

_BINARY_ALIASES = {
    "pass": "pass",
    "fail": "fail",
    "true": "pass",
    "false": "fail",
    "1": "pass",
    "0": "fail",
    "yes": "pass",
    "no": "fail",
}
_PAIRWISE_ALIASES = {"a": "A", "b": "B", "tie": "tie"}


@dataclass(frozen=True)
class ScaleSpec:
    """How to create a missing criterion: scale plus ordinal points, categorical labels or an
    interval's (min, max), and for an ordinal scale optionally the first passing point
    (`--pass-threshold KEY=N`)."""

    scale: str
    points: tuple[str, ...] = ()
    pass_threshold: int | None = None
    bounds: tuple[float, float] | None = None

    def as_points(self) -> list[dict[str, Any]]:
        if self.scale == "ordinal":
            return [{"value": int(p), "label": p} for p in self.points]
        if self.scale == "categorical":
            return [{"value": p, "label": p} for p in self.points]
        return []

    def criterion_fields(self, key: str) -> dict[str, Any]:
        """The rubric criterion this spec creates (validated by `studies.spec`)."""
        fields: dict[str, Any] = {
            "key": key, "name": key, "scale": self.scale, "points": self.as_points()
        }
        if self.pass_threshold is not None:
            fields["pass_threshold"] = self.pass_threshold
        if self.scale == "interval" and self.bounds is not None:
            fields["min"], fields["max"] = self.bounds
        return fields

    def describe(self) -> str:
        if self.scale == "interval" and self.bounds is not None:
            return f"interval {number_text(self.bounds[0])}..{number_text(self.bounds[1])}"
        if self.scale == "ordinal":
            passing = f", pass >= {self.pass_threshold}" if self.pass_threshold is not None else ""
            return f"ordinal {self.points[0]}..{self.points[-1]}{passing}"
        if self.scale == "categorical":
            return "categorical (" + ", ".join(self.points) + ")"
        return self.scale


_INTERVAL_RANGE = re.compile(
    r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:\.\.|-)\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*$"
)


def _interval_parse(text: str, rest: str) -> ScaleSpec:
    """``interval:1-5``, ``interval:0-1``, ``interval:0.5..4.5``, ``interval:-1..1``."""
    m = _INTERVAL_RANGE.match(rest)
    if m is None:
        raise ValueError(
            f"interval scale needs 'interval:MIN-MAX' (e.g. interval:1-5), got {text!r}"
        )
    lo, hi = float(m.group(1)), float(m.group(2))
    if not lo < hi:
        raise ValueError(f"an interval scale needs MIN < MAX, got {text!r}")
    return ScaleSpec("interval", bounds=(lo, hi))


def scale_parse(text: str) -> ScaleSpec:
    """Parse ``binary``, ``pairwise``, ``ordinal:1-5`` (or ``1..5``), ``categorical:No,Yes``,
    ``interval:1-5`` (or ``1..5``; any finite MIN < MAX, e.g. ``interval:0-1``)."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("binary", "pairwise"):
        return ScaleSpec(kind)
    if kind == "interval":
        return _interval_parse(text, rest)
    if kind == "ordinal":
        sep = ".." if ".." in rest else "-"
        lo_s, _, hi_s = rest.partition(sep)
        try:
            lo, hi = int(lo_s or 1), int(hi_s)
        except ValueError as exc:
            raise ValueError(f"ordinal scale needs 'ordinal:1-K', got {text!r}") from exc
        if lo != 1 or hi < 2:
            raise ValueError(f"ordinal scales run 1..K with K >= 2, got {text!r}")
        return ScaleSpec("ordinal", tuple(str(v) for v in range(lo, hi + 1)))
    if kind == "categorical":
        labels = tuple(x.strip() for x in rest.split(",") if x.strip())
        if len(labels) < 2:
            raise ValueError(f"categorical scale needs at least two labels, got {text!r}")
        return ScaleSpec("categorical", labels)
    raise ValueError(
        f"unknown scale {text!r} (binary, pairwise, ordinal:1-K, categorical:a,b,..., "
        "interval:MIN-MAX)"
    )


class _CriterionView:
    """The scale facts validation needs, for an existing criterion or one to be created."""

    def __init__(
        self,
        key: str,
        scale: str,
        values: list[str],
        existing: Criterion | None,
        model: Criterion | None = None,
    ) -> None:
        self.key = key
        self.scale = scale
        self.values = values
        self.existing = existing
        # The stored criterion, or the unsaved one the import will create: the label rules of
        # annotations and judges are checked against it.
        self.model = existing if existing is not None else model
        self.lower = {v.lower(): v for v in values}

    def canonical(self, raw: str) -> str | None:
        if self.scale == "binary":
            return _BINARY_ALIASES.get(raw.lower())
        if self.scale == "pairwise":
            return _PAIRWISE_ALIASES.get(raw.lower())
        if self.scale == "ordinal":
            num = as_number(raw)
            if num is None or not float(num).is_integer():
                return None
            text = str(int(num))
            return text if text in self.values else None
        if self.scale == "interval":
            try:
                return number_text(interval_value(self.model, raw))
            except ValueError:
                return None
        return self.lower.get(raw.lower())


def _number_text(num: float) -> str:
    return str(int(num)) if float(num).is_integer() else repr(num)


def _values_preview(values: Iterable[str], limit: int = 6) -> str:
    distinct = list(dict.fromkeys(values))
    shown = ", ".join(distinct[:limit])
    return shown + (f", ... ({len(distinct)} distinct)" if len(distinct) > limit else "")


@dataclass(frozen=True)
class _Inference:
    """The scale inferred for a new criterion, or why none can be (the user must state it)."""

    spec: ScaleSpec | None
    reason: str


def _infer_scale(key: str, values: list[str], pairwise: bool) -> _Inference:
    """Infer the scale of a criterion from its values, or refuse where a guess could re-type
    data: numbers never become categorical labels ("3" and "3.0" would be two labels)."""
    if pairwise:
        return _Inference(ScaleSpec("pairwise"), "the rows are pairwise")
    lowered = {v.lower() for v in values}
    if lowered and lowered <= {"pass", "fail"}:
        return _Inference(ScaleSpec("binary"), "every value is pass or fail")
    nums = [as_number(v) for v in values]
    numeric = [n for n in nums if n is not None]
    if numeric and len(numeric) == len(nums):
        if all(float(n).is_integer() for n in numeric):
            lo, top = int(min(numeric)), int(max(numeric))
            labels = ",".join(sorted({_number_text(n) for n in numeric}, key=float))
            if lo >= 1 and top >= 2:
                return _Inference(
                    ScaleSpec("ordinal", tuple(str(v) for v in range(1, top + 1))),
                    f"every value is an integer from {lo} to {top}",
                )
            return _Inference(
                None,
                f"the values of '{key}' are integers from {lo} to {top} "
                f"({_values_preview(values)}); ReviewHub's ordinal scales run 1..K, so state the "
                f"scale: --scale {key}=binary (1 = pass, 0 = fail), --scale "
                f"{key}=categorical:{labels}, or recode the values to 1..K",
            )
        # Continuous scores (a mean over raters) are not re-typed by inference either: the
        # range of an interval criterion is the scale's, which the values cannot tell.
        low, high = number_text(min(numeric)), number_text(max(numeric))
        return _Inference(
            None,
            f"the values of '{key}' are non-integer numbers from {low} to {high} "
            f"({_values_preview(values)}): continuous scores (such as a mean over raters) "
            f"import under an interval criterion, whose range the values cannot tell: state "
            f"it, --scale {key}=interval:{low}-{high} (the range seen here; give the rating "
            f"scale's, e.g. interval:1-5, where it is wider)",
        )
    if numeric:
        return _Inference(
            None,
            f"'{key}' mixes numbers and text ({_values_preview(values)}); state its scale "
            f"(--scale {key}=ordinal:1-5, --scale {key}=categorical:a,b,...)",
        )
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    if len(seen) < 2:
        return _Inference(
            None,
            f"cannot infer the scale of '{key}' from its values; "
            "give it explicitly (--scale KEY=ordinal:1-5, ...)",
        )
    return _Inference(
        ScaleSpec("categorical", tuple(seen)), "the values are text labels, in order of appearance"
    )
