"""Load a monitoring window's input: the deployment's rows in the window, with their labels,
and what they are compared with (the plan's mix and gates, the shipped candidate's selection
outputs as the reference of the label-free signals).

The only module of the window kind that touches the ORM; `compute` is pure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from django.db.models import Avg, Q, TextField
from django.db.models.functions import Cast, Length, Substr

from studies.models import Output
from studies.spec import plan_selection

from .. import signals
from ..models import Deployment, TrafficRow
from .compute import WindowInput
from .params import WindowParams

# The reference sample is capped: a rank test gains nothing from more than this.
REFERENCE_LIMIT = 20_000
# An empty JSON list as PostgreSQL's jsonb and SQLite's JSON text both print it.
EMPTY_LIST = "[]"


def _floats(values: list[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _reference(deployment: Deployment) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    rows = list(
        Output.objects.filter(candidate_id=deployment.candidate_id, error="")
        .annotate(chars=Length("text"), head=Substr("text", 1, 200))
        .order_by("id").values_list("chars", "latency_ms", "head")[:REFERENCE_LIMIT]
    )
    chars = _floats([r[0] for r in rows])
    latency = _floats([r[1] for r in rows])
    refusals = sum(signals.is_refusal(r[2] or "") for r in rows)
    return chars, latency, (refusals, len(rows))


def window_input_load(*, deployment: Deployment, params: WindowParams) -> WindowInput:
    """The window's rows as arrays (see `compute.WindowInput`)."""
    in_window = TrafficRow.objects.filter(deployment=deployment, occurred_at__gte=params.start,
                                          occurred_at__lt=params.end)
    # The rules as JSON text: decoding a JSON list per row was half the load time of a
    # 100k-row window; only the flagged rows' lists are decoded, for the per-rule counts.
    rules_text = Cast("injection_rules", output_field=TextField())
    rows = list(
        in_window
        .annotate(judge_value=Avg("labels__value", filter=Q(labels__source="judge")),
                  human_value=Avg("labels__value", filter=Q(labels__source="human")),
                  rules_text=rules_text)
        .order_by("id")
        .values_list("stratum", "error", "latency_ms", "cost", "schema_valid", "output_chars",
                     "refusal", "rules_text", "to_judge", "judge_pi", "judge_value",
                     "to_human", "human_pi", "human_value", "escalated")
    )
    cols: list[tuple[Any, ...]] = (list(zip(*rows, strict=True)) if rows
                                   else [() for _ in range(15)])
    rules: Counter[str] = Counter()
    if any(t != EMPTY_LIST for t in cols[7]):
        for names in (in_window.annotate(rules_text=rules_text).exclude(rules_text=EMPTY_LIST)
                      .values_list("injection_rules", flat=True)):
            rules.update(names)
    plan = plan_selection(deployment.plan.spec)
    mix_shares = plan["mixes"].get(deployment.watch_dimension, {})
    ref_chars, ref_latency, ref_refusals = _reference(deployment)
    return WindowInput(
        granularity=params.granularity,
        start=params.start.isoformat(),
        end=params.end.isoformat(),
        stratum=np.array(list(cols[0]), dtype=object),
        error=np.array([bool(e) for e in cols[1]], dtype=bool),
        latency_ms=_floats(list(cols[2])),
        cost=_floats(list(cols[3])),
        schema_valid=_floats([None if v is None else float(v) for v in cols[4]]),
        output_chars=_floats(list(cols[5])),
        refusal=np.array(list(cols[6]), dtype=bool),
        injection=np.array([t != EMPTY_LIST for t in cols[7]], dtype=bool),
        to_judge=np.array(list(cols[8]), dtype=bool),
        judge_pi=_floats(list(cols[9])),
        judge_value=_floats(list(cols[10])),
        to_human=np.array(list(cols[11]), dtype=bool),
        human_pi=_floats(list(cols[12])),
        human_value=_floats(list(cols[13])),
        escalated=np.array(list(cols[14]), dtype=bool),
        injection_rules=dict(sorted(rules.items())),
        mix_dimension=deployment.watch_dimension,
        plan_mix=mix_shares,
        plan_gates=plan["gates"],
        level=plan["level"],
        reference_output_chars=ref_chars,
        reference_latency_ms=ref_latency,
        reference_refusals=ref_refusals,
    )
