"""THE rule for which human label counts (`human_labels`), and the pairwise side <-> "A wins"
readings that go with it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class HumanLabels:
    """Which human label counts for each subject of one criterion (`human_labels`), aligned
    with `subjects` (sorted)."""

    subjects: npt.NDArray[np.int64]
    label: npt.NDArray[np.float64]  # the pass reading (1/0) that counts; NaN: none
    source: npt.NDArray[np.object_]  # "adjudication" | "gold" | "annotators" | ""
    # Whether the subject's label belongs in random-sample estimates: it has an annotation
    # that was not an escalation draw, or no annotation at all and a gold or adjudicated
    # label (a deliberate label, weight 1). Escalation-only subjects never count.
    countable: npt.NDArray[np.bool_]
    weight: npt.NDArray[np.float64]  # 1 / the largest random inclusion probability, else 1


def human_labels(
    *, subject: npt.ArrayLike, reading: npt.ArrayLike, draw_kind: npt.ArrayLike,
    inclusion: npt.ArrayLike, gold: Mapping[int, float] | None = None,
    adjudicated: Mapping[int, float] | None = None,
) -> HumanLabels:
    """THE rule for which human label counts (every consumer calls it: agreement,
    calibration, selection, their exports and APIs): the latest adjudication, then a gold
    label, then the annotators' consensus — the reading most of them gave, a tie for the most
    frequent giving none.

    ``reading`` is a pass reading (1/0) for a criterion with one — the consensus is then the
    majority, an exact tie giving none — or, for a pairwise criterion, the side code
    (`PAIRWISE_CODE`: tie 0, A 1, B 2) — the consensus is the side most annotators chose, so
    two annotators saying A and tie give none, not "three quarters of a win"
    (`pairwise_a_wins` reads a side as the "A wins" score). NaN: unreadable.

    ``subject``, ``reading``, ``draw_kind`` ("random", "census", "gold", "escalation" or
    None/"" for imported labels) and ``inclusion`` (the entry's inclusion probability, NaN
    without one) are one entry per annotation; ``gold`` and ``adjudicated`` map a subject to
    the reading of its gold / latest adjudicated label (NaN: unreadable)."""
    subj = np.asarray(subject, dtype=np.int64)
    read = np.asarray(reading, dtype=np.float64)
    kinds = np.asarray(draw_kind, dtype=object)
    pi = np.asarray(inclusion, dtype=np.float64)
    gold = dict(gold or {})
    adjudicated = dict(adjudicated or {})
    extra = np.array(sorted(set(gold) | set(adjudicated)), dtype=np.int64)
    subjects = np.unique(np.concatenate([subj, extra]))
    m = subjects.size
    at = np.searchsorted(subjects, subj)
    ok = np.isfinite(read)
    s = np.bincount(at[ok], weights=read[ok], minlength=m) if m else np.zeros(0)
    k = np.bincount(at[ok], minlength=m).astype(np.float64) if m else np.zeros(0)
    binary = bool(np.all((read[ok] == 0.0) | (read[ok] == 1.0)))
    if binary:  # pass readings: the majority, read off the sums (the million-rating path)
        label = np.where(k > 0, np.where(2 * s > k, 1.0, np.where(2 * s < k, 0.0, np.nan)),
                         np.nan)
    else:  # side codes: the most frequent reading, unique or none
        label = np.full(m, np.nan)
        pairs, counts = np.unique(np.column_stack([at[ok], read[ok]]), axis=0,
                                  return_counts=True)
        where = pairs[:, 0].astype(np.int64)
        top = np.zeros(m, dtype=np.int64)
        np.maximum.at(top, where, counts)
        is_top = counts == top[where]
        n_top = np.bincount(where[is_top], minlength=m)
        sole = is_top & (n_top[where] == 1)
        label[where[sole]] = pairs[sole, 1]
    source = np.where(np.isfinite(label), "annotators", "").astype(object)
    for mapping_, name in ((gold, "gold"), (adjudicated, "adjudication")):  # the last wins
        for sub, value in mapping_.items():
            if value is None or not np.isfinite(value):
                continue
            pos = int(np.searchsorted(subjects, sub))
            label[pos] = float(value)
            source[pos] = name
    annotated = np.zeros(m, dtype=bool)
    annotated[at] = True
    not_escalated = np.array([kd != "escalation" for kd in kinds], dtype=bool)
    countable = np.zeros(m, dtype=bool)
    np.logical_or.at(countable, at[not_escalated], True)
    deliberate = np.isin(subjects, extra) & ~annotated
    countable |= deliberate
    rnd = np.array([kd == "random" for kd in kinds], dtype=bool) & np.isfinite(pi) & (pi > 0)
    pi_max = np.full(m, np.nan)
    if rnd.any():
        np.fmax.at(pi_max, at[rnd], pi[rnd])
    weight = np.where(np.isfinite(pi_max), 1.0 / np.where(np.isfinite(pi_max), pi_max, 1.0),
                      1.0)
    return HumanLabels(subjects=subjects, label=label, source=source, countable=countable,
                       weight=weight)


# "A wins" score of a pairwise side code (`PAIRWISE_CODE`): A 1, tie 0.5, B 0.
_A_WINS_OF_SIDE = {0.0: 0.5, 1.0: 1.0, 2.0: 0.0}


def pairwise_a_wins(side: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The "A wins" score (A 1, tie 0.5, B 0; NaN: none) of side codes (tie 0, A 1, B 2): how
    win rates read the one rule's pairwise label (`human_labels`)."""
    codes = np.asarray(side, dtype=np.float64)
    out = np.full(codes.shape, np.nan)
    for code, score in _A_WINS_OF_SIDE.items():
        out[codes == code] = score
    return out


def pairwise_side(a_wins: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The side code (tie 0, A 1, B 2; NaN: none) of "A wins" scores (A 1, tie 0.5, B 0)."""
    scores = np.asarray(a_wins, dtype=np.float64)
    out = np.full(scores.shape, np.nan)
    for code, score in _A_WINS_OF_SIDE.items():
        out[scores == score] = code
    return out

