"""Every cell metric per candidate (the `by_candidate` parameter; result version 4).

A paper's per-system table (one correlation per generation system, one agreement per model)
is the cell's figures restricted to the subjects of one candidate. Each row holds, for one
judge version x criterion x stratum x candidate, the cell's own coefficients (the same
functions, consensus and intervals as the main table) on the cell's subjects of that candidate:
an output is its candidate's; a comparison counts for each of its two candidates (the
comparisons that candidate took part in, on either side).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from calibration.frames import CriterionRef, JudgeRef, RatingData

from .coefficients import (
    interval_metrics,
    nominal_metrics,
    ordinal_metrics,
    primary_metric_for,
    vote_metrics,
)
from .common import FloatArray, cell_rng
from .humans import HumanBlock, Stratum


def _cell_metrics(
    crit: CriterionRef,
    block: HumanBlock,
    idx: npt.NDArray[np.int64],
    idx_v: npt.NDArray[np.int64],
    j_all: FloatArray,
    continuous: bool,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The metrics a cell computes (compute._judge_part), on subjects `idx` (judge and human
    label) and `idx_v` (judged, for the per-vote figures)."""
    j = j_all[idx]
    items = block.items[idx]
    if crit.scale == "interval":
        metrics, _ = interval_metrics(crit, j, block.consensus[idx], items, p, rng)
        return metrics
    if crit.scale == "ordinal":
        return ordinal_metrics(
            crit, j, block.consensus[idx], block.rounded[idx], items, continuous, p, rng
        )
    metrics, _ = nominal_metrics(crit, j, block.consensus[idx], items, p, rng)
    if idx_v.size:
        metrics.update(
            vote_metrics(
                crit, j_all[idx_v], block.matrix[:, idx_v], block.items[idx_v], p, rng
            )
        )
    return metrics


def candidate_rows(
    data: RatingData,
    crit: CriterionRef,
    jv: JudgeRef,
    block: HumanBlock,
    st: Stratum,
    idx: npt.NDArray[np.int64],
    idx_v: npt.NDArray[np.int64],
    j_all: FloatArray,
    continuous: bool,
    p: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The rows of one cell (judge version x criterion x stratum), one per candidate with a
    subject in the cell, in candidate name order."""
    frame = data.subjects.loc[block.subjects]
    first = frame["candidate"].to_numpy(dtype=np.int64)
    second = frame["candidate_b"].to_numpy(dtype=np.int64)
    present = np.unique(np.concatenate([first[idx], second[idx], first[idx_v], second[idx_v]]))
    names = sorted(
        (data.candidates[int(c)][0], int(c)) for c in present if int(c) in data.candidates
    )
    rows = []
    primary = primary_metric_for(crit, continuous)
    for name, cid in names:
        of = (first == cid) | (second == cid)
        cidx = idx[of[idx]]
        cidx_v = idx_v[of[idx_v]]
        if cidx.size == 0:
            continue
        rng = cell_rng(p["seed"], "candidate", jv.id, crit.id, st.dimension, st.label, name)
        rows.append(
            {
                "judge_version": jv.id,
                "criterion": crit.id,
                **st.as_dict(),
                "candidate": name,
                "n_subjects": int(cidx.size),
                "n_items": int(np.unique(block.items[cidx]).size),
                "primary_metric": primary,
                "metrics": _cell_metrics(crit, block, cidx, cidx_v, j_all, continuous, p, rng),
            }
        )
    return rows


__all__ = ["candidate_rows"]
