#!/usr/bin/env python
"""Benchmark (not a test): live traffic through the API with judge dispatch to a SIMULATED
local provider, and window recomputation (issue 28 §6; figures in docs/benchmarks.md,
"Monitoring").

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_x \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/8 REDIS_URL=redis://127.0.0.1:6379/9 \
        .venv/bin/python bench/monitoring_ingest.py --rate 500 --seconds 600 \
        --window-days 30 --window-rows 100000

(a short check of the setup: `--seconds 60 --window-days 0`; the Redis db of
CELERY_BROKER_URL is FLUSHED at the start, so give the benchmark its own db number.)

Creates a throwaway database next to DATABASE_URL's (dropped at the end), a study with a
locked plan and a deployment (judge rate 0.1, human rate 0.01), and measures:

1. Ingest with judge dispatch: gunicorn (`--workers`, default 2) serving the real API; an
   open-loop client sends batches of `--batch` rows to `POST /api/deployments/<id>/traffic` on
   a fixed schedule (`--rate` rows/s for `--seconds`) from `--senders` threads. Strata
   assignment, sampling, refusal and injection checks run on every row. The deployment's judge
   is an OpenAI-compatible judge config whose base URL is the SIMULATED provider
   (tests/judges/provider_server.py as a process, as bench/judge_throughput.py runs it: a
   rule-based judge answering after `--judge-latency-ms`, never a model; it fails outputs
   containing "[bad]", one in five here). While the traffic flows, celery beat sends
   `monitoring.tick` every `--tick-s` seconds and a real Celery worker on the broker from the
   environment (laid out as docker-compose's: `-Q celery,judges`, 4 processes) dispatches the
   rows drawn for the judges (`monitoring.dispatch`: live-study items and outputs, a judge run)
   and runs the judge calls, collects the verdicts as judge labels and queues the human
   draws. Every 10 s the benchmark prints the dispatch backlog (rows drawn for the judges not
   yet dispatched, not yet labelled; human draws not yet queued), the SIMULATED provider's
   call count, and the RSS of the gunicorn workers and of the Celery worker's processes. After
   the traffic it waits (at most `--drain-s`) for the backlog to empty, then checks the work
   before printing any speed figure: exactly one call answered by the provider per row drawn
   for the judges and no other status, a judge label on every drawn row that matches its
   output, every human draw queued; otherwise it prints REFUSED with the reason and exits 1.
   Then: rows/s achieved, request latency p50/p95/p99, the largest lateness of a batch against
   its schedule (the client's backlog: it grows without bound when the server cannot keep up),
   the dispatch backlog over time (first half against second half), and RSS over time.
2. Windows: `--window-days` daily windows of `--window-rows` rows each, seeded with COPY (not
   timed; then ANALYZE, as autovacuum would), then each day's window computed through
   `monitoring.services.window_compute` (load, compute, store): the total wall time, and the
   time of a second pass (nothing changed: each window is left as it is). With
   `--baseline-load FILE` (an earlier `monitoring/window/load.py`, e.g. `git show
   2eaa488:monitoring/window/load.py > /tmp/load_old.py`), first the old and the current load
   side by side, alternating window by window, each window forced through the whole
   compute; reported with the CPU of this process and of its PostgreSQL backend (read from
   /proc: the machine is shared, so CPU per window is the steadier figure), and checked to
   read the same input.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import numpy as np
from judge_throughput import server_stats, start_provider  # the SIMULATED provider's process

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
JUDGE_KEY_ENV = "RH_BENCH_MONITORING_API_KEY"
FULL_RUN = ("nice -n 0 .venv/bin/python bench/monitoring_ingest.py --rate 500 --seconds 600 "
            "--batch 50 --workers 2 --judge-latency-ms 100 --tick-s 10 --drain-s 120 "
            "--window-days 30 --window-rows 100000   # with DATABASE_URL, CELERY_BROKER_URL "
            "and REDIS_URL set (the broker's Redis db is flushed)")


def say(msg: str) -> None:
    print(msg, flush=True)


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def children(pid: int) -> list[int]:
    try:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                             text=True, check=False).stdout
    except OSError:
        return []
    return [int(x) for x in out.split()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_flush() -> None:
    """The broker's Redis db emptied: no message of an earlier run (for a database that is
    gone) is taken by this run's worker. Give the benchmark its own db number."""
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()


