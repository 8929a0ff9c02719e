"""Benchmark: assignment queue next + submit round trips through the real HTTP stack.

    .venv/bin/python bench/assignment.py [--outputs 2000] [--levels 1,10,50,50@2000]
        [--label-studio]

What it does:
- creates a throwaway PostgreSQL database (`rh_bench_assign`, dropped first), migrates it, and
  fills a study with `--outputs` outputs, a 2-criterion rubric, 50 annotators and API tokens;
- starts gunicorn (gthread workers) on a loopback port against that database;
- for each concurrency level c: a fresh sampling plan (k = 3; k = 1 for c = 1) and c client
  threads, each an annotator with its own httpx client, looping POST queue/next → POST submit
  until the queue is empty for them or `--max-pairs` round trips were made;
- a level written `c@ms` gives each annotator a grading pause between next and submit
  (uniform in [0.5, 1.5] x ms): annotators who read before they submit, instead of a closed
  loop with no pause at all, which only measures how far the box saturates; pauses are not
  counted in the latencies;
- reports client-side latency of the pair (next + submit), the server-side time of each
  request from gunicorn's access log (%(D)s, request handling time in the worker) summed per
  pair, throughput, and the duplicate count from the database (an (output, annotator) pair
  graded twice, or an output with more than k annotations; must be 0);
- with `--label-studio`, runs the same loop against Label Studio (separate venv, loopback) on
  the same outputs and prints the ratio.

Client threads run on the same machine as the server, so the figures include that contention.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "rh_bench_assign"
LOG_RE = re.compile(r"^(?P<id>\S+) (?P<method>\S+) (?P<path>\S+) (?P<status>\d+) (?P<us>\d+)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def recreate_database(name: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


@dataclass
class LevelResult:
    system: str
    concurrency: int
    think_ms: int
    pairs: int
    seconds: float
    client_ms: list[float]
    server_ms: list[float]
    next_server_ms: list[float]
    submit_server_ms: list[float]
    duplicates: int
    errors: int

    def line(self) -> str:
        server = (
            f"server p50 {pct(self.server_ms, 50):6.1f} p95 {pct(self.server_ms, 95):6.1f} ms "
            f"(next p95 {pct(self.next_server_ms, 95):5.1f}, "
            f"submit p95 {pct(self.submit_server_ms, 95):5.1f})"
            if self.server_ms
            else "server n/a"
        )
        return (
            f"{self.system:12s} c={self.concurrency:<3d} think={self.think_ms:<5d} "
            f"pairs={self.pairs:<5d} "
            f"{self.pairs / self.seconds:7.1f} pairs/s  client p50 {pct(self.client_ms, 50):6.1f} "
            f"p95 {pct(self.client_ms, 95):6.1f} ms  {server}  duplicates={self.duplicates} "
            f"errors={self.errors}"
        )


_paused = threading.local()


def grading_pause(think_ms: int) -> None:
    """The annotator reads and grades: sleep, and keep the pause out of the latency."""
    if think_ms <= 0:
        return
    seconds = think_ms / 1000 * (0.5 + np.random.default_rng().random())
    time.sleep(seconds)
    _paused.seconds += seconds


@dataclass(frozen=True)
class Level:
    concurrency: int
    think_ms: int

    @property
    def name(self) -> str:
        return f"{self.concurrency}@{self.think_ms}" if self.think_ms else str(self.concurrency)


def run_clients(
    concurrency: int,
    max_pairs: int,
    step: Callable[[int, httpx.Client, str], bool],
    make_client: Callable[[int], httpx.Client],
) -> tuple[int, float, list[float], int]:
    """Run `concurrency` threads calling step(i, client, bench_id) until it returns False or
    max_pairs pairs are done overall. Returns (pairs, seconds, client pair latencies, errors)."""
    lock = threading.Lock()
    state = {"pairs": 0, "errors": 0}
    latencies: list[float] = []
    barrier = threading.Barrier(concurrency + 1)

    def worker(i: int) -> None:
        client = make_client(i)
        barrier.wait()
        try:
            while True:
                with lock:
                    if state["pairs"] >= max_pairs:
                        return
                    state["pairs"] += 1
                bench_id = f"{i}-{uuid.uuid4().hex[:12]}"
                _paused.seconds = 0.0
                started = time.perf_counter()
                try:
                    more = step(i, client, bench_id)
                except Exception as exc:  # counted and reported, the run goes on
                    with lock:
                        state["errors"] += 1
                        state["pairs"] -= 1
                    print(f"  client {i}: {exc!r}", file=sys.stderr)
                    if state["errors"] > 50:
                        return
                    continue
                elapsed = (time.perf_counter() - started - _paused.seconds) * 1000
                with lock:
                    if more:
                        latencies.append(elapsed)
                    else:
                        state["pairs"] -= 1
                if not more:
                    return
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return len(latencies), time.perf_counter() - started, latencies, state["errors"]


# --- ReviewHub ----------------------------------------------------------------------------------


def reviewhub_setup(n_outputs: int, n_annotators: int) -> tuple[str, list[str], Any, Any]:
    """Build the study directly through the ORM; returns (slug, tokens, study, lead)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from studies.authentication import token_generate
    from studies.models import (
        ApiToken,
        Candidate,
        Criterion,
        Item,
        Membership,
        Output,
        RubricVersion,
        StratumDimension,
        Study,
    )

    User = get_user_model()
    lead = User.objects.create_user("bench-lead", password=secrets.token_urlsafe(12))
    study = Study.objects.create(name="Bench", slug="bench", owner=lead, status="open")
    Membership.objects.create(study=study, user=lead, role="lead")
    rubric = RubricVersion.objects.create(study=study, version=1)
    Criterion.objects.create(rubric=rubric, key="correct", name="Correct", scale="binary")
    Criterion.objects.create(
        rubric=rubric,
        key="helpful",
        name="Helpful",
        scale="ordinal",
        pass_threshold=3,
        points=[{"value": v, "label": str(v)} for v in range(1, 6)],
        position=1,
    )
    StratumDimension.objects.create(
        study=study, key="lang", kind="categorical", source="metadata.lang"
    )
    candidate = Candidate.objects.create(study=study, name="bench-model")
    langs = ["en", "de", "fr", "es"]
    items = Item.objects.bulk_create(
        [
            Item(
                study=study,
                external_id=f"i{j}",
                input=f"Question {j}? " * 20,
                metadata={"lang": langs[j % 4]},
                strata={"lang": langs[j % 4]},
            )
            for j in range(n_outputs)
        ],
        batch_size=1000,
    )
    Output.objects.bulk_create(
        [
            Output(
                study=study, candidate=candidate, item=it, text=f"Answer {it.external_id}. " * 30
            )
            for it in items
        ],
        batch_size=1000,
    )
    tokens = []
    for i in range(n_annotators):
        user = User.objects.create_user(f"bench{i}", password=secrets.token_urlsafe(12))
        Membership.objects.create(study=study, user=user, role="annotator")
        secret, prefix, digest = token_generate()
        ApiToken.objects.create(
            user=user, name="bench", prefix=prefix, key_hash=digest, can_write=True
        )
        tokens.append(secret)
    return study.slug, tokens, study, lead


