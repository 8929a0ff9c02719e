"""Verdict aggregation rules (pure functions, no database)."""

from __future__ import annotations

import pytest

from judges.aggregation import CallView, canonical_label, combine_pairwise, combine_single


def call(i: int, value: str, *, status: str = "done", p: float | None = None, order: str = "",
         num: float | None = None, error: str = "") -> CallView:
    return CallView(job_id=100 + i, sample_index=i, order=order, status=status, value=value,
                    value_num=num, probability=p, rationale=f"r{i}", error=error)


def test_binary_majority_and_share_probability() -> None:
    v = combine_single(scale="binary", calls=[call(0, "pass"), call(1, "fail"), call(2, "pass")])
    assert (v.is_scored, v.value, v.value_num) == (True, "pass", 1.0)
    assert v.probability == pytest.approx(2 / 3)
    assert v.details["probability_source"] == "sample_share"
    assert [s["value"] for s in v.details["samples"]] == ["pass", "fail", "pass"]
    assert v.n_samples == 3


def test_binary_probability_from_logprobs_and_tie_break() -> None:
    v = combine_single(scale="binary", calls=[call(0, "pass", p=0.6), call(1, "fail", p=0.2)])
    assert v.probability == pytest.approx(0.4)
    assert v.value == "fail" and v.details["tie_break"] == "probability"
    v2 = combine_single(scale="binary", calls=[call(1, "pass"), call(0, "fail")])
    assert v2.value == "fail" and v2.details["tie_break"] == "first_sample"


def test_unparseable_samples_do_not_vote_and_all_unparseable_is_unscored() -> None:
    v = combine_single(scale="binary", calls=[
        call(0, "", status="unparseable", error="unparseable: no verdict"), call(1, "fail")])
    assert v.is_scored and v.value == "fail" and v.details["unscored_samples"] == 1
    assert v.details["samples"][0]["error"] == "unparseable: no verdict"
    none = combine_single(scale="binary", calls=[
        call(0, "", status="unparseable", error="unparseable: x"),
        call(1, "", status="failed", error="HTTP 400")])
    assert not none.is_scored and none.value == "" and none.value_num is None
    assert none.probability is None
    assert "HTTP 400" in none.rationale and "unparseable: x" in none.rationale


def test_ordinal_lower_median_mean_and_pass_probability() -> None:
    calls = [call(0, "4", num=4), call(1, "2", num=2), call(2, "5", num=5), call(3, "3", num=3)]
    v = combine_single(scale="ordinal", calls=calls, pass_threshold=4)
    assert v.value == "3" and v.value_num == 3.0
    assert v.details["mean"] == pytest.approx(3.5)
    assert v.probability == pytest.approx(0.5)


def test_categorical_mode_and_pass_labels() -> None:
    calls = [call(0, "ok"), call(1, "refusal"), call(2, "refusal")]
    v = combine_single(scale="categorical", calls=calls, pass_labels=["ok"])
    assert v.value == "refusal" and v.value_num is None
    assert v.probability == pytest.approx(1 / 3)


def test_canonical_label_swaps_only_for_ba() -> None:
    assert canonical_label(presented="A", order="ab") == "A"
    assert canonical_label(presented="A", order="ba") == "B"
    assert canonical_label(presented="B", order="ba") == "A"
    assert canonical_label(presented="tie", order="ba") == "tie"


def test_pairwise_consistent_orders_give_that_label() -> None:
    # The judge preferred output_a in both presentations: "A" when shown first, "B" when second.
    v = combine_pairwise(calls=[call(0, "A", order="ab", p=0.8), call(0, "B", order="ba", p=0.3)])
    assert (v.value, v.value_num) == ("A", 1.0)
    assert v.details["orders"] == {"ab": "A", "ba": "A"}
    assert v.details["position_inconsistent"] is False
    # P(A) = mean(0.8, 1 - 0.3)
    assert v.probability == pytest.approx(0.75)
    assert {s["canonical"] for s in v.details["samples"]} == {"A"}


def test_pairwise_position_bias_becomes_flagged_tie() -> None:
    # "First shown wins" in both orders: canonical A then canonical B.
    v = combine_pairwise(calls=[call(0, "A", order="ab"), call(0, "A", order="ba")])
    assert v.value == "tie" and v.value_num == 0.5
    assert v.details["position_inconsistent"] is True
    assert v.details["orders"] == {"ab": "A", "ba": "B"}


def test_pairwise_missing_order_is_unscored() -> None:
    v = combine_pairwise(calls=[call(0, "A", order="ab"),
                                call(0, "", order="ba", status="unparseable", error="bad")])
    assert not v.is_scored and v.value == ""
    assert "ba" in v.rationale


def test_interval_samples_combine_to_their_mean() -> None:
    calls = [call(0, "3", num=3.0), call(1, "4.5", num=4.5), call(2, "", status="unparseable"),
             call(3, "2.5", num=2.5)]
    v = combine_single(scale="interval", calls=calls, pass_threshold=3.5)
    assert (v.is_scored, v.value) == (True, "3.3333333333333335")
    assert v.value_num == pytest.approx(10 / 3)
    assert v.details["mean"] == pytest.approx(10 / 3)
    assert v.probability == pytest.approx(1 / 3)  # one of three scored samples >= 3.5
    assert v.details["unscored_samples"] == 1
    v = combine_single(scale="interval", calls=[call(0, "2", num=2.0), call(1, "3", num=3.0)])
    assert (v.value, v.value_num, v.probability) == ("2.5", 2.5, None)
