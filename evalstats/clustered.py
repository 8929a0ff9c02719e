"""Clustered bootstrap over items when one item carries several rated subjects.

In an evaluation an *item* (an input) often carries several *subjects* that are rated: one
output per candidate, several pairwise comparisons, ten stories per prompt. Ratings of one item
are dependent, so intervals resample items with all their subjects ("clustered by item").

Every coefficient here is a function of summed sufficient statistics. Per-subject statistic rows
are summed over their item first (:func:`item_sums`, or :func:`item_cell_counts` for
contingency cells), and :func:`bootstrap_clustered` resamples those per-item rows with the
vectorised engine :func:`evalstats.bootstrap_from_item_stats`. With one subject per item this is
exactly the ordinary item bootstrap (the same draws for the same ``rng``).

Building blocks (``StatFn`` factories over flattened c x c count tables, rows = reference,
columns = judge): :func:`kappa_fn`, :func:`accuracy_fn`, :func:`gwet_ac1_fn`,
:func:`macro_f1_fn`, :func:`agreement_without_ties_fn`; over summed rows: :func:`ratio_fn`
([n, sum]) and :func:`diff_of_means_fn` ([n_1, sum_1, n_0, sum_0]).

Whole comparisons: :func:`nominal_agreement` (accuracy, kappa, AC1, macro F1, agreement without
ties), :func:`ordinal_agreement` (quadratic kappa, ordinal alpha, Spearman, Kendall, Pearson,
MAE, signed bias), :func:`correlation_clustered`, :func:`alpha_clustered`,
:func:`group_difference_clustered`; human-human: :func:`mean_pairwise_kappa`; system level:
:func:`rank_corr_rows`. Point estimates come from the point functions of :mod:`evalstats`;
:func:`with_interval` puts the clustered interval beside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.stats import rankdata

from evalstats import _kernels as kernels
from evalstats.agreement import (
    accuracy,
    alpha_item_stats,
    classification_report,
    cohen_kappa,
    correlation,
    gwet_ac1,
    krippendorff_alpha,
    mean_absolute_error,
    signed_bias,
)
from evalstats.bootstrap import bootstrap_from_item_stats, bootstrap_items
from evalstats.intervals import percentile_interval
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.pairwise import pairwise_agreement
from evalstats.results import (
    Estimate,
    MeanPairwiseKappa,
    NominalAgreement,
    OrdinalAgreement,
    RaterPairKappa,
    interval_fields,
)

__all__ = [
    "StatFn",
    "accuracy_fn",
    "agreement_without_ties_fn",
    "alpha_clustered",
    "bootstrap_clustered",
    "coarsen",
    "correlation_clustered",
    "diff_of_means_fn",
    "finite_percentile_interval",
    "group_difference_clustered",
    "gwet_ac1_fn",
    "item_cell_counts",
    "item_sums",
    "kappa_fn",
    "macro_f1_fn",
    "mean_pairwise_kappa",
    "nominal_agreement",
    "ordinal_agreement",
    "rank_corr_rows",
    "ratio_fn",
    "with_interval",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: A statistic of summed per-item statistics: (..., k) column sums -> (...) values.
StatFn = Callable[[FloatArray], FloatArray]

# Distinct (x, y) value pairs up to which a rank correlation is bootstrapped from contingency
# tables (the rule of evalstats.bootstrap_correlation).
_MAX_TABLE_CELLS = 1024


def item_sums(stats: FloatArray, items: npt.ArrayLike) -> FloatArray:
    """Sum per-subject statistic rows (n_subjects x k) over their items (n_items x k).

    Rows come out in sorted item order.
    """
    _, inverse = np.unique(np.asarray(items), return_inverse=True)
    n_items = int(inverse.max()) + 1 if inverse.size else 0
    out = np.zeros((n_items, stats.shape[1]))
    np.add.at(out, inverse, stats)
    return out


def item_cell_counts(cells: IntArray, n_cells: int, items: npt.ArrayLike) -> FloatArray:
    """Per-item counts of contingency cells (n_items x n_cells), sorted item order.

    ``cells[i]`` in ``[0, n_cells)`` is the cell of subject i; equal to :func:`item_sums` of the
    one-hot rows, without building the dense n x n_cells matrix.
    """
    _, inverse = np.unique(np.asarray(items), return_inverse=True)
    n_items = int(inverse.max()) + 1 if inverse.size else 0
    flat = np.bincount(inverse * n_cells + cells, minlength=n_items * n_cells)
    return flat.reshape(n_items, n_cells).astype(np.float64)


# --- statistics of summed confusion matrices (rows = reference, columns = judge) ------------


def kappa_fn(c: int, weights: Literal["linear", "quadratic"] | None) -> StatFn:
    """Cohen's kappa (sklearn's weights: index distance) of flattened c x c count tables."""
    w = kernels.weight_matrix(c, weights)

    def fn(s: FloatArray) -> FloatArray:
        return kernels.kappa_from_confusion(s.reshape(*s.shape[:-1], c, c), w)

    return fn


def accuracy_fn(c: int) -> StatFn:
    """Share of subjects on the diagonal of flattened c x c count tables."""

    def fn(s: FloatArray) -> FloatArray:
        return kernels.accuracy_from_confusion(s.reshape(*s.shape[:-1], c, c))

    return fn


def gwet_ac1_fn(c: int) -> StatFn:
    """Gwet's AC1 from confusion counts: pe = sum_k pi_k (1 - pi_k) / (q - 1), q = c."""

    def fn(s: FloatArray) -> FloatArray:
        return kernels.gwet_ac1_from_table(s.reshape(*s.shape[:-1], c, c))

    return fn


