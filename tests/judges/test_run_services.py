"""Judge run services: selections, unique jobs, re-runs, pairwise, claims, records, budgets,
cancel/resume, idempotency and the sweeper (no network: outcomes are built by hand)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judges.models import JudgeJob, JudgeRun, Verdict
from judges.runs import (
    JobOutcome,
    jobs_claim,
    jobs_record,
    judge_run_cancel,
    judge_run_rerun,
    judge_run_resume,
    judge_run_start,
    judge_sweep,
    run_finish_if_complete,
    subject_key,
    verdicts_build,
)
from reviewhub.api.errors import Conflict, ValidationFailed
from studies.models import Comparison

from .run_fixtures import EnqueueSpy, StudyData, build_study_data, llm_config, make_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(study: Any) -> StudyData:
    return build_study_data(study)


def start(data: StudyData, criteria: list | None = None, *, samples: int = 1,
          spy: EnqueueSpy | None = None, **kw: Any) -> JudgeRun:
    version = make_version(data.study, llm_config("http://127.0.0.1:9/v1", samples=samples))
    return judge_run_start(study=data.study, judge_version=version,
                           criteria=criteria or [data.binary], enqueue=spy or EnqueueSpy(), **kw)


def done(job: JudgeJob, token: str, value: str = "pass", **kw: Any) -> JobOutcome:
    return JobOutcome(job_id=job.pk, lease_token=token, status="done", parsed_value=value,
                      value_num={"pass": 1.0, "fail": 0.0}.get(value), **kw)


def finish_all(run: JudgeRun, value: str = "pass") -> list[int]:
    claim = jobs_claim(run_id=run.pk, limit=10_000, lease_token="t-all")
    recorded = jobs_record(outcomes=[done(j, "t-all", value) for j in claim.jobs])
    verdicts_build(subjects={subject_key(j) for j in claim.jobs})
    return recorded


def test_start_creates_one_job_per_subject_and_sample_and_enqueues_after_commit(
    data: StudyData, django_capture_on_commit_callbacks: Any
) -> None:
    spy = EnqueueSpy()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = start(data, [data.binary, data.ordinal], samples=3, spy=spy)
    assert spy.calls == []  # nothing is sent before the commit
    for cb in callbacks:
        cb()
    assert spy.calls == [(run.pk, 2)]  # 72 jobs: two batch tasks of 64 calls in flight
    assert run.status == JudgeRun.Status.RUNNING
    assert JudgeJob.objects.filter(run=run).count() == 12 * 2 * 3
    assert set(JudgeJob.objects.filter(run=run).values_list("sample_index", flat=True)) == {0, 1, 2}
    assert run.creation_stats["jobs_created"] == 72 and run.creation_stats["subjects"] == 12


def test_selection_stratum_candidate_and_seeded_sample(data: StudyData) -> None:
    run = start(data, selection={"kind": "stratum", "dimension": "lang", "label": "de"})
    outs = set(JudgeJob.objects.filter(run=run).values_list("output__item__strata__lang",
                                                            flat=True))
    assert outs == {"de"} and JudgeJob.objects.filter(run=run).count() == 6
    cand = data.candidates[1]
    run = start(data, [data.ordinal], selection={"kind": "candidate", "candidate": cand.name})
    assert set(JudgeJob.objects.filter(run=run).values_list("output__candidate", flat=True)) == {
        cand.pk}
    run = start(data, [data.ordinal], selection={"kind": "sample", "n": 4})
    seed = run.selection["seed"]
    assert isinstance(seed, int)
    # Sampled outputs of cand-1 already have queued ordinal jobs in the candidate run above.
    stats = run.creation_stats
    assert stats["subjects"] == 4 and stats["jobs_created"] + stats["in_other_runs"] == 4
    assert JudgeJob.objects.filter(run=run).count() == stats["jobs_created"]
    with pytest.raises(ValidationFailed, match="dimension"):
        start(data, selection={"kind": "stratum", "dimension": "nope", "label": "x"})
    with pytest.raises(ValidationFailed, match=r"selection\.n"):
        start(data, selection={"kind": "sample", "n": 0})
    with pytest.raises(ValidationFailed, match="candidate"):
        start(data, selection={"kind": "candidate", "candidate": "ghost"})


def test_sample_is_reproducible_from_the_stored_seed(data: StudyData) -> None:
    from judges.runs import selection_outputs

    a = selection_outputs(study=data.study, selection={"kind": "sample", "n": 5, "seed": 7})
    b = selection_outputs(study=data.study, selection={"kind": "sample", "n": 5, "seed": 7})
    c = selection_outputs(study=data.study, selection={"kind": "sample", "n": 5, "seed": 8})
    assert a == b and len(a) == 5 and a != c


def test_rerun_creates_no_duplicates_skips_finished_and_adopts_cancelled(data: StudyData) -> None:
    run1 = start(data)
    claim = jobs_claim(run_id=run1.pk, limit=5, lease_token="t1")
    jobs_record(outcomes=[done(j, "t1") for j in claim.jobs])
    judge_run_cancel(run=run1)
    assert JudgeJob.objects.filter(run=run1, status="cancelled").count() == 7
    run2 = judge_run_rerun(run=run1, enqueue=EnqueueSpy())
    assert JudgeJob.objects.filter(judge_version=run1.judge_version).count() == 12
    assert run2.creation_stats == {"jobs_created": 0, "jobs_adopted": 7, "already_finished": 5,
                                   "in_other_runs": 0, "subjects": 12, "comparisons_created": 0}
    assert JudgeJob.objects.filter(run=run2, status="queued").count() == 7
    # A third run while run2 is active leaves run2's queued jobs alone.
    run3 = judge_run_rerun(run=run2, enqueue=EnqueueSpy())
    assert run3.creation_stats["in_other_runs"] == 7 and run3.status == JudgeRun.Status.DONE
    assert "nothing to do" in run3.stop_reason


def test_pairwise_creates_canonical_comparisons_and_both_orders(data: StudyData) -> None:
    data2 = build_study_data_three(data)
    run = start(data2, [data2.pairwise])
    comps = list(Comparison.objects.filter(study=data2.study))
    # 6 items x C(3, 2) candidate pairs, output_a from the lower candidate id.
    assert len(comps) == 18 and run.creation_stats["comparisons_created"] == 18
    assert all(c.output_a.candidate_id < c.output_b.candidate_id for c in comps)
    jobs = JudgeJob.objects.filter(run=run)
    assert jobs.count() == 36
    assert set(jobs.values_list("order", flat=True)) == {"ab", "ba"}
    # A second start neither duplicates comparisons nor jobs.
    start(data2, [data2.pairwise])
    assert Comparison.objects.filter(study=data2.study).count() == 18
    assert JudgeJob.objects.filter(criterion=data2.pairwise).count() == 36


def build_study_data_three(data: StudyData) -> StudyData:
    from studies.models import Candidate, Output

    extra = Candidate.objects.create(study=data.study, name="cand-extra")
    for item in data.items:
        data.outputs.append(Output.objects.create(study=data.study, candidate=extra, item=item,
                                                  text=f"extra {item.external_id}"))
    data.candidates.append(extra)
    return data


def test_curated_comparisons_are_used_as_they_are(data: StudyData) -> None:
    o = [x for x in data.outputs if x.item_id == data.items[0].pk]
    Comparison.objects.create(study=data.study, item=data.items[0], output_a=o[1],
                              output_b=o[0])
    run = start(data, [data.pairwise])
    assert run.creation_stats["comparisons_created"] == 0
    assert JudgeJob.objects.filter(run=run).count() == 2


def test_pairwise_verdict_maps_orders_back_and_flags_inconsistency(data: StudyData) -> None:
    run = start(data, [data.pairwise])
    claim = jobs_claim(run_id=run.pk, limit=100, lease_token="t")
    outcomes = []
    comps = sorted({j.comparison_id for j in claim.jobs if j.comparison_id is not None})
    consistent, biased = comps[0], comps[1]
    for j in claim.jobs:
        if j.comparison_id == consistent:
            value = "A" if j.order == "ab" else "B"  # output_a wins in both presentations
        elif j.comparison_id == biased:
            value = "A"  # whoever is shown first wins
        else:
            value = "tie"
        outcomes.append(done(j, "t", value))
    jobs_record(outcomes=outcomes)
    verdicts_build(subjects={subject_key(j) for j in claim.jobs})
    v1 = Verdict.objects.get(comparison_id=consistent)
    assert v1.value == "A" and v1.details["position_inconsistent"] is False
    assert v1.details["orders"] == {"ab": "A", "ba": "A"}
    v2 = Verdict.objects.get(comparison_id=biased)
    assert v2.value == "tie" and v2.value_num == 0.5
    assert v2.details["position_inconsistent"] is True
    assert v2.details["orders"] == {"ab": "A", "ba": "B"}
    assert Verdict.objects.filter(criterion=data.pairwise).count() == len(comps)


def test_same_job_delivered_twice_gives_one_verdict(data: StudyData) -> None:
    run = start(data, samples=2)
    claim = jobs_claim(run_id=run.pk, limit=100, lease_token="tok")
    outcomes = [done(j, "tok", "fail" if j.sample_index else "pass",
                     probability=0.4 if j.sample_index else 0.8) for j in claim.jobs]
    first = jobs_record(outcomes=outcomes)
    assert len(first) == 24
    assert jobs_record(outcomes=outcomes) == []  # the second delivery changes nothing
    subjects = {subject_key(j) for j in claim.jobs}
    assert verdicts_build(subjects=subjects) == 12
    assert verdicts_build(subjects=subjects) == 0  # unchanged: no write, no duplicate
    assert Verdict.objects.count() == 12
    v = Verdict.objects.first()
    assert v is not None and v.n_samples == 2 and len(v.details["samples"]) == 2
    assert v.probability == pytest.approx(0.6) and v.value == "pass"  # tie broken by P(pass)
    assert run_finish_if_complete(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE


def test_a_late_result_after_the_lease_was_lost_is_discarded(data: StudyData) -> None:
    run = start(data)
    first = jobs_claim(run_id=run.pk, limit=1, lease_token="old").jobs[0]
    JudgeJob.objects.filter(pk=first.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = jobs_claim(run_id=run.pk, limit=1, lease_token="new").jobs
    assert [j.pk for j in again] == [first.pk] and again[0].attempts == 2
    assert jobs_record(outcomes=[done(first, "old", "fail")]) == []
    assert jobs_record(outcomes=[done(again[0], "new", "pass")]) == [first.pk]
    job = JudgeJob.objects.get(pk=first.pk)
    assert job.status == "done" and job.parsed_value == "pass" and job.lease_token == ""


def test_unparseable_everywhere_gives_an_unscored_verdict(data: StudyData) -> None:
    run = start(data, samples=2)
    claim = jobs_claim(run_id=run.pk, limit=2, lease_token="t")
    jobs_record(outcomes=[
        JobOutcome(job_id=j.pk, lease_token="t", status="unparseable", error_kind="parse",
                   error="unparseable: no verdict found", raw_response="I think it is fine")
        for j in claim.jobs])
    verdicts_build(subjects={subject_key(j) for j in claim.jobs})
    v = Verdict.objects.get()
    assert not v.is_scored and v.value == "" and v.value_num is None
    assert "no verdict found" in v.rationale
    assert v.details["samples"][0]["raw_excerpt"] == "I think it is fine"


def test_max_calls_stops_the_run_exactly(data: StudyData) -> None:
    run = start(data, max_calls=5)
    claim = jobs_claim(run_id=run.pk, limit=100, lease_token="t")
    assert len(claim.jobs) == 5
    again = jobs_claim(run_id=run.pk, limit=100, lease_token="t2")
    assert again.jobs == [] and again.state == "stopped"
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.STOPPED and run.calls_made == 5
    assert run.stop_reason == "max_calls reached: 5 calls made of 5 allowed"
    assert JudgeJob.objects.filter(run=run, status="cancelled").count() == 7
    # The calls in flight still finish and are recorded.
    assert len(jobs_record(outcomes=[done(j, "t") for j in claim.jobs])) == 5
    with pytest.raises(ValidationFailed, match="still exhausted"):
        judge_run_resume(run=run, enqueue=EnqueueSpy())
    judge_run_resume(run=run, max_calls=100, enqueue=EnqueueSpy())
    assert len(jobs_claim(run_id=run.pk, limit=100, lease_token="t3").jobs) == 7


def test_max_cost_stops_before_the_next_call_would_exceed(data: StudyData) -> None:
    run = start(data, max_cost=0.35)
    probe = jobs_claim(run_id=run.pk, limit=100, lease_token="p")
    assert len(probe.jobs) == 8  # before any call is priced, a small probe only
    assert jobs_claim(run_id=run.pk, limit=100, lease_token="w").state == "budget_wait"
    jobs_record(outcomes=[done(j, "p", cost=0.1) for j in probe.jobs[:2]])
    # 0.2 spent, 0.1 per call, 6 still in flight: nothing more is affordable -> stop.
    nxt = jobs_claim(run_id=run.pk, limit=100, lease_token="q")
    assert nxt.state == "stopped"
    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_reason.startswith("max_cost reached")


def test_cancel_then_resume_requeues_cancelled_and_transient_failures(data: StudyData) -> None:
    run = start(data)
    claim = jobs_claim(run_id=run.pk, limit=3, lease_token="t")
    judge_run_cancel(run=run)
    with pytest.raises(Conflict):
        judge_run_cancel(run=run)
    assert jobs_claim(run_id=run.pk, limit=10, lease_token="x").state == "inactive"
    a, b, c = claim.jobs
    jobs_record(outcomes=[
        done(a, "t"),
        JobOutcome(job_id=b.pk, lease_token="t", status="failed", error_kind="transient",
                   error="gave up after 5 attempts: HTTP 503"),
        JobOutcome(job_id=c.pk, lease_token="t", status="failed", error_kind="permanent",
                   error="HTTP 401: bad key"),
    ])
    spy = EnqueueSpy()
    judge_run_resume(run=run, enqueue=spy)
    run.refresh_from_db()
    assert run.status == "running" and run.stop_reason == ""
    statuses = dict(JudgeJob.objects.filter(run=run).values_list("id", "status"))
    assert statuses[a.pk] == "done" and statuses[b.pk] == "queued" and statuses[c.pk] == "failed"
    assert list(statuses.values()).count("queued") == 10
    assert JudgeJob.objects.get(pk=b.pk).attempts == 0


def test_sweeper_requeues_expired_leases_fails_exhausted_and_kicks_idle_runs(
    data: StudyData, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 2
    run = start(data)
    claim = jobs_claim(run_id=run.pk, limit=4, lease_token="dead")
    past = timezone.now() - timedelta(seconds=5)
    JudgeJob.objects.filter(pk__in=[j.pk for j in claim.jobs]).update(lease_expires_at=past)
    JudgeJob.objects.filter(pk=claim.jobs[0].pk).update(attempts=2)
    JudgeRun.objects.filter(pk=run.pk).update(last_activity_at=timezone.now() - timedelta(hours=1))
    spy = EnqueueSpy()
    with django_capture_on_commit_callbacks(execute=True):
        result = judge_sweep(enqueue=spy)
    assert result.requeued == 3 and result.failed == 1 and result.runs_kicked == [run.pk]
    assert spy.calls == [(run.pk, 1)]
    failed = JudgeJob.objects.get(pk=claim.jobs[0].pk)
    assert failed.status == "failed" and "worker lost" in failed.error
    # The dead worker's late result no longer lands.
    assert jobs_record(outcomes=[done(j, "dead") for j in claim.jobs]) == []
    # Just kicked: a second sweep does not kick again.
    assert judge_sweep(enqueue=spy).runs_kicked == []
    finish_all(run)
    assert judge_sweep(enqueue=spy).runs_finished == 1
    run.refresh_from_db()
    assert run.status == "done"
    assert Verdict.objects.filter(run=run).count() == 12


def test_claim_and_record_query_counts_do_not_grow_with_the_batch(data: StudyData) -> None:
    run = start(data, samples=4)
    with CaptureQueriesContext(connection) as small:
        c1 = jobs_claim(run_id=run.pk, limit=2, lease_token="a")
    with CaptureQueriesContext(connection) as big:
        c2 = jobs_claim(run_id=run.pk, limit=40, lease_token="b")
    assert len(c2.jobs) == 40 and len(big) == len(small)
    if connection.vendor == "postgresql":
        with CaptureQueriesContext(connection) as rec:
            jobs_record(outcomes=[done(j, "b") for j in c2.jobs])
        assert len(rec) <= 3  # one UPDATE ... FROM (VALUES ...) plus the transaction
    assert c1.jobs


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_share_a_job(study: Any) -> None:
    data = build_study_data(study, n_items=40, n_candidates=2)
    run = start(data, samples=2)
    got: list[list[int]] = []
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        from django.db import connections

        try:
            mine: list[int] = []
            while True:
                claim = jobs_claim(run_id=run.pk, limit=7, lease_token=name)
                if not claim.jobs:
                    break
                mine += [j.pk for j in claim.jobs]
            got.append(mine)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    flat = [j for g in got for j in g]
    assert len(flat) == len(set(flat)) == 160
    run.refresh_from_db()
    assert run.calls_made == 160


# --- after a drain: successors, settling, stalls ---------------------------------------------


def test_a_probe_lost_with_its_worker_does_not_hold_a_cost_limited_run(data: StudyData) -> None:
    run = start(data, max_cost=10.0)
    probe = jobs_claim(run_id=run.pk, limit=100, lease_token="dead")
    assert len(probe.jobs) == 8
    assert jobs_claim(run_id=run.pk, limit=100, lease_token="w").state == "budget_wait"
    # The worker holding the probe dies: its leases lapse, nothing was priced.
    JudgeJob.objects.filter(run=run, status="running").update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = jobs_claim(run_id=run.pk, limit=100, lease_token="live")
    assert again.state == "ok" and len(again.jobs) == 8
    assert {j.pk for j in again.jobs} == {j.pk for j in probe.jobs}  # older work first
    assert all(j.attempts == 2 for j in again.jobs)


def test_successor_countdown_follows_what_the_database_holds(
    data: StudyData, settings: Any
) -> None:
    from judges.celery_tasks import (
        IDLE_RECHECK_S,
        MAX_COUNTDOWN_S,
        MIN_COUNTDOWN_S,
        successor_countdown,
    )

    settings.REVIEWHUB_JUDGE_LEASE_S = 120
    run = start(data)
    # Claimable work, and this drain claimed some: at once.
    assert successor_countdown(run_id=run.pk, claimed=5) == 0.0
    # Claimable, but this drain got none while another worker's calls are in flight: wait for
    # their leases, not a busy poll.
    held = jobs_claim(run_id=run.pk, limit=4, lease_token="other")
    wait = successor_countdown(run_id=run.pk, claimed=0)
    assert wait is not None and 110 <= wait <= 120
    jobs_record(outcomes=[done(j, "other") for j in held.jobs])
    assert successor_countdown(run_id=run.pk, claimed=0) == IDLE_RECHECK_S
    # Every queued job waits for a retry: due at the earliest one.
    soon = timezone.now() + timedelta(seconds=7)
    queued = JudgeJob.objects.filter(run=run, status="queued")
    first = queued.order_by("id").first()
    assert first is not None
    queued.update(available_at=soon + timedelta(seconds=30))
    JudgeJob.objects.filter(pk=first.pk).update(available_at=soon)
    wait = successor_countdown(run_id=run.pk, claimed=3)
    assert wait is not None and 6 <= wait <= 7
    JudgeJob.objects.filter(pk=first.pk).update(available_at=timezone.now() - timedelta(1))
    assert successor_countdown(run_id=run.pk, claimed=3) == 0.0
    # A Retry-After of an hour: successors hop at most MAX_COUNTDOWN_S at a time.
    queued.update(available_at=timezone.now() + timedelta(hours=1))
    assert successor_countdown(run_id=run.pk, claimed=0) == MAX_COUNTDOWN_S
    queued.update(available_at=timezone.now() - timedelta(milliseconds=1))
    assert successor_countdown(run_id=run.pk, claimed=0) == IDLE_RECHECK_S
    # No queued job left (only another worker's calls in flight): the chain ends.
    claim = jobs_claim(run_id=run.pk, limit=100, lease_token="last")
    assert claim.jobs and successor_countdown(run_id=run.pk, claimed=0) is None
    assert MIN_COUNTDOWN_S > 0


@pytest.mark.parametrize("how", ["budget", "cancel"])
def test_retries_recorded_after_a_run_ended_are_cancelled_not_left_queued(
    data: StudyData, how: str, django_capture_on_commit_callbacks: Any
) -> None:
    from judges.celery_tasks import successor_countdown

    run = start(data, max_calls=4 if how == "budget" else None)
    in_flight = jobs_claim(run_id=run.pk, limit=4, lease_token="t").jobs
    if how == "budget":
        assert jobs_claim(run_id=run.pk, limit=4, lease_token="u").state == "stopped"
    else:
        judge_run_cancel(run=run)
    # The calls in flight come back: one transient error (a retry), the rest done.
    retry_at = timezone.now() + timedelta(seconds=1)
    jobs_record(outcomes=[
        JobOutcome(job_id=in_flight[0].pk, lease_token="t", status="queued",
                   error_kind="transient", error="HTTP 503", available_at=retry_at),
        *[done(j, "t") for j in in_flight[1:]],
    ])
    assert JudgeJob.objects.filter(run=run, status="queued").count() == 1
    assert successor_countdown(run_id=run.pk, claimed=4) is None
    run.refresh_from_db()
    retried = JudgeJob.objects.get(pk=in_flight[0].pk)
    assert run.status == ("stopped" if how == "budget" else "cancelled")
    assert retried.status == "cancelled" and retried.error.startswith(f"run {run.status}")
    assert not JudgeJob.objects.filter(run=run, status="queued").exists()
    # ... and resuming picks it up like every other cancelled job.
    judge_run_resume(run=run, max_calls=100 if how == "budget" else None, enqueue=EnqueueSpy())
    assert JudgeJob.objects.get(pk=in_flight[0].pk).status == "queued"


def test_the_sweeper_cancels_queued_jobs_of_runs_that_ended(data: StudyData) -> None:
    run = start(data)
    claim = jobs_claim(run_id=run.pk, limit=2, lease_token="dead")
    judge_run_cancel(run=run)
    # The worker died: its leases lapse after the run was cancelled.
    JudgeJob.objects.filter(pk__in=[j.pk for j in claim.jobs]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))
    result = judge_sweep(enqueue=EnqueueSpy())
    assert result.requeued == 2 and result.settled == 2
    assert not JudgeJob.objects.filter(run=run, status__in=["queued", "running"]).exists()
    assert judge_sweep(enqueue=EnqueueSpy()).settled == 0


def test_run_stall_needs_queued_work_nobody_claims_past_its_due_time(
    data: StudyData, settings: Any
) -> None:
    from judges.runs import run_stall, run_stall_grace_s

    settings.REVIEWHUB_JUDGE_SWEEP_INTERVAL_S = 10
    grace = run_stall_grace_s()
    assert grace == 60.0
    run = start(data)
    now = timezone.now()
    assert run_stall(run_id=run.pk) is None  # just started
    later = now + timedelta(seconds=grace + 5)
    stall = run_stall(run_id=run.pk, now=later)
    assert stall is not None and stall.queued == 12 and stall.lapsed == 0
    # A job in flight under a live lease: someone is working on it.
    claim = jobs_claim(run_id=run.pk, limit=1, lease_token="t")
    assert run_stall(run_id=run.pk, now=timezone.now() + timedelta(seconds=grace + 5)) is None
    # ... but once its lease has lapsed too, its worker is presumed lost.
    lapse = timezone.now() + timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S + 1)
    stall = run_stall(run_id=run.pk, now=lapse + timedelta(seconds=grace))
    assert stall is not None and stall.lapsed == 1 and stall.queued == 11
    jobs_record(outcomes=[done(j, "t") for j in claim.jobs])
    # Everything waits for a retry later than the last claim: not stalled before it is due.
    retry = timezone.now() + timedelta(seconds=600)
    JudgeJob.objects.filter(run=run, status="queued").update(available_at=retry)
    assert run_stall(run_id=run.pk, now=retry + timedelta(seconds=grace - 1)) is None
    stall = run_stall(run_id=run.pk, now=retry + timedelta(seconds=grace + 1))
    assert stall is not None and stall.idle_since == retry
    judge_run_cancel(run=run)
    assert run_stall(run_id=run.pk, now=retry + timedelta(hours=1)) is None