def seed(judge_base_url: str | None) -> tuple[int, str]:
    """The study, its locked plan and the deployment; with `judge_base_url`, the deployment
    names a SIMULATED judge (an OpenAI-compatible judge config whose base URL is the local
    simulated provider)."""
    from django.contrib.auth import get_user_model

    from judges.models import Judge
    from judges.services import judge_version_for_config
    from monitoring.services import deployment_create
    from studies.models import Candidate, Membership, Study
    from studies.services import (
        api_token_create,
        dimension_set,
        plan_create,
        plan_lock,
        rubric_update,
    )

    owner = get_user_model().objects.create(username="bench")
    study = Study.objects.create(slug="bench", name="bench", owner=owner, status="open")
    Membership.objects.create(study=study, user=owner, role="lead")
    rubric_update(study=study, criteria=[{"key": "ok", "name": "OK", "scale": "binary"}],
                  created_by=owner)
    dimension_set(study=study, dimensions=[{"key": "lang", "kind": "categorical",
                                            "source": "metadata.language",
                                            "config": {"values": ["en", "de", "fr"]}}])
    Candidate.objects.create(study=study, name="shipped")
    plan = plan_create(study=study, created_by=owner, spec={
        "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.8}},
        "deployment_mix": {"lang": {"en": 0.6, "de": 0.3, "fr": 0.1}},
        "gates": {"error_rate": 0.05, "latency_p95_ms": 2000}})
    plan_lock(plan=plan, user=owner)
    versions = []
    if judge_base_url is not None:
        judge = Judge.objects.create(study=study, name="simulated-judge", kind=Judge.Kind.LLM)
        versions.append(judge_version_for_config(judge=judge, config={
            "provider": "openai", "base_url": judge_base_url + "/v1",
            "model": "simulated-judge", "api_key_env": JUDGE_KEY_ENV,
            "parameters": {"temperature": 0.0, "max_tokens": 64}}).pk)
    dep = deployment_create(study=study, name="bench", candidate="shipped",
                            judge_version_ids=versions,
                            sampling_spec={"judge": {"default": 0.1},
                                           "human": {"default": 0.01}})
    _token, secret = api_token_create(user=owner, name="bench", study=study, can_write=True)
    return dep.pk, secret


