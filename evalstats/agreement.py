"""Agreement coefficients between raters (judge vs human, human vs human).

Two-rater functions take aligned 1-D arrays; multi-rater functions take reliability data with
raters as rows and items as columns (NaN = not rated).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

import krippendorff
import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats import _kernels as K
from evalstats._data import (
    as_2d,
    as_float,
    encode,
    missing_mask,
    paired,
    resolve_categories,
)
from evalstats.intervals import wilson_interval
from evalstats.results import ClassificationReport, ConfusionMatrix, Estimate, frozen_array

__all__ = [
    "accuracy",
    "classification_report",
    "cohen_kappa",
    "confusion_matrix",
    "correlation",
    "fleiss_kappa",
    "gwet_ac1",
    "gwet_ac1_multi",
    "krippendorff_alpha",
    "krippendorff_alpha_fast",
    "mean_absolute_error",
    "percent_agreement",
    "percent_agreement_multi",
    "signed_bias",
]

Level = Literal["nominal", "ordinal", "interval", "ratio"]
Weights = Literal["linear", "quadratic"] | None
Categories = Sequence[object] | npt.ArrayLike | None
FloatArray = npt.NDArray[np.float64]


def _dropped_warning(n_dropped: int) -> tuple[str, ...]:
    return (f"{n_dropped} items dropped because a rating was missing",) if n_dropped else ()


def _nan_warning(value: float, why: str) -> tuple[str, ...]:
    return (why,) if not np.isfinite(value) else ()


# ---------------------------------------------------------------------------------------------
# Percent agreement
# ---------------------------------------------------------------------------------------------


def percent_agreement(a: npt.ArrayLike, b: npt.ArrayLike) -> Estimate:
    """Share of items on which two raters give the same label (items missing either are dropped)."""
    a_k, b_k, dropped = paired(a, b)
    n = int(a_k.size)
    value = float(np.mean(a_k == b_k)) if n else float("nan")
    return Estimate(
        value=value,
        n_items=n,
        n_ratings=2 * n,
        method="percent_agreement",
        warnings=_dropped_warning(dropped) + _nan_warning(value, "no paired items"),
    )


def percent_agreement_multi(
    reliability_data: npt.ArrayLike, *, mode: Literal["pairwise", "all"] = "pairwise"
) -> Estimate:
    """Agreement among several raters over items with at least two ratings.

    ``mode="pairwise"``: mean over items of the share of agreeing rater pairs (Fleiss' P-bar);
    ``mode="all"``: share of items on which every rater who rated the item gave the same label.
    """
    data = as_2d(reliability_data)
    cats = resolve_categories(None, data)
    codes = encode(data, cats)
    counts = K.value_counts(codes, len(cats))
    m = counts.sum(axis=1)
    keep = m >= 2
    counts, m = counts[keep], m[keep]
    n = int(keep.sum())
    if n == 0:
        return Estimate(
            value=float("nan"),
            method=f"percent_agreement[{mode}]",
            warnings=("no item has two ratings",),
        )
    if mode == "pairwise":
        per_item = (counts * (counts - 1)).sum(axis=1) / (m * (m - 1))
    elif mode == "all":
        per_item = (counts.max(axis=1) == m).astype(np.float64)
    else:
        raise ValueError("mode must be 'pairwise' or 'all'")
    return Estimate(
        value=float(per_item.mean()),
        n_items=n,
        n_ratings=int(m.sum()),
        n_pairs=int((m * (m - 1) / 2).sum()),
        method=f"percent_agreement[{mode}]",
    )


# ---------------------------------------------------------------------------------------------
# Cohen, Fleiss, Gwet
# ---------------------------------------------------------------------------------------------


def _confusion_codes(
    a_codes: npt.NDArray[np.int64], b_codes: npt.NDArray[np.int64], c: int
) -> FloatArray:
    return np.bincount(a_codes * c + b_codes, minlength=c * c).reshape(c, c).astype(np.float64)


def cohen_kappa(
    a: npt.ArrayLike, b: npt.ArrayLike, *, categories: Categories = None, weights: Weights = None
) -> Estimate:
    """Cohen's kappa for two raters, optionally linearly or quadratically weighted.

    Same definition as ``sklearn.metrics.cohen_kappa_score``: weights are the distance between
    category *indices* in ``categories`` (so pass the ordered scale for weighted kappa).
    Categories that neither rater used only matter for the weights (their rows are zero).
    """
    a_k, b_k, dropped = paired(a, b)
    cats = resolve_categories(categories, a_k, b_k)
    c = len(cats)
    conf = _confusion_codes(encode(a_k, cats), encode(b_k, cats), c)
    w = K.weight_matrix(c, weights)
    value = float(K.kappa_from_confusion(conf, w)) if a_k.size else float("nan")
    name = "cohen_kappa" + (f"[{weights}]" if weights else "")
    return Estimate(
        value=value,
        n_items=int(a_k.size),
        n_ratings=2 * int(a_k.size),
        method=name,
        warnings=_dropped_warning(dropped)
        + _nan_warning(value, "kappa undefined: expected disagreement is 0 (one category)"),
    )


def fleiss_kappa(reliability_data: npt.ArrayLike, *, categories: Categories = None) -> Estimate:
    """Fleiss' kappa for several raters (nominal categories).

    Items with fewer than two ratings are dropped. With a varying number of raters per item the
    per-item agreement uses each item's own count (the usual generalisation); with a constant
    number it equals ``statsmodels.stats.inter_rater.fleiss_kappa``.
    """
    data = as_2d(reliability_data)
    cats = resolve_categories(categories, data)
    counts = K.value_counts(encode(data, cats), len(cats))
    m = counts.sum(axis=1)
    keep = m >= 2
    counts, m = counts[keep], m[keep]
    warnings: list[str] = []
    if keep.size and not keep.all():
        warnings.append(f"{int((~keep).sum())} items with fewer than two ratings dropped")
    if m.size and m.min() != m.max():
        warnings.append("varying number of ratings per item: generalised Fleiss formula used")
    if m.size == 0:
        return Estimate(
            value=float("nan"), method="fleiss_kappa", warnings=("no item has two ratings",)
        )
    p_item = ((counts * (counts - 1)).sum(axis=1) / (m * (m - 1))).mean()
    p_cat = counts.sum(axis=0) / m.sum()
    p_e = float((p_cat**2).sum())
    value = float((p_item - p_e) / (1 - p_e)) if p_e < 1 else float("nan")
    return Estimate(
        value=value,
        n_items=int(m.size),
        n_ratings=int(m.sum()),
        method="fleiss_kappa",
        warnings=tuple(warnings) + _nan_warning(value, "only one category used"),
    )


def gwet_ac1(a: npt.ArrayLike, b: npt.ArrayLike, *, categories: Categories = None) -> Estimate:
    """Gwet's AC1 for two raters: (pa - pe) / (1 - pe), pe = sum_k pi_k (1 - pi_k) / (q - 1).

    ``pi_k`` is the mean of the two raters' marginal shares and ``q`` the number of categories
    (all of ``categories``, used or not), as in Gwet (2008).
    """
    a_k, b_k, dropped = paired(a, b)
    cats = resolve_categories(categories, a_k, b_k)
    q = len(cats)
    n = int(a_k.size)
    if q < 2 or n == 0:
        return Estimate(
            value=float("nan"),
            n_items=n,
            method="gwet_ac1",
            warnings=("AC1 needs at least two categories and one item",),
        )
    conf = _confusion_codes(encode(a_k, cats), encode(b_k, cats), q) / n
    pa = float(np.trace(conf))
    pi = (conf.sum(axis=0) + conf.sum(axis=1)) / 2.0
    pe = float((pi * (1 - pi)).sum() / (q - 1))
    value = (pa - pe) / (1 - pe)
    return Estimate(
        value=float(value),
        n_items=n,
        n_ratings=2 * n,
        method="gwet_ac1",
        warnings=_dropped_warning(dropped),
    )


def gwet_ac1_multi(reliability_data: npt.ArrayLike, *, categories: Categories = None) -> Estimate:
    """Gwet's AC1 for any number of raters with missing ratings (Gwet 2008 / 2014).

    pa is averaged over items with at least two ratings; pi_k = mean over items with at least one
    rating of the share of that item's ratings in category k. Equals :func:`gwet_ac1` for two
    raters without missing data.
    """
    data = as_2d(reliability_data)
    cats = resolve_categories(categories, data)
    q = len(cats)
    counts = K.value_counts(encode(data, cats), q)
    m = counts.sum(axis=1)
    rated = m >= 1
    pair = m >= 2
    if q < 2 or not pair.any():
        return Estimate(
            value=float("nan"),
            method="gwet_ac1_multi",
            warnings=("AC1 needs two categories and an item with two ratings",),
        )
    pa = float(((counts[pair] * (counts[pair] - 1)).sum(axis=1) / (m[pair] * (m[pair] - 1))).mean())
    pi = (counts[rated] / m[rated, None]).mean(axis=0)
    pe = float((pi * (1 - pi)).sum() / (q - 1))
    return Estimate(
        value=(pa - pe) / (1 - pe),
        n_items=int(pair.sum()),
        n_ratings=int(m.sum()),
        method="gwet_ac1_multi",
    )


# ---------------------------------------------------------------------------------------------
# Krippendorff's alpha
# ---------------------------------------------------------------------------------------------


def _alpha_counts(
    data: np.ndarray, level: str, value_domain: Categories
) -> tuple[FloatArray, FloatArray]:
    """Per-unit value counts restricted to pairable units, and the numeric value of each column."""
    cats = resolve_categories(value_domain, data)
    counts = K.value_counts(encode(data, cats), len(cats))
    counts = counts[counts.sum(axis=1) >= 2]
    if level in ("interval", "ratio"):
        values = np.asarray(cats, dtype=np.float64)
    else:
        values = np.arange(len(cats), dtype=np.float64)
    return counts, values


def krippendorff_alpha(
    reliability_data: npt.ArrayLike, *, level: Level = "nominal", value_domain: Categories = None
) -> Estimate:
    """Krippendorff's alpha computed by the ``krippendorff`` package (the reference).

    ``reliability_data``: raters x items, NaN for missing. Only units with two or more values
    are pairable and count in ``n_items``. Nominal for unordered labels, ordinal for ranked
    scales (e.g. Likert), interval for equally spaced numeric scores, ratio for scores with a
    true zero.
    """
    data = as_2d(reliability_data)
    present = ~missing_mask(data)
    m = present.sum(axis=0)
    n_items = int((m >= 2).sum())
    n_ratings = int(m[m >= 2].sum())
    try:
        kwargs = {} if value_domain is None else {"value_domain": np.asarray(value_domain)}
        value = float(
            krippendorff.alpha(reliability_data=data, level_of_measurement=level, **kwargs)
        )
        warnings: tuple[str, ...] = ()
    except ValueError as exc:
        value, warnings = float("nan"), (f"alpha undefined: {exc}",)
    return Estimate(
        value=value,
        n_items=n_items,
        n_ratings=n_ratings,
        method=f"krippendorff_alpha[{level}]",
        warnings=warnings,
    )


def alpha_item_stats(
    reliability_data: npt.ArrayLike, level: str, value_domain: Categories = None
) -> tuple[FloatArray, Callable[[FloatArray], FloatArray]]:
    """Per-unit sufficient statistics for alpha and the function turning their sums into alpha.

    Used by :func:`krippendorff_alpha_fast` and the vectorised bootstrap: alpha over any
    weighted set of units is ``stat_fn(weights @ item_stats)``.
    * interval: moments [m_u, sum v, sum v^2, within-unit disagreement] (any number of values);
    * nominal / ratio: [m_u, sum_ck o_uck delta_ck, n_u1..n_uc] (delta does not depend on data);
    * ordinal: the flattened per-unit coincidence matrix (delta depends on the marginals).
    """
    data = as_2d(reliability_data)
    if level == "interval":
        vals = as_float(data)
        present = ~np.isnan(vals)
        m = present.sum(axis=0).astype(np.float64)
        keep = m >= 2
        v = np.where(present, vals, 0.0)[:, keep]
        m = m[keep]
        s1 = v.sum(axis=0)
        s2 = (v**2).sum(axis=0)
        within = 2.0 * (m * s2 - s1**2) / (m - 1.0)
        stats_ = np.column_stack([m, s1, s2, within])
        return stats_, K.alpha_interval_moments
    counts, values = _alpha_counts(data, level, value_domain)
    m = counts.sum(axis=1)
    c = counts.shape[1]
    if level in ("nominal", "ratio"):
        delta = K.delta_fixed(values, level)
        d_u = np.einsum("uc,ck,uk->u", counts, delta, counts) / (m - 1.0)
        stats_ = np.column_stack([m, d_u, counts])

        def fixed(s: FloatArray) -> FloatArray:
            return K.alpha_fixed(s[..., 0], s[..., 1], s[..., 2:], delta)

        return stats_, fixed
    if level == "ordinal":
        outer = counts[:, :, None] * counts[:, None, :]
        idx = np.arange(c)
        outer[:, idx, idx] -= counts
        coinc = (outer / (m - 1.0)[:, None, None]).reshape(len(m), c * c)

        def ordinal(s: FloatArray) -> FloatArray:
            o = s.reshape(*s.shape[:-1], c, c)
            return K.alpha_from_coincidence(o, "ordinal")

        return coinc, ordinal
    raise ValueError(f"unknown level {level!r}")


def krippendorff_alpha_fast(
    reliability_data: npt.ArrayLike, *, level: Level = "nominal", value_domain: Categories = None
) -> Estimate:
    """Krippendorff's alpha from per-unit coincidence statistics (same value as the package).

    This is the formulation the bootstrap uses; tests check it equals ``krippendorff.alpha`` on
    random data with missing values at all four levels.
    """
    item_stats, fn = alpha_item_stats(reliability_data, level, value_domain)
    n_items = item_stats.shape[0]
    if n_items == 0:
        return Estimate(
            value=float("nan"),
            method=f"krippendorff_alpha_fast[{level}]",
            warnings=("no unit has two values",),
        )
    total = item_stats.sum(axis=0)
    value = float(fn(total))
    n_ratings = int(np.rint(total[0])) if level != "ordinal" else int(np.rint(total.sum()))
    return Estimate(
        value=value,
        n_items=n_items,
        n_ratings=n_ratings,
        method=f"krippendorff_alpha_fast[{level}]",
        warnings=_nan_warning(value, "alpha undefined: no variation in the values"),
    )


# ---------------------------------------------------------------------------------------------
# Correlations and errors on numeric scores
# ---------------------------------------------------------------------------------------------


def correlation(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    method: Literal["spearman", "kendall", "pearson"] = "spearman",
) -> Estimate:
    """Pearson r, Spearman rho or Kendall tau-b (scipy.stats), with scipy's two-sided p-value."""
    xa, ya, dropped = paired(x, y, ("x", "y"))
    xf, yf = as_float(xa, "x"), as_float(ya, "y")
    n = int(xf.size)
    warnings = list(_dropped_warning(dropped))
    if n < 3 or np.ptp(xf) == 0 or np.ptp(yf) == 0:
        warnings.append("correlation undefined: fewer than 3 items or a constant variable")
        return Estimate(value=float("nan"), n_items=n, method=method, warnings=tuple(warnings))
    if method == "pearson":
        r, p = stats.pearsonr(xf, yf)
    elif method == "spearman":
        r, p = stats.spearmanr(xf, yf)
    elif method == "kendall":
        r, p = stats.kendalltau(xf, yf, variant="b")
    else:
        raise ValueError("method must be 'pearson', 'spearman' or 'kendall'")
    return Estimate(
        value=float(r),
        n_items=n,
        n_ratings=2 * n,
        p_value=float(p),
        method=method if method != "kendall" else "kendall_tau_b",
        warnings=tuple(warnings),
    )


def mean_absolute_error(judge: npt.ArrayLike, human: npt.ArrayLike) -> Estimate:
    """Mean |judge - human| over items scored by both."""
    j, h, dropped = paired(judge, human, ("judge", "human"))
    d = as_float(j) - as_float(h)
    value = float(np.mean(np.abs(d))) if d.size else float("nan")
    return Estimate(
        value=value, n_items=int(d.size), method="mae", warnings=_dropped_warning(dropped)
    )


def signed_bias(judge: npt.ArrayLike, human: npt.ArrayLike, *, level: float = 0.95) -> Estimate:
    """Mean (judge - human): positive = the judge scores higher. t interval over items."""
    j, h, dropped = paired(judge, human, ("judge", "human"))
    d = as_float(j) - as_float(h)
    n = int(d.size)
    if n < 2:
        return Estimate(
            value=float(np.mean(d)) if n else float("nan"),
            n_items=n,
            method="signed_bias",
            warnings=("fewer than 2 items: no interval",),
        )
    mean = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(n))
    if se == 0:
        lo = hi = mean
    else:
        lo, hi = (float(v) for v in stats.t.interval(level, n - 1, loc=mean, scale=se))
    return Estimate(
        value=mean,
        ci_low=lo,
        ci_high=hi,
        n_items=n,
        level=level,
        method="signed_bias(judge-human); t interval",
        warnings=_dropped_warning(dropped),
    )


