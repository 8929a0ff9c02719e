"""The analysis plan's `costs` and `policy` sections: validation with paths, defaults that say
so, the same defaults as evalstats (studies may not import evalstats, so they are written out
twice and compared here), and a 400 naming the field from the plans endpoint."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from evalstats.costs import (
    DEFAULT_COST_MODEL,
    DEFAULT_REJECT_COST,
    DEFAULT_REVIEW_COST,
    DEFAULT_SEVERITY_COSTS,
    DEFAULT_UNIT,
    CostModel,
)
from evalstats.selective import (
    DEFAULT_ALPHA,
    DEFAULT_DELTA,
    DEFAULT_GRID_STEP,
    DEFAULT_MIN_COUNT,
)
from reviewhub.errors import AppError, ValidationFailed
from studies.spec import (
    PlanContext,
    _Shape,
    plan_costs,
    plan_policy,
    plan_spec_validate,
    study_file_validate,
)

from .factories import BINARY

CONTEXT = PlanContext(
    rubric_version=None,
    criteria={"ok": _Shape({"scale": "binary", "points": [], "pass_threshold": None,
                            "pass_labels": []})},
    dimensions={},
)
COSTS: dict[str, Any] = {
    "unit": "EUR",
    "severity": {"1": 0.5, "2": 2, "3": 8, "4": 40, "5": 400},
    "false_fail": 1.5,
    "review": 0.8,
}
POLICY: dict[str, Any] = {"kind": "guaranteed_agreement", "alpha": 0.05, "delta": 0.1,
                          "min_count": 50, "cascade": [3, 7]}
BASE: dict[str, Any] = {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9}}}


def spec_with(**sections: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **copy.deepcopy(sections)}


def errors_of(spec: Any) -> list[dict[str, str]]:
    with pytest.raises(ValidationFailed) as exc:
        plan_spec_validate(spec, context=CONTEXT)
    return exc.value.details["errors"]


# --- defaults ----------------------------------------------------------------------------------

def test_defaults_equal_evalstats_defaults():
    costs, is_default = plan_costs(None)
    assert is_default
    assert costs == {
        "unit": DEFAULT_UNIT,
        "severity": {str(i + 1): c for i, c in enumerate(DEFAULT_SEVERITY_COSTS)},
        "false_fail": DEFAULT_REJECT_COST,
        "review": DEFAULT_REVIEW_COST,
    }
    assert CostModel.from_json({**costs, "is_default": True}) == DEFAULT_COST_MODEL
    policy, is_default = plan_policy(None)
    assert is_default
    assert policy == {"kind": "cost_optimal", "alpha": DEFAULT_ALPHA, "delta": DEFAULT_DELTA,
                      "min_count": DEFAULT_MIN_COUNT, "cascade": [],
                      "grid_step": DEFAULT_GRID_STEP, "score": "confidence"}


def test_a_plan_without_costs_gets_the_defaults_and_says_so():
    spec = plan_spec_validate(spec_with(), context=CONTEXT)
    assert "costs" not in spec and "policy" not in spec  # nothing invented into the plan
    assert plan_costs(spec) == plan_costs(None)
    assert plan_costs(spec)[1] is True and plan_policy(spec)[1] is True
    # The defaults handed out are copies: a caller that edits them changes nothing.
    plan_costs(spec)[0]["severity"]["5"] = -1
    assert plan_costs(None)[0]["severity"]["5"] == 100.0


def test_given_sections_are_used_and_normalised():
    spec = plan_spec_validate(spec_with(costs=COSTS, policy=POLICY), context=CONTEXT)
    costs, is_default = plan_costs(spec)
    assert not is_default
    assert costs == {"unit": "EUR", "severity": {"1": 0.5, "2": 2.0, "3": 8.0, "4": 40.0,
                                                 "5": 400.0},
                     "false_fail": 1.5, "review": 0.8}
    assert spec["costs"] == costs  # the stored plan holds exactly what is used
    policy, is_default = plan_policy(spec)
    assert not is_default and policy == {**POLICY, "alpha": 0.05, "grid_step": 0.001,
                                         "score": "confidence"}
    # Fields left out get the defaults, written into the stored plan so a locked plan keeps
    # its meaning if the defaults change.
    no_unit = {k: v for k, v in COSTS.items() if k != "unit"}
    spec = plan_spec_validate(spec_with(costs=no_unit, policy={"kind": "guaranteed_agreement"}),
                              context=CONTEXT)
    assert spec["costs"]["unit"] == "points"
    assert spec["policy"] == {"kind": "guaranteed_agreement", "alpha": 0.1, "delta": 0.1,
                              "min_count": 50, "cascade": [], "grid_step": 0.001,
                              "score": "confidence"}
    assert plan_policy(spec) == (spec["policy"], False)
    # Validating a normalised plan again changes nothing (a lock re-checks the stored spec).
    assert plan_spec_validate(spec, context=CONTEXT) == spec
    cost_optimal = plan_spec_validate(spec_with(policy={"kind": "cost_optimal"}),
                                      context=CONTEXT)
    assert plan_spec_validate(cost_optimal, context=CONTEXT) == cost_optimal
    # Equal levels are allowed (non-decreasing), and zero costs are costs.
    flat = {**COSTS, "severity": dict.fromkeys(("1", "2", "3", "4", "5"), 0), "review": 0}
    assert plan_costs(plan_spec_validate(spec_with(costs=flat), context=CONTEXT))[0]["review"] == 0


# --- bad input names the field -----------------------------------------------------------------

def _sev(**levels: Any) -> dict[str, Any]:
    sev = {**COSTS["severity"], **{k.lstrip("_"): v for k, v in levels.items()}}
    return {**COSTS, "severity": {k: v for k, v in sev.items() if v is not ...}}


@pytest.mark.parametrize(
    ("section", "path", "fragment"),
    [
        ({"costs": _sev(_3=-1)}, "spec.costs.severity.3", "minimum"),
        ({"costs": _sev(_3=1)}, "spec.costs.severity.3", "must not decrease"),
        ({"costs": _sev(_4=...)}, "spec.costs.severity.4", "missing"),
        ({"costs": _sev(_6=500)}, "spec.costs.severity", "Additional properties"),
        ({"costs": _sev(_2=math.nan)}, "spec.costs.severity.2", "finite"),
        ({"costs": _sev(_5="100")}, "spec.costs.severity.5", "not of type 'number'"),
        ({"costs": _sev(_1=True)}, "spec.costs.severity.1", "not of type 'number'"),
        ({"costs": {**COSTS, "severity": [1, 3, 10, 30, 100]}}, "spec.costs.severity",
         "not of type 'object'"),
        ({"costs": [1, 3, 10, 30, 100]}, "spec.costs", "not of type 'object'"),
        ({"costs": {**COSTS, "false_fail": -2}}, "spec.costs.false_fail", "minimum"),
        ({"costs": {**COSTS, "false_fail": math.inf}}, "spec.costs.false_fail", "finite"),
        ({"costs": {**COSTS, "review": "cheap"}}, "spec.costs.review", "not of type"),
        ({"costs": {k: v for k, v in COSTS.items() if k != "review"}}, "spec.costs",
         "'review' is a required property"),
        ({"costs": {**COSTS, "currency": "EUR"}}, "spec.costs", "Additional properties"),
        ({"costs": {**COSTS, "unit": ""}}, "spec.costs.unit", "should be non-empty"),
        ({"policy": {**POLICY, "alpha": 0}}, "spec.policy.alpha", "minimum"),
        ({"policy": {**POLICY, "alpha": 1}}, "spec.policy.alpha", "maximum"),
        ({"policy": {**POLICY, "delta": 1.5}}, "spec.policy.delta", "maximum"),
        ({"policy": {**POLICY, "delta": -0.1}}, "spec.policy.delta", "minimum"),
        ({"policy": {**POLICY, "alpha": math.nan}}, "spec.policy.alpha", "(0, 1)"),
        ({"policy": {**POLICY, "alpha": True}}, "spec.policy.alpha", "not of type"),
        ({"policy": {**POLICY, "min_count": 0}}, "spec.policy.min_count", "minimum"),
        ({"policy": {**POLICY, "min_count": 2.5}}, "spec.policy.min_count",
         "not of type 'integer'"),
        ({"policy": {**POLICY, "kind": "majority"}}, "spec.policy.kind", "is not one of"),
        ({"policy": {"alpha": 0.1}}, "spec.policy", "'kind' is a required property"),
        ({"policy": {**POLICY, "cascade": [3, 3]}}, "spec.policy.cascade", "non-unique"),
        ({"policy": {**POLICY, "cascade": [0]}}, "spec.policy.cascade[0]", "not valid"),
        ({"policy": {**POLICY, "cascade": [{"judge": "j"}]}}, "spec.policy.cascade[0]",
         "not valid"),
        ({"policy": {**POLICY, "grid_step": 0}}, "spec.policy.grid_step", "less than or equal"),
        ({"policy": {**POLICY, "grid_step": 0.7}}, "spec.policy.grid_step", "maximum"),
        ({"policy": {**POLICY, "score": "raw"}}, "spec.policy.score", "is not one of"),
        ({"policy": {"kind": "cost_optimal", "cascade": [3]}}, "spec.policy.cascade",
         "guaranteed_agreement policy only"),
    ],
)
def test_bad_sections_name_the_path(section, path, fragment):
    errors = errors_of(spec_with(**section))
    assert any(e["path"] == path and fragment in e["message"] for e in errors), errors


def test_every_problem_of_the_severity_scale_is_reported_at_once():
    costs = {**COSTS, "severity": {"1": 5, "2": 1, "4": 0.5, "5": 100}}
    paths = {e["path"] for e in errors_of(spec_with(costs=costs))}
    # 2 is below 1, 3 is missing, 4 is below 2 (the last level given).
    assert paths == {"spec.costs.severity.2", "spec.costs.severity.3", "spec.costs.severity.4"}


def test_reading_an_invalid_stored_section_names_the_path():
    # A spec stored before these sections were validated must not reach the statistics.
    with pytest.raises(ValidationFailed) as exc:
        plan_costs({"costs": _sev(_3=1)})
    assert exc.value.details["errors"][0]["path"] == "spec.costs.severity.3"
    with pytest.raises(ValidationFailed) as exc:
        plan_policy({"policy": {"kind": "guaranteed_agreement", "delta": 2}})
    assert exc.value.details["errors"][0]["path"] == "spec.policy.delta"


WRONG_TYPES: list[Any] = [{}, {"a": [1]}, [], [[1], {"b": 2}], 0, -1.5, True, None, "x",
                          math.nan]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def test_every_field_of_the_wrong_type_is_a_validation_error_never_a_crash():
    doc = spec_with(costs=COSTS, policy=POLICY)
    crashes = []
    for path in [p for p in _paths(doc) if p and p[0] in ("costs", "policy")]:
        for value in WRONG_TYPES:
            bad = copy.deepcopy(doc)
            node = bad
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
            for fn in (lambda s: plan_spec_validate(s, context=CONTEXT), plan_costs,
                       plan_policy):
                try:
                    fn(bad)
                except AppError:
                    pass
                except Exception as exc:  # the defect this test exists for
                    crashes.append((path, value, f"{type(exc).__name__}: {exc}"))
    assert not crashes, crashes[:10]


def test_the_study_file_checks_the_sections_with_their_paths():
    doc = {
        "study": {"name": "S", "slug": "s"},
        "rubric": {"criteria": [BINARY]},
        "strata": [],
        "plan": {"spec": spec_with(costs=_sev(_2=0.1))},
    }
    with pytest.raises(ValidationFailed) as exc:
        study_file_validate(doc)
    assert [e["path"] for e in exc.value.details["errors"]] == ["plan.spec.costs.severity.2"]


# --- the plans endpoint ------------------------------------------------------------------------

@pytest.mark.django_db
def test_plans_endpoint_refuses_bad_costs_with_a_400_naming_the_field(study, lead_client):
    assert lead_client.put("/api/studies/alpha/rubric", {"criteria": [BINARY]},
                           format="json").status_code == 201
    r = lead_client.post("/api/studies/alpha/plans", {"spec": spec_with(costs=_sev(_3=1))},
                         format="json")
    assert r.status_code == 400, r.content
    body = r.json()["error"]
    assert body["code"] == "validation_failed"
    assert "spec.costs.severity.3" in body["message"]
    assert [e["path"] for e in body["details"]["errors"]] == ["spec.costs.severity.3"]

    r = lead_client.post("/api/studies/alpha/plans",
                         {"spec": spec_with(policy={**POLICY, "delta": 1})}, format="json")
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0]["path"] == "spec.policy.delta"

    r = lead_client.post("/api/studies/alpha/plans",
                         {"spec": spec_with(costs=COSTS, policy=POLICY)}, format="json")
    assert r.status_code == 201, r.content
    stored = r.json()["spec"]
    assert stored["costs"]["severity"]["5"] == 400.0 and stored["costs"]["unit"] == "EUR"
    assert stored["policy"]["cascade"] == [3, 7]
    assert plan_costs(stored) == (stored["costs"], False)
