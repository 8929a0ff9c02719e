"""Cost of a provider call from a per-model price table (USD per million tokens).

The table is `settings.REVIEWHUB_JUDGE_PRICES` (env `REVIEWHUB_JUDGE_PRICES`, JSON), a judge
config's `prices` overrides it. Keys are looked up as "provider:model", then "model", then the
longest key ending in "*" that prefixes the model ("gpt-4o-mini-*" covers dated snapshots).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings


def _rates(entry: Any) -> tuple[float, float] | None:
    if not isinstance(entry, Mapping):
        return None
    try:
        rate_in = float(entry["input_per_mtok"])
        rate_out = float(entry["output_per_mtok"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(rate_in) and math.isfinite(rate_out)) or rate_in < 0 or rate_out < 0:
        return None
    return rate_in, rate_out


def price_lookup(*, provider: str, model: str,
                 table: Mapping[str, Any] | None = None) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for this model, or None when unknown."""
    prices: Mapping[str, Any] = (
        table if table is not None else getattr(settings, "REVIEWHUB_JUDGE_PRICES", {})
    )
    for key in (f"{provider}:{model}", model):
        if key in prices:
            return _rates(prices[key])
    best: tuple[int, Any] | None = None
    for key, entry in prices.items():
        if not key.endswith("*"):
            continue
        stem = key[:-1]
        bare = stem.split(":", 1)[1] if stem.startswith(f"{provider}:") else stem
        if ":" in bare and not stem.startswith(f"{provider}:"):
            continue
        if model.startswith(bare) and (best is None or len(bare) > best[0]):
            best = (len(bare), entry)
    return _rates(best[1]) if best else None


def cost_for(
    *,
    provider: str,
    model: str,
    tokens_in: int | None,
    tokens_out: int | None,
    override: Mapping[str, Any] | None,
) -> float | None:
    """USD cost of one call, or None when the price or the token counts are unknown."""
    rates = _rates(override) if override else None
    if rates is None:
        rates = price_lookup(provider=provider, model=model)
    if rates is None or tokens_in is None or tokens_out is None:
        return None
    return (tokens_in * rates[0] + tokens_out * rates[1]) / 1_000_000.0
