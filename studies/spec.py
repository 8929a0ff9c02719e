"""Validation of study specs: rubric criteria, strata dimensions, analysis plans and the
`import_study` file. REST and CLI share these functions, so both give the same messages.

Every problem is reported with the JSON path of the offending value (``criteria[2].points``,
``spec.deployment_mix.language``) and raised together as one `ValidationFailed` whose details
are ``{"errors": [{"path", "message"}, ...], "error_count": n}`` (the one collector,
`reviewhub.errors.Problems`, re-exported here). The validators return normalised copies (with
defaults filled in) that the services store as they are.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from reviewhub.errors import MAX_LISTED, Problems

from .criteria import criterion_has_pass_reading
from .strata import DERIVED_SOURCES, METADATA_PREFIX, UNKNOWN, bin_labels, dimension_possible_labels

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
SCALES = ("binary", "ordinal", "pairwise", "categorical", "interval")
DIMENSION_KINDS = ("categorical", "numeric_bins", "boolean")
MAX_ERRORS = MAX_LISTED
MIX_TOLERANCE = 1e-6


def join(prefix: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{prefix}[{part}]"
    return f"{prefix}.{part}" if prefix else part


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def _slug_problem(value: Any, max_length: int = 60) -> str | None:
    if not isinstance(value, str) or not value:
        return "is required and must be a non-empty string"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not SLUG_RE.match(value):
        return ("must be a slug: lowercase letters, digits, '-' and '_', starting with a letter "
                "or digit")
    return None


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
        elif not _is_number(value):
            bad(name, f"{name} must be a finite number (got {value!r})")
            ok = False
    if ok and not float(lo) < float(hi):
        bad("max", f"max must be greater than min (got min {lo!r}, max {hi!r})")
        ok = False
    threshold = raw.get("pass_threshold")
    if threshold is not None:
        if not _is_number(threshold):
            bad("pass_threshold", f"pass_threshold must be a finite number (got {threshold!r})")
        elif ok and not float(lo) <= float(threshold) <= float(hi):
            bad("pass_threshold", f"pass_threshold {threshold!r} is outside the range "
                                  f"[{lo!r}, {hi!r}]")
    if raw.get("points", []) not in (None, []):
        bad("points", "an interval criterion takes no points (its range is min..max)")
    if raw.get("pass_labels", []) not in (None, []):
        bad("pass_labels", "an interval criterion takes no pass_labels (use pass_threshold)")
    return (float(lo), float(hi)) if ok else None


def _criterion_validate(raw: Any, path: str, problems: Problems) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object")
        return None
    key = raw.get("key")
    label = f"criterion '{key}'" if isinstance(key, str) and key else "criterion"
    start = len(problems.items)

    def bad(field_name: str, message: str) -> None:
        problems.add(join(path, field_name), f"{label}: {message}")

    for extra in sorted(set(raw) - _CRITERION_FIELDS):
        bad(extra, "unknown field")
    if (msg := _slug_problem(key)) is not None:
        bad("key", f"key {msg}")
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
    if not _is_number(weight) or float(weight) < 0:
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
        if points_raw not in (None, []):
            bad("points", f"a {scale} criterion takes no points")
        if pass_threshold is not None:
            bad("pass_threshold", f"a {scale} criterion takes no pass_threshold")
        if pass_labels_raw not in (None, []):
            bad("pass_labels", f"a {scale} criterion takes no pass_labels")
    elif scale == "ordinal":
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
                if not _is_int(value):
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
        elif not _is_int(pass_threshold) or not 1 <= int(pass_threshold) <= max(k, 1):
            bad("pass_threshold",
                f"pass_threshold {pass_threshold!r} is outside the scale 1..{k}")
        if pass_labels_raw not in (None, []):
            bad("pass_labels", "an ordinal criterion takes no pass_labels")
    elif scale == "categorical":
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

    if len(problems.items) > start:
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
    if is_hard_gate and not criterion_has_pass_reading(_Shape(crit)):
        bad("is_hard_gate", "a hard gate needs a pass/fail reading (binary, ordinal, "
                            "categorical with pass_labels, or interval with a pass_threshold)")
        return None
    return crit


class _Shape:
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
    own = problems is None
    problems = problems if problems is not None else Problems()
    out: list[dict[str, Any]] = []
    if not isinstance(criteria, list) or not criteria:
        problems.add(path, "must be a non-empty list of criteria")
    else:
        seen: dict[str, int] = {}
        for i, raw in enumerate(criteria):
            crit = _criterion_validate(raw, join(path, i), problems)
            if crit is None:
                continue
            if crit["key"] in seen:
                problems.add(join(join(path, i), "key"),
                             f"criterion key '{crit['key']}' is already used by "
                             f"{join(path, seen[crit['key']])}")
                continue
            seen[crit["key"]] = i
            out.append(crit)
    if own:
        problems.raise_if_any("The rubric")
    return out


# --- Strata dimensions ------------------------------------------------------------------------

_DIMENSION_FIELDS = {"key", "name", "kind", "source", "config"}
_CONFIG_FIELDS = {
    "categorical": {"values", "other"},
    "numeric_bins": {"edges", "quantiles", "labels"},
    "boolean": {"true_label", "false_label"},
}


def _label_ok(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= 200


def _dimension_validate(raw: Any, path: str, problems: Problems) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object")
        return None
    start = len(problems.items)
    key = raw.get("key")
    label = f"dimension '{key}'" if isinstance(key, str) and key else "dimension"

    def bad(field_name: str, message: str) -> None:
        problems.add(join(path, field_name), f"{label}: {message}")

    for extra in sorted(set(raw) - _DIMENSION_FIELDS):
        bad(extra, "unknown field")
    if (msg := _slug_problem(key)) is not None:
        bad("key", f"key {msg}")
    name = raw.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        bad("name", "name must be a string of at most 200 characters")
    kind = raw.get("kind")
    if kind not in DIMENSION_KINDS:
        bad("kind", f"kind must be one of {', '.join(DIMENSION_KINDS)} (got {kind!r})")
    source = raw.get("source")
    if not isinstance(source, str) or not (
        (source.startswith(METADATA_PREFIX) and len(source) > len(METADATA_PREFIX))
        or source in DERIVED_SOURCES
    ):
        bad("source", "source must be 'metadata.<key>' or one of "
                      f"{', '.join(DERIVED_SOURCES)} (got {source!r})")
    elif source in DERIVED_SOURCES and kind in ("categorical", "boolean"):
        bad("source", f"a {kind} dimension reads metadata ('metadata.<key>'); derived lengths "
                      "need numeric_bins")
    elif isinstance(source, str) and len(source) > 200:
        bad("source", "source must be at most 200 characters")
    config_raw = raw.get("config", {})
    if config_raw is None:
        config_raw = {}
    config: dict[str, Any] = {}
    cpath = join(path, "config")
    if not isinstance(config_raw, Mapping):
        bad("config", "config must be an object")
    elif isinstance(kind, str) and kind in _CONFIG_FIELDS:  # a list or object is unhashable
        for extra in sorted(set(config_raw) - _CONFIG_FIELDS[kind]):
            problems.add(join(cpath, extra), f"{label}: unknown config field for {kind}")
        if kind == "categorical":
            values = config_raw.get("values")
            if values is not None:
                if not isinstance(values, list) or not all(_label_ok(v) for v in values):
                    problems.add(join(cpath, "values"),
                                 f"{label}: values must be a list of non-empty strings")
                elif len(set(values)) != len(values):
                    problems.add(join(cpath, "values"), f"{label}: values must be unique")
                else:
                    config["values"] = list(values)
            other = config_raw.get("other", "other")
            if not _label_ok(other):
                problems.add(join(cpath, "other"), f"{label}: other must be a non-empty string")
            elif other == UNKNOWN or other in config.get("values", ()):  # only a valid list
                problems.add(join(cpath, "other"),
                             f"{label}: other label {other!r} clashes with another label")
            elif "values" in config:
                config["other"] = other
        elif kind == "boolean":
            t = config_raw.get("true_label", "yes")
            f = config_raw.get("false_label", "no")
            if not _label_ok(t):
                problems.add(join(cpath, "true_label"), f"{label}: must be a non-empty string")
            if not _label_ok(f):
                problems.add(join(cpath, "false_label"), f"{label}: must be a non-empty string")
            if _label_ok(t) and _label_ok(f) and (t == f or UNKNOWN in (t, f)):
                problems.add(cpath, f"{label}: true_label and false_label must differ from each "
                                    "other and from 'unknown'")
            config = {"true_label": t, "false_label": f}
        else:
            has_edges, has_q = "edges" in config_raw, "quantiles" in config_raw
            if has_edges == has_q:
                problems.add(cpath, f"{label}: numeric_bins needs exactly one of edges or "
                                    "quantiles")
            elif has_edges:
                edges = config_raw["edges"]
                if (not isinstance(edges, list) or not edges
                        or not all(_is_number(e) for e in edges)):
                    problems.add(join(cpath, "edges"),
                                 f"{label}: edges must be a non-empty list of numbers")
                elif any(b <= a for a, b in itertools.pairwise(edges)):
                    problems.add(join(cpath, "edges"),
                                 f"{label}: edges must be strictly increasing (got {edges})")
                else:
                    config["edges"] = list(edges)
                    labels = config_raw.get("labels")
                    if labels is not None:
                        if not isinstance(labels, list) or not all(_label_ok(x) for x in labels):
                            problems.add(join(cpath, "labels"),
                                         f"{label}: labels must be a list of non-empty strings")
                        elif len(set(labels)) != len(labels) or UNKNOWN in labels:
                            problems.add(join(cpath, "labels"),
                                         f"{label}: labels must be unique and not 'unknown'")
                        else:
                            try:
                                bin_labels([float(e) for e in edges], labels)
                            except ValueError as exc:
                                problems.add(join(cpath, "labels"), f"{label}: {exc}")
                            else:
                                config["labels"] = list(labels)
            else:
                q = config_raw["quantiles"]
                if "labels" in config_raw:
                    problems.add(join(cpath, "labels"),
                                 f"{label}: quantile bins are labelled by their edges (their "
                                 "number depends on ties in the data); use edges to name bins")
                if _is_int(q):
                    if not 2 <= q <= 100:
                        problems.add(join(cpath, "quantiles"),
                                     f"{label}: a bin count must be between 2 and 100")
                    else:
                        config["quantiles"] = int(q)
                elif (isinstance(q, list) and q and all(_is_number(x) and 0 < x < 1 for x in q)
                      and all(b > a for a, b in itertools.pairwise(q))):
                    config["quantiles"] = [float(x) for x in q]
                else:
                    problems.add(join(cpath, "quantiles"),
                                 f"{label}: quantiles must be a bin count (int >= 2) or a "
                                 "strictly increasing list of probabilities in (0, 1)")
    if len(problems.items) > start:
        return None
    return {"key": key, "name": name or "", "kind": kind, "source": source, "config": config}


def dimensions_validate(dimensions: Any, *, path: str = "dimensions",
                        problems: Problems | None = None) -> list[dict[str, Any]]:
    """Validate a strata scheme (a list of dimensions, possibly empty); return it normalised."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    out: list[dict[str, Any]] = []
    if not isinstance(dimensions, list):
        problems.add(path, "must be a list of dimensions")
    else:
        seen: dict[str, int] = {}
        for i, raw in enumerate(dimensions):
            dim = _dimension_validate(raw, join(path, i), problems)
            if dim is None:
                continue
            if dim["key"] in seen:
                problems.add(join(join(path, i), "key"),
                             f"dimension key '{dim['key']}' is already used by "
                             f"{join(path, seen[dim['key']])}")
                continue
            seen[dim["key"]] = i
            out.append(dim)
    if own:
        problems.raise_if_any("The strata scheme")
    return out


