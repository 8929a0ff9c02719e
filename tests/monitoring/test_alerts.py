"""Alerts: fired by the anytime-valid sequences, deduplicated, cooled down, acknowledged and
resolved with a history; notified by a Slack-compatible webhook (a local HTTP server) and by
e-mail (Django's locmem backend in tests); the beat tick is idempotent."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail

from monitoring import alerts, celery_tasks, notify
from monitoring.models import Alert, AlertEvent, Deployment, Window
from monitoring.services import (
    deployment_create,
    traffic_ingest,
    traffic_labels_record,
    window_compute,
)
from monitoring.window.params import WindowParams
from reviewhub.errors import Conflict, ValidationFailed

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 12, 7, 8, tzinfo=dt.UTC)


def _hour(deployment: Deployment, hour: int, *, n: int, pass_share: float,
          error_share: float) -> None:
    start = T0 + dt.timedelta(hours=hour)
    rows = [{"request_id": f"h{hour}-{i}", "input": "q", "output": "a",
             "metadata": {"language": "en" if i % 2 else "de"},
             "error": "boom" if i < error_share * n else "",
             "occurred_at": (start + dt.timedelta(seconds=i)).isoformat()} for i in range(n)]
    traffic_ingest(deployment=deployment, rows=rows)
    labels = []
    for i, r in enumerate(rows):
        labels.append({"request_id": r["request_id"], "source": "human", "rater": "a",
                       "value": float(i % 100 < pass_share * 100)})
    traffic_labels_record(deployment=deployment, labels=labels)
    window_compute(deployment=deployment, params=WindowParams("hour", start))


@pytest.fixture
def watched(shipped_study: Any, lead: Any) -> Deployment:
    from monitoring.services import deployment_create
    dep = deployment_create(
        study=shipped_study, name="prod", candidate="shipped",
        # Every row drawn for humans, so the sequences see many labels.
        sampling_spec={"judge": {"default": 1.0}, "human": {"default": 1.0}},
        alerting={"alpha": 0.05, "cooldown_minutes": 60, "webhook_url": "",
                  "emails": ["oncall@example.test"]})
    Deployment.objects.filter(pk=dep.pk).update(created_at=T0)
    dep.refresh_from_db()
    return dep


def test_no_alert_while_the_rates_hold(watched: Deployment) -> None:
    for h in range(3):
        _hour(watched, h, n=200, pass_share=0.9, error_share=0.0)
    states = alerts.stream_states(watched)
    # Floor 0.8 from the plan's pass_rate criterion, its error-rate, p95-latency and cost gates
    # (no agreement stream: the deployment names no judge); three strata (all, de, en) x four
    # kinds share alpha = 0.05.
    assert {(s.kind, s.stratum) for s in states} == {
        (k, s) for k in ("pass_rate", "error_rate", "latency_p95_ms", "cost_per_1000")
        for s in ("", "de", "en")}
    assert all(s.alpha == pytest.approx(0.05 / 12) for s in states)
    assert not any(s.firing for s in states)
    assert alerts.alerts_evaluate(deployment=watched, now=T0 + dt.timedelta(hours=3)) == []


def test_an_alert_opens_once_then_acknowledge_resolve_and_cool_down(
        watched: Deployment) -> None:
    for h in range(3):
        _hour(watched, h, n=300, pass_share=0.5, error_share=0.2)
    now = T0 + dt.timedelta(hours=3)
    due = alerts.alerts_evaluate(deployment=watched, now=now)
    keys = sorted(a.dedup_key for a in due)
    assert keys == ["error_rate|", "error_rate|de", "error_rate|en", "pass_rate|",
                    "pass_rate|de", "pass_rate|en"]
    overall = Alert.objects.get(dedup_key="pass_rate|")
    assert overall.details["upper"] < 0.8 and "below the floor 80%" in overall.message
    # Looked at again: the same alerts, seen twice, no new notification due (not yet sent
    # counts as due; after sending, only the cool-down brings a reminder).
    for alert in due:
        Alert.objects.filter(pk=alert.pk).update(notified_at=now)
    again = alerts.alerts_evaluate(deployment=watched, now=now + dt.timedelta(minutes=5))
    assert again == [] and Alert.objects.count() == 6
    overall.refresh_from_db()
    assert overall.seen_count == 2
    # Acknowledge (twice is once), resolve, then a second resolve is a conflict.
    alerts.alert_acknowledge(alert=overall, user=None, now=now)
    alerts.alert_acknowledge(alert=overall, user=None, now=now)
    alerts.alert_resolve(alert=overall, user=None, now=now + dt.timedelta(minutes=10))
    with pytest.raises(Conflict):
        alerts.alert_resolve(alert=overall, user=None, now=now)
    assert list(AlertEvent.objects.filter(alert=overall).values_list("event", flat=True)) == [
        "opened", "acknowledged", "resolved"]
    # Within the cool-down the stream stays quiet; after it, a new alert opens.
    alerts.alerts_evaluate(deployment=watched, now=now + dt.timedelta(minutes=30))
    assert Alert.objects.filter(dedup_key="pass_rate|").count() == 1
    alerts.alerts_evaluate(deployment=watched, now=now + dt.timedelta(minutes=80))
    assert Alert.objects.filter(dedup_key="pass_rate|").count() == 2


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        _Hook.received.append({"type": self.headers["Content-Type"],
                               "body": json.loads(self.rfile.read(length))})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/alerts"
    finally:
        server.shutdown()
        server.server_close()


def test_notifications_go_to_the_webhook_and_by_mail(watched: Deployment, hook_url: str,
                                                     settings: Any) -> None:
    settings.REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True  # the test's hook is on loopback
    watched.alerting = {**watched.alerting, "webhook_url": hook_url}
    watched.save()
    for h in range(2):
        _hour(watched, h, n=300, pass_share=0.5, error_share=0.0)
    due = alerts.alerts_evaluate(deployment=watched, now=T0 + dt.timedelta(hours=2))
    assert due
    outcome = notify.alert_notify(due[0])
    assert outcome == {"webhook": 200, "email": 1}
    body = _Hook.received[0]["body"]
    assert _Hook.received[0]["type"] == "application/json"
    assert body["text"].startswith("[ReviewHub OPEN] prod: pass rate on")
    assert body["blocks"][0]["type"] == "section"
    assert body["blocks"][0]["text"] == {"type": "mrkdwn", "text": body["text"]}
    assert body["reviewhub"]["alert_id"] == due[0].pk
    assert mail.outbox[-1].to == ["oncall@example.test"]
    assert "pass rate alert: prod" in mail.outbox[-1].subject
    assert AlertEvent.objects.filter(alert=due[0], event="notified").exists()


def test_a_dead_webhook_is_recorded_not_raised(watched: Deployment, settings: Any) -> None:
    settings.REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS = True
    watched.alerting = {**watched.alerting, "webhook_url": "http://127.0.0.1:9/nothing"}
    watched.save()
    _hour(watched, 0, n=300, pass_share=0.3, error_share=0.0)
    alert = alerts.alerts_evaluate(deployment=watched, now=T0 + dt.timedelta(hours=1))[0]
    outcome = notify.alert_notify(alert)
    assert str(outcome["webhook"]).startswith("failed")


def test_the_tick_is_idempotent(watched: Deployment) -> None:
    _hour(watched, 0, n=50, pass_share=0.9, error_share=0.0)
    first = celery_tasks.deployment_tick(deployment_id=watched.pk)
    computed = dict(Window.objects.values_list("id", "computed_at"))
    second = celery_tasks.deployment_tick(deployment_id=watched.pk)
    assert first["windows"] == second["windows"] == 4
    # Nothing new: the same windows, not recomputed.
    assert dict(Window.objects.values_list("id", "computed_at")) == computed
    assert "monitoring-tick" in __import__("django.conf").conf.settings.CELERY_BEAT_SCHEDULE


def test_one_failing_deployment_does_not_stop_the_tick(watched: Deployment,
                                                       monkeypatch: Any) -> None:
    calls: list[int] = []

    def tick(*, deployment_id: int) -> dict[str, Any]:
        calls.append(deployment_id)
        raise ValueError("a broken deployment")

    monkeypatch.setattr(celery_tasks, "deployment_tick", tick)
    assert celery_tasks.monitoring_tick() == {"deployments": 0, "failed": 1}
    assert calls == [watched.pk]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/hook", "http://localhost/hook", "http://169.254.169.254/latest",
    "http://10.1.2.3/hook", "http://[::1]/hook", "http://2130706433/hook",
])
def test_a_webhook_inside_the_network_is_refused_when_saved(watched: Deployment,
                                                           url: str) -> None:
    assert "alerting.webhook_url" in _refused_paths(watched, url)


def test_a_webhook_turned_private_after_saving_is_not_called(watched: Deployment, hook_url: str,
                                                             settings: Any) -> None:
    # Saved while the operator allowed private networks, then the permission was withdrawn:
    # the delivery is checked again and refused, with nothing sent.
    watched.alerting = {**watched.alerting, "webhook_url": hook_url}
    watched.save()
    settings.REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS = False
    _hour(watched, 0, n=300, pass_share=0.3, error_share=0.0)
    alert = alerts.alerts_evaluate(deployment=watched, now=T0 + dt.timedelta(hours=1))[0]
    outcome = notify.alert_notify(alert)
    assert str(outcome["webhook"]).startswith("refused: points at a loopback")
    assert _Hook.received == []


def test_a_public_webhook_is_accepted_when_saved(watched: Deployment) -> None:
    # An address literal needs no resolver: a public one passes the check.
    assert "alerting.webhook_url" not in _refused_paths(watched, "https://93.184.216.34/hooks/x")


def _refused_paths(watched: Deployment, url: str) -> set[str]:
    try:
        deployment_create(study=watched.study, name="second", candidate=watched.candidate.name,
                          plan_version=watched.plan.version,
                          alerting={**watched.alerting, "webhook_url": url})
    except ValidationFailed as exc:
        return {e["path"] for e in exc.details["errors"]}
    return set()


def _gate_hour(deployment: Deployment, hour: int, *, n: int, slow_share: float, cost: float,
               judge_agrees: float = 1.0) -> None:
    start = T0 + dt.timedelta(hours=hour)
    rows = [{"request_id": f"g{hour}-{i}", "input": "q", "output": "a",
             "metadata": {"language": "en" if i % 2 else "de"},
             "latency_ms": 3000.0 if i % 100 < slow_share * 100 else 400.0, "cost": cost,
             "occurred_at": (start + dt.timedelta(seconds=i)).isoformat()} for i in range(n)]
    traffic_ingest(deployment=deployment, rows=rows)
    labels = []
    for i, r in enumerate(rows):
        labels.append({"request_id": r["request_id"], "source": "human", "rater": "a",
                       "value": 1.0})
        labels.append({"request_id": r["request_id"], "source": "judge", "rater": "j",
                       "value": 1.0 if i % 100 < judge_agrees * 100 else 0.0})
    traffic_labels_record(deployment=deployment, labels=labels)
    window_compute(deployment=deployment, params=WindowParams("hour", start))


def test_latency_cost_and_agreement_streams_fire_only_when_their_gates_break(
        shipped_study: Any, lead: Any) -> None:
    dep = deployment_create(
        study=shipped_study, name="gates", candidate="shipped",
        sampling_spec={"judge": {"default": 1.0}, "human": {"default": 1.0}},
        alerting={"alpha": 0.05, "agreement_floor": 0.8})
    Deployment.objects.filter(pk=dep.pk).update(created_at=T0)
    dep.refresh_from_db()
    # Holding: 2 % slower than the 2,000 ms gate (p95 below it), cost 0.001 a row (1.00 per
    # 1,000 against a gate of 5.00), the judge agreeing with every human.
    for h in range(3):
        _gate_hour(dep, h, n=400, slow_share=0.02, cost=0.001)
    states = {(s.kind, s.stratum): s for s in alerts.stream_states(dep)}
    assert "agreement" in {k for k, _ in states}
    assert not any(s.firing for s in states.values())
    # The window's counts are the rows' own.
    latest = Window.objects.filter(deployment=dep).order_by("-start").first()
    assert latest is not None
    overall = latest.result["overall"]
    assert (overall["n_latency"], overall["n_slow"]) == (400, 8)
    assert overall["cost_clipped_sum"] == pytest.approx(400 * 0.001)
    # Broken: a fifth slower than the gate, 0.02 a row (20.00 per 1,000), the judge agreeing
    # on 50 % of the random draws against a floor of 80 %.
    for h in range(3, 6):
        _gate_hour(dep, h, n=400, slow_share=0.2, cost=0.02, judge_agrees=0.5)
    firing = {(s.kind, s.stratum) for s in alerts.stream_states(dep) if s.firing}
    assert {("latency_p95_ms", ""), ("cost_per_1000", ""), ("agreement", "")} <= firing
    opened = alerts.alerts_evaluate(deployment=dep, now=T0 + dt.timedelta(hours=6))
    kinds = {a.kind for a in opened}
    assert {"latency_p95_ms", "cost_per_1000", "agreement"} <= kinds
    cost_alert = next(a for a in opened if a.kind == "cost_per_1000" and a.stratum == "")
    assert "cost per 1,000 on all traffic is above the gate 5.00" in cost_alert.message
    # Deduplicated: evaluating again opens nothing new.
    again = alerts.alerts_evaluate(deployment=dep, now=T0 + dt.timedelta(hours=6, minutes=5))
    assert Alert.objects.filter(deployment=dep).count() == len(opened)
    assert all(a.pk in {o.pk for o in opened} for a in again)


def test_a_clipped_cost_alarm_implies_the_true_mean_is_over_the_gate() -> None:
    """The cost stream observes min(cost, clip): a sequence of rows whose true mean cost is at
    the gate but with rare huge costs never alarms more than alpha (simulated, 400 runs)."""
    import numpy as np

    from evalstats import drift_monitor

    rng = np.random.default_rng(7)
    per_row, clip = 0.005, 0.05
    alarms = 0
    for _ in range(400):
        # Mean just under per_row: 99 % of rows cost 0.00404, 1 % cost 0.1 (beyond the clip).
        costs = np.where(rng.random((48, 50)) < 0.01, 0.1, 0.00404)
        assert abs(costs.mean() - per_row) < 0.002
        clipped = np.minimum(costs, clip)
        monitor = drift_monitor(np.full(48, 50), clipped.sum(axis=1), limit=per_row,
                                alpha=0.05, direction="above", bounds=(0.0, clip))
        alarms += monitor.first_alarm is not None
    assert alarms / 400 <= 0.05
