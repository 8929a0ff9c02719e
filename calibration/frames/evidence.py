"""The evidence frames joined into one flat frame (`evidence_frame`), for the exports and the
pages that show every rating with its subject, strata and presentation orders."""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.frames.load import RatingData


def evidence_frame(data: RatingData) -> pd.DataFrame:
    """One flat frame: `ratings` with each subject's item, candidate(s) and strata (one
    ``stratum:<dimension>`` column each), rater_kind ("judge" | "human") and, for pairwise judge
    verdicts that record both, the presentation orders ``order_ab`` / ``order_ba`` (codes; NaN
    otherwise). Rows and their order are those of `ratings`."""
    r = data.ratings
    out = r.copy()
    at = data.subjects.index.get_indexer(r["subject"].to_numpy())
    found = at >= 0
    pick = np.maximum(at, 0)
    for col, missing in (("item", -1), ("candidate", -1), ("candidate_b", -1)):
        values = data.subjects[col].to_numpy(dtype="int64")
        out[col] = np.where(found, values[pick] if len(values) else missing, missing)
    item_at = data.items.index.get_indexer(out["item"].to_numpy())
    for dim in data.dimensions:
        labels = data.items[dim].to_numpy(dtype=object)
        out[f"stratum:{dim}"] = np.where(
            item_at >= 0, labels[np.maximum(item_at, 0)] if len(labels) else None, None
        )
    out["rater_kind"] = np.where(r["is_judge"].to_numpy(dtype=bool), "judge", "human")
    o = data.orders
    out["order_ab"] = np.nan
    out["order_ba"] = np.nan
    if len(o) and len(r):
        key = pd.MultiIndex.from_arrays([o["subject"], o["criterion"], o["rater"]])
        rk = pd.MultiIndex.from_arrays([r["subject"], r["criterion"], r["rater"]])
        hit = key.get_indexer(rk)
        hit = np.where(r["is_judge"].to_numpy(dtype=bool), hit, -1)
        ok = hit >= 0
        for col in ("ab", "ba"):
            vals = o[col].to_numpy(dtype="float64")
            out[f"order_{col}"] = np.where(ok, vals[np.maximum(hit, 0)], np.nan)
    return out

