"""Candidate-run throughput: ReviewHub's generation run (one Celery worker, one candidate held
closed-loop at C) against a bare asyncio + httpx loop at the same C and against two peers
generating the same completions (Inspect AI and promptfoo, each in its own install), on the
simulated provider answering after a fixed latency. Every figure is counted at the server (the
harness of bench/judge_throughput.py: reset, then calls answered and the span from the first
request to the last answer on the server's clock).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench_generation \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/8 REDIS_URL=redis://127.0.0.1:6379/8 \\
    .venv/bin/python bench/generation_throughput.py [--calls 3000] [--concurrency 64 256]
        [--latency-ms 100] [--rounds 1] [--inspect /tmp/inspect-venv/bin/python]
        [--promptfoo /tmp/promptfoo-bench | --no-promptfoo] [--no-lean-loop]
        [--peer-calls N] [--profile-drain]

Every setup sends the same messages for the same items (the study's template rendered by
ReviewHub: a system and a user message, temperature 0, max_tokens 64), one completion per item:

- Inspect AI: its generic OpenAI-compatible provider (`openai-api/sim/sim-model`, chat
  completions), a task whose solver is a plain `generate()` and no scorer, `max_connections`
  and `max_samples` = C, no retries; refused unless the eval log says `success` with every
  sample completed and answered without error.
- promptfoo: an `openai:chat` provider at the simulated server's base URL, one test per item
  with no assertion, `--max-concurrency C`, no cache; refused unless it reports one result per
  test and no error.

A setup whose server count is not exactly one successful call per item, or whose own account
says otherwise (ReviewHub: the run ended `done` with one output per item), prints REFUSED with
the reason instead of a figure. Within a round the setups alternate (every other round in the
reverse order), and each round prints ReviewHub's ratio to every other setup, so a change of
load during the run shows in the ratios. It also prints ReviewHub's own overhead per call (the
p50/p95 of `overhead_ms`: the worker's time on a call outside the HTTP exchange), the mean
number of requests in flight the worker measured, the CPU ms per call of each setup (the bare
loop: this process; ReviewHub: the worker process; a peer: its process tree), and for every
setup the time per request beyond the server's latency that its rate implies if C were held
in flight (C / rate - latency: client time, queueing and the server's own work together).

The database in DATABASE_URL is created if missing and migrated (a scratch database: the
benchmark study is re-created on each run). The Redis db in CELERY_BROKER_URL is FLUSHED.
Without `--promptfoo` the benchmark installs promptfoo into a temporary folder when npm is
there (bench/judge_throughput.py, `promptfoo_install`); without `--inspect` Inspect is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import judge_throughput as jt  # noqa: E402  (the shared server-counted harness)

KEY_ENV = jt.KEY_ENV


def seed(calls: int, base_url: str) -> tuple[Any, Any, Any]:
    from django.contrib.auth import get_user_model

    from generation.models import GenerationJob, GenerationRun
    from generation.services import generation_config_create, prompt_template_create
    from studies.models import Candidate, Item, Study

    user, _ = get_user_model().objects.get_or_create(username="bench")
    GenerationJob.objects.filter(run__study__slug="bench-generation").delete()
    GenerationRun.objects.filter(study__slug="bench-generation").delete()
    Study.objects.filter(slug="bench-generation").delete()
    study = Study.objects.create(name="Generation benchmark (simulated)",
                                 slug="bench-generation", owner=user, is_simulated=True)
    cand = Candidate.objects.create(study=study, name="cand-bench")
    Item.objects.bulk_create(
        Item(study=study, external_id=f"q{i}", input=f"Question {i}: what is {i} + {i}?",
             metadata={"lang": "en"}) for i in range(calls))
    config, _ = generation_config_create(candidate=cand, config={
        "provider": "openai", "base_url": base_url + "/v1", "model": "sim-model",
        "api_key_env": KEY_ENV, "parameters": {"temperature": 0.0, "max_tokens": 64},
        "prices": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}})
    template, _ = prompt_template_create(study=study, template={
        "system": "Answer in {metadata.lang}, briefly.", "user": "{input}"})
    return study, config, template


def item_messages(study: Any, template: Any) -> list[tuple[str, str]]:
    """(system, user) of every item in id order, rendered by ReviewHub's own template code:
    what the run sends, and what the peers are given to send."""
    from generation.config import render

    t = template.template
    out = []
    for item in study.items.order_by("id"):
        values = {"input": item.input, "metadata": item.metadata, "context": "",
                  "reference": "", "external_id": item.external_id}
        out.append((render(t["system"], values), render(t["user"], values)))
    return out


def sample_body(config: Any, messages: tuple[str, str]) -> bytes:
    """The exact bytes ReviewHub sends for one item, so the bare loop sends the same request."""
    from judges.providers import ChatMessage, ProviderRequest, provider_prepare, serialize_body

    req = ProviderRequest(provider="openai", base_url=config.config["base_url"],
                          model=config.config["model"], api_key=None, temperature=0.0,
                          max_tokens=64, messages=(ChatMessage("system", messages[0]),
                                                   ChatMessage("user", messages[1])))
    return serialize_body(provider_prepare(req).body)


def start_worker(log_dir: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    level = os.environ.get("BENCH_WORKER_LOG", "WARNING")
    env.update({"REVIEWHUB_GENERATION_TASK_SLICE_S": "600", "REVIEWHUB_LOG_LEVEL": level})
    log = (log_dir / "bench-generation-worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "reviewhub", "worker", "-Q", "judges",
         "--pool", "threads", "-c", "1", "--prefetch-multiplier", "1", "-n",
         "bench-generation@%h", "--without-gossip", "--without-mingle", "--loglevel", level],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    time.sleep(6)  # start-up (imports, broker connection) is not part of the measurement
    return proc


def reviewhub_run(*, calls: int, concurrency: int, study: Any, config: Any, template: Any,
                  log_dir: Path, url: str) -> dict[str, Any]:
    import redis
    from django.conf import settings
    from django.db import connection

    from generation.models import GenerationJob, GenerationRun
    from generation.runs import generation_run_start
    from generation.selectors import generation_run_progress
    from studies.models import Output

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    Output.objects.filter(study=study).delete()
    GenerationJob.objects.filter(run__study=study).delete()
    GenerationRun.objects.filter(study=study).delete()
    with connection.cursor() as cursor:
        for table in ("generation_generationjob", "studies_output", "studies_item"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    proc = start_worker(log_dir)
    jt.server_reset(url)
    try:
        cpu0 = jt.proc_cpu_s(proc.pid)
        t0 = time.perf_counter()
        run = generation_run_start(study=study, template=template, configs=[config],
                                   concurrency=concurrency)
        while True:
            status = GenerationRun.objects.filter(pk=run.pk).values_list("status",
                                                                         flat=True)[0]
            if status != "running":
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        cpu = jt.proc_cpu_s(proc.pid) - cpu0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    done = GenerationJob.objects.filter(run=run, status="done").count()
    outputs = Output.objects.filter(study=study).count()
    if status != "done" or done != calls or outputs != calls:
        raise jt.NotMeasured(f"run {run.pk} ended {status} with {done} jobs done and "
                             f"{outputs} outputs of {calls}")
    measured = jt.server_measure(url, expected=calls, what="ReviewHub generation run")
    cand = generation_run_progress(run=run)["candidates"][0]
    return {**measured, "e2e_s": wall, "cpu_ms_per_call": cpu * 1000 / calls,
            "note": f"{calls} items, 1 worker",
            "overhead_p50_ms": cand["overhead_ms"]["p50"],
            "overhead_p95_ms": cand["overhead_ms"]["p95"],
            "mean_in_flight": cand["mean_in_flight"]}


# --- peers (each in its own install; the harness is bench/judge_throughput.py's) ---------------

# Inspect's generic OpenAI-compatible provider (chat completions; its `openai/` provider would
# send this version's requests to the Responses API, which the simulated server does not speak).
INSPECT_MODEL = "openai-api/sim/sim-model"
INSPECT_GENERATE_SCRIPT = textwrap.dedent("""
    import importlib.metadata, json, os, sys, time
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser
    from inspect_ai.solver import generate

    calls, conc, base, model, log_dir, items_path = (int(sys.argv[1]), int(sys.argv[2]),
                                                     sys.argv[3], sys.argv[4], sys.argv[5],
                                                     sys.argv[6])
    os.environ["SIM_API_KEY"] = "sk-bench"
    os.environ["SIM_BASE_URL"] = base + "/v1"
    with open(items_path) as f:
        items = json.load(f)[:calls]
    samples = [Sample(input=[ChatMessageSystem(content=system), ChatMessageUser(content=user)],
                      id=i) for i, (system, user) in enumerate(items)]
    # A plain generate() and no scorer: one model call per sample, nothing graded. The
    # samples are logged (the check counts them) but not streamed to the live-view buffer
    # (log_realtime=False, Inspect's documented switch: ~12 % of its time in a profile).
    task = Task(dataset=samples, solver=generate(), scorer=None)
    t0 = time.perf_counter()
    logs = eval(task, model=model, max_connections=conc, max_samples=conc, log_dir=log_dir,
                display="none", score=False, fail_on_error=False, retry_on_error=0,
                log_realtime=False, temperature=0.0, max_tokens=64)
    wall = time.perf_counter() - t0
    log = logs[0]
    samples_out = log.samples or []
    print(json.dumps({
        "version": importlib.metadata.version("inspect_ai"), "status": log.status,
        "error": str(log.error.message)[:300] if log.error else next(
            (str(s.error.message)[:300] for s in samples_out if s.error), ""),
        "completed": log.results.completed_samples if log.results else 0,
        "answered": sum(1 for s in samples_out
                        if not s.error and s.output and s.output.completion),
        "e2e_s": wall}))
