"""What counts as a failure is said before grading: the rubric overview lists each criterion's
scale points and which of them fail, and the grading page says under each criterion which
choices fail (and so ask for a severity)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.browser.factories import grading_study

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_overview_lists_points_and_the_failing_ones() -> None:
    g = grading_study()
    for user in (g.lead, g.annotators[0]):
        client = Client()
        client.force_login(user)
        text = _text(client.get("/studies/support/").content.decode())
        # Ordinal, pass threshold 3: 1 and 2 fail.
        assert ("Counts as a failure (asks how bad it would be): 1 · Unreadable, "
                "2 · Hard to follow.") in text
        # Binary and categorical (pass labels friendly, neutral).
        assert "Counts as a failure (asks how bad it would be): Fail." in text
        assert "Counts as a failure (asks how bad it would be): Rude." in text
        assert "5 · Very clear" in text


def test_grading_page_says_which_choices_fail() -> None:
    g = grading_study()
    client = Client()
    client.force_login(g.annotators[0])
    text = _text(client.get("/studies/support/grade/", follow=True).content.decode())
    assert "Fails (then asks how bad): 1 · Unreadable, 2 · Hard to follow." in text
    assert "Fails (then asks how bad): Fail." in text
    assert "Fails (then asks how bad): Rude." in text
