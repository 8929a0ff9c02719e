"""Benchmark: slow clients against gunicorn served directly and through the shipped nginx.

The probe of issue 30 §2: gunicorn with W sync workers (the compose file's model), and nginx
running deploy/nginx/reviewhub.conf (only its upstream address and listen port replaced).
For each kind of slow client (headers never finished; a form body announced and never sent),
open S connections, then time GET /healthz (timeout T): directly with S = W + 1, and through
nginx with S = 10 W. Prints, per trial, whether /healthz answered and in how long.

    DATABASE_URL=... REDIS_URL=... CELERY_BROKER_URL=... DJANGO_SECRET_KEY=... \
        .venv/bin/python bench/slow_clients.py [--workers 2] [--trials 3] [--timeout 3]

Needs the nginx binary (apt-get install nginx-light).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "deploy" / "nginx" / "reviewhub.conf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on {port}")


def healthz(port: int, timeout: float) -> tuple[bool, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/healthz", headers={"Host": "localhost"})
        ok = conn.getresponse().status in (200, 503)
    except OSError:
        ok = False
    finally:
        conn.close()
    return ok, time.monotonic() - started


def slow_clients(port: int, n: int, kind: str) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if kind == "headers":
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        else:
            s.sendall(b"POST /accounts/login/ HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Type: application/x-www-form-urlencoded\r\n"
                      b"Content-Length: 1000\r\n\r\nusername=")
        out.append(s)
    time.sleep(0.5)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise SystemExit("nginx is not installed (apt-get install nginx-light)")
    work = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    gport, nport = free_port(), free_port()
    env = {**os.environ, "DJANGO_DEBUG": "0", "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "reviewhub.wsgi:application", "--bind",
         f"127.0.0.1:{gport}", "--workers", str(args.workers), "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    site = CONF.read_text().replace("server web:8000;", f"server 127.0.0.1:{gport};")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{nport};")
    (work / "site.conf").write_text(site)
    temps = "\n".join(f"    {name}_temp_path {work / name};"
                      for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (work / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {work}/nginx.pid;\n"
        f"error_log {work}/error.log warn;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n    access_log off;\n{temps}\n    include {work}/site.conf;\n}}\n")
    proxy = subprocess.Popen([nginx, "-p", str(work), "-c", str(work / "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(gport, gunicorn)
        wait_listening(nport, proxy)
        for _ in range(4 * args.workers):  # each worker's first request opens its connections
            healthz(gport, 30)
        print(f"gunicorn: {args.workers} sync workers; /healthz timeout {args.timeout:g} s")
        for kind in ("headers", "body"):
            for target, port, n in (("direct", gport, args.workers + 1),
                                    ("nginx", nport, 10 * args.workers)):
                results = []
                for _ in range(args.trials):
                    held = slow_clients(port, n, kind)
                    try:
                        results.append(healthz(port, args.timeout))
                    finally:
                        for s in held:
                            s.close()
                    time.sleep(0.5)
                answered = sum(ok for ok, _ in results)
                ms = [t * 1000 for ok, t in results if ok]
                median = f"median {statistics.median(ms):.0f} ms" if ms else "never answered"
                print(f"slow {kind:7s} x {n:2d} -> {target:6s}: /healthz answered "
                      f"{answered}/{args.trials} ({median}; times "
                      f"{', '.join(f'{t:.2f}' for _, t in results)} s)")
    finally:
        proxy.terminate()
        gunicorn.terminate()
        proxy.wait(timeout=30)
        gunicorn.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
