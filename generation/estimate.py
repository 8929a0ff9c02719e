"""The cost estimate shown before a run starts (and the budget's price of one request)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from judges.pricing import cost_for
from studies.models import Item

from .config import (
    DEFAULT_ESTIMATE_OUT_TOKENS,
    MissingField,
    canonical_json,
    estimate_tokens,
    render,
)
from .models import GenerationConfig, PromptTemplate
from .replay import prompt_chars, recorded_found


@dataclass(frozen=True)
class CandidateEstimate:
    config_id: int
    candidate: str
    requests: int
    tokens_in: int
    tokens_out: int
    cost: float | None  # None: no price known for the model
    per_request: float | None


@dataclass(frozen=True)
class RunEstimate:
    requests: int
    total: float | None  # None when any candidate has no price
    # The largest estimated cost of one request over the candidates: what a budget must cover.
    per_request_max: float | None
    candidates: list[CandidateEstimate] = field(default_factory=list)


def run_estimate(*, template: PromptTemplate, configs: Sequence[GenerationConfig],
                 item_ids: Sequence[int], samples: int, replay: bool = False) -> RunEstimate:
    """Tokens in from the rendered prompts, or the recorded requests' messages (`replay`), at
    about four characters a token; tokens out at the config's max_tokens (else
    DEFAULT_ESTIMATE_OUT_TOKENS): an upper bound for most runs."""
    tpl = template.template
    chars = 0
    n = 0
    # The tool definitions travel with every templated request (as JSON; their wire shape
    # differs little between providers).
    tool_chars = len(canonical_json(tpl["tools"])) if tpl.get("tools") else 0
    for values in Item.objects.filter(id__in=list(item_ids)).values(
            "input", "context", "reference", "external_id", "metadata",
            "recorded_request").iterator():
        item: dict[str, Any] = dict(values)
        if replay:
            recorded = recorded_found(item.get("metadata"), item.get("recorded_request"))
            chars += prompt_chars(recorded) if recorded is not None else 0
            n += 1
            continue
        try:
            chars += len(render(tpl.get("system") or "", item)) + len(render(tpl["user"], item))
        except MissingField:
            chars += len(tpl.get("system") or "") + len(tpl["user"])
        chars += tool_chars
        n += 1
    out: list[CandidateEstimate] = []
    for cfg in configs:
        c = cfg.config
        requests = n * samples
        tokens_in = estimate_tokens(chars) * samples if n else 0
        max_tokens = (c.get("parameters") or {}).get("max_tokens") or DEFAULT_ESTIMATE_OUT_TOKENS
        tokens_out = int(max_tokens) * requests
        cost = cost_for(provider=str(c.get("provider")), model=str(c.get("model")),
                        tokens_in=tokens_in, tokens_out=tokens_out, override=c.get("prices"))
        per = cost / requests if cost is not None and requests else None
        out.append(CandidateEstimate(config_id=cfg.pk, candidate=cfg.candidate.name,
                                     requests=requests, tokens_in=tokens_in,
                                     tokens_out=tokens_out, cost=cost, per_request=per))
    costs = [e.cost for e in out]
    pers = [e.per_request for e in out]
    return RunEstimate(
        requests=sum(e.requests for e in out),
        total=None if any(c is None for c in costs) else float(sum(c or 0.0 for c in costs)),
        per_request_max=None if any(p is None for p in pers) or not pers
        else max(p or 0.0 for p in pers),
        candidates=out)
