"""How well probabilities are calibrated: reliability bins, ECE, Brier, AUROC, intervals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from evalstats._data import small_n_warning
from evalstats.bootstrap import replicate_estimate, resample_counts
from evalstats.calibration._common import FloatArray, _estimate_json, _json_value, _prepare
from evalstats.clustered import with_interval
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

# AUROC intervals resample per-level tables; beyond this many distinct predictions the
# predictions are grouped into this many quantile levels for the interval (the point is exact).
_AUROC_MAX_LEVELS = 50
# Bootstrap resamples per block: bounds the B x clusters multiplicity matrix (~64 MB).
_BLOCK_ELEMENTS = 8_000_000


# --- diagnostics -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReliabilityBin:
    """One bin of a reliability diagram: rows with predictions in (lower, upper] (the first
    bin also holds ``lower``); ``weight`` = summed weights, means are weighted."""

    lower: float
    upper: float
    count: int
    weight: float
    mean_predicted: float
    fraction_pass: float

    def to_json(self) -> dict[str, Any]:
        return cast(dict[str, Any], _json_value(dataclasses.asdict(self)))


@dataclass(frozen=True, kw_only=True)
class CalibrationDiagnostics:
    """How well probabilities match human pass rates (see :func:`calibration_diagnostics`)."""

    bins: tuple[ReliabilityBin, ...]
    ece: Estimate
    ece_mass: Estimate
    brier: Estimate
    brier_reliability: float
    brier_resolution: float
    brier_uncertainty: float
    log_loss: Estimate
    auroc: Estimate | None
    n: int
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "bins": [b.to_json() for b in self.bins],
            "ece": _estimate_json(self.ece),
            "ece_mass": _estimate_json(self.ece_mass),
            "brier": _estimate_json(self.brier),
            "brier_reliability": _json_value(self.brier_reliability),
            "brier_resolution": _json_value(self.brier_resolution),
            "brier_uncertainty": _json_value(self.brier_uncertainty),
            "log_loss": _estimate_json(self.log_loss),
            "auroc": _estimate_json(self.auroc),
            "n": int(self.n),
            "warnings": list(self.warnings),
        }


def _bin_edges(prob: FloatArray, n_bins: int, strategy: str) -> FloatArray:
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        return np.asarray(np.percentile(prob, np.linspace(0.0, 1.0, n_bins + 1) * 100))
    raise ValueError("strategy must be 'uniform' or 'quantile'")


def _bin_ids(prob: FloatArray, edges: FloatArray) -> npt.NDArray[np.intp]:
    return np.searchsorted(edges[1:-1], prob)  # sklearn's calibration_curve convention


def _bins_of(
    y: FloatArray, p: FloatArray, w: FloatArray, edges: FloatArray
) -> tuple[ReliabilityBin, ...]:
    n_bins = edges.size - 1
    ids = _bin_ids(p, edges)
    count = np.bincount(ids, minlength=n_bins)
    sw = np.bincount(ids, weights=w, minlength=n_bins)
    swp = np.bincount(ids, weights=w * p, minlength=n_bins)
    swy = np.bincount(ids, weights=w * y, minlength=n_bins)
    out = []
    for b in np.flatnonzero(count):
        mean_p = float(swp[b] / sw[b]) if sw[b] > 0 else float("nan")
        frac = float(swy[b] / sw[b]) if sw[b] > 0 else float("nan")
        out.append(
            ReliabilityBin(
                lower=float(edges[b]),
                upper=float(edges[b + 1]),
                count=int(count[b]),
                weight=float(sw[b]),
                mean_predicted=mean_p,
                fraction_pass=frac,
            )
        )
    return tuple(out)


def _prepare_probs(
    passed: npt.ArrayLike, prob: npt.ArrayLike, weights: npt.ArrayLike | None
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    p, y, w, keep = _prepare(prob, passed, weights)
    if ((p[keep] < 0) | (p[keep] > 1)).any():
        raise ValueError("probabilities must lie in [0, 1]")
    return y, p, w, keep


def reliability_bins(
    passed: npt.ArrayLike,
    prob: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    n_bins: int = 10,
    strategy: Literal["uniform", "quantile"] = "uniform",
) -> tuple[ReliabilityBin, ...]:
    """Reliability-diagram bins, empty bins omitted.

    ``"uniform"``: n_bins equal-width bins of [0, 1]; ``"quantile"``: edges at the
    (unweighted) quantiles of ``prob``. Bin membership and unweighted means are those of
    ``sklearn.calibration.calibration_curve``; with ``weights`` the means are weighted.
    """
    y, p, w, keep = _prepare_probs(passed, prob, weights)
    y, p, w = y[keep], p[keep], w[keep]
    if p.size == 0:
        return ()
    return _bins_of(y, p, w, _bin_edges(p, n_bins, strategy))


def _ece_fn(n_bins: int) -> Any:
    def fn(t: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(np.abs(t[..., 1:]).sum(axis=-1) / t[..., 0], dtype=np.float64)

    return fn


def _ratio(t: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(t[..., 1] / t[..., 0], dtype=np.float64)


def _auroc_from_tables(t: FloatArray) -> FloatArray:
    """AUROC from per-level weighted counts [pos_1..pos_L, neg_1..neg_L] (levels ascending)."""
    half = t.shape[-1] // 2
    pos, neg = t[..., :half], t[..., half:]
    below = np.cumsum(neg, axis=-1) - neg
    with np.errstate(divide="ignore", invalid="ignore"):
        num = (pos * (below + 0.5 * neg)).sum(axis=-1)
        return np.asarray(num / (pos.sum(axis=-1) * neg.sum(axis=-1)), dtype=np.float64)


def _auroc_levels(p: FloatArray) -> tuple[npt.NDArray[np.intp], int, bool]:
    levels, codes = np.unique(p, return_inverse=True)
    if levels.size <= _AUROC_MAX_LEVELS:
        return np.asarray(codes), int(levels.size), False
    # Quantile levels of the distinct predictions keep their order (ties only within a level).
    cuts = np.quantile(levels, np.linspace(0, 1, _AUROC_MAX_LEVELS + 1)[1:-1])
    coarse = np.searchsorted(np.unique(cuts), p, side="left")
    return np.asarray(coarse), int(coarse.max()) + 1, True


StatFn = Callable[[FloatArray], FloatArray]
Columns = slice | npt.NDArray[np.intp]


def _joint_bootstrap(
    cluster_stats: FloatArray,
    parts: dict[str, tuple[Columns, StatFn]],
    *,
    n_rows: int,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> dict[str, Estimate]:
    """Clustered bootstrap of several statistics of summed per-cluster columns, one draw.

    ``parts`` maps a name to (its columns, its statistic). Every statistic sees the same
    resampled clusters (multiplicities from :func:`evalstats.resample_counts`, in blocks) and
    the same leave-one-cluster-out jackknife for BCa; intervals as in
    :func:`evalstats.bootstrap_from_item_stats`.
    """
    n_cl = cluster_stats.shape[0]
    total = cluster_stats.sum(axis=0)
    block = max(1, _BLOCK_ELEMENTS // max(n_cl, 1))
    sums: list[FloatArray] = []
    done = 0
    while done < options.n_resamples:
        b = min(block, options.n_resamples - done)
        sums.append(resample_counts(n_cl, b, rng).astype(np.float64) @ cluster_stats)
        done += b
    resampled = np.concatenate(sums)
    leave_out = total[None, :] - cluster_stats if options.ci == "bca" else None
    base = list(small_n_warning(n_cl, options.min_items))
    out: dict[str, Estimate] = {}
    # Tiny samples give undefined replicates: reported as warnings, not numpy warnings.
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, (cols, fn) in parts.items():
            theta = float(fn(total[None, cols])[0])
            boot = fn(resampled[:, cols])
            # ECE sums absolute gaps, so every resample's value is biased upward of the
            # sample's; BCa's bias correction then moves the whole interval below the point
            # estimate. The percentile interval keeps it around the value a lead reads.
            ci = "percentile" if name.startswith("ece") else options.ci
            jk = fn(leave_out[:, cols]) if leave_out is not None and ci == "bca" else None
            out[name] = replicate_estimate(boot, theta, jk, None, options, n_items=n_cl,
                                           n_ratings=n_rows, method=name, warnings=base, ci=ci,
                                           resampled="clustered by item")
    return out


def confidence_of(passed: npt.ArrayLike, prob: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """A probability of "the judge's side is right" read as the usual (confidence, correct)
    pair: confidence max(p, 1 - p) in [0.5, 1], correct whether the side the probability
    favours is the human's (NaN kept). For the ECE of a pairwise judge in confidence bins."""
    y = np.asarray(passed, dtype=np.float64)
    p = np.asarray(prob, dtype=np.float64)
    conf = np.maximum(p, 1.0 - p)
    correct = np.where(p >= 0.5, y, 1.0 - y)
    return np.asarray(correct, dtype=np.float64), np.asarray(conf, dtype=np.float64)


