"""The evidence read model (calibration/frames/): every column against a hand-built study.

The study holds a judge verdict with a probability, a pairwise verdict with both presentation
orders, an annotation graded from a sampling plan's queue entry with a known inclusion
probability and a severity on its failing value, an imported annotation (no queue entry), a
gold label and two adjudications of one subject (the latest is in force). The same frames come
from PostgreSQL's COPY path and from the driver's tuples (the SQLite path), within a named
query budget, and the time and strata selections keep exactly the rows they name. The
agreement column set (``columns="agreement"``) gives the first six columns of the same rows
from statements that select and join nothing more, within its own smaller budget.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotations.models import (
    Adjudication,
    Annotation,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)
from calibration import frames
from calibration.frames import (
    AGREEMENT_COLUMNS,
    LOAD_MAX_QUERIES,
    LOAD_MAX_QUERIES_AGREEMENT,
    evidence_frame,
    rating_data_load,
)
from judges.models import Judge, JudgeVersion, Verdict
from studies.models import (
    Candidate,
    Comparison,
    Criterion,
    Item,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)

T0 = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


def _build() -> dict[str, Any]:
    users = get_user_model()
    owner = users.objects.create(username="ev-owner")
    ann_a = users.objects.create(username="ev-ann-a")
    ann_b = users.objects.create(username="ev-ann-b")
    study = Study.objects.create(slug="evidence", name="evidence", owner=owner)
    rubric = RubricVersion.objects.create(study=study, version=1)
    correct = Criterion.objects.create(
        rubric=rubric, key="correct", name="Correct", scale="binary", position=0
    )
    tone = Criterion.objects.create(
        rubric=rubric,
        key="tone",
        name="Tone",
        scale="categorical",
        points=[{"value": v, "label": v} for v in ("calm", "rude")],
        position=1,
    )
    pref = Criterion.objects.create(
        rubric=rubric, key="pref", name="Preference", scale="pairwise", position=2
    )
    StratumDimension.objects.create(study=study, key="lang", name="Language", position=0)
    c1 = Candidate.objects.create(study=study, name="m1")
    c2 = Candidate.objects.create(study=study, name="m2")
    en = Item.objects.create(study=study, external_id="q-en", strata={"lang": "en"})
    de = Item.objects.create(study=study, external_id="q-de", strata={"lang": "de"})
    o_en1 = Output.objects.create(study=study, item=en, candidate=c1, text="abc")
    o_en2 = Output.objects.create(study=study, item=en, candidate=c2, text="abcdef")
    o_de1 = Output.objects.create(study=study, item=de, candidate=c1, text="x")
    cmp = Comparison.objects.create(study=study, item=en, output_a=o_en1, output_b=o_en2)
    judge = Judge.objects.create(study=study, name="gpt", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="a" * 8)

    v_prob = Verdict.objects.create(
        judge_version=jv, criterion=correct, output=o_en1, value="pass", value_num=1.0,
        probability=0.8125,
    )
    v_noprob = Verdict.objects.create(
        judge_version=jv, criterion=tone, output=o_de1, value="rude"
    )
    v_pair = Verdict.objects.create(
        judge_version=jv, criterion=pref, comparison=cmp, value="A", value_num=1.0,
        probability=0.6, details={"orders": {"ab": "A", "ba": "tie"}},
    )
    plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=2)
    entry = QueueEntry.objects.create(
        plan=plan, output=o_en1, stratum="en", inclusion_probability=0.25, draw_kind="random"
    )
    assignment = Assignment.objects.create(entry=entry, annotator=ann_a, status="submitted")
    a_fail = Annotation.objects.create(
        annotator=ann_a, criterion=correct, output=o_en1, assignment=assignment, plan=plan,
        value="fail", value_num=0.0, severity=4, severity_note="would mislead a customer",
    )
    a_import = Annotation.objects.create(
        annotator=ann_b, criterion=correct, output=o_de1, value="pass", value_num=1.0,
        source="import",
    )
    GoldLabel.objects.create(criterion=correct, output=o_en1, value="fail", created_by=owner)
    Adjudication.objects.create(criterion=correct, output=o_en1, value="pass", adjudicated_by=owner)
    Adjudication.objects.create(criterion=correct, output=o_en1, value="fail", adjudicated_by=owner)
    stamps = {v_prob: 0, v_noprob: 1, v_pair: 2, a_fail: 3, a_import: 4}
    for row, days in stamps.items():
        type(row).objects.filter(pk=row.pk).update(created_at=T0 + timedelta(days=days))
    return {
        "study": study, "jv": jv, "ann_a": ann_a, "ann_b": ann_b, "correct": correct,
        "tone": tone, "pref": pref, "o_en1": o_en1, "o_de1": o_de1, "cmp": cmp, "c1": c1,
        "c2": c2, "en": en, "de": de,
    }


def _row(df: pd.DataFrame, subject: int, criterion: int, rater: int, judge: bool) -> pd.Series:
    hit = df[
        (df["subject"] == subject)
        & (df["criterion"] == criterion)
        & (df["rater"] == rater)
        & (df["is_judge"] == judge)
    ]
    assert len(hit) == 1
    return hit.iloc[0]


def _check_columns(f: dict[str, Any], data: frames.RatingData) -> None:
    r = data.ratings
    assert list(r.columns) == [
        "subject", "criterion", "rater", "num", "is_judge", "continuous", "value", "value_num",
        "probability", "severity", "inclusion_probability", "draw_kind", "gold", "gold_label",
        "adjudicated_label", "created_at",
    ]
    assert str(r["created_at"].dtype) == "datetime64[us, UTC]"
    for col in ("num", "value_num", "probability", "severity", "inclusion_probability"):
        assert r[col].dtype == np.float64, col
    assert r["gold"].dtype == bool
    assert len(r) == 5
    jv, correct = f["jv"].pk, f["correct"].pk
    s_en1, s_de1, s_cmp = 2 * f["o_en1"].pk, 2 * f["o_de1"].pk, 2 * f["cmp"].pk + 1

    v = _row(r, s_en1, correct, jv, True)
    assert (v["num"], v["value"], v["value_num"], v["probability"]) == (1.0, "pass", 1.0, 0.8125)
    assert math.isnan(v["severity"]) and math.isnan(v["inclusion_probability"])
    assert v["draw_kind"] is None
    # Gold and adjudication belong to the (subject, criterion): a verdict on it carries them.
    assert (v["gold"], v["gold_label"], v["adjudicated_label"]) == (True, "fail", "fail")
    assert v["created_at"] == pd.Timestamp(T0)

    v = _row(r, s_de1, f["tone"].pk, jv, True)
    assert (v["num"], v["value"]) == (1.0, "rude")  # category index of "rude"
    assert math.isnan(v["value_num"]) and math.isnan(v["probability"])
    assert (v["gold"], v["gold_label"], v["adjudicated_label"]) == (False, None, None)
    assert v["created_at"] == pd.Timestamp(T0 + timedelta(days=1))

    v = _row(r, s_cmp, f["pref"].pk, jv, True)
    assert (v["num"], v["value"], v["value_num"], v["probability"]) == (1.0, "A", 1.0, 0.6)

    a = _row(r, s_en1, correct, f["ann_a"].pk, False)
    assert (a["num"], a["value"], a["severity"]) == (0.0, "fail", 4.0)
    assert (a["inclusion_probability"], a["draw_kind"]) == (0.25, "random")
    assert math.isnan(a["probability"])
    assert (a["gold"], a["gold_label"], a["adjudicated_label"]) == (True, "fail", "fail")
    assert a["created_at"] == pd.Timestamp(T0 + timedelta(days=3))

    a = _row(r, s_de1, correct, f["ann_b"].pk, False)  # imported: no queue entry
    assert math.isnan(a["inclusion_probability"]) and a["draw_kind"] is None
    assert math.isnan(a["severity"])

    assert data.dimensions == ["lang"]
    assert data.subjects.loc[s_cmp, "candidate_b"] == f["c2"].pk
    assert list(data.orders.itertuples(index=False, name=None)) == [
        (s_cmp, f["pref"].pk, jv, 1.0, 0.0)
    ]

    ev = evidence_frame(data)
    row = ev[(ev["subject"] == s_en1) & ~ev["is_judge"]].iloc[0]
    assert (row["item"], row["candidate"], row["candidate_b"]) == (f["en"].pk, f["c1"].pk, -1)
    assert (row["stratum:lang"], row["rater_kind"]) == ("en", "human")
    assert math.isnan(row["order_ab"])
    row = ev[ev["subject"] == s_cmp].iloc[0]
    assert (row["candidate"], row["candidate_b"], row["rater_kind"]) == (
        f["c1"].pk, f["c2"].pk, "judge",
    )
    assert (row["order_ab"], row["order_ba"]) == (1.0, 0.0)
    assert list(ev.columns[: len(r.columns)]) == list(r.columns)


def _tuples_frame(qs: Any, names: Any, text: Any = ()) -> pd.DataFrame:
    return frames.rows_frame(list(qs), names)


@pytest.mark.django_db
def test_every_column_from_a_hand_built_study(
    django_assert_max_num_queries: Any,
) -> None:
    f = _build()
    # LOAD_MAX_QUERIES = 15: criteria, judge versions, candidates, verdicts (numeric and
    # categorical), annotations (the same two), gold labels, adjudications, outputs,
    # comparisons, items, stratum dimensions, pairwise orders and the members' attributes
    # (the raters' groups of the agreement report). COPY statements count too.
    assert LOAD_MAX_QUERIES == 15
    with django_assert_max_num_queries(LOAD_MAX_QUERIES):
        data = rating_data_load(study=f["study"])
    _check_columns(f, data)


@pytest.mark.django_db
@pytest.mark.postgres
def test_copy_path_equals_the_tuple_path(
    monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries: Any
) -> None:
    assert connection.vendor == "postgresql"
    f = _build()
    with django_assert_max_num_queries(LOAD_MAX_QUERIES):
        fast = rating_data_load(study=f["study"])
    monkeypatch.setattr(frames.reader, "values_frame", _tuples_frame)
    plain = rating_data_load(study=f["study"])
    _check_columns(f, plain)
    for name in ("ratings", "subjects", "items", "orders"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(plain, name), check_exact=True)
    pd.testing.assert_frame_equal(evidence_frame(fast), evidence_frame(plain), check_exact=True)


@pytest.mark.django_db
def test_time_and_strata_selection() -> None:
    f = _build()
    study = f["study"]
    everything = rating_data_load(study=study).ratings
    # since inclusive, until exclusive: days 1, 2 and 3 of the five stamps.
    window = rating_data_load(
        study=study, since=T0 + timedelta(days=1), until=T0 + timedelta(days=4)
    )
    expected = everything[
        (everything["created_at"] >= pd.Timestamp(T0 + timedelta(days=1)))
        & (everything["created_at"] < pd.Timestamp(T0 + timedelta(days=4)))
    ]
    assert len(expected) == 3
    assert sorted(window.ratings["created_at"]) == sorted(expected["created_at"])
    # The pairwise verdict (day 2) is inside the window: its orders stay; outside, they go.
    assert len(window.orders) == 1
    assert len(rating_data_load(study=study, until=T0 + timedelta(days=2)).orders) == 0

    de = rating_data_load(study=study, strata={"lang": ["de"]})
    assert set(de.ratings["subject"]) == {2 * f["o_de1"].pk}
    assert len(de.ratings) == 2
    assert set(de.subjects["item"]) == {f["de"].pk}
    assert len(de.orders) == 0
    en = rating_data_load(study=study, strata={"lang": ["en"]})
    assert set(en.ratings["subject"]) == {2 * f["o_en1"].pk, 2 * f["cmp"].pk + 1}
    assert len(en.orders) == 1
    both = rating_data_load(study=study, strata={"lang": ["en", "de"]})
    pd.testing.assert_frame_equal(both.ratings, everything)
    # A dimension the study does not have: every item's label there is "unknown".
    assert rating_data_load(study=study, strata={"source": ["web"]}).ratings.empty
    assert len(rating_data_load(study=study, strata={"source": ["unknown"]}).ratings) == 5


# columns="agreement": the six columns the agreement report reads, from statements that read
# nothing more (the evidence columns doubled the report's load on a million-rating study).


def _rating_statements(queries: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The captured statements reading verdicts / annotations, by table, plus every statement
    that touches a gold label or adjudication table."""
    out: dict[str, list[str]] = {"verdict": [], "annotation": [], "labels": []}
    label_tables = (GoldLabel._meta.db_table, Adjudication._meta.db_table)
    for q in queries:
        sql = q["sql"]
        for key, model in (("verdict", Verdict), ("annotation", Annotation)):
            if f'FROM "{model._meta.db_table}"' in sql and '"details"' not in sql:
                out[key].append(sql)
        if any(f'"{t}"' in sql for t in label_tables):
            out["labels"].append(sql)
    return out


