"""Correlation at three levels for ordinal criteria: sample, dataset and system.

NLG meta-evaluation reports a judge's correlation with the humans per input (sample level:
across the candidates that answered one item, then averaged over items), over every item x
candidate pair (dataset level: the cell's own Spearman, Pearson and Kendall) and over
candidate means (system level). One row per judge version x criterion x stratum holds all
three; evalstats.levels defines the sample level, `system` the system level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calibration.frames import CriterionRef, JudgeRef, RatingData
from evalstats.levels import sample_level_correlation

from .common import FloatArray, bootstrap_options, cell_rng, est_dict
from .humans import HumanBlock, JudgeSubjects, Stratum
from .system import system_correlations

Method = Literal["spearman", "pearson", "kendall"]
METHODS: tuple[Method, ...] = ("spearman", "pearson", "kendall")


def correlation_level_rows(
    data: RatingData,
    crit: CriterionRef,
    jv: JudgeRef,
    block: HumanBlock,
    stratum: Stratum,
    idx: npt.NDArray[np.int64],
    j: FloatArray,
    metrics: Mapping[str, Any],
    p: Mapping[str, Any],
) -> dict[str, Any]:
    """The row of one cell: ``idx`` its subjects in the human block, ``j`` the judge's scores
    on them, ``metrics`` the cell's coefficients (the dataset level)."""
    h = block.consensus[idx]
    items = block.items[idx]
    options = bootstrap_options(p)
    # Own generators: adding this table leaves every other figure's draws unchanged.
    rng = cell_rng(p["seed"], "sample", jv.id, crit.id, stratum.dimension, stratum.label)
    sample: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for method in METHODS:
        est = sample_level_correlation(j, h, items, method=method, rng=rng, options=options)
        sample[method] = est_dict(est)
        counts = {
            "n_items": int(est.n_items),
            "n_items_constant": est.n_items_constant,
            "n_items_too_few": est.n_items_too_few,
            "n_subjects": int(est.n_ratings or 0),
        }
    dataset: dict[str, Any] = {
        "n_items": int(np.unique(items).size),
        "n_subjects": int(idx.size),
    }
    dataset.update({m: metrics[m] for m in METHODS})
    # The overall stratum draws exactly what the system table draws (same generator), so the
    # two agree; other strata have their own.
    parts: tuple[object, ...] = ("system", jv.id, crit.id)
    if stratum.dimension:
        parts += (stratum.dimension, stratum.label)
    js = JudgeSubjects(data=data, crit=crit, jv=jv, block=block, idx=idx, j=j)
    got = system_correlations(js, p, cell_rng(p["seed"], *parts))
    system: dict[str, Any] | None = None
    if got is not None:
        corr = got[0]
        system = {k: corr[k] for k in ("n_candidates", "n_items", "n_subjects", *METHODS)}
    return {
        "judge_version": jv.id,
        "criterion": crit.id,
        **stratum.as_dict(),
        "sample": {**counts, **sample},
        "dataset": dataset,
        "system": system,
    }


__all__ = ["Method", "correlation_level_rows"]
