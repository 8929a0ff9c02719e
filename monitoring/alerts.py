"""Alerts whose false-alarm rate holds however often the windows are looked at.

Streams. Per deployment, up to six kinds of stream are watched, each for all traffic ("")
and for every stratum the plan's deployment mix names (fixed by the plan, so the number of
streams K does not grow with the traffic). A kind exists when its limit does:

* ``pass_rate``: the human labels of the *random* human draws (escalations excluded), against
  the floor (``alerting.pass_rate_floor``, else the plan's first ``pass_rate`` criterion
  threshold). Fires when the confidence sequence's upper end is below the floor.
* ``agreement``: on the same random draws that have a judge verdict, whether the judge agrees
  with the human (1/0), against ``alerting.agreement_floor``, else the lower end of the
  selection-time agreement of the deployment's judge (the agreement report). Fires below.
* ``error_rate``: every row's error flag, against the plan's ``error_rate`` gate. Fires when
  the sequence's lower end is above the gate.
* ``schema_valid_rate``: the schema-valid flag of the rows that report one, against the plan's
  gate; fires below.
* ``latency_p95_ms``: whether a row is slower than the plan's p95 gate; p95 <= gate exactly
  when at most 5 % of rows are slower, so the stream fires when that share is above 0.05.
* ``cost_per_1000``: each row's cost clipped at ten times the per-row gate (gate / 1000), in
  [0, clip]; fires when the mean is above the per-row gate. Clipping only lowers what is
  observed, so an alarm on the clipped mean is an alarm on the true one.

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
from .window import context as window_context

DEFAULT_ALPHA = 0.05
DEFAULT_COOLDOWN_MINUTES = 360
KINDS = ("pass_rate", "agreement", "error_rate", "schema_valid_rate", "latency_p95_ms",
         "cost_per_1000")
# A fresh confidence sequence starts every day of hourly windows (evalstats.drift_monitor).
RESTART_EVERY_HOURS = 24
# The p95 latency gate holds when at most this share of rows is slower than it.
LATENCY_QUANTILE_SHARE = 0.05


@dataclass(frozen=True)
class Stream:
    """What one kind of stream observes in a window's cell, and against what.

    ``count``/``total``: the cell's keys holding the number of observations and their sum;
    ``direction``: "below" fires when the mean is below ``limit``, "above" when above;
    ``upper_bound``: the observations lie in [0, upper_bound] (1 for shares)."""

    kind: str
    count: str
    total: str
    direction: str
    limit: float
    upper_bound: float = 1.0


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


def agreement_floor(deployment: Deployment) -> float | None:
    """The floor of the agreement streams: ``alerting.agreement_floor``, else the lower end of
    the selection-time judge-human agreement (whole study) of the deployment's judge, else
    None (no agreement stream)."""
    floor = (deployment.alerting or {}).get("agreement_floor")
    if isinstance(floor, int | float) and not isinstance(floor, bool):
        return float(floor)
    whole = window_context.selection_agreement(deployment).get("agreement", {}).get("")
    if not whole or whole.get("value") is None:
        return None
    low = whole.get("ci_low")
    return float(whole["value"] if low is None else low)


def monitored_strata(deployment: Deployment) -> list[str]:
    """All traffic, then the strata of the plan's deployment mix for the watched dimension."""
    mixes = plan_selection(deployment.plan.spec)["mixes"]
    return ["", *sorted(mixes.get(deployment.watch_dimension, {}))]


def streams(deployment: Deployment) -> list[Stream]:
    """The deployment's streams, in `KINDS` order: those whose limit exists."""
    out = []
    floor = pass_rate_floor(deployment)
    if floor is not None:
        out.append(Stream("pass_rate", "n_human", "human_pass_sum", "below", floor))
    agree = agreement_floor(deployment)
    if agree is not None:
        out.append(Stream("agreement", "n_agree_pairs", "n_agree", "below", agree))
    gates = plan_selection(deployment.plan.spec)["gates"]
    if "error_rate" in gates:
        out.append(Stream("error_rate", "n_rows", "n_errors", "above", gates["error_rate"]))
    if "schema_valid_rate" in gates:
        out.append(Stream("schema_valid_rate", "n_schema", "n_schema_valid", "below",
                          gates["schema_valid_rate"]))
    if "latency_p95_ms" in gates:
        # p95 <= gate  <=>  the share of rows slower than the gate is <= 5 %.
        out.append(Stream("latency_p95_ms", "n_latency", "n_slow", "above",
                          LATENCY_QUANTILE_SHARE))
    if "cost_per_1000" in gates:
        per_row = gates["cost_per_1000"] / 1000.0
        out.append(Stream("cost_per_1000", "n_cost", "cost_clipped_sum", "above", per_row,
                          upper_bound=window_context.COST_CLIP_FACTOR * per_row))
    return out


