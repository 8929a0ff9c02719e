"""The judge run page: its stall warning and how it shows the selection (rendered HTML)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from judges.models import JudgeJob, JudgeRun
from judges.runs import jobs_claim, jobs_record, judge_run_start

from .run_fixtures import EnqueueSpy, StudyData, build_study_data, llm_config, make_version
from .test_run_services import done

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(study: Any) -> StudyData:
    return build_study_data(study)


def start(data: StudyData, **kw: Any) -> JudgeRun:
    version = make_version(data.study, llm_config("http://127.0.0.1:9/v1"))
    return judge_run_start(study=data.study, judge_version=version, criteria=[data.binary],
                           enqueue=EnqueueSpy(), **kw)


def page(client: Any, lead: Any, run: JudgeRun) -> str:
    client.force_login(lead)
    response = client.get(f"/studies/{run.study.slug}/judge-runs/{run.pk}/")
    assert response.status_code == 200
    return str(response.content.decode())


def idle_for(run: JudgeRun, seconds: float) -> None:
    JudgeRun.objects.filter(pk=run.pk).update(
        last_activity_at=timezone.now() - timedelta(seconds=seconds))


def test_a_run_nobody_works_on_is_flagged_as_stalled(client: Any, lead: Any,
                                                     data: StudyData) -> None:
    run = start(data)
    # Just started: its batch tasks are on their way.
    assert 'id="run-stalled"' not in page(client, lead, run)
    # Two minutes without a claim, 12 jobs claimable, nothing in flight: no wake-up is coming.
    idle_for(run, 120)
    html = page(client, lead, run)
    warning = re.search(r'<div[^>]*id="run-stalled".*?</div>', html, re.S)
    assert warning is not None, html
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", warning.group(0)))
    assert "looks stalled" in text and "12 jobs are queued, none is running" in text
    assert "no wake-up is scheduled" in text and "celery beat" in text and "judges" in text


def test_no_warning_while_calls_are_in_flight_or_a_retry_is_due(
    client: Any, lead: Any, data: StudyData
) -> None:
    run = start(data)
    claim = jobs_claim(run_id=run.pk, limit=2, lease_token="t")
    idle_for(run, 120)
    assert 'id="run-stalled"' not in page(client, lead, run)  # a worker holds live leases
    # Its calls come back as retries due in ten minutes; the rest waits for the same time.
    retry = timezone.now() + timedelta(minutes=10)
    jobs_record(outcomes=[done(j, "t") for j in claim.jobs])
    JudgeJob.objects.filter(run=run, status="queued").update(available_at=retry)
    idle_for(run, 120)
    html = page(client, lead, run)
    assert 'id="run-stalled"' not in html
    assert 'id="run-next-retry"' in html and "waits for a retry" in html
    # The retry time came and went two minutes ago without a claim: stalled.
    JudgeJob.objects.filter(run=run, status="queued").update(
        available_at=timezone.now() - timedelta(seconds=120))
    assert 'id="run-stalled"' in page(client, lead, run)


def test_lost_leases_do_not_count_as_running(client: Any, lead: Any, data: StudyData) -> None:
    run = start(data)
    jobs_claim(run_id=run.pk, limit=3, lease_token="dead")
    JudgeJob.objects.filter(run=run, status="running").update(
        lease_expires_at=timezone.now() - timedelta(seconds=100))
    idle_for(run, 120)
    html = re.sub(r"\s+", " ", page(client, lead, run))
    assert 'id="run-stalled"' in html
    assert "9 jobs are queued, none is running (3 marked running lost their worker" in html


def test_finished_and_stopped_runs_carry_no_warning(client: Any, lead: Any,
                                                    data: StudyData) -> None:
    run = start(data, max_calls=2)
    jobs_claim(run_id=run.pk, limit=5, lease_token="t")
    assert jobs_claim(run_id=run.pk, limit=5, lease_token="u").state == "stopped"
    idle_for(run, 3600)
    assert 'id="run-stalled"' not in page(client, lead, run)


@pytest.mark.parametrize(
    ("selection", "shown"),
    [
        ({"kind": "all"}, "kind: all"),
        ({"kind": "stratum", "dimension": "lang", "label": "de"},
         "kind: stratum, dimension: lang, label: de"),
        ({"kind": "candidate", "candidate": "cand-1"}, "kind: candidate, candidate: cand-1"),
        ({"kind": "sample", "n": 3, "seed": 7}, "kind: sample, n: 3, seed: 7"),
    ],
)
def test_the_selection_reads_as_key_value_pairs(
    client: Any, lead: Any, data: StudyData, selection: dict[str, Any], shown: str
) -> None:
    run = start(data, selection=selection)
    html = page(client, lead, run)
    line = re.search(r'<span class="selection">(.*?)</span></p>', html, re.S)
    assert line is not None
    assert re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", line.group(1))).strip() == shown
    assert "{&#x27;" not in html and "candidate_id" not in html
