"""The home page offers lead-only actions ("New study from a file") only to those who lead."""

from __future__ import annotations

import pytest
from django.test import Client

from reviewhub.capabilities import may_start_study
from studies.models import Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db


def _home(user: object) -> str:
    client = Client()
    client.force_login(user)
    return client.get("/").content.decode()


@pytest.mark.parametrize("role", [Membership.Role.ANNOTATOR, Membership.Role.VIEWER])
def test_annotators_and_viewers_are_not_offered_a_new_study(role: str) -> None:
    user = UserFactory(username="grader")
    MembershipFactory(study=StudyFactory(name="Support"), user=user, role=role)
    html = _home(user)
    assert "Support" in html
    assert "New study from a file" not in html and 'id="new-study"' not in html


def test_leads_superusers_and_new_accounts_are() -> None:
    lead = UserFactory(username="lead-one")
    MembershipFactory(study=StudyFactory(name="A"), user=lead, role=Membership.Role.LEAD)
    MembershipFactory(study=StudyFactory(name="B"), user=lead, role=Membership.Role.ANNOTATOR)
    assert 'id="new-study"' in _home(lead)
    assert 'id="new-study"' in _home(UserFactory(username="fresh"))  # starts their own
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    assert 'id="new-study"' in _home(admin)


def test_the_rule_in_one_place() -> None:
    assert may_start_study([], is_superuser=False)
    assert may_start_study(["annotator", "lead"], is_superuser=False)
    assert may_start_study(["annotator"], is_superuser=True)
    assert not may_start_study(["annotator"], is_superuser=False)
    assert not may_start_study(["viewer", "annotator"], is_superuser=False)
