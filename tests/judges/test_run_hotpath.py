"""The drain's hot path: requests built once per criterion are byte-identical to the ones built
per job, the one-statement record and verdict upsert store awkward values exactly, lapsed
leases are still reclaimed (first) when a claim skips looking for them, and a verdict combined
from the outcome just recorded equals the one built by reading the jobs back."""

from __future__ import annotations

import math
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from judges.executor import CallResults, DrainContext, prepare_call, run_drain, subject_views
from judges.models import JudgeJob, JudgeRun, Verdict
from judges.prompts import provider_request_for, subject_context_for
from judges.providers import provider_prepare, serialize_body
from judges.ratelimit import estimate_tokens
from judges.runs import (
    JobOutcome,
    job_row_for_outcome,
    jobs_claim,
    jobs_record,
    jobs_record_with_verdicts,
    judge_run_start,
    subject_key,
    verdicts_build,
)
from studies.models import Comparison, Output
from tests.judges.provider_server import ProviderServer

from . import run_fixtures
from .run_fixtures import EnqueueSpy, StudyData, build_study_data, llm_config, make_version

provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

pytestmark = pytest.mark.django_db


def start(data: StudyData, base_url: str, criteria: list, **config: Any) -> JudgeRun:
    version = make_version(data.study, llm_config(base_url, **config))
    return judge_run_start(study=data.study, judge_version=version, criteria=criteria,
                           enqueue=EnqueueSpy())


def test_requests_built_once_per_criterion_equal_the_per_job_requests(
    study: Any, judge_key_env: str
) -> None:
    data = build_study_data(study, n_items=3)
    data.study.run_conditions = {"production_prompt": "Answer briefly. <<<not a block>>>"}
    data.study.save(update_fields=["run_conditions"])
    run = start(data, "http://127.0.0.1:9/v1", [data.binary, data.ordinal, data.pairwise],
                samples=2, parameters={"temperature": 0.7, "max_tokens": 64, "seed": 11})
    run = JudgeRun.objects.select_related("judge_version__judge", "study").get(pk=run.pk)
    claim = jobs_claim(run_id=run.pk, limit=1000, lease_token="t")
    assert {j.order for j in claim.jobs} == {"", "ab", "ba"}
    dctx = DrainContext(run)
    outputs, comparisons = subject_views(claim.jobs, dctx.study)
    for job in claim.jobs:
        prepared = prepare_call(job, dctx, outputs, comparisons)
        criterion = {c.pk: c for c in (data.binary, data.ordinal, data.pairwise)}[
            job.criterion_id]
        if job.output_id is not None:
            subject = Output.objects.select_related("item", "study").get(pk=job.output_id)
            ctx = subject_context_for(criterion=criterion, output=subject)
        else:
            assert job.comparison_id is not None
            pair = Comparison.objects.select_related(
                "item", "study", "output_a", "output_b").get(pk=job.comparison_id)
            ctx = subject_context_for(criterion=criterion, comparison=pair, order=job.order)
        expected = provider_request_for(config=run.judge_version.config, ctx=ctx)
        want = provider_prepare(expected)
        # The bytes sent: the spliced body when the call has one, else the request in full.
        got, content = prepared.wire or (provider_prepare(prepared.request), b"")
        content = content or serialize_body(got.body)
        assert got.url == want.url and dict(got.headers) == dict(want.headers)
        body = dict(want.body)
        body["seed"] = 11 + job.sample_index  # samples get distinct seeds
        assert content == serialize_body(body), (job.pk, job.order)
        assert prepared.est_tokens == estimate_tokens(
            prompt_chars=sum(len(m.content) for m in expected.messages), max_tokens=64)


AWKWARD = 'quote \' "double" back\\slash %s %(x)s {json: [1, 2]} tab\t nl\n café ✓ 🙂 \u2028'


