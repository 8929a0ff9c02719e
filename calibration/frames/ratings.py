"""Ratings of one model (verdicts or annotations) as code columns with their per-rating
evidence, and the gold and adjudicated labels joined to them (the evidence read model's
statements; columns: the package docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from django.db import connections
from django.db.models import BigIntegerField, CharField, F, FloatField, Func, QuerySet, Value
from django.db.models.functions import Cast, Coalesce

from annotations.models import Adjudication, GoldLabel
from calibration.frames import reader
from calibration.refs import CriterionRef
from studies.subjects import subject_code_expr

# Pairwise values are stored as value_num A 1, B 0, tie 0.5; the codes are tie 0, A 1, B 2.
_PAIRWISE_FROM_NUM = {1.0: 1.0, 0.0: 2.0, 0.5: 0.0}


# The per-rating columns read with each rating, in statement order after (subject, criterion,
# rater); text columns are read literally (see `values_frame`).
_EXTRA = ["value", "value_num", "probability", "severity", "inclusion", "draw_kind", "created"]
_EXTRA_TEXT = ["value", "draw_kind"]


def _created_expr(vendor: str) -> Any:
    """created_at as read: on PostgreSQL integer microseconds since the epoch, because parsing
    a million timestamps from COPY's text costs more than the rest of the load; elsewhere the
    driver's datetimes. EXTRACT(EPOCH) is numeric (exact) on PostgreSQL 14+."""
    if vendor == "postgresql":
        return Func(
            F("created_at"),
            template="(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint",
            output_field=BigIntegerField(),
        )
    return F("created_at")


def _subject_expr() -> Any:
    return subject_code_expr()


def _timestamps(values: pd.Series) -> pd.Series:
    """created_at as UTC timestamps, from epoch microseconds (PostgreSQL) or aware datetimes."""
    if len(values) == 0:
        return pd.Series(pd.DatetimeIndex([], tz="UTC"), dtype="datetime64[us, UTC]")
    if values.dtype == object and isinstance(values.iloc[0], datetime):
        out = pd.to_datetime(values, utc=True)
    else:  # PostgreSQL: integer microseconds since the epoch (see `_created_expr`)
        out = pd.to_datetime(values.to_numpy(dtype="int64"), unit="us", utc=True)
    return pd.Series(out, index=values.index).astype("datetime64[us, UTC]")


def _text_or_none(values: pd.Series) -> pd.Series:
    """A text column with "" (how COPY and the SQL below spell "none") as None."""
    arr = values.astype(object).to_numpy() if len(values) else np.array([], dtype=object)
    out = arr.copy()
    out[pd.isna(arr) | (arr == "")] = None
    return pd.Series(out, index=values.index, dtype=object)


def ratings_frame(
    qs: QuerySet[Any],
    rater_field: str,
    crits: dict[int, CriterionRef],
    is_judge: bool,
    continuous: set[int],
    evidence: bool = True,
) -> pd.DataFrame:
    """Ratings of one model as codes plus, when `evidence`, their per-rating evidence (module
    docstring); without it the statements read only subject, criterion, rater and the value."""
    nominal_text = [c.id for c in crits.values() if c.scale == "categorical"]
    numeric = [c.id for c in crits.values() if c.scale != "categorical"]
    if not evidence:
        # Columns come out as AGREEMENT_COLUMNS by construction (tests hold the order).
        lean = _lean_parts(qs, rater_field, crits, numeric, nominal_text)
        return _codes(lean, crits, is_judge, continuous)
    parts: list[pd.DataFrame] = []
    if is_judge:
        extra = {
            "r_probability": F("probability"),
            "r_severity": Value(None, output_field=FloatField()),
            "r_inclusion": Value(None, output_field=FloatField()),
            "r_draw_kind": Value("", output_field=CharField()),
        }
    else:
        # LEFT JOINs through the nullable assignment -> queue entry: NULL when not queued.
        extra = {
            "r_probability": Value(None, output_field=FloatField()),
            "r_severity": Cast("severity", FloatField()),
            "r_inclusion": F("assignment__entry__inclusion_probability"),
            "r_draw_kind": Coalesce(
                "assignment__entry__draw_kind", Value(""), output_field=CharField()
            ),
        }
    base = qs.annotate(
        subject=_subject_expr(), r_created=_created_expr(connections[qs.db].vendor), **extra
    )
    tail = (
        "value",
        "value_num",
        "r_probability",
        "r_severity",
        "r_inclusion",
        "r_draw_kind",
        "r_created",
    )
    names = ["subject", "criterion", "rater", *_EXTRA]
    for ids in (numeric, nominal_text):
        if not ids:
            continue
        df = reader.values_frame(
            base.filter(criterion_id__in=ids).values_list(
                "subject", "criterion_id", rater_field, *tail
            ),
            names,
            text=_EXTRA_TEXT,
        )
        df["num"] = df["value_num"] if ids is numeric else _category_codes(df, crits, ids)
        parts.append(df)
    if not parts:
        parts = [reader.rows_frame([], [*names, "num"])]
    out = _codes(parts, crits, is_judge, continuous)
    # The columns the agreement report has always read come first, in their historical order.
    return pd.DataFrame(
        {
            "subject": out["subject"],
            "criterion": out["criterion"],
            "rater": out["rater"],
            "num": out["num"],
            "is_judge": out["is_judge"],
            "continuous": out["continuous"],
            "value": out["value"].astype(object).fillna("").astype(str),
            "value_num": out["value_num"].astype("float64"),
            "probability": out["probability"].astype("float64"),
            "severity": out["severity"].astype("float64"),
            "inclusion_probability": out["inclusion"].astype("float64"),
            "draw_kind": _text_or_none(out["draw_kind"]),
            "created_at": _timestamps(out["created"]),
        }
    )


