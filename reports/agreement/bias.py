"""Bias audits of a judge version on a criterion: position, length and self-preference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import evalstats as es
from calibration.frames import CriterionRef, JudgeRef, RatingData
from evalstats.clustered import coarsen

from .common import FloatArray, bootstrap_options, est_dict, finite_or_none, numeric_reading
from .humans import JudgeSubjects


@dataclass
class _Audits:
    """What the audits of one judge version on one criterion read, and the rows they write."""

    data: RatingData
    crit: CriterionRef
    jv: JudgeRef
    subj: pd.DataFrame
    h_major: FloatArray
    h_num: FloatArray
    options: es.BootstrapOptions
    rng: np.random.Generator
    level: float
    out: list[dict[str, Any]] = field(default_factory=list)

    def add(self, audit: str, est: Any, note: str, **extra: Any) -> None:
        base = {"judge_version": self.jv.id, "criterion": self.crit.id}
        self.out.append({**base, "audit": audit, **est_dict(est), "note": note, **extra})


def _position(a: _Audits) -> None:
    """Pairwise: the flip rate and first-slot preference over the pairs judged in both
    orders."""
    o = a.data.orders
    if not len(o):
        return
    sel = o[(o["criterion"] == a.crit.id) & (o["rater"] == a.jv.id)]
    if not len(sel):
        return
    pb = es.position_bias(sel["ab"].to_numpy(), sel["ba"].to_numpy(), level=a.level)
    a.add(
        "position: flip rate",
        pb,
        "share of pairs whose verdict changes when the order is swapped",
        strict_flip_rate=finite_or_none(pb.strict_flip_rate),
    )
    a.add(
        "position: first-slot preference",
        pb.first_slot,
        "share of decisive verdicts for the output shown first (0.5 = none)",
    )


def _pairwise_length(a: _Audits, j: FloatArray) -> None:
    """Pairwise: the longer output preferred among human ties, and the residual against the
    length difference."""
    len_a = a.subj["length"].to_numpy(dtype=np.float64)
    len_b = a.subj["length_b"].to_numpy(dtype=np.float64)
    if not np.isfinite(len_a).any():
        return
    lt = es.longer_preference_among_ties(
        j, a.h_major, len_a, len_b, tie_label=0.0, first=1.0, second=2.0, level=a.level
    )
    a.add(
        "length: longer preferred among human ties",
        lt,
        "share of decisive judge verdicts for the longer output where humans saw a tie",
    )
    j_num = numeric_reading(a.crit, j)
    if j.size >= 3 and j_num is not None:
        diff, binned = coarsen(len_a - len_b, j_num - a.h_num)
        lb = es.length_bias(diff, j_num, a.h_num, rng=a.rng, options=a.options)
        a.add(
            "length: residual vs length difference",
            lb,
            "Spearman of (judge - human preference for A) with len(A) - len(B)"
            + (" (in 20 quantile bins)" if binned else ""),
        )


def _pairwise_self(a: _Audits, j: FloatArray) -> None:
    """Pairwise: the judge's win rate for its own model family's outputs minus the humans'."""
    family = a.jv.model_family
    fam = {cid: f for cid, (_, f) in a.data.candidates.items()}
    fa = a.subj["candidate"].map(fam).fillna("").to_numpy(dtype=object)
    fb = a.subj["candidate_b"].map(fam).fillna("").to_numpy(dtype=object)
    same = np.where(
        (fa == family) & (fb != family),
        1.0,
        np.where((fb == family) & (fa != family), 2.0, 0.0),
    )
    if not (same > 0).any():
        return
    sp = es.self_preference(
        j, a.h_major, same, tie_label=0.0, first=1.0, second=2.0, rng=a.rng, options=a.options
    )
    a.add(
        "self-preference",
        sp,
        f"judge minus human win rate of '{family}' outputs",
        n_pairs=int((same > 0).sum()),
    )


def _scored(a: _Audits, j_num: FloatArray, items: npt.NDArray[Any]) -> None:
    """Scores: the residual against the output length, and the residual on the judge's own
    model family's outputs minus on the others."""
    length = a.subj["length"].to_numpy(dtype=np.float64)
    if j_num.size >= 3 and np.isfinite(length).all():
        length, binned = coarsen(length, j_num - a.h_num)
        lb = es.length_bias(length, j_num, a.h_num, rng=a.rng, options=a.options)
        a.add(
            "length: residual vs length",
            lb,
            "Spearman of (judge - human mean) with the output length in characters"
            + (" (in 20 quantile bins)" if binned else ""),
        )
    family = a.jv.model_family
    if not family:
        return
    fam = {cid: f for cid, (_, f) in a.data.candidates.items()}
    same = a.subj["candidate"].map(fam).fillna("").to_numpy(dtype=object) == family
    if same.any() and (~same).any():
        est = es.group_difference_clustered(
            j_num - a.h_num,
            same,
            items,
            rng=a.rng,
            options=a.options,
            method="self_preference(mean residual own family - others)",
        )
        a.add(
            "self-preference",
            est,
            f"mean (judge - human) on '{family}' outputs minus on the others",
            n_pairs=int(same.sum()),
        )


def bias_rows(
    js: JudgeSubjects,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """The bias audits of a judge version on a criterion's labelled subjects ``idx`` (judge
    codes ``j``), in a fixed order, all drawing from ``rng``."""
    data, crit, jv, block, idx, j = js.data, js.crit, js.jv, js.block, js.idx, js.j
    a = _Audits(data=data, crit=crit, jv=jv, subj=data.subjects.loc[block.subjects[idx]],
                h_major=block.consensus[idx], h_num=block.human_num_mean[idx],
                options=bootstrap_options(p), rng=rng, level=p["level"])
    if crit.scale == "pairwise":
        _position(a)
        _pairwise_length(a, j)
        if jv.model_family:
            _pairwise_self(a, j)
        return a.out
    j_num = numeric_reading(crit, j) if jv.value_type != "continuous" else j
    if j_num is not None:
        _scored(a, j_num, block.items[idx])
    return a.out


__all__ = ["bias_rows"]
