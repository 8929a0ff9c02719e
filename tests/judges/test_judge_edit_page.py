"""Editing a judge on the judges page: the structured form is filled in from the latest version,
keeps every key the fields cannot express, saves a new version through the same service as the
API (an unchanged config stays the version it is), names bad fields, and escapes what it shows;
in Chromium it is used by keyboard at 390 and 1280 px."""

from __future__ import annotations

import html as html_lib
import json
import re
from typing import Any

import pytest
from django.test import Client

from judges.models import Judge, JudgeVersion
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)

pytestmark = pytest.mark.django_db
PAGE = "/studies/support/judges/"
PAYLOAD = "<script>window.__pwned=1</script>"
CREATE = {
    "action": "create", "name": "gpt judge", "kind": "llm", "provider": "openai",
    "base_url": "http://127.0.0.1:9/v1", "model": "m-1", "api_key_env": "RH_TEST_JUDGE_KEY",
    "user_prompt": "Grade this: {output} " + PAYLOAD,
    "config_json": json.dumps({"parameters": {"temperature": 0}, "logprobs": True}),
}


def _judge(client: Client, study: Any) -> Judge:
    assert client.post(PAGE, CREATE).status_code == 302
    return Judge.objects.get(study=study, name="gpt judge")


def _edit_form(html: str, judge: Judge) -> str:
    m = re.search(rf'<form method="post" id="edit-{judge.pk}">.*?</form>', html, re.S)
    assert m, "no edit form"
    return m.group(0)


def _value(form: str, name: str) -> str:
    m = re.search(rf'name="{name}" [^>]*value="([^"]*)"', form)
    if m:
        return html_lib.unescape(m.group(1))
    m = re.search(rf'name="{name}"[^>]*>(.*?)</textarea>', form, re.S)
    assert m, name
    return html_lib.unescape(m.group(1))


def test_the_form_is_filled_in_and_saves_a_new_version_keeping_other_keys() -> None:
    g = grading_study()
    client = Client()
    client.force_login(g.lead)
    judge = _judge(client, g.study)
    v1 = JudgeVersion.objects.get(judge=judge)
    form = _edit_form(client.get(PAGE).content.decode(), judge)
    assert _value(form, "model") == "m-1"
    assert _value(form, "api_key_env") == "RH_TEST_JUDGE_KEY"
    assert _value(form, "base_url") == "http://127.0.0.1:9/v1"
    # The stored prompt is one per scale (the service adds each scale's answer format), which
    # one text field cannot show: it stays in the JSON box with the other keys.
    assert isinstance(v1.config["user_prompt"], dict)
    assert _value(form, "user_prompt") == ""
    assert PAYLOAD not in form and "&lt;script&gt;" in form
    rest = json.loads(_value(form, "config_json"))
    assert rest == {k: v for k, v in v1.config.items()
                    if k not in ("provider", "base_url", "model", "api_key_env")}
    assert rest["parameters"]["temperature"] == 0 and rest["logprobs"] is True
    # Saving the form unchanged is the same config: no new version.
    post = {"action": "version", "mode": "fields", "judge_id": judge.pk,
            **{n: _value(form, n) for n in ("base_url", "model", "api_key_env", "user_prompt",
                                            "config_json")},
            "provider": "openai"}
    r = client.post(PAGE, post, follow=True)
    assert "is version 1 already" in r.content.decode()
    # A changed model makes version 2 with every other key kept.
    r = client.post(PAGE, {**post, "model": "m-2"}, follow=True)
    assert "version 2 created" in r.content.decode()
    v2 = JudgeVersion.objects.get(judge=judge, version=2)
    assert v2.config == {**v1.config, "model": "m-2"}
    # A prompt typed into the field replaces the stored one for every scale.
    client.post(PAGE, {**post, "model": "m-2", "user_prompt": "Judge it: {output}"})
    v3 = JudgeVersion.objects.get(judge=judge, version=3)
    assert v3.config["model"] == "m-2" and "Judge it: {output}" in str(v3.config["user_prompt"])
    assert PAYLOAD not in str(v3.config["user_prompt"])
    # v1 is untouched.
    v1.refresh_from_db()
    assert v1.config["model"] == "m-1"


@pytest.mark.parametrize(("change", "field"), [
    ({"base_url": "https://evil.example/v1"}, "base_url"),
    ({"api_key_env": "DATABASE_URL"}, "api_key_env"),
    ({"config_json": "[1]"}, "config_json"),
    ({"user_prompt": "no placeholder here"}, "user_prompt"),
])
def test_bad_fields_are_named_and_make_no_version(change: dict[str, str], field: str) -> None:
    g = grading_study()
    client = Client()
    client.force_login(g.lead)
    judge = _judge(client, g.study)
    post = {"action": "version", "mode": "fields", "judge_id": judge.pk, "provider": "openai",
            "base_url": "http://127.0.0.1:9/v1", "model": "m-2",
            "api_key_env": "RH_TEST_JUDGE_KEY", "user_prompt": "Grade: {output}",
            "config_json": "", **change}
    r = client.post(PAGE, post)
    assert r.status_code == 400
    errors = re.search(r'id="judge-errors".*?</div>', r.content.decode(), re.S)
    assert errors and field in errors.group(0)
    assert JudgeVersion.objects.filter(judge=judge).count() == 1


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_edit_by_keyboard_in_chromium(new_session: Any, viewport: str) -> None:
    g = grading_study()
    client = Client()
    client.force_login(g.lead)
    judge = _judge(client, g.study)
    s = new_session(viewport)
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url(PAGE))
    summary = page.locator(f"#judge-{judge.pk}-h ~ details.judge-edit > summary")
    summary.focus()
    page.keyboard.press("Enter")  # opens the disclosure
    model = page.locator(f"#edit-{judge.pk}-model")
    assert model.input_value() == "m-1"
    model.focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("m-edited")
    page.locator(f"#edit-{judge.pk}-save").focus()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "version 2 created" in page.locator(".messages").inner_text()
    v2 = JudgeVersion.objects.get(judge=judge, version=2)
    assert v2.config["model"] == "m-edited" and v2.config["logprobs"] is True
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    assert not s.page_errors
