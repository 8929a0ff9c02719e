"""Soak test of the embedded default: `python3 dev.py demo` under a scripted user.

Starts the demo exactly as a user does (`python3 dev.py demo`: migrate, seed, runserver, one
Celery worker with embedded beat on the embedded broker), with DATABASE_URL, CELERY_BROKER_URL
and REDIS_URL removed from its environment and its files in a fresh folder, plus the simulated
LLM provider (tests/judges/provider_server.py; SIMULATED, no real model). Then, until
--minutes have passed, a scripted lead and annotator work over HTTP in cycles:

- the lead signs in, makes a new judge version (pointing at the simulated provider) and starts
  a judge run over one candidate's outputs, asks for an agreement report (and every other
  cycle a calibration report), opens the run and report pages;
- the annotator signs in, takes the next assignments and grades them.

Every judge run and report is followed until it finishes. At the end it prints one JSON line
and exits non-zero unless: the demo process is alive, its log has no worker exit/restart, no
"Unrecoverable error" and no CRITICAL line, /healthz never failed, every judge run finished
"done" with a verdict per job, every report finished "done", the heartbeat banner never
showed, and the annotator's submissions were accepted.

    .venv/bin/python bench/demo_soak.py --minutes 30        # the soak (docs/benchmarks.md)
    .venv/bin/python bench/demo_soak.py --minutes 1.5       # the short one

tests/test_demo_boot.py::test_demo_survives_a_short_soak runs the short one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
SLUG = "demo-support-answers"
LEAD = ("lead", "demo-lead-pass")
ANNOTATOR = ("annotator", "demo-annotator-pass")
BANNER = "Background work is not running"
# Lines of the demo's log that mean background work broke.
BAD_LINES = re.compile(r"Unrecoverable error|CRITICAL|\[dev\.py\] worker exited")


@dataclass
class Figures:
    minutes: float = 0.0
    cycles: int = 0
    judge_runs_started: int = 0
    judge_runs_done: int = 0
    judge_jobs_done: int = 0
    judge_jobs_not_done: int = 0
    reports_started: int = 0
    reports_done: int = 0
    annotations_submitted: int = 0
    pages_loaded: int = 0
    http_errors: int = 0
    healthz_failures: int = 0
    banner_seen: int = 0
    worker_restarts: int = 0
    bad_log_lines: list[str] = field(default_factory=list)
    demo_alive: bool = True
    max_run_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_provider(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/judges/provider_server.py"), "--port", "0",
         "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"simulated provider did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


def start_demo(folder: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """`python3 dev.py demo` on the embedded default, its files and log under `folder`."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}}
    env.update({
        "REVIEWHUB_VAR_DIR": str(folder / "var"),
        "REVIEWHUB_DEMO_ADDR": f"127.0.0.1:{port}",
        "DJANGO_DEBUG": "1",
        "DJANGO_SECRET_KEY": env.get("DJANGO_SECRET_KEY") or "demo-soak-key",
        "PYTHONUNBUFFERED": "1",
    })
    log_path = folder / "demo.log"
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "dev.py", "demo"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return proc, log_path


