"""Pairwise verdicts given in both presentation orders: per-order accuracy, its mean,
order-consistent accuracy and positional agreement.

A judge that saw each pair twice (A first, then B first) has two verdicts per pair, both in
canonical labels (tie 0, A 1, B 2; map a swapped-order verdict with
:func:`evalstats.swap_labels` first). Papers that swap orders report:

* **per-order accuracy** against a reference (e.g. the human majority), one per order, and
  their **mean** (accuracy averaged over the two orders: LLMBar, Zeng et al. ICLR 2024;
  MT-Bench's "average" over swapped positions);
* **order-consistent accuracy**: both orders equal the reference (a verdict that flips with
  the order counts as wrong);
* **positional agreement**: both orders name the same label (LLMBar's positional agreement
  rate; 1 - the flip rate of :func:`evalstats.position_bias`).

Unparseable verdicts (NaN) are handled as the literature does, by ``unparseable``: ``"miss"``
(never correct, never agreeing), ``"tie"`` (read as a tie), or ``"drop"`` (each figure on the
pairs whose verdicts it needs are parseable). Intervals resample items: each pair contributes
its counts, summed per item, and every figure is a function of the sums.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from evalstats.clustered import bootstrap_clustered, item_sums
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = ["OrderAccuracy", "Unparseable", "order_accuracy"]

FloatArray = npt.NDArray[np.float64]
Unparseable = Literal["miss", "tie", "drop"]
StatFn = Callable[[FloatArray], FloatArray]


@dataclass(frozen=True, kw_only=True)
class OrderAccuracy:
    """The five figures of :func:`order_accuracy`, and how many verdicts were unparseable."""

    accuracy_ab: Estimate
    accuracy_ba: Estimate
    accuracy_mean: Estimate
    accuracy_consistent: Estimate
    positional_agreement: Estimate
    n_pairs: int
    n_unparseable_ab: int
    n_unparseable_ba: int
    unparseable: str


def _ratio(num: int, den: int) -> StatFn:
    def fn(s: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(s[..., num] / s[..., den], dtype=np.float64)

    return fn


def _mean_of_two(s: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((s[..., 1] / s[..., 0] + s[..., 3] / s[..., 2]) / 2.0, dtype=np.float64)


def order_accuracy(
    verdict_ab: npt.ArrayLike,
    verdict_ba: npt.ArrayLike,
    reference: npt.ArrayLike,
    items: npt.ArrayLike,
    *,
    unparseable: Unparseable = "miss",
    tie_category: float = 0.0,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> OrderAccuracy:
    """Per-order accuracy, its mean, order-consistent accuracy and positional agreement.

    ``verdict_ab`` / ``verdict_ba`` are canonical codes per pair (NaN: unparseable),
    ``reference`` the reference code per pair (no NaN), ``items[i]`` the item of pair i.
    Estimates: ``n_items`` is the number of pairs the figure counts; intervals are clustered
    by item (none below two pairs).
    """
    ab = np.asarray(verdict_ab, dtype=np.float64)
    ba = np.asarray(verdict_ba, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    items_arr = np.asarray(items)
    if not (ab.shape == ba.shape == ref.shape == items_arr.shape) or ab.ndim != 1:
        raise ValueError("verdicts, reference and items must be 1-D of the same length")
    if unparseable not in ("miss", "tie", "drop"):
        raise ValueError("unparseable must be 'miss', 'tie' or 'drop'")
    if np.isnan(ref).any():
        raise ValueError("reference must have no missing values")
    bad_ab, bad_ba = np.isnan(ab), np.isnan(ba)
    if unparseable == "tie":
        ab = np.where(bad_ab, tie_category, ab)
        ba = np.where(bad_ba, tie_category, ba)
        ok_ab = ok_ba = np.ones(ab.size, dtype=bool)
    elif unparseable == "miss":
        ok_ab = ok_ba = np.ones(ab.size, dtype=bool)  # NaN never equals anything
    else:
        ok_ab, ok_ba = ~bad_ab, ~bad_ba
    ok_both = ok_ab & ok_ba
    hit_ab = ab == ref
    hit_ba = ba == ref
    stats = np.column_stack(
        [ok_ab, ok_ab & hit_ab, ok_ba, ok_ba & hit_ba, ok_both, ok_both & hit_ab & hit_ba,
         ok_both & (ab == ba)]
    ).astype(np.float64)
    per_item = item_sums(stats, items_arr)
    total = stats.sum(axis=0)
    n = int(ab.size)

    def figure(fn: StatFn, n_counted: float, name: str) -> Estimate:
        point = float(fn(total[None, :])[0]) if n_counted else float("nan")
        method = f"{name}[unparseable={unparseable}]"
        if n < 2 or not n_counted:
            return Estimate(value=point, n_items=int(n_counted), method=method)
        est = bootstrap_clustered(
            per_item, fn, n_subjects=n, rng=rng, options=options, method=method
        )
        return dataclasses.replace(est, value=point, n_items=int(n_counted), n_ratings=n)

    return OrderAccuracy(
        accuracy_ab=figure(_ratio(1, 0), total[0], "accuracy_order_ab"),
        accuracy_ba=figure(_ratio(3, 2), total[2], "accuracy_order_ba"),
        accuracy_mean=figure(_mean_of_two, min(total[0], total[2]), "accuracy_mean_of_orders"),
        accuracy_consistent=figure(_ratio(5, 4), total[4], "accuracy_order_consistent"),
        positional_agreement=figure(_ratio(6, 4), total[4], "positional_agreement"),
        n_pairs=n,
        n_unparseable_ab=int(bad_ab.sum()),
        n_unparseable_ba=int(bad_ba.sum()),
        unparseable=unparseable,
    )
