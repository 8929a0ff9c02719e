"""The bootstrap engine: item multiplicities, replicates from per-item statistics, intervals."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from evalstats._data import (
    small_n_warning,
)
from evalstats.intervals import bca_interval, percentile_interval
from evalstats.options import CI, DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

FloatArray = npt.NDArray[np.float64]
StatFn = Callable[[FloatArray], FloatArray]

# Resamples are processed in blocks so that a B x n multiplicity matrix never exceeds this many
# entries (about 64 MB of float64): 50k items x 1000 resamples would otherwise need 400 MB.
_BLOCK_ELEMENTS = 8_000_000


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


def replicate_interval(
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


def replicate_estimate(
    boot: FloatArray,
    theta: float,
    jk: FloatArray | None,
    jk_w: FloatArray | None,
    options: BootstrapOptions,
    *,
    n_items: int,
    method: str,
    warnings: Sequence[str] = (),
    n_ratings: int | None = None,
    ci: CI | None = None,
    resampled: str = "items resampled",
) -> Estimate:
    """``theta`` with the interval of its replicates (:func:`replicate_interval`), as every
    bootstrap reports it: ``options``' level and B, and a method naming the interval.

    ``ci`` overrides ``options.ci`` (a statistic whose BCa is unsuitable); ``resampled`` says
    what was resampled; the interval's own warnings follow ``warnings``.
    """
    ci = options.ci if ci is None else ci
    lo, hi, extra = replicate_interval(boot, theta, jk, jk_w, ci, options.level)
    return Estimate(
        value=theta,
        ci_low=lo,
        ci_high=hi,
        n_items=n_items,
        n_ratings=n_ratings,
        level=options.level,
        n_resamples=options.n_resamples,
        method=f"{method}; bootstrap-{ci}(B={options.n_resamples}, {resampled})",
        warnings=(*warnings, *extra),
    )


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


def cells_estimates(
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
    n = int(cells.size)
    warnings = list(extra_warnings) + list(small_n_warning(n, options.min_items))
    if n == 0:
        return [
            Estimate(value=float("nan"), method=name, warnings=(*warnings, "no items"))
            for name, _ in named_fns
        ]
    total = np.bincount(cells, minlength=n_cells).astype(np.float64)[None, :]
    fns = [fn for _, fn in named_fns]
    boots, jks, jk_w = _cell_replicates(cells, n_cells, fns, options.n_resamples, rng,
                                        options.ci == "bca")
    return [
        replicate_estimate(boots[i], float(fn(total)[0]), None if jks is None else jks[i], jk_w,
                           options, n_items=n, n_ratings=n_ratings, method=name,
                           warnings=warnings)
        for i, (name, fn) in enumerate(named_fns)
    ]


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
    stats_arr = np.asarray(item_stats, dtype=np.float64)
    if stats_arr.ndim != 2:
        raise ValueError("item_stats must be 2-D (items x statistics)")
    n = stats_arr.shape[0]
    warnings = list(extra_warnings) + list(small_n_warning(n, options.min_items))
    if n == 0:
        return Estimate(value=float("nan"), method=method, warnings=(*warnings, "no items"))
    theta = float(stat_fn(stats_arr.sum(axis=0)[None, :])[0])
    boot, jk, jk_w = _replicates(stats_arr, stat_fn, options.n_resamples, rng,
                                 jackknife=(options.ci == "bca"))
    return replicate_estimate(boot, theta, jk, jk_w, options, n_items=n, n_ratings=n_ratings,
                              method=method, warnings=warnings)


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
    n_resamples = options.n_resamples
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
    if options.ci == "bca":
        keep = np.ones(n, dtype=bool)
        jk = np.empty(n)
        for i in range(n):
            keep[i] = False
            jk[i] = stat_fn(*[a[keep] for a in arrs])
            keep[i] = True
    return replicate_estimate(boot, theta, jk, None, options, n_items=n, method=method,
                              warnings=warnings, resampled="items resampled, loop")


def _one_hot(cells: npt.NDArray[np.int64], n_cells: int) -> FloatArray:
    out = np.zeros((cells.size, n_cells))
    out[np.arange(cells.size), cells] = 1.0
    return out


def _ratio_fn(s: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0], dtype=np.float64)
