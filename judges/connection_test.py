"""The connection test of a judge config: one real call, as a run would make it.

Offered where a lead creates or edits a judge (the judges page, and
`POST /api/studies/<slug>/judges/connection-test`) so that a wrong base URL, key variable or
model shows up before a run of thousands of jobs fails on it. The call goes through the same
path as a run's: the config is validated against the operator's allow-lists
(`services.judge_config_validate`), the request is built by `prompts.provider_request_for`
(key read by its environment variable name, refused for an unlisted base URL), sent by the
provider client (`providers.provider_call`) and its answer parsed by `parsing.verdict_parse`.
An error is reported as a run records it: the reason `executor.error_reason_shown` gives (a
provider's answer from an unlisted endpoint is never repeated) and its failure kind.

Nothing is stored: the test writes no job, verdict or version. It reads one output of the
study (the one asked for, else the first) and judges it on one single-output criterion.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from reviewhub.errors import ValidationFailed
from studies.criteria import interval_bounds
from studies.models import Output, Study

from . import selectors
from .config import JudgeNetworkPolicy
from .executor import ERROR_MAX_CHARS, allowed_values_for, error_reason_shown
from .parsing import Unparseable, verdict_parse
from .prompts import provider_request_for, subject_context_for
from .providers import (
    ProviderError,
    TransientProviderError,
    http_client,
    provider_call,
)
from .services import judge_config_validate

# A raw answer is shown up to this many characters.
RAW_EXCERPT_CHARS = 2_000
# The test waits at most this long for an answer (the config's timeout_s when shorter).
MAX_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ConnectionTestResult:
    ok: bool
    latency_ms: float | None
    url: str
    model: str
    criterion: str
    output_id: int
    value: str = ""
    value_num: float | None = None
    probability: float | None = None
    rationale: str = ""
    raw_response: str = ""
    error: str = ""
    error_kind: str = ""  # a key of selectors.FAILURE_KINDS
    error_label: str = ""
    http_status: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _output_for(study: Study, output_id: int | None) -> Output:
    if output_id is not None:
        subject = selectors.preview_subject_get(study=study, output_id=output_id,
                                                comparison_id=None)
        assert isinstance(subject, Output)
        return subject
    output = (Output.objects.filter(study=study).select_related("item", "study", "candidate")
              .order_by("id").first())
    if output is None:
        raise ValidationFailed.at(
            "output_id", "The study has no output yet: a connection test judges one. Upload "
                         "outputs on the study's data page first.")
    return output


def judge_connection_test(
    *, study: Study, config: Any, criterion_key: str | None = None,
    output_id: int | None = None, client: httpx.Client | None = None,
) -> ConnectionTestResult:
    """Make one real call with an LLM judge config; return its latency and parsed verdict, or
    the error. A config the allow-lists refuse is a ValidationFailed (400) naming the field,
    as when saving it; everything that goes wrong from the call on is in the result."""
    canonical = judge_config_validate(config, kind="llm")
    criterion = selectors.preview_criterion_get(study=study, criterion_key=criterion_key,
                                                pairwise=False)
    output = _output_for(study, output_id)
    base_url = str(canonical.get("base_url", ""))
    common: dict[str, Any] = {"url": base_url, "model": str(canonical.get("model", "")),
                              "criterion": criterion.key, "output_id": output.pk}
    show_body = JudgeNetworkPolicy.from_settings().base_url_listed(base_url)

    def failed(exc: ProviderError, latency_ms: float | None) -> ConnectionTestResult:
        error = error_reason_shown(exc, show_body=show_body)
        kind = selectors.failure_kind_of(
            error_kind="transient" if isinstance(exc, TransientProviderError) else "permanent",
            http_status=exc.http_status, error=error)
        excerpt = (exc.body_excerpt or "")[:RAW_EXCERPT_CHARS] if show_body else ""
        return ConnectionTestResult(ok=False, latency_ms=latency_ms, error=error,
                                    error_kind=kind, error_label=selectors.FAILURE_KINDS[kind],
                                    http_status=exc.http_status, raw_response=excerpt, **common)

    ctx = subject_context_for(criterion=criterion, output=output)
    try:
        request = provider_request_for(config=canonical, ctx=ctx)
    except ProviderError as exc:  # key variable unset, base URL no longer allowed
        return failed(exc, None)
    request = dataclasses.replace(request, timeout_s=min(request.timeout_s, MAX_TIMEOUT_S))
    own = client is None
    http = client or http_client(max_connections=1, timeout_s=request.timeout_s)
    start = time.perf_counter()
    try:
        result = provider_call(http, request)
    except ProviderError as exc:
        return failed(exc, round((time.perf_counter() - start) * 1000.0, 1))
    finally:
        if own:
            http.close()
    answer: dict[str, Any] = {
        "latency_ms": round(result.latency_ms, 1), "http_status": result.http_status,
        "raw_response": result.text[:RAW_EXCERPT_CHARS], "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
    }
    try:
        parsed = verdict_parse(
            text=result.text, criterion_scale=criterion.scale,
            allowed_values=allowed_values_for(criterion), parser=canonical.get("parser") or {},
            logprobs=result.logprobs, pass_threshold=criterion.pass_threshold,
            bounds=interval_bounds(criterion) if criterion.scale == "interval" else None,
        )
    except Unparseable as exc:
        error = f"unparseable: {getattr(exc, 'reason', str(exc))}"[:ERROR_MAX_CHARS]
        return ConnectionTestResult(ok=False, error=error, error_kind="parse",
                                    error_label=selectors.FAILURE_KINDS["parse"],
                                    **answer, **common)
    return ConnectionTestResult(ok=True, value=parsed.value, value_num=parsed.value_num,
                                probability=parsed.probability, rationale=parsed.rationale,
                                **answer, **common)
