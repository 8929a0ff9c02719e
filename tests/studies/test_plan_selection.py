"""The analysis plan's selection sections (`primary_metric`, `margin`, `gates`) and
`plan_selection`, the one reader the selection report uses: paths in every error, the
documented defaults, and a plan's `primary: true` criterion standing for the primary metric."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reviewhub.errors import ValidationFailed
from studies.spec import PlanContext, _Shape, plan_selection, plan_spec_validate

CONTEXT = PlanContext(
    rubric_version=None,
    criteria={
        "ok": _Shape({"scale": "binary", "points": [], "pass_threshold": None,
                      "pass_labels": []}),
        "style": _Shape({"scale": "ordinal", "points": ["1", "2", "3", "4", "5"],
                         "pass_threshold": 3, "pass_labels": []}),
    },
    dimensions={"length": {"key": "length", "kind": "categorical",
                           "config": {"values": ["short", "long"]}}},
)
BASE: dict[str, Any] = {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9}}}


def spec_with(**sections: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **copy.deepcopy(sections)}


def errors_of(spec: Any) -> list[dict[str, str]]:
    with pytest.raises(ValidationFailed) as exc:
        plan_spec_validate(spec, context=CONTEXT)
    return exc.value.details["errors"]


def test_full_selection_sections_validate_and_are_read_back() -> None:
    spec = spec_with(
        primary_metric="ok", margin=0.02,
        gates={"schema_valid_rate": 0.98, "error_rate": 0.02, "latency_p95_ms": 4000,
               "latency_p50_ms": 1500, "cost_per_1000": 2.5, "tokens_per_1000": 900000},
        deployment_mix={"length": {"short": 0.7, "long": 0.25, "unknown": 0.05}},
        confidence_level=0.9,
    )
    out = plan_spec_validate(spec, context=CONTEXT)
    sel = plan_selection(out)
    assert sel["primary_metric"] == "ok"
    assert sel["margin"] == 0.02
    assert sel["gates"]["latency_p95_ms"] == 4000.0 and len(sel["gates"]) == 6
    assert sel["level"] == 0.9
    assert sel["mix"] == {"dimension": "length",
                          "shares": {"short": 0.7, "long": 0.25, "unknown": 0.05}}
    assert sel["mixes"] == {"length": sel["mix"]["shares"]}


def test_defaults_without_selection_sections() -> None:
    sel = plan_selection(plan_spec_validate(spec_with(), context=CONTEXT))
    assert sel == {"primary_metric": "rubric_pass_rate", "margin": 0.0, "gates": {},
                   "level": 0.95, "mix": {}, "mixes": {}, "strata": []}
    assert plan_selection(None)["primary_metric"] == "rubric_pass_rate"


def test_primary_flag_in_criteria_names_the_primary_metric() -> None:
    spec = {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9},
                         "style": {"metric": "mean_score", "threshold": 3.5, "primary": True}}}
    assert plan_selection(plan_spec_validate(spec, context=CONTEXT))["primary_metric"] == "style"


@pytest.mark.parametrize(
    ("sections", "path", "fragment"),
    [
        ({"primary_metric": "nope"}, "spec.primary_metric", "unknown primary metric"),
        ({"primary_metric": "style"}, "spec.primary_metric", "does not name its metric"),
        ({"margin": -0.1}, "spec.margin", "minimum"),
        ({"gates": {"schema_valid_rate": 1.5}}, "spec.gates.schema_valid_rate", "maximum"),
        ({"gates": {"latency_p95_ms": 0}}, "spec.gates.latency_p95_ms", "less than or equal"),
        ({"gates": {"latency_p99_ms": 10}}, "spec.gates", "latency_p99_ms"),
        ({"deployment_mix": {"length": {"short": 0.5, "long": 0.4}}},
         "spec.deployment_mix.length", "sum to 1"),
        ({"deployment_mix": {"length": {"short": 0.5, "medium": 0.5}}},
         "spec.deployment_mix.length.medium", "not a label"),
        ({"deployment_mix": {"region": {"eu": 1.0}}},
         "spec.deployment_mix.region", "unknown strata dimension"),
    ],
)
def test_bad_selection_sections_name_the_field(
    sections: dict[str, Any], path: str, fragment: str
) -> None:
    errors = errors_of(spec_with(**sections))
    assert any(e["path"] == path and fragment in e["message"] for e in errors), errors


def test_the_rubric_primary_metrics_are_accepted() -> None:
    for metric in ("rubric_pass_rate", "expected_cost"):
        out = plan_spec_validate(spec_with(primary_metric=metric), context=CONTEXT)
        assert plan_selection(out)["primary_metric"] == metric
