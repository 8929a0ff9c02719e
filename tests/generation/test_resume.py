"""Resuming a candidate run: only the (item, config version, sample) jobs with no result are
queued again; a second resume adds nothing; nothing is sent twice."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from generation import runs
from generation.models import GenerationJob, GenerationRun
from studies.models import Membership

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer
from .test_runs import drain_all

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.05


def _resume(client: Any, study: Any, run: GenerationRun, body: Any = None) -> Any:
    return client.post(f"/api/studies/{study.slug}/generation-runs/{run.pk}/resume",
                       body or {}, format="json")


def test_resume_requeues_only_what_has_no_result_and_is_idempotent(
        study: Any, lead_client: Any, monkeypatch: Any,
        django_capture_on_commit_callbacks: Any) -> None:
    data = build(study, n_items=5)
    kicked: list[tuple[int, int]] = []
    monkeypatch.setattr("generation.runs._default_enqueue", lambda r, c: kicked.append((r, c)))
    with LoadServer() as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        run = runs.generation_run_start(study=study, template=make_template(study),
                                        configs=[config], concurrency=2, samples=2,
                                        enqueue=lambda r, c: None)
        runs.generation_run_cancel(run=run)
        jobs = list(GenerationJob.objects.filter(run=run).order_by("id"))
        assert len(jobs) == 10 and {j.status for j in jobs} == {"cancelled"}
        # One job finished before the cancel, one failed for good, one failed for a transient
        # reason after its last attempt, and one was never created.
        GenerationJob.objects.filter(pk=jobs[0].pk).update(status="done", text="kept")
        GenerationJob.objects.filter(pk=jobs[1].pk).update(status="failed",
                                                           error_kind="client_error")
        GenerationJob.objects.filter(pk=jobs[2].pk).update(status="failed",
                                                           error_kind="timeout")
        missing = (jobs[3].item_id, jobs[3].sample_index)
        GenerationJob.objects.filter(pk=jobs[3].pk).delete()

        with django_capture_on_commit_callbacks(execute=True):
            resp = _resume(lead_client, study, run)
        assert resp.status_code == 200, resp.content
        body = resp.json()
        assert body["status"] == "running"
        assert body["progress"]["jobs"] == {"queued": 8, "done": 1, "failed": 1}
        resumed = body["creation_stats"]["resumed"]
        assert [(r["jobs_created"], r["jobs_adopted"]) for r in resumed] == [(1, 7)]
        assert kicked == [(run.pk, config.pk)]

        # Again: nothing more to queue, no duplicate row (the unique key would refuse one).
        with django_capture_on_commit_callbacks(execute=True):
            again = _resume(lead_client, study, run).json()
        assert [(r["jobs_created"], r["jobs_adopted"])
                for r in again["creation_stats"]["resumed"]] == [(1, 7), (0, 0)]
        keys = Counter(GenerationJob.objects.filter(config=config).values_list(
            "item_id", "sample_index"))
        assert len(keys) == 10 and set(keys.values()) == {1}
        assert missing in keys

        drain_all(run)
        sent = [r for r in server.requests if r.path == "/v1/chat/completions"]
    # Exactly the eight jobs without a result were sent, once each.
    assert len(sent) == 8
    run.refresh_from_db()
    assert run.status == "done"
    assert GenerationJob.objects.get(pk=jobs[0].pk).text == "kept"
    assert GenerationJob.objects.get(pk=jobs[1].pk).status == "failed"
    assert Counter(GenerationJob.objects.filter(run=run).values_list("status", flat=True)) == {
        "done": 9, "failed": 1}
    # A finished run resumed has nothing to do: it is done again at once, nothing is queued.
    with django_capture_on_commit_callbacks(execute=True):
        done = _resume(lead_client, study, run).json()
    assert done["status"] == "done"
    assert "queued" not in done["progress"]["jobs"]


def test_resume_can_raise_the_budget_of_a_stopped_run(study: Any, lead_client: Any) -> None:
    data = build(study, n_items=3)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    run = runs.generation_run_start(study=study, template=make_template(study),
                                    configs=[config], concurrency=2, max_cost=1.0,
                                    enqueue=lambda r, c: None)
    GenerationRun.objects.filter(pk=run.pk).update(status="stopped", stop_reason="max_cost")
    GenerationJob.objects.filter(run=run).update(status="cancelled")
    bad = _resume(lead_client, study, run, {"max_cost": -1})
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["errors"][0]["path"] == "max_cost"
    run.refresh_from_db()
    assert run.status == "stopped"  # nothing changed by a refused resume
    ok = _resume(lead_client, study, run, {"max_cost": 5.0})
    assert ok.status_code == 200, ok.content
    assert ok.json()["max_cost"] == 5.0 and ok.json()["status"] == "running"
    assert ok.json()["stop_reason"] == ""


def test_only_a_lead_may_resume(study: Any, client_for: Any, user_factory: Any) -> None:
    data = build(study, n_items=2)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    run = runs.generation_run_start(study=study, template=make_template(study),
                                    configs=[config], concurrency=2, enqueue=lambda r, c: None)
    runs.generation_run_cancel(run=run)
    viewer = user_factory()
    Membership.objects.create(study=study, user=viewer, role=Membership.Role.VIEWER)
    assert _resume(client_for(viewer, study), study, run).status_code == 403
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_resume_from_the_run_page(study: Any, client: Any, lead: Any) -> None:
    client.force_login(lead)
    data = build(study, n_items=2)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    run = runs.generation_run_start(study=study, template=make_template(study),
                                    configs=[config], concurrency=2, enqueue=lambda r, c: None)
    runs.generation_run_cancel(run=run)
    url = f"/studies/{study.slug}/generation/runs/{run.pk}/"
    page = client.get(url).content
    assert b'id="btn-resume"' in page and b'id="btn-cancel"' not in page
    assert client.post(url, {"action": "resume"}).status_code == 302
    run.refresh_from_db()
    assert run.status == "running"
    assert GenerationJob.objects.filter(run=run, status="queued").count() == 2
