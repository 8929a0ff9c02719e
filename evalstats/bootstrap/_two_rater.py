"""Bootstrap intervals of two-rater coefficients: kappa, accuracy, mean, alpha, correlations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from evalstats import _kernels as K
from evalstats._data import (
    as_float,
    encode,
    paired,
    resolve_categories,
    small_n_warning,
)
from evalstats.agreement import alpha_item_stats
from evalstats.bootstrap._engine import (
    _BLOCK_ELEMENTS,
    FloatArray,
    _ratio_fn,
    bootstrap_from_item_stats,
    bootstrap_items,
    cells_estimates,
    replicate_estimate,
    resample_counts,
)
from evalstats.options import CI, DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

# Table-based rank correlations need (distinct cells x cells) floats; beyond this many cells
# the rank-based route is used.
_MAX_TABLE_CELLS = 1024


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
    return cells_estimates(
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
    extra = [f"{dropped} items dropped because a label was missing"] if dropped else []
    return _bootstrap_ratio((t == p).astype(np.float64), rng=rng, options=options,
                            method="accuracy", extra_warnings=extra)


def bootstrap_mean(
    values: npt.ArrayLike,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    method: str = "mean",
) -> Estimate:
    """Mean of one value per item (NaN dropped) with a bootstrap interval."""
    v = as_float(np.asarray(values))
    return _bootstrap_ratio(v[~np.isnan(v)], rng=rng, options=options, method=method)


def _bootstrap_ratio(
    v: FloatArray,
    *,
    rng: np.random.Generator,
    options: BootstrapOptions,
    method: str,
    extra_warnings: Sequence[str] = (),
) -> Estimate:
    """Mean of one value per item: the ratio of the summed [1, value] rows, bootstrapped."""
    return bootstrap_from_item_stats(np.column_stack([np.ones_like(v), v]), _ratio_fn, rng=rng,
                                     options=options, method=method,
                                     extra_warnings=extra_warnings)


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


def _continuous_spearman(
    xf: FloatArray,
    yf: FloatArray,
    *,
    name: str,
    extra: list[str],
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> Estimate:
    """Spearman on continuous scores: weighted midranks recomputed for every resample, in
    blocks of multiplicities (vectorised); the BCa jackknife likewise up to 5000 items."""
    n_resamples, ci = options.n_resamples, options.ci
    n = int(xf.size)
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
    return replicate_estimate(boot, theta, jk, None, options, n_items=n, n_ratings=2 * n,
                              method=name, warnings=warnings, ci=use_ci)


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
        return cells_estimates(
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
    return _continuous_spearman(xf, yf, name=name, extra=extra, rng=rng, options=options)
