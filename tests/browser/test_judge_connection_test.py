"""The judges page's connection test in Chromium: the lead types a config into the new-judge
form, presses "Test the connection" and sees the latency and the verdict of one real call to
the local simulated provider, then the error of a refused one; nothing is saved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from judges.models import Judge
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.judges.provider_server import ProviderServer, raw

KEY_ENV = "RH_TEST_JUDGE_KEY"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderServer]:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    with ProviderServer() as srv:
        yield srv


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_test_the_connection_from_the_new_judge_form(new_session: Any,
                                                     server: ProviderServer) -> None:
    g = grading_study(texts=["A fine answer."])
    s = new_session("desktop")
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url("/studies/support/judges/"))
    page.locator("#judge-name").fill("House judge")
    page.locator("#judge-provider").select_option("anthropic")
    page.locator("#judge-base-url").fill(server.anthropic_base_url)
    page.locator("#judge-model").fill("sim-judge")
    page.locator("#judge-key-env").fill(KEY_ENV)
    with page.expect_navigation():
        page.get_by_role("button", name="Test the connection (LLM judges; saves nothing)").click()
    result = page.locator("#connection-test-result")
    assert "Connection works" in result.inner_text()
    assert page.locator("#connection-test-verdict").inner_text() == "pass"
    assert page.locator("#connection-test-latency").inner_text().endswith(" ms")
    # The form keeps what was typed, so that "Create judge" saves the tested config.
    assert page.locator("#judge-base-url").input_value() == server.anthropic_base_url
    assert page.locator("#judge-provider").input_value() == "anthropic"
    result.scroll_into_view_if_needed()
    s.screenshot("docs/img/judge-connection-test.png")
    assert server.count("/v1/messages") == 1 and not Judge.objects.exists()

    server.enqueue(raw(401, '{"error": {"message": "invalid x-api-key (simulated)"}}'))
    with page.expect_navigation():
        page.get_by_role("button", name="Test the connection (LLM judges; saves nothing)").click()
    text = page.locator("#connection-test-result").inner_text()
    assert "Connection test failed" in text and "request refused (HTTP 4xx)" in text
    assert "invalid x-api-key" in text  # a listed base URL: the provider's answer is shown
    with page.expect_navigation():
        page.get_by_role("button", name="Create judge").click()
    assert Judge.objects.get(study=g.study).name == "House judge"
    assert not s.page_errors
