"""Many statistics of paired categorical ratings at once, for one item set or many strata.

Judge-vs-human statistics on a discrete scale (pass/fail, 1..k Likert, labels) are all functions
of the c x c contingency table T of (judge, human) categories: rows = ``a`` (judge), columns =
``b`` (human). An item *is* a cell of T, so the item-clustered bootstrap of any of them only
needs resampled tables, and all statistics of one resample come from the same table:

* grouping identical items is a ``bincount`` of the cell codes;
* the B resampled tables are one ``Generator.multinomial`` draw over the occupied cells (exactly
  the draw of :func:`evalstats.bootstrap_from_item_stats`, see below);
* each statistic is a vectorised kernel over the (B, c, c) stack, e.g. Kendall's tau-b from the
  concordant/discordant pair counts of each table (2-D cumulative sums), Spearman from the
  midranks of each table's weighted marginals;
* the BCa jackknife has one leave-one-out table per occupied cell, weighted by its count.

Cost per item set: O(n) to build the table, then O(B x occupied cells) for the draw and
O(B x c^2) per statistic -- independent of n. Item sets with fewer than 64 items, or with more
than n/4 occupied cells, draw B x n item multiplicities instead (the generic rule); that is
O(B x n) with n < max(64, 4 c^2).

Random streams: for the same ``rng`` state, categories and data, :func:`bootstrap_paired`, the
single-statistic functions here and :func:`evalstats.bootstrap_kappa` draw the *same*
resamples, so their replicates agree bit for bit (the tests check this).
:func:`bootstrap_by_group` gives group ``g`` (in sorted group order) the child generator
``rng.spawn(n_groups)[g]``. Pre-existing :func:`evalstats.bootstrap_accuracy` (item statistics
[1, correct]) and :func:`evalstats.bootstrap_correlation` (a kx x ky table) group items
differently, so their draws differ; the bootstrap distribution is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from evalstats import _kernels as K
from evalstats._data import as_1d, as_float, encode, missing_mask, paired, resolve_categories
from evalstats.bootstrap import bootstrap_correlation, bootstrap_from_item_stats, cells_estimates
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = [
    "MAX_TABLE_CATEGORIES",
    "PAIRED_STATS",
    "bootstrap_by_group",
    "bootstrap_gwet_ac1",
    "bootstrap_kendall_tau",
    "bootstrap_macro_f1",
    "bootstrap_mean_absolute_error",
    "bootstrap_paired",
    "bootstrap_signed_bias",
    "bootstrap_spearman",
]

FloatArray = npt.NDArray[np.float64]
StatFn = Callable[[FloatArray], FloatArray]
Categories = Sequence[object] | npt.ArrayLike | None

#: Statistic names accepted by :func:`bootstrap_paired` and :func:`bootstrap_by_group`.
PAIRED_STATS: tuple[str, ...] = (
    "percent_agreement",
    "accuracy",
    "kappa",
    "kappa_linear",
    "kappa_quadratic",
    "gwet_ac1",
    "spearman",
    "kendall_tau_b",
    "pearson",
    "mae",
    "signed_bias",
    "macro_f1",
    "alpha_nominal",
    "alpha_ordinal",
    "alpha_interval",
    "alpha_ratio",
)
# Statistics that use the numeric value of each category (the others only use its index).
_NUMERIC = frozenset({"pearson", "mae", "signed_bias", "alpha_interval", "alpha_ratio"})
_METHOD = {
    "percent_agreement": "percent_agreement",
    "accuracy": "accuracy",
    "kappa": "cohen_kappa",
    "kappa_linear": "cohen_kappa[linear]",
    "kappa_quadratic": "cohen_kappa[quadratic]",
    "gwet_ac1": "gwet_ac1",
    "spearman": "spearman",
    "kendall_tau_b": "kendall_tau_b",
    "pearson": "pearson",
    "mae": "mae",
    "signed_bias": "signed_bias(judge-human)",
    "macro_f1": "macro_f1(zero_division=0)",
    "alpha_nominal": "krippendorff_alpha[nominal]",
    "alpha_ordinal": "krippendorff_alpha[ordinal]",
    "alpha_interval": "krippendorff_alpha[interval]",
    "alpha_ratio": "krippendorff_alpha[ratio]",
}

#: Above this many categories a c x c table stops paying off (c^2 cells per resample):
#: :func:`bootstrap_paired` refuses, and the single-statistic functions given no
#: ``categories`` fall back to item-level routes.
MAX_TABLE_CATEGORIES = 256


def _check_stats(stats: Sequence[str]) -> tuple[str, ...]:
    if isinstance(stats, str):
        stats = (stats,)
    names = tuple(dict.fromkeys(stats))  # drop duplicates, keep order
    if not names:
        raise ValueError("stats: name at least one statistic")
    unknown = [s for s in names if s not in _METHOD]
    if unknown:
        raise ValueError(f"stats: unknown {unknown}; choose from {list(PAIRED_STATS)}")
    return names


def _numeric_values(cats: npt.NDArray[np.generic], names: Sequence[str]) -> FloatArray | None:
    needs = [s for s in names if s in _NUMERIC]
    if not needs:
        return None
    try:
        values = np.asarray(cats, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"stats {needs} need numeric categories, got {list(cats[:5])}") from exc
    if np.isnan(values).any():
        raise ValueError("categories must not contain NaN")
    return values


def _table_fns(names: Sequence[str], c: int, values: FloatArray | None) -> list[tuple[str, StatFn]]:
    """(method name, kernel over flattened c x c tables) for each requested statistic."""
    index = np.arange(c, dtype=np.float64)

    def square(s: FloatArray) -> FloatArray:
        return s.reshape(*s.shape[:-1], c, c)

    def make(name: str) -> StatFn:
        if name in ("percent_agreement", "accuracy"):
            return lambda s: K.accuracy_from_confusion(square(s))
        if name.startswith("kappa"):
            w = K.weight_matrix(c, None if name == "kappa" else name.split("_")[1])
            return lambda s: K.kappa_from_confusion(square(s), w)
        if name == "gwet_ac1":
            return lambda s: K.gwet_ac1_from_table(square(s))
        if name == "spearman":
            return lambda s: K.spearman_from_table(square(s))
        if name == "kendall_tau_b":
            return lambda s: K.kendall_tau_b_from_table(square(s))
        if name == "macro_f1":
            return lambda s: K.macro_f1_from_table(square(s))
        if name in ("alpha_nominal", "alpha_ordinal"):
            level = name.split("_")[1]
            return lambda s: K.alpha_from_paired_table(square(s), level, index)
        assert values is not None  # _numeric_values ran for these
        v: FloatArray = values
        if name == "pearson":
            return lambda s: K.pearson_from_table(square(s), v)
        if name == "mae":
            abs_diff = np.abs(v[:, None] - v[None, :])
            return lambda s: K.mean_over_table(square(s), abs_diff)
        if name == "signed_bias":
            diff = v[:, None] - v[None, :]
            return lambda s: K.mean_over_table(square(s), diff)
        level = name.split("_")[1]  # alpha_interval / alpha_ratio
        return lambda s: K.alpha_from_paired_table(square(s), level, v)

    return [(_METHOD[name], make(name)) for name in names]


def _dropped(n: int) -> list[str]:
    return [f"{n} items dropped because a rating was missing"] if n else []


def _check_table_size(c: int) -> None:
    if c > MAX_TABLE_CATEGORIES:
        raise ValueError(
            f"{c} distinct categories: table statistics need a discrete scale (at most "
            f"{MAX_TABLE_CATEGORIES} categories); use bootstrap_correlation / bootstrap_mean "
            "for continuous scores"
        )


def bootstrap_paired(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    stats: Sequence[str],
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> dict[str, Estimate]:
    """Several statistics of paired ratings (``a`` = judge, ``b`` = human), one shared bootstrap.

    ``stats`` are names from :data:`PAIRED_STATS`:

    * ``percent_agreement`` / ``accuracy``: share of items with a == b;
    * ``kappa``, ``kappa_linear``, ``kappa_quadratic``: Cohen's kappa (sklearn's weights: index
      distance in ``categories``); ``gwet_ac1``: Gwet's AC1 with q = len(categories);
    * ``spearman``, ``kendall_tau_b``: rank correlations, ranks by the *order of*
      ``categories`` (midranks for ties); ``pearson``: on the numeric category values;
    * ``mae`` = mean |a - b|, ``signed_bias`` = mean (a - b) (> 0: the judge scores higher);
    * ``macro_f1``: sklearn's macro F1 over every category (``zero_division=0``; symmetric in
      a and b);
    * ``alpha_nominal`` / ``_ordinal`` / ``_interval`` / ``_ratio``: Krippendorff's alpha of
      the two raters (``value_domain`` = categories).

    Items missing either rating are dropped (warned). All statistics are computed on the same
    B resampled tables, and each returned :class:`Estimate` equals the one the single-statistic
    function returns for the same ``rng`` state (``bootstrap_kappa`` included). Numeric
    statistics need numeric categories; at most :data:`MAX_TABLE_CATEGORIES` categories.
    """
    names = _check_stats(stats)
    a_k, b_k, dropped = paired(a, b)
    cats = resolve_categories(categories, a_k, b_k)
    c = len(cats)
    _check_table_size(c)
    named = _table_fns(names, c, _numeric_values(cats, names))
    cells = encode(a_k, cats) * c + encode(b_k, cats)
    results = cells_estimates(
        cells,
        c * c,
        named,
        rng=rng,
        options=options,
        n_ratings=2 * int(cells.size),
        extra_warnings=_dropped(dropped),
    )
    return dict(zip(names, results, strict=True))


def _factorize_column(values: npt.NDArray[np.generic]) -> tuple[npt.NDArray[np.int64], list[Any]]:
    """Codes (-1 = missing) and unique keys of one column, sorted when the keys sort."""
    try:
        codes, uniques = pd.factorize(values, sort=True)
    except TypeError:  # keys that do not sort (mixed types): first-appearance order
        codes, uniques = pd.factorize(values, sort=False)
    return np.asarray(codes, dtype=np.int64), list(np.asarray(uniques, dtype=object).tolist())


def _factorize_groups(group_ids: object, n: int) -> tuple[npt.NDArray[np.int64], list[Hashable]]:
    """Integer group codes (-1 = missing) and the group keys in sorted order.

    2-D keys are factorized column by column and combined, so tuples sort lexicographically
    (each column in its own sorted order); a key with any missing part is missing.
    """
    if isinstance(group_ids, pd.DataFrame):
        group_ids = group_ids.to_numpy()
    g = group_ids if isinstance(group_ids, np.ndarray) else np.asarray(group_ids, dtype=object)
    if g.ndim not in (1, 2) or g.shape[0] != n:
        raise ValueError(
            f"group_ids must have one entry (1-D) or one row of keys (2-D) per item: got shape "
            f"{g.shape} for {n} items"
        )
    if g.ndim == 1:
        codes, uniques = _factorize_column(g)
        return codes, list(uniques)
    columns = [_factorize_column(g[:, k]) for k in range(g.shape[1])]
    missing = np.zeros(n, dtype=bool)
    for codes, _ in columns:
        missing |= codes < 0
    dims = tuple(max(len(uniques), 1) for _, uniques in columns)
    flat = np.ravel_multi_index(
        tuple(np.where(missing, 0, codes) for codes, _ in columns), dims
    ).astype(np.int64)
    present, inverse = np.unique(flat[~missing], return_inverse=True)
    out = np.full(n, -1, dtype=np.int64)
    out[~missing] = inverse
    parts = np.unravel_index(present, dims)
    keys: list[Hashable] = [
        tuple(columns[k][1][int(parts[k][i])] for k in range(len(columns)))
        for i in range(present.size)
    ]
    return out, keys


def bootstrap_by_group(
    group_ids: npt.ArrayLike | pd.DataFrame,
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    stats: Sequence[str],
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> dict[Hashable, dict[str, Estimate]]:
    """:func:`bootstrap_paired` for every group (stratum, judge, criterion...) in one pass.

    ``group_ids``: one key per item (1-D), or one row of keys per item (2-D, e.g.
    ``df[["judge", "criterion", "stratum"]]``; the keys are then tuples). Items whose key is
    missing are left out. Returns ``{group: {stat: Estimate}}`` in sorted group order.

    Items are encoded against ``categories`` once (pooled observed values when ``None``, so every
    group shares the scale), then sorted by group once (stable, so each group keeps the input
    order); each group's table is a ``bincount`` of its cells. Cost: O(n log n) for the grouping
    plus, per group, O(B x occupied cells + B x c^2 x len(stats)) -- see the module docstring.

    Reproducibility: group ``g`` (position in the sorted keys) is bootstrapped with the child
    generator ``rng.spawn(n_groups)[g]``, so ``result[key]`` equals
    ``bootstrap_paired(a[mask], b[mask], stats=..., categories=<the same categories>,
    rng=<that child>)`` exactly, and so do the single-statistic functions and
    ``bootstrap_kappa`` with that child.
    """
    names = _check_stats(stats)
    a_arr, b_arr = as_1d(a, "a"), as_1d(b, "b")
    n = int(a_arr.size)
    if b_arr.size != n:
        raise ValueError("a and b must have the same length")
    codes, keys = _factorize_groups(group_ids, n)
    in_group = codes >= 0
    rated = in_group & ~(missing_mask(a_arr) | missing_mask(b_arr))
    cats = resolve_categories(categories, a_arr[rated], b_arr[rated])
    c = len(cats)
    _check_table_size(c)
    named = _table_fns(names, c, _numeric_values(cats, names))
    cells = np.full(n, -1, dtype=np.int64)
    cells[rated] = encode(a_arr[rated], cats) * c + encode(b_arr[rated], cats)
    order = np.argsort(np.where(in_group, codes, len(keys)), kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(codes[in_group], minlength=len(keys)))])
    children = rng.spawn(len(keys))
    out: dict[Hashable, dict[str, Estimate]] = {}
    for g, key in enumerate(keys):
        group_cells = cells[order[bounds[g] : bounds[g + 1]]]
        present = group_cells[group_cells >= 0]
        results = cells_estimates(
            present,
            c * c,
            named,
            rng=children[g],
            options=options,
            n_ratings=2 * int(present.size),
            extra_warnings=_dropped(int(group_cells.size - present.size)),
        )
        out[key] = dict(zip(names, results, strict=True))
    return out


# ---------------------------------------------------------------------------------------------
# Single statistics (each is bootstrap_paired with one name, plus a route for continuous data)
# ---------------------------------------------------------------------------------------------


def _one(
    name: str,
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    categories: Categories,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> Estimate:
    return bootstrap_paired(
        a,
        b,
        stats=(name,),
        categories=categories,
        rng=rng,
        options=options,
    )[name]


def _too_many_observed(a: npt.ArrayLike, b: npt.ArrayLike) -> bool:
    a_k, b_k, _ = paired(a, b)
    return len(resolve_categories(None, a_k, b_k)) > MAX_TABLE_CATEGORIES


def bootstrap_gwet_ac1(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Gwet's AC1 of two raters (as :func:`evalstats.gwet_ac1`) with a clustered bootstrap.

    Pass ``categories``: q (the number of categories, used or not) enters the chance term.
    """
    return _one("gwet_ac1", a, b, categories, rng, options)


