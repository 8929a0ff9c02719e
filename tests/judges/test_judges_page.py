"""The judges page: a lead creates a judge (structured fields or JSON), saves a new version,
starts a run with a selection and a budget; errors are named in the page and leave nothing
behind; other roles get 404; untrusted text is inert. Then the same in Chromium."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from judges.models import Judge, JudgeRun, JudgeVersion
from studies.models import Membership
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
PAGE = "/studies/support/judges/"
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
GOOD = {
    "action": "create", "name": "gpt judge", "kind": "llm", "provider": "openai",
    "base_url": "http://127.0.0.1:9/v1", "model": "m-1", "api_key_env": "RH_TEST_JUDGE_KEY",
}


def _errors(response: Any) -> str:
    match = re.search(r'id="judge-errors".*?</div>', response.content.decode(), re.S)
    return match.group(0) if match else ""


def _lead() -> tuple[Any, Client]:
    g = grading_study()
    client = Client()
    client.force_login(g.lead)
    return g, client


def test_create_a_judge_from_the_form_then_a_version_then_a_run() -> None:
    g, client = _lead()
    r = client.post(PAGE, {**GOOD, "user_prompt": "Grade this: {output}",
                           "config_json": '{"parameters": {"temperature": 0}}'})
    assert r.status_code == 302
    judge = Judge.objects.get(study=g.study, name="gpt judge")
    v1 = JudgeVersion.objects.get(judge=judge)
    assert v1.config["model"] == "m-1" and v1.config["api_key_env"] == "RH_TEST_JUDGE_KEY"
    assert v1.config["parameters"]["temperature"] == 0
    assert "Grade this: {output}" in str(v1.config["user_prompt"])
    html = client.get(PAGE).content.decode()
    assert "gpt judge" in html and f"/judges/{judge.pk}/versions/{v1.pk}/preview/" in html
    # A new version from the edited config; the same config again is not a third version.
    config = dict(v1.config, model="m-2", prices={"input_per_mtok": 1, "output_per_mtok": 2})
    r = client.post(PAGE, {"action": "version", "judge_id": judge.pk,
                           "config_json": json.dumps(config)}, follow=True)
    assert "version 2 created" in r.content.decode()
    r = client.post(PAGE, {"action": "version", "judge_id": judge.pk,
                           "config_json": json.dumps(config)}, follow=True)
    assert "is version 2 already" in r.content.decode()
    v2 = JudgeVersion.objects.get(judge=judge, version=2)
    r = client.post(PAGE, {"action": "run", "judge_id": judge.pk, "version_id": v2.pk,
                           "criteria": ["correct", "clarity"], "selection_kind": "sample",
                           "sample_n": "3", "max_cost": "0.5", "max_calls": "10"})
    assert r.status_code == 302, _errors(r)
    run = JudgeRun.objects.get(judge_version=v2)
    assert r.status_code == 302 and r["Location"] == f"/studies/support/judge-runs/{run.pk}/"
    assert run.selection["kind"] == "sample" and run.selection["n"] == 3
    assert float(run.max_cost) == 0.5 and run.max_calls == 10
    assert sorted(c.key for c in run.criteria.all()) == ["clarity", "correct"]


@pytest.mark.parametrize(("change", "field"), [
    ({"base_url": "https://evil.example/v1"}, "base_url"),
    ({"api_key_env": "DATABASE_URL"}, "api_key_env"),
    ({"config_json": "{\"logprobs\": NaN}"}, "config_json"),
    ({"config_json": "[1]"}, "config_json"),
    ({"name": ""}, "name"),
    ({"user_prompt": "no placeholder here"}, "user_prompt"),
])
def test_bad_input_is_a_400_naming_the_field_and_creates_no_judge(
    change: dict[str, str], field: str
) -> None:
    g, client = _lead()
    r = client.post(PAGE, {**GOOD, **change})
    assert r.status_code == 400, r.content.decode()[:500]
    html = r.content.decode()
    assert re.search(rf"<strong>{re.escape(field)}[^<]*</strong>", html), html[:2000]
    assert not Judge.objects.filter(study=g.study).exists()
    assert 'value="gpt judge"' in html or change.get("name") == ""  # the form keeps its values


def test_run_form_errors_are_named() -> None:
    g, client = _lead()
    client.post(PAGE, GOOD)
    judge = Judge.objects.get(study=g.study)
    version = JudgeVersion.objects.get(judge=judge)
    base = {"action": "run", "judge_id": judge.pk, "version_id": version.pk}
    for extra, field in (({"criteria": ["nope"]}, "criteria"),
                         ({"criteria": ["correct"], "max_cost": "-1"}, "max_cost"),
                         ({"criteria": ["correct"], "selection_kind": "sample",
                           "sample_n": "x"}, "sample_n")):
        r = client.post(PAGE, {**base, **extra})
        assert r.status_code == 400 and f"<strong>{field}" in r.content.decode()
    assert not JudgeRun.objects.exists()
    other = client.post(PAGE, {**base, "judge_id": 999999, "criteria": ["correct"]})
    assert other.status_code == 404


def test_only_leads_see_it_and_names_are_escaped() -> None:
    g, client = _lead()
    client.post(PAGE, {**GOOD, "name": PAYLOAD[:200], "description": PAYLOAD})
    html = client.get(PAGE).content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        user = UserFactory()
        MembershipFactory(study=g.study, user=user, role=role)
        other = Client()
        other.force_login(user)
        assert other.get(PAGE).status_code == 404
        assert other.post(PAGE, GOOD).status_code == 404
    assert Client().get(PAGE).status_code == 302
    # The navigation reaches the judges page and the runs page.
    overview = client.get("/studies/support/").content.decode()
    assert 'href="/studies/support/judges/"' in overview
    assert 'href="/studies/support/judge-runs/"' in overview


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_keyboard_only_judge_creation_in_chromium(new_session: Any, viewport: str) -> None:
    g = grading_study()
    s = new_session(viewport)
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url("/studies/support/"))
    page.get_by_role("link", name="Judges", exact=True).click()
    assert page.url.endswith(PAGE)
    name = PAYLOAD[:120] if viewport == "phone" else "House judge"
    page.locator("#judge-name").focus()
    page.keyboard.type(name)
    for selector, text in (("#judge-base-url", "http://127.0.0.1:9/v1"),
                           ("#judge-model", "local-model"),
                           ("#judge-key-env", "RH_TEST_JUDGE_KEY")):
        page.locator(selector).focus()
        page.keyboard.type(text)
    page.locator("#judge-config").focus()
    page.keyboard.press("Tab")  # the submit button follows the last field
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "created with version 1" in page.locator(".messages").inner_text()
    judge = Judge.objects.get(study=g.study)
    assert judge.name == name
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    if viewport == "desktop":
        s.screenshot("docs/img/judges-page.png")
    assert not s.page_errors


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_overview_and_run_pages_render_for_the_lead_in_chromium(new_session: Any) -> None:
    """The lead's study page and a run's page, as the docs' screenshots show them."""
    from judges.runs import judge_run_start
    from judges.services import judge_create_with_config

    g = grading_study()
    _judge, version = judge_create_with_config(
        study=g.study, name="House judge", kind="llm", created_by=g.lead,
        config={"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m-1",
                "api_key_env": "RH_TEST_JUDGE_KEY"})
    assert version is not None
    run = judge_run_start(study=g.study, judge_version=version,
                          criteria=list(g.criteria.values()), created_by=g.lead,
                          enqueue=lambda run_id, n: None)  # no worker here: nothing is sent
    s = new_session("desktop")
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url("/studies/support/"))
    assert "Counts as a failure" in page.locator("#rubric-h").locator("..").inner_text()
    s.screenshot("docs/img/study-overview.png")
    page.goto(s.url(f"/studies/support/judge-runs/{run.pk}/"))
    page.locator("#p-total").wait_for()
    assert page.locator("#p-total").inner_text().strip() == str(
        len(g.outputs) * len(g.criteria))
    s.screenshot("docs/img/judge-run.png")
    assert not s.page_errors