# --- Analysis plan ----------------------------------------------------------------------------

PLAN_METRICS = {
    # metric -> (scales it applies to, is a rate in [0, 1])
    "pass_rate": (("binary", "ordinal", "categorical", "interval"), True),
    "mean_score": (("ordinal", "interval"), False),
    "win_rate": (("pairwise",), True),
}

SEVERITY_LEVELS = ("1", "2", "3", "4", "5")
POLICY_KINDS = ("cost_optimal", "guaranteed_agreement")
# The defaults of a plan without `costs` / `policy`. They are evalstats.costs'
# DEFAULT_SEVERITY_COSTS / DEFAULT_REJECT_COST / DEFAULT_REVIEW_COST / DEFAULT_UNIT and
# evalstats.selective's DEFAULT_ALPHA / DEFAULT_DELTA / DEFAULT_MIN_COUNT / DEFAULT_GRID_STEP,
# written out again
# because studies may not import evalstats (a test asserts they are equal); the scale is
# justified in evalstats/costs.py and docs/study-spec.md.
DEFAULT_PLAN_COSTS: dict[str, Any] = {
    "unit": "points",
    "severity": {"1": 1.0, "2": 3.0, "3": 10.0, "4": 30.0, "5": 100.0},
    "false_fail": 3.0,
    "review": 1.0,
}
DEFAULT_PLAN_POLICY: dict[str, Any] = {
    "kind": "cost_optimal", "alpha": 0.1, "delta": 0.1, "min_count": 50, "cascade": [],
    "grid_step": 0.001, "score": "confidence",
}
# What the guaranteed-agreement policy thresholds: the judge's own confidence in its decision
# (its probability, as the published method does), or the calibrated P(pass).
POLICY_SCORES = ("confidence", "calibrated")

