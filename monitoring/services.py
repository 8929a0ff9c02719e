"""Writes of the monitoring app: deployments, live traffic, its labels, windows.

Each service owns its transaction and holds no network I/O inside it. Alerts live in
`monitoring.alerts`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import Count, Max
from django.utils import timezone

from calibration import selectors as calibration_selectors
from judges.models import JudgeVersion
from reviewhub.errors import Conflict, Problems, ValidationFailed
from studies.models import AnalysisPlan, Candidate, Study
from studies.services import study_quantile_edges
from studies.spec import plan_selection
from studies.strata import (
    DimensionAssigner,
    assign_strata,
)

from . import sampling, signals, traffic
from .models import Deployment, TrafficLabel, TrafficRow, Window
from .notify import webhook_refusal
from .window import compute as window_compute_mod
from .window import context as window_context
from .window import load as window_load
from .window.params import GRANULARITIES, WindowParams, window_floor, window_params_validate

ALERTING_KEYS = ("alpha", "cooldown_minutes", "pass_rate_floor", "agreement_floor",
                 "webhook_url", "emails")
DEFAULT_SAMPLING: dict[str, dict[str, float]] = {"judge": {"default": 0.1},
                                                 "human": {"default": 0.01}}


def _batch_max() -> int:
    return int(getattr(settings, "REVIEWHUB_TRAFFIC_BATCH_MAX", 5000))


# --- Deployments ------------------------------------------------------------------------------

def _frozen_scheme(study: Study) -> list[dict[str, Any]]:
    """The study's dimensions with quantile bins replaced by their edges over its items now."""
    dims: list[dict[str, Any]] = [
        dict(d) for d in study.dimensions.order_by("position", "id").values(
            "key", "kind", "source", "config")]
    edges = study_quantile_edges(study, dims)
    return [{**d, "kind": "numeric_bins", "config": {"edges": edges[d["key"]]}}
            if edges.get(d["key"]) else d for d in dims]


def _alerting_check(alert_settings: Mapping[str, Any], problems: Problems) -> None:
    """Add a problem naming `alerting.<key>` for each bad alert setting."""
    alpha = alert_settings.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 0.5:
        problems.add("alerting.alpha", "must be a number in (0, 0.5)")
    for key in alert_settings:
        if key not in ALERTING_KEYS:
            problems.add(f"alerting.{key}", f"unknown key (use {', '.join(ALERTING_KEYS)})")
    cooldown = alert_settings.get("cooldown_minutes", 360)
    if isinstance(cooldown, bool) or not isinstance(cooldown, int | float) or cooldown < 0:
        problems.add("alerting.cooldown_minutes", "must be a number of minutes >= 0")
    for key in ("pass_rate_floor", "agreement_floor"):
        floor = alert_settings.get(key)
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)
                                  or not 0 <= floor <= 1):
            problems.add(f"alerting.{key}", "must be a number in [0, 1]")
    url = alert_settings.get("webhook_url") or ""
    url_problem = (webhook_refusal(url) if url else None) if isinstance(url, str) \
        else "must be an http(s) URL"
    if url_problem:
        problems.add("alerting.webhook_url", url_problem)
    emails = alert_settings.get("emails") or []
    if not isinstance(emails, list) or not all(
        isinstance(e, str) and "@" in e and len(e) <= 254 for e in emails
    ):
        problems.add("alerting.emails", "must be a list of e-mail addresses")