def start_background(env: dict[str, str], tick_s: float, folder: Path
                     ) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A Celery worker on the broker from the environment, laid out as docker-compose's
    (`-Q celery,judges`, 4 processes), and celery beat sending `monitoring.tick` every
    `tick_s` seconds (REVIEWHUB_MONITORING_TICK_S) with the rest of the production schedule."""
    env = {**env, "REVIEWHUB_MONITORING_TICK_S": str(tick_s), "REVIEWHUB_LOG_LEVEL": "WARNING"}
    celery = [PY, "-m", "celery", "-A", "reviewhub"]
    worker = subprocess.Popen(
        [*celery, "worker", "-Q", "celery,judges", "--concurrency", "4", "--loglevel", "WARNING",
         "-n", f"bench-monitoring-{os.getpid()}@%h", "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env, stdout=(folder / "worker.log").open("wb"), stderr=subprocess.STDOUT)
    beat = subprocess.Popen(
        [*celery, "beat", "--loglevel", "WARNING", "-s", str(folder / "beat-schedule")],
        cwd=ROOT, env=env, stdout=(folder / "beat.log").open("wb"), stderr=subprocess.STDOUT)
    return worker, beat


def stop(*procs: subprocess.Popen[Any]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def progress(dep_id: int, provider_url: str) -> dict[str, int]:
    """Where the judge work stands: rows drawn for the judges, dispatched to the live study,
    carrying a judge label; human draws and escalations queued; calls the SIMULATED provider
    answered (per the provider's own count)."""
    from django.db.models import Q

    from monitoring.models import TrafficLabel, TrafficRow

    rows = TrafficRow.objects.filter(deployment_id=dep_id)
    judged = rows.filter(to_judge=True)
    stats = server_stats(provider_url)
    answered = {int(k): int(v) for k, v in stats.get("answered", {}).items()}
    to_queue = rows.filter(Q(to_human=True) | Q(escalated=True))
    return {
        "rows": rows.count(), "drawn": judged.count(),
        "dispatched": judged.filter(live_output__isnull=False).count(),
        "labelled": TrafficLabel.objects.filter(row__deployment_id=dep_id, source="judge")
        .values("row_id").distinct().count(),
        "to_queue": to_queue.count(), "queued": to_queue.filter(queued_at__isnull=False).count(),
        "calls_ok": answered.get(200, 0),
        "calls_other": sum(v for k, v in answered.items() if k != 200),
    }


class Sampler(threading.Thread):
    """Every `every` seconds: the dispatch backlog (`progress`) and the RSS of the gunicorn
    workers and of the Celery worker's processes, printed as it goes."""

    def __init__(self, dep_id: int, provider_url: str, server: int, worker: int, t0: float,
                 every: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.dep_id, self.url, self.server, self.worker = dep_id, provider_url, server, worker
        self.t0, self.every = t0, every
        self.samples: list[dict[str, float]] = []
        self.halt = threading.Event()

    def sample(self) -> dict[str, float]:
        p = progress(self.dep_id, self.url)
        s: dict[str, float] = {
            "t": time.perf_counter() - self.t0, **p,
            "undispatched": p["drawn"] - p["dispatched"], "unlabelled": p["drawn"] - p["labelled"],
            "rss_web": sum(rss_mib(w) for w in children(self.server)),
            "rss_worker": rss_mib(self.worker) + sum(rss_mib(w) for w in children(self.worker))}
        self.samples.append(s)
        say(f"  t={s['t']:5.0f}s rows {p['rows']:>7} drawn for judges {p['drawn']:>6} "
            f"not dispatched {s['undispatched']:>5.0f} not labelled {s['unlabelled']:>5.0f} "
            f"queued for humans {p['queued']}/{p['to_queue']} SIMULATED provider calls "
            f"{p['calls_ok']} (+{p['calls_other']} not 200) RSS MiB web {s['rss_web']:.0f} "
            f"worker {s['rss_worker']:.0f} load {os.getloadavg()[0]:.1f}")
        return s

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.halt.wait(max(0.0, self.t0 + self.every * (len(self.samples) + 1)
                                         - time.perf_counter())):
                self.sample()
        finally:
            connection.close()


def send_traffic(args: argparse.Namespace, base: str, dep_id: int, token: str, t0: float
                 ) -> tuple[np.ndarray, np.ndarray, list[int], float]:
    """The open-loop client: `--rate` rows/s in batches of `--batch` from `--senders` threads.
    Every fifth output carries "[bad]", which the SIMULATED judge fails (a check that each
    verdict lands on its own row). Returns latencies, lateness, statuses and the wall time."""
    import httpx

    rng = np.random.default_rng(1)
    langs = np.array(["en", "de", "fr", "es"])
    n_batches = int(args.rate * args.seconds / args.batch)
    period = args.batch / args.rate
    latencies = np.full(n_batches, np.nan)
    lateness = np.zeros(n_batches)
    statuses: list[int] = []
    lock = threading.Lock()
    next_batch = [0]

    def body(k: int) -> list[dict[str, Any]]:
        return [{"request_id": f"b{k}-{i}",
                 "input": "Please summarise this ticket: " + "x" * int(rng.integers(50, 400)),
                 "output": "Summary: " + "y" * int(rng.integers(40, 300))
                 + (" [bad]" if (k * args.batch + i) % 5 == 0 else ""),
                 "metadata": {"language": str(langs[int(rng.integers(0, 4))])},
                 "latency_ms": float(rng.gamma(4, 120)), "tokens_in": 300,
                 "tokens_out": 80, "cost": 0.0012} for i in range(args.batch)]

    def sender() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(timeout=30, headers=headers) as client:
            while True:
                with lock:
                    k = next_batch[0]
                    next_batch[0] += 1
                if k >= n_batches:
                    return
                due = t0 + k * period
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                rows = body(k)
                start = time.perf_counter()
                lateness[k] = start - due
                r = client.post(f"{base}/api/deployments/{dep_id}/traffic", json=rows)
                latencies[k] = time.perf_counter() - start
                with lock:
                    statuses.append(r.status_code)

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(args.senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, lateness, statuses, time.perf_counter() - t0


def drain(sampler: Sampler, drain_s: float) -> None:
    """After the traffic: sample until every drawn row is dispatched, labelled and (human draws
    and escalations) queued, or `drain_s` has passed."""
    deadline = time.perf_counter() + drain_s
    while time.perf_counter() < deadline:
        time.sleep(sampler.every)
        s = sampler.sample()
        if s["undispatched"] == 0 and s["unlabelled"] == 0 and s["queued"] == s["to_queue"]:
            return


def work_check(dep_id: int, sampler: Sampler) -> list[str]:
    """What must hold before any speed figure is printed: one SIMULATED provider call per row
    drawn for the judges (and nothing else), a judge label on every drawn row that matches
    its output (the SIMULATED judge fails "[bad]" outputs), every human draw queued."""
    from monitoring.models import TrafficLabel

    last = sampler.samples[-1]
    problems = []
    if last["calls_ok"] != last["drawn"] or last["calls_other"]:
        problems.append(f"the SIMULATED provider answered {last['calls_ok']:.0f} calls with 200 "
                        f"(+{last['calls_other']:.0f} other) for {last['drawn']:.0f} drawn rows")
    if last["labelled"] != last["drawn"]:
        problems.append(f"{last['unlabelled']:.0f} of {last['drawn']:.0f} drawn rows have no "
                        "judge label after the drain")
    labels = TrafficLabel.objects.filter(row__deployment_id=dep_id, source="judge")
    wrong = (labels.filter(value=1.0, row__output__contains="[bad]").count()
             + labels.filter(value=0.0).exclude(row__output__contains="[bad]").count())
    if wrong:
        problems.append(f"{wrong} judge labels disagree with their row's output")
    if last["queued"] != last["to_queue"]:
        problems.append(f"{last['to_queue'] - last['queued']:.0f} human draws/escalations not "
                        "queued")
    entries, _versions = human_queue(dep_id)
    if entries != last["queued"]:
        problems.append(f"{entries} entries in the live study's active plan for "
                        f"{last['queued']:.0f} queued rows")
    return problems


def human_queue(dep_id: int) -> tuple[int, int]:
    """Entries of the live study's active annotation plan, and its plan versions (one per
    deployment when every tick adds to the same plan)."""
    from annotations.models import QueueEntry, SamplingPlan
    from monitoring.models import Deployment

    live = Deployment.objects.get(pk=dep_id).live_study_id
    if live is None:  # nothing dispatched yet
        return 0, 0
    return (QueueEntry.objects.filter(plan__study_id=live, plan__is_active=True).count(),
            SamplingPlan.objects.filter(study_id=live).count())


def ingest_bench(args: argparse.Namespace, env: dict[str, str], dep_id: int, token: str,
                 provider_url: str) -> bool:
    """Traffic through gunicorn while celery beat ticks and a Celery worker dispatches the
    drawn rows to the SIMULATED judge; checks the work, then the figures. False: refused."""
    import logging
    import tempfile

    import httpx

    # One log line per request would cost the client's CPU on the server's machine.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    port = free_port()
    server = subprocess.Popen(
        [str(Path(PY).parent / "gunicorn"), "reviewhub.wsgi", "-w", str(args.workers),
         "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "120"],
        cwd=ROOT, env={**env, "DJANGO_ALLOWED_HOSTS": "127.0.0.1"})
    folder = Path(tempfile.mkdtemp(prefix="bench-monitoring-"))
    worker, beat = start_background(env, args.tick_s, folder)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        t0 = time.perf_counter() + 0.5
        sampler = Sampler(dep_id, provider_url, server.pid, worker.pid, t0)
        sampler.start()
        latencies, lateness, statuses, wall = send_traffic(args, base, dep_id, token, t0)
        sampler.halt.set()
        sampler.join()
        say(f"traffic done after {wall:.1f} s; draining (at most {args.drain_s:.0f} s)")
        sampler.sample()  # where the backlog stands when the traffic stops
        n_traffic = len(sampler.samples)
        drain(sampler, args.drain_s)
        problems = work_check(dep_id, sampler)
    finally:
        stop(beat, worker, server)
    if problems:
        say("REFUSED (the judge work was not done, so no speed figure is printed): "
            + "; ".join(problems) + f" (worker log: {folder / 'worker.log'})")
        return False
    ingest_report(args, sampler, n_traffic, latencies, lateness, statuses, wall)
    return True


def ingest_report(args: argparse.Namespace, sampler: Sampler, n_traffic: int,
                  latencies: np.ndarray, lateness: np.ndarray, statuses: list[int],
                  wall: float) -> None:
    last = sampler.samples[-1]
    entries, versions = human_queue(sampler.dep_id)
    say(f"work done: {last['drawn']:.0f} rows drawn for the judges, {last['calls_ok']:.0f} "
        f"calls answered by the SIMULATED provider, {last['labelled']:.0f} rows with a judge "
        f"label matching their output, {last['queued']:.0f}/{last['to_queue']:.0f} human "
        f"draws and escalations queued ({entries} entries in {versions} plan version(s))")
    ok = sum(1 for s in statuses if s == 200)
    lat_ms = latencies[np.isfinite(latencies)] * 1000
    n_batches = len(latencies)
    say(f"ingest: {n_batches} batches of {args.batch} rows scheduled at {args.rate} rows/s "
        f"for {args.seconds} s; {ok} answered 200 ({len(statuses) - ok} other)")
    say(f"  achieved {ok * args.batch / wall:.0f} rows/s over {wall:.1f} s")
    say(f"  request latency ms: p50 {np.percentile(lat_ms, 50):.1f}, "
        f"p95 {np.percentile(lat_ms, 95):.1f}, p99 {np.percentile(lat_ms, 99):.1f}, "
        f"max {lat_ms.max():.1f}")
    half = n_batches // 2
    say(f"  lateness against the schedule (client backlog), s: max first half "
        f"{lateness[:half].max():.3f}, max second half {lateness[half:].max():.3f}")
    during = sampler.samples[:n_traffic]
    mid = len(during) // 2
    for key, what in (("undispatched", "drawn rows not yet dispatched"),
                      ("unlabelled", "drawn rows not yet labelled")):
        first = max((s[key] for s in during[:mid]), default=float("nan"))
        second = max((s[key] for s in during[mid:]), default=float("nan"))
        # The least-squares trend over the second half: about 0 when the dispatch keeps up
        # (the backlog saws between ticks but does not grow), positive rows/min when it falls
        # behind. Not over the whole run: the first ticks fill the pipeline (a row is labelled
        # one or two ticks after it is drawn), a rise that is not a growing backlog.
        tail = during[mid:]
        slope = (float(np.polyfit([s["t"] for s in tail], [s[key] for s in tail], 1)[0])
                 * 60 if len(tail) >= 3 else float("nan"))
        say(f"  dispatch backlog, {what} (every {sampler.every:.0f} s while traffic flows): "
            f"{', '.join(f'{s[key]:.0f}' for s in during)}; max first half {first:.0f}, "
            f"second half {second:.0f}; trend over the second half {slope:+.1f} rows/min")
    for key, what in (("rss_web", "gunicorn workers'"), ("rss_worker", "Celery worker's")):
        say(f"  {what} RSS MiB over time: " + ", ".join(
            f"{s['t']:.0f}s {s[key]:.0f}" for s in sampler.samples))


def window_seed(args: argparse.Namespace, dep_id: int) -> dt.datetime:
    """Seed `--window-days` days of `--window-rows` rows with COPY (not timed), then ANALYZE."""
    from django.db import connection

    from monitoring.models import TrafficRow
    from reviewhub.bulkcopy import bulk_insert

    rng = np.random.default_rng(2)
    day0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    t = time.perf_counter()
    for d in range(args.window_days):
        n = args.window_rows
        u = rng.random(n)
        langs = rng.choice(["en", "de", "fr"], n, p=[0.6, 0.3, 0.1])
        seconds = rng.integers(0, 86_400, n)
        # COPY takes text: timestamps as ISO strings, JSON as JSON text, booleans as t/f.
        bulk_insert(TrafficRow, [{
            "deployment_id": dep_id, "request_id": f"w{d}-{i}",
            "occurred_at": (day0 + dt.timedelta(days=d, seconds=int(seconds[i]))).isoformat(),
            "received_at": day0.isoformat(), "input": "q", "output": "a" * 50,
            "metadata": "{}", "strata": json.dumps({"lang": str(langs[i])}),
            "stratum": str(langs[i]), "latency_ms": 300.0, "cost": 0.001, "error": "",
            "finish_reason": "", "output_chars": 50, "refusal": "f", "injection_rules": "[]",
            "sample_u": float(u[i]), "judge_pi": 0.1, "human_pi": 0.01,
            "to_judge": "t" if u[i] < 0.1 else "f", "to_human": "t" if u[i] < 0.01 else "f",
            "escalated": "f",
        } for i in range(n)])
    # What autovacuum does after a bulk load: without statistics the planner takes a day's
    # 100k rows for 1 and reads them by 100k single-row index probes instead of a bitmap scan.
    with connection.cursor() as cur:
        cur.execute(f"ANALYZE {TrafficRow._meta.db_table}")
    say(f"windows: seeded {args.window_days} days x {args.window_rows:,} rows with COPY and "
        f"ANALYZE in {time.perf_counter() - t:.1f} s (not timed below)")
    return day0


def baseline_load(path: str) -> Any:
    """An earlier `monitoring/window/load.py` (e.g. `git show <commit>:monitoring/window/
    load.py > /tmp/load_old.py`), imported as a sibling of the current one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("monitoring.window._baseline_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "monitoring.window"
    spec.loader.exec_module(module)
    return module


class WithGateCounts:
    """An earlier load that did not read the gate counts, as the window computation ran it
    then: the load, then `context.gate_counts` (the GROUP BY (stratum, finish reason) query
    of its own)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def window_input_load(self, *, deployment: Any, params: Any) -> Any:
        import dataclasses

        from monitoring.window import context

        inp = self.module.window_input_load(deployment=deployment, params=params)
        if inp.gate_cells:
            return inp  # a load that reads them itself
        cells, totals = context.gate_counts(deployment, params)
        return dataclasses.replace(inp, gate_cells=cells, gate_totals=totals)


def same_input(a: Any, b: Any) -> bool:
    """Two loads of one window read the same totals, sampled rows, signal subsample and gate
    counts."""
    arrays = ("to_judge", "judge_pi", "judge_value", "to_human", "human_pi", "human_value",
              "signal_output_chars", "signal_latency_ms")
    return (a.cells.keys() == b.cells.keys()
            and all(_close(a.cells[k], b.cells[k]) for k in a.cells)
            and _close(a.totals, b.totals) and list(a.stratum) == list(b.stratum)
            and all(np.allclose(getattr(a, f), getattr(b, f), equal_nan=True)
                    for f in arrays)
            and a.gate_cells.keys() == b.gate_cells.keys()
            and all(_close(a.gate_cells[k], b.gate_cells[k]) for k in a.gate_cells)
            and _close(a.gate_totals, b.gate_totals))


def _close(x: Any, y: Any) -> bool:
    return all(v == w or (isinstance(v, float | int) and isinstance(w, float | int)
                          and abs(v - w) <= 1e-9 * abs(v))
               for v, w in zip(vars(x).values(), vars(y).values(), strict=True))


def backend_cpu() -> float:
    """CPU seconds of this process's PostgreSQL backend so far (NaN when the server is not on
    this machine or /proc is not readable): the database's share of a window's work."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window_bench(args: argparse.Namespace, dep_id: int) -> None:
    """Each day's window through `monitoring.services.window_compute` (load, compute, store),
    then again with nothing changed; with `--baseline-load`, first the old and the new load
    side by side, alternating window by window (each forced, so both load, compute and
    store), checking that both read the same input."""
    day0 = window_seed(args, dep_id)
    window_measure(args, dep_id, day0)


def window_measure(args: argparse.Namespace, dep_id: int, day0: dt.datetime) -> None:
    from monitoring import services
    from monitoring.models import Deployment
    from monitoring.window import load as current
    from monitoring.window.params import WindowParams

    deployment = Deployment.objects.get(pk=dep_id)
    days = [WindowParams("day", day0 + dt.timedelta(days=d)) for d in range(args.window_days)]
    if args.baseline_load:
        # The baseline as the window computation ran it: its load, then the gate counts by
        # their own query (`context.gate_counts`) when that load does not read them.
        old = WithGateCounts(baseline_load(args.baseline_load))
        spent = {"baseline": np.zeros(3), "current": np.zeros(3)}
        for params in days:
            for name, module in (("baseline", old), ("current", current)):
                services.window_load = module  # type: ignore[assignment]
                start = np.array([time.perf_counter(), time.process_time(), backend_cpu()])
                services.window_compute(deployment=deployment, params=params, force=True)
                spent[name] += np.array([time.perf_counter(), time.process_time(),
                                         backend_cpu()]) - start
            if not same_input(old.window_input_load(deployment=deployment, params=params),
                              current.window_input_load(deployment=deployment, params=params)):
                raise SystemExit(f"the two loads read different inputs for {params.start}")
        services.window_load = current
        for name, (wall, cpu, db_cpu) in spent.items():
            say(f"  {name} load ({args.baseline_load if name == 'baseline' else 'working tree'})"
                f": {len(days)} daily windows in {wall:.2f} s, {wall / len(days) * 1000:.0f} ms "
                f"a window (CPU a window: Python {cpu / len(days) * 1000:.0f} ms, PostgreSQL "
                f"backend {db_cpu / len(days) * 1000:.0f} ms)")
        ratio = spent["current"] / spent["baseline"]
        say(f"  current / baseline: wall {ratio[0]:.2f}, Python CPU {ratio[1]:.2f}, PostgreSQL "
            f"CPU {ratio[2]:.2f}; the same input for every window")
    for label in ("first pass", "second pass (nothing changed)"):
        t_wall, t_cpu, t_db = time.perf_counter(), time.process_time(), backend_cpu()
        for params in days:
            services.window_compute(deployment=deployment, params=params,
                                    force=label == "first pass")
        say(f"  {label}, one at a time: {len(days)} daily windows in "
            f"{time.perf_counter() - t_wall:.2f} s (CPU: Python "
            f"{time.process_time() - t_cpu:.2f} s, PostgreSQL backend "
            f"{backend_cpu() - t_db:.2f} s)")
    # The recompute a lead runs (`manage.py windows_recompute`): the range at once, every
    # window forced, on the service's pool of connections.
    for workers in (1, args.recompute_workers):
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        got = services.windows_range_compute(
            deployment=deployment, granularity="day", start=days[0].start, end=days[-1].end,
            force=True, workers=workers)
        assert len(got) == len(days), (len(got), len(days))
        say(f"  recompute of the range (windows_range_compute, {workers} at a time): "
            f"{len(got)} daily windows in {time.perf_counter() - t_wall:.2f} s (CPU of this "
            f"process {time.process_time() - t_cpu:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--judge-latency-ms", type=float, default=100.0,
                        help="the SIMULATED provider's answer delay")
    parser.add_argument("--tick-s", type=float, default=10.0,
                        help="celery beat's monitoring.tick period during the run")
    parser.add_argument("--drain-s", type=float, default=120.0,
                        help="longest wait after the traffic for the judge work to finish")
    parser.add_argument("--window-days", "--windows", type=int, default=3,
                        help="daily windows to seed and compute (issue 28 asks for 30)")
    parser.add_argument("--window-rows", type=int, default=100_000)
    parser.add_argument("--recompute-workers", type=int, default=2,
                        help="windows at once in the range recompute (windows_range_compute)")
    parser.add_argument("--baseline-load", default="",
                        help="an earlier monitoring/window/load.py to time side by side")
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        raise SystemExit("Set DATABASE_URL to a PostgreSQL URL.")
    parsed = urlparse(base)
    bench_db = f"rh_bench_monitoring_{os.getpid()}"
    bench_url = urlunparse(parsed._replace(path=f"/{bench_db}"))
    admin_url = urlunparse(parsed._replace(path="/postgres"))
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    env = {**os.environ, "DATABASE_URL": bench_url, "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": secrets.token_urlsafe(40), "PYTHONUNBUFFERED": "1",
           JUDGE_KEY_ENV: "sk-simulated-not-a-real-key",
           # The SIMULATED provider listens on a random loopback port, allowed as an operator
           # would list a self-hosted endpoint.
           "REVIEWHUB_JUDGE_ALLOWED_BASE_URLS": "http://127.0.0.1:*"}
    provider: subprocess.Popen[str] | None = None
    os.environ.update(env)
    try:
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0", "--skip-checks"],
                       cwd=ROOT, env=env, check=True)
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
        import django

        django.setup()
        provider_url, refused = "", False
        if args.seconds > 0:
            broker_flush()
            provider, provider_url = start_provider(args.judge_latency_ms)
        dep_id, token = seed(provider_url if provider is not None else None)
        if args.seconds > 0 and not ingest_bench(args, env, dep_id, token, provider_url):
            refused = True
        if args.window_days > 0:
            window_bench(args, dep_id)
        say("The full run of issue 28 §6 (10 minutes, on a quiet machine):\n  " + FULL_RUN)
    finally:
        if provider is not None:
            stop(provider)
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
    if refused:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
