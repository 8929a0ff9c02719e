"""The analysis plan and the new-study form in Chromium, at 1280 and 390 px: a lead edits a
locked plan as a new version (after a field error that names the field), sees the difference
in the lock confirmation and locks it; a lead sets up a study from the form. No page scrolls
sideways."""

from __future__ import annotations

from typing import Any

import pytest

from studies.models import AnalysisPlan, Membership, Study
from studies.services import dimension_set, plan_create, plan_lock, rubric_update
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-plan-lead-1"


def _lead() -> Any:
    lead = UserFactory(username="planlead")
    lead.set_password(PASSWORD)
    lead.save()
    return lead


def _no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url}: horizontal scroll {width}px"


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_edit_a_locked_plan_see_the_difference_and_lock_it(new_session: Any,
                                                           viewport: str) -> None:
    lead = _lead()
    study = StudyFactory(owner=lead, slug="plan-study", name="Plan study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    rubric_update(study=study, created_by=lead, criteria=[
        {"key": "correct", "name": "Correct", "scale": "binary"},
        {"key": "polite", "name": "Polite", "scale": "binary"}])
    dimension_set(study=study, dimensions=[
        {"key": "lang", "kind": "categorical", "source": "metadata.language",
         "config": {"values": ["en", "de"]}}])
    v1 = plan_create(study=study, created_by=lead, spec={
        "criteria": {"correct": {"metric": "pass_rate", "threshold": 0.8}},
        "primary_metric": "correct", "deployment_mix": {"lang": {"en": 0.7, "de": 0.3}}})
    plan_lock(plan=v1, user=lead)

    s = new_session(viewport)
    s.login("planlead", PASSWORD)
    page = s.page
    s.goto("/studies/plan-study/")
    with page.expect_navigation():
        page.locator("ul[aria-label='Lead pages']").get_by_role(
            "link", name="Analysis plan").click()
    assert "Version 1 is locked" in page.locator("#plan-in-force").inner_text()
    _no_sideways_scroll(page)
    with page.expect_navigation():
        page.get_by_role("link", name="Edit as a new version").click()
    _no_sideways_scroll(page)
    # The locked version offers no in-place save, only a new version.
    assert page.get_by_role("button", name="Save version 1").count() == 0
    page.locator("#f-c-correct-threshold").fill("0.85")
    page.locator("#f-margin").fill("two points")
    with page.expect_navigation():
        page.get_by_role("button", name="Save as version 2").first.click()
    error = page.locator("#f-margin-err")
    assert "spec.margin" in error.inner_text()
    assert page.locator("#f-margin").get_attribute("aria-invalid") == "true"
    assert page.locator("#f-c-correct-threshold").input_value() == "0.85"  # kept
    assert AnalysisPlan.objects.filter(study=study).count() == 1
    page.locator("#f-margin").fill("0.02")
    page.locator("#f-gate-error_rate").fill("0.05")
    page.locator("input[name='c-polite-on']").check()
    page.locator("#f-c-polite-threshold").fill("0.9")
    with page.expect_navigation():
        page.get_by_role("button", name="Save as version 2").first.click()
    assert page.url.endswith("/plan/?version=2")
    _no_sideways_scroll(page)

    with page.expect_navigation():
        page.get_by_role("link", name="Review and lock version 2").click()
    diff = page.locator("#lock-diff table")
    diff.wait_for()
    rows = {r.locator("th code").inner_text(): r.inner_text()
            for r in diff.locator("tbody tr").all()}
    assert set(rows) == {"criteria.correct.threshold", "criteria.polite.direction",
                         "criteria.polite.every_stratum", "criteria.polite.metric",
                         "criteria.polite.threshold", "gates.error_rate", "margin"}
    assert "0.8" in rows["criteria.correct.threshold"] and \
        "0.85" in rows["criteria.correct.threshold"]
    assert '"error_rate": 0.05' in page.locator("#lock-json").inner_text()
    _no_sideways_scroll(page)
    if viewport == "desktop":
        s.screenshot("docs/img/plan-lock-confirm.png")
    with page.expect_navigation():
        page.get_by_role("button", name="Lock version 2").click()
    assert "Version 2 is locked" in page.locator("#plan-in-force").inner_text()
    v2 = AnalysisPlan.objects.get(study=study, version=2)
    assert v2.is_locked and v2.locked_by == lead
    assert v2.spec["criteria"]["correct"]["threshold"] == 0.85
    v1.refresh_from_db()
    assert v1.spec["criteria"]["correct"]["threshold"] == 0.8
    # The one 400 is the refused margin, answered with the form and its error.
    assert not s.page_errors
    assert [e for e in s.console_errors if "400 (Bad Request)" not in e] == []


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_set_up_a_study_from_the_form(new_session: Any, viewport: str) -> None:
    lead = _lead()
    s = new_session(viewport)
    s.login("planlead", PASSWORD)
    page = s.page
    s.goto("/new-study/")
    _no_sideways_scroll(page)
    page.locator("#f-study-name").fill("Form study")
    page.locator("#f-study-slug").fill("form-study")
    page.locator("#f-c0-key").fill("correct")
    page.locator("#f-c0-name").fill("Correct")
    page.locator("#f-c1-key").fill("clarity")
    page.locator("#f-c1-scale").select_option("ordinal")
    page.locator("#f-c1-labels").fill("Hard, OK, Clear")
    page.locator("#f-c1-pass").fill("5")  # outside the scale: refused, naming the field
    with page.expect_navigation():
        page.get_by_role("button", name="Add a criterion").click()
    assert page.locator("#f-c2-key").count() == 1
    assert page.locator("#f-c1-labels").input_value() == "Hard, OK, Clear"
    page.get_by_label("Primary: the selection decides on this criterion").first.check()
    page.locator("#f-primary-target").fill("0.8")
    page.locator("#f-s0-key").fill("language")
    page.locator("#f-s0-source").fill("language")
    page.locator("#f-s0-values").fill("en, de")
    with page.expect_navigation():
        page.get_by_role("button", name="Review the study").click()
    assert "pass_threshold 5 is outside the scale 1..3" in \
        page.locator("#f-c1-pass-err").inner_text()
    assert "rubric.criteria[1].pass_threshold" in page.locator("#study-errors").inner_text()
    page.locator("#f-c1-pass").fill("2")
    with page.expect_navigation():
        page.get_by_role("button", name="Review the study").click()
    assert page.locator("#preview-criteria tbody tr").count() == 2
    _no_sideways_scroll(page)
    with page.expect_navigation():
        page.get_by_role("button", name="Create study").click()
    assert page.url.endswith("/studies/form-study/")
    study = Study.objects.get(slug="form-study")
    assert study.owner == lead
    assert AnalysisPlan.objects.get(study=study).spec["primary_metric"] == "correct"
    assert not s.page_errors
    assert [e for e in s.console_errors if "400 (Bad Request)" not in e] == []
