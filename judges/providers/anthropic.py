"""Anthropic messages wire format.

`base_url` is the host root, as the Anthropic SDKs take it: `https://api.anthropic.com`; the
call goes to `{base_url}/v1/messages`. A base URL that already ends in `/v1` (some gateways
document it that way) is accepted and not doubled.

Anthropic has no logprobs and no seed. Structured output is a forced tool call: the verdict
schema becomes the input schema of one tool, `tool_choice` forces it, and the tool input (a JSON
object) is returned as the result text, so the same strict parser reads both providers.
"""

from __future__ import annotations

import json
from typing import Any

from .base import (
    PermanentProviderError,
    PreparedCall,
    ProviderRequest,
    body_excerpt,
)
from .wire import Answer, WireFormat, json_post

API_VERSION = "2023-06-01"
# The messages API requires max_tokens; a verdict with a short rationale fits well inside.
DEFAULT_MAX_TOKENS = 1024
TOOL_NAME = "record_verdict"
_CORE_FIELDS = frozenset(
    {"model", "messages", "system", "max_tokens", "temperature", "tools", "tool_choice", "stream"}
)


def messages_url(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root + ("/messages" if root.endswith("/v1") else "/v1/messages")


def prepare(request: ProviderRequest) -> PreparedCall:
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": [
            {"role": m.role, "content": m.content} for m in request.messages if m.role != "system"
        ],
    }
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.response_format is not None:
        body["tools"] = [
            {
                "name": TOOL_NAME,
                "description": "Record the verdict and a short rationale.",
                "input_schema": request.response_format["schema"],
            }
        ]
        body["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
    return json_post(request, body, url=messages_url(request.base_url), core_fields=_CORE_FIELDS,
                     headers={"anthropic-version": API_VERSION}, key_header="x-api-key")


def _read_answer(
    request: ProviderRequest, data: dict[str, Any], status: int, content: bytes
) -> Answer:
    if data.get("type") == "error":
        err: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else {}
        raise PermanentProviderError(
            f"error body with HTTP {status}: {str(err.get('message', ''))[:200]}",
            http_status=status,
            body_excerpt=body_excerpt(content),
        )
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise PermanentProviderError(
            "response has no content list", http_status=status, body_excerpt=body_excerpt(content)
        )
    text: str | None = None
    if request.response_format is not None:
        for block in blocks:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_use"
                and block.get("name") == TOOL_NAME
                and isinstance(block.get("input"), dict)
            ):
                text = json.dumps(block["input"], ensure_ascii=False)
                break
    if text is None:
        parts = [
            b["text"]
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        if not parts:
            raise PermanentProviderError(
                "no text content block", http_status=status, body_excerpt=body_excerpt(content)
            )
        text = "".join(parts)
    return Answer(text=text, finish=data.get("stop_reason"))


WIRE = WireFormat(read_answer=_read_answer, request_id_header="request-id",
                  usage_keys=("input_tokens", "output_tokens"))
interpret = WIRE.interpret
