"""The prompt preview: the exact request a judge version would send, without sending it.

The request is built by the same code path as a real call (`provider_request_for` →
`provider_prepare` → `serialize_body`), except that the API key is never read: when the config
names a key variable, the header is shown with the value REDACTED.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Criterion, Output

from .models import Judge, JudgeVersion
from .prompts import provider_request_for, subject_context_for
from .providers import ProviderConfigError, provider_prepare, serialize_body

REDACTED = "REDACTED"


def judge_version_preview(
    *, version: JudgeVersion, criterion: Criterion, subject: Output | Comparison,
    order: str = "",
) -> dict[str, Any]:
    """{"method", "url", "headers" (key redacted), "body", "body_text", ...} for one call."""
    if version.judge.kind != Judge.Kind.LLM:
        raise ValidationFailed.at(
            "judge",
            f"Judge '{version.judge.name}' is a {version.judge.get_kind_display()}: it sends no "
            "provider request, so there is nothing to preview.",
        )
    if isinstance(subject, Comparison):
        if order not in ("ab", "ba"):
            raise ValidationFailed.at("order", "order must be 'ab' or 'ba' for a comparison.")
        ctx = subject_context_for(criterion=criterion, comparison=subject, order=order)
    else:
        ctx = subject_context_for(criterion=criterion, output=subject)
    config = version.config
    try:
        request = provider_request_for(config=config, ctx=ctx, resolve_key=False)
    except ProviderConfigError as exc:
        raise ValidationFailed.at(
            "config", f"This version cannot be called here: {exc.reason}",
        ) from None
    if config.get("api_key_env"):
        # A stand-in so that the auth header appears where it will be; it is redacted below
        # and the environment is never read.
        request = dataclasses.replace(request, api_key=REDACTED)
    call = provider_prepare(request)
    body_text = serialize_body(call.body).decode()
    return {
        "judge_version": version.pk,
        "content_hash": version.content_hash,
        "criterion": {"id": criterion.pk, "key": criterion.key, "scale": criterion.scale},
        "subject": ({"comparison_id": subject.pk, "order": order}
                    if isinstance(subject, Comparison) else {"output_id": subject.pk}),
        "api_key_env": config.get("api_key_env"),
        "method": call.method,
        "url": call.url,
        "headers": call.redacted_headers(),
        "body": json.loads(body_text),
        "body_text": body_text,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
    }
