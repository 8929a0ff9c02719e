"""`studies.subjects.SubjectRef`: every encoding round-trips, the vectorised codes agree with the
scalar ones, and the query builder selects exactly the rows about the given subjects."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

from judges.models import Verdict
from studies.models import Comparison, Criterion, Output, RubricVersion, Study
from studies.subjects import (
    SubjectRef,
    comparison_codes,
    output_codes,
    subject_code_expr,
    subject_codes,
    subject_field,
    subject_split,
    subjects_q,
)
from tests.factories import StudyFactory, UserFactory

REFS = [SubjectRef.output(0), SubjectRef.output(1), SubjectRef.output(2**40),
        SubjectRef.comparison(0), SubjectRef.comparison(7), SubjectRef.comparison(2**40 + 3)]


@pytest.mark.parametrize("ref", REFS, ids=str)
def test_every_encoding_round_trips(ref: SubjectRef) -> None:
    assert SubjectRef.from_code(ref.code) == ref
    assert SubjectRef.from_short(ref.short) == ref
    assert SubjectRef.from_pair(ref.pair) == ref
    fk = ref.fields()
    assert SubjectRef.of(fk.get("output_id"), fk.get("comparison_id")) == ref
    assert subject_field(ref.kind) == subject_field(ref.short[0]) == ref.field


def test_the_encodings_in_use() -> None:
    # The values the evidence frames, queue keys and importers have always used.
    assert SubjectRef.output(5).code == 10
    assert SubjectRef.comparison(5).code == 11
    assert SubjectRef.output(5).short == ("o", 5)
    assert SubjectRef.comparison(5).pair == ("comparison", 5)
    assert SubjectRef.comparison(5).field == "comparison_id"
    assert SubjectRef.output(5).fields() == {"output_id": 5}
    # Outputs and comparisons with the same id are different subjects with different codes.
    assert SubjectRef.output(3) != SubjectRef.comparison(3)
    assert len({r.code for r in REFS}) == len(REFS)


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError):
        SubjectRef.of(1, 2)
    with pytest.raises(ValueError):
        SubjectRef.of(None, None)
    with pytest.raises(ValueError):
        SubjectRef("item", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SubjectRef.output(cast(Any, "1"))
    with pytest.raises(TypeError):
        SubjectRef.output(True)
    with pytest.raises(ValueError):
        SubjectRef.from_code(-2)
    with pytest.raises(ValueError):
        SubjectRef.from_short(("x", 1))
    with pytest.raises(ValueError):
        subject_codes(["output", "item"], [1, 2])


def test_vectorised_codes_agree_with_the_scalar_ones() -> None:
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 2**40, size=500)
    kinds = rng.random(500) < 0.4
    codes = subject_codes(kinds, ids)
    assert codes.dtype == np.int64
    assert codes.tolist() == [SubjectRef("comparison" if k else "output", int(i)).code
                              for k, i in zip(kinds.tolist(), ids.tolist(), strict=True)]
    back_kinds, back_ids = subject_split(codes)
    assert back_kinds.tolist() == kinds.tolist() and back_ids.tolist() == ids.tolist()
    as_text = np.where(kinds, "comparison", "output")
    assert subject_codes(as_text, ids).tolist() == codes.tolist()
    assert subject_codes(np.where(kinds, "c", "o"), ids).tolist() == codes.tolist()
    assert output_codes(ids).tolist() == subject_codes(np.zeros(500, bool), ids).tolist()
    assert comparison_codes(ids).tolist() == subject_codes(np.ones(500, bool), ids).tolist()
    empty_kinds, empty_ids = subject_split(np.array([], dtype="int64"))
    assert empty_kinds.size == empty_ids.size == 0


@pytest.mark.django_db
def test_query_builder_and_sql_codes() -> None:
    from judges.models import Judge, JudgeVersion
    from judges.services import judge_create, judge_version_for_config

    study = cast(Study, StudyFactory(owner=UserFactory()))
    rubric = RubricVersion.objects.create(study=study, version=1)
    binary = Criterion.objects.create(rubric=rubric, key="ok", scale=Criterion.Scale.BINARY)
    pairwise = Criterion.objects.create(rubric=rubric, key="better", position=1,
                                        scale=Criterion.Scale.PAIRWISE)
    item = study.items.create(external_id="i1", input="q")
    a = study.candidates.create(name="a")
    b = study.candidates.create(name="b")
    out_a = Output.objects.create(study=study, candidate=a, item=item, text="x")
    out_b = Output.objects.create(study=study, candidate=b, item=item, text="y")
    cmp = Comparison.objects.create(study=study, item=item, output_a=out_a, output_b=out_b)
    judge = judge_create(study=study, name="j", kind=Judge.Kind.PROGRAMMATIC)
    version = judge_version_for_config(judge=judge, config={"check": "length", "max": 1000})
    rows = {
        SubjectRef.output(out_a.pk): Verdict.objects.create(
            judge_version=version, criterion=binary, output=out_a, value="pass"),
        SubjectRef.output(out_b.pk): Verdict.objects.create(
            judge_version=version, criterion=binary, output=out_b, value="fail"),
        SubjectRef.comparison(cmp.pk): Verdict.objects.create(
            judge_version=version, criterion=pairwise, comparison=cmp, value="A"),
    }
    for ref, verdict in rows.items():
        assert list(Verdict.objects.filter(ref.q()).values_list("pk", flat=True)) == [verdict.pk]
        got = Verdict.objects.filter(pk=verdict.pk).values_list("output_id", "comparison_id")
        assert SubjectRef.of(*got.get()) == ref
    picked = [SubjectRef.output(out_b.pk), SubjectRef.comparison(cmp.pk)]
    assert set(Verdict.objects.filter(subjects_q(picked)).values_list("pk", flat=True)) == {
        rows[r].pk for r in picked}
    assert not Verdict.objects.filter(subjects_q([])).exists()
    # Through a relation: the judge versions with a verdict about a subject.
    assert list(JudgeVersion.objects.filter(
        subjects_q([SubjectRef.comparison(cmp.pk)], prefix="verdicts__"))) == [version]
    assert not JudgeVersion.objects.filter(
        SubjectRef.comparison(out_a.pk + out_b.pk + cmp.pk).q(prefix="verdicts__")).exists()
    codes = dict(Verdict.objects.annotate(code=subject_code_expr()).values_list("pk", "code"))
    assert {SubjectRef.from_code(codes[v.pk]) for v in rows.values()} == set(rows)
