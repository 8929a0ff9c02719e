"""Streamed answers (server-sent events) of both wire formats, for a candidate's time to first
token.

OpenAI chat completions with `"stream": true` send `data: {chunk}` events, each with a
`choices[0].delta.content` piece, the last choice chunk with its `finish_reason`, then (with
`stream_options.include_usage`) a chunk of `usage` and no choices, and `data: [DONE]`.
Anthropic messages with `"stream": true` send named events: `message_start` (the message id
and input tokens), `content_block_delta` (`text_delta` pieces), `message_delta` (stop reason
and output tokens), `message_stop`; an `error` event is the provider's error.

`assemble` folds the events into the text, finish reason, tokens and request id of the answer
(and the tool calls, whose arguments arrive as JSON text in pieces) and notes when the
first text or tool call arrived. An answer whose terminal event never came (the body
ended early, the connection dropped, or the next piece did not come within the read timeout)
is a `StreamCut`: a transient error that carries what had arrived (the partial text, its
time to first token, the tokens and finish reason seen), so the caller can record the partial
answer beside the error instead of an empty text.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .base import PermanentProviderError, TransientProviderError

# An event longer than this is refused (a provider's chunks are a few hundred bytes).
MAX_EVENT_BYTES = 1024 * 1024


@dataclass
class StreamedAnswer:
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    request_id: str | None = None
    first_token_at: float | None = None  # time.perf_counter() of the first text piece
    complete: bool = False
    events: int = 0
    # Tool calls being streamed, by their index: {"id", "name", "arguments": JSON text so far}.
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def tool_calls(self) -> list[dict[str, Any]]:
        """The streamed tool calls in `tool_calls_of`'s form."""
        return [{"id": c["id"], "name": c["name"], "arguments": _arguments(c["arguments"])}
                for _, c in sorted(self.calls.items())]

    def _call_piece(self, index: Any, *, call_id: Any = None, name: Any = None,
                    arguments: Any = None) -> None:
        if not isinstance(index, int):
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()  # a tool call is the answer's start too
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if isinstance(call_id, str) and call_id:
            call["id"] = call_id
        if isinstance(name, str) and name:
            call["name"] = name
        if isinstance(arguments, str):
            call["arguments"] += arguments


def _arguments(text: Any) -> Any:
    """A call's arguments: the JSON object the model wrote, or its text when it is not JSON."""
    if not isinstance(text, str):
        return text
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def tool_calls_of(provider: str, data: Any) -> list[dict[str, Any]]:
    """The tool calls of a whole (unstreamed) answer body, as `[{"id", "name", "arguments"}]`
    (arguments parsed from OpenAI's JSON text; Anthropic's `tool_use.input` as it is); [] when
    there are none. A streamed answer's are in its result's `raw["tool_calls"]`."""
    if not isinstance(data, Mapping):
        return []
    if isinstance(data.get("tool_calls"), list):  # a streamed answer's raw record
        return [dict(c) for c in data["tool_calls"] if isinstance(c, Mapping)]
    out: list[dict[str, Any]] = []
    if provider == "anthropic":
        for block in data.get("content") or []:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                out.append({"id": str(block.get("id") or ""), "name": str(block.get("name")
                                                                           or ""),
                            "arguments": block.get("input")})
        return out
    choices = data.get("choices")
    message = _obj(choices[0]).get("message") if isinstance(choices, list) and choices else None
    for call in _obj(message).get("tool_calls") or []:
        fn = _obj(_obj(call).get("function"))
        out.append({"id": str(_obj(call).get("id") or ""), "name": str(fn.get("name") or ""),
                    "arguments": _arguments(fn.get("arguments"))})
    return out


class StreamCut(TransientProviderError):
    """A streamed answer cut before its terminal event; the reason starts "timeout" or
    "connection error" as for an unstreamed call, and what had arrived is kept."""

    def __init__(self, reason: str, *, answer: StreamedAnswer,
                 started_at: float | None) -> None:
        super().__init__(reason, http_status=200)
        self.partial_text = answer.text
        self.finish_reason = answer.finish_reason
        self.tokens_in = answer.tokens_in
        self.tokens_out = answer.tokens_out
        self.request_id = answer.request_id
        self.events = answer.events
        now = time.perf_counter()
        # Both from the request's start (the caller's perf_counter), as for a whole answer.
        self.latency_ms = None if started_at is None else (now - started_at) * 1000.0
        self.ttft_ms = None if started_at is None or answer.first_token_at is None else (
            answer.first_token_at - started_at) * 1000.0


