"""The candidate-run pages: estimate before start, start, progress with errors by kind, cancel;
model output is printed escaped."""

from __future__ import annotations

from typing import Any

import pytest

from generation.models import GenerationRun

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer
from .test_runs import drain_all

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def lead_session(client: Any, lead: Any, study: Any) -> Any:
    from studies.models import Membership

    Membership.objects.get_or_create(study=study, user=lead,
                                     defaults={"role": Membership.Role.LEAD})
    client.force_login(lead)
    return client


def test_estimate_then_start_then_progress_with_escaped_outputs(
        study: Any, lead_session: Any, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    monkeypatch.setattr("generation.runs._default_enqueue", lambda r, c: None)
    data = build(study, n_items=6)
    url = f"/studies/{study.slug}/generation/"
    with LoadServer(answer=lambda req: HOSTILE) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        template = make_template(study)
        page = lead_session.get(url)
        assert page.status_code == 200 and b"Estimate the cost" in page.content
        assert b"Start this run" not in page.content  # the estimate comes first
        form = {"configs": [str(config.pk)], "template": str(template.pk), "concurrency": "3",
                "samples": "1", "sample_n": "4", "stratify_by": "lang", "seed": "1",
                "action": "estimate"}
        est = lead_session.post(url, form)
        assert est.status_code == 200
        text = est.content.decode()
        assert 'id="est-requests">4<' in text and "Start this run" in text
        assert GenerationRun.objects.count() == 0
        with django_capture_on_commit_callbacks(execute=True):
            started = lead_session.post(url, {**form, "action": "start"})
        assert started.status_code == 302
        run = GenerationRun.objects.get()
        assert run.concurrency == 3 and run.selection["stratify_by"] == "lang"
        drain_all(run)
    detail = lead_session.get(started["Location"])
    body = detail.content.decode()
    assert detail.status_code == 200
    assert "Measured at C = 3" in body and 'data-state="done"' in body
    assert HOSTILE not in body and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    assert "<script>alert" not in body


def test_bad_input_is_a_400_naming_the_field_and_nothing_starts(
        study: Any, lead_session: Any) -> None:
    data = build(study, n_items=2)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    template = make_template(study)
    resp = lead_session.post(f"/studies/{study.slug}/generation/", {
        "configs": [str(config.pk)], "template": str(template.pk), "concurrency": "0",
        "action": "start"})
    assert resp.status_code == 400
    assert b"<code>concurrency</code>" in resp.content
    assert GenerationRun.objects.count() == 0


def test_cancel_from_the_run_page(study: Any, lead_session: Any) -> None:
    from generation.runs import generation_run_start

    data = build(study, n_items=2)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    run = generation_run_start(study=study, template=make_template(study), configs=[config],
                               concurrency=2, enqueue=lambda r, c: None)
    url = f"/studies/{study.slug}/generation/runs/{run.pk}/"
    assert b'id="btn-cancel"' in lead_session.get(url).content
    assert lead_session.post(url, {"action": "cancel"}).status_code == 302
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert b'id="p-cancelled">2<' in lead_session.get(url).content
