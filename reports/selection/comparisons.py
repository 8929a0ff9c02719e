"""The selection report's read of a pairwise criterion's comparisons: per comparison of two
compared candidates, the item's stratum, the judge's "A wins" score, the human label by the one
rule (`calibration.frames.human_labels` on side codes) and the inclusion weight (the rules of
reports/selection/load.py's module docstring); five queries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.db.models import CharField, F, Value
from django.db.models.functions import Coalesce

from annotations.models import Adjudication, Annotation, GoldLabel
from calibration import frames
from judges.models import Verdict
from studies.models import Comparison

from .inputs import ALL, COMPARISON_COLUMNS, UNKNOWN, CriterionMeta, empty_comparisons
from .readings import a_wins, mean_at

FloatArray = npt.NDArray[np.float64]


def pairwise_criterion(
    criteria: Sequence[CriterionMeta], spec: Mapping[str, Any] | None, warnings: list[str],
) -> CriterionMeta | None:
    """The pairwise criterion the report estimates: the first one the plan gives a win_rate
    threshold, else the rubric's first pairwise criterion (the others are named in a
    warning)."""
    pairs = [c for c in criteria if c.scale == "pairwise"]
    if not pairs:
        return None
    planned = [k for k, e in ((spec or {}).get("criteria") or {}).items()
               if isinstance(e, Mapping) and e.get("metric") == "win_rate"]
    chosen = next((c for k in planned for c in pairs if c.key == k), pairs[0])
    others = [c.key for c in pairs if c is not chosen]
    if others:
        warnings.append(f"win rates and Bradley-Terry strengths are estimated on the pairwise "
                        f"criterion '{chosen.key}' only; not on {', '.join(others)}")
    return chosen


def comparisons_load(
    study: Any, crit: CriterionMeta, judge: Mapping[str, Any] | None, cand_ids: list[int],
    item_rows: pd.DataFrame | None, dimension: str | None, warnings: list[str],
) -> tuple[pd.DataFrame, list[int]]:
    """The comparisons of two compared candidates with the judge's "A wins" score, the human
    label by the one rule (adjudication, then gold, then the side most annotators chose) and the
    inclusion weight, by the rules of the outputs' labels (module docstring); five queries.
    Returns the frame and the ids of the annotators who labelled them."""
    cmps = _comparison_rows(study, cand_ids, item_rows, dimension)
    if not len(cmps):
        return empty_comparisons(), []
    index = pd.Index(cmps["comparison"].to_numpy())
    cmps["f"] = _judge_scores(crit, judge, index, warnings)
    y, weight, annotators = _human_scores(crit, index, warnings)
    cmps["y"] = y
    cmps["weight"] = weight
    return cmps[list(COMPARISON_COLUMNS)].reset_index(drop=True), annotators


def _comparison_rows(
    study: Any, cand_ids: list[int], item_rows: pd.DataFrame | None, dimension: str | None,
) -> pd.DataFrame:
    """The comparisons (id, item, candidates of A and B) with their item's stratum label."""
    cmps = frames.values_frame(
        Comparison.objects.filter(study=study, output_a__candidate_id__in=cand_ids,
                                  output_b__candidate_id__in=cand_ids)
        .order_by("id").values_list("id", "item_id", "output_a__candidate_id",
                                    "output_b__candidate_id"),
        ["comparison", "item", "a", "b"])
    m = len(cmps)
    if not m:
        return cmps
    cmps = cmps.astype({"comparison": "int64", "item": "int64", "a": "int64", "b": "int64"})
    if item_rows is not None and len(item_rows):
        at = pd.Index(item_rows["item"].to_numpy(dtype=np.int64)).get_indexer(
            cmps["item"].to_numpy())
        labels = item_rows["label"].astype(object).to_numpy()
        stratum = np.where(at >= 0, labels[np.maximum(at, 0)], UNKNOWN)
    else:
        stratum = np.full(m, ALL if dimension is None else UNKNOWN, dtype=object)
    cmps["stratum"] = pd.Series(stratum, dtype=object).astype(str).to_numpy()
    return cmps


