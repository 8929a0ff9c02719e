"""Slow clients cannot block the site behind the shipped nginx (deploy/nginx/reviewhub.conf).

The probe of issue 30 §2, run for real: gunicorn with two sync workers, and the nginx config
that docker-compose.yml mounts (only its upstream address and listen port replaced). Opening
a few connections that never finish their headers blocks gunicorn served directly
(`/healthz` times out), while through nginx `/healthz` answers at once; the same holds for
clients that send a body slowly. The config's body limits answer 413 in the one error shape.

Needs the `nginx` binary (apt-get install nginx-light; .ci/run installs it); skipped with a
reason without it.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "deploy" / "nginx" / "reviewhub.conf"
WORKERS = 2
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install nginx-light); .ci/run "
                          "installs it")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port}")


@pytest.fixture(scope="module")
def gunicorn_port() -> Iterator[int]:
    port = _free_port()
    env = {**os.environ, "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "proxy-test-" + "x" * 40,
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "reviewhub.wsgi:application",
         "--bind", f"127.0.0.1:{port}", "--workers", str(WORKERS), "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port, proc, "gunicorn")
        # Each worker's first /healthz opens its database and broker connections (seconds):
        # warm them all so the probe times only the blocking.
        for _ in range(4 * WORKERS):
            assert _healthz(port, timeout=30) == 200
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def nginx_port(gunicorn_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    assert NGINX is not None
    port = _free_port()
    work = tmp_path_factory.mktemp("nginx")
    site = CONF.read_text()
    # The shipped config, pointed at this test's gunicorn and port; nothing else changes.
    assert "server web:8000;" in site and "listen 80;" in site
    site = site.replace("server web:8000;", f"server 127.0.0.1:{gunicorn_port};")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
    (work / "site.conf").write_text(site)
    temp = {name: work / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir()
    (work / "nginx.conf").write_text(f"""
daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {temp['body']};
    proxy_temp_path {temp['proxy']};
    fastcgi_temp_path {temp['fastcgi']};
    uwsgi_temp_path {temp['uwsgi']};
    scgi_temp_path {temp['scgi']};
    include {work}/site.conf;
}}
""")
    check = subprocess.run([NGINX, "-t", "-p", str(work), "-c", str(work / "nginx.conf")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([NGINX, "-p", str(work), "-c", str(work / "nginx.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port, proc, "nginx")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _healthz(port: int, timeout: float = 5) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/healthz", headers={"Host": "localhost"})
        return conn.getresponse().status
    finally:
        conn.close()


def _slow_clients(port: int, n: int, *, body: bool = False) -> list[socket.socket]:
    """`n` connections that send part of a request and then nothing: an unfinished header
    block, or (body=True) whole headers announcing a body of which only a few bytes come."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if body:
            # The sign-in form: its body is read (CSRF check) before any answer.
            s.sendall(b"POST /accounts/login/ HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Type: application/x-www-form-urlencoded\r\n"
                      b"Content-Length: 1000\r\n\r\nusername=")
        else:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        out.append(s)
    time.sleep(0.5)  # let the server accept them and start reading
    return out


def _close(sockets: list[socket.socket]) -> None:
    for s in sockets:
        s.close()


def _answers(port: int) -> tuple[bool, float]:
    started = time.monotonic()
    try:
        ok = _healthz(port, timeout=3) in (200, 503)
    except (TimeoutError, OSError):
        ok = False
    return ok, time.monotonic() - started


@pytest.mark.parametrize("body", [False, True], ids=["slow-headers", "slow-body"])
def test_slow_clients_block_gunicorn_but_not_nginx(gunicorn_port: int, nginx_port: int,
                                                    body: bool) -> None:
    assert _answers(gunicorn_port)[0] and _answers(nginx_port)[0]
    # Directly: as many slow clients as workers hold every worker; /healthz times out.
    slow = _slow_clients(gunicorn_port, WORKERS + 1, body=body)
    try:
        direct_ok, direct_s = _answers(gunicorn_port)
    finally:
        _close(slow)
    assert not direct_ok, f"gunicorn answered in {direct_s:.2f} s with its workers held"
    # Through nginx: ten times as many slow clients, and /healthz still answers at once.
    slow = _slow_clients(nginx_port, 10 * WORKERS, body=body)
    try:
        proxied_ok, proxied_s = _answers(nginx_port)
    finally:
        _close(slow)
    assert proxied_ok and proxied_s < 2, f"through nginx: ok={proxied_ok} in {proxied_s:.2f} s"
    print(f"\n{'slow body' if body else 'slow headers'}: direct /healthz timed out after "
          f"{direct_s:.2f} s; through nginx it answered in {proxied_s * 1000:.0f} ms")


def _post_length(port: int, path: str, length: int) -> tuple[int, Any]:
    """Announce a body of `length` bytes and send none: the limit is decided on the header."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())
        response = http.client.HTTPResponse(s)
        response.begin()
        return response.status, response.read()


def _setting_bytes(name: str) -> int:
    text = (ROOT / "reviewhub" / "settings.py").read_text()
    match = re.search(rf'{name} = env\.int\("{name}", default=([0-9 *]+)\)', text)
    assert match, name
    return math.prod(int(factor) for factor in match.group(1).split("*"))


def test_the_body_limits_are_the_apps(nginx_port: int) -> None:
    general = _setting_bytes("REVIEWHUB_MAX_REQUEST_BYTES")
    upload = _setting_bytes("REVIEWHUB_MAX_UPLOAD_BYTES")
    site = CONF.read_text()
    assert f"client_max_body_size {general // (1 << 20)}m;" in site
    assert f"client_max_body_size {upload // (1 << 20)}m;" in site
    status, body = _post_length(nginx_port, "/api/tokens", general + 1)
    assert status == 413 and b'"payload_too_large"' in body
    status, body = _post_length(nginx_port, "/api/studies/x/items/bulk", upload + 1)
    assert status == 413 and b'"payload_too_large"' in body
    for kind in ("items", "candidates", "outputs"):
        # Over the general limit but under the upload limit: nginx does not refuse it (it
        # waits for the body, which never comes, so the request times out instead).
        with socket.create_connection(("127.0.0.1", nginx_port), timeout=3) as s:
            s.sendall(f"POST /api/studies/x/{kind}/bulk HTTP/1.1\r\nHost: localhost\r\n"
                      f"Content-Length: {general + 1}\r\n\r\n".encode())
            with pytest.raises(TimeoutError):
                s.recv(100)
