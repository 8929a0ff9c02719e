"""Fixtures for the studies tests: a second study ("B") with one of everything, so that
cross-study tests can fill URL parameters with real ids from B."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from studies.models import AnalysisPlan, Membership, Study
from tests.factories import (
    CandidateFactory,
    ItemFactory,
    MembershipFactory,
    OutputFactory,
    StudyFactory,
    UserFactory,
)

from .factories import BINARY, ORDINAL, rubric_with


@dataclass
class World:
    study: Study
    lead: Any
    item: Any
    candidate: Any
    output: Any
    rubric: Any
    plan: AnalysisPlan
    member: Any
    judge: Any
    judge_version: Any


@pytest.fixture
def world_b(db: Any) -> World:
    """Study B, owned by lead_b, with an item, candidate, output, rubric v1 and plan v1."""
    lead = UserFactory(username="lead_b")
    study = StudyFactory(owner=lead, slug="beta", name="Beta study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    viewer = UserFactory(username="viewer_b")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    item = ItemFactory(study=study, metadata={"language": "en"})
    candidate = CandidateFactory(study=study, name="cand-b")
    output = OutputFactory(study=study, candidate=candidate, item=item)
    rubric = rubric_with(study, [BINARY, ORDINAL])
    plan = AnalysisPlan.objects.create(
        study=study, version=1, spec={"criteria": {"ok": {"metric": "pass_rate",
                                                          "threshold": 0.9}}},
    )
    from judges.models import Judge, JudgeVersion

    judge = Judge.objects.create(study=study, name="judge-b", kind=Judge.Kind.IMPORTED)
    judge_version = JudgeVersion.objects.create(judge=judge, version=1, content_hash="b" * 64)
    return World(study=study, lead=lead, item=item, candidate=candidate, output=output,
                 rubric=rubric, plan=plan, member=viewer, judge=judge,
                 judge_version=judge_version)
