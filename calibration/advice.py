"""What to do next, in words, from a calibration snapshot's result (the lead's calibration page).

Pure: reads the result JSON (docs/calibration.md) and imports no Django, so it is tested on
hand-built results.

"Label N more" comes from the shrinkage itself. Empirical-Bayes partial pooling gives a stratum
with n own labels the weight w = n / (n + k) on its own curve, where k (the ratio of the
within-stratum to the between-strata variance) is the same for every stratum of a fit; so a
stratum's k = n (1 - w) / w, and it needs n* = k * W / (1 - W) labels to put weight W on its own
data. We aim at W = 1/2 (the curve borrows at most half from the pool) and never below the
minimum labels a cell needs to be fitted at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_MIN_LABELS = 10
# The own weight a stratum's curve should reach before we stop asking for labels.
TARGET_OWN_WEIGHT = 0.5
# Below this own weight the curve is mostly the pool's: worth saying so.
BORROWED_NOTE = 0.5
# Expected calibration error (after calibration) above which the curve is still off.
ECE_WARN = 0.1


def stratum_text(stratum: str) -> str:
    """A cell label for people: "" is the whole study; "a=x|b=y" reads "a=x, b=y"."""
    return "whole study" if not stratum else stratum.replace("|", ", ")


def labels_needed(*, n: int, own_weight: float | None, min_labels: int,
                  target: float = TARGET_OWN_WEIGHT) -> int:
    """More labels a stratum needs so that its own curve carries `target` of the weight (and
    it has at least `min_labels`); 0 when it has enough. With no own weight to extrapolate from
    (n = 0, or a weight of 0 or 1) only the minimum counts."""
    floor = max(0, min_labels - n)
    if own_weight is None or n <= 0 or not 0.0 < own_weight < 1.0 or own_weight >= target:
        return floor
    k = n * (1.0 - own_weight) / own_weight
    wanted = math.ceil(k * target / (1.0 - target) - 1e-9)
    return max(floor, wanted - n)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _est(value: Any) -> float | None:
    """The point of an Estimate's JSON (or a bare number)."""
    if isinstance(value, Mapping):
        return _num(value.get("value"))
    return _num(value)


def _cell_name(cell: Mapping[str, Any]) -> str:
    judge = str(cell.get("judge") or f"judge version {cell.get('judge_version')}")
    return f"{judge} · {cell.get('criterion', '?')} · {stratum_text(str(cell.get('stratum', '')))}"


def _label_advice(cell: Mapping[str, Any], min_labels: int, tau_zero: bool) -> str | None:
    n = int(_num(cell.get("n_labels")) or 0)
    name = _cell_name(cell)
    if cell.get("too_few_labels"):
        more = max(1, min_labels - n)
        return (f"{name}: {n} human labels, fewer than the {min_labels} a curve needs, so no "
                f"curve was fitted; label {more} more.")
    borrowed = _num(cell.get("borrowed"))
    own = _num(cell.get("own_weight"))
    if cell.get("pooled_only"):
        more = labels_needed(n=n, own_weight=own, min_labels=min_labels)
        return (f"{name}: {n} human labels, so the pooled curve is used as is; label "
                f"{max(more, 1)} more to give it its own.")
    if borrowed is None or borrowed < BORROWED_NOTE:
        return None
    if tau_zero or own == 0.0:
        return (f"{name}: {n} human labels, curve borrowed {round(borrowed * 100)} % from the "
                "pool; the strata show no difference from the pool so far, so the pooled curve "
                "serves it.")
    more = labels_needed(n=n, own_weight=own, min_labels=min_labels)
    if more <= 0:
        return None
    return (f"{name}: {n} human labels, curve borrowed {round(borrowed * 100)} % from the pool; "
            f"label {more} more.")


def cell_labels_wanted(cell: Mapping[str, Any], *, min_labels: int = DEFAULT_MIN_LABELS,
                       tau_zero: bool = False) -> tuple[int, str]:
    """How many more human labels one cell wants, and why, in words for the calibration table.

    Two different targets give very different numbers, which is why they are spelled out: a
    cell with no curve needs only the minimum a curve is fitted from (say 9 more), while a
    cell whose curve leans on the pool needs enough labels for its own data to carry half of
    its curve, which grows with how little its stratum differs from the pool (possibly
    thousands). (0, reason) when the cell wants none."""
    n = int(_num(cell.get("n_labels")) or 0)
    own = _num(cell.get("own_weight"))
    borrowed = _num(cell.get("borrowed"))
    if cell.get("too_few_labels"):
        return (max(1, min_labels - n),
                f"to reach the {min_labels} labels a curve is fitted from (no curve yet)")
    if cell.get("pooled_only"):
        more = max(1, labels_needed(n=n, own_weight=own, min_labels=min_labels))
        return more, "to fit a curve of its own instead of the pooled one"
    if borrowed is None or borrowed < BORROWED_NOTE:
        return 0, "none: its own labels carry most of its curve"
    if tau_zero or own == 0.0:
        return 0, ("none: the strata do not differ from the pool so far, so the pooled curve "
                   "serves it")
    more = labels_needed(n=n, own_weight=own, min_labels=min_labels)
    if more <= 0:
        return 0, "none: its own labels carry half of its curve"
    share = f"{(own or 0.0) * 100:.0f} %"
    return (more, f"until its own labels carry half of its curve (now {share}; the rest is "
                  "borrowed from the pool of all strata, and the less this stratum differs "
                  "from the pool, the more labels that takes)")


