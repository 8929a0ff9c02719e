"""End-to-end: real Celery worker subprocesses on Redis against the simulated provider.

The worker runs `celery -A reviewhub worker` with DATABASE_URL pointing at pytest-django's
test database (`test_<name>`); `transactional_db` makes every row the test writes visible to
it. Three scenarios: a run completes; the worker running a run is SIGKILLed mid-run and the
run recovers through the sweeper sent by celery beat, started as docker-compose.yml starts it,
with every job done exactly once; the Redis broker is restarted mid-run and the run continues
once it is back (the database is the source of truth).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from judges.models import JudgeJob, JudgeRun, Verdict
from judges.runs import judge_run_start
from tests.judges.provider_server import ProviderServer

from .run_fixtures import KEY_ENV, build_study_data, llm_config, make_version

ROOT = Path(__file__).resolve().parents[2]
TOKEN_RE = re.compile(r"\[o(\d+)\]")

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _db_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Workers:
    """Starts and stops worker subprocesses; keeps their logs for failure messages."""

    def __init__(self, tmp: Path, broker: str, redis_url: str) -> None:
        self.tmp = tmp
        self.broker = broker
        self.redis_url = redis_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, *, beat: bool = False, **env_extra: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": _db_url(), "CELERY_BROKER_URL": self.broker,
            "REDIS_URL": self.redis_url, KEY_ENV: "sk-test-e2e",
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "e2e-secret"),
            "REVIEWHUB_JUDGE_LEASE_S": "3", "REVIEWHUB_JUDGE_SWEEP_INTERVAL_S": "1",
            "REVIEWHUB_JUDGE_CONCURRENCY": "16", "REVIEWHUB_JUDGE_BACKOFF_BASE_S": "0.1",
            "REVIEWHUB_JUDGE_BACKOFF_CAP_S": "1", "PYTHONUNBUFFERED": "1",
        })
        env.update(env_extra)
        n = len(self.procs)
        log = self.tmp / f"worker{n}.log"
        cmd = [sys.executable, "-m", "celery", "-A", "reviewhub", "worker", "-Q", "judges",
               "--pool", "threads", "-c", "2", "--loglevel", "INFO", "-n",
               f"e2e{n}-{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle"]
        if beat:
            cmd += ["-B", "-s", str(self.tmp / f"beat{n}")]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def start_beat(self, **env_extra: str) -> subprocess.Popen[bytes]:
        """celery beat with the command of docker-compose.yml's `beat` service."""
        command = compose_command("beat")
        assert command[:4] == ["celery", "-A", "reviewhub", "beat"], command
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": _db_url(), "CELERY_BROKER_URL": self.broker,
            "REDIS_URL": self.redis_url, "REVIEWHUB_JUDGE_SWEEP_INTERVAL_S": "1",
            # The schedule file goes where settings put it: under the var folder.
            "REVIEWHUB_VAR_DIR": str(self.tmp / "beat-var"), "PYTHONUNBUFFERED": "1",
        })
        env.update(env_extra)
        (self.tmp / "beat-var").mkdir(exist_ok=True)
        log = self.tmp / "beat.log"
        proc = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        return self.logs[self.procs.index(proc)].read_text(errors="replace")

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc, signal.SIGTERM)
            # An embedded beat child lives in the same process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-4000:]
                         for p in self.logs if p.exists())


def compose_command(service: str) -> list[str]:
    import yaml

    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = spec["services"][service]["command"]
    return list(command) if isinstance(command, list) else str(command).split()