def _rank_correlation(
    name: Literal["spearman", "kendall_tau_b"],
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    categories: Categories,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> Estimate:
    if categories is None and _too_many_observed(x, y):
        return bootstrap_correlation(
            x,
            y,
            method="spearman" if name == "spearman" else "kendall",
            rng=rng,
            options=options,
        )
    return _one(name, x, y, categories, rng, options)


def bootstrap_spearman(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Spearman rho (midranks) of ordinal paired ratings from the c x c table, B at once.

    Ranks follow the order of ``categories`` (sorted observed values by default), so ordered
    string labels work. Equals ``scipy.stats.spearmanr`` on numeric data. Without
    ``categories`` and with more than :data:`MAX_TABLE_CATEGORIES` distinct values this is
    :func:`evalstats.bootstrap_correlation` (continuous route).
    """
    return _rank_correlation("spearman", x, y, categories, rng, options)


def bootstrap_kendall_tau(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Kendall tau-b of ordinal paired ratings from concordant/discordant counts of the table.

    For each of the B resampled c x c tables, S = sum_ij T_ij (sum_{k>i,l>j} T_kl -
    sum_{k>i,l<j} T_kl) and the tie corrections come from the marginals: O(c^2) per resample,
    whatever n. Order and fallback as :func:`bootstrap_spearman`; equals
    ``scipy.stats.kendalltau(variant="b")``.
    """
    return _rank_correlation("kendall_tau_b", x, y, categories, rng, options)


def _mean_difference(
    name: Literal["mae", "signed_bias"],
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    categories: Categories,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> Estimate:
    if categories is None and _too_many_observed(judge, human):
        j, h, dropped = paired(judge, human, ("judge", "human"))
        d = as_float(j, "judge") - as_float(h, "human")
        per_item = np.abs(d) if name == "mae" else d
        return bootstrap_from_item_stats(
            np.column_stack([np.ones(d.size), per_item]),
            lambda s: np.asarray(s[..., 1] / s[..., 0], dtype=np.float64),
            rng=rng,
            options=options,
            method=_METHOD[name],
            n_ratings=2 * int(d.size),
            extra_warnings=_dropped(dropped),
        )
    return _one(name, judge, human, categories, rng, options)


def bootstrap_mean_absolute_error(
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    *,
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Mean |judge - human| with a clustered bootstrap (table route on a discrete scale).

    Continuous scores (no ``categories``, more than :data:`MAX_TABLE_CATEGORIES` distinct
    values) use per-item [1, |d|] with :func:`evalstats.bootstrap_from_item_stats`.
    """
    return _mean_difference("mae", judge, human, categories, rng, options)


def bootstrap_signed_bias(
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    *,
    categories: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Mean (judge - human) with a clustered bootstrap (cf. the t interval of signed_bias)."""
    return _mean_difference("signed_bias", judge, human, categories, rng, options)


def bootstrap_macro_f1(
    y_true: npt.ArrayLike,
    y_pred: npt.ArrayLike,
    *,
    labels: Categories = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Macro F1 over every label (sklearn, ``zero_division=0``) with B confusion matrices.

    The table is built as (y_pred, y_true), i.e. judge rows and reference columns as in
    :func:`bootstrap_paired` ``(a=y_pred, b=y_true)``, so the two draw the same resamples.
    """
    return _one("macro_f1", y_pred, y_true, labels, rng, options)