def _lean_parts(
    qs: QuerySet[Any],
    rater_field: str,
    crits: dict[int, CriterionRef],
    numeric: list[int],
    nominal_text: list[int],
) -> list[pd.DataFrame]:
    """(subject, criterion, rater, num) frames reading one value column per criterion group:
    value_num for numeric scales, value (as text, coded here) for categorical ones."""
    parts: list[pd.DataFrame] = []
    base = qs.annotate(subject=_subject_expr())
    if numeric:
        parts.append(
            reader.values_frame(
                base.filter(criterion_id__in=numeric).values_list(
                    "subject", "criterion_id", rater_field, "value_num"
                ),
                ["subject", "criterion", "rater", "num"],
            )
        )
    if nominal_text:
        df = reader.values_frame(
            base.filter(criterion_id__in=nominal_text).values_list(
                "subject", "criterion_id", rater_field, "value"
            ),
            ["subject", "criterion", "rater", "value"],
            text=["value"],
        )
        df["num"] = _category_codes(df, crits, nominal_text)
        parts.append(df.drop(columns=["value"]))
    return parts or [reader.rows_frame([], ["subject", "criterion", "rater", "num"])]


def _category_codes(
    df: pd.DataFrame, crits: dict[int, CriterionRef], ids: Sequence[int]
) -> np.ndarray:
    """Category index of each row's `value` in its criterion's scale (NaN when not on it)."""
    codes = np.full(len(df), np.nan)
    texts = df["value"].astype(object).to_numpy() if len(df) else np.array([], dtype=object)
    crit_arr = df["criterion"].to_numpy()
    for cid in ids:
        mask = crit_arr == cid
        if mask.any():
            lookup = pd.Index(list(crits[cid].values))
            found = lookup.get_indexer(pd.Index(texts[mask]))
            codes[mask] = np.where(found >= 0, found, np.nan)
    return codes


def _codes(
    parts: list[pd.DataFrame],
    crits: dict[int, CriterionRef],
    is_judge: bool,
    continuous: set[int],
) -> pd.DataFrame:
    """The frames of one model as one, with integer ids, pairwise codes, is_judge, continuous."""
    out = pd.concat(parts, ignore_index=True)
    out = out.astype({"subject": "int64", "criterion": "int64", "rater": "int64"})
    out["num"] = out["num"].astype("float64")
    # Pairwise values arrive as value_num (A 1, B 0, tie 0.5); recode to tie 0, A 1, B 2.
    pair_ids = [c.id for c in crits.values() if c.scale == "pairwise"]
    if pair_ids:
        mask = out["criterion"].isin(pair_ids).to_numpy()
        out.loc[mask, "num"] = out.loc[mask, "num"].map(_PAIRWISE_FROM_NUM).astype("float64")
    out["is_judge"] = is_judge
    if is_judge and continuous:
        out["continuous"] = out["rater"].isin(list(continuous))
    else:
        out["continuous"] = False
    return out


def labels_frame(qs: QuerySet[Any], latest: bool) -> pd.DataFrame:
    """(subject, criterion) -> stored value of gold labels or adjudications (latest by id)."""
    df = reader.values_frame(
        qs.annotate(subject=_subject_expr())
        .order_by("id")
        .values_list("subject", "criterion_id", "value"),
        ["subject", "criterion", "label"],
        text=["label"],
    )
    df = df.astype({"subject": "int64", "criterion": "int64"})
    df["label"] = df["label"].astype(object)
    if latest:
        df = df.drop_duplicates(["subject", "criterion"], keep="last")
    return df


def labels_attached(ratings: pd.DataFrame, labels: pd.DataFrame, column: str) -> pd.Series:
    """`labels` looked up by each rating's (subject, criterion), None where there is none."""
    if ratings.empty or labels.empty:
        return pd.Series([None] * len(ratings), index=ratings.index, dtype=object)
    key = pd.MultiIndex.from_arrays([labels["subject"], labels["criterion"]])
    at = key.get_indexer(pd.MultiIndex.from_arrays([ratings["subject"], ratings["criterion"]]))
    values = labels["label"].to_numpy(dtype=object)
    out = np.where(at >= 0, values[np.maximum(at, 0)], None)
    return pd.Series(out, index=ratings.index, dtype=object, name=column)


def stored_labels_load(
    criterion_ids: Sequence[int],
) -> dict[tuple[int, int], tuple[str | None, str | None]]:
    """(criterion id, subject) -> (gold label, latest adjudication) stored values, for the
    criteria given: the deliberate labels the one human-label rule puts before the annotators'
    consensus (`human_labels`), for a consumer whose load leaves them out (the agreement
    report's lean column set). Two queries."""
    out: dict[tuple[int, int], tuple[str | None, str | None]] = {}
    ids = list(criterion_ids)
    gold = labels_frame(GoldLabel.objects.filter(criterion_id__in=ids), latest=True)
    adjudicated = labels_frame(Adjudication.objects.filter(criterion_id__in=ids), latest=True)
    for frame, at in ((gold, 0), (adjudicated, 1)):
        for sub, crit, label in zip(frame["subject"].tolist(), frame["criterion"].tolist(),
                                    frame["label"].tolist(), strict=True):
            pair = list(out.get((int(crit), int(sub)), (None, None)))
            pair[at] = None if label is None else str(label)
            out[(int(crit), int(sub))] = (pair[0], pair[1])
    return out

