"""Judge run API and page: start, list, detail/progress, cancel, resume, rerun, verdicts."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from judges.models import JudgeJob, JudgeRun, Verdict
from judges.runs import jobs_claim, jobs_record, subject_key, verdicts_build
from studies.models import Membership
from tests.factories import MembershipFactory, UserFactory

from .run_fixtures import build_study_data, llm_config, make_version
from .test_run_services import done

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(study: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(
        "judges.runs.lifecycle._default_enqueue", lambda run_id, n: sent.append((run_id, n))
    )
    data = build_study_data(study)
    version = make_version(study, llm_config("http://127.0.0.1:9/v1"))
    return data, version, sent


def url(slug: str, tail: str = "") -> str:
    return f"/api/studies/{slug}/judge-runs{tail}"


def test_start_list_detail_cancel_resume_rerun(
    lead_client: Any, setup: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _, version, sent = setup
    with django_capture_on_commit_callbacks(execute=True):
        r = lead_client.post(url("alpha"), {"judge_version": version.pk, "criteria": ["correct"],
                                            "selection": {"kind": "all"}, "max_calls": 100},
                             format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    run_id = body["id"]
    assert sent == [(run_id, 1)]
    assert body["progress"]["jobs"]["queued"] == 12 and body["status"] == "running"
    assert body["criteria"] == ["correct"] and body["max_calls"] == 100
    claim = jobs_claim(run_id=run_id, limit=4, lease_token="t")
    jobs_record(outcomes=[done(j, "t", cost=0.01, tokens_in=10, tokens_out=5)
                          for j in claim.jobs])
    verdicts_build(subjects={subject_key(j) for j in claim.jobs})
    p = lead_client.get(url("alpha", f"/{run_id}")).json()["progress"]
    assert p["jobs"]["done"] == 4 and p["calls_made"] == 4 and p["tokens_in"] == 40
    assert p["cost"] == pytest.approx(0.04) and p["verdicts"] == 4
    assert p["calls_per_minute"] > 0 and p["eta_seconds"] is not None
    listing = lead_client.get(url("alpha")).json()
    assert listing["results"][0]["jobs"] == {"done": 4, "queued": 8}
    r = lead_client.post(url("alpha", f"/{run_id}/cancel"))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert lead_client.post(url("alpha", f"/{run_id}/cancel")).json()["error"]["code"] == "conflict"
    with django_capture_on_commit_callbacks(execute=True):
        r = lead_client.post(url("alpha", f"/{run_id}/resume"), {"max_calls": 50}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert r.json()["max_calls"] == 50
    lead_client.post(url("alpha", f"/{run_id}/cancel"))
    with django_capture_on_commit_callbacks(execute=True):
        r = lead_client.post(url("alpha", f"/{run_id}/rerun"))
    assert r.status_code == 201
    stats = r.json()["progress"]["creation"]
    assert stats["already_finished"] == 4 and stats["jobs_adopted"] == 8
    assert JudgeJob.objects.count() == 12


def test_bad_input_is_a_clear_400_and_nothing_is_written(lead_client: Any, setup: Any) -> None:
    _, version, _ = setup
    r = lead_client.post(url("alpha"), {"judge_version": version.pk, "criteria": ["nope"]},
                         format="json")
    assert r.status_code == 400 and r.json()["error"]["details"] == {
        "errors": [{"path": "criteria", "message": "unknown criterion 'nope'"}], "error_count": 1}
    r = lead_client.post(url("alpha"), {"judge_version": version.pk, "criteria": ["correct"],
                                        "selection": {"kind": "sample", "n": -1}}, format="json")
    assert r.status_code == 400 and "selection.n" in r.json()["error"]["message"]
    r = lead_client.post(url("alpha"), {"criteria": ["correct"]}, format="json")
    assert r.status_code == 400
    assert [e["path"] for e in r.json()["error"]["details"]["errors"]] == ["judge_version"]
    assert JudgeRun.objects.count() == 0 and JudgeJob.objects.count() == 0


def test_outsiders_get_404_and_viewers_403(client_for: Any, setup: Any, study: Any) -> None:
    _, version, _ = setup
    outsider = client_for(UserFactory(username="outsider"))
    assert outsider.get(url("alpha")).status_code == 404
    assert outsider.get("/api/studies/alpha/verdicts").status_code == 404
    viewer = UserFactory(username="viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    r = client_for(viewer).post(url("alpha"), {"judge_version": version.pk,
                                               "criteria": ["correct"]}, format="json")
    assert r.status_code == 403


def test_verdict_list_filters_and_bounded_queries(lead_client: Any, setup: Any) -> None:
    data, version, _ = setup
    from judges.runs import judge_run_start

    run = judge_run_start(study=data.study, judge_version=version,
                          criteria=[data.binary, data.pairwise], enqueue=lambda r, n: None)
    claim = jobs_claim(run_id=run.pk, limit=1000, lease_token="t")
    jobs_record(outcomes=[done(j, "t", "A" if j.comparison_id else
                               ("fail" if j.pk % 2 else "pass")) for j in claim.jobs])
    verdicts_build(subjects={subject_key(j) for j in claim.jobs})
    vurl = "/api/studies/alpha/verdicts"
    assert len(lead_client.get(vurl).json()["results"]) == 18
    assert len(lead_client.get(vurl, {"criterion": "correct"}).json()["results"]) == 12
    cand = data.candidates[0].name
    rows = lead_client.get(vurl, {"candidate": cand, "criterion": "correct"}).json()["results"]
    assert len(rows) == 6 and {r["output"]["candidate"] for r in rows} == {cand}
    pair = lead_client.get(vurl, {"criterion": "preference"}).json()["results"][0]
    assert pair["details"]["position_inconsistent"] is True and pair["value"] == "tie"
    assert len(lead_client.get(vurl, {"run": run.pk, "scored": "true"}).json()["results"]) == 18
    assert lead_client.get(vurl, {"scored": "maybe"}).status_code == 400
    with CaptureQueriesContext(connection) as few:
        lead_client.get(vurl, {"page_size": 2})
    with CaptureQueriesContext(connection) as many:
        lead_client.get(vurl, {"page_size": 18})
    assert len(many) == len(few)
    assert Verdict.objects.count() == 18


def test_run_page_renders_for_leads_and_hides_from_others(
    client: Any, lead: Any, setup: Any
) -> None:
    data, version, _ = setup
    from judges.runs import judge_run_start

    run = judge_run_start(study=data.study, judge_version=version, criteria=[data.binary],
                          enqueue=lambda r, n: None)
    client.force_login(lead)
    page = client.get(f"/studies/alpha/judge-runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-progress-url="/api/studies/alpha/judge-runs/{run.pk}"' in html
    # The live polling is a same-origin script (the page's CSP refuses inline scripts).
    assert 'id="p-queued">12<' in html and 'src="/static/js/run_detail.js"' in html
    assert "<script>" not in html
    assert client.get("/studies/alpha/judge-runs/").status_code == 200
    client.force_login(UserFactory(username="stranger"))
    assert client.get(f"/studies/alpha/judge-runs/{run.pk}/").status_code == 404