""")


def children_cpu_s() -> float:
    """CPU time of this process's waited-for children (a peer's whole process tree)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def inspect_generate(python: str, url: str, *, calls: int, concurrency: int,
                     items_path: Path) -> dict[str, Any]:
    """Inspect AI generating one completion per item (jt.inspect_run checks its log)."""
    cpu0 = children_cpu_s()
    r = jt.inspect_run(python, url, calls=calls, concurrency=concurrency, model=INSPECT_MODEL,
                       script=INSPECT_GENERATE_SCRIPT, work="answered",
                       extra_args=(str(items_path),))
    return {**r, "cpu_ms_per_call": (children_cpu_s() - cpu0) * 1000 / calls,
            "note": f"inspect-ai {r['version']}, {calls} samples"}


def promptfoo_generation_config(url: str, items: list[tuple[str, str]]) -> dict[str, Any]:
    """One test per item and no assertion: promptfoo's `openai:chat` provider at the simulated
    server sends the item's system and user messages (a JSON chat prompt), one call per test."""
    return {
        "description": "ReviewHub candidate-run throughput peer (simulated provider)",
        "prompts": ['[{"role": "system", "content": {{ system | dump }}}, '
                    '{"role": "user", "content": {{ user | dump }}}]'],
        "providers": [{"id": "openai:chat:sim-model", "config": {
            "apiBaseUrl": url + "/v1", "apiKey": "sk-bench", "temperature": 0,
            "max_tokens": 64}}],
        "tests": [{"vars": {"system": system, "user": user}} for system, user in items],
    }


