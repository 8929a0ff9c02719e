"""The selection report's decision table (docs/selection.md, "The decision table"): one pure
function from the evidence to exactly one state and its wording.

Inputs, per compared candidate: whether it has enough human labels on the primary metric, the
operational gates it fails on the deployment mix (schema validity, error rate, latency, cost,
tokens), and the status of each pre-registered threshold on the mix (pass / fail /
uncertain); then the leader's paired difference against each other eligible candidate on the
primary metric, the margin, and the ranking flips. The rows are read top to bottom; the first
that applies is the state:

1. not_enough_evidence   some candidate lacks the human labels the primary metric needs
2. no_candidate_passes_gates   every candidate fails at least one gate
3. no_candidate_meets_threshold   every candidate passing the gates fails a threshold
4. too_close   the leader does not clear the margin against another eligible candidate
5. leads_unproven   the leader's interval straddles one of its thresholds
6. ship   the leader passes every gate, meets every threshold and clears the margin

"Gate" is only ever said of the operational gates and "threshold" only of the plan's metric
thresholds. The flips are appended to the wording in every state.

Pure module: no Django, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# The states, in the order the table reads them, with their headline label.
STATES: dict[str, str] = {
    "not_enough_evidence": "Not enough evidence",
    "no_candidate_passes_gates": "No candidate passes the gates",
    "no_candidate_meets_threshold": "No candidate meets the thresholds",
    "too_close": "Too close to call",
    "leads_unproven": "Leads, but has not shown it meets a threshold",
    "ship": "Ship",
}
# A candidate needs at least this many human labels on the primary metric over the mix, and
# two in every stratum the mix weighs (one label gives no interval), before anything is
# decided.
MIN_LABELS = 5
MIN_LABELS_PER_STRATUM = 2


@dataclass(frozen=True)
class Threshold:
    """One pre-registered threshold of a candidate on the mix."""

    metric: str  # "pass_rate:correct"
    text: str  # "correct ≥ 80 %"
    status: str  # "pass" | "fail" | "uncertain"
    # Extra human labels on this candidate that would settle an uncertain status if the
    # estimate held (None: not computable, e.g. the estimate sits on the threshold).
    labels_to_settle: int | None = None


@dataclass(frozen=True)
class Contender:
    """A compared candidate as the table reads it (in ranking order on the primary metric)."""

    name: str
    n_labels: int  # human labels on the primary metric, all strata
    labels_short: int  # labels missing to reach the minimums (0: enough)
    gate_failures: tuple[str, ...] = ()  # gate names failed on the mix
    thresholds: tuple[Threshold, ...] = ()


@dataclass(frozen=True)
class Difference:
    """The leader minus one rival on the primary metric, oriented so larger is better."""

    rival: str
    value: float
    ci_low: float | None
    ci_high: float | None
    text: str  # "+12.0 points [3.1, 20.9]"


@dataclass(frozen=True)
class DecisionInputs:
    metric: str  # the primary metric's label, e.g. "Pass rate: Correct"
    margin: float
    margin_text: str
    level: float
    contenders: tuple[Contender, ...]  # ranking order, best first (by the point estimate)
    # Leader (first eligible) minus each other eligible candidate.
    differences: Mapping[str, Difference] = field(default_factory=dict)
    flips: tuple[str, ...] = ()  # "atlas is better on long"
    basis: str = "prediction-powered"  # or "human labels only"


@dataclass(frozen=True)
class DecisionOut:
    state: str
    headline: str
    text: str
    candidate: str | None
    runner_up: str | None
    labels_needed: int | None
    threshold: str | None


def _flips(inputs: DecisionInputs) -> str:
    if not inputs.flips:
        return " No ranking flip."
    return " Ranking flip" + ("s" if len(inputs.flips) > 1 else "") + ": " + \
        "; ".join(inputs.flips) + "."


def decide(inputs: DecisionInputs) -> DecisionOut:
    """The state of the decision table (module docstring) and its wording: the first state
    whose condition holds, in the table's order."""
    flips = _flips(inputs)
    cands = inputs.contenders
    short = [c for c in cands if c.labels_short > 0]
    if not cands or short:
        return _not_enough_evidence(inputs, short, flips)
    passing = [c for c in cands if not c.gate_failures]
    if not passing:
        why = "; ".join(f"{c.name} fails {', '.join(c.gate_failures)}" for c in cands)
        text = f"No candidate passes the gates ({why}).{flips}"
        return DecisionOut("no_candidate_passes_gates", "No candidate passes the gates", text,
                           None, None, None, None)
    meeting = [c for c in passing if not any(t.status == "fail" for t in c.thresholds)]
    gated_out = [c for c in cands if c.gate_failures]
    gate_note = "".join(f" {c.name} fails the gate{'s' if len(c.gate_failures) > 1 else ''} "
                        f"{', '.join(c.gate_failures)}." for c in gated_out)
    if not meeting:
        return _no_candidate_meets(passing, gate_note + flips)
    leader, others = meeting[0], meeting[1:]
    tail = gate_note + "".join(
        f" {c.name} fails the threshold "
        f"{', '.join(t.text for t in c.thresholds if t.status == 'fail')}."
        for c in passing if c not in meeting) + flips
    blocking = [o for o in others if not _clears_margin(inputs, o)]
    if blocking:
        return _too_close(inputs, leader, blocking[0], tail)
    runner = others[0].name if others else None
    unproven = [t for t in leader.thresholds if t.status == "uncertain"]
    if unproven:
        return _leads_unproven(inputs, leader, runner, unproven, tail)
    if runner is not None:
        d = inputs.differences[runner]
        why = (f"passes every gate, meets every threshold and leads {runner} on "
               f"{inputs.metric} by {d.text}, clearing the margin of {inputs.margin_text}")
    else:
        why = ("passes every gate and meets every threshold; it is the only candidate that "
               "does")
    text = f"Ship {leader.name}: it {why} ({inputs.basis}).{tail}"
    return DecisionOut("ship", f"Ship {leader.name}", text, leader.name, runner, None, None)


