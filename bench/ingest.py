#!/usr/bin/env python
"""Ingest benchmark (not a test): prints figures for docs/benchmarks.md, section "Ingest".

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_ingest .venv/bin/python bench/ingest.py

Creates a throwaway database next to DATABASE_URL's (dropped at the end) and a temporary
folder for the generated files (deleted at the end), then measures on PostgreSQL:

1. 100,002 outputs (3 candidates x 33,334 items) through the CLI (`manage.py import_outputs`
   in a subprocess): wall time, rows/s, peak RSS of the importer process (ru_maxrss), and the
   re-import of the same file (every row unchanged).
2. The same 100,002 outputs through `POST /api/studies/<slug>/outputs/bulk` on a live
   gunicorn (1 sync worker) on 127.0.0.1, via httpx: wall time, rows/s, the worker's peak RSS.
3. `GET /api/studies/<slug>/outputs?page_size=100` on the 100,002-output study through the
   same gunicorn: p50 / p95 / max over many requests (first page and following cursor pages).
4. A large JSON Lines file (default 1 GiB, `--big-gib`; 0 skips) through the CLI: rows/s and
   peak RSS, so the memory/file-size ratio is measured rather than assumed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TEXT = ("The answer, based on the retrieved passages, is as follows. " * 4).strip()


def say(msg: str) -> None:
    print(msg, flush=True)


def machine() -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.splitlines()
    return (f"nproc={os.cpu_count()}, CPU={cpu}, {mem[1].split()[1]} RAM "
            f"({platform.python_version()}), load average {os.getloadavg()[0]:.2f}")


def write_items(path: Path, n: int, prefix: str = "item") -> None:
    langs = ("en", "de", "fr")
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({
                "external_id": f"{prefix}-{i:07d}",
                "input": f"Question {i}: what does the document say about topic {i % 97}?",
                "metadata": {"language": langs[i % 3], "doc_chars": (i * 37) % 5000},
            }) + "\n")


def write_candidates(path: Path, n: int = 3) -> None:
    with path.open("w") as f:
        for c in range(n):
            f.write(json.dumps({"name": f"cand-{c}", "provider": "bench",
                                "model_id": f"model-{c}"}) + "\n")


def write_outputs(path: Path, items: int, candidates: int = 3, prefix: str = "item",
                  pad: int = 0, target_bytes: int | None = None) -> int:
    """One output per (item, candidate); `pad` extra characters of text per row."""
    extra = "x" * pad
    rows = 0
    with path.open("w") as f:
        for i in range(items):
            for c in range(candidates):
                f.write(json.dumps({
                    "item": f"{prefix}-{i:07d}", "candidate": f"cand-{c}",
                    "text": f"{TEXT} [{i}/{c}] {extra}", "latency_ms": 100.0 + (i % 900),
                    "tokens_in": 50 + i % 200, "tokens_out": 20 + i % 80,
                    "cost": 0.00001 * (1 + c), "finish_reason": "stop",
                    "metadata": {"run": "bench"},
                }) + "\n")
                rows += 1
            if target_bytes is not None and f.tell() >= target_bytes:
                break
    return rows


def run_measured(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Run a subprocess; return (wall seconds, peak RSS in MiB, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # wait4 gives this child's own rusage (ru_maxrss: peak RSS in KiB on Linux).
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise SystemExit(f"{' '.join(args)} failed ({code}):\n{out}\n{err[-3000:]}")
    # The last line is the command's summary (settings log their start-up line to stdout).
    lines = out.strip().splitlines()
    return wall, usage.ru_maxrss // 1024, lines[-1] if lines else ""


def cli_import(kind: str, slug: str, path: Path, env: dict[str, str]) -> tuple[float, int, str]:
    return run_measured([PY, "manage.py", f"import_{kind}", "--skip-checks", "--no-progress",
                         "--study", slug, str(path)], env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vm_hwm_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=33_334)
    parser.add_argument("--big-gib", type=float, default=1.0,
                        help="size of the large JSON Lines file in GiB (0: skip)")
    parser.add_argument("--list-requests", type=int, default=200)
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        raise SystemExit("Set DATABASE_URL to a PostgreSQL URL (the benchmark is for PostgreSQL).")
    parsed = urlparse(base)
    bench_db = f"rh_bench_ingest_{os.getpid()}"
    bench_url = urlunparse(parsed._replace(path=f"/{bench_db}"))
    admin_url = urlunparse(parsed._replace(path="/postgres"))

    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    tmp = Path(tempfile.mkdtemp(prefix="rh-bench-ingest-", dir="/tmp"))
    env = {**os.environ, "DATABASE_URL": bench_url, "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": secrets.token_urlsafe(40), "REVIEWHUB_VAR_DIR": str(tmp / "var"),
           "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    server: subprocess.Popen[bytes] | None = None
    figures: dict[str, Any] = {"machine": machine()}
    try:
        say(f"machine: {figures['machine']}")
        say(f"database: {bench_db} (throwaway), files in {tmp}")
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0", "--skip-checks"],
                       cwd=ROOT, env=env, check=True)
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
        import django

        django.setup()
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)
        from django.contrib.auth import get_user_model

        from studies.models import Membership, Output, Study
        from tests.factories import api_token_create

        lead = get_user_model().objects.create_user("bench-lead", password="x")
        for slug in ("bench-cli", "bench-rest", "bench-big"):
            study = Study.objects.create(name=slug, slug=slug, owner=lead,
                                         status=Study.Status.OPEN)
            Membership.objects.create(study=study, user=lead, role=Membership.Role.LEAD)
        token = api_token_create(user=lead)

        items_path, cands_path = tmp / "items.jsonl", tmp / "candidates.jsonl"
        outputs_path = tmp / "outputs.jsonl"
        write_items(items_path, args.items)
        write_candidates(cands_path)
        rows = write_outputs(outputs_path, args.items)
        size_mib = outputs_path.stat().st_size / 2**20
        say(f"outputs file: {rows:,} rows, {size_mib:.1f} MiB")

        # Start-up cost of the command itself (Django, imports): a one-row file.
        one = tmp / "one.jsonl"
        one.write_text(json.dumps({"name": "warmup"}) + "\n")
        startup, base_rss, _ = cli_import("candidates", "bench-big", one, env)
        say(f"CLI start-up (1-row import): {startup:.2f} s, peak RSS {base_rss} MiB")

        # 1. CLI
        for slug in ("bench-cli", "bench-rest"):
            wall, _, _ = cli_import("items", slug, items_path, env)
            cli_import("candidates", slug, cands_path, env)
        say(f"CLI items: {args.items:,} in {wall:.2f} s ({args.items / wall:,.0f} rows/s)")
        wall, rss, out = cli_import("outputs", "bench-cli", outputs_path, env)
        figures["cli"] = (wall, rss)
        say(f"CLI outputs: {out} in {wall:.2f} s = {rows / wall:,.0f} rows/s end to end "
            f"({rows / (wall - startup):,.0f} rows/s without start-up); peak RSS {rss} MiB")
        wall, rss, out = cli_import("outputs", "bench-cli", outputs_path, env)
        say(f"CLI outputs again: {out} in {wall:.2f} s = {rows / wall:,.0f} rows/s; "
            f"peak RSS {rss} MiB")

        # 2. REST on a live gunicorn
        import httpx

        port = free_port()
        server = subprocess.Popen(
            [PY, "-m", "gunicorn", "reviewhub.wsgi:application", "-b", f"127.0.0.1:{port}",
             "-w", "1", "--timeout", "900", "--log-level", "warning"],
            cwd=ROOT, env=env,
        )
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=900,
                              headers={"Authorization": f"Bearer {token}"})
        for _ in range(100):
            try:
                if client.get("/healthz").status_code < 500:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        workers = children(server.pid)
        body = outputs_path.read_bytes()
        for label in ("REST outputs", "REST outputs again"):
            start = time.perf_counter()
            response = client.post("/api/studies/bench-rest/outputs/bulk", content=body,
                                   headers={"Content-Type": "application/x-ndjson"})
            wall = time.perf_counter() - start
            assert response.status_code == 200, response.text[:2000]
            rss = max((vm_hwm_mib(w) for w in workers), default=-1)
            say(f"{label}: {response.json()} in {wall:.2f} s = {rows / wall:,.0f} rows/s; "
                f"worker peak RSS {rss} MiB ({size_mib:.1f} MiB body)")
        del body
        assert Output.objects.filter(study__slug="bench-rest").count() == rows

        # 3. List page latency
        latencies = []
        first = "/api/studies/bench-cli/outputs?page_size=100"
        url: str | None = first
        client.get(first)  # warm-up
        for n in range(args.list_requests):
            if url is None or n % 20 == 0:
                url = first
            start = time.perf_counter()
            response = client.get(url)
            latencies.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.text[:500]
            page = response.json()
            assert len(page["results"]) == 100
            nxt = page.get("next")
            url = nxt.replace(f"http://127.0.0.1:{port}", "") if nxt else None
        latencies.sort()
        p95 = latencies[int(0.95 * len(latencies)) - 1]
        say(f"GET outputs?page_size=100 on {rows:,} outputs, {len(latencies)} requests: "
            f"p50 {statistics.median(latencies):.1f} ms, p95 {p95:.1f} ms, "
            f"max {latencies[-1]:.1f} ms")
        client.close()
        server.terminate()
        server.wait(30)
        server = None

        # 4. The large file
        if args.big_gib > 0:
            target = int(args.big_gib * 2**30)
            pad = 700  # ~1 KiB per row, like a real answer
            per_item = 3 * (len(TEXT) + pad + 200)
            big_items = target // per_item + 10
            big_items_path, big_path = tmp / "big-items.jsonl", tmp / "big-outputs.jsonl"
            write_items(big_items_path, big_items, prefix="big")
            wall, _, _ = cli_import("items", "bench-big", big_items_path, env)
            say(f"big: {big_items:,} items imported in {wall:.1f} s")
            cli_import("candidates", "bench-big", cands_path, env)
            big_rows = write_outputs(big_path, big_items, prefix="big", pad=pad,
                                     target_bytes=target)
            big_mib = big_path.stat().st_size / 2**20
            wall, rss, out = cli_import("outputs", "bench-big", big_path, env)
            say(f"big CLI outputs: {big_rows:,} rows, {big_mib:,.0f} MiB file: {out} in "
                f"{wall:.1f} s = {big_rows / wall:,.0f} rows/s; peak RSS {rss} MiB")
            big_path.unlink()
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)
        say("cleaned up: database dropped, files deleted")


if __name__ == "__main__":
    main()