PLAN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["criteria"],
    "properties": {
        "rubric_version": {"type": "integer", "minimum": 1},
        "criteria": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["metric", "threshold"],
                "properties": {
                    "metric": {"enum": sorted(PLAN_METRICS)},
                    "threshold": {"type": "number"},
                    "direction": {"enum": [">=", "<="]},
                    "every_stratum": {"type": "boolean"},
                    "primary": {"type": "boolean"},
                    "baseline": {"type": "string", "minLength": 1},
                },
            },
        },
        "strata": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "min_human_labels_per_stratum": {"type": "integer", "minimum": 0},
        "deployment_mix": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "confidence_level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "notes": {"type": "string"},
        # Error costs in the lead's unit; every level is required (checked with its path
        # below), a missing section means the documented default scale.
        "costs": {
            "type": "object",
            "additionalProperties": False,
            "required": ["severity", "false_fail", "review"],
            "properties": {
                "unit": {"type": "string", "minLength": 1, "maxLength": 40},
                "severity": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        level: {"type": "number", "minimum": 0} for level in SEVERITY_LEVELS
                    },
                },
                "false_fail": {"type": "number", "minimum": 0},
                "review": {"type": "number", "minimum": 0},
            },
        },
        # The selection report's rule: which metric decides, the difference that counts as
        # real (in that metric's unit: pass rates are 0..1), and the hard gates every
        # candidate must pass whatever its quality (docs/study-spec.md, "Selection").
        "primary_metric": {"type": "string", "minLength": 1, "maxLength": 80},
        "margin": {"type": "number", "minimum": 0},
        "gates": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "schema_valid_rate": {"type": "number", "minimum": 0, "maximum": 1},
                "error_rate": {"type": "number", "minimum": 0, "maximum": 1},
                "latency_p50_ms": {"type": "number", "exclusiveMinimum": 0},
                "latency_p95_ms": {"type": "number", "exclusiveMinimum": 0},
                "cost_per_1000": {"type": "number", "minimum": 0},
                "tokens_per_1000": {"type": "number", "minimum": 0},
            },
        },
        "policy": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind"],
            "properties": {
                "kind": {"enum": list(POLICY_KINDS)},
                "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "min_count": {"type": "integer", "minimum": 1},
                # Candidate thresholds every grid_step from 1 down to 0.5; null: the distinct
                # confidences of the calibration rows.
                "grid_step": {"type": ["number", "null"], "exclusiveMinimum": 0,
                              "maximum": 0.5},
                "score": {"enum": list(POLICY_SCORES)},
                "cascade": {  # [] = no cascade (how a normalised plan without one reads)
                    "type": "array",
                    "uniqueItems": True,
                    # A stage is a judge version named by judge and version (its number, or
                    # the label / config hash it was imported or pushed with), so a plan can
                    # be written before the verdicts exist; a bare integer is a version id
                    # (plans written before names were accepted).
                    "items": {"oneOf": [
                        {"type": "integer", "minimum": 1},
                        {"type": "object", "additionalProperties": False,
                         "required": ["judge", "version"],
                         "properties": {
                             "judge": {"type": "string", "minLength": 1, "maxLength": 200},
                             "version": {"oneOf": [
                                 {"type": "integer", "minimum": 1},
                                 {"type": "string", "minLength": 1, "maxLength": 200},
                             ]},
                         }},
                    ]},
                },
            },
        },
    },
}