def _not_enough_evidence(inputs: DecisionInputs, short: list[Contender],
                         flips: str) -> DecisionOut:
    """No candidate, or one short of the labels the plan needs: how many more."""
    missing = sum(c.labels_short for c in short) if short else MIN_LABELS
    who = ", ".join(f"{c.name} has {c.n_labels}" for c in short) or "no candidate has any"
    text = (f"Not enough evidence: about {missing} more human "
            f"label{'s' if missing != 1 else ''} "
            f"on {inputs.metric} are needed before the report can decide ({who}; each "
            f"candidate needs at least {MIN_LABELS}, and {MIN_LABELS_PER_STRATUM} in every "
            f"stratum of the mix).{flips}")
    return DecisionOut("not_enough_evidence", "Not enough evidence", text, None, None,
                       missing, None)


def _no_candidate_meets(passing: list[Contender], tail: str) -> DecisionOut:
    """Every candidate past the gates fails a threshold: which thresholds, by whom."""
    failed: list[str] = []
    for c in passing:
        for t in c.thresholds:
            if t.status == "fail" and t.text not in failed:
                failed.append(t.text)
    which = " and ".join(failed)
    detail = "; ".join(
        f"{c.name} fails {', '.join(t.text for t in c.thresholds if t.status == 'fail')}"
        for c in passing)
    text = f"No candidate meets {which} ({detail}).{tail}"
    return DecisionOut("no_candidate_meets_threshold", f"No candidate meets {which}", text,
                       None, None, None, which)


def _clears_margin(inputs: DecisionInputs, rival: Contender) -> bool:
    """Whether the leader's paired difference over `rival` clears the margin at the level."""
    d = inputs.differences.get(rival.name)
    if d is None or d.ci_low is None or d.ci_high is None:
        return False
    return min(d.ci_low, d.ci_high) > inputs.margin


def _too_close(inputs: DecisionInputs, leader: Contender, rival: Contender,
               tail: str) -> DecisionOut:
    d = inputs.differences.get(rival.name)
    diff = f" by {d.text}" if d is not None else " (no paired difference)"
    text = (f"Too close to call: {leader.name} leads {rival.name} on {inputs.metric}"
            f"{diff}, which does not clear the margin of {inputs.margin_text} at the "
            f"planned {inputs.level * 100:g} %.{tail}")
    return DecisionOut("too_close", "Too close to call", text, leader.name, rival.name,
                       None, None)


def _leads_unproven(inputs: DecisionInputs, leader: Contender, runner: str | None,
                    unproven: list[Threshold], tail: str) -> DecisionOut:
    """The leader's interval straddles a threshold: how many labels would settle it."""
    which = " and ".join(t.text for t in unproven)
    counts = [t.labels_to_settle for t in unproven]
    if all(n is not None for n in counts):
        need: int | None = max(n for n in counts if n is not None)
        settle = (f"about {need} more human label{'s' if need != 1 else ''} on "
                  f"{leader.name} would settle it if the estimate held")
    else:
        need = None
        settle = ("its estimate sits on the threshold: more labels may not settle it")
    lead = (f" over {runner}" if runner else
            " (the only candidate passing the gates and not failing a threshold)")
    text = (f"{leader.name} leads{lead}, but has not shown it meets {which}: its "
            f"{inputs.level * 100:g} % interval straddles the threshold; {settle}.{tail}")
    return DecisionOut("leads_unproven", f"{leader.name} leads, but has not shown it "
                       f"meets {which}", text, leader.name, runner, need, which)


def labels_to_settle(value: float, se: float | None, n: int, threshold: float,
                     level_z: float) -> int | None:
    """Extra labels so that the interval half-width z * se * sqrt(n / (n + k)) falls below
    the estimate's distance to the threshold (the estimate held, the spread scaling as
    1 / sqrt(n)); None when the estimate sits on the threshold or nothing is known."""
    gap = abs(value - threshold)
    if se is None or not math.isfinite(se) or se <= 0 or n <= 0 or gap <= 1e-9:
        return None
    needed = n * (level_z * se / gap) ** 2
    return max(1, math.ceil(needed - n))


__all__ = ["MIN_LABELS", "MIN_LABELS_PER_STRATUM", "STATES", "Contender", "DecisionInputs",
           "DecisionOut", "Difference", "Threshold", "decide", "labels_to_settle"]
