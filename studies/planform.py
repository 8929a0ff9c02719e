"""The analysis plan's browser form: the form's fields from a plan spec, a plan spec from the
posted fields, what a plan says in words, and the difference between two versions.

Pure (no Django): the page views in `studies/plan_views.py` call these and hand the spec to the
plan services (`plan_create`, `plan_update`, `plan_new_version`, `plan_lock`), which validate it
with `studies.spec.plan_spec_validate` like the API and the study file do. This module only
turns text fields into numbers; a field that is not a number is reported at the same spec path
(`spec.margin`, `spec.criteria.correct.threshold`, ...) the validator would use, so every error
of the page names the field in one shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reviewhub.errors import Problems, ValidationFailed

from .spec import (
    DEFAULT_PLAN_COSTS,
    DEFAULT_PLAN_POLICY,
    GATE_KEYS,
    GATES_MIN,
    PLAN_METRICS,
    POLICY_KINDS,
    PRIMARY_METRICS,
    SEVERITY_LEVELS,
    plan_costs,
    plan_policy,
    plan_selection,
)
from .strata import dimension_possible_labels

__all__ = [
    "GATE_LABELS",
    "DiffRow",
    "form_fields",
    "form_initial",
    "form_spec",
    "plan_diff",
    "plan_summary",
]

GATE_LABELS = {
    "schema_valid_rate": "Schema-valid rate, at least (0 to 1)",
    "error_rate": "Error rate, at most (0 to 1)",
    "latency_p50_ms": "Median latency, at most (ms)",
    "latency_p95_ms": "95th-percentile latency, at most (ms)",
    "cost_per_1000": "Cost per 1,000 outputs, at most",
    "tokens_per_1000": "Tokens per 1,000 outputs, at most",
}
PRIMARY_LABELS = {"rubric_pass_rate": "Rubric pass rate", "expected_cost": "Expected cost"}


def _text(value: Any) -> str:
    """A number as a form shows it (no trailing .0 on whole numbers)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _metrics_for(scale: str) -> list[str]:
    return [m for m, (scales, _) in PLAN_METRICS.items() if scale in scales]


# --- spec -> form values -----------------------------------------------------------------------

def form_initial(spec: Mapping[str, Any] | None, *, criteria: Sequence[Any],
                 dimensions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The form's values (field name -> text, `strata` a list) for a stored plan spec (None:
    an empty plan). Costs and policy show the documented defaults, unticked, when the plan
    sets none."""
    spec = spec if isinstance(spec, Mapping) else {}
    values: dict[str, Any] = {
        "primary_metric": str(spec.get("primary_metric") or ""),
        "margin": _text(spec.get("margin")),
        "confidence_level": _text(spec.get("confidence_level")),
        "min_human_labels_per_stratum": _text(spec.get("min_human_labels_per_stratum")),
        "strata": [str(s) for s in spec.get("strata") or []],
    }
    if not values["primary_metric"]:
        flagged = [k for k, e in (spec.get("criteria") or {}).items()
                   if isinstance(e, Mapping) and e.get("primary") is True]
        values["primary_metric"] = flagged[0] if flagged else ""
    entries = spec.get("criteria") or {}
    for c in criteria:
        entry = entries.get(c.key)
        prefix = f"c-{c.key}-"
        metrics = _metrics_for(c.scale)
        if isinstance(entry, Mapping):
            values[prefix + "on"] = "on"
            values[prefix + "metric"] = str(entry.get("metric", ""))
            values[prefix + "direction"] = str(entry.get("direction", ">="))
            values[prefix + "threshold"] = _text(entry.get("threshold"))
            values[prefix + "every_stratum"] = "on" if entry.get("every_stratum", True) else ""
            values[prefix + "baseline"] = str(entry.get("baseline", ""))
        else:
            values[prefix + "metric"] = metrics[0] if metrics else ""
            values[prefix + "direction"] = ">="
            values[prefix + "every_stratum"] = "on"
    for gate in GATE_KEYS:
        values["gate-" + gate] = _text((spec.get("gates") or {}).get(gate))
    mixes = spec.get("deployment_mix") or {}
    for d in dimensions:
        shares = mixes.get(d["key"]) or {}
        labels = dimension_possible_labels(d)
        if labels is None:
            values[f"mix-{d['key']}-text"] = "\n".join(f"{k}={_text(v)}"
                                                        for k, v in shares.items())
        else:
            for j, label in enumerate(labels):
                values[f"mix-{d['key']}-{j}"] = _text(shares.get(label))
    costs = spec.get("costs")
    shown = costs if isinstance(costs, Mapping) else DEFAULT_PLAN_COSTS
    values["costs_on"] = "on" if isinstance(costs, Mapping) else ""
    values["costs-unit"] = str(shown.get("unit", DEFAULT_PLAN_COSTS["unit"]))
    for level in SEVERITY_LEVELS:
        values["costs-severity-" + level] = _text((shown.get("severity") or {}).get(level))
    values["costs-false_fail"] = _text(shown.get("false_fail"))
    values["costs-review"] = _text(shown.get("review"))
    policy = spec.get("policy")
    pshown = policy if isinstance(policy, Mapping) else DEFAULT_PLAN_POLICY
    values["policy_on"] = "on" if isinstance(policy, Mapping) else ""
    values["policy-kind"] = str(pshown.get("kind", "cost_optimal"))
    for name in ("alpha", "delta", "min_count"):
        values["policy-" + name] = _text(pshown.get(name, DEFAULT_PLAN_POLICY[name]))
    values["policy-cascade"] = ", ".join(str(x) for x in pshown.get("cascade") or [])
    return values


def form_values(post: Any, *, criteria: Sequence[Any],
                dimensions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The form's values from a POST (a QueryDict or a plain mapping of strings)."""
    names = ["primary_metric", "margin", "confidence_level", "min_human_labels_per_stratum",
             "costs_on", "costs-unit", "costs-false_fail", "costs-review", "policy_on",
             "policy-kind", "policy-alpha", "policy-delta", "policy-min_count",
             "policy-cascade"]
    names += ["costs-severity-" + level for level in SEVERITY_LEVELS]
    names += ["gate-" + g for g in GATE_KEYS]
    for c in criteria:
        names += [f"c-{c.key}-{f}" for f in ("on", "metric", "direction", "threshold",
                                              "every_stratum", "baseline")]
    for d in dimensions:
        labels = dimension_possible_labels(d)
        if labels is None:
            names.append(f"mix-{d['key']}-text")
        else:
            names += [f"mix-{d['key']}-{j}" for j in range(len(labels))]
    values: dict[str, Any] = {name: str(post.get(name, "") or "") for name in names}
    getlist = getattr(post, "getlist", None)
    strata = getlist("strata") if getlist else post.get("strata", [])
    values["strata"] = [str(s) for s in (strata or [])]
    return values