def stream_states(deployment: Deployment) -> list[StreamState]:
    """Every stream's monitor at its latest look (the hourly windows so far)."""
    watched = streams(deployment)
    strata = monitored_strata(deployment)
    alpha = float((deployment.alerting or {}).get("alpha", DEFAULT_ALPHA))
    k = max(1, len(watched) * len(strata))
    results = list(Window.objects.filter(deployment=deployment, granularity="hour",
                                         start__gte=_floor_hour(deployment.created_at))
                   .order_by("start").values_list("result", flat=True))
    states = []
    for stream in watched:
        for stratum in strata:
            n, total = _per_window(results, stream, stratum)
            if not n.size or n.sum() == 0:
                states.append(StreamState(stream.kind, stratum, stream.limit, alpha / k, 0,
                                          None, 0.0, stream.upper_bound, False))
                continue
            monitor = drift_monitor(n, total, limit=stream.limit, alpha=alpha / k,
                                    direction=stream.direction,
                                    restart_every=RESTART_EVERY_HOURS,
                                    bounds=(0.0, stream.upper_bound))
            states.append(StreamState(stream.kind, stratum, stream.limit, alpha / k, monitor.n,
                                      monitor.mean, monitor.lower, monitor.upper,
                                      bool(monitor.alarm[-1]),
                                      since=str(results[monitor.start].get("start", "")),
                                      sequence_alpha=monitor.alpha))
    return states


def _floor_hour(at: dt.datetime) -> dt.datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _per_window(results: list[Mapping[str, Any]], stream: Stream, stratum: str
                ) -> tuple[np.ndarray, np.ndarray]:
    counts, sums = [], []
    for result in results:
        cell: Mapping[str, Any] | None = None
        if stratum == "":
            cell = result.get("overall")
        else:
            cell = next((s for s in result.get("strata", []) if s.get("stratum") == stratum),
                        None)
        # A version-1 window has no counts for the newer streams: no observations.
        counts.append(int((cell or {}).get(stream.count, 0) or 0))
        sums.append(float((cell or {}).get(stream.total, 0.0) or 0.0))
    return np.array(counts, dtype=np.int64), np.array(sums, dtype=float)


_WHAT = {
    "pass_rate": ("pass rate", "random human labels"),
    "agreement": ("judge-human agreement", "random human labels with a judge verdict"),
    "error_rate": ("error rate", "rows"),
    "schema_valid_rate": ("schema-valid rate", "rows reporting schema validity"),
    "latency_p95_ms": ("share of rows slower than the p95 latency gate", "rows with a latency"),
    "cost_per_1000": ("cost per row (clipped)", "rows with a cost"),
}


def _message(state: StreamState, deployment: Deployment) -> str:
    where = f"stratum {state.stratum}" if state.stratum else "all traffic"
    what, of = _WHAT[state.kind]
    since = f"anytime-valid, {state.n} {of} since {state.since[:16]}"
    if state.kind == "cost_per_1000":
        return (f"{deployment.name}: cost per 1,000 on {where} is above the gate "
                f"{1000 * state.limit:.2f}: at least {1000 * state.lower:.2f} ({since})")
    if state.kind in ("pass_rate", "agreement", "schema_valid_rate"):
        return (f"{deployment.name}: {what} on {where} is below the floor "
                f"{state.limit:.0%}: at most {state.upper:.1%} ({since})")
    return (f"{deployment.name}: {what} on {where} is above the limit {state.limit:.1%}: "
            f"at least {state.lower:.1%} ({since})")


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