def promptfoo_generate(exe: Path, url: str, *, calls: int, concurrency: int,
                       items: list[tuple[str, str]]) -> dict[str, Any]:
    """promptfoo generating one completion per item (jt.promptfoo_run checks its results)."""
    cpu0 = children_cpu_s()
    r = jt.promptfoo_run(exe, url, calls=calls, concurrency=concurrency,
                         config_data=promptfoo_generation_config(url, items[:calls]))
    return {**r, "cpu_ms_per_call": (children_cpu_s() - cpu0) * 1000 / calls,
            "note": f"promptfoo {r['version']}, {calls} tests"}


def profile_drain(*, calls: int, concurrency: int, url: str, top: int = 30) -> None:
    """One drain of `calls` items at C run in this process (no Celery: the run's tasks are
    not sent) under yappi's CPU clock, all threads; prints the `top` functions by own time. The
    profiler inflates functions made of many small calls: read shares as upper bounds."""
    import yappi  # not a project dependency: `pip install yappi` where it is wanted

    from generation.executor import run_drain
    from generation.runs import generation_run_start

    study, config, template = seed(calls, url)
    run = generation_run_start(study=study, template=template, configs=[config],
                               concurrency=concurrency, enqueue=lambda run_id, config_id: None)
    jt.server_reset(url)
    yappi.set_clock_type("cpu")
    yappi.start()
    t0, cpu0 = time.perf_counter(), time.process_time()
    report = run_drain(run_id=run.pk, config_id=config.pk, slice_s=600)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    yappi.stop()
    measured = jt.server_measure(url, expected=calls, what="profiled drain")
    print(f"drain {report.state}, {report.recorded} recorded, {measured['calls_per_s']:.0f} "
          f"calls/s, wall {wall:.1f} s, CPU {cpu * 1000 / calls:.2f} ms/call (profiled)")
    print(f"{'calls':>9}{'own s':>9}{'total s':>9}  function (by own CPU time)")
    for stat in list(yappi.get_func_stats().sort("tsub"))[:top]:
        print(f"{stat.ncall:>9}{stat.tsub:>9.3f}{stat.ttot:>9.3f}  {stat.full_name}")