def _select_list(sql: str, model: Any) -> str:
    # The statement's own FROM, not EXTRACT(EPOCH FROM "table"."created_at").
    return re.split(rf'FROM "{model._meta.db_table}"(?!\.)', sql)[0]


@pytest.mark.django_db
@pytest.mark.parametrize("window", [False, True])
def test_agreement_columns_read_nothing_more(window: bool) -> None:
    f = _build()
    kwargs: dict[str, Any] = {"study": f["study"]}
    if window:
        kwargs.update(since=T0 + timedelta(days=1), until=T0 + timedelta(days=4))
    with CaptureQueriesContext(connection) as evidence_q:
        evidence = rating_data_load(**kwargs)
    with CaptureQueriesContext(connection) as lean_q:
        lean = rating_data_load(columns="agreement", **kwargs)
    # LOAD_MAX_QUERIES_AGREEMENT = 13: criteria, judge versions, candidates, verdicts (numeric
    # and categorical), annotations (the same two), outputs, comparisons, items, stratum
    # dimensions, pairwise orders and the members' attributes (rater groups); no gold label or
    # adjudication query. This study has a criterion of each group, so every statement runs.
    assert LOAD_MAX_QUERIES_AGREEMENT == 13
    assert len(lean_q.captured_queries) == LOAD_MAX_QUERIES_AGREEMENT
    assert len(evidence_q.captured_queries) == LOAD_MAX_QUERIES

    assert tuple(lean.ratings.columns) == AGREEMENT_COLUMNS
    pd.testing.assert_frame_equal(
        lean.ratings, evidence.ratings[list(AGREEMENT_COLUMNS)], check_exact=True
    )
    for name in ("subjects", "items", "orders"):
        pd.testing.assert_frame_equal(getattr(lean, name), getattr(evidence, name))
    assert len(lean.ratings) == (3 if window else 5)

    lean_sql = _rating_statements(lean_q.captured_queries)
    evidence_sql = _rating_statements(evidence_q.captured_queries)
    assert lean_sql["labels"] == [] and len(evidence_sql["labels"]) == 2
    entry_table = f'"{QueueEntry._meta.db_table}"'
    assignment_table = f'"{Assignment._meta.db_table}"'
    for key, model in (("verdict", Verdict), ("annotation", Annotation)):
        assert len(lean_sql[key]) == 2, key  # numeric and categorical criteria
        for sql in lean_sql[key]:
            head = _select_list(sql, model)
            # One value column per statement, never created_at (the window goes in WHERE).
            assert '"created_at"' not in head, sql
            assert head.count('."value_num"') + head.count('."value"') == 1, sql
            assert '"probability"' not in head and '"severity"' not in head, sql
            assert "JOIN" not in sql and entry_table not in sql and assignment_table not in sql
            assert ('"created_at"' in sql) == window, sql
        # The evidence statements do select what the lean ones leave out (the checks above
        # can fail).
        for sql in evidence_sql[key]:
            assert '"created_at"' in _select_list(sql, model), sql
    assert all("JOIN" in sql for sql in evidence_sql["annotation"])


