"""What both wire formats do alike around what tells them apart.

A format (`openai.py`, `anthropic.py`) builds its own body and reads its own answer out of a
2xx JSON body; the rest is the same for both and lives here: vendor parameters from `extra`
joining the body, the JSON headers and the key, the status and body checks before the answer
is read, and the result built once it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._http import json_body_or_raise, result_from_body
from .base import PreparedCall, ProviderRequest, ProviderResult, TokenLogprob


@dataclass(frozen=True)
class Answer:
    """What a format reads out of a 2xx body: the text, its finish reason and logprobs."""

    text: str
    finish: Any
    logprobs: tuple[TokenLogprob, ...] | None = None


# (request, the body's JSON object, HTTP status, the body's bytes for error excerpts)
AnswerReader = Callable[[ProviderRequest, dict[str, Any], int, bytes], Answer]


def json_post(
    request: ProviderRequest,
    body: dict[str, Any],
    *,
    url: str,
    core_fields: frozenset[str],
    headers: Mapping[str, str],
    key_header: str,
    key_prefix: str = "",
) -> PreparedCall:
    """The POST of `body`: `extra` adds vendor parameters but never replaces a `core_fields`
    one; the JSON headers come first, then the format's own, then the key when there is one."""
    for key, value in request.extra.items():
        if key not in core_fields:
            body[key] = value
    sent = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    if request.api_key:
        sent[key_header] = key_prefix + request.api_key
    return PreparedCall(method="POST", url=url, headers=sent, body=body)


@dataclass(frozen=True)
class WireFormat:
    """How one format names what the result takes from the body, and reads its answer."""

    read_answer: AnswerReader
    request_id_header: str
    usage_keys: tuple[str, str]  # (tokens in, tokens out) in the body's `usage`

    def interpret(
        self,
        request: ProviderRequest,
        *,
        status: int,
        headers: Mapping[str, str],
        content: bytes,
        latency_ms: float,
    ) -> ProviderResult:
        data = json_body_or_raise(status=status, headers=headers, content=content)
        answer = self.read_answer(request, data, status, content)
        return result_from_body(
            data,
            text=answer.text,
            finish=answer.finish,
            status=status,
            headers=headers,
            request_id_header=self.request_id_header,
            usage_keys=self.usage_keys,
            latency_ms=latency_ms,
            logprobs=answer.logprobs,
        )