_PLAN_VALIDATOR = jsonschema.Draft202012Validator(PLAN_SCHEMA)


def _json_path(prefix: str, parts: Sequence[Any]) -> str:
    path = prefix
    for part in parts:
        path = join(path, part if isinstance(part, int) else str(part))
    return path


@dataclass(frozen=True)
class PlanContext:
    """What a plan is checked against: the rubric's criteria and the strata scheme."""

    rubric_version: int | None
    criteria: Mapping[str, Any]  # key -> criterion-like (scale, points, pass_threshold, ...)
    dimensions: Mapping[str, Mapping[str, Any]]  # key -> normalised dimension


def plan_spec_validate(spec: Any, *, context: PlanContext, path: str = "spec",
                       problems: Problems | None = None) -> dict[str, Any]:
    """Validate an analysis-plan spec (JSON Schema, then cross-checks); return it normalised
    with defaults (`direction` ">=", `every_stratum` true, `rubric_version` the current one)."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    start = len(problems.items)
    errors = sorted(_PLAN_VALIDATOR.iter_errors(spec), key=lambda e: list(e.absolute_path))
    for err in errors:
        problems.add(_json_path(path, list(err.absolute_path)), err.message)
    if len(problems.items) == start and isinstance(spec, Mapping):
        rv = spec.get("rubric_version")
        if rv is not None and context.rubric_version is not None and rv != context.rubric_version:
            problems.add(join(path, "rubric_version"),
                         f"the plan names rubric v{rv} but the current rubric is "
                         f"v{context.rubric_version}")
        for key, entry in spec["criteria"].items():
            cpath = join(join(path, "criteria"), key)
            crit = context.criteria.get(key)
            if crit is None:
                known = ", ".join(sorted(context.criteria)) or "none"
                problems.add(cpath, f"unknown criterion key '{key}' (the rubric has: {known})")
                continue
            metric = entry["metric"]
            scales, is_rate = PLAN_METRICS[metric]
            if crit.scale not in scales:
                fitting = ", ".join(m for m, (s, _) in PLAN_METRICS.items() if crit.scale in s)
                problems.add(join(cpath, "metric"),
                             f"metric {metric} does not apply to the {crit.scale} criterion "
                             f"'{key}' (use one of: {fitting})")
                continue
            if metric == "pass_rate" and not criterion_has_pass_reading(crit):
                fix = "set a pass_threshold" if crit.scale == "interval" else "set pass_labels"
                problems.add(join(cpath, "metric"),
                             f"criterion '{key}' has no pass/fail reading ({fix})")
            threshold = float(entry["threshold"])
            if is_rate and not 0 <= threshold <= 1:
                problems.add(join(cpath, "threshold"),
                             f"a {metric} threshold must be in [0, 1] (got {threshold})")
            if metric == "mean_score" and crit.scale == "interval":
                lo, hi = float(crit.min), float(crit.max)
                if not lo <= threshold <= hi:
                    problems.add(join(cpath, "threshold"),
                                 f"a mean_score threshold must be inside the range "
                                 f"{lo:g}..{hi:g} (got {threshold})")
            elif metric == "mean_score":
                k = len(crit.points or [])
                if not 1 <= threshold <= k:
                    problems.add(join(cpath, "threshold"),
                                 f"a mean_score threshold must be inside the scale 1..{k} "
                                 f"(got {threshold})")
            if "baseline" in entry and metric != "win_rate":
                problems.add(join(cpath, "baseline"), "baseline applies to win_rate only")
        for i, dim_key in enumerate(spec.get("strata", [])):
            if dim_key not in context.dimensions:
                known = ", ".join(sorted(context.dimensions)) or "none"
                problems.add(join(join(path, "strata"), i),
                             f"unknown strata dimension '{dim_key}' (the scheme has: {known})")
        for dim_key, shares in spec.get("deployment_mix", {}).items():
            mpath = join(join(path, "deployment_mix"), dim_key)
            dim = context.dimensions.get(dim_key)
            if dim is None:
                known = ", ".join(sorted(context.dimensions)) or "none"
                problems.add(mpath, f"unknown strata dimension '{dim_key}' (the scheme has: "
                                    f"{known})")
                continue
            total = math.fsum(float(v) for v in shares.values())
            if abs(total - 1.0) > MIX_TOLERANCE:
                problems.add(mpath, f"shares must sum to 1 (±{MIX_TOLERANCE}); they sum to "
                                    f"{total:.9g}")
            possible = dimension_possible_labels(dim)
            if possible is not None:
                for label in shares:
                    if label not in possible:
                        problems.add(join(mpath, label),
                                     f"'{label}' is not a label of dimension '{dim_key}' "
                                     f"(labels: {', '.join(possible)})")
        if "primary_metric" in spec:
            _primary_metric_check(spec["primary_metric"], spec, context,
                                  join(path, "primary_metric"), problems)
        if "costs" in spec:
            _costs_check(spec["costs"], join(path, "costs"), problems)
        if "policy" in spec:
            _policy_check(spec["policy"], join(path, "policy"), problems)
    if own:
        problems.raise_if_any("The analysis plan")
    if len(problems.items) > start or not isinstance(spec, Mapping):
        return {}
    out = dict(spec)
    out["criteria"] = {
        key: {"direction": ">=", "every_stratum": True, **entry}
        for key, entry in spec["criteria"].items()
    }
    # A locked plan must keep meaning what it meant: defaults of a given section are written
    # into it, so a later change of the defaults cannot change a pre-registered plan.
    if "costs" in spec:
        out["costs"] = _costs_normalised(spec["costs"])
    if "policy" in spec:
        out["policy"] = _policy_normalised(spec["policy"])
    if context.rubric_version is not None:
        out["rubric_version"] = context.rubric_version
    return out


# The primary metrics a selection report can decide on besides a criterion's key.
PRIMARY_METRICS = ("rubric_pass_rate", "expected_cost")
# Gates whose bound must stay at or above the threshold; every other gate is a ceiling.
GATES_MIN = ("schema_valid_rate",)
GATE_KEYS = ("schema_valid_rate", "error_rate", "latency_p50_ms", "latency_p95_ms",
             "cost_per_1000", "tokens_per_1000")


def _primary_metric_check(value: str, spec: Mapping[str, Any], context: PlanContext,
                          path: str, problems: Problems) -> None:
    """`primary_metric` names the rubric pass rate, the expected cost, or a criterion that the
    rubric has and the plan's `criteria` section gives a metric."""
    if value in PRIMARY_METRICS:
        return
    if value not in context.criteria:
        known = ", ".join([*PRIMARY_METRICS, *sorted(context.criteria)])
        problems.add(path, f"unknown primary metric '{value}' (use one of: {known})")
        return
    if value not in spec.get("criteria", {}):
        problems.add(path, f"criterion '{value}' is the primary metric but the plan's "
                           f"criteria section does not name its metric")


