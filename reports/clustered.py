"""Glue: item-clustered bootstrap intervals for report cells, on top of evalstats.

evalstats' bootstrap functions resample the rows they are given. In a report one *item* can
carry several subjects (one output per candidate, or several comparisons), and the issue asks
for intervals clustered by item: all ratings of an item move together. evalstats' engine
`bootstrap_from_item_stats` already resamples rows of summed sufficient statistics, so the
clustering is done here by summing each subject's statistics over its item first; the
coefficient formulas come from evalstats (its vectorised kernels and `alpha_item_stats`).

Gaps in evalstats that this module papers over (listed in the hand-over report): a
``clusters=`` argument on the bootstrap functions, public vectorised kernels, and vectorised
Gwet AC1 / macro-F1 / agreement-without-ties kernels over confusion matrices (the three small
formulas below, checked against `evalstats.gwet_ac1`, `evalstats.classification_report` and
`evalstats.pairwise_agreement` in tests/reports/test_clustered.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pandas as pd

import evalstats as es
from evalstats import _kernels as kernels
from evalstats.agreement import alpha_item_stats
from evalstats.intervals import percentile_interval

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
StatFn = Callable[[FloatArray], FloatArray]


def item_sums(stats: FloatArray, items: IntArray) -> FloatArray:
    """Sum per-subject statistic rows (n_subjects x k) over their items (n_items x k)."""
    _, inverse = np.unique(items, return_inverse=True)
    n_items = int(inverse.max()) + 1 if inverse.size else 0
    out = np.zeros((n_items, stats.shape[1]))
    np.add.at(out, inverse, stats)
    return out


def one_hot_cells(cells: IntArray, n_cells: int, items: IntArray) -> FloatArray:
    """Per-item counts of confusion cells (n_items x n_cells) without a dense n x k one-hot."""
    _, inverse = np.unique(items, return_inverse=True)
    n_items = int(inverse.max()) + 1 if inverse.size else 0
    flat = np.bincount(inverse * n_cells + cells, minlength=n_items * n_cells)
    return flat.reshape(n_items, n_cells).astype(np.float64)


# --- statistics of summed confusion matrices (rows = reference, columns = judge) ------------


def kappa_fn(c: int, weights: str | None) -> StatFn:
    w = kernels.weight_matrix(c, weights)

    def fn(s: FloatArray) -> FloatArray:
        return kernels.kappa_from_confusion(s.reshape(*s.shape[:-1], c, c), w)

    return fn


def accuracy_fn(c: int) -> StatFn:
    def fn(s: FloatArray) -> FloatArray:
        return kernels.accuracy_from_confusion(s.reshape(*s.shape[:-1], c, c))

    return fn


def ac1_fn(c: int) -> StatFn:
    """Gwet's AC1 from confusion counts: pe = sum_k pi_k (1 - pi_k) / (q - 1)."""

    def fn(s: FloatArray) -> FloatArray:
        m = s.reshape(*s.shape[:-1], c, c)
        n = m.sum(axis=(-2, -1))
        with np.errstate(divide="ignore", invalid="ignore"):
            pa = np.trace(m, axis1=-2, axis2=-1) / n
            pi = (m.sum(axis=-1) + m.sum(axis=-2)) / (2.0 * n[..., None])
            pe = (pi * (1.0 - pi)).sum(axis=-1) / (c - 1)
            return np.asarray((pa - pe) / (1.0 - pe), dtype=np.float64)

    return fn


def macro_f1_fn(c: int) -> StatFn:
    """Macro F1 over all c labels with sklearn's zero_division=0 convention."""

    def fn(s: FloatArray) -> FloatArray:
        m = s.reshape(*s.shape[:-1], c, c)
        tp = np.diagonal(m, axis1=-2, axis2=-1)
        pred = m.sum(axis=-2)
        true = m.sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(pred > 0, tp / pred, 0.0)
            r = np.where(true > 0, tp / true, 0.0)
            f = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
        return np.asarray(f.mean(axis=-1), dtype=np.float64)

    return fn


def agreement_without_ties_fn(c: int, tie: int) -> StatFn:
    """Agreement after dropping pairs where either side is a tie (the MT-Bench convention)."""
    keep = np.ones((c, c), dtype=bool)
    keep[tie, :] = False
    keep[:, tie] = False
    diag = np.eye(c, dtype=bool) & keep

    def fn(s: FloatArray) -> FloatArray:
        m = s.reshape(*s.shape[:-1], c, c)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(
                (m * diag).sum(axis=(-2, -1)) / (m * keep).sum(axis=(-2, -1)), dtype=np.float64
            )

    return fn


def ratio_fn(s: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0], dtype=np.float64)


def diff_of_means_fn(s: FloatArray) -> FloatArray:
    """[n_1, sum_1, n_0, sum_0] -> mean_1 - mean_0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0] - s[..., 3] / s[..., 2], dtype=np.float64)


def bootstrap(
    item_stats: FloatArray,
    fn: StatFn,
    *,
    rng: np.random.Generator,
    n_resamples: int,
    ci: str,
    level: float,
    min_items: int,
    method: str,
    n_subjects: int,
) -> es.Estimate:
    """evalstats' vectorised engine over per-item statistics, labelled as item-clustered."""
    est = es.bootstrap_from_item_stats(
        item_stats,
        fn,
        n_resamples=n_resamples,
        rng=rng,
        ci=ci,  # type: ignore[arg-type]
        level=level,
        min_items=min_items,
        method=method,
    )
    return es.Estimate(
        **{
            **est.__dict__,
            "n_ratings": n_subjects,
            "method": est.method.replace("items resampled", "clustered by item"),
        }
    )


