"""Bootstrap intervals of multi-rater coefficients: Fleiss' kappa, Gwet's AC1, percent agreement."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from evalstats import _kernels as K
from evalstats._data import (
    as_2d,
    encode,
    resolve_categories,
    small_n_warning,
)
from evalstats.bootstrap._engine import FloatArray, StatFn, _ratio_fn, bootstrap_from_item_stats
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

# ---------------------------------------------------------------------------------------------
# Multi-rater coefficients: per-item category counts are the sufficient statistics
# ---------------------------------------------------------------------------------------------


def _item_counts(
    reliability_data: npt.ArrayLike, categories: Sequence[object] | npt.ArrayLike | None
) -> tuple[FloatArray, FloatArray, int]:
    """Items x categories counts, ratings per item, and the number of categories."""
    data = as_2d(reliability_data)
    cats = resolve_categories(categories, data)
    counts = K.value_counts(encode(data, cats), len(cats))
    return counts, counts.sum(axis=1), len(cats)


def _pair_agreement(counts: FloatArray, m: FloatArray) -> FloatArray:
    """Share of agreeing ordered rater pairs of each item (0/0 = NaN for m < 2)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((counts * (counts - 1.0)).sum(axis=1) / (m * (m - 1.0)), dtype=np.float64)


class _MultiRaterStats(NamedTuple):
    """Per-item statistics of a multi-rater coefficient (private; the tests rebuild resamples).

    ``items`` are the columns of the reliability data that the rows of ``item_stats`` describe.
    """

    item_stats: FloatArray
    fn: StatFn
    items: npt.NDArray[np.int64]
    n_ratings: int
    warnings: tuple[str, ...]
    n_pairs: int | None = None


def _fleiss_stats(
    reliability_data: npt.ArrayLike, categories: Sequence[object] | npt.ArrayLike | None
) -> _MultiRaterStats:
    counts, m, _ = _item_counts(reliability_data, categories)
    keep = m >= 2
    warnings: list[str] = []
    if keep.size and not keep.all():
        warnings.append(f"{int((~keep).sum())} items with fewer than two ratings dropped")
    counts, m = counts[keep], m[keep]
    if m.size and m.min() != m.max():
        warnings.append("varying number of ratings per item: generalised Fleiss formula used")
    item_stats = np.column_stack([np.ones(m.size), _pair_agreement(counts, m), counts])

    def fn(s: FloatArray) -> FloatArray:
        cat = s[..., 2:]
        with np.errstate(divide="ignore", invalid="ignore"):
            p_bar = s[..., 1] / s[..., 0]
            p_e = ((cat / cat.sum(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
            return np.asarray((p_bar - p_e) / (1.0 - p_e), dtype=np.float64)

    return _MultiRaterStats(item_stats, fn, np.flatnonzero(keep), int(m.sum()), tuple(warnings))


def _gwet_multi_stats(
    reliability_data: npt.ArrayLike, categories: Sequence[object] | npt.ArrayLike | None
) -> _MultiRaterStats:
    counts, m, q = _item_counts(reliability_data, categories)
    rated = m >= 1
    counts, m = counts[rated], m[rated]
    pair = (m >= 2).astype(np.float64)
    p_i = np.where(pair > 0, _pair_agreement(counts, m), 0.0)
    item_stats = np.column_stack([pair, pair * p_i, np.ones(m.size), counts / m[:, None]])

    def fn(s: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            pa = s[..., 1] / s[..., 0]
            pi = s[..., 3:] / s[..., 2:3]
            pe = (pi * (1.0 - pi)).sum(axis=-1) / (q - 1.0)
            return np.asarray((pa - pe) / (1.0 - pe), dtype=np.float64)

    return _MultiRaterStats(item_stats, fn, np.flatnonzero(rated), int(m.sum()), ())


def _agreement_multi_stats(reliability_data: npt.ArrayLike, mode: str) -> _MultiRaterStats:
    if mode not in ("pairwise", "all"):
        raise ValueError("mode must be 'pairwise' or 'all'")
    counts, m, _ = _item_counts(reliability_data, None)
    keep = m >= 2
    counts, m = counts[keep], m[keep]
    if mode == "pairwise":
        per_item = _pair_agreement(counts, m)
    else:
        per_item = (counts.max(axis=1, initial=0.0) == m).astype(np.float64)
    item_stats = np.column_stack([np.ones(m.size), per_item])
    n_pairs = int((m * (m - 1.0) / 2.0).sum())
    return _MultiRaterStats(item_stats, _ratio_fn, np.flatnonzero(keep), int(m.sum()), (), n_pairs)


def bootstrap_fleiss_kappa(
    reliability_data: npt.ArrayLike,
    *,
    categories: Sequence[object] | npt.ArrayLike | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Fleiss' kappa (raters x items, NaN missing) with an item-clustered bootstrap interval.

    Point estimate and warnings as :func:`evalstats.fleiss_kappa` (items with fewer than two
    ratings dropped; the generalised formula when raters per item vary). Per item the
    sufficient statistics are [1, P_i, n_i1..n_ic] (P_i = agreeing share of its rater pairs),
    so kappa = (sum P_i / n - sum_k p_k^2) / (1 - sum_k p_k^2), p_k = sum_i n_ik / sum_i m_i;
    items with the same count vector are grouped before the multinomial draw.
    """
    st = _fleiss_stats(reliability_data, categories)
    return bootstrap_from_item_stats(
        st.item_stats,
        st.fn,
        rng=rng,
        options=options,
        method="fleiss_kappa",
        n_ratings=st.n_ratings,
        extra_warnings=st.warnings,
    )


def bootstrap_gwet_ac1_multi(
    reliability_data: npt.ArrayLike,
    *,
    categories: Sequence[object] | npt.ArrayLike | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Gwet's AC1 for any number of raters (as :func:`evalstats.gwet_ac1_multi`) with a bootstrap.

    Every item with at least one rating is resampled: items with a single rating do not enter
    pa but do enter the category shares pi_k. Per item the statistics are
    [has_pair, has_pair * P_i, 1, share_i1..share_iq]. ``n_items`` (and the small-sample
    warning) count the items with two or more ratings, as in the point function.
    """
    st = _gwet_multi_stats(reliability_data, categories)
    n_pair = int(st.item_stats[:, 0].sum())
    res = bootstrap_from_item_stats(
        st.item_stats,
        st.fn,
        rng=rng,
        # The small-sample warning counts items with a pair, not every resampled item.
        options=dataclasses.replace(options, min_items=0),
        method="gwet_ac1_multi",
        n_ratings=st.n_ratings,
        extra_warnings=small_n_warning(n_pair, options.min_items),
    )
    return dataclasses.replace(res, n_items=n_pair)


def bootstrap_percent_agreement_multi(
    reliability_data: npt.ArrayLike,
    *,
    mode: Literal["pairwise", "all"] = "pairwise",
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """:func:`evalstats.percent_agreement_multi` with an item-clustered bootstrap interval.

    Items with at least two ratings are resampled; per item [1, agreement of the item] (share
    of agreeing rater pairs for ``mode="pairwise"``, unanimity for ``mode="all"``).
    """
    st = _agreement_multi_stats(reliability_data, mode)
    res = bootstrap_from_item_stats(
        st.item_stats,
        st.fn,
        rng=rng,
        options=options,
        method=f"percent_agreement[{mode}]",
        n_ratings=st.n_ratings,
    )
    return dataclasses.replace(res, n_pairs=st.n_pairs)
