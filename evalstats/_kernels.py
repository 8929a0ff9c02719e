"""Vectorised coefficient formulas over batches of sufficient statistics (private).

Each kernel accepts arrays with arbitrary leading (batch) dimensions, so the same code
computes the point estimate, all bootstrap resamples and all jackknife replicates.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def weight_matrix(n_categories: int, weights: str | None) -> FloatArray:
    """Disagreement weights as in sklearn.cohen_kappa_score (category index distance)."""
    idx = np.arange(n_categories, dtype=np.float64)
    diff = np.abs(idx[:, None] - idx[None, :])
    if weights is None:
        return (diff > 0).astype(np.float64)
    if weights == "linear":
        return diff
    if weights == "quadratic":
        return diff**2
    raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")


def kappa_from_confusion(conf: FloatArray, w: FloatArray) -> FloatArray:
    """Cohen's kappa from confusion matrices of shape (..., c, c)."""
    total = conf.sum(axis=(-2, -1))
    rows = conf.sum(axis=-1)
    cols = conf.sum(axis=-2)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = rows[..., :, None] * cols[..., None, :] / total[..., None, None]
        observed_d = (conf * w).sum(axis=(-2, -1))
        expected_d = (expected * w).sum(axis=(-2, -1))
        return np.asarray(1.0 - observed_d / expected_d, dtype=np.float64)