@pytest.fixture
def workers(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    import redis
    from django.conf import settings

    # The workers must consume the broker this process publishes to (settings), which in CI
    # is a different Redis db from REDIS_URL (rate limits). Messages left there by earlier
    # tests point at rolled-back rows; drop them (only these two db numbers are touched).
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        broker = redis_url
    for url in {broker, redis_url}:
        redis.Redis.from_url(url).flushdb()
    w = Workers(tmp_path, broker, redis_url)
    try:
        yield w
    finally:
        w.stop_all()


def wait_for(pred: Callable[[], bool], timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{workers.tail()}")


def start_run(study: Any, server: ProviderServer, *, n_items: int = 100,
              enqueue: Callable[[int, int], None] | None = None) -> tuple[JudgeRun, Any]:
    data = build_study_data(study, n_items=n_items, n_candidates=2)
    version = make_version(data.study, llm_config(server.openai_base_url))
    run = judge_run_start(study=data.study, judge_version=version, criteria=[data.binary],
                          enqueue=enqueue)
    return run, data


def calls_per_output(server: ProviderServer) -> Counter[int]:
    counts: Counter[int] = Counter()
    for req in list(server.requests):
        match = TOKEN_RE.search(req.prompt_text())
        if match:
            counts[int(match.group(1))] += 1
    return counts


def assert_exactly_once(run: JudgeRun, data: Any, server: ProviderServer) -> None:
    jobs = list(JudgeJob.objects.filter(run=run).select_related("output"))
    assert len(jobs) == 200
    assert Counter(j.status for j in jobs) == {"done": 200}
    assert all(j.lease_token == "" and j.finished_at for j in jobs)
    assert Verdict.objects.filter(judge_version=run.judge_version).count() == 200
    assert Verdict.objects.filter(run=run, is_scored=True).count() == 200
    calls = calls_per_output(server)
    for j in jobs:
        token = int(TOKEN_RE.search(j.output.text).group(1))  # type: ignore[union-attr]
        assert 1 <= calls[token] <= j.attempts, (j.pk, calls[token], j.attempts)
    for v in Verdict.objects.filter(run=run).select_related("output"):
        assert v.output is not None
        assert v.value == ("fail" if "[bad]" in v.output.text else "pass")


def test_a_worker_completes_a_run(study: Any, workers: Workers) -> None:
    with ProviderServer(latency_s=0.02) as server:
        workers.start()
        run, data = start_run(study, server)
        wait_for(lambda: JudgeRun.objects.get(pk=run.pk).status == "done", 120,
                 "the run to finish", workers)
        assert_exactly_once(run, data, server)
        assert sum(calls_per_output(server).values()) == 200  # no retries were needed


def test_sigkilled_worker_loses_no_job_and_the_beat_sweeper_recovers_the_run(
    study: Any, workers: Workers, settings: Any
) -> None:
    # One chain of batch tasks, so that one worker holds all of the run (a second chain could
    # land on the survivor, which would then finish the run without the sweeper).
    settings.REVIEWHUB_JUDGE_TASKS_PER_RUN = 1
    worker_command = compose_command("worker")
    assert "-B" not in worker_command and "--beat" not in worker_command  # one beat: its own
    with ProviderServer(latency_s=0.5) as server:
        beat = workers.start_beat()
        first, second = workers.start(), workers.start()
        # Both ready before the run exists: their start-up sweeps (sent when a worker is
        # ready) find nothing to do, so only a sweep that beat sends can wake the run later.
        for proc in (first, second):
            def ready(p: subprocess.Popen[bytes] = proc) -> bool:
                return " ready." in workers.log_of(p)

            wait_for(ready, 60, "the workers to be ready", workers)
        run, data = start_run(study, server)
        done = JudgeJob.objects.filter(run=run, status="done")
        wait_for(lambda: done.count() >= 40, 120, "40 jobs done", workers)
        holders = [p for p in (first, second) if "judges.run_work[" in workers.log_of(p)]
        assert len(holders) == 1, workers.tail()
        holder = holders[0]
        survivor = second if holder is first else first
        workers.kill(holder, signal.SIGKILL)
        running_at_kill = set(JudgeJob.objects.filter(run=run, status="running")
                              .values_list("id", flat=True))
        assert running_at_kill, "the kill should interrupt calls in flight"
        assert JudgeRun.objects.get(pk=run.pk).status == "running"
        # Nobody calls the sweeper: beat sends it every second; the killed worker's message
        # stays unacknowledged (Redis would redeliver it after an hour).
        wait_for(lambda: JudgeRun.objects.get(pk=run.pk).status == "done", 180,
                 "the run to finish after the kill", workers)
        assert_exactly_once(run, data, server)
        # The interrupted jobs were claimed again after their lease expired.
        reclaimed = JudgeJob.objects.filter(id__in=running_at_kill)
        assert all(j.attempts >= 2 for j in reclaimed)
        # ... by the survivor, woken by a sweep that beat sent: its own start-up sweep ran
        # before the run existed.
        assert "Sending due task judges-sweep (judges.sweep)" in workers.log_of(beat)
        kicked = re.compile(r"judges\.sweep\[[^\]]+\] succeeded .*'runs_kicked': \[[^\]]*\b"
                            + str(run.pk) + r"\b")
        assert kicked.search(workers.log_of(survivor)), workers.tail()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_server(port: int, tmp: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    for _ in range(100):
        try:
            if redis.Redis(port=port, socket_connect_timeout=0.2).ping():
                return proc
        except redis.RedisError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("private redis-server did not start")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary")
def test_run_continues_after_the_broker_restarts(
    study: Any, workers: Workers, tmp_path: Path
) -> None:
    from celery import Celery

    port = _free_port()
    private = f"redis://127.0.0.1:{port}/0"
    redis_proc = _redis_server(port, tmp_path)
    sender = Celery("e2e-sender", broker=private)

    def enqueue(run_id: int, n: int) -> None:
        for _ in range(n):
            sender.send_task("judges.run_work", args=(run_id,), queue="judges")

    try:
        with ProviderServer(latency_s=0.2) as server:
            workers.broker = workers.redis_url = private
            # Short slices: the run is a chain of tasks through the broker, so losing the
            # broker (and every queued message: this Redis keeps nothing on disk) matters.
            workers.start(beat=True, REVIEWHUB_JUDGE_TASK_SLICE_S="1")
            run, data = start_run(study, server, enqueue=enqueue)
            done = JudgeJob.objects.filter(run=run, status="done")
            wait_for(lambda: done.count() >= 30, 120, "30 jobs done", workers)
            redis_proc.kill()
            redis_proc.wait(timeout=10)
            time.sleep(3)
            during = done.count()
            redis_proc = _redis_server(port, tmp_path)
            wait_for(lambda: JudgeRun.objects.get(pk=run.pk).status == "done", 180,
                     "the run to finish after the broker restart", workers)
            assert during < 200, "the broker outage should have happened mid-run"
            assert_exactly_once(run, data, server)
    finally:
        sender.close()
        workers.stop_all()
        redis_proc.kill()
        redis_proc.wait(timeout=10)