def alpha_clustered(
    data: FloatArray,
    items: IntArray,
    *,
    level_of_measurement: str,
    value_domain: list[float] | None,
    rng: np.random.Generator,
    n_resamples: int,
    ci: str,
    level: float,
    min_items: int,
) -> es.Estimate | None:
    """Krippendorff's alpha interval with units (subjects) clustered by item.

    The point estimate is computed by the caller with `evalstats.krippendorff_alpha` (the
    `krippendorff` package); this gives the interval from evalstats' per-unit statistics.
    """
    pairable = (~np.isnan(data)).sum(axis=0) >= 2
    if pairable.sum() < 2:
        return None
    stats, fn = alpha_item_stats(data[:, pairable], level_of_measurement, value_domain)
    per_item = item_sums(np.asarray(stats, dtype=np.float64), items[pairable])
    return bootstrap(
        per_item,
        fn,
        rng=rng,
        n_resamples=n_resamples,
        ci=ci,
        level=level,
        min_items=min_items,
        method=f"krippendorff_alpha[{level_of_measurement}]",
        n_subjects=int(pairable.sum()),
    )


def mean_pairwise_kappa(
    codes: FloatArray,
    n_categories: int,
    weights: str | None,
    min_shared: int,
    pairs_out: list[tuple[int, int, float, int]] | None = None,
) -> tuple[float | None, int]:
    """Mean Cohen's kappa over rater pairs sharing at least `min_shared` subjects.

    ``codes`` is raters x subjects of category indices (NaN = not rated). All pairs' confusion
    matrices come from one tensor product; kappa is evalstats' vectorised kernel.
    """
    r, n = codes.shape
    if r < 2 or n == 0:
        return None, 0
    onehot = np.zeros((r, n_categories, n))
    present = ~np.isnan(codes)
    rr, ss = np.nonzero(present)
    onehot[rr, codes[present].astype(np.int64), ss] = 1.0
    # One matrix product gives every pair's confusion matrix: (r*c x n) @ (n x r*c).
    flat = onehot.reshape(r * n_categories, n)
    conf = (flat @ flat.T).reshape(r, n_categories, r, n_categories).transpose(0, 2, 1, 3)
    iu, ju = np.triu_indices(r, k=1)
    pair_conf = conf[iu, ju]
    shared = pair_conf.sum(axis=(-2, -1))
    use = shared >= max(2, min_shared)
    if not use.any():
        return None, 0
    kappas = kernels.kappa_from_confusion(
        pair_conf[use], kernels.weight_matrix(n_categories, weights)
    )
    if pairs_out is not None:
        for a, b, k, m in zip(iu[use], ju[use], kappas, shared[use], strict=True):
            pairs_out.append((int(a), int(b), float(k), int(m)))
    kappas = kappas[np.isfinite(kappas)]
    if kappas.size == 0:
        return None, 0
    return float(kappas.mean()), int(kappas.size)


def rank_corr_rows(x: FloatArray, y: FloatArray, method: str) -> FloatArray:
    """Kendall tau-b or Spearman rho of each row pair of (B x m) arrays, for small m.

    Used for the system-level bootstrap (m = number of candidates): every resample gives one
    vector of candidate means, and the B correlations are computed at once.
    """
    if method == "kendall":
        iu, ju = np.triu_indices(x.shape[1], k=1)
        sx = np.sign(x[:, iu] - x[:, ju])
        sy = np.sign(y[:, iu] - y[:, ju])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(
                (sx * sy).sum(axis=1) / np.sqrt((sx**2).sum(axis=1) * (sy**2).sum(axis=1)),
                dtype=np.float64,
            )
    from scipy.stats import rankdata

    rx = rankdata(x, axis=1)
    ry = rankdata(y, axis=1)
    if method == "spearman":
        x, y = rx, ry
    dx = x - x.mean(axis=1, keepdims=True)
    dy = y - y.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(
            (dx * dy).sum(axis=1) / np.sqrt((dx**2).sum(axis=1) * (dy**2).sum(axis=1)),
            dtype=np.float64,
        )


def coarsen(
    x: FloatArray, other: FloatArray, max_cells: int = 1024, bins: int = 20
) -> tuple[FloatArray, bool]:
    """Quantile bins of `x` when (distinct x) x (distinct other) is too large for the table route.

    Spearman on quantile bins keeps the ranking of `x` (ties within a bin) and lets evalstats
    bootstrap with contingency tables instead of recomputing ranks per resample.
    """
    if np.unique(x).size * np.unique(other).size <= max_cells:
        return x, False
    max_bins = max(2, max_cells // max(1, np.unique(other).size))
    codes = pd.qcut(pd.Series(x).rank(method="first"), q=min(bins, max_bins), labels=False)
    return np.asarray(codes, dtype=np.float64), True


def percentile(boot: FloatArray, level: float) -> tuple[float | None, float | None]:
    boot = boot[np.isfinite(boot)]
    if boot.size < 2:
        return None, None
    return percentile_interval(boot, level)
