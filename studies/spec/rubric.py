"""The rubric section of a study spec: criteria (scales, points, pass readings), rubric rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reviewhub.errors import Problems
from studies.criteria import criterion_has_pass_reading
from studies.spec.common import (
    SCALES,
    is_int,
    is_number,
    join,
    keyed_entries_validate,
)
from studies.spec.entries import entry_open, problems_of

# --- Rubric criteria --------------------------------------------------------------------------

_CRITERION_FIELDS = {"key", "name", "guidance", "scale", "points", "pass_threshold",
                     "pass_labels", "is_hard_gate", "weight", "needs_context", "min", "max"}


def _interval_validate(raw: Mapping[str, Any], bad: Any) -> tuple[float, float] | None:
    """An interval criterion's range and threshold: finite numbers, min < max, the threshold
    (optional) inside [min, max]. Returns (min, max) when both are valid."""
    lo: Any = raw.get("min")
    hi: Any = raw.get("max")
    ok = True
    for name, value in (("min", lo), ("max", hi)):
        if value is None:
            bad(name, f"an interval criterion needs {name} (a finite number)")
            ok = False
        elif not is_number(value):
            bad(name, f"{name} must be a finite number (got {value!r})")
            ok = False
    if ok and not float(lo) < float(hi):
        bad("max", f"max must be greater than min (got min {lo!r}, max {hi!r})")
        ok = False
    threshold = raw.get("pass_threshold")
    if threshold is not None:
        if not is_number(threshold):
            bad("pass_threshold", f"pass_threshold must be a finite number (got {threshold!r})")
        elif ok and not float(lo) <= float(threshold) <= float(hi):
            bad("pass_threshold", f"pass_threshold {threshold!r} is outside the range "
                                  f"[{lo!r}, {hi!r}]")
    if raw.get("points", []) not in (None, []):
        bad("points", "an interval criterion takes no points (its range is min..max)")
    if raw.get("pass_labels", []) not in (None, []):
        bad("pass_labels", "an interval criterion takes no pass_labels (use pass_threshold)")
    return (float(lo), float(hi)) if ok else None


Bad = Callable[[str, str], None]


def _no_points(
    scale: str, points_raw: Any, pass_threshold: Any, pass_labels_raw: Any, bad: Bad,
) -> None:
    """A binary or pairwise criterion has a fixed reading: no points, threshold or labels."""
    if points_raw not in (None, []):
        bad("points", f"a {scale} criterion takes no points")
    if pass_threshold is not None:
        bad("pass_threshold", f"a {scale} criterion takes no pass_threshold")
    if pass_labels_raw not in (None, []):
        bad("pass_labels", f"a {scale} criterion takes no pass_labels")


def _ordinal_points(
    points_raw: Any, pass_threshold: Any, pass_labels_raw: Any, path: str, label: str,
    problems: Problems, bad: Bad,
) -> list[dict[str, Any]]:
    """An ordinal criterion's points (1..k, each labelled) and its pass_threshold, checked."""
    points: list[dict[str, Any]] = []
    if not isinstance(points_raw, list) or len(points_raw) < 2:
        bad("points", "an ordinal criterion needs a list of at least 2 points "
                      "[{\"value\": 1, \"label\": \"...\"}, ...]")
    else:
        for i, p in enumerate(points_raw):
            ppath = join(join(path, "points"), i)
            if not isinstance(p, Mapping):
                problems.add(ppath, f"{label}: each point must be an object with value "
                                    "and label")
                continue
            value, plabel = p.get("value"), p.get("label")
            if not is_int(value):
                problems.add(join(ppath, "value"),
                             f"{label}: point value must be an integer (got {value!r})")
                continue
            if not isinstance(plabel, str) or not plabel.strip():
                problems.add(join(ppath, "label"),
                             f"{label}: point {value} needs a non-empty label")
                continue
            points.append({"value": value, "label": plabel.strip()})
        values = sorted(p["value"] for p in points)
        if len(points) == len(points_raw) and values != list(range(1, len(values) + 1)):
            bad("points", f"ordinal points must be 1..k, contiguous and each once "
                          f"(got {values})")
        points.sort(key=lambda p: p["value"])
    k = len(points_raw) if isinstance(points_raw, list) else 0
    if pass_threshold is None:
        bad("pass_threshold", "an ordinal criterion needs a pass_threshold")
    elif not is_int(pass_threshold) or not 1 <= int(pass_threshold) <= max(k, 1):
        bad("pass_threshold",
            f"pass_threshold {pass_threshold!r} is outside the scale 1..{k}")
    if pass_labels_raw not in (None, []):
        bad("pass_labels", "an ordinal criterion takes no pass_labels")
    return points


