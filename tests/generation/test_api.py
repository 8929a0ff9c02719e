"""The candidate-run API: configs, templates, runs; every bad input a 400 naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from generation.models import GenerationConfig, GenerationJob, GenerationRun, PromptTemplate

from .fixtures import KEY_ENV, build, gen_config, make_config, make_template

pytestmark = pytest.mark.django_db

LOCAL = "http://127.0.0.1:9/v1"


def _path(resp: Any) -> str:
    assert resp.status_code == 400, resp.content
    return str(resp.json()["error"]["details"]["errors"][0]["path"])


def _configs(study: Any) -> str:
    return f"/api/studies/{study.slug}/generation-configs"


def test_a_config_is_versioned_by_its_content_hash(study: Any, lead_client: Any) -> None:
    build(study)
    body = {"candidate": "cand-0", "config": gen_config(LOCAL)}
    first = lead_client.post(_configs(study), body, format="json")
    assert first.status_code == 201, first.content
    again = lead_client.post(_configs(study), body, format="json")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    changed = lead_client.post(_configs(study), {"candidate": "cand-0", "config": gen_config(
        LOCAL, parameters={"temperature": 0.7, "max_tokens": 64})}, format="json")
    assert changed.status_code == 201 and changed.json()["version"] == 2
    assert changed.json()["content_hash"] != first.json()["content_hash"]
    # Defaults are made explicit in the stored config (a changed default never moves a hash).
    assert first.json()["config"]["parameters"]["seed"] is None
    assert GenerationConfig.objects.count() == 2
    listed = lead_client.get(_configs(study)).json()["results"]
    assert [c["version"] for c in listed] == [2, 1]


@pytest.mark.parametrize(("config", "field"), [
    (gen_config(LOCAL, provider="cohere"), "provider"),
    (gen_config("https://evil.example.com/v1"), "base_url"),
    (gen_config(LOCAL, api_key_env="DATABASE_URL"), "api_key_env"),
    (gen_config(LOCAL, api_key_env="HOME"), "api_key_env"),
    (gen_config(LOCAL, parameters={"temperature": 9}), "parameters.temperature"),
    (gen_config(LOCAL, extra_body={"messages": []}), "extra_body"),
    (gen_config(LOCAL, timeout_s=0), "timeout_s"),
])
def test_a_bad_config_is_a_400_naming_the_field(study: Any, lead_client: Any,
                                                config: dict[str, Any], field: str) -> None:
    build(study)
    resp = lead_client.post(_configs(study), {"candidate": "cand-0", "config": config},
                            format="json")
    assert _path(resp) == field
    assert GenerationConfig.objects.count() == 0


def test_an_unknown_candidate_is_a_400(study: Any, lead_client: Any) -> None:
    build(study)
    resp = lead_client.post(_configs(study), {"candidate": "nobody", "config": gen_config(LOCAL)},
                            format="json")
    assert _path(resp) == "candidate"


@pytest.mark.parametrize(("template", "field"), [
    ({"user": "Q: {question}"}, "user"),  # no item field of that name
    ({"user": "Q: {input}", "system": "Answer in {metadata.tone}"}, "system"),  # no item has it
    ({"user": "Q: {input}", "output_schema": {"type": "nonsense"}}, "output_schema"),
    ({"user": "Q: {input}", "output_schema": {"type": "object", "required": "answer"}},
     "output_schema"),
    ({"user": "Q: {input}", "structured_output": True}, "structured_output"),
    ({"user": "   "}, "user"),
])
def test_a_bad_template_is_a_400_naming_the_field(study: Any, lead_client: Any,
                                                  template: dict[str, Any], field: str) -> None:
    build(study)
    resp = lead_client.post(f"/api/studies/{study.slug}/prompt-templates", template,
                            format="json")
    assert _path(resp) == field
    assert PromptTemplate.objects.count() == 0


def test_a_template_over_item_fields_and_metadata_is_accepted(study: Any,
                                                             lead_client: Any) -> None:
    build(study)
    resp = lead_client.post(f"/api/studies/{study.slug}/prompt-templates", {
        "system": "Reply in {metadata.lang}; literal {{braces}}.",
        "user": "{context}\n{input}", "output_schema": {"type": "object"}}, format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["template"]["structured_output"] is False


def _run_body(study: Any, **over: Any) -> dict[str, Any]:
    data = build(study, n_items=4)
    config = make_config(data.candidates[0], LOCAL)
    template = make_template(study)
    body = {"template": template.pk, "configs": [config.pk], "concurrency": 4,
            "max_cost": 1.0}
    body.update(over)
    return body


@pytest.mark.parametrize(("over", "field"), [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": -3}, "concurrency"),
    ({"concurrency": "many"}, "concurrency"),
    ({"max_cost": 1e-9}, "max_cost"),  # below one request's estimated cost
    ({"samples": 0}, "samples"),
    ({"configs": [999999]}, "configs"),
    ({"template": 999999}, "template"),
    ({"selection": {"kind": "items", "external_ids": ["nope"]}}, "selection.external_ids"),
    ({"selection": {"kind": "sample", "n": 2, "stratify_by": "colour"}},
     "selection.stratify_by"),
])
def test_a_bad_run_start_is_a_400_naming_the_field(study: Any, lead_client: Any,
                                                   over: dict[str, Any], field: str) -> None:
    body = _run_body(study, **over)
    resp = lead_client.post(f"/api/studies/{study.slug}/generation-runs", body, format="json")
    assert _path(resp) == field
    assert GenerationRun.objects.count() == 0 and GenerationJob.objects.count() == 0


def test_a_run_over_items_without_a_metadata_placeholder_is_refused(
        study: Any, lead_client: Any) -> None:
    body = _run_body(study)
    item = study.items.first()
    item.metadata = {}
    item.save()
    resp = lead_client.post(f"/api/studies/{study.slug}/generation-runs", body, format="json")
    assert _path(resp) == "template"
    assert "metadata.lang" in resp.json()["error"]["message"]


def test_estimate_then_start_then_cancel(study: Any, lead_client: Any, monkeypatch: Any,
                                         django_capture_on_commit_callbacks: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    body = _run_body(study, samples=2)
    est = lead_client.post(f"/api/studies/{study.slug}/generation-runs/estimate", body,
                           format="json")
    assert est.status_code == 200, est.content
    e = est.json()
    assert e["items"] == 4 and e["requests"] == 8
    # 64 output tokens at 2 USD/Mtok per request, plus the prompt at 1 USD/Mtok.
    assert e["per_request_max"] == pytest.approx(
        (e["candidates"][0]["tokens_in"] / 8 * 1.0 + 64 * 2.0) / 1e6)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr("generation.runs._default_enqueue", lambda r, c: sent.append((r, c)))
    with django_capture_on_commit_callbacks(execute=True):
        resp = lead_client.post(f"/api/studies/{study.slug}/generation-runs", body,
                                format="json")
    assert resp.status_code == 201, resp.content
    run = resp.json()
    assert run["creation_stats"]["jobs_created"] == 8
    assert sent == [(run["id"], body["configs"][0])]
    detail = lead_client.get(f"/api/studies/{study.slug}/generation-runs/{run['id']}").json()
    assert detail["progress"]["jobs"] == {"queued": 8}
    cancelled = lead_client.post(
        f"/api/studies/{study.slug}/generation-runs/{run['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["progress"]["jobs"] == {"cancelled": 8}


def test_viewers_cannot_read_configs(study: Any, client_for: Any, user_factory: Any) -> None:
    from studies.models import Membership

    viewer = user_factory()
    Membership.objects.create(study=study, user=viewer, role=Membership.Role.VIEWER)
    resp = client_for(viewer, study).get(_configs(study))
    assert resp.status_code == 403
