"""Judge throughput: ReviewHub's judge run (1 and 2 Celery worker processes) against bare
asyncio loops at the same concurrency and against two peers (Inspect AI and promptfoo, each in
its own install), on the simulated provider answering after a fixed latency.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/8 REDIS_URL=redis://127.0.0.1:6379/8 \\
    .venv/bin/python bench/judge_throughput.py [--calls 5000] [--concurrency 64 256]
        [--workers 1 2] [--latency-ms 100] [--rounds 1]
        [--inspect /tmp/inspect-venv/bin/python] [--promptfoo /tmp/promptfoo-bench]
        [--compare REF]

Every figure is counted at the simulated server, so every setup is measured by the same
clock: the server is reset before a setup, and afterwards says how many model calls it
answered (per HTTP status) and the time from the first request to the last answer. A setup
whose server count is not exactly one successful call per job (or per sample / test), or
whose own account says it failed (Inspect's log status and sample count, promptfoo's result
count and errors, ReviewHub's run status and verdicts), prints REFUSED with the reason
instead of a figure.

`--compare REF` also runs the 1-worker setup with the workers of another commit (exported
with `git archive` into a temporary folder; same database schema required), alternating with
this tree's workers, so the before/after worker CPU per job comes from one invocation.

`--promptfoo DIR` is a folder with promptfoo installed (`npm install promptfoo@0.121.20` in
it); without it the benchmark installs promptfoo into a temporary folder when npm is there,
and skips it with the reason otherwise (`--no-promptfoo` skips it outright).

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
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
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


class NotMeasured(RuntimeError):
    """The setup did not do the work it was asked to do: no figure may be printed for it."""


def server_reset(url: str) -> None:
    req = urllib.request.Request(url + "/__reset", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as response:
        response.read()


def server_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/__stats", timeout=10) as response:
        return dict(json.loads(response.read()))


def server_measure(url: str, *, expected: int, what: str) -> dict[str, float]:
    """Calls/s as the simulated server saw them since the last reset, after checking that it
    answered exactly `expected` chat-completion calls, all with HTTP 200, and nothing else."""
    stats = server_stats(url)
    answered = {int(k): int(v) for k, v in stats.get("answered", {}).items()}
    counts = {k: int(v) for k, v in stats.get("counts", {}).items()}
    ok = answered.get(200, 0)
    other = {k: v for k, v in answered.items() if k != 200}
    paths = {k: v for k, v in counts.items() if k not in ("/v1/chat/completions",
                                                          "/chat/completions")}
    if ok != expected or other or paths:
        raise NotMeasured(
            f"{what}: the server answered {ok} successful calls of {expected} expected"
            + (f", other statuses {other}" if other else "")
            + (f", requests to other paths {paths}" if paths else ""))
    span = float(stats["span_s"])
    return {"calls_per_s": ok / span, "wall_s": span, "server_calls": ok}


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
      `ProviderAsyncClient` over the lean HTTP/1.1 pool, `judges/providers/http1.py`), shown
      beside it so that the share of the gain that is the HTTP client alone is visible; the
      reference the worker's ratio is taken to ("/lean");
    - "httpcore": the same client over the httpcore-based sharded transport on the asyncio
      network backend (what `http_client_async` was until 2026-12-07), for comparison with
      the earlier "/lean" figures;
    - "plain": a plain `httpx.AsyncClient` with one pool, whose CPU cost is quadratic in its
      size (shown for reference only).
    """
    from judges.providers import http_client_async

    async def main() -> float:
        client: Any
        if client_kind == "reviewhub":
            client = http_client_async(max_connections=max(256, concurrency))
        elif client_kind == "httpcore":
            from judges.providers import ProviderAsyncClient
            from judges.providers.transport import ShardedAsyncTransport

            client = ProviderAsyncClient(
                transport=ShardedAsyncTransport(max_connections=max(256, concurrency)),
                timeout=httpx.Timeout(60.0))
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

    server_reset(url)
    cpu0 = time.process_time()
    wall = asyncio.run(main())
    cpu = time.process_time() - cpu0
    measured = server_measure(url, expected=calls, what=f"bare loop ({client_kind})")
    return {**measured, "e2e_s": wall, "cpu_ms_per_call": cpu * 1000 / calls}


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