def _costs_check(raw: Mapping[str, Any], path: str, problems: Problems) -> None:
    """Cross-checks of a schema-valid `costs` section: finite numbers, all five severity
    levels, costs that do not decrease with severity."""
    spath = join(path, "severity")
    severity = raw["severity"]
    for name in ("false_fail", "review"):
        if not _is_number(raw[name]):
            problems.add(join(path, name), f"must be a finite number >= 0 (got {raw[name]!r})")
    previous: tuple[str, float] | None = None
    for level in SEVERITY_LEVELS:
        lpath = join(spath, level)
        if level not in severity:
            problems.add(lpath, f"the cost of severity {level} is missing (give all five levels "
                                "1..5)")
            continue
        value = severity[level]
        if not _is_number(value):
            problems.add(lpath, f"must be a finite number >= 0 (got {value!r})")
            continue
        if previous is not None and float(value) < previous[1]:
            problems.add(lpath, f"severity {level} costs {value}, less than severity "
                                f"{previous[0]} ({previous[1]:g}): costs must not decrease "
                                "with severity")
        previous = (level, float(value))


def _policy_check(raw: Mapping[str, Any], path: str, problems: Problems) -> None:
    """Cross-checks of a schema-valid `policy` section."""
    for name in ("alpha", "delta"):
        if name in raw and not _is_number(raw[name]):
            problems.add(join(path, name), f"must be a number in (0, 1) (got {raw[name]!r})")
    if raw.get("cascade") and raw["kind"] != "guaranteed_agreement":
        problems.add(join(path, "cascade"), "a cascade of judge versions applies to the "
                                            "guaranteed_agreement policy only")


def _costs_normalised(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "unit": raw.get("unit", DEFAULT_PLAN_COSTS["unit"]),
        "severity": {level: float(raw["severity"][level]) for level in SEVERITY_LEVELS},
        "false_fail": float(raw["false_fail"]),
        "review": float(raw["review"]),
    }