# --- the table --------------------------------------------------------------------------------

def bare_stock(**kwargs: Any) -> dict[str, Any]:
    return {**jt.bare_loop(client_kind="stock", **kwargs),
            "note": "the reference (x bare)"}


def bare_lean(**kwargs: Any) -> dict[str, Any]:
    return {**jt.bare_loop(client_kind="reviewhub", **kwargs),
            "note": "ReviewHub's HTTP client alone"}


HEADER = (f"{'setup':<26}{'C':>5}{'calls/s':>9}{'x bare':>8}{'cpu ms':>8}{'beyond':>8}"
          f"{'ovh p50':>9}{'ovh p95':>9}{'in flight':>10}")


def print_row(label: str, c: int, r: dict[str, Any] | None, why: str, *,
              bare: float | None, latency_ms: float) -> None:
    if r is None:
        print(f"{label:<26}{c:>5}  REFUSED: {why}", flush=True)
        return
    rate = r["calls_per_s"]
    ratio = f"{rate / bare:.2f}" if bare else "-"
    beyond = c / rate * 1000 - latency_ms
    ovh = (f"{r['overhead_p50_ms']:>9.2f}{r['overhead_p95_ms']:>9.2f}"
           f"{r['mean_in_flight']:>10.1f}" if "overhead_p50_ms" in r else " " * 28)
    print(f"{label:<26}{c:>5}{rate:>9.0f}{ratio:>8}{r['cpu_ms_per_call']:>8.2f}{beyond:>8.1f}"
          f"{ovh}   {r.get('note', '')}", flush=True)


