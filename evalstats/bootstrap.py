"""Vectorised, item-clustered bootstrap intervals.

The unit of resampling is the *item*: every rating of an item (all raters, both sides of a
pair) moves together, so dependence between ratings of the same item is respected.

Instead of recomputing a coefficient B times in Python, each statistic is written as a
function of *summed per-item sufficient statistics* (confusion-matrix cells for kappa and
accuracy, coincidence-matrix contributions for alpha, moments for Pearson, contingency cells
for rank correlations). A bootstrap resample is a vector of item multiplicities ``w`` (B x n),
so all B resampled statistics are ``stat_fn(w @ item_stats)``: one matrix product.

Two further savings, both exact:
* items with identical sufficient statistics are interchangeable, so when there are few distinct
  rows (always the case for categorical data) the multiplicities of the *distinct rows* are drawn
  directly as Multinomial(n, share of each row): cost O(B x distinct rows), independent of n;
* the jackknife for the BCa acceleration is ``stat_fn(total - item_stats)``, one leave-one-out
  replicate per distinct row, weighted by its multiplicity.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from evalstats import _kernels as K
from evalstats._data import (
    as_2d,
    as_float,
    encode,
    paired,
    resolve_categories,
    small_n_warning,
)
from evalstats.agreement import alpha_item_stats
from evalstats.intervals import bca_interval, percentile_interval, wilson_interval
from evalstats.options import CI, DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = [
    "CI",
    "DEFAULT_OPTIONS",
    "BootstrapOptions",
    "bootstrap_accuracy",
    "bootstrap_alpha",
    "bootstrap_correlation",
    "bootstrap_fleiss_kappa",
    "bootstrap_from_item_stats",
    "bootstrap_gwet_ac1_multi",
    "bootstrap_items",
    "bootstrap_kappa",
    "bootstrap_mean",
    "bootstrap_percent_agreement_multi",
    "resample_counts",
    "wilson_interval",
]

FloatArray = npt.NDArray[np.float64]
StatFn = Callable[[FloatArray], FloatArray]

# Resamples are processed in blocks so that a B x n multiplicity matrix never exceeds this many
# entries (about 64 MB of float64): 50k items x 1000 resamples would otherwise need 400 MB.
_BLOCK_ELEMENTS = 8_000_000
# Table-based rank correlations need (distinct cells x cells) floats; beyond this many cells
# the rank-based route is used.
_MAX_TABLE_CELLS = 1024


def resample_counts(
    n_items: int, n_resamples: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Multiplicities of each item in each of ``n_resamples`` bootstrap resamples (B x n).

    Row b counts how often each item was drawn when drawing ``n_items`` items with
    replacement; each row sums to ``n_items``.
    """
    idx = rng.integers(0, n_items, size=(n_resamples, n_items))
    offsets = (np.arange(n_resamples) * n_items)[:, None]
    flat = np.bincount((idx + offsets).ravel(), minlength=n_resamples * n_items)
    return flat.reshape(n_resamples, n_items).astype(np.int64)


@functools.lru_cache(maxsize=32)
def _projection(n_columns: int) -> FloatArray:
    """The fixed hash projection of :func:`_collapse`; it also fixes the order of the groups."""
    proj = np.random.default_rng(12345).random(n_columns) + 0.5
    proj.setflags(write=False)
    return proj


def _collapse(item_stats: FloatArray) -> tuple[FloatArray, npt.NDArray[np.int64]] | None:
    """Distinct rows and their multiplicities, when collapsing pays off."""
    n = item_stats.shape[0]
    if n < 64:
        return None
    # Hash each row to one float with a fixed random projection, group on the hash, then verify:
    # much faster than np.unique(axis=0), which sorts rows as opaque byte strings.
    proj = _projection(item_stats.shape[1])
    keys = item_stats @ proj
    _, first, inverse, counts = np.unique(
        keys, return_index=True, return_inverse=True, return_counts=True
    )
    if first.size * 4 > n:
        return None
    rows = item_stats[first]
    if not np.array_equal(rows[inverse], item_stats):  # hash collision: exact grouping instead
        rows, counts = np.unique(item_stats, axis=0, return_counts=True)
        if rows.shape[0] * 4 > n:
            return None
    return rows, counts.astype(np.int64)


