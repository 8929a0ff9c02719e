"""Pairwise-preference verdicts: agreement with and without ties, order consistency.

Labels follow the PandaLM convention by default: 1 = the first output (response 1) wins,
2 = the second wins, 0 = tie. *Canonical* labels refer to the outputs, not to the slots they
were shown in; use :func:`swap_labels` to map a verdict given in swapped (BA) order back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from evalstats._data import as_1d, missing_mask, paired
from evalstats.intervals import wilson_interval
from evalstats.results import CombinedVerdicts, Estimate, frozen_array

__all__ = ["combine_orders", "pairwise_agreement", "position_consistency", "swap_labels"]


def swap_labels(
    verdicts: npt.ArrayLike, *, first: Any = 1, second: Any = 2
) -> npt.NDArray[np.generic]:
    """Exchange the two winner labels (ties and missing values are unchanged).

    A verdict obtained with the outputs presented in swapped order says "first slot wins" when
    the *second* output won; swapping maps it to canonical labels.
    """
    v = as_1d(verdicts, "verdicts")
    out = v.copy()
    out[v == first] = second
    out[v == second] = first
    return out


def pairwise_agreement(
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    *,
    ties: Literal["keep", "drop"] = "keep",
    tie_label: Any = 0,
    level: float = 0.95,
) -> Estimate:
    """Share of pairs where the judge's preference equals the human's, with a Wilson interval.

    ``ties="keep"``: a tie is a third label that must match exactly.
    ``ties="drop"``: MT-Bench convention, pairs where either side says tie are removed first.
    """
    j, h, dropped = paired(judge, human, ("judge", "human"))
    warnings: list[str] = [f"{dropped} pairs with a missing verdict dropped"] if dropped else []
    if ties == "drop":
        keep = (j != tie_label) & (h != tie_label)
        warnings.append(f"{int((~keep).sum())} pairs with a tie dropped (MT-Bench convention)")
        j, h = j[keep], h[keep]
    elif ties != "keep":
        raise ValueError("ties must be 'keep' or 'drop'")
    res = wilson_interval(int(np.sum(j == h)), int(j.size), level=level)
    return dataclasses.replace(
        res,
        n_pairs=res.n_items,
        method=f"pairwise_agreement[ties={ties}]; wilson",
        warnings=tuple(warnings) + res.warnings,
    )


def position_consistency(
    verdict_ab: npt.ArrayLike, verdict_ba: npt.ArrayLike, *, level: float = 0.95
) -> Estimate:
    """Share of pairs whose canonical verdict is the same in both presentation orders.

    Both inputs must already be in canonical labels (map the BA-order verdict with
    :func:`swap_labels`). A tie in both orders counts as consistent; tie vs winner does not.
    """
    ab, ba, dropped = paired(verdict_ab, verdict_ba, ("verdict_ab", "verdict_ba"))
    res = wilson_interval(int(np.sum(ab == ba)), int(ab.size), level=level)
    warnings = (f"{dropped} pairs missing a verdict dropped",) if dropped else ()
    return dataclasses.replace(
        res,
        n_pairs=res.n_items,
        n_ratings=2 * res.n_items,
        method="position_consistency; wilson",
        warnings=warnings + res.warnings,
    )


def combine_orders(
    verdict_ab: npt.ArrayLike, verdict_ba: npt.ArrayLike, *, tie_label: Any = 0
) -> CombinedVerdicts:
    """One verdict per pair from the two orders: the label if both agree, otherwise a tie.

    Inconsistent pairs are flagged in ``inconsistent`` (a judge that flips with the order has
    no preference we can trust, which is why it becomes a tie). Pairs missing either verdict
    keep the available one and are not flagged.
    """
    ab = as_1d(verdict_ab, "verdict_ab")
    ba = as_1d(verdict_ba, "verdict_ba")
    if ab.shape != ba.shape:
        raise ValueError("verdict_ab and verdict_ba must have the same length")
    m_ab, m_ba = missing_mask(ab), missing_mask(ba)
    both = ~m_ab & ~m_ba
    inconsistent = both & (ab != ba)
    out = np.where(inconsistent, tie_label, ab)
    out = np.where(m_ab & ~m_ba, ba, out)
    n_pairs = int(both.sum())
    n_inc = int(inconsistent.sum())
    value = 1.0 - n_inc / n_pairs if n_pairs else float("nan")
    warnings = (f"{int((~both).sum())} pairs have only one order",) if (~both).any() else ()
    return CombinedVerdicts(
        labels=frozen_array(out),
        inconsistent=frozen_array(inconsistent, bool),
        value=value,
        n_items=int(ab.size),
        n_pairs=n_pairs,
        n_inconsistent=n_inc,
        warnings=warnings,
    )
