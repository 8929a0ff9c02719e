"""Reads for reports: the rating data of a study as pandas frames, and report lookups.

The loaders read `values_list` querysets (no model instances) straight into columns, because an
agreement report may read a million verdicts: model instances would cost tens of seconds. On
PostgreSQL the compiled query runs inside `COPY (...) TO STDOUT` and pandas parses the CSV
stream, so no Python object is made per value (bench/agreement.py's 1.1 M ratings with their
subjects and strata: 1.3-1.5 s instead of 3.2-3.5 s with tuples); other databases (SQLite)
iterate the tuples.

Subjects (what a rating is about) are encoded as one integer: ``2 * output_id`` for a single
output and ``2 * comparison_id + 1`` for a comparison.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import F, IntegerField, QuerySet
from django.db.models.functions import Coalesce, Length

from annotations.models import Annotation
from judges.models import JudgeVersion, Verdict
from studies.criteria import criterion_allowed_values
from studies.models import Candidate, Comparison, Criterion, Item, Output, StratumDimension, Study

from .models import AgreementReport


@dataclass(frozen=True)
class CriterionInfo:
    id: int
    key: str
    name: str
    scale: str
    # Stored values in scale order (ordinal "1".."k", categorical labels, pass/fail, A/B/tie).
    values: tuple[str, ...]
    rubric_version: int


@dataclass(frozen=True)
class JudgeInfo:
    id: int
    judge: str
    version: int
    label: str
    model_family: str
    value_type: str  # "label" | "continuous"
    kind: str

    @property
    def display(self) -> str:
        return f"{self.judge} {self.label}" if self.label else f"{self.judge} v{self.version}"


@dataclass
class RatingData:
    """Everything an agreement report reads, as frames keyed by integer ids."""

    criteria: dict[int, CriterionInfo]
    judges: dict[int, JudgeInfo]
    candidates: dict[int, tuple[str, str]]  # id -> (name, model_family)
    # One row per rating: subject, criterion, rater (judge version id or user id), is_judge,
    # code (float; see `value_code`), text (canonical stored value, for the fingerprint).
    ratings: pd.DataFrame
    # Indexed by subject: item, candidate, candidate_b (-1 for outputs), length, length_b.
    subjects: pd.DataFrame
    # Indexed by item id: external_id plus one column per stratum dimension.
    items: pd.DataFrame
    dimensions: list[str]
    # Pairwise judge verdicts given in both orders: subject, criterion, rater, ab, ba (codes).
    orders: pd.DataFrame = field(default_factory=pd.DataFrame)


# Codes used by the statistics: nominal scales get category indices; pairwise follows the
# PandaLM/evalstats convention tie = 0, A = 1, B = 2; ordinal and continuous keep the number.
PAIRWISE_CODE = {"tie": 0.0, "A": 1.0, "B": 2.0}
_PAIRWISE_FROM_NUM = {1.0: 1.0, 0.0: 2.0, 0.5: 0.0}


def _subject_expr() -> Any:
    return Coalesce(F("output_id") * 2, F("comparison_id") * 2 + 1, output_field=IntegerField())


def _frame(rows: list[tuple[Any, ...]], names: Sequence[str]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({n: pd.Series(dtype="float64") for n in names})
    cols = list(zip(*rows, strict=True))
    return pd.DataFrame({n: np.asarray(c) for n, c in zip(names, cols, strict=True)})


def _values_frame(
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
    with conn.cursor() as cursor:
        raw = cursor.cursor  # the driver's cursor: Django's wrapper passes no COPY parameters
        if not hasattr(raw, "copy"):  # psycopg2 has no cursor.copy(); read the tuples instead
            return _frame(list(qs), names)
        # psycopg 3 merges the parameters client-side for COPY (it takes no bind parameters).
        with raw.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", params) as copy:
            for block in copy:
                buf.write(block)
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


def _ratings(
    qs: QuerySet[Any],
    rater_field: str,
    crits: dict[int, CriterionInfo],
    is_judge: bool,
    continuous: set[int],
) -> pd.DataFrame:
    """Ratings of one model as codes; categorical values are read as text, the rest as numbers."""
    parts: list[pd.DataFrame] = []
    nominal_text = [c.id for c in crits.values() if c.scale == "categorical"]
    numeric = [c.id for c in crits.values() if c.scale != "categorical"]
    base = qs.annotate(subject=_subject_expr())
    if numeric:
        df = _values_frame(
            base.filter(criterion_id__in=numeric).values_list(
                "subject", "criterion_id", rater_field, "value_num"
            ),
            ["subject", "criterion", "rater", "num"],
        )
        parts.append(df)
    if nominal_text:
        df = _values_frame(
            base.filter(criterion_id__in=nominal_text).values_list(
                "subject", "criterion_id", rater_field, "value"
            ),
            ["subject", "criterion", "rater", "value"],
            text=["value"],
        )
        codes = np.full(len(df), np.nan)
        texts = df["value"].astype(object).to_numpy() if len(df) else np.array([], dtype=object)
        crit_arr = df["criterion"].to_numpy()
        for cid in nominal_text:
            mask = crit_arr == cid
            if mask.any():
                lookup = pd.Index(list(crits[cid].values))
                found = lookup.get_indexer(pd.Index(texts[mask]))
                codes[mask] = np.where(found >= 0, found, np.nan)
        df["num"] = codes
        parts.append(df)
    if not parts:
        out = _frame([], ["subject", "criterion", "rater", "num"])
    else:
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
    return out.drop(columns=[c for c in ("value",) if c in out.columns])


def rating_data_load(
    *,
    study: Study,
    criterion_keys: Sequence[str] | None = None,
    judge_version_ids: Sequence[int] | None = None,
    candidate_names: Sequence[str] | None = None,
) -> RatingData:
    """Load a study's verdicts, annotations, subjects and strata for an agreement report."""
    crit_qs = Criterion.objects.filter(rubric__study=study).select_related("rubric")
    if criterion_keys:
        crit_qs = crit_qs.filter(key__in=list(criterion_keys))
    crits = {
        c.pk: CriterionInfo(
            id=c.pk,
            key=c.key,
            name=c.name,
            scale=c.scale,
            values=tuple(criterion_allowed_values(c)),
            rubric_version=c.rubric.version,
        )
        for c in crit_qs.order_by("rubric__version", "position", "id")
    }
    jv_qs = JudgeVersion.objects.filter(judge__study=study).select_related("judge")
    if judge_version_ids:
        jv_qs = jv_qs.filter(pk__in=list(judge_version_ids))
    judges = {
        v.pk: JudgeInfo(
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

    verdict_qs = Verdict.objects.filter(
        criterion_id__in=list(crits), is_scored=True, judge_version_id__in=list(judges)
    )
    ann_qs = Annotation.objects.filter(criterion_id__in=list(crits))
    verdicts = _ratings(verdict_qs, "judge_version_id", crits, True, continuous)
    annotations = _ratings(ann_qs, "annotator_id", crits, False, set())
    ratings = pd.concat([verdicts, annotations], ignore_index=True)
    ratings = ratings[ratings["num"].notna()].reset_index(drop=True)

    outs = _values_frame(
        Output.objects.filter(study=study).values_list(
            "id", "item_id", "candidate_id", Length("text")
        ),
        ["id", "item", "candidate", "length"],
    )
    subjects_o = pd.DataFrame(
        {
            "subject": outs["id"].to_numpy(dtype="int64") * 2,
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
                "subject": cmps["id"].to_numpy(dtype="int64") * 2 + 1,
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
    for _, _, strata in item_rows:
        for d in strata or {}:
            seen_dims.setdefault(str(d), None)
    dimensions = list(seen_dims)
    items = pd.DataFrame(
        {
            "external_id": [r[1] for r in item_rows],
            **{d: [str((r[2] or {}).get(d, "unknown")) for r in item_rows] for d in dimensions},
        },
        index=pd.Index([r[0] for r in item_rows], dtype="int64", name="item"),
    )

    orders = _orders_load(crits, judges)
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates=candidates,
        ratings=ratings,
        subjects=subjects,
        items=items,
        dimensions=dimensions,
        orders=orders,
    )


def _orders_load(crits: dict[int, CriterionInfo], judges: dict[int, JudgeInfo]) -> pd.DataFrame:
    """Pairwise judge verdicts that record both presentation orders (for position bias)."""
    pair_ids = [c.id for c in crits.values() if c.scale == "pairwise"]
    cols = ["subject", "criterion", "rater", "ab", "ba"]
    if not pair_ids or not judges:
        return _frame([], cols)
    rows = []
    for jv, cid, comp, details in Verdict.objects.filter(
        criterion_id__in=pair_ids,
        judge_version_id__in=list(judges),
        is_scored=True,
        comparison_id__isnull=False,
    ).values_list("judge_version_id", "criterion_id", "comparison_id", "details"):
        orders = (details or {}).get("orders") or {}
        if "ab" in orders and "ba" in orders:
            ab, ba = PAIRWISE_CODE.get(orders["ab"]), PAIRWISE_CODE.get(orders["ba"])
            if ab is not None and ba is not None:
                rows.append((comp * 2 + 1, cid, jv, ab, ba))
    return _frame(rows, cols)


def value_text(scale: str, values: Sequence[str], code: float, continuous: bool) -> str:
    """The canonical stored value of a code (used by the fingerprint and the examples page)."""
    if continuous:
        return repr(float(code))
    if scale == "pairwise":
        return {0.0: "tie", 1.0: "A", 2.0: "B"}[float(code)]
    if scale == "binary":
        return "pass" if code == 1.0 else "fail"
    if scale == "ordinal":
        return str(int(code))
    return values[int(code)]


def reports_for_study(*, study: Study) -> QuerySet[AgreementReport]:
    """The study's agreement reports, newest first, without the (large) result column."""
    return AgreementReport.objects.filter(study=study).defer("result").select_related("plan")


def report_get(*, study: Study, report_id: int) -> AgreementReport | None:
    return AgreementReport.objects.filter(study=study, pk=report_id).select_related("plan").first()


def subjects_describe(*, study: Study, subjects: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Item input and output texts of encoded subjects (for the disagreeing-examples page)."""
    out_ids = [s // 2 for s in subjects if s % 2 == 0]
    cmp_ids = [s // 2 for s in subjects if s % 2 == 1]
    result: dict[int, dict[str, Any]] = {}
    for oid, ext, inp, cand, text in Output.objects.filter(study=study, pk__in=out_ids).values_list(
        "id", "item__external_id", "item__input", "candidate__name", "text"
    ):
        result[oid * 2] = {"item": ext, "input": inp, "outputs": [(cand, text)]}
    for cid, ext, inp, ca, ta, cb, tb in Comparison.objects.filter(
        study=study, pk__in=cmp_ids
    ).values_list(
        "id",
        "item__external_id",
        "item__input",
        "output_a__candidate__name",
        "output_a__text",
        "output_b__candidate__name",
        "output_b__text",
    ):
        result[cid * 2 + 1] = {
            "item": ext,
            "input": inp,
            "outputs": [(f"A: {ca}", ta), (f"B: {cb}", tb)],
        }
    return result


__all__ = [
    "PAIRWISE_CODE",
    "CriterionInfo",
    "JudgeInfo",
    "RatingData",
    "rating_data_load",
    "report_get",
    "reports_for_study",
    "subjects_describe",
    "value_text",
]
