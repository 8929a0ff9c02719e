"""Judge confidences in the ratings long format (issue 24 §1): a `probability` column with one
meaning per scale, refused with line and field when out of range or contradicting the value,
and several `sample`s of a judge kept and combined by the judge-run rules.

Every expected figure is worked out by hand from the rows in the test."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from imports.generic import ScaleSpec, ratings_import
from judges.models import Verdict
from reviewhub.errors import ValidationFailed
from studies.models import Study

pytestmark = pytest.mark.django_db


def _rows(rows: Iterable[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(i + 2, r) for i, r in enumerate(rows)]


def _pair(item: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"item_id": item, "output_a": f"{item}-x", "output_b": f"{item}-y",
            "candidate_a": "x", "candidate_b": "y", "criterion": "pref",
            "rater_id": "j", "rater_kind": "judge", "judge_version": "v1", "value": value,
            "pairwise_values": "outputs", **extra}


def _single(item: str, value: str, crit: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"item_id": item, "output_id": f"{item}-o", "candidate": "x", "criterion": crit,
            "rater_id": "j", "rater_kind": "judge", "judge_version": "v1", "value": value,
            **extra}


def _verdicts(study: Study) -> dict[str, Verdict]:
    out = {}
    for v in Verdict.objects.filter(criterion__rubric__study=study).select_related(
        "output__item", "comparison__item"
    ):
        item = (v.output or v.comparison).item  # type: ignore[union-attr]
        out[item.external_id] = v
    return out


def _problems(exc: ValidationFailed) -> list[tuple[Any, str]]:
    return [(p.get("line"), p.get("path")) for p in exc.details["errors"]]


def test_pairwise_probability_is_p_a_and_turns_with_the_pair(study: Study) -> None:
    rows = [
        _pair("i1", "A", probability="0.9"),
        _pair("i2", "B", probability="0.2"),  # prefers B with confidence 0.8
        # i3 first listed as (x, y) by a human, then by the judge the other way round: the
        # judge's A is i3-y, so in stored terms the value is B and P(i3-x better) = 0.3.
        {**_pair("i3", "A"), "rater_id": "h", "rater_kind": "human", "judge_version": ""},
        {**_pair("i3", "A", probability="0.7"), "output_a": "i3-y", "output_b": "i3-x",
         "candidate_a": "y", "candidate_b": "x"},
    ]
    ratings_import(study=study, rows=_rows(rows))
    v = _verdicts(study)
    assert v["i1"].value == "A" and v["i1"].probability == pytest.approx(0.9)
    assert v["i2"].value == "B" and v["i2"].probability == pytest.approx(0.2)
    assert v["i3"].value == "B" and v["i3"].probability == pytest.approx(0.3)
    # Re-importing the same rows changes nothing.
    summary = ratings_import(study=study, rows=_rows(rows))
    assert summary.unchanged.get("verdict") == 3 and not summary.created.get("verdict")
    assert not summary.updated.get("verdict")


def test_binary_probability_is_p_pass(study: Study) -> None:
    rows = [_single("i1", "pass", probability="0.8"), _single("i2", "fail", probability="0.1"),
            _single("i3", "pass")]
    ratings_import(study=study, rows=_rows(rows), scales={"ok": ScaleSpec("binary")})
    v = _verdicts(study)
    assert v["i1"].probability == pytest.approx(0.8)
    assert v["i2"].probability == pytest.approx(0.1)
    assert v["i3"].probability is None


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (_pair("i1", "A", probability="0.2"), "probability"),  # P(A)=0.2 with value A
        (_pair("i1", "B", probability="0.9"), "probability"),
        (_pair("i1", "A", probability="1.5"), "probability"),
        (_pair("i1", "A", probability="-0.1"), "probability"),
        (_pair("i1", "A", probability="high"), "probability"),
        (_pair("i1", "A", sample="-1"), "sample"),
        (_pair("i1", "A", sample="1.5"), "sample"),
    ],
)
def test_refused_with_line_and_field(study: Study, row: dict[str, Any], field: str) -> None:
    good = _pair("i0", "A", probability="0.6")
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows([good, row]))
    assert (3, field) in _problems(exc.value)
    assert not Verdict.objects.exists()


def test_binary_contradiction_and_human_probability_refused(study: Study) -> None:
    human = {**_single("i2", "pass"), "rater_id": "h", "rater_kind": "human",
             "judge_version": "", "probability": "0.9"}
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows([_single("i1", "fail"), human]),
                       scales={"ok": ScaleSpec("binary")})
    assert (3, "probability") in _problems(exc.value)
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows([_single("i1", "fail", probability="0.7")]),
                       scales={"ok": ScaleSpec("binary")})
    assert (2, "probability") in _problems(exc.value)


def test_ordinal_without_pass_reading_refuses_probability(study: Study) -> None:
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows([_single("i1", "4", probability="0.7")]),
                       scales={"ok": ScaleSpec("ordinal", ("1", "2", "3", "4", "5"))})
    assert (2, "probability") in _problems(exc.value)


def test_ordinal_with_threshold_probability_checked_against_the_threshold(study: Study) -> None:
    rows = [_single("i1", "4", probability="0.7"), _single("i2", "2", probability="0.3")]
    ratings_import(study=study, rows=_rows(rows),
                   scales={"ok": ScaleSpec("ordinal", ("1", "2", "3", "4", "5"))},
                   pass_thresholds={"ok": 4})
    v = _verdicts(study)
    assert v["i1"].probability == pytest.approx(0.7)
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows([_single("i3", "3", probability="0.9")]))
    assert (2, "probability") in _problems(exc.value)


def test_samples_without_probability_give_the_share(study: Study) -> None:
    # Five samples of a binary judge: pass, pass, fail, pass, fail -> majority pass, 3/5.
    vals = ["pass", "pass", "fail", "pass", "fail"]
    rows = [_single("i1", v, sample=str(k)) for k, v in enumerate(vals)]
    # A pairwise judge sampled 4 times in one order: A, A, B, tie -> A, share (1+1+0+.5)/4.
    rows2 = [_pair("p1", v, sample=str(k)) for k, v in enumerate(["A", "A", "B", "tie"])]
    ratings_import(study=study, rows=_rows(rows), scales={"ok": ScaleSpec("binary")})
    ratings_import(study=study, rows=_rows(rows2))
    v = _verdicts(study)
    assert v["i1"].value == "pass" and v["i1"].n_samples == 5
    assert v["i1"].probability == pytest.approx(0.6)
    assert v["i1"].details["probability_source"] == "sample_share"
    assert [s["value"] for s in v["i1"].details["samples"]] == vals
    assert v["p1"].value == "A" and v["p1"].probability == pytest.approx(0.625)


def test_samples_with_probabilities_average(study: Study) -> None:
    rows = [_single("i1", "pass", sample="0", probability="0.9"),
            _single("i1", "fail", sample="1", probability="0.4"),
            _single("i1", "pass", sample="2", probability="0.8")]
    ratings_import(study=study, rows=_rows(rows), scales={"ok": ScaleSpec("binary")})
    v = _verdicts(study)["i1"]
    assert v.value == "pass" and v.probability == pytest.approx(0.7)
    assert v.details["probability_source"] == "imported"


def test_duplicate_sample_refused(study: Study) -> None:
    rows = [_single("i1", "pass", sample="1"), _single("i1", "fail", sample="1")]
    with pytest.raises(ValidationFailed) as exc:
        ratings_import(study=study, rows=_rows(rows), scales={"ok": ScaleSpec("binary")})
    assert (3, "rater_id") in _problems(exc.value)


def test_categorical_label_probability_becomes_p_pass(study: Study) -> None:
    from studies.models import Criterion

    rows = [_single("i1", "good", probability="0.9"), _single("i2", "bad", probability="0.75"),
            _single("i3", "meh", probability="0.2")]
    ratings_import(study=study, rows=_rows(rows),
                   scales={"ok": ScaleSpec("categorical", ("good", "bad", "meh"))})
    Criterion.objects.filter(key="ok").update(pass_labels=["good"])
    ratings_import(study=study, rows=_rows(rows))
    v = _verdicts(study)
    assert v["i1"].probability == pytest.approx(0.9)
    assert v["i2"].probability == pytest.approx(0.25)  # P(bad)=.75 -> P(pass) <= .25
    assert v["i3"].probability == pytest.approx(0.8)
