"""Judge throughput: ReviewHub's judge run (1 and 2 Celery worker processes) against a bare
asyncio + httpx loop at the same concurrency, on the simulated provider answering after a
fixed latency. Prints calls/s, the ratio to the bare loop and worker CPU ms per job.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_judgesr_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/5 REDIS_URL=redis://127.0.0.1:6379/5 \\
    .venv/bin/python bench/judge_throughput.py [--calls 5000] [--concurrency 64 256]
        [--workers 1 2] [--latency-ms 100] [--inspect /tmp/inspect-venv/bin/python]

The database named in DATABASE_URL is created if missing and migrated; it should be a
scratch database (the benchmark study is deleted and re-created on each run, and the judge
tables are vacuumed before each ReviewHub measurement). The Redis db in CELERY_BROKER_URL is
FLUSHED: give the benchmark its own db number.

Both sides run alike: no log line per HTTP request, and the garbage-collector settings the
workers apply at start-up (`judges.celery_tasks.worker_gc_tune`) also apply to the bare loops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")
KEY_ENV = "RH_BENCH_JUDGE_API_KEY"
os.environ.setdefault(KEY_ENV, "sk-bench-not-a-real-key")
# The simulated provider listens on a random loopback port, listed as an operator would.
os.environ.setdefault("REVIEWHUB_JUDGE_ALLOWED_BASE_URLS", "http://127.0.0.1:*")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process and its waited-for children, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def start_provider(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/judges/provider_server.py"), "--port", "0",
         "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"provider server did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


# --- the bare loop --------------------------------------------------------------------------

class StockShardedTransport(httpx.AsyncBaseTransport):
    """httpx's own `AsyncHTTPTransport` (httpcore on anyio), split into shards of 4 connections
    like ReviewHub's transport, for the reference loop: stock httpx, minus the quadratic cost of
    one big httpcore pool (encode/httpcore#1035), which would otherwise make the reference
    loop, not ReviewHub, the thing measured (see docs/benchmarks.md)."""

    def __init__(self, max_connections: int) -> None:
        from judges.providers.transport import _shard_sizes, pool_limits

        sizes = _shard_sizes(max_connections)
        context = httpx.create_ssl_context()
        self.shards = [
            httpx.AsyncHTTPTransport(verify=context, limits=pool_limits(n))
            for n in sizes
        ]
        self.capacity = sizes
        self.in_flight = [0] * len(sizes)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        i = min(range(len(self.shards)), key=lambda k: self.in_flight[k] / self.capacity[k])
        self.in_flight[i] += 1
        try:
            response = await self.shards[i].handle_async_request(request)
            await response.aread()
            return response
        finally:
            self.in_flight[i] -= 1

    async def aclose(self) -> None:
        for shard in self.shards:
            await shard.aclose()


def bare_loop(url: str, *, calls: int, concurrency: int, body: bytes,
              client_kind: str = "stock") -> dict[str, float]:
    """`concurrency` coroutines posting the same request until `calls` are done.

    client_kind:
    - "stock" (the reference the ratios are taken to): `httpx.AsyncClient.post` over httpx's
      own transport, sharded as ReviewHub's is (`StockShardedTransport`);
    - "reviewhub": the client ReviewHub's executor uses (`http_client_async`: the lean
      `ProviderAsyncClient` over the asyncio network backend), shown beside it so that the
      share of the gain that is the HTTP client alone is visible;
    - "plain": a plain `httpx.AsyncClient` with one pool, whose CPU cost is quadratic in its
      size (shown for reference only).
    """
    from judges.providers import http_client_async

    async def main() -> float:
        client: Any
        if client_kind == "reviewhub":
            client = http_client_async(max_connections=max(256, concurrency))
        elif client_kind == "stock":
            client = httpx.AsyncClient(
                transport=StockShardedTransport(max(256, concurrency)), timeout=60,
                follow_redirects=False)
        else:
            limits = httpx.Limits(max_connections=concurrency,
                                  max_keepalive_connections=concurrency)
            client = httpx.AsyncClient(limits=limits, timeout=60)
        left = [calls]
        headers = {"content-type": "application/json", "authorization": "Bearer x"}
        timeout = httpx.Timeout(60.0)
        target = url + "/v1/chat/completions"

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                r = await client.request("POST", target, headers=headers, content=body,
                                         timeout=timeout)
                if r.status_code != 200:
                    raise RuntimeError(f"bare loop got HTTP {r.status_code}")
                r.json()

        async with client:
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0

    cpu0 = time.process_time()
    wall = asyncio.run(main())
    cpu = time.process_time() - cpu0
    return {"calls_per_s": calls / wall, "wall_s": wall, "cpu_ms_per_call": cpu * 1000 / calls}


# --- ReviewHub --------------------------------------------------------------------------------

def django_setup() -> None:
    import logging

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    connection.ensure_connection()
    call_command("migrate", verbosity=0)
    # The project's logging config logs every httpx request at INFO; a bare loop has no
    # logging configured, and the workers run at WARNING (BENCH_WORKER_LOG), so neither side
    # pays for a log line per call.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The workers tune the garbage collector when they start; the bare loops run under the
    # same settings, so that the ratio measures ReviewHub's work, not the collector's.
    from judges.celery_tasks import worker_gc_tune

    worker_gc_tune()


def vacuum_analyze() -> None:
    """Clear dead rows and refresh planner statistics of the judge tables.

    The benchmark deletes and re-creates thousands of jobs before each measurement; with
    autovacuum off (as on the shared development server) dead rows pile up across the
    measurements and the planner has no statistics, which no production database with
    autovacuum would show. Run outside the measured time.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("judges_judgejob", "judges_verdict", "judges_judgerun", "studies_output",
                      "studies_item"):
            cursor.execute(f"VACUUM ANALYZE {table}")