def macro_f1_fn(c: int) -> StatFn:
    """Macro F1 over all c labels with sklearn's ``zero_division=0`` convention.

    Tables are (reference rows, judge columns): precision divides by the column sums.
    """

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
    """[n, sum] -> sum / n (a mean)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0], dtype=np.float64)


def diff_of_means_fn(s: FloatArray) -> FloatArray:
    """[n_1, sum_1, n_0, sum_0] -> mean_1 - mean_0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0] - s[..., 3] / s[..., 2], dtype=np.float64)


# --- the clustered engine --------------------------------------------------------------------


def bootstrap_clustered(
    item_stats: FloatArray,
    stat_fn: StatFn,
    *,
    n_subjects: int,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "statistic",
) -> Estimate:
    """Bootstrap interval of ``stat_fn`` over per-item summed statistics (items resampled).

    ``item_stats`` is n_items x k, usually from :func:`item_sums` or :func:`item_cell_counts`;
    ``n_subjects`` (the rows summed into them) is reported as ``n_ratings``, ``n_items`` counts
    items, and ``method`` says "clustered by item". ``options.min_items`` applies to items.
    """
    est = bootstrap_from_item_stats(item_stats, stat_fn, rng=rng, options=options, method=method)
    return dataclasses.replace(
        est,
        n_ratings=n_subjects,
        method=est.method.replace("items resampled", "clustered by item"),
    )


def with_interval(point: Estimate, interval: Estimate | None) -> Estimate:
    """``point`` (from a point function) with ``interval``'s bounds beside it.

    The value, ``n_items`` and ``p_value`` stay the point's; the method names both
    (``"<point>; interval: <interval>"``) and the warnings are the sorted union. Without an
    interval the point is returned unchanged (its own interval, e.g. Wilson, kept).
    """
    if interval is None:
        return point
    return dataclasses.replace(
        point,
        ci_low=interval.ci_low,
        ci_high=interval.ci_high,
        level=interval.level,
        n_resamples=interval.n_resamples,
        method=f"{point.method}; interval: {interval.method}",
        warnings=tuple(sorted(set(point.warnings) | set(interval.warnings))),
    )


