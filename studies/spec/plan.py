"""The analysis plan of a study: its schema, primary metric, gates, costs, policy and mix."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from reviewhub.errors import Problems
from studies.criteria import criterion_has_pass_reading
from studies.spec.common import MIX_TOLERANCE, is_number, join
from studies.strata import (
    dimension_possible_labels,
)

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


def _plan_criteria_check(criteria: Mapping[str, Any], context: PlanContext, path: str,
                         problems: Problems) -> None:
    """Each criterion's metric and threshold against the rubric's criterion of that key."""
    for key, entry in criteria.items():
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


def _plan_strata_check(strata: Sequence[str], context: PlanContext, path: str,
                       problems: Problems) -> None:
    """Every stratification dimension the plan names is one of the study's."""
    for i, dim_key in enumerate(strata):
        if dim_key not in context.dimensions:
            known = ", ".join(sorted(context.dimensions)) or "none"
            problems.add(join(join(path, "strata"), i),
                         f"unknown strata dimension '{dim_key}' (the scheme has: {known})")


def _plan_mix_check(mix: Mapping[str, Mapping[str, Any]], context: PlanContext, path: str,
                    problems: Problems) -> None:
    """The deployment mix: known dimensions, shares summing to 1, labels the dimension can take."""
    for dim_key, shares in mix.items():
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
        _plan_criteria_check(spec["criteria"], context, path, problems)
        _plan_strata_check(spec.get("strata", []), context, path, problems)
        _plan_mix_check(spec.get("deployment_mix", {}), context, path, problems)
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
        if not is_number(raw[name]):
            problems.add(join(path, name), f"must be a finite number >= 0 (got {raw[name]!r})")
    previous: tuple[str, float] | None = None
    for level in SEVERITY_LEVELS:
        lpath = join(spath, level)
        if level not in severity:
            problems.add(lpath, f"the cost of severity {level} is missing (give all five levels "
                                "1..5)")
            continue
        value = severity[level]
        if not is_number(value):
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
        if name in raw and not is_number(raw[name]):
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


def plan_strata_defaults(
    params: Mapping[str, Any], spec: Mapping[str, Any] | None, *, min_labels_key: str
) -> dict[str, Any]:
    """`params` with the plan's strata dimensions and its minimum human labels per stratum
    (under `min_labels_key`, the name the report kind gives it) filled in where the caller
    left them out; a plan value that could not be a parameter (no strata, fewer than 2
    labels) is not taken."""
    spec = spec if isinstance(spec, Mapping) else {}
    out = dict(params)
    if "strata" not in out and isinstance(spec.get("strata"), list) and spec["strata"]:
        out["strata"] = [str(s) for s in spec["strata"]]
    min_labels = spec.get("min_human_labels_per_stratum")
    if (
        min_labels_key not in out
        and isinstance(min_labels, int)
        and not isinstance(min_labels, bool)
        and min_labels >= 2
    ):
        out[min_labels_key] = min_labels
    return out


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
        "margin": float(margin) if is_number(margin) else 0.0,
        "gates": {k: float(v) for k, v in (spec.get("gates") or {}).items() if is_number(v)},
        "level": float(level) if is_number(level) else 0.95,
        "mix": mix,
        "mixes": every_mix,
        "strata": [str(s) for s in spec.get("strata") or []],
    }