# ---------------------------------------------------------------------------------------------
# Classification view (judge predictions vs a reference label)
# ---------------------------------------------------------------------------------------------


def accuracy(y_true: npt.ArrayLike, y_pred: npt.ArrayLike, *, level: float = 0.95) -> Estimate:
    """Share of items where ``y_pred == y_true``, with a Wilson interval (items i.i.d.)."""
    t, p, dropped = paired(y_true, y_pred, ("y_true", "y_pred"))
    res = wilson_interval(int(np.sum(t == p)), int(t.size), level=level)
    return dataclasses.replace(
        res,
        method="accuracy; wilson",
        warnings=res.warnings + _dropped_warning(dropped),
    )


def confusion_matrix(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, *, labels: Categories = None
) -> ConfusionMatrix:
    """Counts with rows = ``y_true`` and columns = ``y_pred`` (sklearn orientation)."""
    t, p, dropped = paired(y_true, y_pred, ("y_true", "y_pred"))
    cats = resolve_categories(labels, t, p)
    c = len(cats)
    mat = np.bincount(encode(t, cats) * c + encode(p, cats), minlength=c * c).reshape(c, c)
    n = int(t.size)
    acc = float(np.trace(mat) / n) if n else float("nan")
    return ConfusionMatrix(
        labels=tuple(cats.tolist()),
        matrix=frozen_array(mat, np.int64),
        value=acc,
        n_items=n,
        warnings=_dropped_warning(dropped),
    )