def _categorical_points(
    points_raw: Any, pass_threshold: Any, pass_labels_raw: Any, path: str, label: str,
    problems: Problems, bad: Bad,
) -> tuple[list[dict[str, Any]], Any]:
    """A categorical criterion's labels and its pass_labels, checked."""
    points: list[dict[str, Any]] = []
    if not isinstance(points_raw, list) or not points_raw:
        bad("points", "a categorical criterion needs a non-empty list of labels")
    else:
        seen: set[str] = set()
        for i, p in enumerate(points_raw):
            ppath = join(join(path, "points"), i)
            # A bare string is shorthand for {"value": s, "label": s}.
            value = p if isinstance(p, str) else (p.get("value")
                                                    if isinstance(p, Mapping) else None)
            plabel = p if isinstance(p, str) else (p.get("label", value)
                                                     if isinstance(p, Mapping) else None)
            if not isinstance(value, str) or not value.strip():
                problems.add(ppath, f"{label}: each label must be a non-empty string")
                continue
            value = value.strip()
            if len(value) > 200:
                problems.add(ppath, f"{label}: label must be at most 200 characters")
                continue
            if value in seen:
                problems.add(ppath, f"{label}: label {value!r} appears twice")
                continue
            seen.add(value)
            shown = plabel.strip() if isinstance(plabel, str) and plabel.strip() else value
            points.append({"value": value, "label": shown})
    if pass_threshold is not None:
        bad("pass_threshold", "a categorical criterion takes no pass_threshold "
                              "(use pass_labels)")
    if pass_labels_raw is None:
        pass_labels_raw = []
    if not isinstance(pass_labels_raw, list) or not all(
        isinstance(x, str) for x in pass_labels_raw
    ):
        bad("pass_labels", "pass_labels must be a list of labels")
    else:
        known = {p["value"] for p in points}
        for x in pass_labels_raw:
            if known and x not in known:
                bad("pass_labels", f"pass label {x!r} is not one of the labels")
    return points, pass_labels_raw