def accuracy_from_confusion(conf: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(
            np.trace(conf, axis1=-2, axis2=-1) / conf.sum(axis=(-2, -1)), dtype=np.float64
        )


def value_counts(codes: npt.NDArray[np.int64], n_categories: int) -> FloatArray:
    """Items x categories counts from raters x items codes (-1 = missing)."""
    n_items = codes.shape[1]
    item_idx = np.broadcast_to(np.arange(n_items), codes.shape)
    ok = codes >= 0
    flat = item_idx[ok] * n_categories + codes[ok]
    counts = np.bincount(flat, minlength=n_items * n_categories)
    return counts.reshape(n_items, n_categories).astype(np.float64)


def delta_fixed(values: FloatArray, level: str) -> FloatArray:
    """Squared distance between categories for the metrics that do not depend on marginals."""
    v = values.astype(np.float64)
    if level == "nominal":
        return np.asarray(v[:, None] != v[None, :], dtype=np.float64)
    if level == "interval":
        return np.asarray((v[:, None] - v[None, :]) ** 2, dtype=np.float64)
    if level == "ratio":
        num = (v[:, None] - v[None, :]) ** 2
        den = (v[:, None] + v[None, :]) ** 2
        # 0/0 only on the diagonal at value 0, where the distance is 0 (krippendorff does the same).
        return np.divide(num, den, out=np.zeros_like(num), where=den != 0)
    raise ValueError(f"no fixed metric for level {level!r}")


def alpha_fixed(
    n_pairable: FloatArray, d_observed: FloatArray, n_c: FloatArray, delta: FloatArray
) -> FloatArray:
    """Alpha = 1 - (n - 1) * sum_u D_u / (n_c' delta n_c) for a marginal-free metric.

    ``d_observed`` is the summed per-unit observed disagreement sum_ck o_uck delta_ck.
    """
    expected = np.einsum("...c,ck,...k->...", n_c, delta, n_c)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(1.0 - (n_pairable - 1.0) * d_observed / expected, dtype=np.float64)


def ordinal_delta(n_c: FloatArray) -> FloatArray:
    """Krippendorff's ordinal metric (depends on the marginals n_c), shape (..., c, c)."""
    cum = np.cumsum(n_c, axis=-1)
    # sum_{g=c}^{k} n_g - (n_c + n_k)/2 for c <= k; symmetric.
    before = cum - n_c
    span = cum[..., None, :] - before[..., :, None]
    d = span - (n_c[..., :, None] + n_c[..., None, :]) / 2.0
    d = np.where(np.triu(np.ones(d.shape[-2:], dtype=bool)), d, np.swapaxes(d, -1, -2))
    return np.asarray(d**2, dtype=np.float64)


def alpha_from_coincidence(
    o: FloatArray, level: str, values: FloatArray | None = None
) -> FloatArray:
    """Alpha from coincidence matrices of shape (..., c, c)."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    if level == "ordinal":
        delta = ordinal_delta(n_c)
    else:
        if values is None:
            raise ValueError("values are needed for this level")
        delta = np.broadcast_to(delta_fixed(values, level), o.shape)
    d_o = (o * delta).sum(axis=(-2, -1))
    d_e = np.einsum("...c,...ck,...k->...", n_c, delta, n_c)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(1.0 - (n - 1.0) * d_o / d_e, dtype=np.float64)


def alpha_interval_moments(stats: FloatArray) -> FloatArray:
    """Interval alpha from summed per-unit moments [m_u, sum v, sum v^2, within_u]."""
    n, s1, s2, within = stats[..., 0], stats[..., 1], stats[..., 2], stats[..., 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(1.0 - (n - 1.0) * within / (2.0 * (n * s2 - s1**2)), dtype=np.float64)


def pearson_from_sums(stats: FloatArray) -> FloatArray:
    """Pearson r from summed [1, x, y, x^2, y^2, xy]."""
    n, sx, sy, sxx, syy, sxy = (stats[..., i] for i in range(6))
    cov = n * sxy - sx * sy
    vx = n * sxx - sx**2
    vy = n * syy - sy**2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(cov / np.sqrt(vx * vy), dtype=np.float64)


def _midranks(marg: FloatArray) -> FloatArray:
    cum = np.cumsum(marg, axis=-1)
    return np.asarray(cum - marg + (marg + 1.0) / 2.0, dtype=np.float64)


def spearman_from_table(table: FloatArray) -> FloatArray:
    """Spearman rho (midranks for ties) from contingency tables (..., kx, ky)."""
    rx = table.sum(axis=-1)
    ry = table.sum(axis=-2)
    n = rx.sum(axis=-1)
    mean = (n + 1.0) / 2.0
    dx = _midranks(rx) - mean[..., None]
    dy = _midranks(ry) - mean[..., None]
    cov = np.einsum("...ij,...i,...j->...", table, dx, dy)
    vx = (rx * dx**2).sum(axis=-1)
    vy = (ry * dy**2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(cov / np.sqrt(vx * vy), dtype=np.float64)


def kendall_tau_b_from_table(table: FloatArray) -> FloatArray:
    """Kendall tau-b from contingency tables (..., kx, ky) with ordered levels."""
    # For cell (i, j): concordant partners sum_{k>i, l>j} T_kl, discordant sum_{k>i, l<j} T_kl.
    # With below[i, l] = sum_{k>i} T_kl, their difference is sum_l sign(l - j) below[i, l],
    # one small matrix product per table. Counts are integers, so every sum is exact.
    cols = table.sum(axis=-2)
    below = cols[..., None, :] - np.cumsum(table, axis=-2)
    ky = table.shape[-1]
    idx = np.arange(ky)
    sign = np.sign(idx[:, None] - idx[None, :]).astype(np.float64)
    s = (table * (below @ sign)).sum(axis=(-2, -1))
    rx = table.sum(axis=-1)
    n = rx.sum(axis=-1)
    n0 = n * (n - 1.0) / 2.0
    n1 = (rx * (rx - 1.0)).sum(axis=-1) / 2.0
    n2 = (cols * (cols - 1.0)).sum(axis=-1) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s / np.sqrt((n0 - n1) * (n0 - n2)), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Square (c x c) paired tables: rows = first rater (judge), columns = second rater (human).
# ---------------------------------------------------------------------------------------------


def gwet_ac1_from_table(table: FloatArray) -> FloatArray:
    """Gwet's AC1 for two raters from tables (..., q, q); q counts every category."""
    q = table.shape[-1]
    n = table.sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        pa = np.trace(table, axis1=-2, axis2=-1) / n
        pi = (table.sum(axis=-1) + table.sum(axis=-2)) / (2.0 * n[..., None])
        pe = (pi * (1.0 - pi)).sum(axis=-1) / (q - 1.0)
        return np.asarray((pa - pe) / (1.0 - pe), dtype=np.float64)


def macro_f1_from_table(table: FloatArray) -> FloatArray:
    """Macro F1 over every category (sklearn, ``zero_division=0``) from tables (..., c, c).

    F1_k = 2 T_kk / (row_k + col_k) is symmetric in the two raters, so the orientation of the
    table does not matter.
    """
    tp = np.diagonal(table, axis1=-2, axis2=-1)
    denom = table.sum(axis=-1) + table.sum(axis=-2)
    f1 = np.divide(2.0 * tp, denom, out=np.zeros(denom.shape), where=denom > 0)
    return np.asarray(f1.mean(axis=-1), dtype=np.float64)


def mean_over_table(table: FloatArray, cell_values: FloatArray) -> FloatArray:
    """Mean of a per-cell quantity (e.g. judge - human) over the items of tables (..., c, c)."""
    n = table.sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((table * cell_values).sum(axis=(-2, -1)) / n, dtype=np.float64)


def pearson_from_table(table: FloatArray, values: FloatArray) -> FloatArray:
    """Pearson r of the numeric category values from tables (..., c, c)."""
    rows = table.sum(axis=-1)
    cols = table.sum(axis=-2)
    # Elementwise products and sums only (no BLAS), so a table gives the same bits whatever
    # batch it is computed in.
    sums = np.stack(
        [
            rows.sum(axis=-1),
            (rows * values).sum(axis=-1),
            (cols * values).sum(axis=-1),
            (rows * values**2).sum(axis=-1),
            (cols * values**2).sum(axis=-1),
            (table * np.multiply.outer(values, values)).sum(axis=(-2, -1)),
        ],
        axis=-1,
    )
    return pearson_from_sums(sums)


def alpha_from_paired_table(
    table: FloatArray, level: str, values: FloatArray | None = None
) -> FloatArray:
    """Krippendorff's alpha of two raters from paired tables (..., c, c).

    A unit with the two values (x, y) adds 1 to the coincidences o_xy and o_yx (m_u - 1 = 1),
    so o = T + T', n_c = rows + columns and N = 2n; alpha = 1 - (N - 1) D_o / D_e with
    D_o = sum o_ck delta_ck = 2 sum T_ck delta_ck and D_e = n' delta n. The ordinal metric
    (sum_{g=c..k} n_g - (n_c + n_k)/2)^2 equals (r_k - r_c)^2 for the midranks
    r_c = sum_{g<=c} n_g - n_c/2, so it is computed like the interval metric on the midranks
    of each table (no c x c metric per resample). Counts are integers, so for moderate n
    every sum is exact.
    """
    rows = table.sum(axis=-1)
    cols = table.sum(axis=-2)
    n_c = rows + cols
    big_n = n_c.sum(axis=-1)
    if level == "ordinal":
        r = np.cumsum(n_c, axis=-1) - n_c / 2.0
        # D_o = 2 sum_ck T_ck (r_c - r_k)^2, D_e = 2 (N sum n_c r_c^2 - (sum n_c r_c)^2).
        cross = (table * (r[..., :, None] * r[..., None, :])).sum(axis=(-2, -1))
        d_o = 2.0 * ((rows * r**2).sum(axis=-1) + (cols * r**2).sum(axis=-1) - 2.0 * cross)
        d_e = 2.0 * (big_n * (n_c * r**2).sum(axis=-1) - (n_c * r).sum(axis=-1) ** 2)
    else:
        c = table.shape[-1]
        if level == "nominal":
            delta = delta_fixed(np.arange(c, dtype=np.float64), "nominal")
        else:
            if values is None:
                raise ValueError("values are needed for this level")
            delta = delta_fixed(values, level)
        d_o = 2.0 * (table * delta).sum(axis=(-2, -1))
        d_e = ((n_c @ delta) * n_c).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(1.0 - (big_n - 1.0) * d_o / d_e, dtype=np.float64)