# --- form values -> spec -----------------------------------------------------------------------

def _number(values: Mapping[str, Any], name: str, path: str, problems: Problems, *,
            integer: bool = False) -> float | int | None:
    text = str(values.get(name, "")).strip()
    if not text:
        return None
    try:
        number = int(text) if integer else float(text)
    except ValueError:
        problems.add(path, f"must be {'a whole number' if integer else 'a number'} "
                           f"(got {text!r})")
        return None
    if isinstance(number, float) and not math.isfinite(number):
        problems.add(path, f"must be a finite number (got {text!r})")
        return None
    return number


def _criteria_entries(values: Mapping[str, Any], criteria: Sequence[Any], primary: str,
                      base_flagged: str, problems: Problems) -> dict[str, Any]:
    """The plan's criteria: one entry per criterion ticked in the form."""
    entries: dict[str, Any] = {}
    for c in criteria:
        prefix = f"c-{c.key}-"
        if values.get(prefix + "on") != "on":
            continue
        path = f"spec.criteria.{c.key}"
        entry: dict[str, Any] = {"metric": str(values.get(prefix + "metric") or "")}
        threshold = _number(values, prefix + "threshold", path + ".threshold", problems)
        if threshold is None and not str(values.get(prefix + "threshold", "")).strip():
            problems.add(path + ".threshold", f"criterion '{c.key}': a threshold is required "
                                              "when the criterion is in the plan")
        entry["threshold"] = threshold
        entry["direction"] = str(values.get(prefix + "direction") or ">=")
        entry["every_stratum"] = values.get(prefix + "every_stratum") == "on"
        baseline = str(values.get(prefix + "baseline") or "").strip()
        if baseline:
            entry["baseline"] = baseline
        if primary == c.key and c.key == base_flagged:
            entry["primary"] = True  # kept as the stored plan says it
        entries[c.key] = entry
    return entries


