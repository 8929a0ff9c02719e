"""System level: the judge's and the humans' candidate means, correlated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import evalstats as es
from evalstats.clustered import finite_percentile_interval, rank_corr_rows

from .common import est_dict, finite_or_none, numeric_reading
from .humans import JudgeSubjects


def system_correlations(
    js: JudgeSubjects,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """Counts and the three correlations of candidate means on the subjects ``idx`` (judge
    scores ``j``), and the candidates' means; None below three candidates."""
    data, crit, jv, block, idx, j = js.data, js.crit, js.jv, js.block, js.idx, js.j
    h = block.consensus[idx] if crit.scale == "ordinal" else block.human_num_mean[idx]
    jn = j if jv.value_type == "continuous" else numeric_reading(crit, j)
    if jn is None or crit.scale == "pairwise":
        return None
    cands = data.subjects.loc[block.subjects[idx], "candidate"].to_numpy(dtype=np.int64)
    ucand, ci = np.unique(cands, return_inverse=True)
    if ucand.size < 3:
        return None
    uitem, ii = np.unique(block.items[idx], return_inverse=True)
    m = ucand.size
    sj = np.zeros((uitem.size, m))
    sh = np.zeros((uitem.size, m))
    cnt = np.zeros((uitem.size, m))
    np.add.at(sj, (ii, ci), jn)
    np.add.at(sh, (ii, ci), h)
    np.add.at(cnt, (ii, ci), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mj = sj.sum(0) / cnt.sum(0)
        mh = sh.sum(0) / cnt.sum(0)
    w = es.resample_counts(uitem.size, p["n_resamples"], rng).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        bj = (w @ sj) / (w @ cnt)
        bh = (w @ sh) / (w @ cnt)
    out: dict[str, Any] = {
        "n_candidates": m,
        "n_items": int(uitem.size),
        "n_subjects": int(idx.size),
    }
    for method in ("kendall", "spearman", "pearson"):
        point = es.correlation(mj, mh, method=method)
        lo, hi = finite_percentile_interval(rank_corr_rows(bj, bh, method), p["level"])
        out[method] = {
            **est_dict(point),
            "ci_low": lo,
            "ci_high": hi,
            "method": f"{point.method} over {m} candidate means; interval: percentile "
            f"bootstrap (B={p['n_resamples']}, items resampled)",
        }
    candidates = [
        {
            "name": data.candidates[int(c)][0],
            "judge_mean": finite_or_none(a),
            "human_mean": finite_or_none(b),
        }
        for c, a, b in zip(ucand, mj, mh, strict=True)
    ]
    return out, candidates


def system_level_rows(
    js: JudgeSubjects,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any] | None:
    """Correlation of candidate means (judge vs human mean), items resampled for the interval."""
    got = system_correlations(js, p, rng)
    if got is None:
        return None
    corr, candidates = got
    return {
        "judge_version": js.jv.id,
        "criterion": js.crit.id,
        "n_candidates": corr["n_candidates"],
        "n_items": corr["n_items"],
        "n_subjects": corr["n_subjects"],
        "candidates": candidates,
        "kendall": corr["kendall"],
        "spearman": corr["spearman"],
        "pearson": corr["pearson"],
    }


__all__ = ["system_correlations", "system_level_rows"]