def alpha_clustered(
    data: FloatArray,
    items: npt.ArrayLike,
    *,
    level_of_measurement: Literal["nominal", "ordinal", "interval", "ratio"],
    value_domain: Sequence[float] | None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate | None:
    """Krippendorff's alpha interval with units (the columns of ``data``) clustered by item.

    ``data`` is raters x units (NaN = not rated), ``items[u]`` the item of unit u. Units with
    fewer than two values are left out; ``None`` when fewer than two units are pairable. The
    value equals :func:`evalstats.krippendorff_alpha` on the pairable units (per-unit
    coincidence statistics of :func:`evalstats.agreement.alpha_item_stats`, summed per item).
    """
    items_arr = np.asarray(items)
    pairable = (~np.isnan(data)).sum(axis=0) >= 2
    if pairable.sum() < 2:
        return None
    stats, fn = alpha_item_stats(data[:, pairable], level_of_measurement, value_domain)
    per_item = item_sums(np.asarray(stats, dtype=np.float64), items_arr[pairable])
    return bootstrap_clustered(
        per_item,
        fn,
        n_subjects=int(pairable.sum()),
        rng=rng,
        options=options,
        method=f"krippendorff_alpha[{level_of_measurement}]",
    )


def group_difference_clustered(
    values: FloatArray,
    in_group: npt.NDArray[np.bool_],
    items: npt.ArrayLike,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "difference_of_means",
) -> Estimate:
    """Mean of ``values`` in the group minus the mean outside it, clustered by item.

    E.g. self-preference of a scoring judge: residual (judge - human) on the outputs of the
    judge's own model family minus on the others.
    """
    g = np.asarray(in_group, dtype=bool)
    stats = np.column_stack([g, np.where(g, values, 0.0), ~g, np.where(~g, values, 0.0)]).astype(
        np.float64
    )
    return bootstrap_clustered(
        item_sums(stats, items),
        diff_of_means_fn,
        n_subjects=int(values.size),
        rng=rng,
        options=options,
        method=method,
    )


def _padded_by_item(
    x: FloatArray, y: FloatArray, items_arr: np.ndarray,
) -> tuple[FloatArray, FloatArray]:
    """x and y with one row per item (sorted), its subjects side by side, NaN-padded."""
    # One row per item, its subjects side by side (NaN padding); the loop bootstrap resamples
    # rows. Subjects keep their input order within an item.
    uniq, inverse = np.unique(items_arr, return_inverse=True)
    counts = np.bincount(inverse)
    order = np.argsort(inverse, kind="stable")
    slot = np.empty(x.size, dtype=np.int64)
    slot[order] = np.arange(x.size) - (np.cumsum(counts) - counts)[inverse[order]]
    width = int(counts.max())
    px = np.full((uniq.size, width), np.nan)
    py = np.full((uniq.size, width), np.nan)
    px[inverse, slot] = x
    py[inverse, slot] = y
    return px, py


def _correlation_sums(
    x: FloatArray, y: FloatArray, items_arr: np.ndarray, method: str,
) -> tuple[FloatArray, StatFn] | None:
    """Per-item summed statistics of a correlation and its statistic: moments for Pearson,
    contingency cells for Spearman / Kendall on discrete scores; ``None`` for continuous ones."""
    if method == "pearson":
        stats = np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])
        return item_sums(stats, items_arr), kernels.pearson_from_sums
    if method not in ("spearman", "kendall"):
        raise ValueError("method must be 'pearson', 'spearman' or 'kendall'")
    if np.unique(x).size * np.unique(y).size > _MAX_TABLE_CELLS:
        return None
    ux, cx = np.unique(x, return_inverse=True)
    uy, cy = np.unique(y, return_inverse=True)
    kx, ky = ux.size, uy.size
    table_fn = kernels.spearman_from_table
    if method == "kendall":
        table_fn = kernels.kendall_tau_b_from_table

    def fn(s: FloatArray) -> FloatArray:
        return table_fn(s.reshape(*s.shape[:-1], kx, ky))

    return item_cell_counts(cx * ky + cy, kx * ky, items_arr), fn