def min_labels_of(result_json: Mapping[str, Any]) -> int:
    """The snapshot's minimum labels per cell (its params), or the default."""
    params = result_json.get("params") if isinstance(result_json.get("params"), Mapping) else {}
    min_labels = params.get("min_labels") if isinstance(params, Mapping) else None
    if not isinstance(min_labels, int) or isinstance(min_labels, bool) or min_labels < 1:
        return DEFAULT_MIN_LABELS
    return min_labels


def pooled_without_variance(result_json: Mapping[str, Any]) -> bool:
    """Every stratum borrows everything: the fit found no between-strata variance."""
    cells = [c for c in (result_json.get("cells") or []) if isinstance(c, Mapping)]
    own = [_num(c.get("own_weight")) for c in cells if c.get("stratum")]
    return bool(own) and all(w == 0.0 for w in own)


def _cost_advice(cell: Mapping[str, Any], unit: str) -> str | None:
    pc = cell.get("policy_costs")
    if not isinstance(pc, Mapping):
        return None
    raw, cal, human = _est(pc.get("raw")), _est(pc.get("calibrated")), _est(pc.get("human_only"))
    if raw is None or cal is None:
        return None
    name = _cell_name(cell)
    if cal < raw:
        tail = f" (humans only: {human:,.0f})" if human is not None else ""
        return (f"{name}: calibrated decisions cost {cal:,.0f} {unit} per 1,000 outputs against "
                f"{raw:,.0f} for raw verdicts{tail}; use the calibrated decisions.")
    if human is not None and human < cal:
        return (f"{name}: humans alone cost less ({human:,.0f} {unit} per 1,000 outputs) than "
                f"the judge ({cal:,.0f} calibrated, {raw:,.0f} raw); do not rely on this judge "
                "here.")
    return None


def _trust_advice(cell: Mapping[str, Any]) -> str | None:
    trust = cell.get("trust")
    if not isinstance(trust, Mapping):
        return None
    alpha = _num(trust.get("alpha"))
    level = f"{(1 - alpha) * 100:g} %" if alpha is not None else "the required level"
    name = _cell_name(cell)
    if trust.get("threshold") is None:
        return (f"{name}: no confidence threshold guarantees {level} agreement with humans; "
                "every output is escalated. Label more, or relax alpha in the plan's policy.")
    coverage = _num(trust.get("coverage"))
    if coverage is not None and coverage < 0.5:
        return (f"{name}: the judge is trusted on only {coverage * 100:.0f} % of outputs at "
                f"{level} guaranteed agreement; the rest go to humans.")
    return None


def _ece_after(cell: Mapping[str, Any]) -> float | None:
    diag = cell.get("diagnostics")
    after = diag.get("after") if isinstance(diag, Mapping) else None
    return _est(after.get("ece")) if isinstance(after, Mapping) else None


def calibration_advice(result_json: Mapping[str, Any]) -> list[str]:
    """Sentences saying what a lead should do next, the most pressing first: cells without a
    curve, cells leaning on the pool, cells still miscalibrated, what the calibrated policy saves
    or costs, the guaranteed-agreement policy's coverage, and default costs."""
    cells: Sequence[Mapping[str, Any]] = [
        c for c in (result_json.get("cells") or []) if isinstance(c, Mapping)
    ]
    min_labels = min_labels_of(result_json)
    costs = result_json.get("costs") if isinstance(result_json.get("costs"), Mapping) else {}
    unit = str(costs.get("unit") or "points") if isinstance(costs, Mapping) else "points"
    if not cells:
        return ["No calibration cells yet: run a judge and collect human labels on the same "
                "outputs, then build a new calibration snapshot."]
    tau_zero = pooled_without_variance(result_json)
    labels, quality, money, trust = [], [], [], []
    for cell in cells:
        if (text := _label_advice(cell, min_labels, tau_zero)) is not None:
            labels.append(text)
        ece = _ece_after(cell)
        if ece is not None and ece > ECE_WARN and not cell.get("too_few_labels"):
            quality.append(f"{_cell_name(cell)}: still {ece:.2f} expected calibration error after "
                           "calibration; more human labels would tighten the curve.")
        if (text := _cost_advice(cell, unit)) is not None:
            money.append(text)
        if (text := _trust_advice(cell)) is not None:
            trust.append(text)
    out = labels + quality + money + trust
    cascade = result_json.get("cascade")
    coverage = _num(cascade.get("coverage")) if isinstance(cascade, Mapping) else None
    if isinstance(cascade, Mapping) and coverage is not None:
        level = _num(cascade.get("guaranteed_level")) or 0.0
        out.append(f"The judge cascade decides {coverage * 100:.0f} % of outputs without humans "
                   f"at a guaranteed agreement of {level * 100:.0f} %.")
    if isinstance(costs, Mapping) and costs.get("is_default"):
        out.append("Costs are the documented defaults: set the analysis plan's costs section "
                   "(severity 1-5, false fail, review) in your own unit so the decisions "
                   "reflect what errors cost you.")
    if not out:
        out.append("Every cell has enough human labels and a curve of its own; nothing to do "
                   "until the data change.")
    return list(dict.fromkeys(out))


__all__ = ["calibration_advice", "cell_labels_wanted", "labels_needed", "min_labels_of",
           "pooled_without_variance", "stratum_text"]
