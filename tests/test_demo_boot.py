"""The README's demo command boots on the embedded default and /healthz answers."""

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
        assert body["broker"]["transport"] == "filesystem"
        assert "demo-lead-pass" in output  # the logins are printed
        assert "embedded default" in output  # the backend choice is logged
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as r:
            assert r.status == 200
        assert _demo_workers(port), "the demo's Celery worker is not running"
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