def deployment_create(
    *,
    study: Study,
    name: str,
    candidate: str,
    plan_version: int | None = None,
    shadow_candidates: Sequence[str] = (),
    judge_version_ids: Sequence[int] = (),
    calibration_snapshot_id: int | None = None,
    watch_dimension: str | None = None,
    sampling_spec: Mapping[str, Any] | None = None,
    alerting: Mapping[str, Any] | None = None,
    created_by: Any = None,
) -> Deployment:
    """A deployment of the study's shipped candidate under a locked plan (the latest locked one
    when `plan_version` is None). 400 naming the field for anything that does not resolve."""
    problems = Problems()
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        problems.add("name", "a non-empty name of at most 200 characters is required")
    shipped = Candidate.objects.filter(study=study, name=candidate).first()
    if shipped is None:
        problems.add("candidate", f"no candidate named {candidate!r} in this study")
    shadows = list(Candidate.objects.filter(study=study, name__in=list(shadow_candidates)))
    unknown = sorted(set(shadow_candidates) - {c.name for c in shadows})
    if unknown:
        problems.add("shadow_candidates", f"no candidate named {', '.join(unknown)}")
    plans = AnalysisPlan.objects.filter(study=study, locked_at__isnull=False)
    plan = (plans.filter(version=plan_version) if plan_version is not None
            else plans.order_by("-version")).first()
    if plan is None:
        problems.add("plan_version", "the study has no locked analysis plan of that version "
                     "(a deployment is watched against the plan it was chosen under)")
    versions = list(JudgeVersion.objects.filter(judge__study=study, pk__in=list(judge_version_ids)))
    missing = sorted(set(judge_version_ids) - {v.pk for v in versions})
    if missing:
        problems.add("judge_versions", f"no judge version {missing} in this study")
    spec = dict(sampling_spec) if sampling_spec is not None else DEFAULT_SAMPLING
    for path, message in sampling.sampling_problems(spec):
        problems.add(path, message)
    scheme = _frozen_scheme(study)
    keys = [d["key"] for d in scheme]
    if watch_dimension is None:
        mix_dim = plan_selection(plan.spec)["mix"].get("dimension") if plan else None
        watch_dimension = mix_dim if mix_dim in keys else (keys[0] if keys else "")
    elif watch_dimension and watch_dimension not in keys:
        problems.add("watch_dimension", f"not a stratum dimension of the study ({keys})")
    alert_settings = dict(alerting or {})
    _alerting_check(alert_settings, problems)
    problems.raise_if_any("The deployment")
    snapshot = calibration_selectors.snapshot_resolve(study=study,
                                                      snapshot_id=calibration_snapshot_id)
    assert shipped is not None and plan is not None
    with transaction.atomic():
        deployment = Deployment.objects.create(
            study=study, name=name.strip(), candidate=shipped, plan=plan,
            calibration_snapshot_id=snapshot, strata_scheme=scheme,
            watch_dimension=watch_dimension or "", sampling=spec, alerting=alert_settings,
            created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
        )
        deployment.shadow_candidates.set(shadows)
        deployment.judge_versions.set(versions)
    return deployment


# --- Traffic ----------------------------------------------------------------------------------

def _assigners(deployment: Deployment) -> list[DimensionAssigner]:
    return [DimensionAssigner(d) for d in deployment.strata_scheme]


# The columns a traffic row is written with, and their SQL types for json_to_recordset.
_INSERT_COLUMNS = (
    ("request_id", "text"), ("occurred_at", "timestamptz"), ("input", "text"),
    ("output", "text"), ("metadata", "jsonb"), ("strata", "jsonb"), ("stratum", "text"),
    ("latency_ms", "float8"), ("tokens_in", "integer"), ("tokens_out", "integer"),
    ("cost", "float8"), ("error", "text"), ("finish_reason", "text"),
    ("schema_valid", "boolean"), ("request", "jsonb"), ("output_chars", "integer"),
    ("refusal", "boolean"), ("injection_rules", "jsonb"), ("sample_u", "float8"),
    ("judge_pi", "float8"), ("human_pi", "float8"), ("to_judge", "boolean"),
    ("to_human", "boolean"),
)


def _traffic_row_values(deployment: Deployment, r: Mapping[str, Any],
                        assigners: list[DimensionAssigner]) -> dict[str, Any]:
    """A validated row with its strata, sampling decision and label-free signals."""
    lengths = {"input_length": len(r["input"]), "context_length": len(r["context"]),
               "reference_length": None}
    strata = assign_strata(assigners, metadata=r["metadata"], lengths=lengths)
    stratum = strata.get(deployment.watch_dimension, "") if deployment.watch_dimension else ""
    d = sampling.draw(deployment_id=deployment.pk, request_id=r["request_id"],
                      stratum=stratum, sampling=deployment.sampling)
    return {
        "request_id": r["request_id"], "occurred_at": r["occurred_at"], "input": r["input"],
        "output": r["output"], "metadata": r["metadata"], "strata": strata,
        "stratum": stratum, "latency_ms": r["latency_ms"], "tokens_in": r["tokens_in"],
        "tokens_out": r["tokens_out"], "cost": r["cost"], "error": r["error"],
        "finish_reason": r["finish_reason"], "schema_valid": r["schema_valid"],
        "request": r["request"], "output_chars": len(r["output"]),
        "refusal": signals.is_refusal(r["output"]),
        "injection_rules": signals.injection_rules(r["input"]),
        "sample_u": d.u, "judge_pi": d.judge_pi, "human_pi": d.human_pi,
        "to_judge": d.to_judge, "to_human": d.to_human,
    }


