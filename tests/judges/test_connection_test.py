"""The connection test of a judge config: one real call through the provider client and the
run's policies, against the local wire-protocol server (OpenAI-compatible and Anthropic),
answering the latency and the parsed verdict, or the error and its kind; nothing is stored.
Offered by the API and on the judges page (the new-judge form and the edit forms)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from judges.models import Judge, JudgeJob, JudgeVersion, Verdict
from tests.browser.factories import grading_study
from tests.judges.provider_server import ProviderServer, raw, success

from . import run_fixtures
from .run_fixtures import KEY_ENV

provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

pytestmark = pytest.mark.django_db
PAGE = "/studies/support/judges/"
API = "/api/studies/support/judges/connection-test"


def config(server: ProviderServer, provider: str = "openai", **extra: Any) -> dict[str, Any]:
    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    return {"provider": provider, "base_url": base, "model": "sim-judge",
            "api_key_env": KEY_ENV, **extra}


@pytest.fixture
def g() -> Any:
    return grading_study(texts=["A fine answer.", "A wrong answer [bad]."])


@pytest.fixture
def api(g: Any) -> Any:
    from rest_framework.test import APIClient

    from tests.factories import api_token_create

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=g.lead)}")
    return client


def nothing_stored() -> bool:
    return not (JudgeVersion.objects.exists() or JudgeJob.objects.exists()
                or Verdict.objects.exists())


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_working_config_answers_latency_and_the_parsed_verdict(
    g: Any, api: Any, provider_server: ProviderServer, judge_key_env: str, provider: str
) -> None:
    first = min(o.pk for o in g.outputs)
    r = api.post(API, {"config": config(provider_server, provider)}, format="json")
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["ok"] is True and body["error"] == "" and body["error_kind"] == ""
    assert body["value"] == "pass" and body["value_num"] == 1.0  # "A fine answer."
    assert body["criterion"] == "correct" and body["output_id"] == first
    assert body["latency_ms"] > 0 and body["http_status"] == 200
    path = "/v1/chat/completions" if provider == "openai" else "/v1/messages"
    assert provider_server.count(path) == 1
    # The key went by its environment variable, as a run sends it.
    sent = provider_server.requests[-1]
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert "sk-test-not-a-real-key" in (headers.get("authorization", "")
                                        + headers.get("x-api-key", ""))
    # The output asked for: "[bad]" fails.
    bad = next(o for o in g.outputs if "[bad]" in o.text)
    body = api.post(API, {"config": config(provider_server, provider), "output_id": bad.pk},
                    format="json").json()
    assert body["ok"] and body["value"] == "fail"
    assert nothing_stored()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_refused_call_answers_the_error_and_its_kind(
    g: Any, api: Any, provider_server: ProviderServer, judge_key_env: str, provider: str
) -> None:
    provider_server.enqueue(raw(401, '{"error": {"message": "invalid key (simulated)"}}',
                                headers={"Content-Type": "application/json"}))
    body = api.post(API, {"config": config(provider_server, provider)}, format="json").json()
    assert body["ok"] is False and body["value"] == ""
    assert body["error_kind"] == "refused" and body["http_status"] == 401
    assert body["error_label"] == "request refused (HTTP 4xx)"
    assert "401" in body["error"] and body["latency_ms"] is not None
    assert provider_server.count() == 1  # one call, no retry
    assert nothing_stored()


def test_unparseable_answer_and_closed_port_and_unset_key(
    g: Any, api: Any, provider_server: ProviderServer, judge_key_env: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider_server.enqueue(success("I would rather not say."))
    body = api.post(API, {"config": config(provider_server)}, format="json").json()
    assert not body["ok"] and body["error_kind"] == "parse"
    assert body["raw_response"] == "I would rather not say."
    closed = dict(config(provider_server), base_url="http://127.0.0.1:9/v1")
    body = api.post(API, {"config": closed}, format="json").json()
    assert not body["ok"] and body["error_kind"] == "connection"
    assert body["error"].startswith("connection error")
    monkeypatch.delenv(KEY_ENV)
    before = provider_server.count()
    body = api.post(API, {"config": config(provider_server)}, format="json").json()
    assert not body["ok"] and body["error_kind"] == "not_sent" and KEY_ENV in body["error"]
    assert provider_server.count() == before  # nothing was sent


def test_the_allow_lists_refuse_before_any_call(
    g: Any, api: Any, provider_server: ProviderServer, judge_key_env: str, settings: Any
) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    r = api.post(API, {"config": config(provider_server)}, format="json")
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0]["path"] == "base_url"
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = [provider_server.url]
    r = api.post(API, {"config": config(provider_server, api_key_env="DJANGO_SECRET_KEY")},
                 format="json")
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0]["path"] == "api_key_env"
    assert provider_server.count() == 0


def test_only_leads_with_a_write_token(g: Any, provider_server: ProviderServer) -> None:
    from rest_framework.test import APIClient

    from studies.models import Membership
    from tests.factories import MembershipFactory, UserFactory, api_token_create

    viewer = UserFactory()
    MembershipFactory(study=g.study, user=viewer, role=Membership.Role.VIEWER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=viewer)}")
    assert client.post(API, {"config": config(provider_server)},
                       format="json").status_code == 403
    assert provider_server.count() == 0


def _result(html: str) -> str:
    match = re.search(r'id="connection-test-result".*?</div>\s*<p class="help">', html, re.S)
    assert match is not None, html[:3000]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(0)))


def test_the_new_judge_form_tests_the_typed_config_and_saves_nothing(
    g: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    client = Client()
    client.force_login(g.lead)
    form = {"action": "create", "test": "1", "name": "house judge", "kind": "llm",
            "provider": "anthropic", "base_url": provider_server.anthropic_base_url,
            "model": "sim-judge", "api_key_env": KEY_ENV}
    r = client.post(PAGE, form)
    assert r.status_code == 200
    html = r.content.decode()
    text = _result(html)
    assert "Connection works" in text and " ms " in text and "pass" in text
    assert re.search(r'id="connection-test-verdict">pass<', html)
    assert 'value="house judge"' in html  # the form keeps what was typed
    assert not Judge.objects.exists() and nothing_stored()
    provider_server.enqueue(raw(503, "overloaded"))
    text = _result(client.post(PAGE, form).content.decode())
    assert "Connection test failed" in text and "server error (HTTP 5xx)" in text


def test_the_edit_form_tests_the_edited_fields_and_stays_open(
    g: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    from judges.services import judge_create_with_config

    judge, _version = judge_create_with_config(
        study=g.study, name="house judge", kind="llm", config=config(provider_server))
    client = Client()
    client.force_login(g.lead)
    # The edit points at a closed port: the test says so, and no version is made.
    r = client.post(PAGE, {"action": "version", "mode": "fields", "test": "1",
                           "judge_id": judge.pk, "provider": "openai",
                           "base_url": "http://127.0.0.1:9/v1", "model": "sim-judge",
                           "api_key_env": KEY_ENV, "config_json": ""})
    html = r.content.decode()
    assert re.search(r'<details class="judge-edit" open>', html)
    assert 'value="http://127.0.0.1:9/v1"' in html  # what was typed, not v1's URL
    text = _result(html)
    assert "Connection test failed" in text and "connection error" in text
    assert JudgeVersion.objects.filter(judge=judge).count() == 1
    assert provider_server.count() == 0
