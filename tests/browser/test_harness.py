"""The harness itself: Chromium starts, the live server answers, login works by keyboard."""

from __future__ import annotations

from typing import Any

import pytest

from studies.models import Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_keyboard_login_lists_studies_and_logout_is_a_post(browser_session: Any) -> None:
    user = UserFactory(username="ann")
    study = StudyFactory(name="Support answers", slug="support", is_simulated=True)
    MembershipFactory(study=study, user=user, role=Membership.Role.ANNOTATOR)
    MembershipFactory(study=StudyFactory(name="Not mine"), role=Membership.Role.ANNOTATOR)

    s = browser_session
    s.login("ann", "pw-for-tests-123")
    page = s.page
    assert page.locator("h1").inner_text() == "Your studies"
    assert page.get_by_role("link", name="Support answers").is_visible()
    assert page.get_by_text("Not mine").count() == 0
    # The stylesheet is served (no CDN) and applied.
    assert any(url.endswith("/static/css/app.css") and status == 200
               for url, status, _ in s.responses)
    assert page.evaluate("getComputedStyle(document.body).margin") == "0px"

    page.get_by_role("link", name="Support answers").click()
    assert page.get_by_role("note").inner_text().startswith("Simulated data")
    assert page.get_by_role("link", name="Start grading").count() == 1

    with page.expect_navigation():
        page.get_by_role("button", name="Sign out").click()
    assert "/accounts/login/" in page.url
    assert not s.page_errors


def test_wrong_password_shows_an_error(browser_session: Any) -> None:
    UserFactory(username="ann")
    s = browser_session
    s.goto("/accounts/login/")
    s.page.fill("#id_username", "ann")
    s.page.fill("#id_password", "wrong")
    with s.page.expect_navigation():
        s.page.keyboard.press("Enter")
    assert s.page.get_by_role("alert").is_visible()
    assert s.page.locator("#id_password").get_attribute("aria-invalid") == "true"