def test_record_stores_awkward_values_exactly_and_only_under_the_lease(study: Any) -> None:
    data = build_study_data(study, n_items=2, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    a, b = jobs_claim(run_id=run.pk, limit=2, lease_token="tok").jobs
    retry_at = timezone.now() + timedelta(seconds=30)
    outcomes = [
        JobOutcome(job_id=a.pk, lease_token="tok", status="done", parsed_value="pass",
                   value_num=1.0, probability=0.123456789012345, rationale=AWKWARD,
                   raw_response=AWKWARD * 3, http_status=200,
                   provider_request_id="req-" + "x" * 250, tokens_in=12, tokens_out=3,
                   latency_ms=101.5, cost=1.5e-7,
                   details={"finish_reason": "stop", "nested": {"k": [AWKWARD, None, 2.5]}}),
        JobOutcome(job_id=b.pk, lease_token="tok", status="queued", error_kind="transient",
                   error="retrying in 30.0s: HTTP 503", http_status=503, available_at=retry_at,
                   latency_ms=float("inf"), cost=float("-inf"),  # not JSON, still stored
                   details={"attempt_errors": [{"attempt": 1, "reason": AWKWARD}]}),
        JobOutcome(job_id=b.pk, lease_token="someone-else", status="done", parsed_value="fail"),
    ]
    assert sorted(jobs_record(outcomes=outcomes[:2])) == sorted([a.pk, b.pk])
    assert jobs_record(outcomes=outcomes) == []  # lease gone: nothing lands twice
    ja, jb = JudgeJob.objects.get(pk=a.pk), JudgeJob.objects.get(pk=b.pk)
    assert ja.status == "done" and ja.rationale == AWKWARD and ja.raw_response == AWKWARD * 3
    assert ja.probability == 0.123456789012345 and ja.cost == 1.5e-7 and ja.latency_ms == 101.5
    assert ja.provider_request_id == ("req-" + "x" * 250)[:200]
    assert ja.details == {"finish_reason": "stop", "nested": {"k": [AWKWARD, None, 2.5]}}
    assert ja.finished_at is not None and ja.lease_token == "" and ja.lease_expires_at is None
    assert jb.status == "queued" and jb.finished_at is None and jb.available_at == retry_at
    assert jb.details["attempt_errors"][0]["reason"] == AWKWARD and jb.value_num is None
    assert jb.tokens_in is None and jb.parsed_value == "" and jb.lease_token == ""
    assert jb.latency_ms == math.inf and jb.cost == -math.inf


def test_a_nul_in_one_answer_does_not_fail_the_chunk(study: Any) -> None:
    """PostgreSQL text and jsonb refuse NUL; one provider answer carrying one must not make the
    chunk's single record statement fail for every job in it."""
    data = build_study_data(study, n_items=2, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    a, b = jobs_claim(run_id=run.pk, limit=2, lease_token="tok").jobs
    nul = 'pass\x00 "rationale" \\u0000 stays'
    outcomes = [
        JobOutcome(job_id=a.pk, lease_token="tok", status="done", parsed_value="pass",
                   rationale=nul, raw_response=nul, details={"tokens": [nul], nul: 1}),
        JobOutcome(job_id=b.pk, lease_token="tok", status="done", parsed_value="fail",
                   rationale="plain"),
    ]
    assert sorted(jobs_record(outcomes=outcomes)) == sorted([a.pk, b.pk])
    ja = JudgeJob.objects.get(pk=a.pk)
    stored = nul.replace("\x00", "\ufffd")  # on both backends
    assert ja.rationale == stored and ja.raw_response == stored
    assert ja.details == {"tokens": [stored], stored: 1}
    # An escaped backslash before "u0000" is text, not a NUL: it is kept as it was.
    assert "\\u0000 stays" in ja.rationale
    assert JudgeJob.objects.get(pk=b.pk).rationale == "plain"


def test_a_lone_surrogate_in_one_answer_does_not_fail_the_chunk(study: Any) -> None:
    """json.loads turns a provider's "\\ud800" into a lone surrogate, which no UTF-8 encoder
    accepts (neither psycopg's nor sqlite3's); it becomes U+FFFD instead of failing the chunk's
    record, and the verdict built from that job is stored too."""
    import json

    data = build_study_data(study, n_items=2, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    a, b = jobs_claim(run_id=run.pk, limit=2, lease_token="tok").jobs
    odd = json.loads('"pass \\ud800 and a real 🙂"')
    outcomes = [
        JobOutcome(job_id=a.pk, lease_token="tok", status="done", parsed_value="pass",
                   rationale=odd, raw_response=odd, details={"tokens": [odd]}),
        JobOutcome(job_id=b.pk, lease_token="tok", status="done", parsed_value="fail",
                   rationale="plain"),
    ]
    assert sorted(jobs_record(outcomes=outcomes)) == sorted([a.pk, b.pk])
    ja = JudgeJob.objects.get(pk=a.pk)
    assert ja.rationale == "pass \ufffd and a real 🙂" == ja.raw_response
    assert ja.details == {"tokens": ["pass \ufffd and a real 🙂"]}
    assert JudgeJob.objects.get(pk=b.pk).rationale == "plain"
    # The verdict from the outcome just recorded (the executor's path) and read back.
    row = job_row_for_outcome(outcome=outcomes[0], run_id=run.pk, sample_index=0, order="")
    assert verdicts_build(subjects=[subject_key(a)], complete={subject_key(a): [row]}) == 1
    verdict = Verdict.objects.get(output_id=a.output_id)
    assert "\ud800" not in verdict.rationale and "\ufffd" in verdict.rationale


def test_record_with_verdicts_writes_a_verdict_only_for_what_it_recorded(study: Any) -> None:
    """One statement records the chunk and the verdicts of its one-job subjects: a job whose
    lease was lost gets neither, a job to be retried gets no verdict, awkward text lands as
    the job row and the verdict built by reading the jobs back would have it."""
    data = build_study_data(study, n_items=4, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    a, b, c, d = jobs_claim(run_id=run.pk, limit=4, lease_token="tok").jobs
    odd = 'pass\x00 "q" \\ %(x)s ' + AWKWARD
    outcomes = [
        JobOutcome(job_id=a.pk, lease_token="tok", status="done", parsed_value="pass",
                   value_num=1.0, probability=0.25, rationale=odd, raw_response="{}"),
        JobOutcome(job_id=b.pk, lease_token="tok", status="unparseable", error_kind="parse",
                   error="unparseable: no verdict", raw_response=odd),
        JobOutcome(job_id=c.pk, lease_token="tok", status="queued", error_kind="transient",
                   error="retrying in 1.0s: HTTP 503", http_status=503),
        JobOutcome(job_id=d.pk, lease_token="someone-else", status="done", parsed_value="fail"),
    ]
    one_job = {o.job_id: (subject_key(j), job_row_for_outcome(
        outcome=o, run_id=run.pk, sample_index=0, order=""))
        for o, j in zip(outcomes, (a, b, c, d), strict=True) if o.status != "queued"}
    recorded, changed = jobs_record_with_verdicts(outcomes=outcomes, one_job=one_job,
                                                  criteria={data.binary.pk: data.binary})
    assert sorted(recorded) == sorted([a.pk, b.pk, c.pk]) and changed == 2
    verdicts = {v.output_id: v for v in Verdict.objects.filter(run=run)}
    assert set(verdicts) == {a.output_id, b.output_id}  # not c (retried), not d (lease lost)
    assert verdicts[a.output_id].value == "pass" and verdicts[a.output_id].is_scored
    assert verdicts[a.output_id].rationale == odd.replace("\x00", "\ufffd")
    assert not verdicts[b.output_id].is_scored
    assert JudgeJob.objects.get(pk=d.pk).status == "running"  # untouched
    # The same verdicts built by reading the jobs back: nothing to change.
    assert verdicts_build(subjects=[subject_key(a), subject_key(b)]) == 0
    # Recorded again (a duplicate delivery): the leases are gone, nothing changes.
    assert jobs_record_with_verdicts(outcomes=outcomes, one_job=one_job) == ([], 0)


def test_a_claim_that_skips_lapsed_leases_still_reclaims_them(study: Any, settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 2
    data = build_study_data(study, n_items=3, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    lost = jobs_claim(run_id=run.pk, limit=2, lease_token="dead").jobs
    past = timezone.now() - timedelta(seconds=1)
    JudgeJob.objects.filter(pk__in=[j.pk for j in lost]).update(lease_expires_at=past)
    JudgeJob.objects.filter(pk=lost[1].pk).update(attempts=2)  # its last attempt
    # Queued work is left: this claim does not look at the lapsed leases.
    queued_one = jobs_claim(run_id=run.pk, limit=1, lease_token="w", lapsed=False).jobs
    assert len(queued_one) == 1 and queued_one[0].pk not in {j.pk for j in lost}
    assert queued_one[0].attempts == 1
    # No queued job is left: a claim that skips lapsed leases looks for them after all.
    again = jobs_claim(run_id=run.pk, limit=10, lease_token="w", lapsed=False).jobs
    assert [j.pk for j in again] == [lost[0].pk] and again[0].attempts == 2
    exhausted = JudgeJob.objects.get(pk=lost[1].pk)
    assert exhausted.status == "failed" and "worker lost" in exhausted.error
    run.refresh_from_db()
    assert run.calls_made == 4 and run.last_activity_at is not None


def test_lapsed_leases_go_first_when_the_claim_looks(study: Any) -> None:
    data = build_study_data(study, n_items=4, n_candidates=1)
    run = start(data, "http://127.0.0.1:9/v1", [data.binary])
    first = jobs_claim(run_id=run.pk, limit=1, lease_token="dead").jobs[0]
    JudgeJob.objects.filter(pk=first.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert jobs_claim(run_id=run.pk, limit=1, lease_token="w", lapsed=False).jobs[0].pk != first.pk
    assert [j.pk for j in jobs_claim(run_id=run.pk, limit=1, lease_token="w").jobs] == [first.pk]


def test_verdicts_from_recorded_outcomes_equal_the_ones_read_back(
    study: Any, provider_server: ProviderServer, judge_key_env: str
) -> None:
    data = build_study_data(study, n_items=6)
    provider_server.enqueue(*[_unparseable()] * 2)
    run = start(data, provider_server.openai_base_url, [data.binary, data.ordinal],
                logprobs=True)
    report = run_drain(run_id=run.pk, concurrency=8, slice_s=60)
    assert report.run_finished and report.verdicts == 24
    before = {(v.criterion_id, v.output_id): (v.is_scored, v.value, v.value_num, v.probability,
                                             v.rationale, v.details, v.n_samples, v.run_id,
                                             v.updated_at)
              for v in Verdict.objects.filter(run=run)}
    assert sum(1 for v in before.values() if not v[0]) == 2  # the unparseable answers
    # Built again from the stored jobs: identical, so the upsert changes nothing at all.
    subjects = {subject_key(j) for j in JudgeJob.objects.filter(run=run)}
    assert verdicts_build(subjects=subjects) == 0
    after = {(v.criterion_id, v.output_id): (v.is_scored, v.value, v.value_num, v.probability,
                                            v.rationale, v.details, v.n_samples, v.run_id,
                                            v.updated_at)
             for v in Verdict.objects.filter(run=run)}
    assert after == before


def _unparseable() -> Any:
    from tests.judges.provider_server import success

    return success("no verdict here")


def test_results_wake_the_waiter_once_per_batch_or_at_the_timeout() -> None:
    box = CallResults()
    item: Any = (None, None)

    def producer() -> None:
        for _ in range(5):
            time.sleep(0.01)
            box.put(item)

    t = threading.Thread(target=producer)
    t0 = time.monotonic()
    t.start()
    got = box.take(min_n=5, timeout_s=5)
    assert len(got) == 5 and time.monotonic() - t0 < 2
    t.join()
    t0 = time.monotonic()
    assert box.take(min_n=3, timeout_s=0.05) == [] and time.monotonic() - t0 >= 0.04
    box.put(item)
    assert len(box.take(min_n=3, timeout_s=0.05)) == 1  # whatever arrived by the timeout


def test_worker_gc_tune_freezes_start_up_objects_and_raises_the_young_threshold() -> None:
    import gc

    from celery.signals import worker_process_init, worker_ready

    from judges import celery_tasks

    before = gc.get_threshold()
    try:
        celery_tasks.worker_gc_tune()
        assert gc.get_freeze_count() > 1000  # Django and the app, imported at start-up
        assert gc.get_threshold()[0] >= celery_tasks.GC_GEN0_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    # Both ways a worker process starts tasks tune it.
    for signal, handler in ((worker_ready, celery_tasks._gc_tune_worker),
                            (worker_process_init, celery_tasks._gc_tune_child)):
        assert any(ref() is handler for _, ref in signal.receivers), signal


@pytest.mark.postgres  # only a drain on PostgreSQL has a recorder thread
@pytest.mark.django_db(transaction=True)
def test_a_drain_records_on_its_own_thread_outside_a_transaction(
    study: Any, provider_server: ProviderServer, judge_key_env: str, monkeypatch: Any
) -> None:
    """Outside a transaction the chunks are written by the drain's recorder thread (its own
    connection), for one-job subjects and aggregated ones (pairwise) alike; every job ends
    once, every subject gets its verdict, and the recorder's connection is closed after."""
    from django.db import connections

    import judges.executor as executor

    writers: list[str] = []
    write = executor._chunk_write

    def spy(chunk: Any, criteria: Any) -> Any:
        writers.append(threading.current_thread().name)
        return write(chunk, criteria)

    monkeypatch.setattr(executor, "_chunk_write", spy)
    monkeypatch.setattr(executor, "RECORD_MIN", 4)
    data = build_study_data(study, n_items=8)
    run = start(data, provider_server.openai_base_url, [data.binary, data.pairwise])
    jobs = JudgeJob.objects.filter(run=run).count()
    report = run_drain(run_id=run.pk, concurrency=8, slice_s=60)
    assert report.run_finished and report.recorded == jobs and report.discarded == 0
    assert writers and all(name.startswith("judge-record") for name in writers)
    assert len(writers) > 1  # several chunks, written in turn
    assert JudgeJob.objects.filter(run=run, status="done").count() == jobs
    outputs = Output.objects.filter(study=data.study).count()
    pairs = Comparison.objects.filter(study=data.study).count()
    assert Verdict.objects.filter(run=run, output__isnull=False).count() == outputs
    assert Verdict.objects.filter(run=run, comparison__isnull=False).count() == pairs
    assert report.verdicts == outputs + pairs
    # The recorder's connection did not outlive it (a backend takes a moment to exit).
    others = -1
    for _ in range(50):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()")
            others = cursor.fetchone()[0]
        if others == 0:
            break
        time.sleep(0.05)
    assert others == 0
