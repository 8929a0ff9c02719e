"""Alerts whose false-alarm rate holds however often the windows are looked at.

Streams. Per deployment, two kinds of stream are watched, each for all traffic ("") and for
every stratum the plan's deployment mix names (fixed when the deployment is created, so the
number of streams K never grows):

* ``pass_rate``: the human labels of the *random* human draws (escalations excluded), against
  the floor (``alerting.pass_rate_floor``, else the plan's first ``pass_rate`` criterion
  threshold). Fires when the confidence sequence's upper end is below the floor.
* ``error_rate``: every row's error flag, against the plan's ``error_rate`` gate. Fires when
  the sequence's lower end is above the gate.

Guarantee. Each stream is an `evalstats.drift_monitor` at level ``alpha / K`` over the
hourly windows since the deployment started: a confidence sequence restarted every day, the
d-th at ``(alpha / K) / ((d + 1)(d + 2))``, looked at after every window and at every
evaluation. If a stream's true rate never crosses its limit (pass rate >= floor, error rate
<= gate), that stream fires with probability at most ``alpha / K`` *ever*; by the union
bound the deployment raises a false alarm, at any time over an unbounded horizon, with
probability at most ``alpha``. The price is detection delay, measured in
tests/monitoring/test_alert_simulation.py and reported in docs/monitoring.md.

Life cycle. One unresolved alert per (deployment, kind, stratum) (a partial unique
constraint): a stream that is still over its limit updates that alert (``last_seen_at``,
``seen_count``), it does not open another. Acknowledged alerts stay deduplicated; a resolved
alert may be followed by a new one only after the cool-down (``alerting.cooldown_minutes``,
default 360). Every step is an `AlertEvent` (the history). Notifications (webhook and e-mail,
`monitoring.notify`) go out once per alert, and again as a reminder only after the cool-down.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction

from evalstats import drift_monitor
from reviewhub.errors import Conflict
from studies.spec import plan_selection

from .models import Alert, AlertEvent, Deployment, Window

DEFAULT_ALPHA = 0.05
DEFAULT_COOLDOWN_MINUTES = 360
KINDS = ("pass_rate", "error_rate")
# A fresh confidence sequence starts every day of hourly windows (evalstats.drift_monitor).
RESTART_EVERY_HOURS = 24


@dataclass(frozen=True)
class StreamState:
    """Where one stream stands after its latest look."""

    kind: str
    stratum: str
    limit: float
    alpha: float
    n: int
    mean: float | None
    lower: float
    upper: float
    firing: bool
    # The restarted sequence behind the state: its first window's start and its alpha share.
    since: str = ""
    sequence_alpha: float = 0.0


def pass_rate_floor(deployment: Deployment) -> float | None:
    """The floor of the pass-rate streams (see the module docstring), or None."""
    floor = (deployment.alerting or {}).get("pass_rate_floor")
    if isinstance(floor, int | float) and not isinstance(floor, bool):
        return float(floor)
    for entry in (deployment.plan.spec.get("criteria") or {}).values():
        if isinstance(entry, Mapping) and entry.get("metric") == "pass_rate" and (
            entry.get("direction", ">=") == ">="
        ):
            return float(entry["threshold"])
    return None


def monitored_strata(deployment: Deployment) -> list[str]:
    """All traffic, then the strata of the plan's deployment mix for the watched dimension."""
    mixes = plan_selection(deployment.plan.spec)["mixes"]
    return ["", *sorted(mixes.get(deployment.watch_dimension, {}))]


def _limits(deployment: Deployment) -> dict[str, float]:
    out: dict[str, float] = {}
    floor = pass_rate_floor(deployment)
    if floor is not None:
        out["pass_rate"] = floor
    gate = plan_selection(deployment.plan.spec)["gates"].get("error_rate")
    if gate is not None:
        out["error_rate"] = float(gate)
    return out


def stream_states(deployment: Deployment) -> list[StreamState]:
    """Every stream's monitor at its latest look (the hourly windows so far)."""
    limits = _limits(deployment)
    strata = monitored_strata(deployment)
    alpha = float((deployment.alerting or {}).get("alpha", DEFAULT_ALPHA))
    k = max(1, len(limits) * len(strata))
    results = list(Window.objects.filter(deployment=deployment, granularity="hour",
                                         start__gte=_floor_hour(deployment.created_at))
                   .order_by("start").values_list("result", flat=True))
    states = []
    for kind, limit in limits.items():
        for stratum in strata:
            n, total = _per_window(results, kind, stratum)
            if not n.size or n.sum() == 0:
                states.append(StreamState(kind, stratum, limit, alpha / k, 0, None, 0.0, 1.0,
                                          False))
                continue
            monitor = drift_monitor(n, total, limit=limit, alpha=alpha / k,
                                    direction="below" if kind == "pass_rate" else "above",
                                    restart_every=RESTART_EVERY_HOURS)
            states.append(StreamState(kind, stratum, limit, alpha / k, monitor.n,
                                      monitor.mean, monitor.lower, monitor.upper,
                                      bool(monitor.alarm[-1]),
                                      since=str(results[monitor.start].get("start", "")),
                                      sequence_alpha=monitor.alpha))
    return states


