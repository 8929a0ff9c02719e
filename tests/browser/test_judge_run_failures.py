"""A judge run whose every call failed reads as failed in Chromium: the status in red (after
the page's own refresh from the API, not only as first rendered), the failures by kind and
the first errors, a red progress bar, and the runs list says Failed, not Done."""

from __future__ import annotations

from typing import Any

import pytest

from judges.executor import run_drain
from judges.models import JudgeRun
from judges.runs import judge_run_start
from judges.services import judge_create_with_config
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)

RED = "rgb(180, 35, 24)"  # --fail in static/css/app.css


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_run_where_every_call_failed_is_red_with_its_reasons(
    new_session: Any, settings: Any
) -> None:
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 1
    settings.REVIEWHUB_PROVIDER_LIMITS = {}
    g = grading_study()
    _judge, version = judge_create_with_config(
        study=g.study, name="House judge", kind="llm", created_by=g.lead,
        config={"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m-1"})
    assert version is not None
    run = judge_run_start(study=g.study, judge_version=version,
                          criteria=[g.criteria["correct"]], created_by=g.lead,
                          enqueue=lambda run_id, n: None)
    run_drain(run_id=run.pk, concurrency=8, slice_s=30)  # nothing listens on port 9
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    n = len(g.outputs)

    s = new_session("desktop")
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url(f"/studies/support/judge-runs/{run.pk}/"))
    page.locator("#p-updated", has_text=":").wait_for()  # the page refreshed from the API
    status = page.locator("#p-status")
    assert status.inner_text() == "Failed"
    assert status.evaluate("e => getComputedStyle(e).color") == RED
    box = page.locator("#run-failures")
    assert box.is_visible() and box.get_attribute("role") == "alert"
    text = box.inner_text()
    assert "This run failed" in text and f"every call failed ({n} of {n} jobs)" in text
    assert f"connection error: {n}" in page.locator("#f-kinds").inner_text()
    first = page.locator("#f-first li")
    assert first.count() == min(n, 5)
    assert "gave up after 1 attempts: connection error" in first.first.inner_text()
    assert page.locator("#p-verdicts").inner_text() == "0"
    assert page.locator("#p-verdicts-unscored").inner_text() == str(n)
    bar = page.locator("#p-bar")
    assert bar.evaluate("e => getComputedStyle(e).accentColor") == RED
    s.screenshot("docs/img/judge-run-failed.png")

    page.goto(s.url("/studies/support/judge-runs/"))
    row = page.locator("tbody tr").first
    cells = row.locator("td")
    assert cells.nth(2).inner_text() == "Failed"
    assert cells.nth(2).locator("span").evaluate("e => getComputedStyle(e).color") == RED
    assert f"connection error: {n}" in row.inner_text()
    assert not s.page_errors

    # On a phone the long error lines wrap inside the box: the page does not scroll sideways.
    phone = new_session("phone")
    phone.login(g.lead.username, PASSWORD)
    phone.page.goto(phone.url(f"/studies/support/judge-runs/{run.pk}/"))
    phone.page.locator("#p-updated", has_text=":").wait_for()
    assert phone.page.locator("#run-failures").is_visible()
    width = phone.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"horizontal scroll on a phone: {width}px"
