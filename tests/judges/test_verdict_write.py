"""The verdict writers (judges/verdict_write.py): the COPY-and-merge writer that PostgreSQL uses
for pushed and imported verdicts answers exactly what the ORM writer (SQLite's) answers —
stored fields and created/updated/unchanged counts — over a sequence of pushes that exercises
samples, pairs stored either way round, rationales, re-pushes and changes; and the fast
path's own risks: duplicates within a batch, a bad row in the middle, a stored verdict
holding samples a request does not send again."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from judges import verdict_write
from judges.models import JudgeVersion, Verdict
from judges.push import verdicts_push_bulk
from judges.services import (
    VerdictImport,
    judge_imported_version_get_or_create,
    verdicts_import_bulk,
)
from judges.verdict_write import verdict_rows_upsert
from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Study
from tests.factories import (
    CandidateFactory,
    CriterionFactory,
    ItemFactory,
    OutputFactory,
    RubricVersionFactory,
)

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql",
                                   reason="the COPY writer is PostgreSQL's")


def _judge(name: str) -> dict[str, Any]:
    return {"name": name, "config_hash": "h1", "external": True}


@pytest.fixture
def data(study: Study) -> dict[str, Any]:
    rubric = RubricVersionFactory(study=study)
    CriterionFactory(rubric=rubric, key="correct", scale="binary", position=0)
    CriterionFactory(rubric=rubric, key="pref", scale="pairwise", position=1)
    CriterionFactory(rubric=rubric, key="score", scale="ordinal", position=2,
                     points=[{"value": i, "label": f"level {i}"} for i in range(1, 6)],
                     pass_threshold=4)
    x = CandidateFactory(study=study, name="x")
    y = CandidateFactory(study=study, name="y")
    out = {}
    for i in range(6):
        item = ItemFactory(study=study, external_id=f"q{i}")
        out[(f"q{i}", "x")] = OutputFactory(study=study, item=item, candidate=x)
        out[(f"q{i}", "y")] = OutputFactory(study=study, item=item, candidate=y)
    # One pair stored the other way round before any push (y first).
    Comparison.objects.create(study=study, item=out[("q5", "y")].item,
                              output_a=out[("q5", "y")], output_b=out[("q5", "x")])
    return out


def _b(item: str, value: str, **kw: Any) -> dict[str, Any]:
    return {"criterion": "correct", "item": item, "candidate": "x", "value": value, **kw}


def _p(item: str, value: str, **kw: Any) -> dict[str, Any]:
    return {"criterion": "pref", "item": item, "candidate_a": "x", "candidate_b": "y",
            "value": value, **kw}


# Pushes applied in turn; each is one request.
SEQUENCE: list[list[dict[str, Any]]] = [
    # one call per subject, with and without probability / rationale; an ordinal score
    [_b("q0", "pass", probability=0.9), _b("q1", "fail", probability=0.2, rationale="wrong"),
     _b("q2", "pass"), _b("q3", "pass", sample=3),
     {"criterion": "score", "item": "q0", "candidate": "y", "value": "4", "probability": 0.7},
     _p("q0", "A", probability=0.8), _p("q5", "A", probability=0.6),
     _p("q1", "B", order="ba"), _p("q1", "A", order="ab")],
    # the same again: all unchanged
    [_b("q0", "pass", probability=0.9), _b("q1", "fail", probability=0.2, rationale="wrong"),
     _b("q2", "pass"), _b("q3", "pass", sample=3),
     {"criterion": "score", "item": "q0", "candidate": "y", "value": "4", "probability": 0.7},
     _p("q0", "A", probability=0.8), _p("q5", "A", probability=0.6),
     _p("q1", "B", order="ba"), _p("q1", "A", order="ab")],
    # changes: a new probability, a value without rationale over one with, more samples
    [_b("q0", "pass", probability=0.95), _b("q1", "pass"),
     _b("q2", "fail", sample=1), _b("q3", "fail", sample=0), _b("q4", "pass", sample=0),
     _b("q4", "pass", sample=1), _b("q4", "fail", sample=2, probability=0.1)],
    # a sample sent again replaces; other stored samples stay (held back and combined)
    [_b("q4", "fail", sample=1), _p("q0", "B", sample=1, probability=0.3),
     _p("q5", "B", order="ba", probability=0.4), _p("q1", "A", order="ba")],
    # a subset of stored samples sent again unchanged
    [_b("q4", "pass", sample=0), _b("q2", "pass")],
    # an unparseable answer
    [_b("q5", ""), _b("q0", "", sample=2)],
]

COMPARED = ("value", "value_num", "probability", "details", "n_samples", "is_scored",
            "rationale", "source")


def _state(version: JudgeVersion) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {
        (v.criterion.key, v.output_id, v.comparison_id): tuple(getattr(v, f) for f in COMPARED)
        for v in Verdict.objects.filter(judge_version=version).select_related("criterion")
    }


@postgres_only
@pytest.mark.parametrize("fk_by_statement", [True, False])
def test_copy_writer_answers_what_the_orm_writer_answers(
    study: Study, data: Any, fk_by_statement: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both ways of checking the new verdicts' foreign keys (judges.verdict_write.
    # _fk_by_statement): the merge's own, and PostgreSQL's per-row checks at commit.
    monkeypatch.setattr(verdict_write, "_fk_by_statement", lambda: fk_by_statement)
    for step, rows in enumerate(SEQUENCE):
        got = {}
        for name, use_copy in (("fast", True), ("orm", False)):
            out = verdicts_push_bulk(study=study, judge=_judge(name), verdicts=rows,
                                     use_copy=use_copy)
            got[name] = (out.counts.created, out.counts.updated, out.counts.unchanged)
        assert got["fast"] == got["orm"], f"push {step}: counts {got}"
        fast = _state(JudgeVersion.objects.get(judge__name="fast"))
        orm = _state(JudgeVersion.objects.get(judge__name="orm"))
        assert fast == orm, f"push {step}"
    # The sequence exercised what it is meant to: combined samples and a held-back merge.
    q4 = Verdict.objects.get(judge_version__judge__name="fast", output=data[("q4", "x")])
    assert q4.n_samples == 3 and q4.value == "fail"
    assert [(s["sample"], s["value"]) for s in q4.details["samples"]] == [
        (0, "pass"), (1, "fail"), (2, "fail")]
    # The last push: one new subject, one stored verdict held back and combined.
    assert got["fast"] == (1, 1, 0)


@postgres_only
def test_file_import_writers_agree(study: Study, data: Any) -> None:
    from studies.models import Criterion

    crit = Criterion.objects.get(key="correct")
    counts = {}
    for name, use_copy in (("fast", True), ("orm", False)):
        version = judge_imported_version_get_or_create(
            study=study, name=name, label="v1", value_type="label").version
        specs = {(version.pk, crit.pk, "output", data[(f"q{i}", "x")].pk):
                 VerdictImport(criterion=crit, orders={"": "pass" if i % 2 else "fail"})
                 for i in range(6)}
        first = verdicts_import_bulk(verdicts=specs, rationale="(file)", use_copy=use_copy)
        specs[next(iter(specs))] = VerdictImport(criterion=crit, orders={"": "pass"})
        second = verdicts_import_bulk(verdicts=specs, rationale="(file)", use_copy=use_copy)
        counts[name] = (vars(first), vars(second))
    assert counts["fast"] == counts["orm"]
    assert counts["fast"][1] == {"created": 0, "updated": 1, "unchanged": 5}
    assert (_state(JudgeVersion.objects.get(judge__name="fast"))
            == _state(JudgeVersion.objects.get(judge__name="orm")))


@pytest.mark.parametrize("use_copy", [True, False])
def test_duplicate_within_a_batch_refused_and_nothing_written(
    study: Study, data: Any, use_copy: bool
) -> None:
    if use_copy and connection.vendor != "postgresql":
        pytest.skip("the COPY writer is PostgreSQL's")
    rows = [_b("q0", "pass"), _b("q1", "pass", probability=0.8), _b("q0", "fail", sample=0)]
    with pytest.raises(ValidationFailed) as exc:
        verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows, use_copy=use_copy)
    errors = exc.value.details["errors"]
    assert [e["path"] for e in errors] == ["verdicts[2].sample"]
    assert errors[0]["message"] == "sample 0 of this subject is also verdicts[0]"
    assert not Verdict.objects.exists() and not JudgeVersion.objects.exists()


@pytest.mark.parametrize("use_copy", [True, False])
def test_bad_row_in_the_middle_of_a_big_batch_leaves_nothing_written(
    study: Study, data: Any, use_copy: bool
) -> None:
    if use_copy and connection.vendor != "postgresql":
        pytest.skip("the COPY writer is PostgreSQL's")
    good = [_b(f"q{i % 5}", "pass", sample=i // 5, probability=0.5 + (i % 7) / 20)
            for i in range(400)]
    verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=good[:10], use_copy=use_copy)
    before = _state(JudgeVersion.objects.get())
    rows = [*good[:200], _b("q1", "pass", probability=0.2, sample=999), *good[200:]]
    with pytest.raises(ValidationFailed) as exc:
        verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows, use_copy=use_copy)
    errors = exc.value.details["errors"]
    assert [e["path"] for e in errors] == ["verdicts[200].probability"]
    assert errors[0]["message"] == "0.2 is P(pass) but the value 'pass' passes"
    assert _state(JudgeVersion.objects.get()) == before


@pytest.mark.parametrize("use_copy", [True, False])
def test_repush_is_idempotent_and_touches_nothing(study: Study, data: Any,
                                                  use_copy: bool) -> None:
    if use_copy and connection.vendor != "postgresql":
        pytest.skip("the COPY writer is PostgreSQL's")
    rows = [_b(f"q{i}", "pass", probability=0.75) for i in range(5)] + [
        _b("q0", "fail", sample=1, probability=0.25)]
    first = verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows, use_copy=use_copy)
    assert vars(first.counts) == {"created": 5, "updated": 0, "unchanged": 0}
    stamps = dict(Verdict.objects.values_list("id", "updated_at"))
    for _ in range(2):
        again = verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows,
                                   use_copy=use_copy)
        assert vars(again.counts) == {"created": 0, "updated": 0, "unchanged": 5}
    assert dict(Verdict.objects.values_list("id", "updated_at")) == stamps
    q0 = Verdict.objects.get(output=data[("q0", "x")])
    assert q0.n_samples == 2 and q0.probability == pytest.approx(0.5)


@postgres_only
def test_merge_holds_back_only_verdicts_with_samples_not_sent(study: Study, data: Any) -> None:
    from studies.models import Criterion

    crit = Criterion.objects.get(key="correct")
    verdicts_push_bulk(study=study, judge=_judge("j"),
                       verdicts=[_b("q0", "pass", sample=0), _b("q0", "pass", sample=1),
                                 _b("q1", "pass", sample=0, probability=0.6),
                                 _b("q2", "pass", sample=4)])
    version = JudgeVersion.objects.get()
    odd = Verdict.objects.get(output=data[("q2", "x")])
    # A stored sample record the merge cannot read as _stored_samples does (no index): held.
    odd.details = {"imported": True, "samples": [{"value": "pass"}]}
    odd.save()
    key = {i: (version.pk, crit.pk, "output", data[(f"q{i}", "x")].pk) for i in range(4)}
    fields = {"value": "fail", "value_num": 0.0, "details": {"imported": True},
              "n_samples": 1, "is_scored": True, "probability": None}
    out = verdict_rows_upsert(
        {key[0]: fields, key[1]: fields, key[2]: fields, key[3]: fields},
        use_copy=True,
        sent={key[0]: [("", 1)], key[1]: [("", 0)], key[2]: [("", 0)], key[3]: [("", 0)]},
    )
    q0 = Verdict.objects.get(output=data[("q0", "x")])
    assert sorted(out.held) == sorted([q0.pk, odd.pk])
    assert (out.created, out.updated, out.unchanged) == (1, 1, 0)
    q0.refresh_from_db()
    assert q0.value == "pass" and q0.n_samples == 2  # held back: not written
    assert Verdict.objects.get(output=data[("q1", "x")]).value == "fail"


@pytest.mark.parametrize("use_copy", [True, False])
def test_a_lone_sample_index_is_kept_so_a_repush_replaces_it(
    study: Study, data: Any, use_copy: bool
) -> None:
    if use_copy and connection.vendor != "postgresql":
        pytest.skip("the COPY writer is PostgreSQL's")
    rows = [_b("q0", "pass", sample=3), _p("q1", "A", sample=2, order="ba")]
    verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows, use_copy=use_copy)
    again = verdicts_push_bulk(study=study, judge=_judge("j"), verdicts=rows, use_copy=use_copy)
    assert vars(again.counts) == {"created": 0, "updated": 0, "unchanged": 2}
    assert set(Verdict.objects.values_list("n_samples", flat=True)) == {1}


def test_samples_combine_the_documented_way(study: Study, data: Any) -> None:
    # Share of samples where no probability is given; mean of the probabilities where each
    # sample has one; a re-sent sample replaces, the others stay (docs/import-ratings.md).
    push = verdicts_push_bulk
    push(study=study, judge=_judge("j"), verdicts=[_b("q0", "pass", sample=s) for s in (0, 1)]
         + [_b("q0", "fail", sample=2)])
    v = Verdict.objects.get()
    assert v.value == "pass" and v.n_samples == 3
    assert v.probability == pytest.approx(2 / 3)
    assert v.details["probability_source"] == "sample_share"
    push(study=study, judge=_judge("j"), verdicts=[_b("q0", "fail", sample=0)])
    v.refresh_from_db()
    assert v.value == "fail" and v.probability == pytest.approx(1 / 3)
    push(study=study, judge=_judge("j"),
         verdicts=[_b("q1", "pass", sample=0, probability=0.9),
                   _b("q1", "fail", sample=1, probability=0.4)])
    w = Verdict.objects.get(output=data[("q1", "x")])
    assert w.probability == pytest.approx((0.9 + 0.4) / 2)
    assert w.details["probability_source"] == "imported"


# --- the new verdicts' foreign keys, checked by the merge (verdict_write._fk_by_statement) ----


def _missing_output_rows(study: Study, data: Any) -> tuple[Any, dict[Any, dict[str, Any]]]:
    from studies.models import Criterion, Output

    crit = Criterion.objects.get(key="correct")
    version = judge_imported_version_get_or_create(
        study=study, name="fk", label="v1", value_type="label").version
    fields = {"value": "pass", "value_num": 1.0, "details": {"imported": True},
              "n_samples": 1, "is_scored": True, "probability": 0.9}
    gone = Output.objects.order_by("-id").values_list("id", flat=True)[0] + 1000
    keys = [(version.pk, crit.pk, "output", data[("q0", "x")].pk),
            (version.pk, crit.pk, "output", gone)]
    return version, {k: dict(fields) for k in keys}


def _setting() -> str:
    with connection.cursor() as cur:
        cur.execute("SHOW session_replication_role")
        return str(cur.fetchone()[0])


@postgres_only
def test_the_verdict_table_has_no_trigger_but_its_foreign_keys() -> None:
    # The merge switches the table's triggers off for one statement: that is only its
    # foreign keys' checks (which it does itself) as long as there is no other trigger.
    with connection.cursor() as cur:
        cur.execute("SELECT t.tgname, p.proname FROM pg_trigger t "
                    "JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgrelid = %s::regclass",
                    [Verdict._meta.db_table])
        triggers = cur.fetchall()
    assert triggers and all(fn.startswith("RI_FKey_") for _, fn in triggers), triggers


@postgres_only
def test_a_verdict_of_a_missing_subject_is_refused_by_the_merge(study: Study,
                                                                data: Any) -> None:
    from django.db import transaction

    from reviewhub.errors import Conflict

    assert verdict_write._fk_by_statement()  # the tests' database role may switch them off
    version, rows = _missing_output_rows(study, data)
    with pytest.raises(Conflict, match="deleted while this import ran"), transaction.atomic():
        verdict_rows_upsert(rows, use_copy=True)
    assert not Verdict.objects.filter(judge_version=version).exists()
    # PostgreSQL's own checks are back on for what the transaction does next.
    assert _setting() == "origin"


@postgres_only
def test_the_merge_locks_the_rows_its_new_verdicts_refer_to(study: Study, data: Any) -> None:
    # FOR KEY SHARE, as PostgreSQL's own check would at commit: the row's xmax is this
    # transaction (a lock, the row is not changed), so a concurrent delete waits for it.
    from studies.models import Output

    _, rows = _missing_output_rows(study, data)
    kept = {k: v for k, v in rows.items() if Output.objects.filter(pk=k[3]).exists()}
    out_id = next(iter(kept))[3]
    with connection.cursor() as cur:
        cur.execute("SELECT xmax::text FROM studies_output WHERE id = %s", [out_id])
        assert cur.fetchone()[0] == "0"
    assert verdict_rows_upsert(kept, use_copy=True).created == 1
    with connection.cursor() as cur:
        cur.execute("SELECT xmax::text = (txid_current() %% 4294967296)::text "
                    "FROM studies_output WHERE id = %s", [out_id])
        assert cur.fetchone()[0] is True
    assert _setting() == "origin"


@postgres_only
def test_without_the_privilege_postgres_checks_the_foreign_keys(
    study: Study, data: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import IntegrityError

    monkeypatch.setattr(verdict_write, "_fk_by_statement", lambda: False)
    _, rows = _missing_output_rows(study, data)
    verdict_rows_upsert(rows, use_copy=True)  # the check is deferred to the commit
    with pytest.raises(IntegrityError), connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
