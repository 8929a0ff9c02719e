"""The evidence read model: every rating of a study as column frames (the one reader of ratings
for statistics; reports and calibration read through `rating_data_load`).

The loaders read `values_list` querysets (no model instances) straight into columns, because a
report may read a million verdicts: model instances would cost tens of seconds. On PostgreSQL
the compiled query runs inside `COPY (...) TO STDOUT` and pandas parses the CSV stream, so no
Python object is made per value (bench/agreement.py's 1.1 M ratings with their subjects and
strata: 1.3-1.5 s instead of 3.2-3.5 s with tuples); other databases (SQLite) iterate the tuples
and give the same frames. Everything per rating (probability, severity, inclusion probability,
timestamps) comes through the same statement as the rating itself (joins, never a query per
row); gold labels and adjudications are one query each, joined on (subject, criterion) in
pandas. A load costs at most `LOAD_MAX_QUERIES` queries whatever the study's size.

Subjects (what a rating is about) are encoded as one integer: ``2 * output_id`` for a single
output and ``2 * comparison_id + 1`` for a comparison (`studies.subjects`: ``SubjectRef.code``,
and `subject_codes` / `subject_split` for whole columns).

``RatingData.ratings``, one row per rating with a value the statistics can read (a stored
value outside the criterion's scale is dropped):

=====================  ==================  ===================================================
column                 dtype               meaning (NULL/NaN when)
=====================  ==================  ===================================================
subject                int64               encoded subject (see above)
criterion              int64               criterion id (``RatingData.criteria``)
rater                  int64               judge version id (judges) or user id (annotators)
is_judge               bool                True for a judge verdict, False for an annotation
continuous             bool                the rater is a continuous-score judge version
num                    float64             the code the statistics use: category index
                                           (categorical), tie 0 / A 1 / B 2 (pairwise), the
                                           number otherwise (pass 1 / fail 0, ordinal level,
                                           continuous score); never NaN
value                  str                 the stored value as text ("pass", "3", "A", ...)
value_num              float64             the stored numeric value (NaN for categorical
                                           labels and whenever none was stored)
probability            float64             the judge's probability or confidence of its
                                           verdict (NaN for annotations and for verdicts
                                           whose provider gave none)
severity               float64             the annotator's 1-5 severity of a failure (NaN for
                                           verdicts and for annotations that gave none)
inclusion_probability  float64             first-order inclusion probability of the subject
                                           in the human sample, from the queue entry the
                                           annotation was graded from (NaN for verdicts,
                                           imported annotations and non-random draws)
draw_kind              object (str|None)   how that queue entry was drawn: "random",
                                           "census", "gold" or "escalation" (None for
                                           verdicts and for annotations not graded from the
                                           queue)
gold                   bool                the (subject, criterion) has a gold label
gold_label             object (str|None)   the gold label's stored value (None without one)
adjudicated_label      object (str|None)   the latest adjudication's stored value for the
                                           (subject, criterion) (None without one)
created_at             datetime64[us, UTC] when the verdict or annotation was recorded
=====================  ==================  ===================================================

``RatingData.subjects`` (index ``subject``): item (int64), candidate (int64), candidate_b
(int64, -1 for outputs), length and length_b (float64 text lengths, length_b NaN for outputs).
``RatingData.items`` (index ``item``): external_id plus one str column per stratum dimension
(``RatingData.dimensions``; "unknown" when the item has no label). ``RatingData.orders``: the
presentation orders of pairwise judge verdicts that record both (subject, criterion, rater,
ab, ba as pairwise codes). ``RatingData.rater_attributes``: the attributes of the study's
members (user id -> {key: value}, from `Membership.metadata`, e.g. the `rater.group` an import
gave a human rater; one query), read by the agreement report's rater groups.
`evidence_frame` joins them all into one flat frame.

Selections (`rating_data_load`): criteria by key, judge versions by id, candidates by name (a
comparison is kept when both its candidates are), strata by dimension -> labels (a subject is
kept when its item's label is listed for every dimension given), and a time window on the
ratings' `created_at` (``since`` inclusive, ``until`` exclusive).

Column sets (`rating_data_load(columns=...)`): ``"evidence"`` (the default) gives every column
above. ``"agreement"`` gives only the six the agreement report reads (subject, criterion,
rater, num, is_judge, continuous, in that order; `AGREEMENT_COLUMNS`) and its statements read
nothing else: per criterion group one value column (value_num, or value for categorical
criteria), no join to the assignment and queue entry, no gold label or adjudication query, no
created_at in the select list (a time window still filters on it in WHERE). The evidence
columns nearly double a load (bench/agreement.py's 1.1 M ratings: 3.9 s -> 7.3 s; a tenth of
that study: 0.23 s -> 0.35 s), so a caller that reads none of them (the agreement report,
reports/kinds.py) asks for ``"agreement"``; the `subjects`, `items` and `orders` frames
are the same in both sets. An agreement load costs at most `LOAD_MAX_QUERIES_AGREEMENT`
queries.
"""

