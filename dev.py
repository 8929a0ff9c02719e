#!/usr/bin/env python3
"""ReviewHub's two entry points for a fresh clone: `python3 dev.py demo` and `python3 dev.py test`.

Needs only Python 3.11+. Creates `.venv`, installs the project (with the dev extra for tests),
then runs the demo server or the test suite. The demo uses the embedded default (SQLite and a
SQLite Celery broker under ./var) unless DATABASE_URL / CELERY_BROKER_URL are set. A worker that
dies is restarted with backoff; the web server stays up.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
CONSTRAINTS = ROOT / "constraints.txt"


def say(msg: str) -> None:
    print(f"[dev.py] {msg}", flush=True)


def ensure_venv(extra: str) -> None:
    """Create the venv and (re)install the project when pyproject.toml changed."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs on the system python, any version
        sys.exit("ReviewHub needs Python 3.11 or newer")
    if not PY.exists():
        say(f"creating virtualenv in {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    def digest_for(name: str) -> str:
        inputs = (ROOT / "pyproject.toml").read_bytes() + CONSTRAINTS.read_bytes()
        return hashlib.sha256(inputs + name.encode()).hexdigest()

    def current(name: str) -> bool:
        stamp = VENV / f".installed-{name or 'base'}"
        return stamp.exists() and stamp.read_text() == digest_for(name)

    # The dev install includes the base one, so a venv set up for tests also serves the demo.
    if current(extra) or (extra == "" and current("dev")):
        return
    stamp = VENV / f".installed-{extra or 'base'}"
    digest = digest_for(extra)
    target = f".[{extra}]" if extra else "."
    say(f"installing {target} (pip)")
    # Installed under constraints.txt: the versions the suite last passed with. Without it a new
    # release of a dependency lands in CI unannounced (Playwright 1.65 once broke a browser test).
    subprocess.run(
        [str(PY), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), "-e", target],
        check=True, cwd=ROOT,
    )
    stamp.write_text(digest)


def ensure_env_file() -> None:
    """A local .env for the demo: debug on, a random secret. Never committed."""
    path = ROOT / ".env"
    if "DJANGO_SECRET_KEY" not in os.environ and not path.exists():
        path.write_text(
            "# written by dev.py for the local demo; delete to regenerate\n"
            "DJANGO_DEBUG=1\n"
            f"DJANGO_SECRET_KEY={secrets.token_urlsafe(40)}\n"
        )


def manage(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([str(PY), "manage.py", *args], check=True, cwd=ROOT, env=env)


def demo(argv: list[str]) -> int:
    ensure_venv("")
    ensure_env_file()
    env = dict(os.environ)
    env.setdefault("DJANGO_DEBUG", "1")
    # A local model server or the simulated provider (tests/judges/provider_server.py) runs on
    # loopback: the demo lists it, as an operator would (docs/judges.md).
    env.setdefault("REVIEWHUB_JUDGE_ALLOWED_BASE_URLS",
                   "https://api.openai.com,https://api.anthropic.com,http://127.0.0.1:*")
    host = env.get("REVIEWHUB_DEMO_ADDR", "127.0.0.1:8000")
    manage("migrate", "--noinput", env=env)
    manage("demo_seed", *argv, env=env)
    broker = "CELERY_BROKER_URL" if env.get("CELERY_BROKER_URL") else (
        f"embedded default: kombu's SQLAlchemy transport on "
        f"{env.get('REVIEWHUB_VAR_DIR') or 'var'}/broker.sqlite3 (not the "
        "filesystem transport, which races: kombu #1551; docs/deploy.md)")
    say(f"background work: one Celery worker with embedded beat; broker = {broker}")
    server = subprocess.Popen(
        [str(PY), "manage.py", "runserver", "--noreload", host], cwd=ROOT, env=env
    )
    worker = start_worker(env)
    say(f"serving http://{host}/  (Ctrl-C stops the server and the worker with its beat)")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM (a supervisor, `kill`) must stop the worker too: it runs in its own process group
    # and would outlive us if SIGTERM ended this process the default way, skipping `finally`.
    signal.signal(signal.SIGTERM, stop)
    restarts = 0
    started_at = time.monotonic()
    try:
        # The web server is the demo: when it stops, everything stops. A worker that dies is
        # restarted (its queued messages wait in the broker) and the pages say meanwhile that
        # background work is not running (the heartbeat banner, docs/deploy.md).
        while server.poll() is None:
            if worker.poll() is not None:
                code = worker.returncode
                stop_group(worker)  # an embedded beat child left behind would beat twice
                ran_s = time.monotonic() - started_at
                # Backoff doubles per quick death (1, 2, 4 ... 60 s); a worker that ran for
                # ten minutes starts the count again.
                restarts = 0 if ran_s > WORKER_STABLE_S else restarts
                delay = min(WORKER_BACKOFF_CAP_S, 2.0 ** restarts)
                restarts += 1
                say(f"worker exited with code {code} after {ran_s:.0f} s; "
                    f"restarting it in {delay:.0f} s (restart {restarts} in a row)")
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and server.poll() is None:
                    time.sleep(0.2)
                if server.poll() is not None:
                    break
                worker = start_worker(env)
                started_at = time.monotonic()
                say(f"worker restarted (pid {worker.pid})")
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (server, worker):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (server, worker):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop_group(worker)
    return server.returncode or 0


#: A worker that ran this long before dying restarts after the shortest backoff again.
WORKER_STABLE_S = 600.0
WORKER_BACKOFF_CAP_S = 60.0


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The demo's one Celery worker with its embedded beat (the only beat of the demo)."""
    # `-B` embeds celery beat, which sends the periodic tasks: the judge-run sweeper above all
    # (expired leases, idle runs; docs/judge_runs.md) and the heartbeat the pages read. Its
    # schedule file is under the var folder (settings).
    return subprocess.Popen(
        [str(PY), "-m", "celery", "-A", "reviewhub", "worker", "-B", "--loglevel", "INFO",
         "--pool", "threads", "--concurrency", "8", "-Q", "celery,judges"],
        # Its own process group (Ctrl-C reaches it as the SIGTERM below, once), so that the
        # embedded beat child can be stopped with it if the worker has to be killed.
        cwd=ROOT, env=env, start_new_session=True,
    )


def stop_group(worker: subprocess.Popen[bytes]) -> None:
    """Kill whatever is left of the worker's process group (the embedded beat child)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.pid, signal.SIGKILL)


def test(argv: list[str]) -> int:
    ensure_venv("dev")
    return subprocess.run([str(PY), "-m", "pytest", *argv], cwd=ROOT).returncode


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"demo", "test", "setup"}:
        print(__doc__)
        print("usage: python3 dev.py demo | test [pytest args] | setup")
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "setup":
        ensure_venv("dev")
        # The documented `manage.py` commands need a secret key; the same local .env as the
        # demo's makes them work right after setup (an exported DJANGO_SECRET_KEY wins).
        ensure_env_file()
        return 0
    return demo(rest) if command == "demo" else test(rest)


if __name__ == "__main__":
    sys.exit(main())
