"""Replay: a recorded production request sent unchanged to a candidate (pure, no ORM).

The recorded request is an OpenAI chat-completions body as the application logged it
(`messages` with the system prompt and retrieved context, `tools`, `response_format`, sampling
parameters). For an OpenAI-compatible candidate it is sent as recorded with only `model`
replaced (and `stream` off: the run reads whole answers). For an Anthropic candidate it is
translated to the messages API: system messages become `system`, the other messages keep
their role and text, tool definitions, calls, results and `tool_choice` take Anthropic's
shapes (generation/replay_tools.py); what has no faithful translation (images, a response
format, arguments that are not JSON, a result answering no call) makes that output fail with
the reason, never the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .replay_tools import (
    NotReplayable,
    messages_to_anthropic,
    tool_choice_to_anthropic,
    tools_to_anthropic,
)

__all__ = ["NotReplayable", "prompt_chars", "recorded_found", "recorded_of", "replay_body"]

RECORDED_KEY = "recorded_request"
DEFAULT_ANTHROPIC_MAX_TOKENS = 1024


def recorded_found(metadata: Any, recorded_request: Any = None) -> Mapping[str, Any] | None:
    """The item's recorded request: its `recorded_request` field, else (items ingested before
    the field existed) its `metadata.recorded_request`; None when it has neither object."""
    if isinstance(recorded_request, Mapping):
        return recorded_request
    recorded = metadata.get(RECORDED_KEY) if isinstance(metadata, Mapping) else None
    return recorded if isinstance(recorded, Mapping) else None


def recorded_of(metadata: Any, recorded_request: Any = None) -> Mapping[str, Any]:
    """The item's recorded request (`recorded_found`), or NotReplayable saying why there is
    none usable."""
    recorded = recorded_found(metadata, recorded_request)
    if recorded is None:
        raise NotReplayable(f"the item has no {RECORDED_KEY} (nor a metadata.{RECORDED_KEY} "
                            "object)")
    messages = recorded.get("messages")
    if not isinstance(messages, list) or not messages:
        raise NotReplayable(f"{RECORDED_KEY}.messages must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise NotReplayable(f"{RECORDED_KEY}.messages[{i}] has no role")
    return recorded


def replay_body(recorded: Mapping[str, Any], *, provider: str, model: str,
                max_tokens: int | None) -> dict[str, Any]:
    """The JSON body to send to `provider` for the recorded request, with `model` swapped."""
    if provider == "openai":
        sent = dict(recorded)
        sent["model"] = model
        sent.pop("stream", None)
        sent.pop("stream_options", None)
        return sent
    if provider != "anthropic":
        raise NotReplayable(f"unknown provider {provider!r}")
    unsupported = sorted(set(recorded) & {"functions", "function_call", "n",
                                          "response_format", "logprobs"})
    if unsupported:
        raise NotReplayable(f"the recorded request uses {', '.join(unsupported)}, which has "
                            "no faithful Anthropic messages form here")
    tools = tools_to_anthropic(recorded["tools"]) if "tools" in recorded else []
    tool_choice = tool_choice_to_anthropic(recorded, [str(t["name"]) for t in tools])
    system, messages = messages_to_anthropic(recorded["messages"])
    if not messages:
        raise NotReplayable("the recorded request has no user message")
    body: dict[str, Any] = {"model": model, "messages": messages,
                            "max_tokens": int(recorded.get("max_tokens")
                                              or recorded.get("max_completion_tokens")
                                              or max_tokens or DEFAULT_ANTHROPIC_MAX_TOKENS)}
    if system:
        body["system"] = "\n\n".join(system)
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    for key in ("temperature", "top_p", "stop"):
        if recorded.get(key) is not None:
            body["stop_sequences" if key == "stop" else key] = (
                [recorded[key]] if key == "stop" and isinstance(recorded[key], str)
                else recorded[key])
    return body


def prompt_chars(recorded: Mapping[str, Any]) -> int:
    """Characters of text in the recorded messages (for the cost estimate)."""
    total = 0
    for m in recorded.get("messages") or []:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(str(p.get("text", ""))) for p in content if isinstance(p, Mapping))
    return total
