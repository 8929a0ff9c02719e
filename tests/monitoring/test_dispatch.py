"""Dispatch of the sampled live rows, end to end against the simulated OpenAI-compatible
provider (a real HTTP server in the test process, tests/judges/provider_server.py): the judge
run over exactly the drawn rows in the deployment's live study, the calibrated policy's pass /
fail / escalate, the human queue (random draws and escalations) graded by an annotator through
the annotation services, the labels back on the traffic rows, the window reading them with
escalations never counted as random draws; and every step idempotent."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import pytest

from annotations.models import QueueEntry
from annotations.services.queue import assignment_next
from annotations.services.submit import annotation_submit
from judges.executor import run_drain
from judges.models import Judge, JudgeJob, JudgeRun
from monitoring import dispatch
from monitoring.models import Deployment, TrafficLabel, TrafficRow
from monitoring.selectors import deployment_json
from monitoring.services import traffic_ingest, window_compute
from monitoring.window.params import WindowParams
from monitoring.window.results import WindowResult
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from studies.services import membership_set
from tests.factories import UserFactory
from tests.judges import run_fixtures
from tests.judges.provider_server import ProviderServer
from tests.judges.run_fixtures import EnqueueSpy, llm_config, make_version

provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

pytestmark = pytest.mark.django_db

START = dt.datetime(2026, 12, 7, 10, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def fast_retries(settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.05
    settings.REVIEWHUB_PROVIDER_LIMITS = {}


def _drive(live: Study) -> None:
    """Drain every running run of the live study (what the judge worker does)."""
    for run in JudgeRun.objects.filter(study=live, status=JudgeRun.Status.RUNNING):
        for _ in range(50):
            report = run_drain(run_id=run.pk, concurrency=8, slice_s=60)
            run.refresh_from_db()
            if run.status != JudgeRun.Status.RUNNING:
                break
            if report.next_available_at is not None:
                time.sleep(0.05)
        assert run.status == JudgeRun.Status.DONE


@pytest.fixture
def live_deployment(deployment: Deployment, shipped_study: Study,
                    provider_server: ProviderServer, judge_key_env: str) -> Deployment:
    version = make_version(shipped_study, llm_config(provider_server.openai_base_url),
                           kind=Judge.Kind.LLM, name="sim")
    deployment.judge_versions.set([version])
    # The calibration snapshot in force: a "fail" verdict means P(pass) 0.2 (fail), a "pass"
    # verdict 0.6, between the thresholds: the policy escalates every judged pass.
    snap = ReportSnapshot.objects.create(
        study=shipped_study, kind="calibration", status="done", result={"cells": [{
            "judge_version": version.pk, "criterion": "ok", "stratum": "",
            "curve": {"x": [0.0, 1.0], "y": [0.2, 0.6]},
            "thresholds": {"pass_above": 0.9, "fail_below": 0.3},
            "diagnostics": {"before": None, "after": None}}]})
    Deployment.objects.filter(pk=deployment.pk).update(calibration_snapshot_id=snap.pk)
    deployment.refresh_from_db()
    rows = [{"request_id": f"req-{i}", "input": f"Question {i}?",
             "output": f"Answer {i}" + (" [bad]" if i % 3 == 0 else ""),
             "metadata": {"language": "de" if i % 2 else "en"},
             "occurred_at": (START + dt.timedelta(seconds=i)).isoformat()} for i in range(60)]
    traffic_ingest(deployment=deployment, rows=rows)
    return deployment


def test_sampled_rows_are_judged_decided_queued_and_graded(
        live_deployment: Deployment, shipped_study: Study, lead: Any,
        provider_server: ProviderServer) -> None:
    dep = live_deployment
    annotator = UserFactory()
    membership_set(study=shipped_study, user=annotator, role=Membership.Role.ANNOTATOR)
    spy = EnqueueSpy()
    judged = set(TrafficRow.objects.filter(deployment=dep, to_judge=True)
                 .values_list("request_id", flat=True))
    assert 0 < len(judged) < 60

    first = dispatch.rows_dispatch(deployment=dep, enqueue=spy)
    assert first == {"dispatched": len(judged), "runs": 1}
    dep.refresh_from_db()
    live = Study.objects.get(pk=dep.live_study_id)
    # The live study, not the selection study, holds the live rows.
    assert live.pk != shipped_study.pk and shipped_study.items.count() == 40
    assert live.items.count() == len(judged)
    assert Membership.objects.filter(study=live, user=annotator, role="annotator").exists()
    assert deployment_json(dep)["live_study"] == live.slug
    # Idempotent: nothing left to dispatch, no second run.
    assert dispatch.rows_dispatch(deployment=dep, enqueue=spy)["dispatched"] == 0
    assert JudgeRun.objects.filter(study=live).count() == 1
    assert JudgeJob.objects.filter(run__study=live).count() == len(judged)

    _drive(live)
    assert provider_server.count() == len(judged)
    collected = dispatch.judge_labels_collect(deployment=dep)
    assert collected["recorded"] == len(judged)
    assert dispatch.judge_labels_collect(deployment=dep) == {"recorded": 0, "escalated": 0}
    for label in TrafficLabel.objects.filter(row__deployment=dep, source="judge"):
        bad = "[bad]" in label.row.output
        assert label.value == (0.0 if bad else 1.0)
        # P(pass) 0.2 < 0.3 fails; 0.6 is between the thresholds: escalate.
        assert label.decision == ("fail" if bad else "escalate")
    escalated = set(TrafficRow.objects.filter(deployment=dep, escalated=True)
                    .values_list("request_id", flat=True))
    random_human = set(TrafficRow.objects.filter(deployment=dep, to_human=True)
                       .values_list("request_id", flat=True))
    # A random draw that the policy escalates stays a random draw.
    assert escalated and not escalated & random_human
    assert escalated == {r for r in judged - random_human
                         if "[bad]" not in TrafficRow.objects.get(deployment=dep,
                                                                  request_id=r).output}

    queued = dispatch.human_queue_dispatch(deployment=dep)
    assert queued == {"queued": len(escalated | random_human)}
    assert dispatch.human_queue_dispatch(deployment=dep) == {"queued": 0}
    entries = QueueEntry.objects.filter(plan__study=live, plan__is_active=True)
    assert entries.count() == len(escalated | random_human)
    assert set(entries.values_list("draw_kind", flat=True)) == {"escalation"}

    # The annotator grades every queued row through the annotation services: pass unless the
    # answer is marked [bad].
    graded = 0
    while (assignment := assignment_next(study=live, annotator=annotator)) is not None:
        text = assignment.entry.output.text
        annotation_submit(assignment=assignment, annotator=annotator,
                          submission_id=uuid.uuid4(),
                          labels={"ok": {"value": "fail", "severity": 3} if "[bad]" in text
                                  else {"value": "pass"}})
        graded += 1
    assert graded == len(escalated | random_human)
    assert dispatch.human_labels_collect(deployment=dep)["recorded"] == graded
    assert dispatch.human_labels_collect(deployment=dep)["recorded"] == 0

    result = WindowResult.from_json(window_compute(
        deployment=dep, params=WindowParams("hour", START)).result)
    # Only the random draws are human labels of the estimate; escalations are counted apart.
    assert result.overall.n_human == len(random_human)
    assert result.overall.n_escalated == len(escalated)
    assert result.overall.n_judged == len(judged)


def test_the_tick_dispatches(live_deployment: Deployment, monkeypatch: Any) -> None:
    from monitoring import celery_tasks

    calls: list[int] = []
    monkeypatch.setattr(dispatch, "judge_run_start",
                        lambda **kw: calls.append(len(kw["selection"]["ids"])))
    out = celery_tasks.deployment_tick(deployment_id=live_deployment.pk)
    assert out["dispatch"]["dispatch"]["dispatched"] == sum(calls) > 0
    again = celery_tasks.deployment_tick(deployment_id=live_deployment.pk)
    assert again["dispatch"]["dispatch"]["dispatched"] == 0


def test_policy_decision() -> None:
    thresholds = {"pass_above": 0.9, "fail_below": 0.3}
    assert dispatch.policy_decision(0.95, thresholds, True) == "pass"
    assert dispatch.policy_decision(0.9, thresholds, True) == "pass"
    assert dispatch.policy_decision(0.29, thresholds, False) == "fail"
    assert dispatch.policy_decision(0.5, thresholds, True) == "escalate"
    assert dispatch.policy_decision(0.5, None, False) == "fail"


def test_a_dispatch_that_fails_midway_leaves_nothing_half_done(
        live_deployment: Deployment, monkeypatch: Any) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("worker killed")

    monkeypatch.setattr(dispatch, "judge_run_start", broken)
    with pytest.raises(RuntimeError):
        dispatch.rows_dispatch(deployment=live_deployment, enqueue=EnqueueSpy())
    live_deployment.refresh_from_db()
    live = Study.objects.get(pk=live_deployment.live_study_id)
    # The items, outputs and the rows' links went with the failed transaction.
    assert live.items.count() == 0
    assert not TrafficRow.objects.filter(deployment=live_deployment,
                                         live_output__isnull=False).exists()
    monkeypatch.undo()
    again = dispatch.rows_dispatch(deployment=live_deployment, enqueue=EnqueueSpy())
    assert again["dispatched"] == TrafficRow.objects.filter(deployment=live_deployment,
                                                            to_judge=True).count()


def test_a_failing_dispatch_does_not_stop_the_windows(live_deployment: Deployment,
                                                      monkeypatch: Any) -> None:
    from monitoring import celery_tasks

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("provider config gone")

    monkeypatch.setattr(dispatch, "judge_run_start", broken)
    out = celery_tasks.deployment_tick(deployment_id=live_deployment.pk)
    assert out["dispatch"] == {"error": "RuntimeError: provider config gone"}
    assert out["windows"] == 4


def _ingest(dep: Deployment, first: int, n: int) -> None:
    traffic_ingest(deployment=dep, rows=[
        {"request_id": f"req-{i}", "input": f"Question {i}?",
         "output": f"Answer {i}" + (" [bad]" if i % 3 == 0 else ""),
         "metadata": {"language": "de" if i % 2 else "en"},
         "occurred_at": (START + dt.timedelta(seconds=i)).isoformat()}
        for i in range(first, first + n)])


def _tick(dep: Deployment) -> dict[str, int]:
    """A tick's dispatch steps, the judge runs drained in between (as the worker would)."""
    dispatch.rows_dispatch(deployment=dep, enqueue=EnqueueSpy())
    dep.refresh_from_db()
    _drive(Study.objects.get(pk=dep.live_study_id))
    dispatch.judge_labels_collect(deployment=dep)
    return dispatch.human_queue_dispatch(deployment=dep)