def _judge_scores(
    crit: CriterionMeta, judge: Mapping[str, Any] | None, index: pd.Index, warnings: list[str],
) -> FloatArray:
    """The judge's "A wins" score per comparison (its P(A wins) when every verdict has one)."""
    m = len(index)
    f = np.full(m, np.nan)
    if judge is None:
        return f
    v = frames.values_frame(
        Verdict.objects.filter(judge_version_id=judge["id"], criterion_id=crit.id,
                               is_scored=True, comparison__isnull=False)
        .values_list("comparison_id", "value_num", "value", "probability"),
        ["comparison", "num", "value", "probability"], text=["value"])
    if len(v):
        at = index.get_indexer(v["comparison"].to_numpy(dtype=np.int64))
        keep = at >= 0
        score = a_wins(v["num"].to_numpy(dtype=np.float64)[keep],
                       v["value"].astype(object).to_numpy()[keep])
        prob = v["probability"].to_numpy(dtype=np.float64)[keep]
        # P(A wins) only when every verdict has one (the outputs' rule).
        use_prob = bool(prob.size) and bool(np.all(np.isfinite(prob)))
        f = mean_at(at[keep], prob if use_prob else score, m)
    if not np.isfinite(f).any():
        warnings.append(f"the judge has no verdict on the comparisons of '{crit.key}': "
                        "its win rates are the humans' only")
    return f


def _stored_sides(crit: CriterionMeta, index: pd.Index) -> dict[str, dict[int, float]]:
    """The gold and adjudicated labels (the latest by id) as side codes by position."""
    stored: dict[str, dict[int, float]] = {"gold": {}, "adjudicated": {}}
    for name, model in (("gold", GoldLabel), ("adjudicated", Adjudication)):
        lab = frames.values_frame(
            model.objects.filter(criterion_id=crit.id, comparison__isnull=False)
            .order_by("id").values_list("comparison_id", "value"),
            ["comparison", "label"], text=["label"])
        if not len(lab):
            continue
        lab = lab.drop_duplicates("comparison", keep="last")  # the latest by id
        l_at = index.get_indexer(lab["comparison"].to_numpy(dtype=np.int64))
        sides = frames.pairwise_side(a_wins(np.full(len(lab), np.nan),
                                            lab["label"].astype(object).to_numpy()))
        for pos, side in zip(l_at.tolist(), sides.tolist(), strict=True):
            if pos >= 0 and math.isfinite(side):
                stored[name][pos] = side
    return stored


def _human_scores(
    crit: CriterionMeta, index: pd.Index, warnings: list[str],
) -> tuple[FloatArray, FloatArray, list[int]]:
    """The human "A wins" score per comparison (NaN without a countable label), its inclusion
    weight, and the annotators who labelled the comparisons."""
    m = len(index)
    ann = frames.values_frame(
        Annotation.objects.filter(criterion_id=crit.id, comparison__isnull=False).annotate(
            a_inclusion=F("assignment__entry__inclusion_probability"),
            a_draw=Coalesce("assignment__entry__draw_kind", Value(""),
                            output_field=CharField()),
        ).values_list("comparison_id", "annotator_id", "value_num", "value", "a_inclusion",
                      "a_draw"),
        ["comparison", "annotator", "num", "value", "inclusion", "draw_kind"],
        text=["value", "draw_kind"])
    annotators: list[int] = []
    at = np.empty(0, dtype=np.intp)
    if len(ann):
        at = index.get_indexer(ann["comparison"].to_numpy(dtype=np.int64))
        keep = at >= 0
        ann = ann[keep]
        at = at[keep]
        annotators = sorted({int(x) for x in ann["annotator"].to_numpy(dtype=np.int64)})
        kinds = ann["draw_kind"].astype(object).to_numpy()
        has_any = np.zeros(m, dtype=bool)
        has_any[at] = True
        seen = np.zeros(m, dtype=bool)
        np.logical_or.at(seen, at, kinds != "escalation")
        escalated_only = int((has_any & ~seen).sum())
        if escalated_only:
            warnings.append(f"{escalated_only} comparison(s) labelled only through escalations "
                            "(not a random draw) are left out of the win rates")
    stored = _stored_sides(crit, index)
    # The one human-label rule (calibration.frames.human_labels) on the side codes: the
    # adjudication, then gold, then the side most annotators chose (a tie for the most
    # frequent: none), read as the "A wins" score (A 1, tie 0.5, B 0).
    hl = frames.human_labels(
        subject=at,
        reading=frames.pairwise_side(a_wins(ann["num"].to_numpy(dtype=np.float64),
                                            ann["value"].astype(object).to_numpy()))
        if len(ann) else np.empty(0),
        draw_kind=ann["draw_kind"].astype(object).to_numpy() if len(ann)
        else np.empty(0, dtype=object),
        inclusion=ann["inclusion"].to_numpy(dtype=np.float64) if len(ann) else np.empty(0),
        gold=stored["gold"], adjudicated=stored["adjudicated"])
    y = np.full(m, np.nan)
    weight = np.ones(m)
    countable = np.zeros(m, dtype=bool)
    y[hl.subjects] = frames.pairwise_a_wins(hl.label)
    countable[hl.subjects] = hl.countable
    weight[hl.subjects] = hl.weight
    y[~countable] = np.nan
    return y, weight, annotators


__all__ = ["comparisons_load", "pairwise_criterion"]