def _replicates(
    item_stats: FloatArray,
    stat_fn: StatFn,
    n_resamples: int,
    rng: np.random.Generator,
    jackknife: bool,
) -> tuple[FloatArray, FloatArray | None, FloatArray | None]:
    """Bootstrap replicates, and optionally jackknife replicates with their weights."""
    n = item_stats.shape[0]
    total = item_stats.sum(axis=0)
    collapsed = _collapse(item_stats)
    if collapsed is not None:
        rows, mult = collapsed
        draws = rng.multinomial(n, mult / n, size=n_resamples).astype(np.float64)
        boot = stat_fn(draws @ rows)
        jk = stat_fn(total[None, :] - rows) if jackknife else None
        return boot, jk, (mult.astype(np.float64) if jackknife else None)
    block = max(1, _BLOCK_ELEMENTS // max(n, 1))
    parts: list[FloatArray] = []
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        w = resample_counts(n, b, rng).astype(np.float64)
        parts.append(stat_fn(w @ item_stats))
        done += b
    boot = np.concatenate(parts)
    jk = None
    if jackknife:
        step = 100_000
        jk = np.concatenate(
            [stat_fn(total[None, :] - item_stats[i : i + step]) for i in range(0, n, step)]
        )
    return boot, jk, None


def _interval(
    boot: FloatArray,
    theta: float,
    jk: FloatArray | None,
    jk_w: FloatArray | None,
    ci: CI,
    level: float,
) -> tuple[float | None, float | None, list[str]]:
    warnings: list[str] = []
    finite = np.isfinite(boot)
    if not finite.all():
        warnings.append(
            f"{int((~finite).sum())} of {boot.size} bootstrap replicates undefined and dropped"
        )
        boot = boot[finite]
    if boot.size < 2 or not np.isfinite(theta):
        warnings.append("interval not computed: estimate or replicates undefined")
        return None, None, warnings
    if ci == "percentile":
        lo, hi = percentile_interval(boot, level)
    elif ci == "bca":
        if jk is None:
            raise ValueError("BCa needs jackknife replicates")
        lo, hi, extra = bca_interval(boot, theta, jk, level, jk_w)
        warnings.extend(extra)
    else:
        raise ValueError("ci must be 'bca' or 'percentile'")
    return lo, hi, warnings


# ---------------------------------------------------------------------------------------------
# Cell engine: items that are single cells of a contingency table (paired categorical ratings)
# ---------------------------------------------------------------------------------------------

# Tables handed to a statistic at once: bounds the temporaries of the table kernels (~16 MB).
_TABLE_BLOCK_ELEMENTS = 2_000_000


def _cell_replicates(
    cells: npt.NDArray[np.int64],
    n_cells: int,
    fns: Sequence[StatFn],
    n_resamples: int,
    rng: np.random.Generator,
    jackknife: bool,
) -> tuple[list[FloatArray], list[FloatArray] | None, FloatArray | None]:
    """Bootstrap (and jackknife) replicates of several statistics of one contingency table.

    Each item is one cell (``cells[i]`` in ``[0, n_cells)``), i.e. its sufficient statistics are
    a one-hot row. This draws *exactly* the resamples that :func:`bootstrap_from_item_stats`
    draws for the one-hot matrix with the same ``rng`` (same grouping rule, same group order,
    same calls to ``rng``), so results are bit-for-bit those of the generic engine, but without
    the n x n_cells matrix: grouping is a ``bincount``, and the resampled tables of all
    statistics come from one multinomial draw over the occupied cells. Every statistic in
    ``fns`` sees the same resamples.
    """
    n = int(cells.size)
    counts = np.bincount(cells, minlength=n_cells)
    total = counts.astype(np.float64)
    occupied = np.flatnonzero(counts)
    table_block = max(1, _TABLE_BLOCK_ELEMENTS // max(n_cells, 1))
    boots: list[list[FloatArray]] = [[] for _ in fns]

    def evaluate(tables: FloatArray, into: list[list[FloatArray]]) -> None:
        for out, fn in zip(into, fns, strict=True):
            out.append(fn(tables))

    jk_cells: npt.NDArray[np.int64]
    jk_w: FloatArray | None
    if n >= 64 and occupied.size * 4 <= n:  # the rule of _collapse
        keys = _projection(n_cells)[occupied]
        if np.unique(keys).size == occupied.size:
            occupied = occupied[np.argsort(keys)]  # np.unique(keys) order in _collapse
        else:  # (never seen) _collapse then groups with np.unique(axis=0): one-hot rows sort
            occupied = occupied[::-1]  # by descending cell
        mult = counts[occupied]
        draws = rng.multinomial(n, mult / n, size=n_resamples)
        for start in range(0, n_resamples, table_block):
            part = draws[start : start + table_block]
            tables = np.zeros((part.shape[0], n_cells))
            tables[:, occupied] = part
            evaluate(tables, boots)
        jk_cells, jk_w = occupied, mult.astype(np.float64)
    else:
        block = max(1, _BLOCK_ELEMENTS // max(n, 1))  # the blocks of _replicates
        done = 0
        while done < n_resamples:
            b = min(block, n_resamples - done)
            w = resample_counts(n, b, rng)
            for start in range(0, b, table_block):
                ws = w[start : start + table_block]
                rows = ws.shape[0]
                flat = (np.arange(rows)[:, None] * n_cells + cells[None, :]).ravel()
                tables = (
                    np.bincount(
                        flat, weights=ws.ravel().astype(np.float64), minlength=rows * n_cells
                    )
                    .reshape(rows, n_cells)
                    .astype(np.float64, copy=False)
                )
                evaluate(tables, boots)
            done += b
        jk_cells, jk_w = cells, None
    boot = [np.concatenate(parts) for parts in boots]
    if not jackknife:
        return boot, None, None
    jks: list[list[FloatArray]] = [[] for _ in fns]
    for start in range(0, jk_cells.size, table_block):
        part_cells = jk_cells[start : start + table_block]
        tables = np.repeat(total[None, :], part_cells.size, axis=0)
        tables[np.arange(part_cells.size), part_cells] -= 1.0
        evaluate(tables, jks)
    return boot, [np.concatenate(parts) for parts in jks], jk_w


def _cells_estimates(
    cells: npt.NDArray[np.int64],
    n_cells: int,
    named_fns: Sequence[tuple[str, StatFn]],
    *,
    rng: np.random.Generator,
    options: BootstrapOptions,
    n_ratings: int | None,
    extra_warnings: Sequence[str] = (),
) -> list[Estimate]:
    """:func:`bootstrap_from_item_stats` of the one-hot cells, for several statistics at once."""
    n_resamples, ci, level, min_items = (
        options.n_resamples,
        options.ci,
        options.level,
        options.min_items,
    )
    n = int(cells.size)
    warnings = list(extra_warnings) + list(small_n_warning(n, min_items))
    if n == 0:
        return [
            Estimate(value=float("nan"), method=name, warnings=(*warnings, "no items"))
            for name, _ in named_fns
        ]
    total = np.bincount(cells, minlength=n_cells).astype(np.float64)[None, :]
    fns = [fn for _, fn in named_fns]
    boots, jks, jk_w = _cell_replicates(cells, n_cells, fns, n_resamples, rng, ci == "bca")
    out = []
    for i, (name, fn) in enumerate(named_fns):
        theta = float(fn(total)[0])
        lo, hi, w2 = _interval(boots[i], theta, None if jks is None else jks[i], jk_w, ci, level)
        out.append(
            Estimate(
                value=theta,
                ci_low=lo,
                ci_high=hi,
                n_items=n,
                n_ratings=n_ratings,
                level=level,
                n_resamples=n_resamples,
                method=f"{name}; bootstrap-{ci}(B={n_resamples}, items resampled)",
                warnings=tuple(warnings + w2),
            )
        )
    return out


def bootstrap_from_item_stats(
    item_stats: npt.ArrayLike,
    stat_fn: StatFn,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "statistic",
    n_ratings: int | None = None,
    extra_warnings: Sequence[str] = (),
) -> Estimate:
    """Vectorised clustered bootstrap of any statistic of summed per-item statistics.

    ``item_stats`` is n_items x k; ``stat_fn`` maps an array (..., k) of column sums to the
    statistic (...), and must be vectorised over the leading axis. The point estimate is
    ``stat_fn(item_stats.sum(0))``. Replicates that are undefined (NaN) are dropped with a
    warning; fewer than ``options.min_items`` items adds a warning.
    """
    n_resamples, ci, level = options.n_resamples, options.ci, options.level
    stats_arr = np.asarray(item_stats, dtype=np.float64)
    if stats_arr.ndim != 2:
        raise ValueError("item_stats must be 2-D (items x statistics)")
    n = stats_arr.shape[0]
    warnings = list(extra_warnings) + list(small_n_warning(n, options.min_items))
    if n == 0:
        return Estimate(value=float("nan"), method=method, warnings=(*warnings, "no items"))
    theta = float(stat_fn(stats_arr.sum(axis=0)[None, :])[0])
    boot, jk, jk_w = _replicates(stats_arr, stat_fn, n_resamples, rng, jackknife=(ci == "bca"))
    lo, hi, w2 = _interval(boot, theta, jk, jk_w, ci, level)
    return Estimate(
        value=theta,
        ci_low=lo,
        ci_high=hi,
        n_items=n,
        n_ratings=n_ratings,
        level=level,
        n_resamples=n_resamples,
        method=f"{method}; bootstrap-{ci}(B={n_resamples}, items resampled)",
        warnings=tuple(warnings + w2),
    )


def bootstrap_items(
    stat_fn: Callable[..., float],
    *arrays: npt.ArrayLike,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "statistic",
) -> Estimate:
    """Generic (slow, loop-based) clustered bootstrap: ``stat_fn(*[a[idx] for a in arrays])``.

    Items run along axis 0 of every array (pass reliability data transposed). Use this only
    for statistics without a sufficient-statistics form; it calls ``stat_fn`` B (+ n for BCa)
    times.
    """
    n_resamples, ci, level = options.n_resamples, options.ci, options.level
    arrs = [np.asarray(a) for a in arrays]
    if not arrs:
        raise ValueError("pass at least one array")
    n = arrs[0].shape[0]
    if any(a.shape[0] != n for a in arrs):
        raise ValueError("all arrays need the same number of items along axis 0")
    warnings = list(small_n_warning(n, options.min_items))
    theta = float(stat_fn(*arrs))
    boot = np.empty(n_resamples)
    for b in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        boot[b] = stat_fn(*[a[idx] for a in arrs])
    jk = None
    if ci == "bca":
        keep = np.ones(n, dtype=bool)
        jk = np.empty(n)
        for i in range(n):
            keep[i] = False
            jk[i] = stat_fn(*[a[keep] for a in arrs])
            keep[i] = True
    lo, hi, w2 = _interval(boot, theta, jk, None, ci, level)
    return Estimate(
        value=theta,
        ci_low=lo,
        ci_high=hi,
        n_items=n,
        level=level,
        n_resamples=n_resamples,
        method=f"{method}; bootstrap-{ci}(B={n_resamples}, items resampled, loop)",
        warnings=tuple(warnings + w2),
    )


def _one_hot(cells: npt.NDArray[np.int64], n_cells: int) -> FloatArray:
    out = np.zeros((cells.size, n_cells))
    out[np.arange(cells.size), cells] = 1.0
    return out


def _ratio_fn(s: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0], dtype=np.float64)


def bootstrap_kappa(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    categories: Sequence[object] | npt.ArrayLike | None = None,
    weights: Literal["linear", "quadratic"] | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Cohen's kappa (unweighted / linear / quadratic) with a clustered bootstrap interval.

    The point estimate equals :func:`evalstats.cohen_kappa`; each item contributes one cell of
    the confusion matrix, so the B confusion matrices come from one multinomial draw.
    """
    a_k, b_k, dropped = paired(a, b)
    cats = resolve_categories(categories, a_k, b_k)
    c = len(cats)
    cells = encode(a_k, cats) * c + encode(b_k, cats)
    w = K.weight_matrix(c, weights)

    def fn(s: FloatArray) -> FloatArray:
        return K.kappa_from_confusion(s.reshape(*s.shape[:-1], c, c), w)

    extra = [f"{dropped} items dropped because a rating was missing"] if dropped else []
    name = "cohen_kappa" + (f"[{weights}]" if weights else "")
    # Same resamples as bootstrap_from_item_stats on the one-hot cells, without building them.
    return _cells_estimates(
        cells,
        c * c,
        [(name, fn)],
        rng=rng,
        options=options,
        n_ratings=2 * int(a_k.size),
        extra_warnings=extra,
    )[0]


def bootstrap_accuracy(
    y_true: npt.ArrayLike,
    y_pred: npt.ArrayLike,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Accuracy with a clustered bootstrap interval (see :func:`evalstats.accuracy` for Wilson)."""
    t, p, dropped = paired(y_true, y_pred, ("y_true", "y_pred"))
    correct = (t == p).astype(np.float64)
    item_stats = np.column_stack([np.ones_like(correct), correct])
    extra = [f"{dropped} items dropped because a label was missing"] if dropped else []
    return bootstrap_from_item_stats(
        item_stats,
        _ratio_fn,
        rng=rng,
        options=options,
        method="accuracy",
        extra_warnings=extra,
    )


def bootstrap_mean(
    values: npt.ArrayLike,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "mean",
) -> Estimate:
    """Mean of one value per item (NaN dropped) with a bootstrap interval."""
    v = as_float(np.asarray(values))
    v = v[~np.isnan(v)]
    item_stats = np.column_stack([np.ones_like(v), v])
    return bootstrap_from_item_stats(
        item_stats,
        _ratio_fn,
        rng=rng,
        options=options,
        method=method,
    )


def bootstrap_alpha(
    reliability_data: npt.ArrayLike,
    *,
    level_of_measurement: Literal["nominal", "ordinal", "interval", "ratio"] = "nominal",
    value_domain: Sequence[object] | npt.ArrayLike | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Krippendorff's alpha (raters x items, NaN missing) with a unit-clustered bootstrap.

    Units (columns) are resampled with all their values; unpairable units (fewer than two
    values) carry no information and are excluded first, so ``n_items`` counts pairable units.
    This differs from Krippendorff's own bootstrap (which resamples pairable values) but is the
    standard nonparametric bootstrap for clustered data. The point estimate equals
    ``krippendorff.alpha``.
    """
    item_stats, fn = alpha_item_stats(reliability_data, level_of_measurement, value_domain)
    n_ratings = int(np.rint(item_stats[:, 0].sum())) if level_of_measurement != "ordinal" else None
    return bootstrap_from_item_stats(
        item_stats,
        fn,
        rng=rng,
        options=options,
        method=f"krippendorff_alpha[{level_of_measurement}]",
        n_ratings=n_ratings,
    )


def _dense_codes(x: FloatArray) -> tuple[npt.NDArray[np.int64], int]:
    uniq, inv = np.unique(x, return_inverse=True)
    return inv.astype(np.int64), int(uniq.size)


def _weighted_midranks(w: FloatArray, v: FloatArray) -> FloatArray:
    """Midranks of every item within each weighted resample (w: B x n multiplicities)."""
    order = np.argsort(v, kind="stable")
    sv = v[order]
    cw = np.cumsum(w[:, order], axis=1)
    new_group = np.r_[True, sv[1:] != sv[:-1]]
    gid = np.cumsum(new_group) - 1
    starts = np.nonzero(new_group)[0]
    ends = np.r_[starts[1:] - 1, v.size - 1]
    le = cw[:, ends[gid]]  # resampled count <= value
    lt = np.where(starts[gid] > 0, cw[:, np.maximum(starts[gid] - 1, 0)], 0.0)  # count < value
    r_sorted = lt + (le - lt + 1.0) / 2.0
    r = np.empty_like(r_sorted)
    r[:, order] = r_sorted
    return r


def _spearman_counts(w: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
    """Spearman rho of each weighted resample, midranks for ties."""
    rx, ry = _weighted_midranks(w, x), _weighted_midranks(w, y)
    mean = (w.sum(axis=1) + 1.0) / 2.0
    dx = rx - mean[:, None]
    dy = ry - mean[:, None]
    cov = (w * dx * dy).sum(axis=1)
    var = (w * dx**2).sum(axis=1) * (w * dy**2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(cov / np.sqrt(var), dtype=np.float64)


def bootstrap_correlation(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    method: Literal["spearman", "kendall", "pearson"] = "spearman",
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Pearson / Spearman / Kendall tau-b with a clustered bootstrap interval.

    Pearson uses summed moments. Spearman and Kendall on discrete scores (at most 1024
    distinct (x, y) cells, e.g. two 1-10 scales) use contingency tables, B at once. Spearman on
    continuous scores recomputes weighted midranks for all resamples in blocks (vectorised);
    Kendall on continuous scores falls back to the loop over ``scipy.stats.kendalltau``.
    """
    n_resamples, ci, level = options.n_resamples, options.ci, options.level
    xa, ya, dropped = paired(x, y, ("x", "y"))
    xf, yf = as_float(xa, "x"), as_float(ya, "y")
    n = int(xf.size)
    extra = [f"{dropped} items dropped because a score was missing"] if dropped else []
    name = "kendall_tau_b" if method == "kendall" else method
    if method == "pearson":
        item_stats = np.column_stack([np.ones(n), xf, yf, xf**2, yf**2, xf * yf])
        return bootstrap_from_item_stats(
            item_stats,
            K.pearson_from_sums,
            rng=rng,
            options=options,
            method=name,
            extra_warnings=extra,
        )
    if method not in ("spearman", "kendall"):
        raise ValueError("method must be 'pearson', 'spearman' or 'kendall'")
    cx, kx = _dense_codes(xf)
    cy, ky = _dense_codes(yf)
    if kx * ky <= _MAX_TABLE_CELLS:
        table_fn = K.spearman_from_table if method == "spearman" else K.kendall_tau_b_from_table

        def fn(s: FloatArray) -> FloatArray:
            return table_fn(s.reshape(*s.shape[:-1], kx, ky))

        # Same resamples as bootstrap_from_item_stats on the one-hot cells, without building them.
        return _cells_estimates(
            cx * ky + cy,
            kx * ky,
            [(name, fn)],
            rng=rng,
            options=options,
            n_ratings=None,
            extra_warnings=extra,
        )[0]
    if method == "kendall":

        def kt(xs: FloatArray, ys: FloatArray) -> float:
            return float(sps.kendalltau(xs, ys, variant="b")[0])

        res = bootstrap_items(kt, xf, yf, rng=rng, options=options, method=name)
        return Estimate(**{**res.__dict__, "warnings": (*extra, *res.warnings)})
    # Continuous Spearman: blocks of resample multiplicities, ranks recomputed per resample.
    warnings = extra + list(small_n_warning(n, options.min_items))
    theta = float(_spearman_counts(np.ones((1, n)), xf, yf)[0])
    block = max(1, _BLOCK_ELEMENTS // (4 * max(n, 1)))
    parts = []
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        parts.append(_spearman_counts(resample_counts(n, b, rng).astype(np.float64), xf, yf))
        done += b
    boot = np.concatenate(parts)
    jk = None
    use_ci: CI = ci
    if ci == "bca":
        if n <= 5000:
            jk_parts = []
            for i in range(0, n, block):
                rows = np.arange(i, min(n, i + block))
                w = np.ones((rows.size, n))
                w[np.arange(rows.size), rows] = 0.0
                jk_parts.append(_spearman_counts(w, xf, yf))
            jk = np.concatenate(jk_parts)
        else:
            use_ci = "percentile"
            warnings.append(
                "BCa jackknife skipped for continuous Spearman with n > 5000; percentile used"
            )
    lo, hi, w2 = _interval(boot, theta, jk, None, use_ci, level)
    return Estimate(
        value=theta,
        ci_low=lo,
        ci_high=hi,
        n_items=n,
        n_ratings=2 * n,
        level=level,
        n_resamples=n_resamples,
        method=f"{name}; bootstrap-{use_ci}(B={n_resamples}, items resampled)",
        warnings=tuple(warnings + w2),
    )


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
