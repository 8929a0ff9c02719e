"""A study with a locked plan and a shipped candidate, and its deployment."""

from __future__ import annotations

from typing import Any

import pytest

from monitoring.models import Deployment
from monitoring.services import deployment_create
from studies.models import Study
from studies.services import dimension_set, plan_create, plan_lock, rubric_update
from tests.factories import CandidateFactory, ItemFactory, OutputFactory

DIMS = [
    {"key": "lang", "kind": "categorical", "source": "metadata.language",
     "config": {"values": ["en", "de"]}},
    {"key": "len", "kind": "numeric_bins", "source": "input_length",
     "config": {"quantiles": 2}},
]
PLAN = {
    "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.8}},
    "strata": ["lang"],
    "deployment_mix": {"lang": {"en": 0.6, "de": 0.4}},
    "gates": {"error_rate": 0.05, "latency_p95_ms": 2000, "cost_per_1000": 5.0},
}


@pytest.fixture
def shipped_study(study: Study, lead: Any) -> Study:
    rubric_update(study=study, criteria=[{"key": "ok", "name": "OK", "scale": "binary"}],
                  created_by=lead)
    dimension_set(study=study, dimensions=DIMS)
    shipped = CandidateFactory(study=study, name="shipped")
    CandidateFactory(study=study, name="runner-up")
    for i in range(40):
        item = ItemFactory(study=study, input="q" * (10 + i),
                           metadata={"language": "en" if i % 5 < 3 else "de"})
        OutputFactory(candidate=shipped, item=item, text="a" * (100 + i), latency_ms=300 + i)
    plan = plan_create(study=study, spec=PLAN, created_by=lead)
    plan_lock(plan=plan, user=lead)
    return study


@pytest.fixture
def deployment(shipped_study: Study, lead: Any) -> Deployment:
    return deployment_create(
        study=shipped_study, name="prod", candidate="shipped", created_by=lead,
        sampling_spec={"judge": {"default": 0.5}, "human": {"default": 0.2}},
    )
