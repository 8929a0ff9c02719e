"""OpenAI chat completions wire format (also vLLM, Ollama, llama.cpp server, LiteLLM).

`base_url` is the API root that `/chat/completions` hangs off, exactly as the OpenAI SDKs take
it: `https://api.openai.com/v1`, `http://127.0.0.1:8000/v1` (vLLM), `http://127.0.0.1:11434/v1`
(Ollama), `http://127.0.0.1:8080/v1` (llama.cpp), `http://127.0.0.1:4000` (LiteLLM proxy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    PermanentProviderError,
    PreparedCall,
    ProviderRequest,
    TokenLogprob,
    body_excerpt,
)
from .wire import Answer, WireFormat, json_post

PATH = "/chat/completions"
# Fields the request dataclass owns; `extra` may add vendor parameters but never replace these.
# `stream` and `n` stay at their defaults (one non-streamed completion): samples are separate
# jobs, each retried and recorded on its own.
_CORE_FIELDS = frozenset(
    {"model", "messages", "temperature", "max_tokens", "seed", "response_format", "logprobs",
     "top_logprobs", "stream", "n"}
)
# A verdict needs a few dozen tokens; keeping every token's alternatives of a long rationale
# would only bloat the record.
MAX_LOGPROB_TOKENS = 512


def prepare(request: ProviderRequest) -> PreparedCall:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None and "max_completion_tokens" not in request.extra:
        body["max_tokens"] = request.max_tokens
    if request.seed is not None:
        body["seed"] = request.seed
    if request.response_format is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.response_format.get("name", "verdict"),
                "schema": request.response_format["schema"],
                "strict": bool(request.response_format.get("strict", True)),
            },
        }
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs is not None:
            body["top_logprobs"] = request.top_logprobs
    return json_post(request, body, url=request.base_url.rstrip("/") + PATH,
                     core_fields=_CORE_FIELDS, headers={}, key_header="Authorization",
                     key_prefix="Bearer ")


def _logprobs(choice: Mapping[str, Any]) -> tuple[TokenLogprob, ...] | None:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return None
    content = block.get("content")
    if not isinstance(content, list):
        return None
    tokens: list[TokenLogprob] = []
    for entry in content[:MAX_LOGPROB_TOKENS]:
        if not isinstance(entry, dict):
            continue
        token, logprob = entry.get("token"), entry.get("logprob")
        if not isinstance(token, str) or not isinstance(logprob, int | float):
            continue
        top: list[tuple[str, float]] = []
        for alt in entry.get("top_logprobs") or []:
            if (
                isinstance(alt, dict)
                and isinstance(alt.get("token"), str)
                and isinstance(alt.get("logprob"), int | float)
            ):
                top.append((alt["token"], float(alt["logprob"])))
        tokens.append(TokenLogprob(token=token, logprob=float(logprob), top=tuple(top)))
    return tuple(tokens)


def _read_answer(
    request: ProviderRequest, data: dict[str, Any], status: int, content: bytes
) -> Answer:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise PermanentProviderError("empty choice list", http_status=status,
            body_excerpt=body_excerpt(content))
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise PermanentProviderError(
            "choice has no message", http_status=status, body_excerpt=body_excerpt(content)
        )
    message = choice["message"]
    text = message.get("content")
    if not isinstance(text, str):
        refusal = message.get("refusal")
        reason = f"model refused: {refusal[:200]}" if isinstance(refusal, str) and refusal else (
            "message has no text content"
        )
        raise PermanentProviderError(reason, http_status=status,
            body_excerpt=body_excerpt(content))
    return Answer(text=text, finish=choice.get("finish_reason"),
                  logprobs=_logprobs(choice) if request.logprobs else None)


WIRE = WireFormat(read_answer=_read_answer, request_id_header="x-request-id",
                  usage_keys=("prompt_tokens", "completion_tokens"))
interpret = WIRE.interpret
