"""Bias audits of a judge version on a criterion: position, length and self-preference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef, JudgeRef, RatingData
from evalstats.clustered import coarsen

from .common import FloatArray, _num, _numeric_reading, _options, est_dict
from .humans import _HumanBlock


def _bias(
    data: RatingData,
    crit: CriterionRef,
    jv: JudgeRef,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    j: FloatArray,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    subj = data.subjects.loc[block.subjects[idx]]
    h_major = block.consensus[idx]
    h_num = block.human_num_mean[idx]
    base = {"judge_version": jv.id, "criterion": crit.id}
    options = _options(p)

    def add(audit: str, est: Any, note: str, **extra: Any) -> None:
        out.append({**base, "audit": audit, **est_dict(est), "note": note, **extra})

    if crit.scale == "pairwise":
        o = data.orders
        if len(o):
            sel = o[(o["criterion"] == crit.id) & (o["rater"] == jv.id)]
            if len(sel):
                pb = es.position_bias(sel["ab"].to_numpy(), sel["ba"].to_numpy(), level=p["level"])
                add(
                    "position: flip rate",
                    pb,
                    "share of pairs whose verdict changes when the order is swapped",
                    strict_flip_rate=_num(pb.strict_flip_rate),
                )
                add(
                    "position: first-slot preference",
                    pb.first_slot,
                    "share of decisive verdicts for the output shown first (0.5 = none)",
                )
        len_a = subj["length"].to_numpy(dtype=np.float64)
        len_b = subj["length_b"].to_numpy(dtype=np.float64)
        if np.isfinite(len_a).any():
            lt = es.longer_preference_among_ties(
                j, h_major, len_a, len_b, tie_label=0.0, first=1.0, second=2.0, level=p["level"]
            )
            add(
                "length: longer preferred among human ties",
                lt,
                "share of decisive judge verdicts for the longer output where humans saw a tie",
            )
            j_num = _numeric_reading(crit, j)
            if j.size >= 3 and j_num is not None:
                diff, binned = coarsen(len_a - len_b, j_num - h_num)
                lb = es.length_bias(diff, j_num, h_num, rng=rng, options=options)
                add(
                    "length: residual vs length difference",
                    lb,
                    "Spearman of (judge - human preference for A) with len(A) - len(B)"
                    + (" (in 20 quantile bins)" if binned else ""),
                )
        if jv.model_family:
            fam = {cid: f for cid, (_, f) in data.candidates.items()}
            fa = subj["candidate"].map(fam).fillna("").to_numpy(dtype=object)
            fb = subj["candidate_b"].map(fam).fillna("").to_numpy(dtype=object)
            same = np.where(
                (fa == jv.model_family) & (fb != jv.model_family),
                1.0,
                np.where((fb == jv.model_family) & (fa != jv.model_family), 2.0, 0.0),
            )
            if (same > 0).any():
                sp = es.self_preference(
                    j,
                    h_major,
                    same,
                    tie_label=0.0,
                    first=1.0,
                    second=2.0,
                    rng=rng,
                    options=options,
                )
                add(
                    "self-preference",
                    sp,
                    f"judge minus human win rate of '{jv.model_family}' outputs",
                    n_pairs=int((same > 0).sum()),
                )
        return out
    j_num = _numeric_reading(crit, j) if jv.value_type != "continuous" else j
    if j_num is None:
        return out
    length = subj["length"].to_numpy(dtype=np.float64)
    if j.size >= 3 and np.isfinite(length).all():
        length, binned = coarsen(length, j_num - h_num)
        lb = es.length_bias(length, j_num, h_num, rng=rng, options=options)
        add(
            "length: residual vs length",
            lb,
            "Spearman of (judge - human mean) with the output length in characters"
            + (" (in 20 quantile bins)" if binned else ""),
        )
    if jv.model_family:
        fam = {cid: f for cid, (_, f) in data.candidates.items()}
        same = subj["candidate"].map(fam).fillna("").to_numpy(dtype=object) == jv.model_family
        if same.any() and (~same).any():
            est = es.group_difference_clustered(
                j_num - h_num,
                same,
                block.items[idx],
                rng=rng,
                options=options,
                method="self_preference(mean residual own family - others)",
            )
            add(
                "self-preference",
                est,
                f"mean (judge - human) on '{jv.model_family}' outputs minus on the others",
                n_pairs=int(same.sum()),
            )
    return out