def classification_report(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, *, labels: Categories = None, level: float = 0.95
) -> ClassificationReport:
    """Accuracy (Wilson interval), per-class and macro precision / recall / F1.

    Definitions follow sklearn's ``precision_recall_fscore_support(zero_division=0)``: a ratio
    whose denominator is zero is 0, and macro figures average over every label in ``labels``.
    """
    cm = confusion_matrix(y_true, y_pred, labels=labels)
    mat = cm.matrix.astype(np.float64)
    tp = np.diag(mat)
    pred_tot = mat.sum(axis=0)
    true_tot = mat.sum(axis=1)
    prec = np.divide(tp, pred_tot, out=np.zeros_like(tp), where=pred_tot > 0)
    rec = np.divide(tp, true_tot, out=np.zeros_like(tp), where=true_tot > 0)
    denom = prec + rec
    f1 = np.divide(2 * prec * rec, denom, out=np.zeros_like(tp), where=denom > 0)
    acc = wilson_interval(int(tp.sum()), cm.n_items, level=level) if cm.n_items else None
    return ClassificationReport(
        labels=cm.labels,
        value=cm.value,
        ci_low=acc.ci_low if acc else None,
        ci_high=acc.ci_high if acc else None,
        precision=tuple(float(v) for v in prec),
        recall=tuple(float(v) for v in rec),
        f1=tuple(float(v) for v in f1),
        support=tuple(int(v) for v in true_tot),
        macro_precision=float(prec.mean()),
        macro_recall=float(rec.mean()),
        macro_f1=float(f1.mean()),
        confusion=cm,
        n_items=cm.n_items,
        level=level,
        method="classification_report(zero_division=0); accuracy wilson",
        warnings=cm.warnings,
    )