@pytest.mark.django_db
def test_agreement_columns_time_and_strata_selection() -> None:
    f = _build()
    study = f["study"]
    cols = list(AGREEMENT_COLUMNS)
    for kwargs in (
        {"since": T0 + timedelta(days=1)},
        {"until": T0 + timedelta(days=2)},
        {"since": T0 + timedelta(days=3), "until": T0 + timedelta(days=5)},
        {"strata": {"lang": ["de"]}},
        {"strata": {"lang": ["en"]}, "since": T0 + timedelta(days=2)},
        {"strata": {"source": ["web"]}},
    ):
        lean = rating_data_load(study=study, columns="agreement", **kwargs)
        evidence = rating_data_load(study=study, **kwargs)
        pd.testing.assert_frame_equal(lean.ratings, evidence.ratings[cols], check_exact=True)
        pd.testing.assert_frame_equal(lean.orders, evidence.orders)
        pd.testing.assert_frame_equal(lean.subjects, evidence.subjects)
    assert len(rating_data_load(study=study, columns="agreement", until=T0).ratings) == 0


@pytest.mark.django_db
def test_agreement_columns_without_ratings() -> None:
    f = _build()
    Verdict.objects.all().delete()
    Annotation.objects.all().delete()
    data = rating_data_load(study=f["study"], columns="agreement")
    assert tuple(data.ratings.columns) == AGREEMENT_COLUMNS
    assert data.ratings.empty
    assert data.ratings["subject"].dtype == np.int64 and data.ratings["num"].dtype == np.float64


@pytest.mark.django_db
@pytest.mark.postgres
def test_copy_path_equals_the_tuple_path_for_agreement_columns(
    monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries: Any
) -> None:
    assert connection.vendor == "postgresql"
    f = _build()
    with django_assert_max_num_queries(LOAD_MAX_QUERIES_AGREEMENT):
        fast = rating_data_load(study=f["study"], columns="agreement")
    monkeypatch.setattr(frames.reader, "values_frame", _tuples_frame)
    plain = rating_data_load(study=f["study"], columns="agreement")
    assert len(plain.ratings) == 5
    for name in ("ratings", "subjects", "items", "orders"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(plain, name), check_exact=True)


@pytest.mark.django_db
def test_unknown_column_set_is_refused() -> None:
    f = _build()
    with pytest.raises(ValueError, match="columns"):
        rating_data_load(study=f["study"], columns="everything")  # type: ignore[arg-type]


@pytest.mark.django_db
def test_agreement_report_loads_the_agreement_columns() -> None:
    from reports.agreement.load import agreement_load

    f = _build()
    data = agreement_load(f["study"], {})
    assert tuple(data.ratings.columns) == AGREEMENT_COLUMNS
    assert len(data.ratings) == 5
