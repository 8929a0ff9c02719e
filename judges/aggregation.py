"""Combining a subject's judge calls (samples x presentation orders) into one verdict.

Pure functions over plain values (no ORM), so that the rules below are unit-testable and the
same in every worker.

Rules (also in docs/judges.md):
- Only calls that produced a parsed answer ("scored samples") vote. Unparseable answers and
  failed calls are kept in `details["samples"]` with their reason but never count as a pass, a
  fail or a preference.
- No scored sample at all: `is_scored=False`, value "", the reasons in `rationale`.
- binary: majority of pass/fail; `value_num` is the majority's 1.0/0.0; `probability` is the
  mean of the samples' P(pass) when every scored sample has one (logprobs), else the share of
  pass samples. An exact tie takes the side of `probability` (>= 0.5 → pass) when logprobs gave
  one, otherwise the answer of the lowest sample index, flagged `details["tie_break"]`.
- ordinal: `value` is the median point (the lower median for an even count, a conservative
  choice on a graded scale), `value_num` that point, `details["mean"]` the mean; probability
  P(point >= pass_threshold) as above.
- interval: `value` and `value_num` are the mean of the samples' scores (no rounding: a score
  is any number of the range), `details["mean"]` the same; probability the share of samples
  with a score >= pass_threshold (as above) when the criterion has one.
- categorical: the most frequent label (ties: the lowest sample index); probability the share
  of samples with a pass label when the criterion has pass labels.
- pairwise: each call's answer is the label AS PRESENTED; order "ba" showed output_b first, so
  "A" there means canonical "B". Each order is reduced to its majority canonical label; if both
  orders agree, that is the verdict; if they disagree it is "tie" with
  `details["position_inconsistent"] = True`. Both raw order verdicts are in
  `details["orders"]`. A pairwise verdict needs both orders scored: with one order missing the
  position check cannot be made, so the verdict is unscored (reason in `rationale`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from studies.criteria import number_text

SCORED_STATUSES = frozenset({"done"})
TERMINAL_STATUSES = frozenset({"done", "unparseable", "failed"})
RAW_EXCERPT_CHARS = 300


@dataclass(frozen=True)
class CallView:
    """What aggregation needs from one finished job."""

    job_id: int
    sample_index: int
    order: str  # "", "ab", "ba"
    status: str
    value: str
    value_num: float | None
    probability: float | None
    rationale: str
    error: str
    raw_excerpt: str = ""


@dataclass(frozen=True)
class CombinedVerdict:
    is_scored: bool
    value: str
    value_num: float | None
    probability: float | None
    rationale: str
    n_samples: int
    details: dict[str, Any] = field(default_factory=dict)


def _swap(label: str) -> str:
    return {"A": "B", "B": "A"}.get(label, label)


def canonical_label(*, presented: str, order: str) -> str:
    """Map a pairwise label as presented back to canonical terms (A = Comparison.output_a)."""
    return _swap(presented) if order == "ba" else presented


def _sample_record(call: CallView, canonical: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "job_id": call.job_id,
        "sample": call.sample_index,
        "status": call.status,
        "value": call.value,
        "probability": call.probability,
    }
    if call.order:
        record["order"] = call.order
        record["canonical"] = canonical
    if call.status != "done":
        record["error"] = call.error
        if call.raw_excerpt:
            record["raw_excerpt"] = call.raw_excerpt[:RAW_EXCERPT_CHARS]
    elif call.rationale:
        record["rationale"] = call.rationale
    return record


def _unscored(calls: Sequence[CallView], reason: str, details: dict[str, Any]) -> CombinedVerdict:
    reasons = sorted({c.error for c in calls if c.error})
    text = reason + (": " + "; ".join(reasons) if reasons else "")
    return CombinedVerdict(
        is_scored=False, value="", value_num=None, probability=None, rationale=text,
        n_samples=len(calls), details=details,
    )


def _majority(values: Sequence[str]) -> tuple[str, bool]:
    """The most frequent value; ties go to the earliest value. Returns (value, was_tie)."""
    counts = Counter(values)
    top = max(counts.values())
    leaders = [v for v in values if counts[v] == top]
    return leaders[0], len(set(leaders)) > 1


def _probability(
    scored: Sequence[CallView], passed: Sequence[bool]
) -> tuple[float | None, str]:
    if scored and all(c.probability is not None for c in scored):
        return sum(c.probability for c in scored if c.probability is not None) / len(
            scored
        ), "logprobs"
    if scored:
        return sum(passed) / len(scored), "sample_share"
    return None, ""


def combine_single(
    *,
    scale: str,
    calls: Sequence[CallView],
    pass_threshold: int | float | None = None,
    pass_labels: Sequence[str] = (),
) -> CombinedVerdict:
    """Combine the samples of one single-output criterion (binary, ordinal, categorical,
    interval: the mean of the samples' scores)."""
    ordered = sorted(calls, key=lambda c: c.sample_index)
    details: dict[str, Any] = {"samples": [_sample_record(c) for c in ordered]}
    scored = [c for c in ordered if c.status in SCORED_STATUSES]
    unscored_n = len(ordered) - len(scored)
    if unscored_n:
        details["unscored_samples"] = unscored_n
    if not scored:
        return _unscored(ordered, "no sample could be scored", details)
    if scale == "binary":
        return _binary(ordered, scored, details)
    if scale == "ordinal":
        return _ordinal(ordered, scored, details, pass_threshold)
    if scale == "interval":
        return _interval(ordered, scored, details, pass_threshold)
    return _categorical(ordered, scored, details, pass_labels)


def _binary(
    ordered: Sequence[CallView], scored: Sequence[CallView], details: dict[str, Any]
) -> CombinedVerdict:
    """The majority of pass/fail; a tie broken by the probability when it comes from
    logprobs, else by the first sample."""
    passed = [c.value == "pass" for c in scored]
    share = sum(passed) / len(scored)
    prob, source = _probability(scored, passed)
    details["probability_source"] = source
    if share > 0.5:
        value = "pass"
    elif share < 0.5:
        value = "fail"
    else:
        if source == "logprobs" and prob is not None:
            value = "pass" if prob >= 0.5 else "fail"
            details["tie_break"] = "probability"
        else:
            value = scored[0].value
            details["tie_break"] = "first_sample"
    return CombinedVerdict(
        is_scored=True, value=value, value_num=1.0 if value == "pass" else 0.0,
        probability=prob, rationale=scored[0].rationale, n_samples=len(ordered),
        details=details,
    )


def _ordinal(
    ordered: Sequence[CallView], scored: Sequence[CallView], details: dict[str, Any],
    pass_threshold: int | float | None,
) -> CombinedVerdict:
    """The (lower) median point; the mean beside it."""
    points = sorted(
        int(c.value_num if c.value_num is not None else float(c.value)) for c in scored
    )
    median = points[(len(points) - 1) // 2]
    details["mean"] = sum(points) / len(points)
    prob = None
    if pass_threshold is not None:
        passed = [
            (c.value_num if c.value_num is not None else float(c.value)) >= pass_threshold
            for c in scored
        ]
        prob, source = _probability(scored, passed)
        details["probability_source"] = source
    return CombinedVerdict(
        is_scored=True, value=str(median), value_num=float(median), probability=prob,
        rationale=scored[0].rationale, n_samples=len(ordered), details=details,
    )


def _interval(
    ordered: Sequence[CallView], scored: Sequence[CallView], details: dict[str, Any],
    pass_threshold: int | float | None,
) -> CombinedVerdict:
    """The mean of the samples' scores."""
    scores = [c.value_num if c.value_num is not None else float(c.value) for c in scored]
    mean = sum(scores) / len(scores)
    details["mean"] = mean
    prob = None
    if pass_threshold is not None:
        prob, source = _probability(scored, [s >= pass_threshold for s in scores])
        details["probability_source"] = source
    return CombinedVerdict(
        is_scored=True, value=number_text(mean), value_num=mean, probability=prob,
        rationale=scored[0].rationale, n_samples=len(ordered), details=details,
    )


def _categorical(
    ordered: Sequence[CallView], scored: Sequence[CallView], details: dict[str, Any],
    pass_labels: Sequence[str],
) -> CombinedVerdict:
    """The most frequent label, a tie broken by the first sample."""
    value, tie = _majority([c.value for c in scored])
    if tie:
        details["tie_break"] = "first_sample"
    prob = None
    if pass_labels:
        prob, source = _probability(scored, [c.value in pass_labels for c in scored])
        details["probability_source"] = source
    return CombinedVerdict(
        is_scored=True, value=value, value_num=None, probability=prob,
        rationale=scored[0].rationale, n_samples=len(ordered), details=details,
    )


_PAIRWISE_NUM = {"A": 1.0, "B": 0.0, "tie": 0.5}


def combine_pairwise(*, calls: Sequence[CallView]) -> CombinedVerdict:
    """Combine both presentation orders (and their samples) of one comparison."""
    ordered = sorted(calls, key=lambda c: (c.order, c.sample_index))
    records = []
    canon_by_order: dict[str, list[str]] = {"ab": [], "ba": []}
    p_a: list[float] = []
    for c in ordered:
        canon = canonical_label(presented=c.value, order=c.order) if c.status == "done" else None
        records.append(_sample_record(c, canon))
        if canon is not None:
            canon_by_order.setdefault(c.order, []).append(canon)
            if c.probability is not None:
                # The parser's probability is P(first shown wins); canonical P(A) swaps for ba.
                p_a.append(c.probability if c.order == "ab" else 1.0 - c.probability)
    details: dict[str, Any] = {"samples": records}
    orders: dict[str, str | None] = {}
    for order in ("ab", "ba"):
        labels = canon_by_order.get(order) or []
        orders[order] = _majority(labels)[0] if labels else None
    details["orders"] = orders
    missing = [o for o, v in orders.items() if v is None]
    if missing:
        return _unscored(
            ordered, f"order {'/'.join(missing)} has no scored answer; pairwise needs both", details
        )
    scored_labels = canon_by_order["ab"] + canon_by_order["ba"]
    if orders["ab"] == orders["ba"]:
        value = str(orders["ab"])
        details["position_inconsistent"] = False
    else:
        value = "tie"
        details["position_inconsistent"] = True
    n_scored = len(scored_labels)
    if len(p_a) == n_scored:
        prob = sum(p_a) / n_scored
        details["probability_source"] = "logprobs"
    else:
        prob = sum(_PAIRWISE_NUM.get(v, 0.5) for v in scored_labels) / n_scored
        details["probability_source"] = "sample_share"
    rationale = next((c.rationale for c in ordered if c.status == "done" and c.rationale), "")
    return CombinedVerdict(
        is_scored=True, value=value, value_num=_PAIRWISE_NUM[value], probability=prob,
        rationale=rationale, n_samples=len(ordered), details=details,
    )
