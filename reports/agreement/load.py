"""The agreement report's inputs: the ratings it reads, through the evidence read model
(`calibration.frames`), and their fingerprint."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from calibration.frames import RatingData, rating_data_load, stored_labels_load, value_text
from studies.models import Study


def agreement_load(study: Study, params: Mapping[str, Any]) -> RatingData:
    """The ratings of the criteria, judge versions and candidates the parameters name, with the
    gold labels and adjudications the one human-label rule puts first."""
    data = rating_data_load(
        study=study,
        criterion_keys=params.get("criteria"),
        judge_version_ids=params.get("judges"),
        candidate_names=params.get("candidates"),
        # The report reads only the six agreement columns; the evidence ones would double
        # the load of a million-rating study.
        columns="agreement",
    )
    # The gold labels and adjudications the one human-label rule puts first (two queries).
    data.stored_labels = stored_labels_load(list(data.criteria))
    return data


def input_fingerprint(data: RatingData) -> str:
    """sha256 over the sorted (subject, criterion, rater, value) rows the report reads."""
    r = data.ratings
    if r.empty:
        return hashlib.sha256(b"").hexdigest()
    # np.lexsort is stable like the mergesort of sort_values: the same order, ties included.
    subj_all = r["subject"].to_numpy(dtype=np.int64)
    crit_all = r["criterion"].to_numpy(dtype=np.int64)
    judge_all = r["is_judge"].to_numpy(dtype=bool)
    order = np.lexsort((r["rater"].to_numpy(dtype=np.int64), judge_all, crit_all, subj_all))
    h = hashlib.sha256()
    subj = subj_all[order]
    crit = crit_all[order]
    rater = r["rater"].to_numpy(dtype=np.int64)[order] * 2 + judge_all[order].astype(np.int64)
    h.update(np.ascontiguousarray(np.column_stack([subj, crit, rater])).tobytes())
    nums = r["num"].to_numpy(dtype=np.float64)[order]
    cont = r["continuous"].to_numpy(dtype=bool)[order]
    # value_text once per distinct (criterion, code, continuous), not once per rating.
    texts = np.empty(nums.size, dtype=object)
    for cid in np.unique(crit):
        c = data.criteria[int(cid)]
        for is_cont in (False, True):
            rows = np.flatnonzero((crit == cid) & (cont == is_cont))
            if rows.size == 0:
                continue
            # Distinct bit patterns, so that -0.0 and 0.0 keep their own repr.
            bits, inverse = np.unique(nums[rows].view(np.int64), return_inverse=True)
            codes = bits.view(np.float64)
            labels = [value_text(c.scale, c.values, float(x), is_cont) for x in codes]
            texts[rows] = np.asarray(labels, dtype=object)[inverse]
    h.update("\x1f".join(texts.tolist()).encode())
    if data.stored_labels:
        # The gold labels and adjudications the human label follows (absent: the digest of
        # the ratings alone, as before there were any).
        h.update(repr(sorted(data.stored_labels.items())).encode())
    return h.hexdigest()


__all__ = ["agreement_load", "input_fingerprint"]
