"""SIMULATED LLM PROVIDER — test and benchmark infrastructure only, never a real model.

A real HTTP/1.1 server on loopback that speaks the OpenAI chat-completions wire format
(`POST /v1/chat/completions`, also `/chat/completions`) and the Anthropic messages wire format
(`POST /v1/messages`, also `/messages`), so that provider clients are exercised over real
sockets with real httpx. It runs on asyncio streams in its own thread (or as a process), so
hundreds of concurrent keep-alive connections cost one event loop, not one thread each.

What it answers is scripted per test:

- a FIFO queue of behaviours (`server.enqueue(rate_limited("2"), success("..."))`), optionally
  per path;
- or a function of the request (`server.handler = lambda req: ... -> Behaviour | None`);
- otherwise the deterministic rule-based "judge" (`judge()`): it reads the output block(s)
  between ReviewHub's `<<<OUTPUT …>>>` delimiters and answers
    * binary: "fail" if the output contains `[bad]`, else "pass";
    * ordinal: `[score=N]` in the output gives N, `[bad]` the lowest point, else the highest;
    * pairwise: the side whose output contains `[bad]` loses; both or neither → "tie", or "A"
      when `first_position_bias` is set (a simulated position bias);
    * categorical: `[label=X]` gives X, else the first allowed label;
  with confidence 0.9 (or `[p=0.73]` in the output) in the logprobs when they are requested.
  The allowed values are read from the request's JSON schema (structured output / tool input
  schema), else from a `Allowed values: a, b, c` line, else pass/fail.

Behaviours: success (± logprobs), structured output (automatic when the request asks for it),
429 + Retry-After, 5xx, slow (fixed delay), truncated JSON, truncated body (connection dropped
mid-body), HTML error page, empty choice list, connection reset, any raw response.

Use from tests:

    with ProviderServer() as server:
        server.enqueue(rate_limited("1.5"))
        ... call server.openai_base_url / server.anthropic_base_url ...
        assert server.count("/v1/chat/completions") == 2

or as a process for benchmarks (prints one line `listening on http://127.0.0.1:PORT`):

    python tests/judges/provider_server.py --port 0 --latency-ms 100

`GET /__stats` returns the request counts as JSON; `POST /__reset` clears them. Benchmarks read
their throughput from it, so that every setup is measured by the same clock (the server's):
`answered` counts model calls answered per HTTP status, and `first_request_at` /
`last_answer_at` (the server's `time.monotonic()`) bound the time it spent serving them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import re
import socket
import ssl
import struct
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

OPENAI_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
ANTHROPIC_PATHS = frozenset({"/v1/messages", "/messages"})

_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
    422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 529: "Overloaded",
}

_BLOCK_RE = re.compile(
    r"<<<OUTPUT(?: (?P<label>[AB]))? (?P<nonce>[0-9a-f]+)>>>\n?(?P<body>.*?)\n?"
    r"<<<END OUTPUT(?: (?P=label))? (?P=nonce)>>>",
    re.DOTALL,
)
_ALLOWED_LINE_RE = re.compile(r"^Allowed values: (.+)$", re.MULTILINE)


# --- requests and behaviours -------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any = None
    client_port: int = 0  # the client's end of the connection the request came on

    @property
    def protocol(self) -> str:
        if self.path in OPENAI_PATHS:
            return "openai"
        if self.path in ANTHROPIC_PATHS:
            return "anthropic"
        return "other"

    def messages(self) -> list[dict[str, Any]]:
        data = self.json if isinstance(self.json, dict) else {}
        msgs = [m for m in data.get("messages", []) if isinstance(m, dict)]
        if isinstance(data.get("system"), str):
            msgs = [{"role": "system", "content": data["system"]}, *msgs]
        return msgs

    def prompt_text(self) -> str:
        parts = []
        for m in self.messages():
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(b.get("text", "") for b in content if isinstance(b, dict))
        return "\n".join(parts)

    def verdict_schema(self) -> dict[str, Any] | None:
        data = self.json if isinstance(self.json, dict) else {}
        rf = data.get("response_format")
        if isinstance(rf, dict) and isinstance(rf.get("json_schema"), dict):
            schema = rf["json_schema"].get("schema")
            return schema if isinstance(schema, dict) else None
        for tool in data.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("input_schema"), dict):
                return tool["input_schema"]
        return None

    def wants_tool(self) -> str | None:
        data = self.json if isinstance(self.json, dict) else {}
        choice = data.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool":
            return str(choice.get("name"))
        return None


@dataclass
class Behaviour:
    """One scripted answer. Build them with the helper functions below."""

    kind: str  # "judge" | "text" | "raw" | "reset" | "truncated_body" | "empty_choices"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    text: str = ""
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None
    delay_s: float = 0.0
    then: Behaviour | None = None  # for "slow": what to send after the delay
    # Close the connection right after answering, without saying so in the response (a server
    # whose keep-alive timeout ran out): the client finds out only when it reuses it.
    close_after: bool = False


def judge() -> Behaviour:
    """The deterministic rule-based judge (the default when nothing else is scripted)."""
    return Behaviour(kind="judge")


def success(
    text: str,
    *,
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None,
    headers: dict[str, str] | None = None,
) -> Behaviour:
    """A 200 whose answer text is `text`; `logprobs` = [(token, logprob, [(alt, lp), ...])]."""
    return Behaviour(kind="text", text=text, logprobs=logprobs, headers=dict(headers or {}))


def rate_limited(
    retry_after: str | None = "1", *, retry_after_ms: str | None = None, status: int = 429
) -> Behaviour:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    body = json.dumps(
        {"error": {"message": "Rate limit reached (simulated)", "type": "rate_limit_error"}}
    ).encode()
    return Behaviour(kind="raw", status=status, headers=headers, body=body)


def server_error(status: int = 500, message: str = "Internal error (simulated)") -> Behaviour:
    body = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
    return Behaviour(kind="raw", status=status, body=body)


def html_page(status: int = 502) -> Behaviour:
    body = (
        b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head>"
        b"<body><h1>Bad Gateway</h1><p>simulated proxy error page</p></body></html>"
    )
    return Behaviour(kind="raw", status=status, body=body, headers={"Content-Type": "text/html"})


def then_close(behaviour: Behaviour) -> Behaviour:
    """`behaviour`, after which the server silently closes the connection."""
    return replace(behaviour, close_after=True)


def raw(status: int, body: bytes | str, headers: dict[str, str] | None = None) -> Behaviour:
    data = body.encode() if isinstance(body, str) else body
    return Behaviour(kind="raw", status=status, body=data, headers=dict(headers or {}))


def truncated_json() -> Behaviour:
    """A well-formed HTTP 200 whose JSON body stops half-way (Content-Length matches)."""
    return raw(200, '{"id": "chatcmpl-x", "choices": [{"index": 0, "message": {"role": "assi',
               {"Content-Type": "application/json"})


def truncated_body() -> Behaviour:
    """Announces a longer body than it sends, then closes the connection."""
    return Behaviour(kind="truncated_body", status=200)


def empty_choices() -> Behaviour:
    return Behaviour(kind="empty_choices")


def connection_reset() -> Behaviour:
    """Reads the request, then resets the TCP connection (RST) without any response."""
    return Behaviour(kind="reset")


def slow(delay_s: float, then: Behaviour | None = None) -> Behaviour:
    """Waits `delay_s` before sending `then` (default: the judge's answer)."""
    return Behaviour(kind="slow", delay_s=delay_s, then=then or judge())


# --- the rule-based judge ----------------------------------------------------------------


def _allowed_values(req: RecordedRequest) -> list[str]:
    schema = req.verdict_schema()
    if schema:
        verdict = (schema.get("properties") or {}).get("verdict") or {}
        enum = verdict.get("enum")
        if isinstance(enum, list) and enum:
            return [str(v) for v in enum]
    match = _ALLOWED_LINE_RE.search(req.prompt_text())
    if match:
        values = [v.strip().strip('"') for v in match.group(1).split(",")]
        return [v for v in values if v] or ["pass", "fail"]
    return ["pass", "fail"]


def judge_answer(req: RecordedRequest, *, first_position_bias: bool = False) -> tuple[str, float]:
    """(verdict, confidence) by the documented rules; see the module docstring."""
    prompt = req.prompt_text()
    blocks = {m.group("label") or "": m.group("body") for m in _BLOCK_RE.finditer(prompt)}
    allowed = _allowed_values(req)
    lowered = [v.lower() for v in allowed]
    text_all = "\n".join(blocks.values()) if blocks else prompt
    conf_match = re.search(r"\[p=(0(?:\.\d+)?|1(?:\.0+)?)\]", text_all)
    confidence = float(conf_match.group(1)) if conf_match else 0.9
    if {"a", "b"} <= set(lowered):
        a_bad = "[bad]" in blocks.get("A", "")
        b_bad = "[bad]" in blocks.get("B", "")
        if a_bad and not b_bad:
            value = "B"
        elif b_bad and not a_bad:
            value = "A"
        else:
            value = "A" if first_position_bias else "tie"
        return allowed[lowered.index(value.lower())], confidence
    if "pass" in lowered and "fail" in lowered:
        value = "fail" if "[bad]" in text_all else "pass"
        return allowed[lowered.index(value)], confidence
    if all(v.lstrip("-").isdigit() for v in allowed):
        points = sorted(allowed, key=int)
        score = re.search(r"\[score=(-?\d+)\]", text_all)
        if score and score.group(1) in points:
            return score.group(1), confidence
        return (points[0] if "[bad]" in text_all else points[-1]), confidence
    label = re.search(r"\[label=([^\]]+)\]", text_all)
    if label and label.group(1) in allowed:
        return label.group(1), confidence
    return allowed[0], confidence


def _verdict_tokens(verdict: str, rationale: str) -> list[str]:
    # A crude but deterministic tokenisation: the verdict value is always exactly one token,
    # as it is for pass/fail/A/B/1..9 in real BPE vocabularies.
    return ['{"', "verdict", '":', ' "', verdict, '",', ' "', "rationale", '":', ' "',
            rationale, '"}']


def _alternatives(value: str, allowed: list[str], confidence: float) -> list[tuple[str, float]]:
    others = [v for v in allowed if v != value]
    rest = max(1e-9, 1.0 - confidence)
    alts = [(value, math.log(max(confidence, 1e-9)))]
    alts += [(v, math.log(rest / len(others))) for v in others] if others else []
    return alts


# --- the server --------------------------------------------------------------------------


class ProviderServer:
    """The simulated provider; see the module docstring. Thread-safe scripting API."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        record: bool = True,
        max_recorded: int = 10_000,
        first_position_bias: bool = False,
        judge_style: str = "json",  # "json" | "final_line" (plain text ending in VERDICT: X)
        ssl_context: ssl.SSLContext | None = None,  # serve HTTPS with this server context
    ) -> None:
        self.host = host
        self.ssl_context = ssl_context
        self.port = port
        self.latency_s = latency_s
        self.record = record
        self.first_position_bias = first_position_bias
        self.judge_style = judge_style
        self.handler: Callable[[RecordedRequest], Behaviour | None] | None = None
        self.requests: deque[RecordedRequest] = deque(maxlen=max_recorded)
        self._queues: dict[str | None, deque[Behaviour]] = {}
        self._counts: Counter[str] = Counter()
        # Model calls answered, per HTTP status, and when the first arrived and the last was
        # answered (this process's monotonic clock): what a benchmark's throughput is read from.
        self._answered: Counter[int] = Counter()
        self._first_request_at: float | None = None
        self._last_answer_at: float | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._open_connections = 0
        self.max_open_connections = 0
        # Multi-process mode (`--workers`): per-worker request totals in shared memory so that
        # /__stats reports all workers, not just the one that answers it.
        self.shared_totals: Any = None
        self.worker_index = 0

    # -- scripting -------------------------------------------------------------------------

    def enqueue(self, *behaviours: Behaviour, path: str | None = None) -> None:
        """Answer the next requests (to `path`, or to any path) with these, in order."""
        with self._lock:
            self._queues.setdefault(path, deque()).extend(behaviours)

    def reset(self) -> None:
        with self._lock:
            self._queues.clear()
            self._counts.clear()
            self._answered.clear()
            self._first_request_at = self._last_answer_at = None
            self.requests.clear()
            self.handler = None

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(self._counts.values()) if path is None else self._counts[path]

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def answered_stats(self) -> dict[str, Any]:
        """Model calls answered per status and the span of time they took, on this clock."""
        with self._lock:
            first, last = self._first_request_at, self._last_answer_at
            return {"answered": {str(k): v for k, v in sorted(self._answered.items())},
                    "first_request_at": first, "last_answer_at": last,
                    "span_s": (last - first) if first is not None and last is not None
                    else None}

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def _next_behaviour(self, req: RecordedRequest) -> Behaviour:
        with self._lock:
            for key in (req.path, None):
                queue = self._queues.get(key)
                if queue:
                    return queue.popleft()
        if self.handler is not None:
            chosen = self.handler(req)
            if chosen is not None:
                return chosen
        return judge()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProviderServer:
        self._thread = threading.Thread(target=self._run_thread, name="provider-server",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("simulated provider server did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._server is not None:
            loop.call_soon_threadsafe(self._server.close)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._bind())
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _bind(self, sock: socket.socket | None = None) -> None:
        if sock is not None:
            self._server = await asyncio.start_server(
                self._serve_connection, sock=sock, backlog=2048, limit=1 << 16,
                ssl=self.ssl_context,
            )
        else:
            self._server = await asyncio.start_server(
                self._serve_connection, self.host, self.port, backlog=2048, limit=1 << 16,
                ssl=self.ssl_context,
            )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def serve_forever(self, sock: socket.socket | None = None, announce: bool = True) -> None:
        """For the command-line mode: bind (or adopt `sock`) and serve on the current loop."""
        await self._bind(sock)
        self._loop = asyncio.get_running_loop()
        if announce:
            print(f"listening on {self.url}", flush=True)
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    # -- HTTP ------------------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._open_connections += 1
        self.max_open_connections = max(self.max_open_connections, self._open_connections)
        try:
            await self._serve_requests(reader, writer)
        except asyncio.CancelledError:
            # Shutting down: end quietly instead of leaving a cancelled task for asyncio to log.
            pass
        finally:
            self._open_connections -= 1
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                return
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            try:
                body = await reader.readexactly(length) if length else b""
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            path = target.split("?", 1)[0]
            keep_alive = headers.get("connection", "").lower() != "close"
            if not await self._respond(writer, method, path, headers, body, keep_alive):
                return
            if not keep_alive:
                return

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        """Write one response; False when the connection must not be reused."""
        if path == "/__stats":
            stats: dict[str, Any] = {"counts": self.counts, "total": self.count(),
                                     "max_open_connections": self.max_open_connections,
                                     **self.answered_stats()}
            if self.shared_totals is not None:
                stats["total"] = int(sum(self.shared_totals))
                stats["per_worker"] = list(self.shared_totals)
                stats["counts"] = {"note": "per-path counts are per worker in --workers mode",
                                   **stats["counts"]}
            payload = json.dumps(stats).encode()
            await self._write(writer, 200, {"Content-Type": "application/json"}, payload,
                              keep_alive)
            return True
        if path == "/__reset" and method == "POST":
            self.reset()
            await self._write(writer, 200, {"Content-Type": "application/json"}, b"{}",
                              keep_alive)
            return True
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        peer = writer.get_extra_info("peername")
        req = RecordedRequest(method=method, path=path, headers=headers, body=body, json=parsed,
                              client_port=peer[1] if peer else 0)
        with self._lock:
            self._counts[path] += 1
            if self._first_request_at is None and req.protocol != "other":
                self._first_request_at = time.monotonic()
            if self.record:
                self.requests.append(req)
        if self.shared_totals is not None:
            self.shared_totals[self.worker_index] += 1
        if req.protocol == "other" or method != "POST":
            error = json.dumps({"error": {"message": f"no route {method} {path} (simulated)",
                                          "type": "not_found"}}).encode()
            await self._write(writer, 404, {"Content-Type": "application/json"}, error,
                              keep_alive)
            with self._lock:
                self._answered[404] += 1
            return True
        if not isinstance(parsed, dict):
            error = json.dumps({"error": {"message": "body is not a JSON object (simulated)",
                                          "type": "invalid_request_error"}}).encode()
            await self._write(writer, 400, {"Content-Type": "application/json"}, error,
                              keep_alive)
            with self._lock:
                self._answered[400] += 1
            return True
        behaviour = self._next_behaviour(req)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        while behaviour.kind == "slow":
            await asyncio.sleep(behaviour.delay_s)
            behaviour = behaviour.then or judge()
        if behaviour.kind == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                # Linger 0 turns close() into a TCP RST: the client sees a reset, not an EOF.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if behaviour.kind == "truncated_body":
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n"
            )
            writer.write(head + b'{"id": "chatcmpl-cut", "choices": [{"ind')
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.transport.abort()
            return False
        status, out_headers, payload = self._render(req, behaviour)
        await self._write(writer, status, out_headers, payload, keep_alive)
        with self._lock:
            self._answered[status] += 1
            self._last_answer_at = time.monotonic()
        return not behaviour.close_after

    def _render(self, req: RecordedRequest, behaviour: Behaviour) -> tuple[int, dict[str, str],
                                                                           bytes]:
        if behaviour.kind == "raw":
            out = {"Content-Type": "application/json", **behaviour.headers}
            return behaviour.status, out, behaviour.body
        number = next(self._ids)
        request_id = f"req_sim_{number:08d}"
        id_header = "request-id" if req.protocol == "anthropic" else "x-request-id"
        out_headers = {"Content-Type": "application/json", id_header: request_id,
                       **behaviour.headers}
        model = str(req.json.get("model", "simulated")) if isinstance(req.json, dict) else ""
        if behaviour.kind == "empty_choices":
            body: dict[str, Any] = {"id": f"chatcmpl-{number}", "object": "chat.completion",
                                    "model": model, "choices": [],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                              "total_tokens": 1}}
            return 200, out_headers, json.dumps(body).encode()
        logprobs = behaviour.logprobs
        verdict_obj: dict[str, Any] | None = None
        if behaviour.kind == "judge":
            verdict, confidence = judge_answer(req, first_position_bias=self.first_position_bias)
            rationale = f"simulated judge: rule-based verdict {verdict}"
            if self.judge_style == "final_line" and req.verdict_schema() is None:
                text = f"{rationale}\nVERDICT: {verdict}"
                tokens = [rationale, "\n", "VERDICT", ":", " ", verdict]
                index = len(tokens) - 1
            else:
                verdict_obj = {"verdict": verdict, "rationale": rationale}
                text = json.dumps(verdict_obj)
                tokens = _verdict_tokens(verdict, rationale)
                index = 4
            alts = _alternatives(verdict, _allowed_values(req), confidence)
            logprobs = [(t, (alts[0][1] if i == index else -0.01),
                         (alts if i == index else [(t, -0.01)])) for i, t in enumerate(tokens)]
        else:
            text = behaviour.text
        prompt_tokens = max(1, len(req.prompt_text()) // 4)
        completion_tokens = max(1, len(text) // 4)
        if req.protocol == "anthropic":
            tool = req.wants_tool()
            if tool and verdict_obj is None:
                with contextlib.suppress(ValueError):
                    loaded = json.loads(text)
                    verdict_obj = loaded if isinstance(loaded, dict) else None
            if tool and verdict_obj is not None:
                content = [{"type": "tool_use", "id": f"toolu_sim_{number}", "name": tool,
                            "input": verdict_obj}]
                stop = "tool_use"
            else:
                content = [{"type": "text", "text": text}]
                stop = "end_turn"
            body = {"id": f"msg_sim_{number}", "type": "message", "role": "assistant",
                    "model": model, "content": content, "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}}
            return 200, out_headers, json.dumps(body).encode()
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text},
                                  "logprobs": None}
        if req.json.get("logprobs") and logprobs is not None:
            top_n = int(req.json.get("top_logprobs") or 0)
            choice["logprobs"] = {"content": [
                {"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                 "top_logprobs": [{"token": a, "logprob": alp, "bytes": list(a.encode())}
                                  for a, alp in alts_[:top_n]]}
                for tok, lp, alts_ in logprobs
            ]}
        body = {"id": f"chatcmpl-sim-{number}", "object": "chat.completion",
                "created": int(time.time()), "model": model, "choices": [choice],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}
        return 200, out_headers, json.dumps(body).encode()

    async def _write(self, writer: asyncio.StreamWriter, status: int, headers: dict[str, str],
                     payload: bytes, keep_alive: bool) -> None:
        reason = _REASONS.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(payload)}",
                 "Server: reviewhub-simulated-provider",
                 f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        with contextlib.suppress(ConnectionError):
            await writer.drain()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Simulated LLM provider (test infrastructure).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--first-position-bias", action="store_true")
    parser.add_argument("--judge-style", choices=["json", "final_line"], default="json")
    parser.add_argument(
        "--workers", type=int, default=1,
        help="processes sharing the listening socket (the kernel's send path is most of the "
             "per-request cost, so a second process helps on a multi-core machine)",
    )
    args = parser.parse_args(argv)

    def make() -> ProviderServer:
        return ProviderServer(host=args.host, port=args.port,
                              latency_s=args.latency_ms / 1000.0, record=False,
                              first_position_bias=args.first_position_bias,
                              judge_style=args.judge_style)

    if args.workers <= 1:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(make().serve_forever())
        return 0
    import multiprocessing
    import signal

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(4096)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    totals = ctx.Array("q", args.workers, lock=False)

    def child(index: int) -> None:
        server = make()
        server.port = port
        server.shared_totals = totals
        server.worker_index = index
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(server.serve_forever(sock, announce=False))

    procs = [ctx.Process(target=child, args=(i,), daemon=True) for i in range(args.workers)]
    for proc in procs:
        proc.start()
    print(f"listening on http://{args.host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