def test_a_refused_run_start_keeps_its_form_open_with_the_error_beside_the_field() -> None:
    g, client = _lead()
    client.post(PAGE, GOOD)
    judge = Judge.objects.get(study=g.study)
    version = JudgeVersion.objects.get(judge=judge)
    # No criterion ticked.
    r = client.post(PAGE, {"action": "run", "judge_id": judge.pk, "version_id": version.pk,
                           "selection_kind": "sample", "sample_n": "7", "max_calls": "40"})
    assert r.status_code == 400
    html = r.content.decode()
    form = re.search(rf'<details open>\s*<summary>Start a run</summary>\s*'
                     rf'<form method="post" class="run-form" id="run-{judge.pk}">(.*?)</form>',
                     html, re.S)
    assert form is not None, "the run form is collapsed after the error"
    inside = form.group(1)
    error = re.search(r'id="run-\d+-errors">(.*?)</div>', inside, re.S)
    assert error is not None and "<strong>criteria</strong>" in error.group(1)
    assert inside.index("run-" + str(judge.pk) + "-errors") < inside.index("<legend>Criteria")
    assert 'aria-invalid="true"' in inside
    # What was chosen is still there.
    assert re.search(r'name="sample_n"[^>]*value="7"', inside)
    assert re.search(r'name="max_calls"[^>]*value="40"', inside)
    assert '<option value="sample" selected>' in inside
    assert 'id="judge-errors"' not in html  # the error is at the form, not the page top
    assert not JudgeRun.objects.exists()
