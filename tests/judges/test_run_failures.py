"""A judge run whose calls failed says so: a failed / partly failed state, counts by kind and
the first errors, on the run page, the runs list and the run API; "Verdicts" counts scored
verdicts only. The failures are made by the executor over real sockets (a closed port, the
simulated provider's faults), not written by hand."""

from __future__ import annotations

import re
from typing import Any

import pytest

from judges import selectors
from judges.executor import run_drain
from judges.models import JudgeJob, JudgeRun, Verdict
from judges.runs import judge_run_start
from tests.judges.provider_server import ProviderServer, rate_limited, server_error, success

from . import run_fixtures
from .run_fixtures import EnqueueSpy, StudyData, build_study_data, llm_config, make_version

provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

pytestmark = pytest.mark.django_db

# Nothing listens on the discard port: every call is refused (a connection error).
CLOSED = "http://127.0.0.1:9/v1"


@pytest.fixture(autouse=True)
def fast_retries(settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.02
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 2
    settings.REVIEWHUB_PROVIDER_LIMITS = {}


def drive(run: JudgeRun) -> None:
    import time

    from django.utils import timezone

    for _ in range(50):
        report = run_drain(run_id=run.pk, concurrency=16, slice_s=60)
        run.refresh_from_db()
        if run.status != JudgeRun.Status.RUNNING:
            return
        if report.next_available_at is not None:
            time.sleep(max(0.0, (report.next_available_at - timezone.now()).total_seconds()))
    raise AssertionError(f"run still {run.status}")


def start(data: StudyData, base_url: str) -> JudgeRun:
    version = make_version(data.study, llm_config(base_url))
    return judge_run_start(study=data.study, judge_version=version, criteria=[data.binary],
                           enqueue=EnqueueSpy())


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_run_where_every_call_failed_is_failed_in_red_with_its_reason(
    client: Any, lead: Any, lead_client: Any, study: Any, judge_key_env: str
) -> None:
    data = build_study_data(study)
    run = start(data, CLOSED)
    drive(run)
    assert run.status == "done"  # the queue's view: nothing left to do
    assert JudgeJob.objects.filter(run=run, status="failed").count() == 12
    assert Verdict.objects.filter(run=run, is_scored=False).count() == 12

    body = lead_client.get(f"/api/studies/{study.slug}/judge-runs/{run.pk}").json()
    outcome = body["outcome"]
    assert outcome["state"] == "failed" and outcome["label"] == "Failed"
    assert outcome["failed_jobs"] == 12 and outcome["by_kind"] == {"connection": 12}
    assert outcome["summary"].startswith("every call failed (12 of 12 jobs)")
    assert len(outcome["first_errors"]) == selectors.FIRST_ERRORS
    first = outcome["first_errors"][0]
    assert first["kind"] == "connection" and first["criterion"] == "correct"
    assert first["error"].startswith("gave up after 2 attempts: connection error")
    # Verdicts are verdicts: twelve unscored ones are failures, not verdicts.
    assert body["progress"]["verdicts"] == 0 and body["progress"]["verdicts_unscored"] == 12

    listing = lead_client.get(f"/api/studies/{study.slug}/judge-runs").json()["results"][0]
    assert listing["outcome"]["state"] == "failed"
    assert listing["outcome"]["by_kind"] == {"connection": 12}
    assert listing["outcome"]["first_error"].startswith("gave up after 2 attempts: connection")

    client.force_login(lead)
    html = client.get(f"/studies/{study.slug}/judge-runs/{run.pk}/").content.decode()
    status = re.search(r'<strong id="p-status"[^>]*>(.*?)</strong>', html)
    assert status is not None and status.group(1) == "Failed"
    assert 'class="run-state run-state-failed"' in status.group(0)
    box = re.search(r'<div class="message message-error run-failures" role="alert" '
                    r'id="run-failures">'
                    r'(.*?)</div>', html, re.S)
    assert box is not None, html
    box_text = text_of(box.group(1))
    assert "This run failed" in box_text and "connection error: 12" in box_text
    assert "gave up after 2 attempts: connection error" in box_text
    assert re.search(r'<progress id="p-bar"[^>]*class="run-failed"', html)
    assert re.search(r'<dd id="p-verdicts">0</dd>', html)

    html = client.get(f"/studies/{study.slug}/judge-runs/").content.decode()
    row = text_of(re.search(r"<tbody>(.*?)</tbody>", html, re.S).group(1))  # type: ignore[union-attr]
    assert "Failed" in row and "Done" not in row
    assert "connection error: 12" in row and "first: gave up after 2 attempts" in row
    assert 'class="run-state run-state-failed"' in html


def test_a_run_with_some_failures_is_partly_failed_with_counts_by_kind(
    client: Any, lead: Any, lead_client: Any, study: Any, provider_server: ProviderServer,
    judge_key_env: str,
) -> None:
    from tests.judges.provider_server import raw

    data = build_study_data(study, n_items=3, n_candidates=2)  # six outputs
    # In claim order: two 429s (one job gives up), two 500s (another gives up), one 401
    # (refused at once), one answer that does not parse; the rest answer.
    refused = raw(401, b'{"error": {"message": "invalid api key"}}',
                  headers={"Content-Type": "application/json"})
    provider_server.enqueue(rate_limited("0"), rate_limited("0"), server_error(),
                            server_error(), refused, success("I would rather not say."))
    run = start(data, provider_server.openai_base_url)
    drive(run)
    assert run.status == "done"
    jobs = selectors.judge_run_job_counts(run_ids=[run.pk])[run.pk]
    kinds = selectors.judge_run_failure_kinds(run_ids=[run.pk])[run.pk]
    failed = jobs.get("failed", 0) + jobs.get("unparseable", 0)
    assert failed == sum(kinds.values()) and 0 < failed < 6, (jobs, kinds)
    body = lead_client.get(f"/api/studies/{study.slug}/judge-runs/{run.pk}").json()
    outcome = body["outcome"]
    assert outcome["state"] == "partly_failed" and outcome["label"] == "Partly failed"
    assert outcome["by_kind"] == kinds
    assert set(kinds) <= {"rate_limited", "server_error", "refused", "parse"}
    assert "refused" in kinds and "parse" in kinds
    assert body["progress"]["verdicts"] == 6 - failed
    assert body["progress"]["verdicts_unscored"] == failed

    client.force_login(lead)
    html = client.get(f"/studies/{study.slug}/judge-runs/{run.pk}/").content.decode()
    assert "This run partly failed" in html and f"{failed} of 6 jobs failed" in html
    assert "request refused (HTTP 4xx)" in html and "answer did not parse" in html


def test_a_clean_run_shows_done_and_no_failure_box(
    client: Any, lead: Any, lead_client: Any, study: Any, provider_server: ProviderServer,
    judge_key_env: str,
) -> None:
    data = build_study_data(study, n_items=2, n_candidates=1)
    run = start(data, provider_server.openai_base_url)
    drive(run)
    outcome = lead_client.get(f"/api/studies/{study.slug}/judge-runs/{run.pk}").json()["outcome"]
    assert outcome["state"] == "succeeded" and outcome["label"] == "Done"
    assert outcome["failed_jobs"] == 0 and outcome["kinds"] == []
    client.force_login(lead)
    html = client.get(f"/studies/{study.slug}/judge-runs/{run.pk}/").content.decode()
    assert re.search(r'id="run-failures" hidden', html)
    assert 'class="run-failed"' not in html


@pytest.mark.parametrize(
    ("error_kind", "http_status", "error", "kind"),
    [
        ("transient", None, "gave up after 5 attempts: connection error (ConnectError): x",
         "connection"),
        ("transient", None, "gave up after 3 attempts: timeout (ReadTimeout): x", "timeout"),
        ("transient", 429, "gave up after 5 attempts: HTTP 429: slow down", "rate_limited"),
        ("transient", 503, "gave up after 5 attempts: HTTP 503", "server_error"),
        ("permanent", 400, "HTTP 400: bad request", "refused"),
        ("permanent", 200, "response has no choices", "bad_response"),
        ("parse", 200, "unparseable: no verdict found", "parse"),
        ("permanent", None, "environment variable X_API_KEY is not set", "not_sent"),
        ("permanent", None, "cannot send request (UnsupportedProtocol): x", "not_sent"),
        ("transient", None, "unexpected error: RuntimeError: boom", "other"),
    ],
)
def test_failure_kinds_follow_what_the_executor_records(
    study: Any, error_kind: str, http_status: int | None, error: str, kind: str
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    run = start(data, CLOSED)
    status = "unparseable" if error_kind == "parse" else "failed"
    JudgeJob.objects.filter(run=run).update(status=status, error_kind=error_kind,
                                            http_status=http_status, error=error)
    assert selectors.judge_run_failure_kinds(run_ids=[run.pk]) == {run.pk: {kind: 1}}
    # The connection test classifies its one failure by the same rules, in Python.
    assert selectors.failure_kind_of(error_kind=error_kind, http_status=http_status,
                                     error=error) == kind


def test_the_runs_list_costs_the_same_queries_for_two_runs_or_six(
    lead_client: Any, study: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    data = build_study_data(study, n_items=1, n_candidates=2)

    def failed_run(i: int) -> None:
        version = make_version(data.study, llm_config(CLOSED, model=f"m-{i}"))
        run = judge_run_start(study=data.study, judge_version=version,
                              criteria=[data.binary], enqueue=EnqueueSpy())
        JudgeJob.objects.filter(run=run).update(
            status="failed", error_kind="transient",
            error="gave up after 5 attempts: connection error (ConnectError): refused")
        JudgeRun.objects.filter(pk=run.pk).update(status="done")

    def listing() -> tuple[int, list[dict[str, Any]]]:
        with CaptureQueriesContext(connection) as queries:
            rows = lead_client.get(f"/api/studies/{study.slug}/judge-runs").json()["results"]
        # The token's last-used stamp is written at most once a minute: not the list's cost.
        sql = [q["sql"] for q in queries.captured_queries if "studies_apitoken" not in q["sql"]]
        return len(sql), rows

    for i in range(2):
        failed_run(i)
    few, rows = listing()
    assert [r["outcome"]["state"] for r in rows] == ["failed", "failed"]
    for i in range(2, 6):
        failed_run(i)
    many, rows = listing()
    assert len(rows) == 6 and all(r["outcome"]["by_kind"] == {"connection": 2} for r in rows)
    assert many == few
