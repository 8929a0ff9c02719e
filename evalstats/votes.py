"""Agreement counted per human vote: judge vs every vote, and every pair of distinct humans.

Two conventions compare a judge with several humans per subject:

* **per majority**: the judge against the human majority of each subject (one comparison per
  subject; :func:`evalstats.clustered.nominal_agreement`);
* **per vote**: every human vote is a judgement the judge is compared with, so a subject with
  three votes counts three times (the convention of MT-Bench, Zheng et al., NeurIPS 2023, whose
  "agreement" between GPT-4 and humans counts each human vote). :func:`vote_agreement`.

The human ceiling beside it, :func:`pooled_pair_agreement`, is the share of agreeing pairs of
distinct humans who judged the same subject, pooled over all such pairs (MT-Bench's
human-human agreement): a sparse design where no two raters share enough subjects for a
per-pair kappa still has it.

Both come *with ties* (a tie is a label that must match) and *without ties* (MT-Bench's
setup S2: a judge-vote or vote-vote pair where either side says tie is dropped). Intervals
resample items (every subject and vote of an item moves together): each subject contributes
``[pairs counted, pairs agreeing]``, summed per item, and the statistic is their ratio.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import numpy.typing as npt

from evalstats.clustered import bootstrap_clustered, item_sums, ratio_fn
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = ["pooled_pair_agreement", "vote_agreement"]

FloatArray = npt.NDArray[np.float64]
Ties = Literal["keep", "drop"]


def _ratio_estimate(
    per_subject: FloatArray,
    items: npt.ArrayLike,
    *,
    name: str,
    unit: str,
    rng: np.random.Generator,
    options: BootstrapOptions,
) -> Estimate:
    """sum(agree) / sum(counted) with an item-clustered interval; ``n_items`` = units counted."""
    counted = per_subject[:, 0]
    use = counted > 0
    n_units = int(counted.sum())
    n_subjects = int(use.sum())
    if n_units == 0:
        return Estimate(value=float("nan"), method=name, warnings=(f"no {unit} to compare",))
    value = float(per_subject[use, 1].sum() / n_units)
    items_arr = np.asarray(items)[use]
    n_clusters = int(np.unique(items_arr).size)
    if n_clusters < 2:
        # One item: every resample is that item, there is no interval to give.
        return Estimate(
            value=value,
            n_items=n_units,
            n_pairs=n_units,
            n_ratings=n_subjects,
            method=name,
            warnings=("one item only: no interval",),
        )
    est = bootstrap_clustered(
        item_sums(per_subject[use], items_arr),
        ratio_fn,
        n_subjects=n_subjects,
        rng=rng,
        options=options,
        method=name,
    )
    return dataclasses.replace(
        est,
        value=value,
        n_items=n_units,
        n_pairs=n_units,
        n_ratings=n_subjects,
        method=f"{name} over {n_units} {unit} on {n_subjects} subjects of {n_clusters} items; "
        + est.method.split("; ", 1)[1],
    )


def vote_agreement(
    judge: npt.ArrayLike,
    votes: npt.ArrayLike,
    items: npt.ArrayLike,
    *,
    ties: Ties = "keep",
    tie_category: float | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Share of (subject, human vote) pairs where the judge's label equals the vote.

    ``judge`` holds one code per subject (NaN: no verdict), ``votes`` is humans x subjects
    (NaN: no vote) and ``items[s]`` the item of subject s. ``ties="drop"`` leaves out every
    vote that is a tie and every subject where the judge says tie (``tie_category`` needed).
    ``n_items`` (and ``n_pairs``) counts the votes compared, ``n_ratings`` the subjects.
    """
    j = np.asarray(judge, dtype=np.float64)
    v = np.asarray(votes, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != j.size:
        raise ValueError("votes must be humans x subjects, with one judge code per subject")
    if ties not in ("keep", "drop"):
        raise ValueError("ties must be 'keep' or 'drop'")
    counted = ~np.isnan(v) & ~np.isnan(j)[None, :]
    if ties == "drop":
        if tie_category is None:
            raise ValueError("ties='drop' needs tie_category")
        counted &= (v != tie_category) & (j != tie_category)[None, :]
    agree = counted & (v == j[None, :])
    per_subject = np.column_stack([counted.sum(axis=0), agree.sum(axis=0)]).astype(np.float64)
    return _ratio_estimate(
        per_subject,
        items,
        name=f"agreement_per_vote[ties={ties}]",
        unit="votes",
        rng=rng,
        options=options,
    )


def pooled_pair_agreement(
    votes: npt.ArrayLike,
    items: npt.ArrayLike,
    *,
    ties: Ties = "keep",
    tie_category: float | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Share of agreeing pairs of distinct humans on the same subject, pooled over all pairs.

    ``votes`` is humans x subjects of codes (NaN: no vote). A subject with m votes has
    m(m-1)/2 pairs, of which sum_k c_k(c_k-1)/2 agree (c_k votes for label k); the figure is
    the sum of agreeing pairs over the sum of pairs. ``ties="drop"`` counts only pairs where
    neither vote is a tie. ``n_items`` (and ``n_pairs``) counts the pairs, ``n_ratings`` the
    subjects with a pair.
    """
    v = np.asarray(votes, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError("votes must be humans x subjects")
    if ties not in ("keep", "drop"):
        raise ValueError("ties must be 'keep' or 'drop'")
    present = ~np.isnan(v)
    if ties == "drop":
        if tie_category is None:
            raise ValueError("ties='drop' needs tie_category")
        present &= v != tie_category
    labels = np.unique(v[present])
    m = present.sum(axis=0).astype(np.float64)
    agree = np.zeros(v.shape[1])
    for lab in labels:
        c = (present & (v == lab)).sum(axis=0).astype(np.float64)
        agree += c * (c - 1.0) / 2.0
    per_subject = np.column_stack([m * (m - 1.0) / 2.0, agree])
    return _ratio_estimate(
        per_subject,
        items,
        name=f"pooled_pair_agreement[ties={ties}]",
        unit="pairs of humans",
        rng=rng,
        options=options,
    )