def _floor_hour(at: dt.datetime) -> dt.datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _per_window(results: list[Mapping[str, Any]], kind: str, stratum: str
                ) -> tuple[np.ndarray, np.ndarray]:
    counts, sums = [], []
    for result in results:
        cell: Mapping[str, Any] | None = None
        if stratum == "":
            cell = result.get("overall")
        else:
            cell = next((s for s in result.get("strata", []) if s.get("stratum") == stratum),
                        None)
        if cell is None:
            counts.append(0)
            sums.append(0.0)
        elif kind == "pass_rate":
            counts.append(int(cell["n_human"]))
            sums.append(float(cell["human_pass_sum"]))
        else:
            counts.append(int(cell["n_rows"]))
            sums.append(float(cell["n_errors"]))
    return np.array(counts, dtype=np.int64), np.array(sums, dtype=float)


def _message(state: StreamState, deployment: Deployment) -> str:
    where = f"stratum {state.stratum}" if state.stratum else "all traffic"
    if state.kind == "pass_rate":
        return (f"{deployment.name}: pass rate on {where} is below the floor "
                f"{state.limit:.0%}: at most {state.upper:.1%} (anytime-valid, "
                f"{state.n} random human labels since {state.since[:16]})")
    return (f"{deployment.name}: error rate on {where} is above the gate {state.limit:.1%}: "
            f"at least {state.lower:.1%} (anytime-valid, {state.n} rows since "
            f"{state.since[:16]})")


def alerts_evaluate(*, deployment: Deployment, now: dt.datetime) -> list[Alert]:
    """Open or update the alerts of every firing stream; returns the alerts whose notification
    is due (new, or reminded after the cool-down). Idempotent on unchanged data apart from
    ``last_seen_at``/``seen_count``."""
    cooldown = dt.timedelta(minutes=float((deployment.alerting or {}).get(
        "cooldown_minutes", DEFAULT_COOLDOWN_MINUTES)))
    due: list[Alert] = []
    for state in stream_states(deployment):
        if not state.firing:
            continue
        key = f"{state.kind}|{state.stratum}"
        details = {"limit": state.limit, "alpha": state.alpha, "n": state.n,
                   "mean": state.mean, "lower": state.lower, "upper": state.upper,
                   "since": state.since, "sequence_alpha": state.sequence_alpha}
        with transaction.atomic():
            alert = (Alert.objects.select_for_update()
                     .filter(deployment=deployment, dedup_key=key)
                     .exclude(status=Alert.Status.RESOLVED).first())
            if alert is not None:
                alert.last_seen_at = now
                alert.seen_count += 1
                alert.details = details
                alert.message = _message(state, deployment)
                alert.save(update_fields=["last_seen_at", "seen_count", "details", "message"])
                if alert.notified_at is None or now - alert.notified_at >= cooldown:
                    due.append(alert)
                continue
            last = (Alert.objects.filter(deployment=deployment, dedup_key=key,
                                         status=Alert.Status.RESOLVED)
                    .order_by("-resolved_at").first())
            if last is not None and last.resolved_at and now - last.resolved_at < cooldown:
                continue  # within the cool-down after a resolve: stay quiet
            try:
                with transaction.atomic():
                    alert = Alert.objects.create(
                        deployment=deployment, kind=state.kind, stratum=state.stratum,
                        dedup_key=key, message=_message(state, deployment), details=details,
                        opened_at=now, last_seen_at=now)
            except IntegrityError:
                continue  # another evaluation opened it a moment ago: one alert
            AlertEvent.objects.create(alert=alert, at=now, event="opened", detail=details)
            due.append(alert)
    return due


def _transition(*, alert: Alert, user: Any, to: str, now: dt.datetime) -> Alert:
    with transaction.atomic():
        alert = Alert.objects.select_for_update().get(pk=alert.pk)
        if alert.status == Alert.Status.RESOLVED:
            raise Conflict(f"Alert {alert.pk} is already resolved.")
        if to == Alert.Status.ACKNOWLEDGED and alert.status == Alert.Status.ACKNOWLEDGED:
            return alert  # a repeated acknowledge is the same acknowledge
        actor = user if getattr(user, "is_authenticated", False) else None
        if to == Alert.Status.ACKNOWLEDGED:
            alert.acknowledged_at, alert.acknowledged_by = now, actor
        else:
            alert.resolved_at, alert.resolved_by = now, actor
        alert.status = to
        alert.save()
        AlertEvent.objects.create(alert=alert, at=now, event=str(to), actor=actor)
    return alert


def alert_acknowledge(*, alert: Alert, user: Any, now: dt.datetime) -> Alert:
    """Someone is on it: the alert stays open for deduplication, reminders keep the cool-down."""
    return _transition(alert=alert, user=user, to=Alert.Status.ACKNOWLEDGED, now=now)


def alert_resolve(*, alert: Alert, user: Any, now: dt.datetime) -> Alert:
    """Closed; the same stream opens a new alert only after the cool-down."""
    return _transition(alert=alert, user=user, to=Alert.Status.RESOLVED, now=now)