def _mix_section(values: Mapping[str, Any], dimensions: Sequence[Mapping[str, Any]],
                 problems: Problems) -> dict[str, dict[str, Any]]:
    """The deployment mix: a share per label (fields per known label, or label=share lines)."""
    mixes: dict[str, dict[str, Any]] = {}
    for d in dimensions:
        key = d["key"]
        labels = dimension_possible_labels(d)
        shares: dict[str, Any] = {}
        if labels is None:
            text = str(values.get(f"mix-{key}-text") or "")
            for n, line in enumerate(text.replace(",", "\n").splitlines(), start=1):
                if not line.strip():
                    continue
                label, sep, share = line.partition("=")
                if not sep or not label.strip():
                    problems.add(f"spec.deployment_mix.{key}",
                                 f"line {n}: write one label=share per line (got {line.strip()!r})")
                    continue
                number = _number({"v": share}, "v", f"spec.deployment_mix.{key}.{label.strip()}",
                                  problems)
                if number is not None:
                    shares[label.strip()] = number
        else:
            for j, label in enumerate(labels):
                number = _number(values, f"mix-{key}-{j}", f"spec.deployment_mix.{key}.{label}",
                                 problems)
                if number is not None:
                    shares[label] = number
        if shares:
            mixes[key] = shares
    return mixes


def _costs_section(values: Mapping[str, Any], problems: Problems) -> dict[str, Any]:
    """The plan's costs: unit, severity costs, and the false-fail and review costs."""
    costs: dict[str, Any] = {"unit": str(values.get("costs-unit") or "").strip()
                             or DEFAULT_PLAN_COSTS["unit"], "severity": {}}
    for level in SEVERITY_LEVELS:
        number = _number(values, "costs-severity-" + level, f"spec.costs.severity.{level}",
                         problems)
        if number is not None:
            costs["severity"][level] = number
    for name in ("false_fail", "review"):
        number = _number(values, "costs-" + name, f"spec.costs.{name}", problems)
        if number is None:
            problems.add(f"spec.costs.{name}", "is required when the plan sets its costs")
        costs[name] = number
    return costs


def _policy_section(values: Mapping[str, Any], problems: Problems) -> dict[str, Any]:
    """The decision policy: kind, its numbers and the judge versions of a cascade."""
    policy: dict[str, Any] = {"kind": str(values.get("policy-kind") or "")}
    for name, integer in (("alpha", False), ("delta", False), ("min_count", True)):
        number = _number(values, "policy-" + name, f"spec.policy.{name}", problems,
                         integer=integer)
        if number is not None:
            policy[name] = number
    cascade: list[int] = []
    for part in str(values.get("policy-cascade") or "").replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit():
            problems.add("spec.policy.cascade", f"judge version ids are whole numbers "
                                                f"(got {part!r})")
            continue
        cascade.append(int(part))
    if cascade:
        policy["cascade"] = cascade
    return policy


def form_spec(values: Mapping[str, Any], *, base_spec: Mapping[str, Any] | None,
              criteria: Sequence[Any], dimensions: Sequence[Mapping[str, Any]]
              ) -> tuple[dict[str, Any], Problems]:
    """The plan spec the form's values describe, and the fields that are not numbers.

    Sections the form does not edit (the spec's own `notes`) are kept from `base_spec`. The
    spec is not validated here: the plan services do that, with the paths used here.
    """
    problems = Problems()
    base = dict(base_spec) if isinstance(base_spec, Mapping) else {}
    spec: dict[str, Any] = {}
    if isinstance(base.get("notes"), str):
        spec["notes"] = base["notes"]
    primary = str(values.get("primary_metric") or "").strip()
    flagged = [k for k, e in (base.get("criteria") or {}).items()
               if isinstance(e, Mapping) and e.get("primary") is True]
    base_flagged = flagged[0] if flagged else ""
    spec["criteria"] = _criteria_entries(values, criteria, primary, base_flagged, problems)
    # The primary metric is written the way the stored plan wrote it: a stored `primary: true`
    # flag stays a flag, so that saving unchanged shows no difference.
    if primary and (base.get("primary_metric") or primary != base_flagged):
        spec["primary_metric"] = primary
    for name, integer in (("margin", False), ("confidence_level", False),
                          ("min_human_labels_per_stratum", True)):
        number = _number(values, name, f"spec.{name}", problems, integer=integer)
        if number is not None:
            spec[name] = number
    strata = [s for s in values.get("strata") or [] if s]
    if strata:
        spec["strata"] = strata
    gates: dict[str, Any] = {}
    for gate in GATE_KEYS:
        number = _number(values, "gate-" + gate, f"spec.gates.{gate}", problems)
        if number is not None:
            gates[gate] = number
    if gates:
        spec["gates"] = gates
    mixes = _mix_section(values, dimensions, problems)
    if mixes:
        spec["deployment_mix"] = mixes
    if values.get("costs_on") == "on":
        spec["costs"] = _costs_section(values, problems)
    if values.get("policy_on") == "on":
        spec["policy"] = _policy_section(values, problems)
    return spec, problems