def one_round(setups: list[tuple[str, Any, dict[str, Any]]], *, c: int, calls: int,
              peer_calls: int, url: str, latency_ms: float) -> None:
    """Every setup once, in the given order, then ReviewHub's ratio to each of the others."""
    results: dict[str, dict[str, Any] | None] = {}
    whys: dict[str, str] = {}
    for label, fn, kwargs in setups:
        n = peer_calls if fn in (inspect_generate, promptfoo_generate) else calls
        results[label], whys[label] = jt.measure(fn, url=url, calls=n, concurrency=c,
                                                 **kwargs)
    bare = results.get("bare loop, stock httpx")
    bare_rate = bare["calls_per_s"] if bare else None
    for label, _, _ in sorted(setups, key=lambda s: s[0] != "bare loop, stock httpx"):
        print_row(label, c, results[label], whys[label], bare=bare_rate,
                  latency_ms=latency_ms)
    rh = results.get("ReviewHub candidate run")
    if rh is None:
        print("   ReviewHub refused: no ratios this round", flush=True)
        return
    ratios = [f"{label} {rh['calls_per_s'] / r['calls_per_s']:.2f}"
              for label, r in results.items() if r is not None and r is not rh]
    print(f"   ReviewHub / {' · '.join(ratios)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate every setup this many times at each C")
    parser.add_argument("--inspect", default="", help="python of a venv with inspect-ai")
    parser.add_argument("--promptfoo", default="",
                        help="folder with promptfoo installed (default: npm install it into a "
                             "temporary folder)")
    parser.add_argument("--no-promptfoo", action="store_true")
    parser.add_argument("--peer-calls", type=int, default=0,
                        help="items for the peers (default: --calls); they are slow here")
    parser.add_argument("--profile-drain", action="store_true",
                        help="instead: profile one drain at the first C in this process "
                             "(needs yappi)")
    parser.add_argument("--no-lean-loop", action="store_true",
                        help="skip the bare loop on ReviewHub's own HTTP client")
    args = parser.parse_args()
    peer_calls = min(args.peer_calls or args.calls, args.calls)
    jt.ensure_database()
    jt.django_setup()
    promptfoo, promptfoo_why = (None, "--no-promptfoo") if args.no_promptfoo else \
        jt.promptfoo_install(args.promptfoo)
    provider, url = jt.start_provider(args.latency_ms)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-generation-"))
    try:
        if args.profile_drain:
            profile_drain(calls=args.calls, concurrency=args.concurrency[0], url=url)
            return 0
        study, config, template = seed(args.calls, url)
        items = item_messages(study, template)
        items_path = log_dir / "items.json"
        items_path.write_text(json.dumps(items))
        setups: list[tuple[str, Any, dict[str, Any]]] = [
            ("bare loop, stock httpx", bare_stock, {"body": sample_body(config, items[0])})]
        if not args.no_lean_loop:
            setups.append(("bare loop, lean client", bare_lean,
                           {"body": sample_body(config, items[0])}))
        setups.append(("ReviewHub candidate run", reviewhub_run, {
            "study": study, "config": config, "template": template, "log_dir": log_dir}))
        if args.inspect:
            setups.append(("Inspect AI generate()", inspect_generate,
                           {"python": args.inspect, "items_path": items_path}))
        if promptfoo is not None:
            setups.append(("promptfoo openai:chat", promptfoo_generate,
                           {"exe": promptfoo, "items": items}))
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
        print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, commit {head}, load average {jt.load_average()}")
        print(f"simulated server latency {args.latency_ms:.0f} ms, {args.calls} calls per "
              f"setup ({peer_calls} for the peers); ReviewHub: one worker process (threads "
              "pool, 1 task), one candidate at C")
        if not args.inspect:
            print("Inspect AI skipped: no --inspect")
        if promptfoo is None:
            print(f"promptfoo skipped: {promptfoo_why}")
        print("calls/s = calls the simulated server answered / its span from the first request "
              "to the last answer; beyond = C / rate - latency (ms)\n")
        print(HEADER)
        for c in args.concurrency:
            print(f"-- C = {c} (latency bound {c / args.latency_ms * 1000:.0f} calls/s)")
            for rnd in range(args.rounds):
                order = setups if rnd % 2 == 0 else setups[::-1]
                print(f" round {rnd + 1}: {' -> '.join(s[0] for s in order)}, load average "
                      f"{jt.load_average()}", flush=True)
                one_round(order, c=c, calls=args.calls, peer_calls=peer_calls, url=url,
                          latency_ms=args.latency_ms)
        print(f"load after: {jt.load_average()}")
    finally:
        provider.terminate()
        provider.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