def _traffic_insert_sql(deployment: Deployment, values: list[dict[str, Any]],
                        now: dt.datetime) -> int:
    """Insert the rows in one statement (PostgreSQL): the batch goes as one JSON parameter,
    unpacked by json_to_recordset; a request id already recorded (before, or by a concurrent
    retry) is skipped by ON CONFLICT and not returned. Django's bulk_create of the same rows
    cost two thirds of a 50-row batch (building the multi-row INSERT and its parameters)."""
    table = TrafficRow._meta.db_table
    names = ", ".join(name for name, _ in _INSERT_COLUMNS)
    record = ", ".join(f"{name} {kind}" for name, kind in _INSERT_COLUMNS)
    sql = (
        f"INSERT INTO {table} (deployment_id, received_at, escalated, {names}) "
        f"SELECT %s, %s, false, {names} FROM json_to_recordset(%s::json) AS r({record}) "
        "ON CONFLICT (deployment_id, request_id) DO NOTHING RETURNING request_id"
    )  # the table and column names are the model's; every value is a parameter
    payload = json.dumps(
        [{**v, "occurred_at": v["occurred_at"].isoformat()} for v in values],
        separators=(",", ":"))
    with connection.cursor() as cur:
        cur.execute(sql, [deployment.pk, now, payload])
        return len(cur.fetchall())


def _insert_in_sql() -> bool:
    return connection.vendor == "postgresql"


def traffic_ingest(*, deployment: Deployment, rows: Any) -> dict[str, int]:
    """Record a batch of live traffic: validated whole (400 naming the row and field, nothing
    written), strata assigned by the deployment's frozen scheme, sampled (Poisson, permanent
    random numbers), inserted in one transaction. Idempotent on the request id: a row already
    recorded is left as it was and counted as unchanged.

    On PostgreSQL the batch is one INSERT ... SELECT FROM json_to_recordset ... ON CONFLICT DO
    NOTHING RETURNING (`_traffic_insert_sql`); elsewhere (SQLite) Django's bulk_create."""
    if deployment.status != Deployment.Status.ACTIVE:
        raise Conflict(f"Deployment {deployment.pk} is {deployment.status}; it takes no traffic.")
    now = timezone.now()
    valid = traffic.traffic_rows_validate(
        rows, now=now, max_rows=_batch_max(),
        max_chars=int(getattr(settings, "REVIEWHUB_MAX_FIELD_CHARS", 1_000_000)))
    assigners = _assigners(deployment)
    if _insert_in_sql():
        values = [_traffic_row_values(deployment, r, assigners) for r in valid]
        with transaction.atomic():
            created = _traffic_insert_sql(deployment, values, now)
        return {"created": created, "unchanged": len(valid) - created}
    existing = set(TrafficRow.objects.filter(
        deployment=deployment, request_id__in=[r["request_id"] for r in valid],
    ).values_list("request_id", flat=True))
    objs = [TrafficRow(deployment=deployment, **_traffic_row_values(deployment, r, assigners))
            for r in valid if r["request_id"] not in existing]
    with transaction.atomic():
        # ignore_conflicts: a concurrent retry of the same request id is a no-op, not a 500.
        TrafficRow.objects.bulk_create(objs, batch_size=1000, ignore_conflicts=True)
    return {"created": len(objs), "unchanged": len(valid) - len(objs)}


def traffic_labels_record(*, deployment: Deployment, labels: Any) -> dict[str, int]:
    """Record judge verdicts and human grades of traffic rows (idempotent per row, source and
    rater: a repeated label replaces the earlier value). A judge label whose decision is
    "escalate" sends its row to the human queue as an escalation (never a random draw)."""
    valid = traffic.traffic_labels_validate(labels, max_rows=_batch_max())
    ids = {r["request_id"] for r in valid}
    rows = dict(TrafficRow.objects.filter(deployment=deployment, request_id__in=ids)
                .values_list("request_id", "id"))
    problems = Problems(keep=50)
    for i, label in enumerate(valid):
        if label["request_id"] not in rows:
            problems.add(f"[{i}].request_id", "no traffic row of this deployment has this "
                         "request id", index=i)
    problems.raise_if_any("The label batch")
    objs = [TrafficLabel(row_id=rows[r["request_id"]], source=r["source"], rater=r["rater"],
                         value=float(r["value"]), decision=r["decision"]) for r in valid]
    escalate = {rows[r["request_id"]] for r in valid if r["decision"] == "escalate"}
    with transaction.atomic():
        TrafficLabel.objects.bulk_create(
            objs, batch_size=1000, update_conflicts=True,
            unique_fields=["row", "source", "rater"], update_fields=["value", "decision"])
        escalated = TrafficRow.objects.filter(pk__in=escalate, to_human=False,
                                              escalated=False).update(escalated=True)
    return {"recorded": len(objs), "escalated": escalated}