def _criterion_validate(raw: Any, path: str, problems: Problems) -> dict[str, Any] | None:
    check = entry_open(raw, path, problems, noun="criterion", fields=_CRITERION_FIELDS)
    if check is None:
        return None
    key, bad, label = check.key, check.bad, check.label
    name = raw.get("name", key)
    if not isinstance(name, str) or not name.strip():
        bad("name", "name must be a non-empty string")
    elif len(name) > 200:
        bad("name", "name must be at most 200 characters")
    guidance = raw.get("guidance", "")
    if not isinstance(guidance, str):
        bad("guidance", "guidance must be a string")
    scale = raw.get("scale")
    if scale not in SCALES:
        bad("scale", f"scale must be one of {', '.join(SCALES)} (got {scale!r})")
    is_hard_gate = raw.get("is_hard_gate", False)
    if not isinstance(is_hard_gate, bool):
        bad("is_hard_gate", "is_hard_gate must be true or false")
    needs_context = raw.get("needs_context", False)
    if not isinstance(needs_context, bool):
        bad("needs_context", "needs_context must be true or false")
    weight = raw.get("weight", 1.0)
    if not is_number(weight) or float(weight) < 0:
        bad("weight", f"weight must be a finite number >= 0 (got {weight!r})")
    points_raw = raw.get("points", [])
    pass_threshold = raw.get("pass_threshold")
    pass_labels_raw = raw.get("pass_labels", [])
    points: list[dict[str, Any]] = []
    if scale != "interval":
        for bound in ("min", "max"):
            if raw.get(bound) is not None:
                bad(bound, f"{bound} applies to interval criteria only")
    bounds: tuple[float, float] | None = None

    if scale == "interval":
        bounds = _interval_validate(raw, bad)
    elif scale in ("binary", "pairwise"):
        _no_points(scale, points_raw, pass_threshold, pass_labels_raw, bad)
    elif scale == "ordinal":
        points = _ordinal_points(points_raw, pass_threshold, pass_labels_raw, path, label,
                                 problems, bad)
    elif scale == "categorical":
        points, pass_labels_raw = _categorical_points(points_raw, pass_threshold,
                                                      pass_labels_raw, path, label, problems, bad)

    if check.failed():
        return None
    crit = {
        "key": key,
        "name": str(name).strip(),
        "guidance": guidance,
        "scale": scale,
        "points": points,
        "pass_threshold": int(pass_threshold) if scale == "ordinal" and pass_threshold is not None
        else float(pass_threshold) if scale == "interval" and pass_threshold is not None
        else None,
        "pass_labels": list(pass_labels_raw or []) if scale == "categorical" else [],
        "is_hard_gate": is_hard_gate,
        "weight": float(weight),
        "needs_context": needs_context,
        "min": bounds[0] if bounds is not None else None,
        "max": bounds[1] if bounds is not None else None,
    }
    if is_hard_gate and not criterion_has_pass_reading(CriterionShape(crit)):
        bad("is_hard_gate", "a hard gate needs a pass/fail reading (binary, ordinal, "
                            "categorical with pass_labels, or interval with a pass_threshold)")
        return None
    return crit


class CriterionShape:
    """Adapter so that the criteria helpers can read a normalised dict."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.scale = d["scale"]
        self.points = d["points"]
        self.pass_threshold = d["pass_threshold"]
        self.pass_labels = d["pass_labels"]
        self.min = d.get("min")
        self.max = d.get("max")


def criteria_validate(criteria: Any, *, path: str = "criteria",
                      problems: Problems | None = None) -> list[dict[str, Any]]:
    """Validate a rubric's criteria list; return normalised criteria in the given order.

    Raises ValidationFailed (unless a `problems` collector is passed, which then holds them).
    """
    with problems_of(problems, "The rubric") as found:
        return keyed_entries_validate(
            criteria, path, found, entry_validate=_criterion_validate, noun="criterion",
            list_problem="must be a non-empty list of criteria", non_empty=True)


# --- The rubric's rule ------------------------------------------------------------------------

# How an output passes the rubric (docs/study-spec.md, "The rubric's rule"): "all" (the
# default) when every criterion with a pass/fail reading passes; "weighted" when it passes
# every hard-gate criterion and at least `pass_share` of the other criteria by weight.
RUBRIC_RULE_KINDS = ("all", "weighted")


def rubric_aggregate_validate(raw: Any, *, path: str = "aggregate",
                              problems: Problems | None = None) -> dict[str, Any]:
    """Validate a rubric's `aggregate` rule; returns its normalised form ({"kind": "all"}
    or {"kind": "weighted", "pass_share": x})."""
    with problems_of(problems, "The rubric") as found:
        out: dict[str, Any] = {"kind": "all"}
        if raw is None:
            return out
        if not isinstance(raw, Mapping):
            found.add(path, "must be an object {kind: all} or {kind: weighted, pass_share}")
        else:
            for extra in sorted(set(raw) - {"kind", "pass_share"}):
                found.add(join(path, extra), "unknown field")
            kind = raw.get("kind", "all")
            if kind not in RUBRIC_RULE_KINDS:
                found.add(join(path, "kind"), f"must be one of {', '.join(RUBRIC_RULE_KINDS)}")
            elif kind == "weighted":
                share: Any = raw.get("pass_share")
                if not is_number(share) or not 0.0 < float(share) <= 1.0:
                    found.add(join(path, "pass_share"),
                              "is required for a weighted rule: a number in (0, 1]")
                else:
                    out = {"kind": "weighted", "pass_share": float(share)}
            elif "pass_share" in raw:
                found.add(join(path, "pass_share"), "applies to a weighted rule only")
        return out
