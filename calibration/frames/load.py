"""`rating_data_load`: a study's ratings, subjects, items, strata, pairwise orders and raters'
attributes as the frames of `RatingData` (columns and selections: the package docstring), each
read by one named step in a bounded number of statements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
import pandas as pd
from django.db.models.functions import Length

from annotations.models import Adjudication, Annotation, GoldLabel
from calibration.frames import reader
from calibration.frames.codes import PAIRWISE_CODE
from calibration.frames.ratings import labels_attached, labels_frame, ratings_frame
from calibration.refs import CriterionRef, JudgeRef
from judges.models import JudgeVersion, Verdict
from studies.criteria import criterion_allowed_values, interval_bounds
from studies.models import (
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    StratumDimension,
    Study,
)
from studies.subjects import SubjectRef, comparison_codes, output_codes

# Queries of one `rating_data_load`, whatever the study's size (criteria, judge versions,
# candidates, verdicts x2, annotations x2, gold labels, adjudications, outputs, comparisons,
# items, stratum dimensions, pairwise orders, members' attributes). tests/calibration/
# test_frames.py holds it.
LOAD_MAX_QUERIES = 15
# The same for columns="agreement": no gold label and no adjudication query.
LOAD_MAX_QUERIES_AGREEMENT = 13

ColumnSet = Literal["agreement", "evidence"]
# The ratings columns of columns="agreement" (the first six of "evidence", in the same order).
AGREEMENT_COLUMNS = ("subject", "criterion", "rater", "num", "is_judge", "continuous")


@dataclass
class RatingData:
    """Everything a report reads, as frames keyed by integer ids (columns: module docstring)."""

    criteria: dict[int, CriterionRef]
    judges: dict[int, JudgeRef]
    candidates: dict[int, tuple[str, str]]  # id -> (name, model_family)
    ratings: pd.DataFrame
    subjects: pd.DataFrame
    items: pd.DataFrame
    dimensions: list[str]
    orders: pd.DataFrame = field(default_factory=pd.DataFrame)
    # user id -> the member's attributes ({"group": "expert"}); members without any are absent.
    rater_attributes: dict[int, dict[str, str]] = field(default_factory=dict)
    # (criterion id, subject) -> the stored (gold, latest adjudicated) label values (None
    # without one), for a lean load that reads them apart (`stored_labels_load`).
    stored_labels: dict[tuple[int, int], tuple[str | None, str | None]] = field(
        default_factory=dict)


def rating_data_load(
    *,
    study: Study,
    criterion_keys: Sequence[str] | None = None,
    judge_version_ids: Sequence[int] | None = None,
    candidate_names: Sequence[str] | None = None,
    strata: Mapping[str, Sequence[str]] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    columns: ColumnSet = "evidence",
) -> RatingData:
    """Load a study's ratings with their evidence, subjects and strata (package docstring).

    `strata` maps a dimension key to the labels kept; `since` (inclusive) and `until`
    (exclusive) bound the ratings' `created_at`. `columns` picks the ratings' column set:
    "evidence" (every column, at most `LOAD_MAX_QUERIES` queries) or "agreement" (only
    `AGREEMENT_COLUMNS`, at most `LOAD_MAX_QUERIES_AGREEMENT` queries).
    """
    if columns not in ("agreement", "evidence"):
        raise ValueError(f"columns must be 'agreement' or 'evidence', not {columns!r}")
    crits = _criteria_load(study, criterion_keys)
    judges = _judges_load(study, judge_version_ids)
    candidates = {c.pk: (c.name, c.model_family) for c in Candidate.objects.filter(study=study)}
    window: dict[str, datetime] = {}
    if since is not None:
        window["created_at__gte"] = since
    if until is not None:
        window["created_at__lt"] = until
    ratings = _ratings_load(crits, judges, window, evidence=columns == "evidence")
    subjects = _subjects_load(study)
    if candidate_names:
        subjects = _subjects_of_candidates(subjects, candidates, candidate_names)
        ratings = ratings[ratings["subject"].isin(subjects.index)].reset_index(drop=True)
    items, dimensions = _items_load(study)
    if strata:
        subjects = subjects[subjects["item"].isin(_items_in_strata(items, strata))]
        ratings = ratings[ratings["subject"].isin(subjects.index)].reset_index(drop=True)
    orders = _orders_load(crits, judges, window)
    if strata:
        orders = orders[orders["subject"].isin(subjects.index)].reset_index(drop=True)
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates=candidates,
        ratings=ratings,
        subjects=subjects,
        items=items,
        dimensions=dimensions,
        orders=orders,
        rater_attributes=_rater_attributes_load(study),
    )


def _criteria_load(
    study: Study, criterion_keys: Sequence[str] | None
) -> dict[int, CriterionRef]:
    """The study's criteria (those with the keys given, when given), in rubric order."""
    crit_qs = Criterion.objects.filter(rubric__study=study).select_related("rubric")
    if criterion_keys:
        crit_qs = crit_qs.filter(key__in=list(criterion_keys))
    return {
        c.pk: CriterionRef(
            id=c.pk,
            key=c.key,
            name=c.name,
            scale=c.scale,
            values=tuple(criterion_allowed_values(c)),
            rubric_version=c.rubric.version,
            bounds=interval_bounds(c) if c.scale == "interval" else None,
            pass_threshold=_float_or_none(c.pass_threshold) if c.scale == "interval" else None,
        )
        for c in crit_qs.order_by("rubric__version", "position", "id")
    }