# --- Windows ----------------------------------------------------------------------------------

def _fingerprint(deployment: Deployment, params: WindowParams) -> str:
    rows = TrafficRow.objects.filter(deployment=deployment, occurred_at__gte=params.start,
                                     occurred_at__lt=params.end)
    r = rows.aggregate(n=Count("id"), m=Max("id"))
    labels = TrafficLabel.objects.filter(row__in=rows).aggregate(n=Count("id"), m=Max("id"),
                                                                 t=Max("created_at"))
    # Labels are upserted in place: their count and newest id miss a replaced value, so the
    # fingerprint also holds the newest label time.
    text = f"{r['n']}|{r['m']}|{labels['n']}|{labels['m']}|{labels['t']}"
    return hashlib.sha256(text.encode()).hexdigest()


def window_compute(*, deployment: Deployment, params: WindowParams,
                   force: bool = False,
                   selection: window_compute_mod.SelectionReference | None = None) -> Window:
    """Compute (or recompute) one window. Idempotent: one row per (deployment, granularity,
    start) by a unique constraint; when nothing it reads has changed since the stored result
    (same fingerprint) the stored window is returned untouched. `selection` is the
    deployment's selection-time evidence when the caller has read it already (a range of
    windows reads it once)."""
    fingerprint = _fingerprint(deployment, params)
    stored = Window.objects.filter(deployment=deployment, granularity=params.granularity,
                                   start=params.start).first()
    if stored is not None and stored.fingerprint == fingerprint and not force:
        return stored
    # The load reads the gate counts too (on PostgreSQL in its one statement).
    inp = window_load.window_input_load(deployment=deployment, params=params)
    if selection is None:
        selection = window_context.selection_reference(deployment)
    inp = dataclasses.replace(inp, selection=selection)
    result = window_compute_mod.window_compute(inp)
    with transaction.atomic():
        window, _ = Window.objects.update_or_create(
            deployment=deployment, granularity=params.granularity, start=params.start,
            defaults={"end": params.end, "n_rows": result.n_rows, "fingerprint": fingerprint,
                      "result_version": result.version, "result": result.to_json(),
                      "computed_at": timezone.now()},
        )
    return window


def windows_recent_compute(*, deployment: Deployment, now: dt.datetime) -> list[Window]:
    """The windows a beat tick keeps current: the hour and the day that contain `now`, and the
    hour and day before (late rows and late labels land there)."""
    out = []
    for granularity, step in GRANULARITIES.items():
        current = window_floor(now, granularity)
        for start in (current - step, current):
            out.append(window_compute(deployment=deployment,
                                      params=WindowParams(granularity, start)))
    return out


def windows_range_compute(*, deployment: Deployment, granularity: str, start: dt.datetime,
                          end: dt.datetime, force: bool = False,
                          workers: int | None = None) -> list[Window]:
    """Every window of `granularity` that starts in [start, end), computed as `window_compute`
    does (idempotent; `force` recomputes unchanged ones too): what a lead runs after putting a
    new calibration snapshot in force or changing the plan's gates, when the stored history
    must be read again under them.

    The windows are independent, and most of a window's time is PostgreSQL's (one statement
    reading the day's rows), so on PostgreSQL they are computed `workers` at a time (default:
    the machine's cores, at most 4), each thread on its own database connection, closed when
    it ends. The selection-time evidence is read once for the range. On other databases
    (SQLite's one writer) they run one after another."""
    if end <= start:
        raise ValidationFailed.at("end", "must be after start")
    first = window_floor(start, granularity)
    if first < start:
        first += GRANULARITIES[granularity]
    days = []
    at = first
    while at < end:
        days.append(WindowParams(granularity, at))
        at += GRANULARITIES[granularity]
    selection = window_context.selection_reference(deployment)
    if workers is None:
        workers = min(4, os.cpu_count() or 1)
    if connection.vendor != "postgresql" or workers <= 1 or len(days) <= 1:
        return [window_compute(deployment=deployment, params=p, force=force,
                               selection=selection) for p in days]

    def one(params: WindowParams) -> Window:
        try:
            return window_compute(deployment=deployment, params=params, force=force,
                                  selection=selection)
        finally:
            # A pool thread's connection is its own; Django would not close it.
            connections.close_all()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, days))


def params_or_400(raw: Any) -> WindowParams:
    """Window params from a request body (400 naming the field)."""
    if not isinstance(raw, Mapping):
        raise ValidationFailed.at("$", "the body must be a JSON object")
    return window_params_validate(raw)
