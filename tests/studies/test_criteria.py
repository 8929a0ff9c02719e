"""Criterion value semantics shared with judges, annotations and reports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studies.selectors import (
    criterion_allowed_values,
    criterion_has_pass_reading,
    criterion_is_pass,
    criterion_value_labels,
    criterion_value_num,
)


def crit(scale: str, points=None, pass_threshold=None, pass_labels=None) -> SimpleNamespace:
    return SimpleNamespace(scale=scale, points=points or [], pass_threshold=pass_threshold,
                           pass_labels=pass_labels or [])


ORD = crit("ordinal", [{"value": 3, "label": "c"}, {"value": 1, "label": "a"},
                       {"value": 2, "label": "b"}], pass_threshold=2)
CAT = crit("categorical", [{"value": "friendly", "label": "F"}, {"value": "curt", "label": "C"}],
           pass_labels=["friendly"])


def test_binary():
    c = crit("binary")
    assert criterion_allowed_values(c) == ["pass", "fail"]
    assert criterion_value_num(c, "pass") == 1.0
    assert criterion_value_num(c, "fail") == 0.0
    assert criterion_is_pass(c, "pass") is True
    assert criterion_is_pass(c, "fail") is False


def test_ordinal_sorted_and_threshold():
    assert criterion_allowed_values(ORD) == ["1", "2", "3"]
    assert criterion_value_num(ORD, "3") == 3.0
    assert [criterion_is_pass(ORD, v) for v in ("1", "2", "3")] == [False, True, True]
    assert criterion_value_labels(ORD) == {"1": "a", "2": "b", "3": "c"}
    no_threshold = crit("ordinal", ORD.points)
    assert criterion_is_pass(no_threshold, "3") is None
    assert not criterion_has_pass_reading(no_threshold)


def test_pairwise_has_numbers_but_no_pass():
    c = crit("pairwise")
    assert criterion_allowed_values(c) == ["A", "B", "tie"]
    assert [criterion_value_num(c, v) for v in ("A", "B", "tie")] == [1.0, 0.0, 0.5]
    assert criterion_is_pass(c, "A") is None
    assert not criterion_has_pass_reading(c)


def test_categorical():
    assert criterion_allowed_values(CAT) == ["friendly", "curt"]
    assert criterion_value_num(CAT, "curt") is None
    assert criterion_is_pass(CAT, "friendly") is True
    assert criterion_is_pass(CAT, "curt") is False
    assert criterion_is_pass(crit("categorical", CAT.points), "curt") is None


def test_unscored_and_invalid_values():
    for c in (crit("binary"), ORD, CAT, crit("pairwise")):
        assert criterion_value_num(c, "") is None
        assert criterion_is_pass(c, "") is None
    with pytest.raises(ValueError, match="not a value"):
        criterion_value_num(ORD, "4")
    with pytest.raises(ValueError, match="not a value"):
        criterion_is_pass(crit("binary"), "PASS")
    with pytest.raises(ValueError, match="not a value"):
        criterion_value_num(crit("pairwise"), "a")


@pytest.mark.django_db
def test_helpers_accept_model_instances():
    from studies.models import Criterion

    c = Criterion(scale="ordinal", points=ORD.points, pass_threshold=3)
    assert criterion_is_pass(c, "2") is False
    assert criterion_is_pass(c, "3") is True