def _queued_outputs(dep: Deployment) -> list[int]:
    return sorted(TrafficRow.objects.filter(deployment=dep, queued_at__isnull=False)
                  .values_list("live_output_id", flat=True))


def test_ticks_add_to_one_plan_version_and_queue_nothing_twice(
        live_deployment: Deployment, lead: Any) -> None:
    from annotations.models import SamplingPlan
    from annotations.services.escalations import escalation_entries_add, escalation_plan_create
    from reviewhub.errors import ValidationFailed

    dep = live_deployment
    first = _tick(dep)["queued"]
    assert first > 0
    live = Study.objects.get(pk=dep.live_study_id)
    plan = SamplingPlan.objects.get(study=live)
    _ingest(dep, 60, 60)
    second = _tick(dep)["queued"]
    assert second > 0
    assert _tick(dep) == {"queued": 0}
    # Both ticks' rows in the one plan version, each output once: nothing lost, nothing twice.
    assert SamplingPlan.objects.filter(study=live).count() == 1
    entries = sorted(QueueEntry.objects.filter(plan=plan).values_list("output_id", flat=True))
    assert entries == _queued_outputs(dep) and len(entries) == first + second
    plan.refresh_from_db()
    assert plan.is_active and plan.summary["entries"] == first + second
    assert plan.summary["additions"] == 1
    assert plan.summary["random_draws"] + plan.summary["escalations"] == first + second
    # Adding the same outputs again adds nothing.
    assert escalation_entries_add(plan=plan, subject_ids=entries[:5], created_by=lead) == 0

    # A lead's own plan in the live study supersedes the monitoring plan: the next rows go to
    # a new version, which carries every unfinished entry over (nothing queued is lost).
    escalation_plan_create(study=live, subject="output", subject_ids=entries[:1],
                           source="lead-review", k=1, created_by=lead)
    with pytest.raises(ValidationFailed):
        escalation_entries_add(plan=plan, subject_ids=entries[:1], created_by=lead)
    _ingest(dep, 120, 60)
    third = _tick(dep)["queued"]
    assert third > 0
    assert SamplingPlan.objects.filter(study=live).count() == 3
    active = SamplingPlan.objects.get(study=live, is_active=True)
    assert active.spec["source"].startswith(f"monitoring:{dep.pk}:")
    open_outputs = sorted(QueueEntry.objects.filter(plan=active)
                          .values_list("output_id", flat=True))
    assert open_outputs == _queued_outputs(dep)
    _ingest(dep, 180, 60)
    assert _tick(dep)["queued"] > 0
    assert SamplingPlan.objects.filter(study=live).count() == 3