def _policy_normalised(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": raw["kind"],
        "alpha": float(raw.get("alpha", DEFAULT_PLAN_POLICY["alpha"])),
        "delta": float(raw.get("delta", DEFAULT_PLAN_POLICY["delta"])),
        "min_count": int(raw.get("min_count", DEFAULT_PLAN_POLICY["min_count"])),
        "cascade": [x if isinstance(x, Mapping) and not isinstance(x, bool) else int(x)
                    for x in raw.get("cascade", [])],
        "grid_step": (None if raw.get("grid_step", DEFAULT_PLAN_POLICY["grid_step"]) is None
                      else float(raw.get("grid_step", DEFAULT_PLAN_POLICY["grid_step"]))),
        "score": str(raw.get("score", DEFAULT_PLAN_POLICY["score"])),
    }


_SECTION_VALIDATORS = {
    name: jsonschema.Draft202012Validator(PLAN_SCHEMA["properties"][name])
    for name in ("costs", "policy")
}


def _plan_section(spec: Mapping[str, Any] | None, name: str) -> Any:
    """The raw section of a plan spec, checked on its own (schema and cross-checks), so that
    a stored spec saved before the section was validated cannot slip through."""
    if spec is None or not isinstance(spec, Mapping) or name not in spec:
        return None
    raw = spec[name]
    path = join("spec", name)
    problems = Problems()
    for err in sorted(_SECTION_VALIDATORS[name].iter_errors(raw),
                      key=lambda e: list(e.absolute_path)):
        problems.add(_json_path(path, list(err.absolute_path)), err.message)
    if not problems:
        (_costs_check if name == "costs" else _policy_check)(raw, path, problems)
    problems.raise_if_any("The analysis plan")
    return raw


