"""The README's demo command boots on the embedded default and /healthz answers."""

from __future__ import annotations

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
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
