#!/usr/bin/env python
"""Benchmark (not a test): judge verdicts with probabilities brought in, and the
guaranteed-agreement policy over them (issue 24 §4; figures in docs/benchmarks.md, "Judge
confidences and trust or escalate").

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_conf .venv/bin/python bench/verdict_push.py

Creates a throwaway database next to DATABASE_URL's (dropped at the end) and measures:

1. Import: 1,000,000 binary verdicts of a simulated external judge, each with a
   probability, pushed through `judges.push.verdicts_push_bulk` (what
   `POST /api/studies/<slug>/verdicts/bulk` calls) in batches of 10,000 on a study of
   1,000,000 outputs (seeded with COPY beforehand, not timed), side by side through the
   writers, each batch through each in turn (alternating the order) to a judge of its own:
   `copy` (COPY and one merge statement that also checks the new verdicts' foreign keys,
   PostgreSQL's default), `copy-rowfk` (the same with PostgreSQL's per-row foreign-key
   checks at commit, as before the merge checked them; every `--rowfk-every`-th batch) and
   `orm` (SQLite's writer; the first `--orm-verdicts`): rows/s of each, CPU per row in this
   process and in its PostgreSQL backend, their ratios, the slowest batch, and the process's
   RSS after every 100,000 rows (flat memory: each batch is read, checked and written on its
   own). Then the same verdicts sent again (all unchanged). Then `--clients-verdicts` new
   verdicts of another judge pushed by `--clients` threads at once, each with its own
   connection (as that many API clients).
2. Policy: the guaranteed-agreement decisions over 1,000,000 verdicts x 3 simulated judges
   (pure evalstats, as calibration/compute.py runs them): each judge's threshold from 10,000
   human-labelled rows on the plan's default grid (0.001 steps) and minimum count, the
   3-stage cascade, and the trusted flags of all 3,000,000 verdicts; wall time of the whole.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def say(msg: str) -> None:
    print(msg, flush=True)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def backend_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of the PostgreSQL backend `pid` (same machine): the
    server's share of the work, which a shared machine's wall clock cannot separate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def policy_bench(n: int, n_cal: int) -> dict[str, float]:
    from evalstats.selective import threshold_grid, trust_cascade, trust_threshold

    rng = np.random.default_rng(7)
    grid = threshold_grid(0.001)
    confs, oks = [], []
    for k in range(3):  # three simulated judges, sharper ones later
        c = np.round(0.5 + 0.5 * rng.beta(2 + k, 1, n), 4)
        ok = (rng.random(n) < 0.3 + 0.65 * c).astype(float)
        confs.append(c)
        oks.append(ok)
    t0 = time.perf_counter()
    cal = slice(0, n_cal)
    stages = [trust_threshold(c[cal], ok[cal], alpha=0.15, delta=0.1, min_count=50,
                              thresholds=grid) for c, ok in zip(confs, oks, strict=True)]
    cascade = trust_cascade([c[cal] for c in confs], [ok[cal] for ok in oks], alpha=0.15,
                            delta=0.1, min_count=50, thresholds=grid)
    remaining = np.ones(n, dtype=bool)
    trusted_any = np.zeros(n, dtype=bool)
    for c, st in zip(confs, cascade.stages, strict=True):
        take = remaining & st.trusted(c)
        trusted_any |= take
        remaining &= ~take
    per_judge = [st.trusted(c) for c, st in zip(confs, stages, strict=True)]
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "cascade_coverage": float(trusted_any.mean()),
            "judge_coverage": float(np.mean([p.mean() for p in per_judge]))}


def import_bench(study: Any, n: int, probs: np.ndarray, backend: int) -> None:
    """What a ratings file's write step costs: `verdicts_import_bulk` (the one call
    imports/generic.py makes for a whole file) with n one-sample verdicts with a probability,
    through both writers to two imported judge versions, then the same again (unchanged)."""
    from judges.services import (
        ImportedSample,
        VerdictImport,
        judge_imported_version_get_or_create,
        verdicts_import_bulk,
    )
    from studies.models import Criterion, Output

    crit = Criterion.objects.get(rubric__study=study, key="ok")
    outs = list(Output.objects.filter(study=study).order_by("id").values_list("id", flat=True)[:n])
    for name, use_copy in (("copy", True), ("orm", False)):
        version = judge_imported_version_get_or_create(
            study=study, name=f"file-{name}", label="v1", value_type="label").version
        for label in ("import (new)", "re-import (unchanged)"):
            specs = {
                (version.pk, crit.pk, "output", oid): VerdictImport(criterion=crit, samples=(
                    ImportedSample(order="", sample=0,
                                   value="pass" if probs[i] >= 0.5 else "fail",
                                   probability=float(probs[i])),))
                for i, oid in enumerate(outs)
            }
            rss0 = rss_mib()
            t0, c0, s0 = time.perf_counter(), time.process_time(), backend_cpu_s(backend)
            counts = verdicts_import_bulk(verdicts=specs, use_copy=use_copy)
            wall = time.perf_counter() - t0
            client, server = time.process_time() - c0, backend_cpu_s(backend) - s0
            say(f"file {label} [{name}]: {n:,} verdicts in one call, {wall:.1f} s, "
                f"{n / wall:,.0f} rows/s, {vars(counts)}; CPU per row: client "
                f"{1e6 * client / n:.1f} us + server {1e6 * server / n:.1f} us; RSS "
                f"{rss0:.0f} -> {rss_mib():.0f} MiB across the call")
            del specs


def push_parallel(study: Any, n: int, batch: int, clients: int, probs: np.ndarray,
                  label: str) -> None:
    """n new verdicts of one more external judge pushed by `clients` threads at once, each
    with its own database connection (as that many API clients, each request its own
    transaction): batch b goes to thread b % clients. While one thread's batch is merged by
    its PostgreSQL backend the others build and check theirs, so both cores work. CPU per
    row: the threads' own CPU around each push (`time.thread_time`) and their backends'."""
    import threading

    from django.db import connection

    from judges.push import verdicts_push_bulk

    judge = {"name": f"external-{clients}-clients", "config_hash": "bench", "external": True}

    def rows_of(lo: int) -> list[dict[str, Any]]:
        return [{"criterion": "ok", "item": f"i{i}", "candidate": "m",
                 "value": "pass" if probs[i] >= 0.5 else "fail",
                 "probability": float(probs[i])} for i in range(lo, min(n, lo + batch))]

    # The first batch alone: it creates the judge version that the others then find.
    verdicts_push_bulk(study=study, judge=judge, verdicts=rows_of(0))
    starts = list(range(batch, n, batch))
    start = threading.Barrier(clients + 1)
    client_cpu = [0.0] * clients
    server_cpu = [0.0] * clients
    created = [0] * clients
    failed: list[BaseException] = []

    def work(k: int) -> None:
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                pid = int(cur.fetchone()[0])
            start.wait()
            s0 = backend_cpu_s(pid)
            for lo in starts[k::clients]:
                rows = rows_of(lo)
                c0 = time.thread_time()
                out = verdicts_push_bulk(study=study, judge=judge, verdicts=rows)
                client_cpu[k] += time.thread_time() - c0
                created[k] += out.counts.created
            server_cpu[k] = backend_cpu_s(pid) - s0
        except BaseException as exc:  # reported below; the bench must not hang on it
            failed.append(exc)
            with contextlib.suppress(threading.BrokenBarrierError):
                start.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failed:
        raise failed[0]
    done = sum(created)
    client, server = sum(client_cpu), sum(server_cpu)
    say(f"{label} [copy, {clients} clients at once]: {done:,} new verdicts in {wall:.1f} s, "
        f"{done / wall:,.0f} rows/s; CPU per row: client {1e6 * client / done:.1f} us + server "
        f"{1e6 * server / done:.1f} us; RSS {rss_mib():.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verdicts", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--orm-verdicts", type=int, default=None,
                        help="push only the first N verdicts through the ORM writer too "
                             "(default: all)")
    parser.add_argument("--rowfk-every", type=int, default=1,
                        help="push every K-th batch also through the COPY writer with "
                             "PostgreSQL's per-row foreign-key checks (the writer before the "
                             "merge checked them; 0: not), so that it sees the same table "
                             "sizes with fewer rows")
    parser.add_argument("--clients", type=int, default=2,
                        help="then push --clients-verdicts new verdicts (to another judge) "
                             "from this many threads at once (0: not)")
    parser.add_argument("--clients-verdicts", type=int, default=None,
                        help="how many verdicts the clients push (default: --verdicts)")
    parser.add_argument("--import-verdicts", type=int, default=0,
                        help="also time verdicts_import_bulk (a ratings file's write step) "
                             "with N verdicts through both writers")
    args = parser.parse_args()
    if args.orm_verdicts is None:
        args.orm_verdicts = args.verdicts
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        raise SystemExit("Set DATABASE_URL to a PostgreSQL URL.")
    parsed = urlparse(base)
    bench_db = f"rh_bench_verdicts_{os.getpid()}"
    bench_url = urlunparse(parsed._replace(path=f"/{bench_db}"))
    admin_url = urlunparse(parsed._replace(path="/postgres"))
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    env = {**os.environ, "DATABASE_URL": bench_url, "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": secrets.token_urlsafe(40), "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    # A stopped run still drops its database (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        pol = policy_bench(1_000_000, 10_000)
        say(f"policy: 1,000,000 verdicts x 3 judges + cascade: {pol['wall_s']:.2f} s "
            f"(cascade coverage {pol['cascade_coverage']:.3f}, mean judge coverage "
            f"{pol['judge_coverage']:.3f})")
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0", "--skip-checks"],
                       cwd=ROOT, env=env, check=True)
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from judges.push import verdicts_push_bulk
        from reviewhub.bulkcopy import bulk_insert
        from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study

        n = args.verdicts
        owner = get_user_model().objects.create(username="bench")
        study = Study.objects.create(slug="bench", name="bench", owner=owner, status="open")
        rubric = RubricVersion.objects.create(study=study, version=1)
        Criterion.objects.create(rubric=rubric, key="ok", name="OK", guidance="g",
                                 scale="binary")
        cand = Candidate.objects.create(study=study, name="m")
        t0 = time.perf_counter()
        bulk_insert(Item, [{"study_id": study.pk, "external_id": f"i{i}", "input": "q"}
                           for i in range(n)])
        ids = dict(Item.objects.filter(study=study).values_list("external_id", "id"))
        bulk_insert(Output, [{"study_id": study.pk, "item_id": ids[f"i{i}"],
                              "candidate_id": cand.pk, "text": "a"} for i in range(n)])
        del ids
        say(f"seeded {n:,} items and outputs with COPY in {time.perf_counter() - t0:.1f} s "
            "(not timed below)")
        rng = np.random.default_rng(3)
        probs = np.round(rng.random(n), 4)
        from judges import verdict_write

        # writer -> (use_copy, the merge checks the foreign keys itself), and how many rows
        paths = {"copy": (True, True), "copy-rowfk": (True, False), "orm": (False, False)}
        limit = {"copy": n, "copy-rowfk": n if args.rowfk_every else 0,
                 "orm": args.orm_verdicts}
        checks_here = verdict_write._fk_by_statement
        if not checks_here():
            say("this database role may not set session_replication_role: the copy writer "
                "leaves the foreign-key checks to PostgreSQL (as copy-rowfk)")
        judges = {name: {"name": f"external-{name}", "config_hash": "bench", "external": True}
                  for name in paths}

        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = int(cur.fetchone()[0])

        def push_all(label: str) -> None:
            # Each batch goes through both writers in turn (to two judges of the same study),
            # alternating which goes first, so that both see the same load on a shared machine.
            wall = dict.fromkeys(paths, 0.0)
            client_cpu = dict.fromkeys(paths, 0.0)
            server_cpu = dict.fromkeys(paths, 0.0)
            slowest = dict.fromkeys(paths, 0.0)
            totals = {p: {"created": 0, "updated": 0, "unchanged": 0} for p in paths}
            rss: list[float] = []
            for b, lo in enumerate(range(0, n, args.batch)):
                order = list(paths) if b % 2 == 0 else list(reversed(paths))
                for name in order:
                    if lo >= limit[name] or (name == "copy-rowfk" and b % args.rowfk_every):
                        continue
                    use_copy, by_statement = paths[name]
                    verdict_write._fk_by_statement = (
                        checks_here if by_statement else lambda: False)
                    rows: list[dict[str, Any]] = [
                        {"criterion": "ok", "item": f"i{i}", "candidate": "m",
                         "value": "pass" if probs[i] >= 0.5 else "fail",
                         "probability": float(probs[i])}
                        for i in range(lo, min(n, lo + args.batch))
                    ]
                    b0, c0, s0 = time.perf_counter(), time.process_time(), backend_cpu_s(backend)
                    out = verdicts_push_bulk(study=study, judge=judges[name], verdicts=rows,
                                             use_copy=use_copy)
                    took = time.perf_counter() - b0
                    client_cpu[name] += time.process_time() - c0
                    server_cpu[name] += backend_cpu_s(backend) - s0
                    wall[name] += took
                    slowest[name] = max(slowest[name], took)
                    for k in totals[name]:
                        totals[name][k] += getattr(out.counts, k)
                if (lo + args.batch) % 100_000 == 0:
                    rss.append(rss_mib())
            for name in paths:
                done = sum(totals[name].values())
                if not done:
                    continue
                cpu_us = 1e6 * (client_cpu[name] + server_cpu[name]) / done
                say(f"{label} [{name}]: {done:,} verdicts in {wall[name]:.1f} s, "
                    f"{done / wall[name]:,.0f} rows/s, slowest batch {slowest[name]:.2f} s, "
                    f"{totals[name]}; CPU per row: client {1e6 * client_cpu[name] / done:.1f} "
                    f"us + server {1e6 * server_cpu[name] / done:.1f} us "
                    f"(= {1e6 / cpu_us:,.0f} rows/s of CPU)")
            for other in ("copy-rowfk", "orm"):
                if wall[other]:
                    n_other = sum(totals[other].values())
                    ratio = (n / wall["copy"]) / (n_other / wall[other])
                    cpu = ((client_cpu[other] + server_cpu[other]) / n_other) / (
                        (client_cpu["copy"] + server_cpu["copy"]) / n)
                    say(f"{label}: copy / {other} rows/s = {ratio:.2f}x, "
                        f"CPU per row {other} / copy = {cpu:.2f}x")
            say(f"{label}: RSS MiB after each 100,000: " + ", ".join(f"{r:.0f}" for r in rss))

        say(f"push {n:,} verdicts with probabilities in batches of {args.batch:,} "
            f"(load average before: {os.getloadavg()[0]:.1f})")
        push_all("push (new)")
        push_all("re-push (unchanged)")
        if args.clients:
            push_parallel(study, min(n, args.clients_verdicts or n), args.batch, args.clients,
                          probs, "push (new)")
        if args.import_verdicts:
            import_bench(study, min(n, args.import_verdicts), probs, backend)
        say(f"load average after: {os.getloadavg()[0]:.1f}")
        say(f"peak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}"
            " MiB")
    finally:
        from django.db import connections

        # Django may not be set up yet when seeding failed early.
        with contextlib.suppress(Exception):
            connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
        say("cleaned up: database dropped")


if __name__ == "__main__":
    main()
