"""The README's demo command boots on the embedded default and /healthz answers; a dead worker
is restarted while the web server stays up; the embedded broker survives several processes
hammering it where kombu's filesystem transport does not; a short soak under a scripted user."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import broker_race  # noqa: E402 - bench/ is not a package
import demo_soak  # noqa: E402


def _demo_workers(port: int) -> list[int]:
    """Pids of live Celery workers started by the demo on `port` (read from /proc)."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
            state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if b"celery" in cmdline and f"REVIEWHUB_DEMO_ADDR=127.0.0.1:{port}".encode() in environ:
            pids.append(int(proc_dir.name))
    return pids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_demo_command_boots_and_healthz_answers(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}}
    env.update({
        "REVIEWHUB_VAR_DIR": str(tmp_path / "var"),
        "REVIEWHUB_DEMO_ADDR": f"127.0.0.1:{port}",
        "DJANGO_DEBUG": "1",
        "DJANGO_SECRET_KEY": "demo-boot-test-key",
    })
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen([sys.executable, "dev.py", "demo"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        body = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    body = json.loads(r.read())
                    break
            except OSError:
                time.sleep(1)
        output = (tmp_path / "demo.log").read_text()
        assert body is not None, f"demo did not answer /healthz; log:\n{output[-4000:]}"
        assert body["ok"] is True
        assert body["database"]["vendor"] == "sqlite"
        assert body["broker"]["transport"] == "sqla+sqlite"
        assert "demo-lead-pass" in output  # the logins are printed
        assert "embedded default" in output  # the backend choice is logged
        assert "kombu's SQLAlchemy transport" in output  # and which broker, by name
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as r:
            assert r.status == 200
        workers = _demo_workers(port)
        assert workers, "the demo's Celery worker is not running"

        # A worker that dies is restarted; the web server stays up meanwhile.
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and "[dev.py] worker restarted" not in (
                tmp_path / "demo.log").read_text():
            assert proc.poll() is None, "dev.py stopped when its worker died"
            time.sleep(0.5)
        output = (tmp_path / "demo.log").read_text()
        assert "[dev.py] worker exited with code -9" in output, output[-3000:]
        assert "[dev.py] worker restarted" in output, output[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        assert set(_demo_workers(port)) - set(workers), "no new worker after the restart"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    # SIGTERM to the demo stops its worker (own process group) and the embedded beat with it.
    deadline = time.monotonic() + 15
    while _demo_workers(port) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _demo_workers(port)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the demo's Celery worker outlived SIGTERM: pids {left}"


def test_kombu_filesystem_transport_hands_a_consumer_a_half_written_message() -> None:
    """What stopped the demo's worker until issue 26, reproduced without depending on the
    scheduler: a consumer that fetches while a producer is between its create and its write
    reads an empty file (`JSONDecodeError`), which Celery treats as unrecoverable.
    (`bench/broker_race.py --transport filesystem` shows the race happening on its own.)"""
    outcome = broker_race.consume_during_a_write()
    assert outcome["consumer_ran"], outcome
    assert outcome["error"] and "JSONDecodeError" in outcome["error"], outcome


@pytest.mark.slow
def test_embedded_broker_survives_the_same_hammer() -> None:
    outcome = broker_race.hammer("embedded", seconds=8)
    assert outcome["errors"] == 0, outcome["first_error"]
    assert outcome["published"] > 0
    assert outcome["consumed"] == outcome["published"], outcome


@pytest.mark.slow
def test_demo_survives_a_short_soak(tmp_path: Path) -> None:
    """`dev.py demo` under the scripted user for a minute (the 30-minute run is
    bench/demo_soak.py; docs/benchmarks.md)."""
    figures = demo_soak.soak(1.0, pause_s=10.0, folder=tmp_path / "soak")
    log = (tmp_path / "soak" / "demo.log").read_text(errors="replace")
    assert demo_soak.passed(figures), f"{figures}\n{log[-4000:]}"
    assert figures.judge_runs_done >= 2 and figures.reports_done >= 2