def plan_costs(spec: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The plan's error costs with defaults filled in, and whether they are the defaults.

    Returns ``({"unit", "severity": {"1".."5"}, "false_fail", "review"}, is_default)``:
    ``is_default`` is true when the plan (or its absence) states no costs, so that a report
    can say the documented default scale was used. An invalid section raises
    ValidationFailed naming the path.
    """
    raw = _plan_section(spec, "costs")
    if raw is None:
        return copy.deepcopy(DEFAULT_PLAN_COSTS), True
    return _costs_normalised(raw), False


def plan_policy_section_problems(raw: Any) -> list[tuple[str, str]]:
    """(path, message) of each problem of a `policy` section on its own (schema, cross-checks),
    paths under ``spec.policy``: for a policy given elsewhere than in a plan (the calibration
    report's exploratory `policy` parameter)."""
    problems = Problems()
    path = join("spec", "policy")
    for err in sorted(_SECTION_VALIDATORS["policy"].iter_errors(raw),
                      key=lambda e: list(e.absolute_path)):
        problems.add(_json_path(path, list(err.absolute_path)), err.message)
    if not problems:
        _policy_check(raw, path, problems)
    return [(str(e["path"]), str(e["message"])) for e in problems.items]


def plan_policy(spec: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The plan's decision policy with defaults, and whether the whole section is the default.

    Returns ``({"kind", "alpha", "delta", "min_count", "cascade", "grid_step", "score"},
    is_default)``; without a
    `policy` section the policy is cost-optimal decisions (``is_default`` true). A given
    section gets the defaults of the fields it leaves out (``is_default`` false).
    """
    raw = _plan_section(spec, "policy")
    if raw is None:
        return copy.deepcopy(DEFAULT_PLAN_POLICY), True
    return _policy_normalised(raw), False


def plan_selection(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the selection report reads from a plan, with the documented defaults.

    Returns ``{"primary_metric", "margin", "gates", "level", "mix", "mixes", "strata"}``:
    the primary metric ("rubric_pass_rate" unless the plan names another), the margin that
    counts as a real difference (0), the gates (none), the confidence level (0.95), the
    deployment mix of the plan's first mixed dimension as ``{"dimension", "shares"}`` (``{}``
    without one), every dimension's mix (``mixes``) and the plan's strata dimensions. A
    `criteria` entry with ``primary: true`` names the primary metric when `primary_metric` is
    absent.
    """
    spec = spec if isinstance(spec, Mapping) else {}
    primary = spec.get("primary_metric")
    if not isinstance(primary, str) or not primary:
        flagged = [k for k, e in (spec.get("criteria") or {}).items()
                   if isinstance(e, Mapping) and e.get("primary") is True]
        primary = flagged[0] if flagged else "rubric_pass_rate"
    margin = spec.get("margin", 0.0)
    level = spec.get("confidence_level", 0.95)
    mixes = spec.get("deployment_mix") or {}
    every_mix = {str(dim): {str(k): float(v) for k, v in shares.items()}
                 for dim, shares in mixes.items() if isinstance(shares, Mapping)}
    mix: dict[str, Any] = {}
    for dim_key, shares in every_mix.items():
        mix = {"dimension": dim_key, "shares": shares}
        break
    return {
        "primary_metric": primary,
        "margin": float(margin) if _is_number(margin) else 0.0,
        "gates": {k: float(v) for k, v in (spec.get("gates") or {}).items() if _is_number(v)},
        "level": float(level) if _is_number(level) else 0.95,
        "mix": mix,
        "mixes": every_mix,
        "strata": [str(s) for s in spec.get("strata") or []],
    }


# --- The rubric's rule ------------------------------------------------------------------------

# How an output passes the rubric (docs/study-spec.md, "The rubric's rule"): "all" (the
# default) when every criterion with a pass/fail reading passes; "weighted" when it passes
# every hard-gate criterion and at least `pass_share` of the other criteria by weight.
RUBRIC_RULE_KINDS = ("all", "weighted")


def rubric_aggregate_validate(raw: Any, *, path: str = "aggregate",
                              problems: Problems | None = None) -> dict[str, Any]:
    """Validate a rubric's `aggregate` rule; returns its normalised form ({"kind": "all"}
    or {"kind": "weighted", "pass_share": x})."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    out: dict[str, Any] = {"kind": "all"}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object {kind: all} or {kind: weighted, pass_share}")
    else:
        for extra in sorted(set(raw) - {"kind", "pass_share"}):
            problems.add(join(path, extra), "unknown field")
        kind = raw.get("kind", "all")
        if kind not in RUBRIC_RULE_KINDS:
            problems.add(join(path, "kind"), f"must be one of {', '.join(RUBRIC_RULE_KINDS)}")
        elif kind == "weighted":
            share: Any = raw.get("pass_share")
            if not _is_number(share) or not 0.0 < float(share) <= 1.0:
                problems.add(join(path, "pass_share"),
                             "is required for a weighted rule: a number in (0, 1]")
            else:
                out = {"kind": "weighted", "pass_share": float(share)}
        elif "pass_share" in raw:
            problems.add(join(path, "pass_share"), "applies to a weighted rule only")
    if own:
        problems.raise_if_any("The rubric")
    return out


# --- Study fields -----------------------------------------------------------------------------

STUDY_FIELDS = ("name", "slug", "task_description", "deployment_context", "run_conditions",
                "output_schema", "status", "show_reference", "is_simulated")


def study_fields_validate(raw: Mapping[str, Any], *, partial: bool, path: str = "",
                          problems: Problems | None = None) -> dict[str, Any]:
    """Validate study fields (create: name and slug required; partial: only those given)."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    out: dict[str, Any] = {}
    for name in ("name", "slug"):
        if name not in raw and not partial:
            problems.add(join(path, name), "is required")
    if "name" in raw:
        v = raw["name"]
        if not isinstance(v, str) or not v.strip() or len(v) > 200:
            problems.add(join(path, "name"), "must be a non-empty string of at most 200 "
                                             "characters")
        else:
            out["name"] = v.strip()
    if "slug" in raw:
        if (msg := _slug_problem(raw["slug"], 80)) is not None:
            problems.add(join(path, "slug"), msg)
        else:
            out["slug"] = raw["slug"]
    for name in ("task_description", "deployment_context"):
        if name in raw:
            if not isinstance(raw[name], str):
                problems.add(join(path, name), "must be a string")
            else:
                out[name] = raw[name]
    if "run_conditions" in raw:
        if not isinstance(raw["run_conditions"], Mapping):
            problems.add(join(path, "run_conditions"),
                         "must be an object (prompt template, parameters, ...)")
        else:
            out["run_conditions"] = dict(raw["run_conditions"])
    if "output_schema" in raw:
        schema = raw["output_schema"]
        if schema is not None:
            if not isinstance(schema, Mapping):
                problems.add(join(path, "output_schema"), "must be a JSON Schema object or null")
            else:
                try:
                    jsonschema.validators.validator_for(schema).check_schema(schema)
                except jsonschema.SchemaError as exc:
                    problems.add(join(path, "output_schema"),
                                 f"is not a valid JSON Schema: {exc.message}")
                else:
                    out["output_schema"] = dict(schema)
        else:
            out["output_schema"] = None
    if "status" in raw:
        if raw["status"] not in ("draft", "open", "closed"):
            problems.add(join(path, "status"), "must be one of draft, open, closed")
        else:
            out["status"] = raw["status"]
    for name in ("show_reference", "is_simulated"):
        if name in raw:
            if not isinstance(raw[name], bool):
                problems.add(join(path, name), "must be true or false")
            else:
                out[name] = raw[name]
    if own:
        problems.raise_if_any("The study")
    return out


# --- import_study file ------------------------------------------------------------------------

STUDY_FILE_SECTIONS = {"study", "rubric", "strata", "plan", "members"}
ROLES = ("lead", "annotator", "viewer")


@dataclass
class StudyFile:
    """A validated `import_study` document, normalised section by section."""

    study: dict[str, Any]
    owner: str | None
    rubric: list[dict[str, Any]] | None
    rubric_notes: str
    dimensions: list[dict[str, Any]] | None
    plan_spec: dict[str, Any] | None
    plan_notes: str
    plan_lock: bool
    members: list[dict[str, str]]
    rubric_aggregate: dict[str, Any] = field(default_factory=lambda: {"kind": "all"})


def study_file_validate(doc: Any) -> StudyFile:
    """Validate a whole `import_study` document; every problem is reported with its path."""
    problems = Problems()
    if not isinstance(doc, Mapping):
        problems.add("$", "the file must hold an object with a 'study' section")
        problems.raise_if_any("The study file")
        raise AssertionError("unreachable")
    for extra in sorted(set(doc) - STUDY_FILE_SECTIONS):
        expected = ", ".join(sorted(STUDY_FILE_SECTIONS))
        problems.add(extra, f"unknown section (expected: {expected})")
    raw_study = doc.get("study")
    study: dict[str, Any] = {}
    owner: str | None = None
    if not isinstance(raw_study, Mapping):
        problems.add("study", "is required and must be an object")
    else:
        known = {*STUDY_FIELDS, "owner"}
        for extra in sorted(set(raw_study) - known):
            problems.add(join("study", extra), "unknown field")
        study = study_fields_validate({k: v for k, v in raw_study.items() if k in STUDY_FIELDS},
                                      partial=False, path="study", problems=problems)
        if "owner" in raw_study:
            if not isinstance(raw_study["owner"], str) or not raw_study["owner"]:
                problems.add("study.owner", "must be a username")
            else:
                owner = raw_study["owner"]

    rubric: list[dict[str, Any]] | None = None
    rubric_notes = ""
    rubric_aggregate: dict[str, Any] = {"kind": "all"}
    if "rubric" in doc:
        raw = doc["rubric"]
        if not isinstance(raw, Mapping):
            problems.add("rubric", "must be an object with 'criteria' (and optional 'notes', "
                                   "'aggregate')")
        else:
            rubric_aggregate = rubric_aggregate_validate(
                raw.get("aggregate"), path="rubric.aggregate", problems=problems)
            for extra in sorted(set(raw) - {"criteria", "notes", "aggregate"}):
                problems.add(join("rubric", extra), "unknown field")
            if not isinstance(raw.get("notes", ""), str):
                problems.add("rubric.notes", "must be a string")
            else:
                rubric_notes = raw.get("notes", "")
            rubric = criteria_validate(raw.get("criteria"), path="rubric.criteria",
                                       problems=problems)

    dimensions: list[dict[str, Any]] | None = None
    if "strata" in doc:
        raw = doc["strata"]
        # Either the list itself or {"dimensions": [...]}, like the REST body.
        if isinstance(raw, Mapping):
            for extra in sorted(set(raw) - {"dimensions"}):
                problems.add(join("strata", extra), "unknown field")
            dimensions = dimensions_validate(raw.get("dimensions"), path="strata.dimensions",
                                             problems=problems)
        else:
            dimensions = dimensions_validate(raw, path="strata", problems=problems)

    plan_spec: dict[str, Any] | None = None
    plan_notes = ""
    plan_lock = False
    if "plan" in doc:
        raw = doc["plan"]
        if not isinstance(raw, Mapping) or "spec" not in raw:
            problems.add("plan", "must be an object with 'spec' (and optional 'notes', 'lock')")
        else:
            for extra in sorted(set(raw) - {"spec", "notes", "lock"}):
                problems.add(join("plan", extra), "unknown field")
            if not isinstance(raw.get("notes", ""), str):
                problems.add("plan.notes", "must be a string")
            else:
                plan_notes = raw.get("notes", "")
            if not isinstance(raw.get("lock", False), bool):
                problems.add("plan.lock", "must be true or false")
            else:
                plan_lock = raw.get("lock", False)
            if not isinstance(raw["spec"], Mapping):
                problems.add("plan.spec", "must be an object")
            elif rubric is not None and dimensions is not None:
                # Both sections are in the file: check the plan against them now, so that every
                # problem of the file is reported at once. Otherwise `study_import` checks it
                # against the study's stored rubric/strata before writing it.
                context = PlanContext(
                    rubric_version=None,
                    criteria={c["key"]: _Shape(c) for c in rubric},
                    dimensions={d["key"]: d for d in dimensions},
                )
                plan_spec_validate(raw["spec"], context=context, path="plan.spec",
                                   problems=problems)
                plan_spec = dict(raw["spec"])
            else:
                plan_spec = dict(raw["spec"])

    members: list[dict[str, str]] = []
    if "members" in doc:
        raw = doc["members"]
        if not isinstance(raw, list):
            problems.add("members", "must be a list of {username, role}")
        else:
            seen: set[str] = set()
            for i, m in enumerate(raw):
                mpath = join("members", i)
                if not isinstance(m, Mapping):
                    problems.add(mpath, "must be an object {username, role}")
                    continue
                for extra in sorted(set(m) - {"username", "role"}):
                    problems.add(join(mpath, extra), "unknown field")
                username, role = m.get("username"), m.get("role")
                if not isinstance(username, str) or not username:
                    problems.add(join(mpath, "username"), "is required")
                    continue
                if role not in ROLES:
                    problems.add(join(mpath, "role"), f"must be one of {', '.join(ROLES)}")
                    continue
                if username in seen:
                    problems.add(join(mpath, "username"), f"'{username}' is listed twice")
                    continue
                seen.add(username)
                members.append({"username": username, "role": role})
    problems.raise_if_any("The study file")
    return StudyFile(study=study, owner=owner, rubric=rubric, rubric_notes=rubric_notes,
                     dimensions=dimensions, plan_spec=plan_spec, plan_notes=plan_notes,
                     plan_lock=plan_lock, members=members,
                     rubric_aggregate=rubric_aggregate)
