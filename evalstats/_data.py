"""Input normalisation shared by the public functions (private module)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

Array = npt.NDArray[np.generic]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def as_1d(x: npt.ArrayLike, name: str = "x") -> Array:
    """Return ``x`` as a 1-D array (object dtype is kept for string labels)."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def as_2d(x: npt.ArrayLike, name: str = "reliability_data") -> Array:
    """Return ``x`` as a 2-D raters x items array."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (raters x items), got shape {arr.shape}")
    return arr


def missing_mask(x: Array) -> npt.NDArray[np.bool_]:
    """True where a value is missing (NaN or None)."""
    if x.dtype.kind in "fc":
        return np.isnan(x)
    if x.dtype.kind in "iub":
        return np.zeros(x.shape, dtype=bool)
    return np.asarray(pd.isna(x), dtype=bool)


def as_float(x: Array, name: str = "x") -> FloatArray:
    """Numeric view with NaN for missing (None becomes NaN)."""
    if x.dtype.kind == "O":
        x = np.where(missing_mask(x), np.nan, x)
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric for this statistic") from exc


def paired(
    a: npt.ArrayLike, b: npt.ArrayLike, names: tuple[str, str] = ("a", "b")
) -> tuple[Array, Array, int]:
    """Drop the items where either side is missing; return (a, b, n_dropped)."""
    a_arr = as_1d(a, names[0])
    b_arr = as_1d(b, names[1])
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same length")
    keep = ~(missing_mask(a_arr) | missing_mask(b_arr))
    return a_arr[keep], b_arr[keep], int((~keep).sum())


def resolve_categories(
    categories: Sequence[object] | npt.ArrayLike | None, *arrays: Array
) -> Array:
    """The explicit category list, or the sorted observed values when none is given."""
    if categories is not None:
        cats = np.asarray(categories)
        if cats.ndim != 1 or len(pd.unique(cats)) != len(cats):
            raise ValueError("categories must be a 1-D list without duplicates")
        return cats
    values = [arr[~missing_mask(arr)].ravel() for arr in arrays]
    observed = np.concatenate(values) if values else np.array([])
    uniq = pd.unique(observed)
    try:
        return np.asarray(np.sort(uniq))
    except TypeError:
        # Mixed, unorderable labels: keep first-appearance order (only nominal use is sensible).
        return np.asarray(uniq)


def encode(x: Array, categories: Array) -> IntArray:
    """Integer codes of ``x`` in ``categories`` (-1 for missing). Unknown values raise."""
    missing = missing_mask(x)
    flat = x.ravel()
    codes = np.full(flat.shape, -1, dtype=np.int64)
    present = ~missing.ravel()
    if present.any():
        found = pd.Index(categories).get_indexer(pd.Index(flat[present]))
        if (found < 0).any():
            bad = pd.unique(flat[present][found < 0])[:5]
            raise ValueError(f"values not in categories: {list(bad)}")
        codes[present] = found
    return codes.reshape(x.shape)


def small_n_warning(n: int, min_items: int, what: str = "items") -> tuple[str, ...]:
    if n < min_items:
        return (f"only {n} {what} (< {min_items}): the estimate and its interval are unstable",)
    return ()