def _judges_load(
    study: Study, judge_version_ids: Sequence[int] | None
) -> dict[int, JudgeRef]:
    """The study's judge versions (those with the ids given, when given), by judge and version."""
    jv_qs = JudgeVersion.objects.filter(judge__study=study).select_related("judge")
    if judge_version_ids:
        jv_qs = jv_qs.filter(pk__in=list(judge_version_ids))
    return {
        v.pk: JudgeRef.of(
            id=v.pk,
            judge=v.judge.name,
            version=v.version,
            label=str((v.config or {}).get("label", "")) if v.judge.kind == "imported" else "",
            model_family=v.model_family,
            value_type=str((v.config or {}).get("value_type", "label")),
            kind=v.judge.kind,
        )
        for v in jv_qs.order_by("judge__name", "version")
    }


def _ratings_load(
    crits: dict[int, CriterionRef],
    judges: dict[int, JudgeRef],
    window: Mapping[str, datetime],
    *,
    evidence: bool,
) -> pd.DataFrame:
    """Scored verdicts then annotations of the criteria, judges and time window, rows without a
    readable code dropped; with `evidence`, the gold and latest adjudicated labels attached."""
    continuous = {j.id for j in judges.values() if j.value_type == "continuous"}
    verdict_qs = Verdict.objects.filter(
        criterion_id__in=list(crits), is_scored=True, judge_version_id__in=list(judges), **window
    )
    ann_qs = Annotation.objects.filter(criterion_id__in=list(crits), **window)
    verdicts = ratings_frame(verdict_qs, "judge_version_id", crits, True, continuous, evidence)
    annotations = ratings_frame(ann_qs, "annotator_id", crits, False, set(), evidence)
    ratings = pd.concat([verdicts, annotations], ignore_index=True)
    ratings = ratings[ratings["num"].notna()].reset_index(drop=True)
    if not evidence:
        return ratings
    gold = labels_frame(GoldLabel.objects.filter(criterion_id__in=list(crits)), latest=False)
    adjudicated = labels_frame(
        Adjudication.objects.filter(criterion_id__in=list(crits)), latest=True
    )
    ratings["gold_label"] = labels_attached(ratings, gold, "gold_label")
    ratings["gold"] = ratings["gold_label"].notna().to_numpy(dtype=bool)
    ratings["adjudicated_label"] = labels_attached(ratings, adjudicated, "adjudicated_label")
    return ratings[
        [
            *AGREEMENT_COLUMNS, "value", "value_num", "probability", "severity",
            "inclusion_probability", "draw_kind", "gold", "gold_label", "adjudicated_label",
            "created_at",
        ]
    ]


def _subjects_load(study: Study) -> pd.DataFrame:
    """Every output and comparison of the study as a subject row (index: the subject code),
    sorted: item, candidate(s) and text length(s)."""
    outs = reader.values_frame(
        Output.objects.filter(study=study).values_list(
            "id", "item_id", "candidate_id", Length("text")
        ),
        ["id", "item", "candidate", "length"],
    )
    subjects_o = pd.DataFrame(
        {
            "subject": output_codes(outs["id"].to_numpy(dtype="int64")),
            "item": outs["item"].to_numpy(dtype="int64"),
            "candidate": outs["candidate"].to_numpy(dtype="int64"),
            "candidate_b": np.full(len(outs), -1, dtype="int64"),
            "length": outs["length"].to_numpy(dtype="float64"),
            "length_b": np.full(len(outs), np.nan),
        }
    )
    cmp_rows = list(
        Comparison.objects.filter(study=study).values_list(
            "id", "item_id", "output_a_id", "output_b_id"
        )
    )
    cmps = reader.rows_frame(cmp_rows, ["id", "item", "a", "b"])
    by_output = outs.set_index("id") if len(outs) else outs
    if len(cmps):
        a = by_output.loc[cmps["a"].to_numpy()]
        b = by_output.loc[cmps["b"].to_numpy()]
        subjects_c = pd.DataFrame(
            {
                "subject": comparison_codes(cmps["id"].to_numpy(dtype="int64")),
                "item": cmps["item"].to_numpy(dtype="int64"),
                "candidate": a["candidate"].to_numpy(dtype="int64"),
                "candidate_b": b["candidate"].to_numpy(dtype="int64"),
                "length": a["length"].to_numpy(dtype="float64"),
                "length_b": b["length"].to_numpy(dtype="float64"),
            }
        )
        subjects = pd.concat([subjects_o, subjects_c], ignore_index=True)
    else:
        subjects = subjects_o
    return subjects.set_index("subject").sort_index()


