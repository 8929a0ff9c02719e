#!/usr/bin/env python
"""Benchmark (not a test): live traffic through the API, and window recomputation (issue 28
§6; figures in docs/benchmarks.md, "Monitoring").

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_x \
        .venv/bin/python bench/monitoring_ingest.py --rate 500 --seconds 600 \
        --window-days 30 --window-rows 100000

Creates a throwaway database next to DATABASE_URL's (dropped at the end), a study with a
locked plan and a deployment (judge rate 0.1, human rate 0.01), and measures:

1. Ingest: gunicorn (`--workers`, default 2) serving the real API; an open-loop client sends
   batches of `--batch` rows to `POST /api/deployments/<id>/traffic` on a fixed schedule
   (`--rate` rows/s for `--seconds`) from `--senders` threads. Reported: rows/s achieved,
   request latency p50/p95/p99, the largest lateness of a batch against its schedule (the
   backlog: it grows without bound when the server cannot keep up), and the server workers'
   RSS sampled every 10 s (flat memory). Strata assignment, sampling, refusal and injection
   checks run on every row; dispatch of the sampled rows to a judge is not built yet, so it is
   not measured.
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

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


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


def seed() -> tuple[int, str]:
    from django.contrib.auth import get_user_model

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
    dep = deployment_create(study=study, name="bench", candidate="shipped",
                            sampling_spec={"judge": {"default": 0.1},
                                           "human": {"default": 0.01}})
    _token, secret = api_token_create(user=owner, name="bench", study=study, can_write=True)
    return dep.pk, secret


def ingest_bench(args: argparse.Namespace, env: dict[str, str], dep_id: int,
                 token: str) -> None:
    import logging

    import httpx

    # One log line per request would cost the client's CPU on the server's machine.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    port = free_port()
    server = subprocess.Popen(
        [str(Path(PY).parent / "gunicorn"), "reviewhub.wsgi", "-w", str(args.workers),
         "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "120"],
        cwd=ROOT, env={**env, "DJANGO_ALLOWED_HOSTS": "127.0.0.1"})
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        rng = np.random.default_rng(1)
        langs = np.array(["en", "de", "fr", "es"])
        n_batches = int(args.rate * args.seconds / args.batch)
        period = args.batch / args.rate
        latencies = np.full(n_batches, np.nan)
        lateness = np.zeros(n_batches)
        statuses: list[int] = []
        lock = threading.Lock()
        next_batch = [0]
        t0 = time.perf_counter() + 0.5

        def body(k: int) -> list[dict[str, Any]]:
            return [{"request_id": f"b{k}-{i}",
                     "input": "Please summarise this ticket: " + "x" * int(rng.integers(50, 400)),
                     "output": "Summary: " + "y" * int(rng.integers(40, 300)),
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

        rss: list[tuple[float, float]] = []
        threads = [threading.Thread(target=sender, daemon=True) for _ in range(args.senders)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            workers = children(server.pid)
            rss.append((time.perf_counter() - t0, sum(rss_mib(w) for w in workers)))
            for t in threads:
                t.join(timeout=10 / max(1, len(threads)))
        wall = time.perf_counter() - t0
        ok = sum(1 for s in statuses if s == 200)
        lat_ms = latencies[np.isfinite(latencies)] * 1000
        say(f"ingest: {n_batches} batches of {args.batch} rows scheduled at {args.rate} rows/s "
            f"for {args.seconds} s; {ok} answered 200 ({len(statuses) - ok} other)")
        say(f"  achieved {ok * args.batch / wall:.0f} rows/s over {wall:.1f} s")
        say(f"  request latency ms: p50 {np.percentile(lat_ms, 50):.1f}, "
            f"p95 {np.percentile(lat_ms, 95):.1f}, p99 {np.percentile(lat_ms, 99):.1f}, "
            f"max {lat_ms.max():.1f}")
        half = n_batches // 2
        say(f"  lateness against the schedule (backlog), s: max first half "
            f"{lateness[:half].max():.3f}, max second half {lateness[half:].max():.3f}")
        say("  server workers' RSS MiB over time: " + ", ".join(
            f"{t:.0f}s {m:.0f}" for t, m in rss[:: max(1, len(rss) // 8)]))
    finally:
        server.terminate()
        server.wait(timeout=30)


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
        say(f"  {label}: {len(days)} daily windows in {time.perf_counter() - t_wall:.2f} s "
            f"(CPU: Python {time.process_time() - t_cpu:.2f} s, PostgreSQL backend "
            f"{backend_cpu() - t_db:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--window-days", "--windows", type=int, default=3,
                        help="daily windows to seed and compute (issue 28 asks for 30)")
    parser.add_argument("--window-rows", type=int, default=100_000)
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
           "DJANGO_SECRET_KEY": secrets.token_urlsafe(40), "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    try:
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0", "--skip-checks"],
                       cwd=ROOT, env=env, check=True)
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
        import django

        django.setup()
        dep_id, token = seed()
        if args.seconds > 0:
            ingest_bench(args, env, dep_id, token)
        if args.window_days > 0:
            window_bench(args, dep_id)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')


if __name__ == "__main__":
    main()
