"""Candidate-run throughput: ReviewHub's generation run (one Celery worker, one candidate held
closed-loop at C) against a bare asyncio + httpx loop at the same C, on the simulated provider
answering after a fixed latency, every figure counted at the server (the harness of
bench/judge_throughput.py: reset, then calls answered and the span from the first request to
the last answer on the server's clock).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench_generation \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/8 REDIS_URL=redis://127.0.0.1:6379/8 \\
    .venv/bin/python bench/generation_throughput.py [--calls 3000] [--concurrency 64 256]
        [--latency-ms 100] [--rounds 1]

A setup whose server count is not exactly one successful call per item, or whose run did not
end `done` with one output per item, prints REFUSED with the reason instead of a figure.
Besides calls/s and the ratio to the bare loop, it prints ReviewHub's own overhead per call
(the p50/p95 of `overhead_ms`: the worker's time on a call outside the HTTP exchange) and the
mean number of requests in flight the worker measured.

The database in DATABASE_URL is created if missing and migrated (a scratch database: the
benchmark study is re-created on each run). The Redis db in CELERY_BROKER_URL is FLUSHED.
Peers (promptfoo, Inspect AI) are not run here; bench/judge_throughput.py has their harness.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
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


def sample_body(study: Any, config: Any, template: Any) -> bytes:
    """The exact bytes ReviewHub sends for one item, so both sides send the same request."""
    from generation.config import render
    from judges.providers import ChatMessage, ProviderRequest, provider_prepare, serialize_body

    item = study.items.order_by("id").first()
    values = {"input": item.input, "metadata": item.metadata, "context": "", "reference": "",
              "external_id": item.external_id}
    t = template.template
    req = ProviderRequest(provider="openai", base_url=config.config["base_url"],
                          model=config.config["model"], api_key=None, temperature=0.0,
                          max_tokens=64, messages=(
                              ChatMessage("system", render(t["system"], values)),
                              ChatMessage("user", render(t["user"], values))))
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
            "overhead_p50_ms": cand["overhead_ms"]["p50"],
            "overhead_p95_ms": cand["overhead_ms"]["p95"],
            "mean_in_flight": cand["mean_in_flight"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    jt.ensure_database()
    jt.django_setup()
    provider, url = jt.start_provider(args.latency_ms)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-generation-"))
    try:
        study, config, template = seed(args.calls, url)
        body = sample_body(study, config, template)
        print(f"machine: {platform.node()} · {os.cpu_count()} cores · python "
              f"{platform.python_version()} · load {jt.load_average()}")
        print(f"simulated server latency {args.latency_ms:.0f} ms, {args.calls} calls per "
              "setup, one worker process (threads pool, 1 task), one candidate at C")
        print(f"{'setup':<28}{'C':>6}{'calls/s':>10}{'x bare':>8}{'cpu ms':>8}"
              f"{'ovh p50':>9}{'ovh p95':>9}{'in flight':>10}")
        for c in args.concurrency:
            for _ in range(args.rounds):
                bare, why_b = jt.measure(jt.bare_loop, url=url, calls=args.calls,
                                         concurrency=c, body=body, client_kind="stock")
                rh, why_r = jt.measure(reviewhub_run, calls=args.calls, concurrency=c,
                                       study=study, config=config, template=template,
                                       log_dir=log_dir, url=url)
                if bare is None:
                    print(f"{'bare asyncio + httpx':<28}{c:>6}  REFUSED: {why_b}")
                else:
                    print(f"{'bare asyncio + httpx':<28}{c:>6}{bare['calls_per_s']:>10.0f}"
                          f"{'1.00':>8}{bare['cpu_ms_per_call']:>8.2f}")
                if rh is None:
                    print(f"{'ReviewHub generation run':<28}{c:>6}  REFUSED: {why_r}")
                    continue
                ratio = f"{rh['calls_per_s'] / bare['calls_per_s']:.2f}" if bare else "-"
                print(f"{'ReviewHub generation run':<28}{c:>6}{rh['calls_per_s']:>10.0f}"
                      f"{ratio:>8}{rh['cpu_ms_per_call']:>8.2f}"
                      f"{rh['overhead_p50_ms']:>9.2f}{rh['overhead_p95_ms']:>9.2f}"
                      f"{rh['mean_in_flight']:>10.1f}")
        print(f"load after: {jt.load_average()}")
    finally:
        provider.terminate()
        provider.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
