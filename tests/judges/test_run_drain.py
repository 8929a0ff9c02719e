"""The executor against the simulated provider over real sockets: verdicts, pairwise orders,
samples, calls in flight, and every provider fault either retried or recorded with a reason."""

from __future__ import annotations

import time
from typing import Any

import pytest

from judges.executor import run_drain
from judges.models import JudgeJob, JudgeRun, Verdict
from judges.runs import judge_run_start
from tests.judges.provider_server import (
    ProviderServer,
    connection_reset,
    empty_choices,
    html_page,
    rate_limited,
    raw,
    server_error,
    slow,
    truncated_body,
    truncated_json,
)

from . import run_fixtures
from .run_fixtures import EnqueueSpy, StudyData, build_study_data, llm_config, make_version

# Fixtures shared with the other side-R test modules (kept out of a shared conftest.py).
provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_retries(settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.05
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 4
    settings.REVIEWHUB_PROVIDER_LIMITS = {}


def drive(run: JudgeRun, *, concurrency: int = 16, rounds: int = 50) -> list[Any]:
    """Run drains until the run leaves `running` (a worker would chain tasks like this)."""
    reports = []
    for _ in range(rounds):
        report = run_drain(run_id=run.pk, concurrency=concurrency, slice_s=60)
        reports.append(report)
        run.refresh_from_db()
        if run.status != JudgeRun.Status.RUNNING:
            return reports
        if report.next_available_at is not None:
            from django.utils import timezone

            time.sleep(max(0.0, (report.next_available_at - timezone.now()).total_seconds()))
    raise AssertionError(f"run still {run.status} after {rounds} drains")


def start(data: StudyData, server: ProviderServer, criteria: list, **config: Any) -> JudgeRun:
    version = make_version(data.study, llm_config(server.openai_base_url, **config))
    return judge_run_start(study=data.study, judge_version=version, criteria=criteria,
                           enqueue=EnqueueSpy())


def test_binary_run_completes_with_the_simulated_judges_verdicts(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    data = build_study_data(study)
    run = start(data, provider_server, [data.binary])
    reports = drive(run)
    assert run.status == "done" and reports[-1].run_finished
    assert provider_server.count() == 12
    verdicts = {v.output_id: v for v in Verdict.objects.filter(run=run)}
    assert len(verdicts) == 12
    for out in data.outputs:
        expected = "fail" if "[bad]" in out.text else "pass"
        assert verdicts[out.pk].value == expected and verdicts[out.pk].is_scored
    job = JudgeJob.objects.filter(run=run).first()
    assert job is not None and job.status == "done" and job.attempts == 1
    assert job.provider_request_id.startswith("req_sim_") and job.http_status == 200
    assert job.tokens_in and job.tokens_out and job.latency_ms and job.latency_ms > 0
    assert job.cost is not None and job.cost > 0
    assert job.raw_response and job.lease_token == ""


def test_pairwise_run_judges_both_orders_and_flags_position_bias(
    study: Any, judge_key_env: str
) -> None:
    data = build_study_data(study)
    with ProviderServer(first_position_bias=True) as server:
        run = start(data, server, [data.pairwise])
        drive(run)
        assert server.count() == 12  # 6 comparisons x 2 orders
    verdicts = list(Verdict.objects.filter(run=run).select_related(
        "comparison__output_a", "comparison__output_b"))
    assert len(verdicts) == 6
    for v in verdicts:
        assert v.comparison is not None
        a_bad = "[bad]" in v.comparison.output_a.text
        b_bad = "[bad]" in v.comparison.output_b.text
        if a_bad != b_bad:
            assert v.value == ("B" if a_bad else "A")
            assert v.details["position_inconsistent"] is False
        else:  # the simulated judge prefers whatever it sees first
            assert v.value == "tie" and v.details["position_inconsistent"] is True
            assert v.details["orders"] == {"ab": "A", "ba": "B"}


def test_samples_with_logprobs_give_probabilities_and_keep_each_sample(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    data = build_study_data(study, n_items=2)
    run = start(data, provider_server, [data.binary], samples=3, logprobs=True)
    drive(run)
    assert provider_server.count() == 12
    for v in Verdict.objects.filter(run=run).select_related("output"):
        assert v.output is not None
        assert v.n_samples == 3 and len(v.details["samples"]) == 3
        assert v.details["probability_source"] == "logprobs"
        expected = 0.1 if "[bad]" in v.output.text else 0.9
        assert v.probability == pytest.approx(expected, abs=1e-6)


def test_one_drain_keeps_at_least_64_calls_in_flight(study: Any, judge_key_env: str) -> None:
    data = build_study_data(study, n_items=100, n_candidates=2)
    with ProviderServer(latency_s=0.3, record=False) as server:
        run = start(data, server, [data.binary])
        t0 = time.monotonic()
        reports = drive(run, concurrency=64)
        elapsed = time.monotonic() - t0
        assert server.max_open_connections >= 64
    assert max(r.max_in_flight for r in reports) >= 64
    assert Verdict.objects.filter(run=run).count() == 200
    # 200 calls of 0.3 s at 64 in flight: ~4 waves; serially it would take 60 s.
    assert elapsed < 15


# --- provider faults: each retried (transient) or recorded (permanent) with the reason -------

FAULTS = [
    pytest.param([rate_limited(None, retry_after_ms="60")] * 3, "done", 4, "rate limited",
                 id="429-burst-retry-after"),
    pytest.param([server_error(500), server_error(503)], "done", 3, "HTTP 500", id="5xx"),
    pytest.param([connection_reset()], "done", 2, "connection error", id="connection-reset"),
    pytest.param([truncated_body()], "done", 2, "connection error", id="body-cut-mid-stream"),
    pytest.param([html_page(502)], "done", 2, "HTML error page", id="html-502"),
    pytest.param([server_error(500)] * 4, "failed", 4, "gave up after 4 attempts",
                 id="5xx-until-attempts-run-out"),
    pytest.param([truncated_json()], "failed", 1, "truncated JSON", id="truncated-json-200"),
    pytest.param([html_page(200)], "failed", 1, "HTML", id="html-200"),
    pytest.param([empty_choices()], "failed", 1, "choice", id="empty-choices"),
    pytest.param([raw(401, '{"error": {"message": "bad key"}}')], "failed", 1, "bad key",
                 id="401"),
]


@pytest.mark.parametrize(("behaviours", "status", "attempts", "reason"), FAULTS)
def test_provider_fault_is_retried_or_recorded(
    study: Any, provider_server: ProviderServer, judge_key_env: str,
    behaviours: list, status: str, attempts: int, reason: str,
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    provider_server.enqueue(*behaviours)
    run = start(data, provider_server, [data.binary])
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == status and job.attempts == attempts
    assert provider_server.count() == attempts
    recorded = job.error + " ".join(e["reason"] for e in job.details.get("attempt_errors", []))
    assert reason.lower() in recorded.lower()
    if status == "done":
        assert len(job.details["attempt_errors"]) == attempts - 1
        assert Verdict.objects.get(run=run).is_scored
    else:
        assert job.error_kind == ("transient" if "gave up" in reason else "permanent")
        verdict = Verdict.objects.get(run=run)
        assert not verdict.is_scored and verdict.value == ""  # never a pass or a fail


def test_retry_after_is_honoured(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    provider_server.enqueue(rate_limited("1"))
    run = start(data, provider_server, [data.binary])
    t0 = time.monotonic()
    drive(run)
    assert time.monotonic() - t0 >= 1.0
    job = JudgeJob.objects.get(run=run)
    assert job.details["attempt_errors"][0]["retry_after_s"] == 1.0 and job.status == "done"


def test_a_call_slower_than_its_timeout_is_a_transient_timeout(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    provider_server.enqueue(slow(4.0))
    run = start(data, provider_server, [data.binary], timeout_s=1)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "done" and job.attempts == 2
    assert "timeout" in job.details["attempt_errors"][0]["reason"].lower()


def test_unparseable_answer_is_unscored_with_the_raw_text(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    from tests.judges.provider_server import success

    data = build_study_data(study, n_items=1, n_candidates=1)
    provider_server.enqueue(success("I would rather not say."))
    run = start(data, provider_server, [data.binary])
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "unparseable" and job.error_kind == "parse"
    assert job.raw_response == "I would rather not say."
    v = Verdict.objects.get(run=run)
    assert not v.is_scored and v.value == "" and v.value_num is None


def test_missing_api_key_fails_jobs_permanently_with_the_reason(
    study: Any, provider_server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .run_fixtures import KEY_ENV

    data = build_study_data(study, n_items=1, n_candidates=1)
    run = start(data, provider_server, [data.binary])
    monkeypatch.delenv(KEY_ENV, raising=False)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "failed" and job.error_kind == "permanent"
    assert KEY_ENV in job.error and provider_server.count() == 0


def test_rate_limit_caps_calls_in_flight_inside_the_worker(
    study: Any, judge_key_env: str, settings: Any
) -> None:
    data = build_study_data(study, n_items=20, n_candidates=2)
    with ProviderServer(latency_s=0.1, record=False) as server:
        settings.REVIEWHUB_PROVIDER_LIMITS = {
            f"127.0.0.1:{server.port}/sim-judge": {"max_in_flight": 5}}
        run = start(data, server, [data.binary])
        t0 = time.monotonic()
        drive(run, concurrency=32)
        elapsed = time.monotonic() - t0
        # Five at a time: httpx opens a connection only for a request that has none free.
        assert 1 <= server.max_open_connections <= 6
    # 40 calls of 0.1 s, 5 at a time: at least 8 waves.
    assert elapsed >= 0.8
    assert Verdict.objects.filter(run=run).count() == 40



# --- the chain of batch tasks: after every drain, queued work has a successor ----------------


class Broker:
    """Stands in for Celery under the `judges.run_work` adapter: keeps the successors that each
    drain schedules (with their countdowns) and delivers them when they are due, one at a time,
    the way a worker would. Nothing else wakes the run: no sweeper runs here."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from judges import celery_tasks

        self.due: list[tuple[float, int]] = []  # (monotonic due time, run id)
        self.sent: list[float | None] = []  # countdowns sent by the drain that ran last
        monkeypatch.setattr(celery_tasks, "judge_run_enqueue", self._enqueue)

    def _enqueue(self, *, run_id: int, n: int = 1, countdown: float | None = None) -> int:
        for _ in range(n):
            self.due.append((time.monotonic() + (countdown or 0.0), run_id))
            self.sent.append(countdown)
        return n

    def chain(self, run: JudgeRun, *, chains: int = 1, max_drains: int = 60) -> list[Any]:
        """Deliver tasks until the run leaves `running`; after each drain, assert that a run
        left with queued jobs got a successor, due no later than its earliest retry."""
        from django.utils import timezone

        from judges.celery_tasks import MAX_COUNTDOWN_S, judge_run_work

        self.due = [(time.monotonic(), run.pk)] * chains
        results = []
        for _ in range(max_drains):
            if not self.due:
                break
            self.due.sort()
            at, run_id = self.due.pop(0)
            time.sleep(max(0.0, at - time.monotonic()))
            self.sent = []
            results.append(judge_run_work(run_id))
            run.refresh_from_db()
            queued = JudgeJob.objects.filter(run=run, status="queued")
            if run.status != JudgeRun.Status.RUNNING:
                assert not queued.exists(), f"a {run.status} run kept queued jobs"
                continue
            if not queued.exists():
                continue
            assert self.sent, (
                f"the drain left {queued.count()} queued jobs and scheduled no successor "
                f"(drain: {results[-1]})")
            ready = queued.filter(available_at__isnull=True).exists() or queued.filter(
                available_at__lte=timezone.now()).exists()
            earliest = min(c or 0.0 for c in self.sent)
            if ready:
                assert earliest <= 2.0, self.sent
            else:
                first = queued.order_by("available_at").values_list(
                    "available_at", flat=True).first()
                assert first is not None
                wait = (first - timezone.now()).total_seconds()
                assert earliest <= min(MAX_COUNTDOWN_S, max(0.0, wait) + 0.5), (earliest, wait)
        run.refresh_from_db()
        assert run.status != JudgeRun.Status.RUNNING, (
            f"stalled: run still running with {self.due!r} scheduled after {len(results)} "
            f"drains; jobs {dict(JudgeJob.objects.filter(run=run).values_list('id', 'status'))}")
        return results


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Broker:
    settings.REVIEWHUB_JUDGE_CONCURRENCY = 16
    settings.REVIEWHUB_JUDGE_TASK_SLICE_S = 60
    return Broker(monkeypatch)


def _last_output_fails_once(data: StudyData, server: ProviderServer, fault: Any) -> int:
    """The last output's first call answers `fault` after every other call has answered, so
    that its transient error is in the drain's last chunk."""
    token = f"[o{len(data.outputs) - 1}]"
    hits: list[int] = []

    def handler(req: Any) -> Any:
        if token in req.prompt_text() and not hits:
            hits.append(1)
            return slow(0.3, then=fault)
        return None

    server.handler = handler
    return data.outputs[-1].pk


@pytest.mark.parametrize("n_items", [1, 4], ids=["one-job", "last-of-eight"])
@pytest.mark.parametrize(
    "fault", [server_error(503), rate_limited(None, retry_after_ms="1200")], ids=["503", "429"])
def test_a_transient_error_in_the_last_chunk_gets_a_successor_at_its_retry_time(
    study: Any, provider_server: ProviderServer, judge_key_env: str, broker: Broker,
    monkeypatch: pytest.MonkeyPatch, settings: Any, n_items: int, fault: Any,
) -> None:
    # The retry must come due after this drain has ended, or the drain rightly claims it
    # itself (it re-claims every 0.25 s while calls are in flight) and no successor is needed.
    # Full jitter can make the first backoff a few milliseconds, so the jitter is pinned to its
    # upper bound: 1 s for the 503, and 1.2 s x 1.1 from the 429's retry-after-ms.
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 1.0
    monkeypatch.setattr("judges.executor.random.uniform", lambda a, b: b)
    data = build_study_data(study, n_items=n_items, n_candidates=1 if n_items == 1 else 2)
    output_id = _last_output_fails_once(data, provider_server, fault)
    run = start(data, provider_server, [data.binary])
    t0 = time.monotonic()
    results = broker.chain(run)
    assert run.status == "done" and len(results) == 2, results
    job = JudgeJob.objects.get(run=run, output_id=output_id)
    assert job.status == "done" and job.attempts == 2
    assert Verdict.objects.filter(run=run, is_scored=True).count() == len(data.outputs)
    # The retry waited for its backoff (and the 429's retry-after-ms), not for a sweeper.
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("budget_calls", [None, 20], ids=["budget-enough", "budget-runs-out"])
def test_a_cost_limited_run_never_stalls_after_its_probe_calls(
    study: Any, provider_server: ProviderServer, judge_key_env: str, broker: Broker,
    budget_calls: int | None,
) -> None:
    from judges.runs import COST_PROBE_CALLS

    data = build_study_data(study, n_items=20, n_candidates=2)  # 40 jobs
    # What one call costs with this judge and these outputs, measured on a throwaway run.
    probe_version = make_version(data.study, llm_config(provider_server.openai_base_url),
                                 name="price-probe")
    probe = judge_run_start(study=data.study, judge_version=probe_version,
                            criteria=[data.binary], enqueue=EnqueueSpy())
    drive(probe)
    costs = [c for c in JudgeJob.objects.filter(run=probe).values_list("cost", flat=True)]
    per_call = max(c for c in costs if c is not None)
    provider_server.reset()
    max_cost = per_call * (budget_calls if budget_calls else 1000)
    version = make_version(data.study, llm_config(provider_server.openai_base_url))
    run = judge_run_start(study=data.study, judge_version=version, criteria=[data.binary],
                          max_cost=max_cost, enqueue=EnqueueSpy())
    broker.chain(run, chains=3)
    jobs = JudgeJob.objects.filter(run=run)
    statuses = set(jobs.values_list("status", flat=True))
    assert provider_server.count() > COST_PROBE_CALLS
    if budget_calls is None:
        assert run.status == "done" and statuses == {"done"}
    else:
        # The budget ends the run in a clear state: stopped with the figures, nothing queued.
        assert run.status == "stopped" and run.stop_reason.startswith("max_cost reached")
        assert statuses <= {"done", "cancelled"} and "cancelled" in statuses
        spent = sum(c or 0.0 for c in jobs.values_list("cost", flat=True))
        assert spent <= max_cost * 1.5