def _subjects_of_candidates(
    subjects: pd.DataFrame,
    candidates: Mapping[int, tuple[str, str]],
    candidate_names: Sequence[str],
) -> pd.DataFrame:
    """The subjects whose candidate (both candidates, for a comparison) is named."""
    keep_ids = {cid for cid, (name, _) in candidates.items() if name in set(candidate_names)}
    ok = subjects["candidate"].isin(keep_ids) & (
        (subjects["candidate_b"] < 0) | subjects["candidate_b"].isin(keep_ids)
    )
    return subjects[ok]


def _items_load(study: Study) -> tuple[pd.DataFrame, list[str]]:
    """The items (index: item id) with their external id and one label column per stratum
    dimension ("unknown" without one), and the dimensions: the study's in order, then any
    other an item names."""
    item_rows = list(Item.objects.filter(study=study).values_list("id", "external_id", "strata"))
    dim_order = list(
        StratumDimension.objects.filter(study=study)
        .order_by("position", "id")
        .values_list("key", flat=True)
    )
    seen_dims: dict[str, None] = {d: None for d in dim_order}
    for _, _, item_strata in item_rows:
        for d in item_strata or {}:
            seen_dims.setdefault(str(d), None)
    dimensions = list(seen_dims)
    items = pd.DataFrame(
        {
            "external_id": [r[1] for r in item_rows],
            **{d: [str((r[2] or {}).get(d, "unknown")) for r in item_rows] for d in dimensions},
        },
        index=pd.Index([r[0] for r in item_rows], dtype="int64", name="item"),
    )
    return items, dimensions


def _items_in_strata(items: pd.DataFrame, strata: Mapping[str, Sequence[str]]) -> pd.Index:
    """The ids of the items whose label is listed for every dimension given."""
    keep = np.ones(len(items), dtype=bool)
    for dim, labels in strata.items():
        column = items[dim] if dim in items.columns else pd.Series("unknown", index=items.index)
        keep &= column.isin([str(label) for label in labels]).to_numpy()
    return items.index[keep]


def _rater_attributes_load(study: Study) -> dict[int, dict[str, str]]:
    """Each member's attributes (`Membership.metadata`, an object of text values), one query.

    A study has a member per rater, never per rating, so this reads every membership rather
    than filtering on the JSON in SQL (which differs between PostgreSQL and SQLite)."""
    out: dict[int, dict[str, str]] = {}
    for user_id, meta in Membership.objects.filter(study=study).values_list("user_id", "metadata"):
        if isinstance(meta, Mapping) and meta:
            attrs = {
                str(k): str(v) for k, v in meta.items() if isinstance(v, (str, int, float))
            }
            if attrs:
                out[int(user_id)] = attrs
    return out


def _orders_load(
    crits: dict[int, CriterionRef],
    judges: dict[int, JudgeRef],
    window: Mapping[str, datetime] | None = None,
) -> pd.DataFrame:
    """Pairwise judge verdicts that record both presentation orders (for position bias and the
    orders table), one canonical code per order; NaN for an order whose answer could not be
    parsed (an unscored verdict keeps the other order: judges.aggregation, the importer's
    empty values). An order that has no answer because the provider call failed is not the
    judge's doing: such pairs are left out."""
    pair_ids = [c.id for c in crits.values() if c.scale == "pairwise"]
    cols = ["subject", "criterion", "rater", "ab", "ba"]
    if not pair_ids or not judges:
        return reader.rows_frame([], cols)
    rows = []
    for jv, cid, comp, details in Verdict.objects.filter(
        criterion_id__in=pair_ids,
        judge_version_id__in=list(judges),
        comparison_id__isnull=False,
        **(window or {}),
    ).values_list("judge_version_id", "criterion_id", "comparison_id", "details"):
        details = details or {}
        orders = details.get("orders") or {}
        if "ab" not in orders or "ba" not in orders:
            continue
        codes = [_order_code(details, order, orders[order]) for order in ("ab", "ba")]
        if None in codes:
            continue
        rows.append((SubjectRef.comparison(comp).code, cid, jv, *codes))
    return reader.rows_frame(rows, cols)


def _order_code(details: Mapping[str, Any], order: str, value: Any) -> float | None:
    """One order's canonical code; NaN when its answer was unparseable; None when the order
    has no answer for another reason (a failed provider call), or an unknown value."""
    if value is not None:
        return PAIRWISE_CODE.get(value)
    failed = any(isinstance(rec, Mapping) and rec.get("order") == order
                 and rec.get("status") == "failed" for rec in details.get("samples") or ())
    return None if failed else float("nan")


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