def test_the_policy_uses_the_rows_stratum_calibration_cell(
        live_deployment: Deployment) -> None:
    dep = live_deployment
    snap = ReportSnapshot.objects.get(pk=dep.calibration_snapshot_id)
    version = dep.judge_versions.get().pk
    pooled = snap.result["cells"][0]

    def cell(stratum: str, y: list[float], thresholds: Any) -> dict[str, Any]:
        return {**pooled, "stratum": stratum, "thresholds": thresholds,
                "curve": {"x": [0.0, 1.0] if y else [], "y": y}}

    # German rows have a curve of their own (a pass verdict is P(pass) 0.95: pass, no longer
    # escalated) but no thresholds (the pooled ones apply); English rows had too few labels
    # (no curve: the pooled curve and thresholds, so their passes escalate as before). A cell
    # of another judge version or criterion is not read.
    snap.result = {"cells": [
        pooled, cell("lang=de", [0.1, 0.95], None), cell("lang=en", [], None),
        {**cell("lang=en", [0.0, 1.0], None), "criterion": "other"},
        {**cell("lang=en", [0.0, 1.0], None), "judge_version": version + 999}]}
    snap.save(update_fields=["result"])
    _tick(dep)
    labels = list(TrafficLabel.objects.filter(row__deployment=dep, source="judge")
                  .select_related("row"))
    assert {lab.row.strata["lang"] for lab in labels} == {"de", "en"}
    for label in labels:
        bad = "[bad]" in label.row.output
        if label.row.strata["lang"] == "de":
            # 0.95 >= pass_above 0.9 passes; 0.1 < fail_below 0.3 fails.
            assert label.decision == ("fail" if bad else "pass")
        else:
            assert label.decision == ("fail" if bad else "escalate")

    policies = dispatch.CalibratedPolicies(dep)
    assert policies.for_row(version, {"lang": "de", "len": "x"}).curve_y == (0.1, 0.95)
    assert policies.for_row(version, {"lang": "fr"}).curve_y == (0.2, 0.6)
    assert policies.for_row(version, {}).thresholds == pooled["thresholds"]