def stop_demo(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the demo stopped before it answered /healthz")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=3).status_code == 200:
                return
        time.sleep(1)
    raise RuntimeError("the demo did not answer /healthz in time")


def sign_in(base: str, username: str, password: str) -> httpx.Client:
    """A browser-like session: the login form, then the CSRF header on every write."""
    client = httpx.Client(base_url=base, timeout=60)
    client.get("/accounts/login/").raise_for_status()
    response = client.post("/accounts/login/", data={
        "username": username, "password": password,
        "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    if response.status_code != 302:
        raise RuntimeError(f"sign-in of {username} answered {response.status_code}")
    client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
    return client


class ScriptedUser:
    def __init__(self, base: str, provider_url: str, figures: Figures) -> None:
        self.base = base
        self.provider_url = provider_url
        self.f = figures
        self.lead = sign_in(base, *LEAD)
        self.annotator = sign_in(base, *ANNOTATOR)
        self.judge_id: int | None = None
        self.candidates = [c["name"] for c in self.ok(
            self.lead.get(f"/api/studies/{SLUG}/candidates"))["results"]]
        self.open_runs: dict[int, float] = {}
        self.open_reports: dict[tuple[str, int], float] = {}

    def ok(self, response: httpx.Response, *codes: int) -> Any:
        if response.status_code not in (codes or (200, 201, 202)):
            self.f.http_errors += 1
            self.f.problems.append(
                f"{response.request.method} {response.request.url.path}: "
                f"{response.status_code} {response.text[:200]}")
            return None
        return response.json() if response.content else None

    def page(self, client: httpx.Client, path: str) -> None:
        response = client.get(path)
        self.f.pages_loaded += 1
        if response.status_code != 200:
            self.f.http_errors += 1
            self.f.problems.append(f"GET {path}: {response.status_code}")
        elif BANNER in response.text:
            self.f.banner_seen += 1
            self.f.problems.append(f"GET {path}: the background-work banner showed")

    def new_judge_version(self, cycle: int) -> int | None:
        config = {
            "provider": "openai", "base_url": f"{self.provider_url}/v1",
            "model": "simulated-judge", "api_key_env": None,
            # A new seed makes a new version, so that each run has jobs of its own to do.
            "parameters": {"temperature": 0, "max_tokens": 64, "seed": cycle},
            "response_format": "json_schema",
            "prices": {"input_per_mtok": 0, "output_per_mtok": 0},
        }
        if self.judge_id is None:
            body = self.ok(self.lead.post(f"/api/studies/{SLUG}/judges", json={
                "name": f"Soak judge {uuid.uuid4().hex[:6]} (simulated provider)", "kind": "llm",
                "description": "SIMULATED provider (tests/judges/provider_server.py)",
                "config": config}))
            if body is None:
                return None
            self.judge_id = int(body["judge"]["id"])
            return int(body["version"]["id"])
        body = self.ok(self.lead.post(
            f"/api/studies/{SLUG}/judges/{self.judge_id}/versions", json={"config": config}))
        return None if body is None else int(body["version"]["id"])

    def cycle(self, n: int) -> None:
        version = self.new_judge_version(n)
        if version is not None:
            candidate = self.candidates[n % len(self.candidates)]
            run = self.ok(self.lead.post(f"/api/studies/{SLUG}/judge-runs", json={
                "judge_version": version, "criteria": ["correct"],
                "selection": {"kind": "candidate", "candidate": candidate}}))
            if run is not None:
                self.f.judge_runs_started += 1
                self.open_runs[int(run["id"])] = time.monotonic()
        kinds = ["agreement"] + (["calibration"] if n % 2 else [])
        for kind in kinds:
            report = self.ok(self.lead.post(f"/api/studies/{SLUG}/reports/{kind}/",
                                            json={"params": {"seed": n}}))
            if report is not None:
                self.f.reports_started += 1
                self.open_reports[(kind, int(report["id"]))] = time.monotonic()
        self.grade(3)
        self.page(self.lead, f"/studies/{SLUG}/judge-runs/")
        for run_id in list(self.open_runs)[-1:]:
            self.page(self.lead, f"/studies/{SLUG}/judge-runs/{run_id}/")
        self.page(self.lead, f"/studies/{SLUG}/")
        self.follow()

    def grade(self, count: int) -> None:
        for _ in range(count):
            body = self.ok(self.annotator.post(f"/api/studies/{SLUG}/queue/next"))
            assignment = (body or {}).get("assignment")
            if not assignment:
                return
            labels: dict[str, Any] = {}
            for criterion in assignment["criteria"]:
                if criterion["scale"] == "binary":
                    labels[criterion["key"]] = {"value": "pass"}
                elif criterion["points"]:
                    top = max(int(p["value"]) for p in criterion["points"])
                    labels[criterion["key"]] = {"value": str(top)}
            submitted = self.ok(self.annotator.post(
                f"/api/studies/{SLUG}/assignments/{assignment['assignment_id']}/submit",
                json={"submission_id": str(uuid.uuid4()), "labels": labels,
                      "time_on_task_ms": 4000}))
            if submitted is not None:
                self.f.annotations_submitted += 1

    def follow(self) -> None:
        """Poll the open runs and reports; record the ones that finished."""
        for run_id, started in list(self.open_runs.items()):
            run = self.ok(self.lead.get(f"/api/studies/{SLUG}/judge-runs/{run_id}"))
            if run is None or run["status"] in {"pending", "running"}:
                continue
            del self.open_runs[run_id]
            self.f.max_run_seconds = max(self.f.max_run_seconds, time.monotonic() - started)
            progress = (run.get("progress") or {}).get("jobs") or {}
            done = int(progress.get("done", 0))
            self.f.judge_jobs_done += done
            not_done = sum(int(progress.get(k, 0)) for k in
                           ("failed", "unparseable", "cancelled", "queued", "running"))
            self.f.judge_jobs_not_done += not_done
            if run["status"] == "done" and done > 0 and not not_done:
                self.f.judge_runs_done += 1
            else:
                self.f.problems.append(f"judge run {run_id}: {run['status']} {progress}")
        for (kind, report_id), _started in list(self.open_reports.items()):
            report = self.ok(self.lead.get(f"/api/studies/{SLUG}/reports/{kind}/{report_id}/"))
            if report is None or report["status"] in {"pending", "running"}:
                continue
            del self.open_reports[(kind, report_id)]
            if report["status"] == "done":
                self.f.reports_done += 1
            else:
                self.f.problems.append(f"{kind} report {report_id}: {report['status']}")


def soak(minutes: float, *, latency_ms: float = 50.0, pause_s: float = 20.0,
         folder: Path | None = None) -> Figures:
    """Run the demo under the scripted user for `minutes`; the figures."""
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="demo-soak-") as tmp:
        work = folder or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        provider, provider_url = start_provider(latency_ms)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        demo, log_path = start_demo(work, port)
        started = time.monotonic()
        try:
            wait_healthy(base, demo, timeout=300)
            user = ScriptedUser(base, provider_url, figures)
            deadline = time.monotonic() + minutes * 60
            while time.monotonic() < deadline and demo.poll() is None:
                user.cycle(figures.cycles)
                figures.cycles += 1
                pause_until = min(deadline, time.monotonic() + pause_s)
                while time.monotonic() < pause_until:
                    try:
                        healthy = httpx.get(f"{base}/healthz", timeout=10).status_code == 200
                    except httpx.HTTPError:
                        healthy = False
                    figures.healthz_failures += not healthy
                    time.sleep(min(5.0, max(0.0, pause_until - time.monotonic())))
                user.follow()
            # Let the last runs and reports finish (the worker has at most a few minutes'
            # backlog); whatever is still open then counts as a problem.
            drain_until = time.monotonic() + 600
            while (user.open_runs or user.open_reports) and time.monotonic() < drain_until:
                time.sleep(5)
                user.follow()
            for run_id in user.open_runs:
                figures.problems.append(f"judge run {run_id} did not finish")
            for kind, report_id in user.open_reports:
                figures.problems.append(f"{kind} report {report_id} did not finish")
            # The banner is also checked once more at the end, when nothing is pending.
            user.page(user.lead, f"/studies/{SLUG}/judge-runs/")
        finally:
            figures.minutes = round((time.monotonic() - started) / 60, 1)
            figures.demo_alive = demo.poll() is None
            stop_demo(demo)
            provider.terminate()
            provider.wait(timeout=10)
            log = log_path.read_text(errors="replace")
            figures.bad_log_lines = [line[:300] for line in log.splitlines()
                                     if BAD_LINES.search(line)]
            figures.worker_restarts = log.count("[dev.py] worker restarted")
            if folder is None and (figures.bad_log_lines or not figures.demo_alive):
                print(log[-6000:], file=sys.stderr)
    return figures


def passed(f: Figures) -> bool:
    return (f.demo_alive and not f.bad_log_lines and f.worker_restarts == 0
            and f.healthz_failures == 0 and f.http_errors == 0 and f.banner_seen == 0
            and f.judge_runs_started > 0 and f.judge_runs_done == f.judge_runs_started
            and f.judge_jobs_not_done == 0
            and f.reports_started > 0 and f.reports_done == f.reports_started
            and f.annotations_submitted > 0 and not f.problems)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--latency-ms", type=float, default=50.0,
                        help="the simulated provider's answer time")
    parser.add_argument("--pause", type=float, default=20.0,
                        help="seconds between the scripted user's cycles")
    parser.add_argument("--folder", type=Path, default=None,
                        help="keep the demo's files and log here (default: a temporary folder)")
    args = parser.parse_args()
    figures = soak(args.minutes, latency_ms=args.latency_ms, pause_s=args.pause,
                   folder=args.folder)
    result = asdict(figures)
    result["passed"] = passed(figures)
    result["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
