"""The outputs of a selection report sorted into cells (candidate x stratum), and the small
pieces every step of its computation shares: estimates as JSON, seeded generators, a metric's
orientation, and the paired difference of two candidates on the items both answered.
Pure: no database (reports/selection/compute.py runs the steps)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from evalstats.ppi import (
    PPIEstimate,
    StratifiedPPI,
    classical_mean,
    combine_strata,
    paired_difference_stratified,
)
from evalstats.results import Estimate

from .results import MetricRef

FloatArray = npt.NDArray[np.float64]
MIX = "mix"


def rng(seed: int, *parts: object) -> np.random.Generator:
    return np.random.default_rng([seed] + [zlib.crc32(str(p).encode()) for p in parts])


def est_json(e: Estimate) -> dict[str, Any]:
    return {"value": e.value, "ci_low": e.ci_low, "ci_high": e.ci_high, "n_items": e.n_items,
            "method": e.method, "level": e.level, "n_resamples": e.n_resamples,
            "p_value": e.p_value, "warnings": list(e.warnings)}


def clip_rate_intervals(estimates: list[dict[str, Any]], metrics: Sequence[Any]) -> None:
    """Rates live in [0, 1]: their intervals are cut to it (the cut interval covers whenever
    the uncut one does). The prediction-powered and normal intervals do not know the bound
    and can read 96 % [89, 103] near a pass rate of 1. Point estimates are left as computed."""
    rates = {m.key for m in metrics if m.unit == "rate"}
    for row in estimates:
        if row["metric"] not in rates:
            continue
        for kind in ("human", "judge", "ppi"):
            est = row.get(kind)
            if not est:
                continue
            if est.get("ci_low") is not None:
                est["ci_low"] = min(max(float(est["ci_low"]), 0.0), 1.0)
            if est.get("ci_high") is not None:
                est["ci_high"] = min(max(float(est["ci_high"]), 0.0), 1.0)


def ppi_json(e: PPIEstimate | None) -> dict[str, Any] | None:
    return None if e is None else e.to_json()


@dataclass
class Cells:
    """The outputs sorted by (candidate, stratum), with slices per cell."""

    frame: pd.DataFrame
    cand: npt.NDArray[np.int64]  # candidate index per row
    strat: npt.NDArray[np.int64]  # stratum code per row
    bounds: dict[tuple[int, int], tuple[int, int]]
    cand_bounds: dict[int, tuple[int, int]]


def cells_sort(outs: pd.DataFrame, cand_ids: Sequence[int], labels: Sequence[str]) -> Cells:
    cidx = pd.Index(list(cand_ids)).get_indexer(outs["candidate"].to_numpy())
    sidx = pd.Index(list(labels)).get_indexer(outs["stratum"].astype(str).to_numpy())
    order = np.lexsort((outs["output"].to_numpy(), sidx, cidx))
    frame = outs.iloc[order].reset_index(drop=True)
    c, s = cidx[order], sidx[order]
    key = c * (len(labels) + 1) + s
    bounds: dict[tuple[int, int], tuple[int, int]] = {}
    cand_bounds: dict[int, tuple[int, int]] = {}
    if key.size:
        edges = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate([[0], edges])
        ends = np.concatenate([edges, [key.size]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            bounds[(int(c[a]), int(s[a]))] = (a, b)
        cedges = np.flatnonzero(np.diff(c)) + 1
        for a, b in zip(np.concatenate([[0], cedges]).tolist(),
                        np.concatenate([cedges, [c.size]]).tolist(), strict=True):
            cand_bounds[int(c[a])] = (a, b)
    return Cells(frame, c.astype(np.int64), s.astype(np.int64), bounds, cand_bounds)



def oriented(m: MetricRef, value: float) -> float:
    """A value where larger is better."""
    return value if m.higher_is_better else -value


def difference_text(m: MetricRef, e: PPIEstimate, sign: float) -> str:
    """The improvement of an estimate as text: points for rates, the metric's unit else."""
    scale, unit = (100.0, " points") if m.unit == "rate" else (1.0, "")
    v = sign * e.value * scale
    if e.ci_low is None or e.ci_high is None:
        return f"{v:.1f}{unit} (no interval)"
    lo, hi = sorted((sign * e.ci_low * scale, sign * e.ci_high * scale))
    return f"{v:.1f}{unit} [{lo:.1f}, {hi:.1f}]"



def paired_difference(
    cells: Cells, a: int, b: int, key: str, labels: Sequence[str], code: Mapping[str, int],
    mix_codes: Mapping[int, float], level: float,
) -> Any:
    """Stratified paired difference a - b on the items both candidates answered (None when
    they share no labelled item)."""
    frame = cells.frame
    cols = ["item", f"f:{key}", f"y:{key}", "weight"]
    la, ha = cells.cand_bounds.get(a, (0, 0))
    lb, hb = cells.cand_bounds.get(b, (0, 0))
    fa = frame.iloc[la:ha][cols].assign(s=cells.strat[la:ha]).drop_duplicates("item")
    fb = frame.iloc[lb:hb][cols].drop_duplicates("item")
    j = fa.merge(fb, on="item", suffixes=("_a", "_b"))
    if not len(j):
        return None
    ya, yb = j[f"y:{key}_a"].to_numpy(np.float64), j[f"y:{key}_b"].to_numpy(np.float64)
    f_a, f_b = j[f"f:{key}_a"].to_numpy(np.float64), j[f"f:{key}_b"].to_numpy(np.float64)
    s = j["s"].to_numpy(np.int64)
    both_f = np.isfinite(f_a) & np.isfinite(f_b)
    both_y = np.isfinite(ya) & np.isfinite(yb)
    if not both_f.any() and both_y.any():
        # No judge score on the metric: the human labels alone decide.
        wy = (j["weight_a"].to_numpy(np.float64) * j["weight_b"].to_numpy(np.float64))[both_y]
        return paired_human_only(ya[both_y] - yb[both_y], s[both_y], wy, mix_codes, level)
    lab = both_y & both_f
    if not lab.any():
        return None
    # Both outputs of a labelled pair were drawn; their weights multiply (independent draws of
    # outputs; within a stratum the weights are constant for a stratified plan anyway).
    w = (j["weight_a"].to_numpy(np.float64) * j["weight_b"].to_numpy(np.float64))[lab]
    # As for the cells: the judge term over every item both candidates answered.
    return paired_difference_stratified(
        ya[lab], yb[lab], f_a[lab], f_b[lab], s[lab], f_a[both_f], f_b[both_f], s[both_f],
        mix=mix_codes, w=w, level=level, census=True,
    )


def paired_human_only(
    d: FloatArray, s: npt.NDArray[np.int64], w: FloatArray, mix_codes: Mapping[int, float],
    level: float,
) -> StratifiedPPI:
    """The paired difference from human labels alone: per stratum the weighted mean of the
    items' own differences (`classical_mean`), combined with the mix (`combine_strata`)."""
    per: dict[int, PPIEstimate] = {}
    for si in np.unique(s).tolist():
        at = s == si
        per[int(si)] = classical_mean(d[at], w=w[at], level=level)
    mixed, gone = combine_strata(per, mix_codes, level=level,
                                 method="mix of per-stratum human-only paired differences")
    return StratifiedPPI(per_stratum=per, mix=mixed, missing=tuple(gone),
                         weights=dict(mix_codes))


__all__ = ["MIX", "Cells", "cells_sort", "clip_rate_intervals", "difference_text", "est_json",
           "oriented", "paired_difference", "paired_human_only", "ppi_json", "rng"]
