"""How fast is the simulated provider (tests/judges/provider_server.py)?

Side R's judge-throughput benchmark measures ReviewHub against this server, so the server must
not be the bottleneck. This starts it as a subprocess with a fixed latency and drives it with a
bare asyncio + httpx loop (one pooled client, `--concurrency` requests in flight), then prints
requests per second beside the latency bound concurrency / latency.

    .venv/bin/python bench/provider_server_load.py --requests 5000 --concurrency 256 \
        --latency-ms 100 --client raw|httpx|httpx-plain

`httpx` is ReviewHub's own pooled client (`http_client_async`, the lean HTTP/1.1 pool),
`httpx-plain` one plain httpx pool of `--concurrency` connections, `raw` a minimal client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from judges.providers import http_client_async  # noqa: E402

BODY = {
    "model": "simulated",
    "messages": [
        {"role": "system", "content": "You are a strict grader."},
        {"role": "user", "content": "<<<OUTPUT 0a1b>>>\nAn answer.\n<<<END OUTPUT 0a1b>>>"},
    ],
    "logprobs": True,
    "top_logprobs": 5,
}


async def drive(
    url: str, requests: int, concurrency: int, plain_pool: bool = False
) -> tuple[float, float, int]:
    errors = 0
    counter = iter(range(requests))
    payload = json.dumps(BODY).encode()
    headers = {"Content-Type": "application/json"}
    # ReviewHub's own pooled client (small sharded pools; see judges/providers/transport.py),
    # or a single plain httpx pool with --plain-pool to show why it is not used.
    client_cm: Any
    if plain_pool:
        client_cm = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=concurrency,
                                max_keepalive_connections=concurrency),
            timeout=httpx.Timeout(30.0),
        )
    else:
        client_cm = http_client_async(max_connections=concurrency, timeout_s=30.0)
    async with client_cm as client:

        async def worker() -> None:
            nonlocal errors
            for _ in counter:
                response = await client.request("POST", url, headers=headers, content=payload)
                if response.status_code != 200:
                    errors += 1

        # Warm the pool so that connection set-up is not in the timed part.
        await asyncio.gather(*(client.request("POST", url, headers=headers, content=payload)
                               for _ in range(concurrency)))
        start, cpu_start = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return elapsed, cpu, errors


async def drive_raw(
    host: str, port: int, path: str, requests: int, concurrency: int
) -> tuple[float, float, int]:
    """The same load from a minimal keep-alive HTTP/1.1 client on asyncio streams.

    httpx costs ~1 ms of client CPU per request, so on a small machine an httpx client cannot
    offer the server more than ~1,000 req/s; this client costs a few tens of microseconds and
    shows what the server itself sustains.
    """
    payload = json.dumps(BODY).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    counter = iter(range(requests))
    errors = 0

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await reader.readexactly(length)
        return head.startswith(b"HTTP/1.1 200")

    connections = [await asyncio.open_connection(host, port) for _ in range(concurrency)]
    await asyncio.gather(*(one(r, w) for r, w in connections))  # warm-up

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal errors
        for _ in counter:
            if not await one(reader, writer):
                errors += 1

    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(r, w) for r, w in connections))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    for _, writer in connections:
        writer.close()
    return elapsed, cpu, errors


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--server-workers", type=int, default=1)
    parser.add_argument("--client", choices=["httpx", "httpx-plain", "raw"], default="raw")
    args = parser.parse_args()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/judges/provider_server.py"), "--port", "0",
         "--latency-ms", str(args.latency_ms), "--workers", str(args.server_workers)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        base = line.rsplit(" ", 1)[-1]
        cpu_before = _tree_cpu(proc.pid)
        if args.client == "raw":
            port = int(base.rsplit(":", 1)[1])
            elapsed, client_cpu, errors = asyncio.run(
                drive_raw("127.0.0.1", port, "/v1/chat/completions", args.requests,
                          args.concurrency)
            )
        else:
            elapsed, client_cpu, errors = asyncio.run(
                drive(base + "/v1/chat/completions", args.requests, args.concurrency,
                      args.client == "httpx-plain")
            )
        cpu_after = _tree_cpu(proc.pid)
        stats = httpx.get(base + "/__stats").json()
    finally:
        proc.terminate()
        proc.wait(5)
    rate = args.requests / elapsed
    bound = args.concurrency / (args.latency_ms / 1000.0) if args.latency_ms else float("inf")
    server_cpu_ms = (cpu_after - cpu_before) * 1000.0 / args.requests
    print(f"requests={args.requests} concurrency={args.concurrency} "
          f"latency_ms={args.latency_ms} client={args.client}")
    print(f"elapsed_s={elapsed:.2f} rate_rps={rate:.0f} latency_bound_rps={bound:.0f} "
          f"ratio={rate / bound:.3f} errors={errors}")
    print(f"server_workers={args.server_workers} server_total={stats['total']} "
          f"server_cpu_ms_per_request={server_cpu_ms:.3f} "
          f"client_cpu_ms_per_request={client_cpu * 1000.0 / args.requests:.3f}")
    return 0


def _tree_cpu(pid: int) -> float:
    """utime + stime (seconds) of the server process and its worker children, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for one in pids:
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


if __name__ == "__main__":
    sys.exit(main())