# --- rendering ---------------------------------------------------------------------------------

def _errors_at(errors: Mapping[str, str], path: str, *, prefix: bool = False) -> str:
    found = [m for p, m in errors.items() if p == path or (prefix and p.startswith(path + "."))]
    return "; ".join(found)


def _mix_fields(dimensions: Sequence[Mapping[str, Any]], errors: Mapping[str, str],
                field: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    """The deployment-mix fields: a share per known label, or one text of label=share lines."""
    mixes = []
    for d in dimensions:
        labels = dimension_possible_labels(d)
        path = f"spec.deployment_mix.{d['key']}"
        entry: dict[str, Any] = {"key": d["key"], "name": d.get("name") or d["key"],
                                 "error": _errors_at(errors, path)}
        if labels is None:
            entry["text"] = field(f"mix-{d['key']}-text", path, f"Mix of {d['key']}",
                                  prefix=True)
        else:
            # A problem of the whole mix (shares not summing to 1) marks every share.
            entry["shares"] = [field(f"mix-{d['key']}-{j}", f"{path}.{label}",
                                     f"Share of {label}", invalid=bool(entry["error"]))
                               for j, label in enumerate(labels)]
        mixes.append(entry)
    return mixes


def form_fields(values: Mapping[str, Any], *, criteria: Sequence[Any],
                dimensions: Sequence[Mapping[str, Any]], errors: Mapping[str, str]
                ) -> dict[str, Any]:
    """What the template lays out: every field with its name, value, spec path and error."""

    def field(name: str, path: str, label: str, *, prefix: bool = False,
              **extra: Any) -> dict[str, Any]:
        return {"name": name, "id": "f-" + name, "path": path, "label": label,
                "value": values.get(name, ""), "error": _errors_at(errors, path, prefix=prefix),
                **extra}

    primary_choices = [("", "Not set (the rubric pass rate, the default)")]
    primary_choices += [(m, PRIMARY_LABELS[m]) for m in PRIMARY_METRICS]
    primary_choices += [(c.key, f"Criterion: {c.name} ({c.key})") for c in criteria]
    rows = []
    for c in criteria:
        p = f"c-{c.key}-"
        path = f"spec.criteria.{c.key}"
        rows.append({
            "key": c.key, "name": c.name, "scale": c.scale,
            "on": field(p + "on", path, f"Include {c.name}"),
            "metric": field(p + "metric", path + ".metric", f"Metric of {c.name}",
                            choices=[(m, m) for m in _metrics_for(c.scale)]),
            "direction": field(p + "direction", path + ".direction", f"Direction of {c.name}",
                               choices=[(">=", "≥ (at least)"), ("<=", "≤ (at most)")]),
            "threshold": field(p + "threshold", path + ".threshold", f"Threshold of {c.name}"),
            "every_stratum": field(p + "every_stratum", path + ".every_stratum",
                                   f"{c.name}: in every stratum"),
            "baseline": field(p + "baseline", path + ".baseline",
                              f"Baseline candidate of {c.name}") if c.scale == "pairwise"
            else None,
            "error": _errors_at(errors, path),
        })
    mixes = _mix_fields(dimensions, errors, field)
    chosen = set(values.get("strata") or [])
    return {
        "primary_metric": field("primary_metric", "spec.primary_metric", "Primary metric",
                                choices=primary_choices),
        "margin": field("margin", "spec.margin", "Margin"),
        "confidence_level": field("confidence_level", "spec.confidence_level",
                                  "Confidence level"),
        "min_labels": field("min_human_labels_per_stratum",
                            "spec.min_human_labels_per_stratum",
                            "Human labels needed per stratum"),
        "strata": [{"key": d["key"], "name": d.get("name") or d["key"],
                    "checked": d["key"] in chosen} for d in dimensions],
        "strata_error": _errors_at(errors, "spec.strata", prefix=True)
        + "".join(m for p, m in errors.items() if p.startswith("spec.strata[")),
        "criteria": rows,
        "criteria_error": _errors_at(errors, "spec.criteria"),
        "gates": [field("gate-" + g, f"spec.gates.{g}", GATE_LABELS[g]) for g in GATE_KEYS],
        "mixes": mixes,
        "costs_on": values.get("costs_on") == "on",
        "costs": [field("costs-unit", "spec.costs.unit", "Unit")]
        + [field("costs-severity-" + lv, f"spec.costs.severity.{lv}",
                 f"Passing a failure of severity {lv}") for lv in SEVERITY_LEVELS]
        + [field("costs-false_fail", "spec.costs.false_fail", "Rejecting a good output"),
           field("costs-review", "spec.costs.review", "One human review")],
        "costs_error": _errors_at(errors, "spec.costs"),
        "policy_on": values.get("policy_on") == "on",
        "policy_kind": field("policy-kind", "spec.policy.kind", "Policy",
                             choices=[(k, k) for k in POLICY_KINDS]),
        "policy": [field("policy-alpha", "spec.policy.alpha", "alpha (allowed disagreement)"),
                   field("policy-delta", "spec.policy.delta", "delta (failure probability)"),
                   field("policy-min_count", "spec.policy.min_count",
                         "Minimum outputs above the threshold"),
                   field("policy-cascade", "spec.policy.cascade",
                         "Judge cascade (judge version ids, comma-separated)", prefix=True)],
        "policy_error": _errors_at(errors, "spec.policy"),
    }


# --- what a plan says --------------------------------------------------------------------------

def _pct(value: float) -> str:
    return f"{value * 100:g} %"


def plan_summary(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plan in words for the review page: the selection inputs with their documented defaults
    (each marked when it is a default), the thresholds, gates, costs and policy."""
    spec = spec if isinstance(spec, Mapping) else {}
    sel = plan_selection(spec)
    primary = sel["primary_metric"]
    rows: list[tuple[str, str]] = [
        ("Primary metric", PRIMARY_LABELS.get(primary, primary)
         + ("" if spec.get("primary_metric") or primary != "rubric_pass_rate"
            else " (default: the plan names none)")),
        ("Margin (a real difference is more than)", _text(sel["margin"])
         + ("" if "margin" in spec else " (default)")),
        ("Confidence level", _pct(sel["level"]) + ("" if "confidence_level" in spec
                                                   else " (default)")),
        ("Human labels needed per stratum",
         _text(spec.get("min_human_labels_per_stratum")) or "not set"),
        ("Strata reported", ", ".join(sel["strata"]) or "none named"),
    ]
    thresholds = []
    for key, entry in (spec.get("criteria") or {}).items():
        if not isinstance(entry, Mapping):
            continue
        thresholds.append({
            "key": key, "metric": entry.get("metric"),
            "rule": f"{entry.get('direction', '>=')} {_text(entry.get('threshold'))}",
            "every_stratum": entry.get("every_stratum", True),
            "primary": key == primary, "baseline": entry.get("baseline", ""),
        })
    gates = [{"key": g, "label": GATE_LABELS[g],
              "rule": f"{'≥' if g in GATES_MIN else '≤'} {_text(v)}"}
             for g, v in sel["gates"].items()]
    mixes = [{"dimension": dim, "shares": [(label, _pct(share)) for label, share in
                                           shares.items()]}
             for dim, shares in sel["mixes"].items()]
    try:
        costs, costs_default = plan_costs(spec)
        policy, policy_default = plan_policy(spec)
    except ValidationFailed:  # a stored spec the current rules refuse: shown as stored (json)
        costs, costs_default, policy, policy_default = {}, False, {}, False
    return {"rows": rows, "thresholds": thresholds, "gates": gates, "mixes": mixes,
            "costs": costs, "costs_default": costs_default,
            "severity": [(lv, _text(costs.get("severity", {}).get(lv))) for lv in
                         SEVERITY_LEVELS] if costs else [],
            "policy": policy, "policy_default": policy_default,
            "json": json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False)}


# --- difference between versions ---------------------------------------------------------------

@dataclass(frozen=True)
class DiffRow:
    """One changed value: its path in the spec, the value before and after (JSON text, "" when
    absent) and whether it was added, removed or changed."""

    path: str
    before: str
    after: str
    change: str


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key in sorted(value, key=str):
            _flatten(value[key], f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = value


def plan_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
              ) -> list[DiffRow]:
    """Every leaf value that differs between two plan specs (lists compared whole), by path."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(before or {}, "", a)
    _flatten(after or {}, "", b)
    a.pop("", None)
    b.pop("", None)
    rows = []
    for path in sorted(set(a) | set(b)):
        if path in a and path in b and a[path] == b[path]:
            continue
        change = "added" if path not in a else "removed" if path not in b else "changed"
        rows.append(DiffRow(
            path=path,
            before=json.dumps(a[path], ensure_ascii=False) if path in a else "",
            after=json.dumps(b[path], ensure_ascii=False) if path in b else "",
            change=change))
    return rows
