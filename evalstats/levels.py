"""Sample-level correlation: per input, correlate judge and human scores across its outputs.

NLG meta-evaluation reports a metric's correlation with humans at up to three levels:

* **sample level** (also "segment", "summary" or "input" level): for each input (item),
  correlate the judge's and the humans' scores across the outputs that answered it (one per
  system), then average the per-input correlations over inputs. Inputs where either side is
  constant have no correlation and are skipped (counted); inputs with fewer than
  ``min_subjects`` scored outputs are skipped too (two points correlate at +/-1 whatever the
  scores). This is the convention of SummEval (Fabbri et al., 2021) and G-Eval (Liu et al.,
  2023): ``mean_i corr(judge[i, :], human[i, :])``.
* **dataset level** (HANNA's "story level"): one correlation over every input x output pair,
  :func:`evalstats.correlation` with the item-clustered interval of
  :func:`evalstats.clustered.correlation_clustered`.
* **system level**: the correlation of per-system means
  (:func:`evalstats.clustered.rank_corr_rows` for the bootstrap).

This module gives the sample level. The per-item correlations are computed for all items at
once on a padded items x outputs array (Kendall tau-b from sign matrices, Spearman as Pearson
on within-item midranks), and the interval resamples items: each item contributes
``[has a correlation, its correlation]`` and the statistic is their ratio, so the vectorised
engine :func:`evalstats.bootstrap_from_item_stats` draws all resamples in one product. Items
without a correlation stay in the resampling (how many inputs are usable is itself random).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from evalstats.bootstrap import bootstrap_from_item_stats
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = ["PerItemCorrelations", "SampleLevelCorrelation", "per_item_correlations",
           "sample_level_correlation"]

FloatArray = npt.NDArray[np.float64]
Method = Literal["spearman", "kendall", "pearson"]

# Items x width x width sign matrices per block (Kendall): about 32 MB of float64.
_BLOCK_ELEMENTS = 4_000_000


@dataclass(frozen=True, kw_only=True)
class PerItemCorrelations:
    """One correlation per item (NaN where skipped), in sorted item order.

    ``status`` is 0 for a usable item, 1 for fewer than ``min_subjects`` scored subjects and 2
    for a constant side (judge or humans).
    """

    items: npt.NDArray[np.generic]
    values: FloatArray
    n_subjects: npt.NDArray[np.int64]
    status: npt.NDArray[np.int8]


@dataclass(frozen=True, kw_only=True)
class SampleLevelCorrelation(Estimate):
    """Mean over items of the per-item correlation, with an item-bootstrap interval.

    ``n_items`` counts the items averaged; ``n_items_constant`` and ``n_items_too_few`` the
    items skipped (a constant side; fewer than ``min_subjects`` subjects); ``n_ratings`` the
    subjects of the usable items.
    """

    n_items_constant: int = 0
    n_items_too_few: int = 0


def _pad(
    x: FloatArray, y: FloatArray, items: npt.ArrayLike
) -> tuple[npt.NDArray[np.generic], FloatArray, FloatArray, npt.NDArray[np.int64]]:
    """Items x max-subjects arrays of x and y (NaN padding), sorted item order."""
    uniq, inverse = np.unique(np.asarray(items), return_inverse=True)
    counts = np.bincount(inverse, minlength=uniq.size).astype(np.int64)
    order = np.argsort(inverse, kind="stable")
    slot = np.empty(x.size, dtype=np.int64)
    slot[order] = np.arange(x.size) - (np.cumsum(counts) - counts)[inverse[order]]
    width = int(counts.max()) if counts.size else 0
    px = np.full((uniq.size, width), np.nan)
    py = np.full((uniq.size, width), np.nan)
    px[inverse, slot] = x
    py[inverse, slot] = y
    return uniq, px, py, counts


def _row_pearson(px: FloatArray, py: FloatArray, mask: npt.NDArray[np.bool_]) -> FloatArray:
    n = mask.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mx = np.where(mask, px, 0.0).sum(axis=1) / n
        my = np.where(mask, py, 0.0).sum(axis=1) / n
        dx = np.where(mask, px - mx[:, None], 0.0)
        dy = np.where(mask, py - my[:, None], 0.0)
        r = (dx * dy).sum(axis=1) / np.sqrt((dx**2).sum(axis=1) * (dy**2).sum(axis=1))
    return np.asarray(np.clip(r, -1.0, 1.0), dtype=np.float64)


def _row_kendall(px: FloatArray, py: FloatArray) -> FloatArray:
    """Kendall tau-b per row: sum(sx * sy) / sqrt(sum sx^2 * sum sy^2) over ordered pairs."""
    n_rows, width = px.shape
    out = np.empty(n_rows)
    step = max(1, _BLOCK_ELEMENTS // max(1, width * width))
    for start in range(0, n_rows, step):
        bx = px[start : start + step]
        by = py[start : start + step]
        # NaN (padding) gives NaN signs: no pair with a missing subject counts.
        sx = np.nan_to_num(np.sign(bx[:, :, None] - bx[:, None, :]))
        sy = np.nan_to_num(np.sign(by[:, :, None] - by[:, None, :]))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[start : start + step] = (sx * sy).sum(axis=(1, 2)) / np.sqrt(
                (sx**2).sum(axis=(1, 2)) * (sy**2).sum(axis=(1, 2))
            )
    return out


def per_item_correlations(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    items: npt.ArrayLike,
    *,
    method: Method,
    min_subjects: int = 3,
) -> PerItemCorrelations:
    """Correlation of ``x`` and ``y`` within each item (subjects with a NaN on either side are
    left out first); NaN with ``status`` 1 (too few subjects) or 2 (a constant side)."""
    if method not in ("spearman", "kendall", "pearson"):
        raise ValueError("method must be 'pearson', 'spearman' or 'kendall'")
    xf = np.asarray(x, dtype=np.float64)
    yf = np.asarray(y, dtype=np.float64)
    it = np.asarray(items)
    if xf.shape != yf.shape or xf.shape != it.shape or xf.ndim != 1:
        raise ValueError("x, y and items must be 1-D arrays of the same length")
    keep = ~np.isnan(xf) & ~np.isnan(yf)
    uniq_all = np.unique(it)
    uniq, px, py, counts = _pad(xf[keep], yf[keep], it[keep])
    # Items whose every subject lacks a score have no row: they are too few as well.
    n_sub = np.zeros(uniq_all.size, dtype=np.int64)
    n_sub[np.searchsorted(uniq_all, uniq)] = counts
    values = np.full(uniq_all.size, np.nan)
    status = np.where(n_sub < max(2, min_subjects), 1, 0).astype(np.int8)
    if uniq.size:
        mask = ~np.isnan(px)
        with np.errstate(invalid="ignore"):
            const = (np.nanmax(px, axis=1) == np.nanmin(px, axis=1)) | (
                np.nanmax(py, axis=1) == np.nanmin(py, axis=1)
            )
        if method == "pearson":
            r = _row_pearson(px, py, mask)
        elif method == "spearman":
            rx = rankdata(px, axis=1, nan_policy="omit")
            ry = rankdata(py, axis=1, nan_policy="omit")
            r = _row_pearson(np.asarray(rx, dtype=np.float64), np.asarray(ry, dtype=np.float64),
                             mask)
        else:
            r = _row_kendall(px, py)
        at = np.searchsorted(uniq_all, uniq)
        ok = status[at] == 0
        status[at[ok & const]] = 2
        usable = ok & ~const
        values[at[usable]] = r[usable]
    return PerItemCorrelations(items=uniq_all, values=values, n_subjects=n_sub, status=status)


def _mean_ratio(s: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s[..., 1] / s[..., 0], dtype=np.float64)


def sample_level_correlation(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    items: npt.ArrayLike,
    *,
    method: Method,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    min_subjects: int = 3,
) -> SampleLevelCorrelation:
    """Mean over items of the within-item correlation of ``x`` and ``y`` (see the module
    docstring), with an interval resampling items; NaN when no item is usable."""
    per = per_item_correlations(x, y, items, method=method, min_subjects=min_subjects)
    usable = per.status == 0
    name = "kendall_tau_b" if method == "kendall" else method
    n_const = int((per.status == 2).sum())
    n_few = int((per.status == 1).sum())
    warnings: list[str] = []
    if n_const:
        warnings.append(f"{n_const} items skipped: judge or human scores constant across them")
    if n_few:
        warnings.append(f"{n_few} items skipped: fewer than {max(2, min_subjects)} subjects")
    method_name = f"sample_level[{name}] (mean over items of the within-item correlation)"
    if not usable.any():
        return SampleLevelCorrelation(
            value=float("nan"),
            method=method_name,
            n_items_constant=n_const,
            n_items_too_few=n_few,
            warnings=(*warnings, "no item with a defined correlation"),
        )
    stats = np.column_stack([usable, np.where(usable, per.values, 0.0)]).astype(np.float64)
    est = bootstrap_from_item_stats(
        stats, _mean_ratio, rng=rng, options=options, method=method_name,
        extra_warnings=warnings,
    )
    n_used = int(usable.sum())
    # The engine's small-sample warning counts every resampled item; the one that matters
    # is how many items are averaged.
    kept = [w for w in est.warnings if not w.startswith("only ")]
    if n_used < options.min_items:
        kept.append(
            f"only {n_used} items averaged (< {options.min_items}): the estimate and its "
            "interval are unstable"
        )
    return SampleLevelCorrelation(
        value=float(per.values[usable].mean()),
        ci_low=est.ci_low,
        ci_high=est.ci_high,
        n_items=n_used,
        n_ratings=int(per.n_subjects[usable].sum()),
        level=est.level,
        n_resamples=est.n_resamples,
        method=est.method,
        warnings=tuple(kept),
        n_items_constant=n_const,
        n_items_too_few=n_few,
    )