def start_workers(n: int, per_worker: int, log_dir: Path,
                  tree: Path = ROOT) -> list[subprocess.Popen[bytes]]:
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
            cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT))
    time.sleep(6)  # start-up (imports, broker connection) is not part of the measurement
    return procs


def reviewhub_run(*, calls: int, concurrency: int, workers: int, study: Any, version: Any,
                  crit: Any, log_dir: Path, url: str, tree: Path = ROOT) -> dict[str, float]:
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
    procs = start_workers(workers, concurrency // workers, log_dir, tree)
    server_reset(url)
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
        raise NotMeasured(f"run {run.pk} ended {status} with {done} jobs done and {verdicts} "
                          f"verdicts of {calls}")
    measured = server_measure(url, expected=calls, what=f"ReviewHub, {workers} worker(s)")
    return {**measured, "e2e_s": wall, "cpu_ms_per_call": cpu * 1000 / calls}


# --- peers (each in its own install) ---------------------------------------------------------

# Inspect's generic OpenAI-compatible provider: `openai-api/<name>/<model>`, with the base URL
# and key in <NAME>_BASE_URL and <NAME>_API_KEY. (Its `openai/…` provider sends this Inspect
# version's requests to the Responses API, /v1/responses, which the simulated server answers
# with 404: the eval then ends with status "error" after a handful of requests.)
INSPECT_MODEL = "openai-api/sim/sim-judge"
INSPECT_SCRIPT = textwrap.dedent("""
    import importlib.metadata, json, os, sys, time
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import model_graded_qa
    from inspect_ai.solver import solver

    calls, conc, base, model, log_dir = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                         sys.argv[4], sys.argv[5])
    for name in ("SIM", "OPENAI"):  # "OPENAI" only for a run with --inspect-model openai/…
        os.environ[name + "_API_KEY"] = "sk-bench"
        os.environ[name + "_BASE_URL"] = base + "/v1"

    @solver
    def canned():
        # The candidate's answer is given, so the only model calls are the grader's.
        async def solve(state, generate):
            state.output.completion = "The answer is 4."
            return state
        return solve

    samples = [Sample(input=f"What is {i}+{i}?", target=str(2 * i)) for i in range(calls)]
    task = Task(dataset=samples, solver=canned(), scorer=model_graded_qa(model=model))
    t0 = time.perf_counter()
    logs = eval(task, model=model, max_connections=conc, max_samples=conc, log_dir=log_dir,
                display="none", score=True, fail_on_error=False, retry_on_error=0)
    wall = time.perf_counter() - t0
    log = logs[0]
    samples_out = log.samples or []
    print(json.dumps({
        "version": importlib.metadata.version("inspect_ai"), "status": log.status,
        "error": str(log.error.message)[:300] if log.error else next(
            (str(s.error.message)[:300] for s in samples_out if s.error), ""),
        "completed": log.results.completed_samples if log.results else 0,
        "scored": sum(1 for s in samples_out if s.scores and not s.error),
        "sample_errors": sum(1 for s in samples_out if s.error),
        "e2e_s": wall}))
""")


def inspect_run(python: str, url: str, *, calls: int, concurrency: int,
                model: str = INSPECT_MODEL, script: str = INSPECT_SCRIPT,
                work: str = "scored", extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Inspect AI's `model_graded_qa` on `calls` samples; refused unless the eval succeeded,
    every sample was scored without error, and the server answered one call per sample.

    `script` (run in the Inspect venv with `calls concurrency url model log_dir
    *extra_args`) may be another task, e.g. generation in bench/generation_throughput.py;
    `work` names the count in its JSON line that must equal `calls`."""
    server_reset(url)
    with tempfile.TemporaryDirectory(prefix="inspect-bench-logs-") as log_dir:
        proc = subprocess.run(
            [python, "-c", script, str(calls), str(concurrency), url, model, log_dir,
             *extra_args], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise NotMeasured(f"inspect-ai exited {proc.returncode}: "
                          f"{(proc.stderr or proc.stdout)[-400:]!r}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["status"] != "success" or out["completed"] != calls or out[work] != calls:
        raise NotMeasured(f"inspect-ai {out['version']}: eval status {out['status']}, "
                          f"{out['completed']} samples completed and {out[work]} {work} "
                          f"of {calls} ({out['error'] or 'no error message'})")
    measured = server_measure(url, expected=calls, what="inspect-ai")
    return {**measured, "e2e_s": out["e2e_s"], "version": out["version"]}


PROMPTFOO_VERSION = "0.121.20"


def promptfoo_install(folder: str) -> tuple[Path | None, str]:
    """(the promptfoo executable, "") or (None, why not): an existing install in `folder`, or
    `npm install promptfoo@PROMPTFOO_VERSION` into a temporary folder (for this run only)."""
    if folder:
        exe = Path(folder) / "node_modules" / ".bin" / "promptfoo"
        return (exe, "") if exe.exists() else (None, f"no promptfoo under {folder}")
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed"
    target = Path(tempfile.mkdtemp(prefix="promptfoo-bench-"))
    proc = subprocess.run([npm, "install", "--no-audit", "--no-fund",
                           f"promptfoo@{PROMPTFOO_VERSION}"], cwd=target, capture_output=True,
                          text=True, timeout=1800)
    exe = target / "node_modules" / ".bin" / "promptfoo"
    if proc.returncode != 0 or not exe.exists():
        return None, f"npm install promptfoo failed: {(proc.stderr or proc.stdout)[-300:]!r}"
    return exe, ""


def promptfoo_config(url: str, calls: int) -> dict[str, Any]:
    """`calls` tests, each the echo provider (no network: the candidate's answer is given) and
    one `llm-rubric` assertion graded by the simulated server: one model call per test."""
    return {
        "description": "ReviewHub judge-throughput peer (simulated provider)",
        "prompts": ["The answer is {{answer}}."],
        "providers": ["echo"],
        "defaultTest": {
            "options": {"provider": {
                "id": "openai:chat:sim-judge",
                "config": {"apiBaseUrl": url + "/v1", "apiKey": "sk-bench"}}},
            "assert": [{"type": "llm-rubric", "value": "The answer is correct."}],
        },
        "tests": [{"vars": {"answer": str(2 * i), "question": f"What is {i}+{i}?"}}
                  for i in range(calls)],
    }


def promptfoo_run(exe: Path, url: str, *, calls: int, concurrency: int,
                  config_data: dict[str, Any] | None = None) -> dict[str, Any]:
    """promptfoo eval, no cache, `--max-concurrency`; refused unless it reports one result per
    test and no error, and the server answered one call per test. `config_data` replaces the
    grading config (`promptfoo_config`), e.g. generation in bench/generation_throughput.py."""
    with tempfile.TemporaryDirectory(prefix="promptfoo-bench-run-") as tmp:
        config = Path(tmp) / "promptfooconfig.json"
        config.write_text(json.dumps(config_data or promptfoo_config(url, calls)))
        out_file = Path(tmp) / "results.json"
        env = {**os.environ, "PROMPTFOO_CONFIG_DIR": str(Path(tmp) / "home"),
               "PROMPTFOO_CACHE_ENABLED": "false", "PROMPTFOO_DISABLE_TELEMETRY": "1",
               "PROMPTFOO_DISABLE_UPDATE": "1", "PROMPTFOO_DISABLE_REMOTE_GENERATION": "true",
               "OPENAI_API_KEY": "sk-bench"}
        server_reset(url)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(exe), "eval", "-c", str(config), "--no-cache", "--max-concurrency",
             str(concurrency), "-o", str(out_file), "--no-table", "--no-progress-bar",
             "--no-write"], capture_output=True, text=True, timeout=1800, env=env, cwd=tmp)
        wall = time.perf_counter() - t0
        if not out_file.exists():
            raise NotMeasured(f"promptfoo wrote no results (exit {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout)[-400:]!r}")
        data = json.loads(out_file.read_text())
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                                 env=env, timeout=120).stdout.strip().splitlines()[-1:]
    results = data.get("results", {})
    rows = results.get("results", [])
    stats = results.get("stats", {})
    # promptfoo's failureReason 2 is an error (1 is a failed assertion, which is a grade).
    errors = max(int(stats.get("errors", 0)),
                 sum(1 for r in rows if r.get("failureReason") == 2))
    if len(rows) != calls or errors:
        raise NotMeasured(f"promptfoo: {len(rows)} results of {calls}, {errors} errors "
                          f"(exit {proc.returncode}); first error: "
                          f"{next((r.get('error') for r in rows if r.get('error')), '')!r:.300}")
    measured = server_measure(url, expected=calls, what="promptfoo")
    return {**measured, "e2e_s": wall, "version": version[0] if version else "?",
            "passed": int(stats.get("successes", 0))}


def baseline_tree(ref: str) -> Path:
    """The tree of commit `ref` (git archive) in a temporary folder, for its workers."""
    target = Path(tempfile.mkdtemp(prefix="reviewhub-baseline-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def row(label: str, conc: int, r: dict[str, Any] | None, *, stock: float | None,
        lean: float | None, note: str = "") -> None:
    """One table line; a setup that did not do its work prints REFUSED and why, no figure."""
    if r is None:
        print(f"{label:<34}{conc:>6}  REFUSED: {note}", flush=True)
        return
    rate = r["calls_per_s"]
    cpu = f"{r['cpu_ms_per_call']:.2f}" if "cpu_ms_per_call" in r else ""
    to_stock = f"{rate / stock:.2f}" if stock else "-"
    to_lean = f"{rate / lean:.2f}" if lean else "-"
    print(f"{label:<34}{conc:>6}{rate:>10.0f}{to_stock:>8}{to_lean:>8}{cpu:>9}"
          f"{r['wall_s']:>8.1f}{r.get('e2e_s', 0.0):>8.1f}   {note}", flush=True)


def measure(fn: Any, **kwargs: Any) -> tuple[dict[str, Any] | None, str]:
    try:
        return fn(**kwargs), ""
    except NotMeasured as exc:
        return None, str(exc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate every setup this many times at each concurrency")
    parser.add_argument("--inspect", default="", help="python of a venv with inspect-ai")
    parser.add_argument("--inspect-model", default=INSPECT_MODEL,
                        help="the model name Inspect is given (openai/sim-judge shows the failed "
                             "eval the earlier figures measured)")
    parser.add_argument("--promptfoo", default="",
                        help="folder with promptfoo installed (default: npm install it into a "
                             "temporary folder)")
    parser.add_argument("--no-promptfoo", action="store_true")
    parser.add_argument("--peer-calls", type=int, default=0,
                        help="calls for the peers (default: --calls); they are slow here")
    parser.add_argument("--compare", default="", metavar="REF",
                        help="also run 1 worker from this commit's tree (before/after)")
    parser.add_argument("--skip-loops", action="store_true",
                        help="run no bare loop (no ratios; e.g. to profile a worker)")
    parser.add_argument("--no-stock-loop", action="store_true",
                        help="skip the bare loop on stock httpx (slow at c = 256; no /stock)")
    parser.add_argument("--no-httpcore-loop", action="store_true",
                        help="skip the bare loop on the httpcore-based client")
    parser.add_argument("--naive-calls", type=int, default=0,
                        help="calls for the one-pool plain-httpx loop (slow; 0: not run)")
    args = parser.parse_args()

    peer_calls = args.peer_calls or args.calls
    ensure_database()
    django_setup()
    server, url = start_provider(args.latency_ms)
    log_dir = Path("/tmp/reviewhub-bench")
    log_dir.mkdir(exist_ok=True)
    promptfoo: Path | None = None
    promptfoo_why = "--no-promptfoo"
    if not args.no_promptfoo:
        promptfoo, promptfoo_why = promptfoo_install(args.promptfoo)
    before = baseline_tree(args.compare) if args.compare else None
    try:
        study, version, crit = seed(args.calls, url)
        body = sample_body(study, version, crit)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
        print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
              f"python {platform.python_version()}, commit {head}"
              + (f", before = {args.compare}" if args.compare else ""))
        print(f"{args.calls} calls, provider latency {args.latency_ms:.0f} ms, "
              f"request body {len(body)} bytes, load average at start {load_average()}")
        if promptfoo is None:
            print(f"promptfoo skipped: {promptfoo_why}")
        print("calls/s = model calls the simulated server answered / its time from the first "
              "request to the last answer\n")
        print(f"{'setup':<34}{'conc':>6}{'calls/s':>10}{'/stock':>8}{'/lean':>8}{'CPU ms':>9}"
              f"{'span s':>8}{'e2e s':>8}")
        for conc in args.concurrency:
            limit = conc / (args.latency_ms / 1000)
            print(f"-- c = {conc} (latency bound {limit:.0f} calls/s), load average "
                  f"{load_average()}")
            for rnd in range(args.rounds):
                if args.naive_calls and rnd == 0:
                    naive_calls = min(args.calls, args.naive_calls)
                    r, why = measure(bare_loop, url=url, calls=naive_calls, concurrency=conc,
                                     body=body, client_kind="plain")
                    row("bare loop, plain httpx (1 pool)", conc, r, stock=None, lean=None,
                        note=why or f"({naive_calls} calls)")
                stock = lean = None
                if not args.skip_loops and not args.no_stock_loop:
                    stock, why = measure(bare_loop, url=url, calls=args.calls,
                                         concurrency=conc, body=body)
                    row("bare loop, stock httpx", conc, stock, stock=None, lean=None,
                        note=why or "reference for /stock")
                if not args.skip_loops:
                    if not args.no_httpcore_loop:
                        r, why = measure(bare_loop, url=url, calls=args.calls,
                                         concurrency=conc, body=body, client_kind="httpcore")
                        row("bare loop, httpcore client", conc, r,
                            stock=stock["calls_per_s"] if stock else None, lean=None,
                            note=why or "the lean client before 2026-12-07")
                    lean, why = measure(bare_loop, url=url, calls=args.calls,
                                        concurrency=conc, body=body, client_kind="reviewhub")
                    row("bare loop, reviewhub client", conc, lean,
                        stock=stock["calls_per_s"] if stock else None, lean=None,
                        note=why or "reference for /lean")
                stock_rate = stock["calls_per_s"] if stock else None
                lean_rate = lean["calls_per_s"] if lean else None
                setups: list[tuple[str, int, Path]] = []
                if before is not None:
                    setups.append((f"reviewhub {args.compare}, 1 worker", 1, before))
                setups += [(f"reviewhub, {n} worker proc", n, ROOT) for n in args.workers if n > 0]
                for label, n, tree in setups:
                    r, why = measure(reviewhub_run, calls=args.calls, concurrency=conc,
                                     workers=n, study=study, version=version, crit=crit,
                                     log_dir=log_dir, url=url, tree=tree)
                    row(label, conc, r, stock=stock_rate, lean=lean_rate, note=why)
                if args.inspect:
                    r, why = measure(inspect_run, python=args.inspect, url=url,
                                     calls=peer_calls, concurrency=conc,
                                     model=args.inspect_model)
                    row("inspect-ai model_graded_qa", conc, r, stock=stock_rate,
                        lean=lean_rate, note=why or f"inspect-ai {r['version'] if r else ''}, "
                        f"{peer_calls} samples")
                if promptfoo is not None:
                    r, why = measure(promptfoo_run, exe=promptfoo, url=url, calls=peer_calls,
                                     concurrency=conc)
                    row("promptfoo llm-rubric", conc, r, stock=stock_rate, lean=lean_rate,
                        note=why or f"promptfoo {r['version']}, {peer_calls} tests, "
                        f"{r['passed']} passed" if r else why)
            print(f"   load average at the end of c = {conc}: {load_average()}")
    finally:
        server.terminate()
        server.wait(timeout=10)
        if before is not None:
            shutil.rmtree(before, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