def correlation_clustered(
    x: FloatArray,
    y: FloatArray,
    items: npt.ArrayLike,
    *,
    method: Literal["spearman", "kendall", "pearson"],
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate | None:
    """Clustered bootstrap interval of a correlation of paired scores; ``None`` below 3 pairs.

    Pearson sums moments per item. Spearman and Kendall tau-b use per-item contingency cells
    when (distinct x) x (distinct y) <= 1024. Otherwise (continuous scores on both sides) each
    item's subjects are padded into one row and :func:`evalstats.bootstrap_items` resamples
    rows, recomputing :func:`evalstats.correlation`; that route uses a percentile interval
    whatever ``options.ci`` says, because BCa would add one jackknife call per item.
    """
    if x.size < 3:
        return None
    items_arr = np.asarray(items)
    name = "kendall_tau_b" if method == "kendall" else method
    summed = _correlation_sums(x, y, items_arr, method)
    if summed is not None:
        per_item, fn = summed
        return bootstrap_clustered(per_item, fn, n_subjects=int(x.size), rng=rng,
                                   options=options, method=name)
    px, py = _padded_by_item(x, y, items_arr)

    def stat(ax: FloatArray, ay: FloatArray) -> float:
        fx, fy = ax.ravel(), ay.ravel()
        keep = ~np.isnan(fx)
        return correlation(fx[keep], fy[keep], method=method).value

    est = bootstrap_items(
        stat,
        px,
        py,
        rng=rng,
        options=dataclasses.replace(options, ci="percentile"),
        method=name,
    )
    return dataclasses.replace(
        est, method=est.method.replace("items resampled", "clustered by item")
    )


# --- whole judge-vs-reference comparisons ----------------------------------------------------


def nominal_agreement(
    judge: FloatArray,
    reference: FloatArray,
    items: npt.ArrayLike,
    *,
    n_categories: int,
    tie_category: int | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> NominalAgreement:
    """Judge labels vs reference labels (e.g. the human majority), intervals clustered by item.

    ``judge`` and ``reference`` are category indices ``0 .. n_categories - 1`` (no missing
    values), one per subject; ``items[i]`` is the item of subject i. Points: accuracy (Wilson),
    Cohen's kappa, Gwet's AC1 (q = ``n_categories``), macro F1 / precision / recall (sklearn,
    ``zero_division=0``). Each coefficient but macro precision / recall gets an item-clustered
    bootstrap interval when there are at least two subjects; all intervals share one set of
    resampled confusion matrices per coefficient, drawn from ``rng`` in the order accuracy,
    kappa, AC1, macro F1, agreement without ties. With ``tie_category`` (pairwise scales), the
    agreement after dropping subjects where either side is a tie is added.
    """
    c = int(n_categories)
    cats = [float(k) for k in range(c)]
    j, h = judge, reference
    n_subjects = int(j.size)
    per_item = item_cell_counts(h.astype(np.int64) * c + j.astype(np.int64), c * c, items)
    enough = n_subjects >= 2
    report = classification_report(h, j, labels=cats, level=options.level)

    def iv(fn: StatFn, name: str) -> Estimate | None:
        if not enough:
            return None
        return bootstrap_clustered(
            per_item, fn, n_subjects=n_subjects, rng=rng, options=options, method=name
        )

    acc = with_interval(accuracy(h, j, level=options.level), iv(accuracy_fn(c), "accuracy"))
    kappa = with_interval(cohen_kappa(h, j, categories=cats), iv(kappa_fn(c, None), "cohen_kappa"))
    ac1 = with_interval(gwet_ac1(h, j, categories=cats), iv(gwet_ac1_fn(c), "gwet_ac1"))
    def macro(name: Literal["macro_f1", "macro_precision", "macro_recall"]) -> Estimate:
        """The report's macro figure ``name`` as a point estimate (no interval of its own)."""
        return Estimate(value=getattr(report, name), n_items=report.n_items, method=name)

    f1 = with_interval(macro("macro_f1"), iv(macro_f1_fn(c), "macro_f1"))
    no_ties = None
    if tie_category is not None:
        no_ties = with_interval(
            pairwise_agreement(
                j, h, ties="drop", tie_label=float(tie_category), level=options.level
            ),
            iv(agreement_without_ties_fn(c, tie_category), "pairwise_agreement[ties=drop]"),
        )
    return NominalAgreement(
        **interval_fields(kappa),
        n_items=n_subjects,
        accuracy=acc,
        kappa=kappa,
        gwet_ac1=ac1,
        macro_f1=f1,
        macro_precision=macro("macro_precision"),
        macro_recall=macro("macro_recall"),
        classification=report,
        agreement_without_ties=no_ties,
        warnings=kappa.warnings,
    )


def _on_the_scale(
    j: FloatArray,
    h_round: FloatArray,
    items_arr: np.ndarray,
    categories: Sequence[float],
    boot: Callable[[FloatArray, StatFn, str], Estimate | None],
    *,
    rng: np.random.Generator,
    options: BootstrapOptions,
    enough: bool,
) -> tuple[Estimate, Estimate]:
    """Quadratic-weighted kappa and ordinal alpha of the judge with the rounded reference,
    each with its item-clustered interval (drawn from ``rng`` in that order)."""
    c = len(categories)
    scale = np.asarray(categories)
    jc = np.searchsorted(scale, j)
    hc = np.searchsorted(scale, h_round)
    qwk_iv = boot(
        item_cell_counts(hc * c + jc, c * c, items_arr),
        kappa_fn(c, "quadratic"),
        "cohen_kappa[quadratic]",
    )
    qwk = with_interval(
        cohen_kappa(h_round, j, categories=categories, weights="quadratic"), qwk_iv
    )
    pair = np.vstack([j, h_round])
    alpha_iv = (
        alpha_clustered(
            pair,
            items_arr,
            level_of_measurement="ordinal",
            value_domain=list(categories),
            rng=rng,
            options=options,
        )
        if enough
        else None
    )
    # A scale with one observed value makes alpha 0/0: the NaN is the answer.
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha_point = krippendorff_alpha(pair, level="ordinal", value_domain=categories)
    alpha = with_interval(alpha_point, alpha_iv)
    return qwk, alpha


def ordinal_agreement(
    judge: FloatArray,
    reference_mean: FloatArray,
    reference_rounded: FloatArray,
    items: npt.ArrayLike,
    *,
    categories: Sequence[float],
    judge_continuous: bool = False,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> OrdinalAgreement:
    """Judge scores vs reference scores on an ordinal scale, intervals clustered by item.

    ``reference_mean`` is e.g. the mean human score of each subject and ``reference_rounded``
    that mean rounded to a scale point in ``categories`` (the ordered scale points). Unless
    ``judge_continuous`` (judge scores off the scale, e.g. BLEU), the judge is compared with the
    rounded reference by quadratic-weighted kappa and Krippendorff's ordinal alpha. Always:
    Spearman, Kendall tau-b and Pearson with the mean (an interval only where the point is
    defined), MAE and signed bias (judge - reference mean). Draws from ``rng`` in that order.
    Intervals need at least two subjects (three for correlations).
    """
    j, h_mean, h_round = judge, reference_mean, reference_rounded
    items_arr = np.asarray(items)
    n = int(j.size)
    enough = n >= 2

    def boot(stats: FloatArray, fn: StatFn, name: str) -> Estimate | None:
        if not enough:
            return None
        return bootstrap_clustered(stats, fn, n_subjects=n, rng=rng, options=options, method=name)

    qwk = alpha = None
    if not judge_continuous:
        qwk, alpha = _on_the_scale(j, h_round, items_arr, categories, boot, rng=rng,
                                   options=options, enough=enough)
    corr: dict[str, Estimate] = {}
    for method in ("spearman", "kendall", "pearson"):
        point = correlation(j, h_mean, method=method)
        interval = (
            correlation_clustered(j, h_mean, items_arr, method=method, rng=rng, options=options)
            if np.isfinite(point.value)
            else None
        )
        corr[method] = with_interval(point, interval)
    d = j - h_mean
    mae = with_interval(
        mean_absolute_error(j, h_mean),
        boot(item_sums(np.column_stack([np.ones(n), np.abs(d)]), items_arr), ratio_fn, "mae"),
    )
    bias = with_interval(
        signed_bias(j, h_mean, level=options.level),
        boot(
            item_sums(np.column_stack([np.ones(n), d]), items_arr),
            ratio_fn,
            "signed_bias(judge - human mean)",
        ),
    )
    primary = corr["spearman"] if qwk is None else qwk
    return OrdinalAgreement(
        **interval_fields(primary),
        n_items=n,
        primary="spearman" if qwk is None else "qwk",
        qwk=qwk,
        alpha_ordinal=alpha,
        spearman=corr["spearman"],
        kendall=corr["kendall"],
        pearson=corr["pearson"],
        mae=mae,
        signed_bias=bias,
        warnings=primary.warnings,
    )


# --- human-human and system level ------------------------------------------------------------


def mean_pairwise_kappa(
    codes: FloatArray,
    n_categories: int,
    *,
    weights: Literal["linear", "quadratic"] | None = None,
    min_shared: int = 2,
) -> MeanPairwiseKappa:
    """Mean Cohen's kappa over rater pairs sharing at least ``min_shared`` (and 2) subjects.

    ``codes`` is raters x subjects of category indices (NaN = not rated). All pairs' confusion
    matrices come from one matrix product; kappa is the vectorised kernel (sklearn's weights).
    """
    r, n = codes.shape
    name = "mean_pairwise_cohen_kappa" + (f"[{weights}]" if weights else "")

    def undefined(why: str, pairs: tuple[RaterPairKappa, ...] = ()) -> MeanPairwiseKappa:
        return MeanPairwiseKappa(
            value=float("nan"),
            pairs=pairs,
            n_items=int(n),
            weights=weights,
            method=name,
            warnings=(why,),
        )

    if r < 2 or n == 0:
        return undefined("fewer than two raters or no subjects")
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
        return undefined(f"no rater pair shares {max(2, min_shared)} subjects")
    kappas = kernels.kappa_from_confusion(
        pair_conf[use], kernels.weight_matrix(n_categories, weights)
    )
    pairs = tuple(
        RaterPairKappa(a=int(a), b=int(b), kappa=float(k), n_shared=int(m))
        for a, b, k, m in zip(iu[use], ju[use], kappas, shared[use], strict=True)
    )
    kappas = kappas[np.isfinite(kappas)]
    if kappas.size == 0:
        return undefined("kappa undefined for every rater pair", pairs)
    return MeanPairwiseKappa(
        value=float(kappas.mean()),
        pairs=pairs,
        n_items=int(n),
        n_pairs=int(kappas.size),
        weights=weights,
        method=name,
    )


def rank_corr_rows(
    x: FloatArray, y: FloatArray, method: Literal["kendall", "spearman", "pearson"]
) -> FloatArray:
    """Kendall tau-b, Spearman rho or Pearson r of each row pair of (B x m) arrays, small m.

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
    """Quantile bins of ``x`` when (distinct x) x (distinct other) is too large for tables.

    Spearman on quantile bins keeps the ranking of ``x`` (ties within a bin) and lets the
    bootstrap use contingency tables instead of recomputing ranks per resample. Returns the
    (possibly binned) values and whether they were binned.
    """
    if np.unique(x).size * np.unique(other).size <= max_cells:
        return x, False
    max_bins = max(2, max_cells // max(1, np.unique(other).size))
    codes = pd.qcut(pd.Series(x).rank(method="first"), q=min(bins, max_bins), labels=False)
    return np.asarray(codes, dtype=np.float64), True


def finite_percentile_interval(boot: FloatArray, level: float) -> tuple[float | None, float | None]:
    """Percentile interval of the finite replicates; ``(None, None)`` with fewer than two."""
    boot = boot[np.isfinite(boot)]
    if boot.size < 2:
        return None, None
    return percentile_interval(boot, level)