def ensure_database() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a scratch PostgreSQL database")
    name = url.rsplit("/", 1)[1]
    import psycopg

    base = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(base, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def seed(calls: int, base_url: str) -> tuple[Any, Any, Any]:
    from django.contrib.auth import get_user_model

    from judges.models import Judge, JudgeJob, JudgeRun, Verdict
    from judges.services import judge_version_for_config
    from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study

    user, _ = get_user_model().objects.get_or_create(username="bench")
    # Judge rows protect criteria and versions: remove them before the study cascades.
    Verdict.objects.filter(judge_version__judge__study__slug="bench-throughput").delete()
    JudgeJob.objects.filter(run__study__slug="bench-throughput").delete()
    JudgeRun.objects.filter(study__slug="bench-throughput").delete()
    Study.objects.filter(slug="bench-throughput").delete()
    study = Study.objects.create(name="Throughput benchmark (simulated)", slug="bench-throughput",
                                 owner=user, is_simulated=True)
    rubric = RubricVersion.objects.create(study=study, version=1)
    crit = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                    guidance="Is the answer correct?", scale="binary")
    cands = [Candidate.objects.create(study=study, name=f"cand-{i}") for i in range(2)]
    items = Item.objects.bulk_create(
        Item(study=study, external_id=f"q{i}", input=f"Question {i}: what is {i} + {i}?",
             reference=str(2 * i)) for i in range((calls + 1) // 2))
    Output.objects.bulk_create(
        Output(study=study, candidate=c, item=it, text=f"The answer is {2 * n}. [o{n}]")
        for n, (it, c) in enumerate((it, c) for it in items for c in cands))
    judge = Judge.objects.create(study=study, name="sim", kind=Judge.Kind.LLM)
    config = {"provider": "openai", "base_url": base_url + "/v1", "model": "sim-judge",
              "api_key_env": KEY_ENV, "parameters": {"temperature": 0.0, "max_tokens": 64},
              "prices": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}
    version = judge_version_for_config(judge=judge, config=config)
    return study, version, crit


def sample_body(study: Any, version: Any, crit: Any) -> bytes:
    """The exact bytes ReviewHub sends for one job, so both sides send the same request."""
    from judges.prompts import provider_request_for, subject_context_for
    from judges.providers import provider_prepare, serialize_body

    out = study.outputs.select_related("item", "study").first()
    req = provider_request_for(config=version.config,
                               ctx=subject_context_for(criterion=crit, output=out))
    return serialize_body(provider_prepare(req).body)


def start_workers(n: int, per_worker: int, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ)
    level = os.environ.get("BENCH_WORKER_LOG", "WARNING")  # INFO shows each slice's figures
    env.update({"REVIEWHUB_JUDGE_CONCURRENCY": str(per_worker),
                "REVIEWHUB_JUDGE_TASKS_PER_RUN": str(n), "REVIEWHUB_JUDGE_TASK_SLICE_S": "600",
                "REVIEWHUB_LOG_LEVEL": level})
    procs = []
    for i in range(n):
        log = (log_dir / f"bench-worker{i}.log").open("wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "reviewhub", "worker", "-Q", "judges",
             "--pool", "threads", "-c", "1", "--prefetch-multiplier", "1", "-n",
             f"bench{i}@%h", "--without-gossip", "--without-mingle", "--loglevel", level],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    time.sleep(6)  # start-up (imports, broker connection) is not part of the measurement
    return procs


def reviewhub_run(*, calls: int, concurrency: int, workers: int, study: Any, version: Any,
                  crit: Any, log_dir: Path) -> dict[str, float]:
    import redis
    from django.conf import settings

    from judges.models import JudgeJob, JudgeRun, Verdict
    from judges.runs import judge_run_start

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    JudgeRun.objects.filter(study=study).delete()
    Verdict.objects.filter(judge_version=version).delete()
    JudgeJob.objects.filter(judge_version=version).delete()
    settings.REVIEWHUB_JUDGE_TASKS_PER_RUN = workers
    settings.REVIEWHUB_JUDGE_CONCURRENCY = concurrency // workers
    vacuum_analyze()
    procs = start_workers(workers, concurrency // workers, log_dir)
    try:
        cpu0 = [proc_cpu_s(p.pid) for p in procs]
        t0 = time.perf_counter()
        run = judge_run_start(study=study, judge_version=version, criteria=[crit])
        while True:
            status = JudgeRun.objects.filter(pk=run.pk).values_list("status", flat=True)[0]
            if status != "running":
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        cpu = sum(proc_cpu_s(p.pid) - c for p, c in zip(procs, cpu0, strict=True))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    done = JudgeJob.objects.filter(run=run, status="done").count()
    verdicts = Verdict.objects.filter(run=run).count()
    if status != "done" or done != calls or verdicts != calls:
        raise RuntimeError(f"run {run.pk} ended {status} with {done} done, {verdicts} verdicts")
    return {"calls_per_s": calls / wall, "wall_s": wall, "cpu_ms_per_call": cpu * 1000 / calls}


# --- Inspect AI (optional, separate venv) ----------------------------------------------------

INSPECT_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import model_graded_qa
    from inspect_ai.solver import solver

    calls, conc, base = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    os.environ["OPENAI_BASE_URL"] = base + "/v1"

    @solver
    def canned():
        async def solve(state, generate):
            state.output.completion = "The answer is 4."
            return state
        return solve

    samples = [Sample(input=f"What is {i}+{i}?", target=str(2 * i)) for i in range(calls)]
    task = Task(dataset=samples, solver=canned(), scorer=model_graded_qa(model="openai/sim-judge"))
    t0 = time.perf_counter()
    logs = eval(task, model="openai/sim-judge", max_connections=conc, max_samples=conc,
                log_dir="/tmp/inspect-bench-logs", display="none", score=True)
    wall = time.perf_counter() - t0
    print(json.dumps({"calls_per_s": calls / wall, "wall_s": wall,
                      "status": logs[0].status}))
''')


def inspect_run(python: str, url: str, *, calls: int, concurrency: int) -> dict[str, Any]:
    proc = subprocess.run([python, "-c", INSPECT_SCRIPT, str(calls), str(concurrency), url],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-800:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--inspect", default="", help="python of a venv with inspect-ai")
    parser.add_argument("--naive-calls", type=int, default=1000,
                        help="calls for the plain-httpx reference loop (it is slow)")
    args = parser.parse_args()

    ensure_database()
    django_setup()
    server, url = start_provider(args.latency_ms)
    log_dir = Path("/tmp/reviewhub-bench")
    log_dir.mkdir(exist_ok=True)
    try:
        study, version, crit = seed(args.calls, url)
        body = sample_body(study, version, crit)
        print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
              f"python {platform.python_version()}")
        print(f"{args.calls} calls, provider latency {args.latency_ms:.0f} ms, "
              f"request body {len(body)} bytes\n")
        print(f"{'setup':<28}{'conc':>6}{'calls/s':>10}{'ratio':>8}{'CPU ms/job':>12}"
              f"{'wall s':>9}")
        for conc in args.concurrency:
            naive_calls = min(args.calls, args.naive_calls)
            naive = bare_loop(url, calls=naive_calls, concurrency=conc, body=body,
                              client_kind="plain")
            bare = bare_loop(url, calls=args.calls, concurrency=conc, body=body)
            lean = bare_loop(url, calls=args.calls, concurrency=conc, body=body,
                             client_kind="reviewhub")
            limit = conc / (args.latency_ms / 1000)
            print(f"{'bare loop, plain httpx*':<28}{conc:>6}{naive['calls_per_s']:>10.0f}"
                  f"{naive['calls_per_s'] / bare['calls_per_s']:>8.2f}"
                  f"{naive['cpu_ms_per_call']:>12.2f}{naive['wall_s']:>9.1f}"
                  f"   ({naive_calls} calls)")
            print(f"{'bare loop, stock httpx':<28}{conc:>6}{bare['calls_per_s']:>10.0f}"
                  f"{1.0:>8.2f}{bare['cpu_ms_per_call']:>12.2f}{bare['wall_s']:>9.1f}"
                  f"   (the reference; latency limit {limit:.0f}/s)")
            print(f"{'bare loop, reviewhub client':<28}{conc:>6}{lean['calls_per_s']:>10.0f}"
                  f"{lean['calls_per_s'] / bare['calls_per_s']:>8.2f}"
                  f"{lean['cpu_ms_per_call']:>12.2f}{lean['wall_s']:>9.1f}")
            for n in args.workers:
                r = reviewhub_run(calls=args.calls, concurrency=conc, workers=n, study=study,
                                  version=version, crit=crit, log_dir=log_dir)
                label = f"reviewhub, {n} worker proc"
                print(f"{label:<28}{conc:>6}{r['calls_per_s']:>10.0f}"
                      f"{r['calls_per_s'] / bare['calls_per_s']:>8.2f}"
                      f"{r['cpu_ms_per_call']:>12.2f}{r['wall_s']:>9.1f}"
                      f"   ({r['calls_per_s'] / lean['calls_per_s']:.2f} of the reviewhub-"
                      "client loop)", flush=True)
            if args.inspect:
                ins = inspect_run(args.inspect, url, calls=args.calls, concurrency=conc)
                if "error" in ins:
                    print(f"{'inspect-ai model_graded_qa':<28}{conc:>6}  failed: "
                          f"{ins['error'][-300:]!r}")
                else:
                    print(f"{'inspect-ai model_graded_qa':<28}{conc:>6}"
                          f"{ins['calls_per_s']:>10.0f}"
                          f"{ins['calls_per_s'] / bare['calls_per_s']:>8.2f}{'':>12}"
                          f"{ins['wall_s']:>9.1f}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