def calibration_diagnostics(
    passed: npt.ArrayLike,
    prob: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    clusters: npt.ArrayLike | None = None,
    n_bins: int = 10,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
    low: float = 0.0,
) -> CalibrationDiagnostics:
    """Calibration diagnostics of probabilities ``prob`` against human labels ``passed``.

    All figures are weighted by ``weights`` (default 1); pass held-out predictions so that the
    figures are not in-sample. ``bins``: ``n_bins`` equal-width reliability bins (empty ones
    omitted). ``ece``: sum over equal-width bins of (bin weight share) x |pass share - mean
    prediction|; ``ece_mass``: the same over ``n_bins`` equal-mass (quantile) bins. ``brier``:
    weighted mean squared error; its Murphy decomposition ``reliability - resolution +
    uncertainty`` groups rows by their distinct predicted values when there are at most
    ``n_bins`` of them (then the identity with the Brier score is exact) and otherwise by the
    equal-width bins with each bin's mean prediction (the identity then misses the
    within-bin variation). ``log_loss``: weighted mean with predictions clipped to
    [machine eps, 1 - eps] (scikit-learn's rule). ``auroc``: weighted, ties count one half;
    ``None`` with one class.

    ``low``: the equal-width bins span [low, 1] (0.5 for a confidence in the side a judge
    chose, the usual binning of a pairwise judge's ECE: :func:`confidence_of`).

    ECE is biased upward (absolute values of noisy bin errors); a BCa interval corrects for
    that bias and can therefore lie below the plug-in estimate.

    Intervals: item-clustered bootstrap over ``clusters`` (default: every row its own
    cluster), with ``options``; bin edges stay those of the full sample. The AUROC interval
    resamples per-level tables; with more than 50 distinct predictions they are grouped into
    50 quantile levels for the interval (the point estimate is exact). Small data adds
    warnings, never raises.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    y, p, w, cl = _diagnostic_rows(passed, prob, weights, clusters)
    n = int(y.size)
    warnings: list[str] = []
    if n == 0 or float(w.sum()) <= 0:
        return _no_labelled_rows(n)
    uniform = (_bin_edges(p, n_bins, "uniform") if low == 0.0
               else np.linspace(float(low), 1.0, n_bins + 1))
    quantile = _bin_edges(p, n_bins, "quantile")
    two_classes = float((w * y).sum()) > 0 and float((w * (1 - y)).sum()) > 0
    codes, n_levels, coarsened = _auroc_levels(p)
    stats = _cluster_stats(y, p, w, cl, (uniform, quantile),
                           (codes, n_levels) if two_classes else None)
    parts = _diagnostic_parts(n_bins, n_levels if two_classes else None)
    auc_name = "auroc" + (f" (interval on {n_levels} quantile levels)" if coarsened else "")
    if two_classes:
        parts[auc_name] = parts.pop("auroc")
    est = _joint_bootstrap(stats, parts, n_rows=n, rng=rng, options=options)
    ece, ece_mass, brier, log_loss = (est[name] for name in list(parts)[:4])
    reliability, resolution, uncertainty = _murphy(y, p, w, n_bins, uniform)
    auroc: Estimate | None = None
    if two_classes:
        auroc = with_interval(_auroc_point(y, p, w, est[auc_name].n_items), est[auc_name])
    else:
        warnings.append("labels of one class only: AUROC undefined")
    for e in (ece, brier):
        warnings.extend(w_ for w_ in e.warnings if w_ not in warnings)
    return CalibrationDiagnostics(
        bins=_bins_of(y, p, w, uniform),
        ece=ece,
        ece_mass=ece_mass,
        brier=brier,
        brier_reliability=reliability,
        brier_resolution=resolution,
        brier_uncertainty=uncertainty,
        log_loss=log_loss,
        auroc=auroc,
        n=n,
        warnings=tuple(warnings),
    )


def _diagnostic_rows(
    passed: npt.ArrayLike,
    prob: npt.ArrayLike,
    weights: npt.ArrayLike | None,
    clusters: npt.ArrayLike | None,
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[Any]]:
    """Labels, probabilities, weights and clusters of the rows with a label and a prediction."""
    y, p, w, keep = _prepare_probs(passed, prob, weights)
    cl_all = np.arange(y.size) if clusters is None else np.asarray(clusters)
    if cl_all.shape[0] != y.size:
        raise ValueError("clusters must have one entry per row")
    return y[keep], p[keep], w[keep], cl_all[keep]


def _no_labelled_rows(n: int) -> CalibrationDiagnostics:
    """Diagnostics of nothing: NaN figures that say why."""
    nan = Estimate(
        value=float("nan"), method="no labelled rows", warnings=("no labelled rows",)
    )
    return CalibrationDiagnostics(
        bins=(),
        ece=nan,
        ece_mass=nan,
        brier=nan,
        brier_reliability=float("nan"),
        brier_resolution=float("nan"),
        brier_uncertainty=float("nan"),
        log_loss=nan,
        auroc=None,
        n=n,
        warnings=("no labelled rows",),
    )


def _cluster_stats(
    y: FloatArray,
    p: FloatArray,
    w: FloatArray,
    cl: npt.NDArray[Any],
    edges_pair: tuple[FloatArray, FloatArray],
    auroc_levels: tuple[npt.NDArray[np.intp], int] | None,
) -> FloatArray:
    """One row of summed statistics per cluster: [w, w (y - p) per equal-width bin, w (y - p)
    per equal-mass bin, w (p - y)^2, w log loss, AUROC level tables (with two classes)]."""
    p_ll = np.clip(p, np.finfo(np.float64).eps, 1 - np.finfo(np.float64).eps)
    ll_rows = -(y * np.log(p_ll) + (1 - y) * np.log1p(-p_ll))
    # One-hot blocks are summed with bincount on (cluster, cell) codes: no dense rows x cells
    # matrix.
    ccode = np.unique(cl, return_inverse=True)[1].reshape(-1)
    n_cl = int(ccode.max()) + 1

    def cells(cell: npt.NDArray[np.intp], n_cells: int, values: FloatArray) -> FloatArray:
        flat = np.bincount(ccode * n_cells + cell, weights=values, minlength=n_cl * n_cells)
        return np.asarray(flat, dtype=np.float64).reshape(n_cl, n_cells)

    def col(values: FloatArray) -> FloatArray:
        return np.asarray(np.bincount(ccode, weights=values, minlength=n_cl), dtype=np.float64)[
            :, None
        ]

    columns = [col(w)]
    for edges in edges_pair:
        columns.append(cells(_bin_ids(p, edges), edges.size - 1, w * (y - p)))
    columns += [col(w * (p - y) ** 2), col(w * ll_rows)]
    if auroc_levels is not None:
        codes, n_levels = auroc_levels
        columns.append(cells(codes + n_levels * (1 - y).astype(np.intp), 2 * n_levels, w))
    return np.asarray(np.hstack(columns))


def _diagnostic_parts(k: int, n_levels: int | None) -> dict[str, tuple[Columns, StatFn]]:
    """The statistics of `_cluster_stats`'s columns, by name (AUROC's under "auroc")."""
    c_brier = 1 + 2 * k
    parts: dict[str, tuple[Columns, StatFn]] = {
        f"ece[equal-width, {k} bins]": (slice(0, 1 + k), _ece_fn(k)),
        f"ece[equal-mass, {k} bins]": (np.r_[0, 1 + k : 1 + 2 * k], _ece_fn(k)),
        "brier": (np.r_[0, c_brier], _ratio),
        "log_loss": (np.r_[0, c_brier + 1], _ratio),
    }
    if n_levels is not None:
        parts["auroc"] = (slice(c_brier + 2, c_brier + 2 + 2 * n_levels), _auroc_from_tables)
    return parts


def _murphy(
    y: FloatArray, p: FloatArray, w: FloatArray, n_bins: int, uniform: FloatArray,
) -> tuple[float, float, float]:
    """Murphy (1973) decomposition of the Brier score: reliability, resolution, uncertainty."""
    wsum = float(w.sum())
    obar = float((w * y).sum() / wsum)
    distinct, dcodes = np.unique(p, return_inverse=True)
    groups = dcodes if distinct.size <= n_bins else _bin_ids(p, uniform)
    gw = np.bincount(groups, weights=w)
    nz = gw > 0
    gp = np.bincount(groups, weights=w * p)[nz] / gw[nz]
    gy = np.bincount(groups, weights=w * y)[nz] / gw[nz]
    reliability = float((gw[nz] * (gp - gy) ** 2).sum() / wsum)
    resolution = float((gw[nz] * (gy - obar) ** 2).sum() / wsum)
    return reliability, resolution, obar * (1 - obar)


def _auroc_point(y: FloatArray, p: FloatArray, w: FloatArray, n_items: int) -> Estimate:
    """The exact AUROC over every distinct prediction (the interval may use coarser levels)."""
    distinct, dcodes = np.unique(p, return_inverse=True)
    n_distinct = int(distinct.size)
    exact = np.concatenate(
        [
            np.bincount(dcodes, weights=w * y, minlength=n_distinct),
            np.bincount(dcodes, weights=w * (1 - y), minlength=n_distinct),
        ]
    )
    return Estimate(
        value=float(_auroc_from_tables(exact[None, :])[0]),
        n_items=n_items,
        n_ratings=int(y.size),
        method="auroc",
    )
