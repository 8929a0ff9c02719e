"""The human side of a criterion: every annotator's codes per subject, the consensus, and
the strata the subjects fall in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import evalstats as es
from calibration.frames import CriterionRef, JudgeRef, RatingData, human_labels, label_reading
from studies.strata import cross_label

from .common import FloatArray, numeric_reading, scale_categories


@dataclass
class Stratum:
    dimension: str
    label: str
    mask: npt.NDArray[np.bool_]

    def as_dict(self) -> dict[str, str]:
        return {"dimension": self.dimension, "label": self.label}


@dataclass
class HumanBlock:
    subjects: npt.NDArray[np.int64]
    humans: npt.NDArray[np.int64]
    matrix: FloatArray  # humans x subjects (codes, NaN missing)
    consensus: FloatArray  # majority code or mean (ordinal, interval)
    rounded: FloatArray  # ordinal: mean rounded half up; nominal and interval: = consensus
    human_num_mean: FloatArray  # mean of value_num readings (length / self-preference audits)
    items: npt.NDArray[np.int64]
    strata: list[Stratum]


def _strata_for(
    data: RatingData, items: npt.NDArray[np.int64], p: Mapping[str, Any]
) -> list[Stratum]:
    n = items.size
    out = [Stratum("", "overall", np.ones(n, dtype=bool))]
    dims = [d for d in data.dimensions if p["strata"] is None or d in p["strata"]]
    labels: dict[str, npt.NDArray[np.object_]] = {}
    frame = data.items.reindex(items)
    for d in set(dims) | {x for c in p["crosses"] for x in c}:
        if d in frame.columns:
            labels[d] = frame[d].fillna("unknown").to_numpy(dtype=object)
    for d in dims:
        arr = labels[d]
        for lab in sorted(pd.unique(arr)):
            out.append(Stratum(d, str(lab), arr == lab))
    for a, b in p["crosses"]:
        if a not in labels or b not in labels:
            continue
        crossed = np.array(
            [cross_label(x, y) for x, y in zip(labels[a], labels[b], strict=True)], dtype=object
        )
        for lab in sorted(pd.unique(crossed)):
            out.append(Stratum(cross_label(a, b), str(lab), crossed == lab))
    return out


def _rule_consensus(
    data: RatingData, crit: CriterionRef, h: pd.DataFrame, subjects: npt.NDArray[np.int64]
) -> FloatArray:
    """Per subject (aligned with `subjects`), the one rule's human label on the criterion's
    codes (pass 1 / fail 0; tie 0 / A 1 / B 2), NaN where it gives none. Every annotation
    counts (agreement is no random-sample estimate, so escalation draws are kept)."""
    gold: dict[int, float] = {}
    adjudicated: dict[int, float] = {}
    for (cid, sub), (g, a) in data.stored_labels.items():
        if cid != crit.id:
            continue
        if g is not None:
            gold[sub] = label_reading(crit, g)
        if a is not None:
            adjudicated[sub] = label_reading(crit, a)
    n = len(h)
    hl = human_labels(subject=h["subject"].to_numpy(dtype=np.int64),
                      reading=h["num"].to_numpy(dtype=np.float64),
                      draw_kind=np.full(n, None, dtype=object), inclusion=np.full(n, np.nan),
                      gold=gold, adjudicated=adjudicated)
    return np.asarray(pd.Series(hl.label, index=hl.subjects).reindex(subjects).to_numpy(),
                      dtype=np.float64)


def human_block(data: RatingData, crit: CriterionRef, p: Mapping[str, Any]) -> HumanBlock | None:
    r = data.ratings
    h = r[(~r["is_judge"].to_numpy()) & (r["criterion"].to_numpy() == crit.id)]
    if h.empty:
        return None
    subjects = np.unique(h["subject"].to_numpy())
    humans = np.unique(h["rater"].to_numpy())
    matrix = np.full((humans.size, subjects.size), np.nan)
    matrix[
        np.searchsorted(humans, h["rater"].to_numpy()),
        np.searchsorted(subjects, h["subject"].to_numpy()),
    ] = h["num"].to_numpy()
    cats = scale_categories(crit)
    if crit.scale == "ordinal":
        consensus = np.asarray(es.mean_consensus(matrix).labels, dtype=np.float64)
        rounded = np.floor(consensus + 0.5)
    elif crit.scale == "interval":
        # The mean of the raters, not rounded: an interval score is any number of its range.
        consensus = np.asarray(es.mean_consensus(matrix).labels, dtype=np.float64)
        rounded = consensus
    elif crit.scale in ("binary", "pairwise"):
        # THE human label of a subject (calibration.frames.human_labels, the rule calibration
        # and selection read): the latest adjudication, then a gold label, then the reading
        # most annotators gave (an exact tie: none, so the subject leaves the judge-vs-human
        # figures). The annotators' own votes stay in `matrix` for the human-human ceiling.
        consensus = _rule_consensus(data, crit, h, subjects)
        rounded = consensus
    else:
        consensus = np.asarray(
            es.majority_vote(matrix, tie_break="first", categories=cats).labels, dtype=np.float64
        )
        rounded = consensus
    num = numeric_reading(crit, matrix)
    if num is not None:
        with np.errstate(invalid="ignore"):
            human_num_mean = np.asarray(es.mean_consensus(num).labels, dtype=np.float64)
    else:
        human_num_mean = np.full(subjects.size, np.nan)
    items = data.subjects.loc[subjects, "item"].to_numpy(dtype=np.int64)
    return HumanBlock(
        subjects=subjects,
        humans=humans,
        matrix=matrix,
        consensus=consensus,
        rounded=rounded,
        human_num_mean=human_num_mean,
        items=items,
        strata=_strata_for(data, items, p),
    )


@dataclass(frozen=True)
class JudgeSubjects:
    """A judge version's labelled subjects on one criterion: the subjects' positions ``idx``
    in the humans' ``block`` and the judge's codes ``j`` on them, with the rating data, the
    criterion and the judge they belong to; what every audit over those subjects reads."""

    data: RatingData
    crit: CriterionRef
    jv: JudgeRef
    block: HumanBlock
    idx: npt.NDArray[np.int64]
    j: FloatArray


__all__ = ["HumanBlock", "JudgeSubjects", "Stratum", "human_block"]