async def sse_events(pieces: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) of each event as its blank line arrives ("message" when unnamed;
    several data lines joined by newlines; comments and ids skipped)."""
    buf = b""
    async for piece in pieces:
        buf += piece.replace(b"\r\n", b"\n")
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                if len(buf) > MAX_EVENT_BYTES:
                    raise PermanentProviderError("streamed event too long")
                break
            block, buf = buf[:end], buf[end + 2:]
            name, data = "message", []
            for line in block.decode("utf-8", "replace").split("\n"):
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            if data:
                yield name, "\n".join(data)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(data: str) -> Mapping[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError:
        raise PermanentProviderError(f"streamed event is not JSON: {data[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise PermanentProviderError("streamed event is not a JSON object")
    return parsed


def _text(answer: StreamedAnswer, piece: Any) -> None:
    if isinstance(piece, str) and piece:
        if answer.first_token_at is None:
            answer.first_token_at = time.perf_counter()
        answer.parts.append(piece)


def _openai(answer: StreamedAnswer, data: str) -> None:
    if data.strip() == "[DONE]":
        answer.complete = True
        return
    chunk = _json(data)
    if isinstance(chunk.get("error"), dict):
        raise PermanentProviderError(
            f"error event: {str(_obj(chunk['error']).get('message', ''))[:200]}")
    if answer.request_id is None and isinstance(chunk.get("id"), str):
        answer.request_id = chunk["id"]
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = _obj(choice.get("delta"))
        _text(answer, delta.get("content"))
        for call in delta.get("tool_calls") or []:
            fn = _obj(_obj(call).get("function"))
            answer._call_piece(_obj(call).get("index"), call_id=_obj(call).get("id"),
                               name=fn.get("name"), arguments=fn.get("arguments"))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            raise PermanentProviderError(f"model refused: {refusal[:200]}")
        if isinstance(choice.get("finish_reason"), str):
            answer.finish_reason = choice["finish_reason"]
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        answer.tokens_in = _int(usage.get("prompt_tokens"))
        answer.tokens_out = _int(usage.get("completion_tokens"))


def _anthropic(answer: StreamedAnswer, name: str, data: str) -> None:
    event = _json(data)
    kind = event.get("type", name)
    if kind == "message_start":
        message = _obj(event.get("message"))
        if isinstance(message.get("id"), str):
            answer.request_id = message["id"]
        usage = _obj(message.get("usage"))
        answer.tokens_in = _int(usage.get("input_tokens"))
        answer.tokens_out = _int(usage.get("output_tokens"))
    elif kind == "content_block_start":
        block = _obj(event.get("content_block"))
        if block.get("type") == "tool_use":
            answer._call_piece(event.get("index"), call_id=block.get("id"),
                               name=block.get("name"))
    elif kind == "content_block_delta":
        delta = _obj(event.get("delta"))
        if delta.get("type") == "text_delta":
            _text(answer, delta.get("text"))
        elif delta.get("type") == "input_json_delta":
            answer._call_piece(event.get("index"), arguments=delta.get("partial_json"))
    elif kind == "message_delta":
        delta = _obj(event.get("delta"))
        if isinstance(delta.get("stop_reason"), str):
            answer.finish_reason = delta["stop_reason"]
        usage = _obj(event.get("usage"))
        if _int(usage.get("output_tokens")) is not None:
            answer.tokens_out = _int(usage.get("output_tokens"))
    elif kind == "message_stop":
        answer.complete = True
    elif kind == "error":
        err = _obj(event.get("error"))
        reason = str(err.get("message", ""))[:200]
        if err.get("type") in ("overloaded_error", "api_error"):
            raise TransientProviderError(f"error event ({err.get('type')}): {reason}")
        raise PermanentProviderError(f"error event ({err.get('type')}): {reason}")


async def assemble(provider: str, pieces: AsyncIterator[bytes], *,
                   started_at: float | None = None) -> StreamedAnswer:
    """The answer a stream of `provider`'s wire format carries; `StreamCut` when it ends
    before its terminal event: the body ended ("connection error (truncated stream)"), the
    connection dropped ("connection error (<httpx error>) mid-stream") or a piece did not come
    within the read timeout ("timeout (ReadTimeout) mid-stream"). `started_at`: the
    `time.perf_counter()` at which the request was sent, for the cut's latency and TTFT."""
    answer = StreamedAnswer()
    # Read to the body's end (the terminal event is the last one), so that the connection
    # goes back to the pool instead of being closed half-read.
    try:
        async for name, data in sse_events(pieces):
            if answer.complete:
                continue
            answer.events += 1
            if provider == "anthropic":
                _anthropic(answer, name, data)
            else:
                _openai(answer, data)
    except httpx.TransportError as exc:
        if answer.complete:
            return answer  # everything arrived; only the connection's end was unclean
        kind = type(exc).__name__
        lead = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection error"
        raise StreamCut(f"{lead} ({kind}) mid-stream: after {answer.events} events and "
                        f"{len(answer.text)} characters", answer=answer,
                        started_at=started_at) from exc
    if not answer.complete:
        raise StreamCut(
            f"connection error (truncated stream): ended after {answer.events} events "
            f"and {len(answer.text)} characters, before its terminal event", answer=answer,
            started_at=started_at)
    return answer