from __future__ import annotations

import io
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import (
    BigIntegerField,
    CharField,
    F,
    FloatField,
    Func,
    QuerySet,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Length

from annotations.models import Adjudication, Annotation, GoldLabel
from calibration.refs import CriterionRef, JudgeRef
from judges.models import JudgeVersion, Verdict
from studies.criteria import criterion_allowed_values, interval_bounds, number_text
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
from studies.subjects import SubjectRef, comparison_codes, output_codes, subject_code_expr

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


# Codes used by the statistics: nominal scales get category indices; pairwise follows the
# PandaLM/evalstats convention tie = 0, A = 1, B = 2; ordinal and continuous keep the number.
PAIRWISE_CODE = {"tie": 0.0, "A": 1.0, "B": 2.0}
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


def _frame(rows: list[tuple[Any, ...]], names: Sequence[str]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({n: pd.Series(dtype="float64") for n in names})
    cols = list(zip(*rows, strict=True))
    return pd.DataFrame({n: np.asarray(c) for n, c in zip(names, cols, strict=True)})


def values_frame(
    qs: QuerySet[Any], names: Sequence[str], text: Sequence[str] = ()
) -> pd.DataFrame:
    """The rows of a `values_list` queryset as a frame, one column per value, in query order.

    PostgreSQL: COPY of the compiled query as CSV, parsed by pandas. Integer columns come back
    as int64 and the others as float64 (NULL -> NaN). PostgreSQL prints the shortest text that
    reads back as the same double and pandas' parser reads it back exactly, so the frame holds
    the values `_frame` builds from the driver's tuples. Columns named in `text` are read as
    strings, taken literally (no "NA" -> NaN conversion; the columns read so are NOT NULL).
    Other databases: `_frame` over the tuples.
    """
    conn = connections[qs.db]
    if conn.vendor != "postgresql":
        return _frame(list(qs), names)
    try:
        sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    except EmptyResultSet:  # e.g. criterion_id__in=[]: the ORM would not query either
        return _frame([], names)
    buf = io.BytesIO()
    copy_sql = f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)"
    started = time.perf_counter()
    with conn.cursor() as cursor:
        raw = cursor.cursor  # the driver's cursor: Django's wrapper passes no COPY parameters
        if not hasattr(raw, "copy"):  # psycopg2 has no cursor.copy(); read the tuples instead
            return _frame(list(qs), names)
        # psycopg 3 merges the parameters client-side for COPY (it takes no bind parameters).
        with raw.copy(copy_sql, params) as copy:
            for block in copy:
                buf.write(block)
    if conn.queries_logged:
        # The driver's COPY bypasses Django's query log; record it so that query-count bounds
        # (and debug tooling) see the same statements on every backend.
        conn.queries_log.append(
            {"sql": f"{copy_sql} -- params {params!r}",
             "time": f"{time.perf_counter() - started:.3f}"}
        )
    if buf.tell() == 0:
        return _frame([], names)
    buf.seek(0)
    numeric = [n for n in names if n not in text]
    return pd.read_csv(
        buf,
        header=None,
        names=list(names),
        dtype={n: str for n in text},
        keep_default_na=False,
        # An unquoted empty field is NULL in PostgreSQL's CSV; text columns keep "" as "".
        na_values={n: [""] for n in numeric},
        engine="c",
    )


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


def _ratings(
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
        df = values_frame(
            base.filter(criterion_id__in=ids).values_list(
                "subject", "criterion_id", rater_field, *tail
            ),
            names,
            text=_EXTRA_TEXT,
        )
        df["num"] = df["value_num"] if ids is numeric else _category_codes(df, crits, ids)
        parts.append(df)
    if not parts:
        parts = [_frame([], [*names, "num"])]
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
            values_frame(
                base.filter(criterion_id__in=numeric).values_list(
                    "subject", "criterion_id", rater_field, "value_num"
                ),
                ["subject", "criterion", "rater", "num"],
            )
        )
    if nominal_text:
        df = values_frame(
            base.filter(criterion_id__in=nominal_text).values_list(
                "subject", "criterion_id", rater_field, "value"
            ),
            ["subject", "criterion", "rater", "value"],
            text=["value"],
        )
        df["num"] = _category_codes(df, crits, nominal_text)
        parts.append(df.drop(columns=["value"]))
    return parts or [_frame([], ["subject", "criterion", "rater", "num"])]


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


def _labels(qs: QuerySet[Any], latest: bool) -> pd.DataFrame:
    """(subject, criterion) -> stored value of gold labels or adjudications (latest by id)."""
    df = values_frame(
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


def _attach_labels(ratings: pd.DataFrame, labels: pd.DataFrame, column: str) -> pd.Series:
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
    gold = _labels(GoldLabel.objects.filter(criterion_id__in=ids), latest=True)
    adjudicated = _labels(Adjudication.objects.filter(criterion_id__in=ids), latest=True)
    for frame, at in ((gold, 0), (adjudicated, 1)):
        for sub, crit, label in zip(frame["subject"].tolist(), frame["criterion"].tolist(),
                                    frame["label"].tolist(), strict=True):
            pair = list(out.get((int(crit), int(sub)), (None, None)))
            pair[at] = None if label is None else str(label)
            out[(int(crit), int(sub))] = (pair[0], pair[1])
    return out


def label_reading(crit: CriterionRef, label: str | None) -> float:
    """The code of a stored label on the scale the one rule reads for binary and pairwise
    criteria (pass 1 / fail 0; tie 0 / A 1 / B 2); NaN when unreadable or absent."""
    if label is None:
        return float("nan")
    if crit.scale == "pairwise":
        return PAIRWISE_CODE.get(label, float("nan"))
    if crit.scale == "binary":
        return {"pass": 1.0, "fail": 0.0}.get(label, float("nan"))
    return float("nan")


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
    """Load a study's ratings with their evidence, subjects and strata (module docstring).

    `strata` maps a dimension key to the labels kept; `since` (inclusive) and `until`
    (exclusive) bound the ratings' `created_at`. `columns` picks the ratings' column set:
    "evidence" (every column, at most `LOAD_MAX_QUERIES` queries) or "agreement" (only
    `AGREEMENT_COLUMNS`, at most `LOAD_MAX_QUERIES_AGREEMENT` queries).
    """
    if columns not in ("agreement", "evidence"):
        raise ValueError(f"columns must be 'agreement' or 'evidence', not {columns!r}")
    evidence = columns == "evidence"
    crit_qs = Criterion.objects.filter(rubric__study=study).select_related("rubric")
    if criterion_keys:
        crit_qs = crit_qs.filter(key__in=list(criterion_keys))
    crits = {
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
    jv_qs = JudgeVersion.objects.filter(judge__study=study).select_related("judge")
    if judge_version_ids:
        jv_qs = jv_qs.filter(pk__in=list(judge_version_ids))
    judges = {
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
    continuous = {j.id for j in judges.values() if j.value_type == "continuous"}
    candidates = {c.pk: (c.name, c.model_family) for c in Candidate.objects.filter(study=study)}

    window: dict[str, datetime] = {}
    if since is not None:
        window["created_at__gte"] = since
    if until is not None:
        window["created_at__lt"] = until
    verdict_qs = Verdict.objects.filter(
        criterion_id__in=list(crits), is_scored=True, judge_version_id__in=list(judges), **window
    )
    ann_qs = Annotation.objects.filter(criterion_id__in=list(crits), **window)
    verdicts = _ratings(verdict_qs, "judge_version_id", crits, True, continuous, evidence)
    annotations = _ratings(ann_qs, "annotator_id", crits, False, set(), evidence)
    ratings = pd.concat([verdicts, annotations], ignore_index=True)
    ratings = ratings[ratings["num"].notna()].reset_index(drop=True)
    if evidence:
        gold = _labels(GoldLabel.objects.filter(criterion_id__in=list(crits)), latest=False)
        adjudicated = _labels(
            Adjudication.objects.filter(criterion_id__in=list(crits)), latest=True
        )
        ratings["gold_label"] = _attach_labels(ratings, gold, "gold_label")
        ratings["gold"] = ratings["gold_label"].notna().to_numpy(dtype=bool)
        ratings["adjudicated_label"] = _attach_labels(ratings, adjudicated, "adjudicated_label")
        ratings = ratings[
            [
                *AGREEMENT_COLUMNS, "value", "value_num", "probability", "severity",
                "inclusion_probability", "draw_kind", "gold", "gold_label", "adjudicated_label",
                "created_at",
            ]
        ]

    outs = values_frame(
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
    cmps = _frame(cmp_rows, ["id", "item", "a", "b"])
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
    subjects = subjects.set_index("subject").sort_index()
    if candidate_names:
        keep_ids = {cid for cid, (name, _) in candidates.items() if name in set(candidate_names)}
        ok = subjects["candidate"].isin(keep_ids) & (
            (subjects["candidate_b"] < 0) | subjects["candidate_b"].isin(keep_ids)
        )
        subjects = subjects[ok]
        ratings = ratings[ratings["subject"].isin(subjects.index)].reset_index(drop=True)

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
    if strata:
        keep = np.ones(len(items), dtype=bool)
        for dim, labels in strata.items():
            column = items[dim] if dim in items.columns else pd.Series("unknown", index=items.index)
            keep &= column.isin([str(label) for label in labels]).to_numpy()
        subjects = subjects[subjects["item"].isin(items.index[keep])]
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
        return _frame([], cols)
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
    return _frame(rows, cols)


def _order_code(details: Mapping[str, Any], order: str, value: Any) -> float | None:
    """One order's canonical code; NaN when its answer was unparseable; None when the order
    has no answer for another reason (a failed provider call), or an unknown value."""
    if value is not None:
        return PAIRWISE_CODE.get(value)
    failed = any(isinstance(rec, Mapping) and rec.get("order") == order
                 and rec.get("status") == "failed" for rec in details.get("samples") or ())
    return None if failed else float("nan")


# --- The one human-label rule -------------------------------------------------------------------

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


# --- The one rubric rule ----------------------------------------------------------------------

def rubric_rule(aggregate: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rubric's rule in force (the rubric version's ``aggregate``, studies.spec) with the
    sentence every page, PDF, CSV and API response prints beside the rubric pass rate."""
    raw = dict(aggregate or {})
    if raw.get("kind") == "weighted" and raw.get("pass_share") is not None:
        share = float(raw["pass_share"])
        return {"kind": "weighted", "pass_share": share,
                "text": "an output passes the rubric when it passes every hard-gate criterion "
                        f"and at least {share * 100:g} % (by weight) of the other criteria"}
    return {"kind": "all", "pass_share": None,
            "text": "an output passes the rubric when every criterion with a pass/fail "
                    "reading passes"}


def rubric_pass_columns(
    y: Sequence[npt.NDArray[np.float64]], gates: Sequence[bool], weights: Sequence[float],
    rule: Mapping[str, Any],
) -> npt.NDArray[np.float64]:
    """Human rubric pass (1/0) per output from its criteria's 1/0 labels under `rule`; NaN
    unless every criterion has a label."""
    complete = np.logical_and.reduce([np.isfinite(v) for v in y])
    if rule.get("kind") == "weighted":
        gate_failed = np.zeros(y[0].size, dtype=bool)
        share = np.zeros(y[0].size)
        den = 0.0
        for v, g, w in zip(y, gates, weights, strict=True):
            ok = v == 1.0
            if g:
                gate_failed |= ~ok
            else:
                share = share + np.where(ok, w, 0.0)
                den += w
        share = share / den if den > 0 else np.ones(y[0].size)
        passed = (~gate_failed) & (share >= float(rule["pass_share"]) - 1e-12)
    else:
        passed = np.logical_and.reduce([v == 1.0 for v in y])
    return np.where(complete, passed.astype(np.float64), np.nan)


def rubric_predictor_columns(
    p: Sequence[npt.NDArray[np.float64]], gates: Sequence[bool], weights: Sequence[float],
    rule: Mapping[str, Any],
) -> npt.NDArray[np.float64]:
    """The judge's P(output passes the rubric) from its criteria's P(pass) under `rule`,
    assuming independence: the product of every criterion's P(pass) for "all"; the product
    of the gates' times the weighted mean of the others' for "weighted" (its expected share
    passed, the predictor calibration used before the rule was stated)."""
    if rule.get("kind") != "weighted":
        out = np.ones(p[0].size)
        for pi in p:
            out = out * pi
        return np.asarray(out, dtype=np.float64)
    gate = np.ones(p[0].size)
    num = np.zeros(p[0].size)
    den = 0.0
    for pi, g, w in zip(p, gates, weights, strict=True):
        if g:
            gate = gate * pi
        else:
            num = num + w * pi
            den += w
    rest = num / den if den > 0 else np.ones(p[0].size)
    return np.asarray(gate * rest, dtype=np.float64)


def evidence_frame(data: RatingData) -> pd.DataFrame:
    """One flat frame: `ratings` with each subject's item, candidate(s) and strata (one
    ``stratum:<dimension>`` column each), rater_kind ("judge" | "human") and, for pairwise judge
    verdicts that record both, the presentation orders ``order_ab`` / ``order_ba`` (codes; NaN
    otherwise). Rows and their order are those of `ratings`."""
    r = data.ratings
    out = r.copy()
    at = data.subjects.index.get_indexer(r["subject"].to_numpy())
    found = at >= 0
    pick = np.maximum(at, 0)
    for col, missing in (("item", -1), ("candidate", -1), ("candidate_b", -1)):
        values = data.subjects[col].to_numpy(dtype="int64")
        out[col] = np.where(found, values[pick] if len(values) else missing, missing)
    item_at = data.items.index.get_indexer(out["item"].to_numpy())
    for dim in data.dimensions:
        labels = data.items[dim].to_numpy(dtype=object)
        out[f"stratum:{dim}"] = np.where(
            item_at >= 0, labels[np.maximum(item_at, 0)] if len(labels) else None, None
        )
    out["rater_kind"] = np.where(r["is_judge"].to_numpy(dtype=bool), "judge", "human")
    o = data.orders
    out["order_ab"] = np.nan
    out["order_ba"] = np.nan
    if len(o) and len(r):
        key = pd.MultiIndex.from_arrays([o["subject"], o["criterion"], o["rater"]])
        rk = pd.MultiIndex.from_arrays([r["subject"], r["criterion"], r["rater"]])
        hit = key.get_indexer(rk)
        hit = np.where(r["is_judge"].to_numpy(dtype=bool), hit, -1)
        ok = hit >= 0
        for col in ("ab", "ba"):
            vals = o[col].to_numpy(dtype="float64")
            out[f"order_{col}"] = np.where(ok, vals[np.maximum(hit, 0)], np.nan)
    return out


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def value_text(scale: str, values: Sequence[str], code: float, continuous: bool) -> str:
    """The canonical stored value of a code (used by the fingerprint and the examples page)."""
    if continuous:
        return repr(float(code))
    if scale == "interval":
        return number_text(code)
    if scale == "pairwise":
        return {0.0: "tie", 1.0: "A", 2.0: "B"}[float(code)]
    if scale == "binary":
        return "pass" if code == 1.0 else "fail"
    if scale == "ordinal":
        return str(int(code))
    return values[int(code)]


__all__ = [
    "AGREEMENT_COLUMNS",
    "LOAD_MAX_QUERIES",
    "LOAD_MAX_QUERIES_AGREEMENT",
    "PAIRWISE_CODE",
    "ColumnSet",
    "CriterionRef",
    "HumanLabels",
    "JudgeRef",
    "RatingData",
    "evidence_frame",
    "human_labels",
    "label_reading",
    "pairwise_a_wins",
    "pairwise_side",
    "rating_data_load",
    "rubric_pass_columns",
    "rubric_predictor_columns",
    "rubric_rule",
    "stored_labels_load",
    "value_text",
    "values_frame",
]
