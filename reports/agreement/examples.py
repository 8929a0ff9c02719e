"""Disagreeing examples: the subjects where a judge version and the humans differ most."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from calibration.frames import value_text

from .humans import JudgeSubjects


def disagreement_examples(
    js: JudgeSubjects,
    p: Mapping[str, Any],
) -> dict[str, Any]:
    data, crit, jv, block, idx, j = js.data, js.crit, js.jv, js.block, js.idx, js.j
    continuous = jv.value_type == "continuous"
    numeric = crit.scale in ("ordinal", "interval")
    if numeric:
        gap = np.abs(j - block.consensus[idx])
        dis = gap >= p["disagreement_gap"]
    else:
        gap = (j != block.consensus[idx]).astype(np.float64)
        dis = gap > 0
    order = np.lexsort((block.subjects[idx], -gap))
    picked = [i for i in order if dis[i]][: p["max_examples"]]
    ext = data.items["external_id"]
    rows = []
    for i in picked:
        s = int(block.subjects[idx][i])
        hv = block.consensus[idx][i]
        rows.append(
            {
                "subject": s,
                "item": str(ext.get(int(block.items[idx][i]), "")),
                "judge": value_text(crit.scale, crit.values, float(j[i]), continuous)
                if crit.scale != "categorical"
                else crit.values[int(j[i])],
                "human": (
                    f"{hv:.2f}"
                    if numeric
                    else value_text(crit.scale, crit.values, float(hv), False)
                ),
            }
        )
    return {
        "judge_version": jv.id,
        "criterion": crit.id,
        "n_disagreements": int(dis.sum()),
        "n_subjects": int(idx.size),
        "rule": (
            "|judge - human mean| >= " + f"{p['disagreement_gap']:g}"
            if numeric
            else "judge != human majority"
        ),
        "examples": rows,
    }


__all__ = ["disagreement_examples"]