def parse_log(path: Path, start: int) -> dict[str, dict[str, float]]:
    """{bench id: {"next": ms, "submit": ms}} from the access log lines after byte `start`."""
    out: dict[str, dict[str, float]] = {}
    with path.open() as fh:
        fh.seek(start)
        for line in fh:
            m = LOG_RE.match(line.strip())
            if not m or m["id"] == "-":
                continue
            kind = "next" if m["path"].endswith("/queue/next") else "submit"
            out.setdefault(m["id"], {})[kind] = int(m["us"]) / 1000
    return out


def reviewhub_duplicates(study: Any) -> int:
    """Within the latest plan: an output assigned to or graded by one annotator twice, or an
    output with more submitted annotations than k. (Earlier plan versions carry their
    annotators over, so a row per plan per annotator is expected across versions.)"""
    from django.db.models import Count

    from annotations.models import Annotation, Assignment, QueueEntry, SamplingPlan

    plan = SamplingPlan.objects.filter(study=study).order_by("-version").first()
    assert plan is not None
    graded_twice = (
        Annotation.objects.filter(output__study=study)
        .values("output_id", "annotator_id", "criterion_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    assigned_twice = (
        Assignment.objects.filter(entry__plan=plan)
        .values("entry__output_id", "annotator_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    over_k = (
        QueueEntry.objects.filter(plan=plan)
        .annotate(n=Count("assignments", filter=models_q(status="submitted")))
        .filter(n__gt=plan.k)
        .count()
    )
    return graded_twice + assigned_twice + over_k


def models_q(**kw: Any) -> Any:
    from django.db.models import Q

    return Q(**{f"assignments__{k}": v for k, v in kw.items()})


def run_reviewhub(args: argparse.Namespace) -> list[LevelResult]:
    recreate_database(DB_NAME)
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(40),
        "REVIEWHUB_LOG_LEVEL": "WARNING",
        "DATABASE_CONN_MAX_AGE": "600",
    }
    os.environ.update(
        {
            k: env[k]
            for k in ("DATABASE_URL", "DJANGO_DEBUG", "DJANGO_SECRET_KEY", "REVIEWHUB_LOG_LEVEL")
        }
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    slug, tokens, study, lead = reviewhub_setup(
        args.outputs, max(lv.concurrency for lv in args.levels)
    )
    port = free_port()
    log = Path(f"/tmp/rh-bench-access-{port}.log")
    log.write_text("")
    server = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "reviewhub.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(args.workers),
            "-k",
            "gthread",
            "--threads",
            str(args.threads),
            "--access-logfile",
            str(log),
            "--access-logformat",
            "%({x-bench-id}i)s %(m)s %(U)s %(s)s %(D)s",
            "--log-level",
            "warning",
            # Longer than any grading pause: with gunicorn's 2 s default, a client's pooled
            # connection can be closed just as it sends the submit (a reset, not a latency).
            "--keep-alive",
            "75",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code < 500:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        results = []
        from annotations import services

        for level in args.levels:
            c, think_ms = level.concurrency, level.think_ms
            k = 1 if c == 1 else 3
            # Each level starts from a clean slate (a throwaway database): otherwise the next
            # plan version would count the previous level's annotations toward k.
            from annotations.models import Annotation, Assignment

            Annotation.objects.all().delete()
            Assignment.objects.all().delete()
            services.sampling_plan_create(
                study=study, spec={"mode": "all", "seed": c}, k=k, gold_rate=0.0, created_by=lead
            )
            labels = {"correct": {"value": "pass"}, "helpful": {"value": "4"}}

            def make_client(i: int) -> httpx.Client:
                return httpx.Client(
                    base_url=base, timeout=30, headers={"Authorization": f"Bearer {tokens[i]}"}
                )

            def step(
                i: int, client: httpx.Client, bench_id: str, labels: Any = labels, pause: int = 0
            ) -> bool:
                r = client.post(f"/api/studies/{slug}/queue/next", headers={"X-Bench-Id": bench_id})
                r.raise_for_status()
                ctx = r.json()["assignment"]
                if ctx is None:
                    return False
                grading_pause(pause)
                s = client.post(
                    f"/api/studies/{slug}/assignments/{ctx['assignment_id']}/submit",
                    json={
                        "submission_id": str(uuid.uuid4()),
                        "labels": labels,
                        "time_on_task_ms": 1000,
                    },
                    headers={"X-Bench-Id": bench_id},
                )
                s.raise_for_status()
                return True

            offset = log.stat().st_size
            pairs, seconds, client_ms, errors = run_clients(
                c,
                args.max_pairs.get(level.name, 10**9),
                lambda i, cl, bid, think_ms=think_ms: step(i, cl, bid, pause=think_ms),
                make_client,
            )
            time.sleep(0.5)  # let gunicorn flush the access log
            timings = parse_log(log, offset)
            both = [t for t in timings.values() if "next" in t and "submit" in t]
            results.append(
                LevelResult(
                    "ReviewHub",
                    c,
                    think_ms,
                    pairs,
                    seconds,
                    client_ms,
                    [t["next"] + t["submit"] for t in both],
                    [t["next"] for t in both],
                    [t["submit"] for t in both],
                    reviewhub_duplicates(study),
                    errors,
                )
            )
            print(results[-1].line(), flush=True)
        return results
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


# --- Label Studio -------------------------------------------------------------------------------

LS_VENV = Path(os.environ.get("BENCH_LS_VENV", "/tmp/ls-venv"))
LS_CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Choices name="correct" toName="text"><Choice value="pass"/><Choice value="fail"/></Choices>
  <Rating name="helpful" toName="text" maxRating="5"/>
</View>"""


def run_label_studio(args: argparse.Namespace) -> list[LevelResult]:
    """The same loop against Label Studio: GET /api/projects/<id>/next, then POST the
    annotation to /api/tasks/<id>/annotations/. Label Studio stores in PostgreSQL too."""
    exe = LS_VENV / "bin" / "label-studio"
    if not exe.exists():
        raise RuntimeError(f"Label Studio is not installed at {exe}")
    ls_db = "ls_bench_assign"
    recreate_database(ls_db)
    data_dir = Path(f"/tmp/ls-bench-data-{os.getpid()}")
    data_dir.mkdir(exist_ok=True)
    port = free_port()
    admin_token = secrets.token_hex(20)
    env = {
        **os.environ,
        "DJANGO_DB": "default",
        "POSTGRE_NAME": ls_db,
        "POSTGRE_USER": "postgres",
        "POSTGRE_PASSWORD": "",
        "POSTGRE_PORT": "5432",
        "POSTGRE_HOST": "127.0.0.1",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        "SENTRY_DSN": "",
        "FRONTEND_SENTRY_DSN": "",
        "COLLECT_ANALYTICS": "0",
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
    }
    for key in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "DJANGO_SECRET_KEY"):
        env.pop(key, None)
    server = subprocess.Popen(
        [
            str(exe),
            "start",
            "--no-browser",
            "--internal-host",
            "127.0.0.1",
            "-p",
            str(port),
            "--username",
            "admin@bench.test",
            "--password",
            secrets.token_urlsafe(12),
            "--user-token",
            admin_token,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir / "server.log", "w"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                raise RuntimeError(f"Label Studio exited; see {data_dir / 'server.log'}")
            time.sleep(0.5)
        else:
            raise RuntimeError("Label Studio did not answer /health in 300 s")
        admin = httpx.Client(
            base_url=base, timeout=60, headers={"Authorization": f"Token {admin_token}"}
        )
        results = []
        # Annotators: Label Studio's CLI creates only the admin, so the others are made in its
        # own Django shell, members of the admin's organisation, each with a legacy API token.
        most = max(level.concurrency for level in args.levels)
        tokens = [admin_token] + [secrets.token_hex(20) for _ in range(1, most)]
        script = (
            "from users.models import User\n"
            "from organizations.models import Organization\n"
            "from rest_framework.authtoken.models import Token\n"
            "org = Organization.objects.first()\n"
            f"for i, key in enumerate({tokens[1:]!r}, start=1):\n"
            "    u = User.objects.create_user(email=f'a{i}@bench.test', password=key)\n"
            "    org.add_user(u)\n"
            "    u.active_organization = org\n"
            "    u.save()\n"
            # Label Studio makes a token for every new user (one per user): replace it.
            "    Token.objects.filter(user=u).delete()\n"
            "    Token.objects.create(user=u, key=key)\n"
            "\n"  # the interactive console ends a block at a blank line
            f"ok = Token.objects.filter(key__in={tokens[1:]!r}).count()\n"
            f"print('USERS-OK' if ok == {len(tokens) - 1} else 'USERS-MISSING', ok)\n"
        )
        made = subprocess.run(
            [str(exe), "shell"], input=script, env=env, capture_output=True, text=True
        )
        if "USERS-OK" not in made.stdout:
            raise RuntimeError(f"could not create Label Studio users: {made.stderr[-800:]}")
        for level in args.levels:
            c, think_ms = level.concurrency, level.think_ms
            k = 1 if c == 1 else 3
            project = (
                admin.post(
                    "/api/projects",
                    json={
                        "title": f"bench c={c}",
                        "label_config": LS_CONFIG,
                        "maximum_annotations": k,
                        "show_overlap_first": False,
                        "sampling": "Uniform sampling",
                    },
                )
                .raise_for_status()
                .json()
            )
            tasks = [{"text": f"Question {j}? Answer {j}."} for j in range(args.outputs)]
            admin.post(f"/api/projects/{project['id']}/import", json=tasks).raise_for_status()
            pid = project["id"]

            def make_client(i: int) -> httpx.Client:
                return httpx.Client(
                    base_url=base, timeout=60, headers={"Authorization": f"Token {tokens[i]}"}
                )

            def step(
                i: int, client: httpx.Client, bench_id: str, pid: int = pid, pause: int = 0
            ) -> bool:
                r = client.get(f"/api/projects/{pid}/next")
                if r.status_code == 404:
                    return False
                r.raise_for_status()
                task = r.json()
                grading_pause(pause)
                client.post(
                    f"/api/tasks/{task['id']}/annotations/",
                    json={
                        "result": [
                            {
                                "from_name": "correct",
                                "to_name": "text",
                                "type": "choices",
                                "value": {"choices": ["pass"]},
                            },
                            {
                                "from_name": "helpful",
                                "to_name": "text",
                                "type": "rating",
                                "value": {"rating": 4},
                            },
                        ],
                        "lead_time": 1.0,
                    },
                ).raise_for_status()
                return True

            pairs, seconds, client_ms, errors = run_clients(
                c,
                args.max_pairs.get(level.name, 10**9),
                lambda i, cl, bid, think_ms=think_ms: step(i, cl, bid, pause=think_ms),
                make_client,
            )
            dup = ls_duplicates(admin, pid, k)
            results.append(
                LevelResult(
                    "LabelStudio", c, think_ms, pairs, seconds, client_ms, [], [], [], dup, errors
                )
            )
            print(results[-1].line(), flush=True)
        return results
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def ls_duplicates(admin: httpx.Client, pid: int, k: int) -> int:
    """Tasks annotated twice by one user or more than k times, via Label Studio's export."""
    tasks = admin.get(f"/api/projects/{pid}/export", params={"exportType": "JSON"}).json()
    dup = 0
    for task in tasks:
        users = [a.get("completed_by") for a in task.get("annotations", [])]
        dup += int(len(users) != len(set(users))) + int(len(users) > k)
    return dup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outputs", type=int, default=2000)
    parser.add_argument(
        "--levels",
        default="1,10,50,10@2000,50@2000",
        help="concurrency levels; c@ms adds a mean grading pause of ms between next and submit",
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument(
        "--max-pairs",
        default="1:400,10:3000,50:6000,10@2000:600,50@2000:2000",
        help="per level cap on round trips, e.g. 1:400,10:3000",
    )
    parser.add_argument("--label-studio", action="store_true")
    args = parser.parse_args()
    args.levels = [
        Level(int(c), int(ms or 0))
        for c, _, ms in (x.partition("@") for x in args.levels.split(","))
    ]
    args.max_pairs = {a: int(b) for a, b in (p.split(":") for p in args.max_pairs.split(","))}
    print(
        f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; outputs={args.outputs};"
        f" gunicorn {args.workers} workers x {args.threads} threads; PostgreSQL at {PG}"
    )
    rh = run_reviewhub(args)
    if args.label_studio:
        try:
            ls = run_label_studio(args)
        except Exception as exc:
            print(f"Label Studio: not measured: {exc}")
        else:
            for a, b in zip(rh, ls, strict=True):
                print(
                    f"c={a.concurrency}: Label Studio / ReviewHub client p50 "
                    f"{pct(b.client_ms, 50) / pct(a.client_ms, 50):.1f}x, p95 "
                    f"{pct(b.client_ms, 95) / pct(a.client_ms, 95):.1f}x, throughput "
                    f"{(a.pairs / a.seconds) / (b.pairs / b.seconds):.1f}x in ReviewHub's favour"
                )
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
