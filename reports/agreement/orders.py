"""Pairwise verdicts in both presentation orders, per stratum (evalstats.orders).

A judge version's canonical verdict in each order (`RatingData.orders`) against the human
majority of the comparison: accuracy per order and their mean, order-consistent accuracy and
positional agreement, each with unparseable verdicts counted (as a miss or a tie, by the
`unparseable_as` parameter) and on parseable verdicts only, with the unparseable count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from calibration.frames import CriterionRef, JudgeRef, RatingData
from evalstats.orders import OrderAccuracy, order_accuracy

from .common import bootstrap_options, cell_rng, est_dict
from .humans import HumanBlock

FIGURES = (
    "accuracy_ab",
    "accuracy_ba",
    "accuracy_mean",
    "accuracy_consistent",
    "positional_agreement",
)


def _figures(res: OrderAccuracy) -> dict[str, Any]:
    return {name: est_dict(getattr(res, name)) for name in FIGURES}


def order_rows(
    data: RatingData,
    crit: CriterionRef,
    jv: JudgeRef,
    block: HumanBlock,
    p: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """One row per stratum where the judge version has verdicts in both orders."""
    o = data.orders
    if crit.scale != "pairwise" or not len(o):
        return []
    sel = o[(o["criterion"].to_numpy() == crit.id) & (o["rater"].to_numpy() == jv.id)]
    if not len(sel):
        return []
    at = pd.Index(block.subjects).get_indexer(sel["subject"].to_numpy())
    known = at >= 0
    at = at[known]
    ab = sel["ab"].to_numpy(dtype=np.float64)[known]
    ba = sel["ba"].to_numpy(dtype=np.float64)[known]
    majority = block.consensus[at]
    has = ~np.isnan(majority)
    at, ab, ba, majority = at[has], ab[has], ba[has], majority[has]
    rows: list[dict[str, Any]] = []
    for st in block.strata:
        keep = st.mask[at]
        if not keep.any():
            continue
        items = block.items[at[keep]]
        rng = cell_rng(p["seed"], "orders", jv.id, crit.id, st.dimension, st.label)
        args = (ab[keep], ba[keep], majority[keep], items)
        counted = order_accuracy(
            *args, unparseable=p["unparseable_as"], rng=rng, options=bootstrap_options(p)
        )
        parseable = order_accuracy(*args, unparseable="drop", rng=rng, options=bootstrap_options(p))
        rows.append(
            {
                "judge_version": jv.id,
                "criterion": crit.id,
                **st.as_dict(),
                "n_pairs": counted.n_pairs,
                "n_unparseable_ab": counted.n_unparseable_ab,
                "n_unparseable_ba": counted.n_unparseable_ba,
                "unparseable_as": p["unparseable_as"],
                "counted": _figures(counted),
                "parseable": _figures(parseable),
            }
        )
    return rows


__all__ = ["FIGURES", "order_rows"]
