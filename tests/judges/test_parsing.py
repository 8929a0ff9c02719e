"""Strict verdict parsing for every scale, logprob probabilities, unparseable answers."""

from __future__ import annotations

import math

import pytest

from judges.parsing import ParsedVerdict, Unparseable, verdict_parse
from judges.providers import TokenLogprob

PARSER = {"name": "json_verdict", "version": 1, "fallback": "final_line"}
STRICT = {"name": "json_verdict", "version": 1, "fallback": "none"}
BINARY = ["pass", "fail"]
ORDINAL = ["1", "2", "3", "4", "5"]
PAIRWISE = ["A", "B", "tie"]
CATEGORICAL = ["on_topic", "off_topic", "refusal"]


def parse(text: str, scale: str = "binary", allowed: list[str] | None = None,
          parser: dict[str, object] | None = None, **kw: object) -> ParsedVerdict:
    allowed = allowed or {"binary": BINARY, "ordinal": ORDINAL, "pairwise": PAIRWISE,
                          "categorical": CATEGORICAL}[scale]
    return verdict_parse(text=text, criterion_scale=scale, allowed_values=allowed,
                         parser=parser or PARSER, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "scale", "value", "num"), [
    ('{"verdict": "pass", "rationale": "ok"}', "binary", "pass", 1.0),
    ('{"verdict": "FAIL", "rationale": "no"}', "binary", "fail", 0.0),
    ('  {"verdict": "Pass"}  ', "binary", "pass", 1.0),
    ('```json\n{"verdict": "fail", "rationale": "x"}\n```', "binary", "fail", 0.0),
    ('{"verdict": 4, "rationale": "good"}', "ordinal", "4", 4.0),
    ('{"verdict": "2"}', "ordinal", "2", 2.0),
    ('{"verdict": 3.0}', "ordinal", "3", 3.0),
    ('{"verdict": "B", "rationale": "b wins"}', "pairwise", "B", 0.0),
    ('{"verdict": "TIE"}', "pairwise", "tie", 0.5),
    ('{"verdict": "a"}', "pairwise", "A", 1.0),
    ('{"verdict": "off_topic"}', "categorical", "off_topic", None),
    ('{"verdict": "Refusal"}', "categorical", "refusal", None),
])
def test_json_verdicts(text: str, scale: str, value: str, num: float | None) -> None:
    parsed = parse(text, scale)
    assert (parsed.value, parsed.value_num) == (value, num)
    assert parsed.details["parsed_from"] == "json"
    assert parsed.probability is None


def test_rationale_kept() -> None:
    parsed = parse('{"verdict": "pass", "rationale": "Correct and complete."}')
    assert parsed.rationale == "Correct and complete."


@pytest.mark.parametrize(("text", "scale", "value"), [
    ("The answer is right.\nVERDICT: pass", "binary", "pass"),
    ("Reasoning...\n\nverdict: FAIL\n\n", "binary", "fail"),
    ('Fine overall.\nVERDICT: "4"', "ordinal", "4"),
    ("B is clearer.\nVERDICT: B", "pairwise", "B"),
    ("Off topic.\nVerdict: **off_topic**", "categorical", "off_topic"),
])
def test_final_line_fallback(text: str, scale: str, value: str) -> None:
    parsed = parse(text, scale)
    assert parsed.value == value and parsed.details["parsed_from"] == "final_line"
    assert parsed.rationale == text.strip().splitlines()[0]


@pytest.mark.parametrize(("text", "scale", "reason"), [
    ("", "binary", "empty answer"),
    ("   \n", "binary", "empty answer"),
    ("The response passes.", "binary", "neither a JSON verdict"),
    ("VERDICT: pass\nThanks!", "binary", "neither a JSON verdict"),  # not the final line
    ('{"verdict": "maybe"}', "binary", "not one of the allowed values"),
    ('{"verdict": true}', "binary", "not a string"),
    ('{"verdict": "pass"', "binary", "does not parse"),
    ('{"score": "pass"}', "binary", "no 'verdict'"),
    ('["pass"]', "binary", "neither a JSON verdict"),
    ('{"verdict": 3.5}', "ordinal", "not an integer point"),
    ('{"verdict": "3/5"}', "ordinal", "not an integer point"),
    ('{"verdict": "three"}', "ordinal", "not an integer point"),
    ('{"verdict": 6}', "ordinal", "outside the scale"),
    ('{"verdict": 0}', "ordinal", "outside the scale"),
    ('{"verdict": true}', "ordinal", "not an integer point"),
    ('{"verdict": "C"}', "pairwise", "not one of the allowed values"),
    ("Both are fine.\nVERDICT: A or B", "pairwise", "not one of the allowed values"),
    ('{"verdict": "on topic"}', "categorical", "not one of the allowed values"),
    ('{"verdict": "pass", "rationale": 5}', "binary", "'rationale' is not a string"),
])
def test_unparseable(text: str, scale: str, reason: str) -> None:
    with pytest.raises(Unparseable) as info:
        parse(text, scale)
    assert reason in info.value.reason


def test_fallback_disabled() -> None:
    with pytest.raises(Unparseable):
        parse("Right.\nVERDICT: pass", parser=STRICT)
    assert parse('{"verdict": "pass"}', parser=STRICT).value == "pass"


def test_unknown_parser_refused() -> None:
    with pytest.raises(Unparseable, match="unknown parser"):
        parse('{"verdict": "pass"}', parser={"name": "json_verdict", "version": 2})


def test_categorical_case_fold_only_when_unambiguous() -> None:
    with pytest.raises(Unparseable):
        parse('{"verdict": "yes"}', "categorical", allowed=["Yes", "YES"])
    assert parse('{"verdict": "YES"}', "categorical", allowed=["Yes", "YES"]).value == "YES"


# --- logprobs ----------------------------------------------------------------------------


def json_tokens(verdict: str, alts: list[tuple[str, float]]) -> tuple[TokenLogprob, ...]:
    pieces = ['{"', "verdict", '":', ' "', verdict, '",', ' "', "rationale", '":', ' "ok', '"}']
    lp = dict(alts).get(verdict, -0.1)
    return tuple(TokenLogprob(p, lp if p == verdict and i == 4 else -0.01,
                              tuple(alts) if i == 4 else ())
                 for i, p in enumerate(pieces))


def test_binary_probability_normalised_over_allowed_values() -> None:
    alts = [("pass", math.log(0.6)), ("fail", math.log(0.2)), ("maybe", math.log(0.2))]
    parsed = parse('{"verdict": "pass", "rationale": "ok"}', logprobs=json_tokens("pass", alts))
    assert parsed.probability == pytest.approx(0.75)  # 0.6 / (0.6 + 0.2)
    assert parsed.details["distribution"] == pytest.approx({"pass": 0.75, "fail": 0.25})


def test_binary_probability_merges_token_variants() -> None:
    # " Pass" and "pass" are different tokens for the same verdict (their mass adds up);
    # "pa" is an unambiguous prefix of pass; a repeated entry counts once.
    alts = [("pass", math.log(0.5)), (" Pass", math.log(0.1)), ("pa", math.log(0.1)),
            ("fail", math.log(0.3)), ("pass", math.log(0.5))]
    parsed = parse('{"verdict": "pass", "rationale": "ok"}', logprobs=json_tokens("pass", alts))
    assert parsed.probability == pytest.approx(0.7 / 1.0)


def test_ordinal_expected_score_and_threshold_probability() -> None:
    alts = [("4", math.log(0.5)), ("3", math.log(0.3)), ("5", math.log(0.2))]
    parsed = parse('{"verdict": "4", "rationale": "ok"}', "ordinal",
                   logprobs=json_tokens("4", alts), pass_threshold=4)
    assert parsed.probability == pytest.approx(0.7)
    assert parsed.details["expected"] == pytest.approx(4 * 0.5 + 3 * 0.3 + 5 * 0.2)
    without = parse('{"verdict": "4", "rationale": "ok"}', "ordinal",
                    logprobs=json_tokens("4", alts))
    assert without.probability is None and "expected" in without.details


def test_ordinal_does_not_read_1_as_10() -> None:
    allowed = [str(i) for i in range(1, 11)]
    alts = [("10", math.log(0.6)), ("1", math.log(0.4))]
    parsed = parse('{"verdict": "10", "rationale": "ok"}', "ordinal", allowed=allowed,
                   logprobs=json_tokens("10", alts), pass_threshold=5)
    assert parsed.details["distribution"]["10"] == pytest.approx(0.6)
    assert parsed.probability == pytest.approx(0.6)


def test_pairwise_probability_is_p_a_as_presented() -> None:
    alts = [("B", math.log(0.7)), ("A", math.log(0.2)), ("tie", math.log(0.1))]
    parsed = parse('{"verdict": "B", "rationale": "ok"}', "pairwise",
                   logprobs=json_tokens("B", alts))
    assert parsed.value == "B" and parsed.probability == pytest.approx(0.2)


def test_final_line_logprobs() -> None:
    tokens = (TokenLogprob("Fine", -0.1), TokenLogprob(".\n", -0.1), TokenLogprob("VER", -0.1),
              TokenLogprob("DICT", -0.1), TokenLogprob(":", -0.1),
              TokenLogprob(" fail", math.log(0.9), ((" fail", math.log(0.9)),
                                                    (" pass", math.log(0.1)))))
    parsed = parse("Fine.\nVERDICT: fail", logprobs=tokens)
    assert parsed.value == "fail" and parsed.probability == pytest.approx(0.1)


def test_logprobs_without_verdict_token_give_no_probability() -> None:
    tokens = (TokenLogprob('{"verdict": "pass"}', -0.1),)
    assert parse('{"verdict": "pass"}', logprobs=tokens).probability is None
    # The token at the verdict position and its alternatives name no allowed value.
    other = json_tokens("yes", [("yes", -0.1), ("no", -2.0)])
    parsed = parse('{"verdict": "pass", "rationale": "ok"}', logprobs=other)
    assert parsed.probability is None and "logprobs" in parsed.details


def test_categorical_gets_no_probability() -> None:
    tokens = json_tokens("refusal", [("refusal", -0.1)])
    assert parse('{"verdict": "refusal", "rationale": "ok"}', "categorical",
                 logprobs=tokens).probability is None


# --- interval criteria (issue 15, section 5) -------------------------------------------------


@pytest.mark.parametrize(("text", "value", "num"), [
    ('{"verdict": 3.5, "rationale": "mostly"}', "3.5", 3.5),
    ('{"verdict": "4", "rationale": "good"}', "4", 4.0),
    ('{"verdict": 1, "rationale": "bad"}', "1", 1.0),
    ('{"verdict": 5.0, "rationale": "top"}', "5", 5.0),
    ("It reads well.\nVERDICT: 2.25", "2.25", 2.25),
])
def test_interval_verdict_is_a_number_in_the_range(text: str, value: str, num: float) -> None:
    got = verdict_parse(text=text, criterion_scale="interval", allowed_values=[], parser=PARSER,
                        bounds=(1.0, 5.0))
    assert (got.value, got.value_num, got.probability) == (value, num, None)


@pytest.mark.parametrize(("text", "reason"), [
    ('{"verdict": 5.5, "rationale": ""}', "outside the range 1..5"),
    ('{"verdict": 0, "rationale": ""}', "outside the range 1..5"),
    ('{"verdict": "3/5", "rationale": ""}', "not a number in 1..5"),
    ('{"verdict": "high", "rationale": ""}', "not a number in 1..5"),
    ('{"verdict": true, "rationale": ""}', "not a number in 1..5"),
    ('{"verdict": NaN, "rationale": ""}', "not a finite number"),
])
def test_interval_verdict_outside_the_range_is_unparseable(text: str, reason: str) -> None:
    with pytest.raises(Unparseable) as info:
        verdict_parse(text=text, criterion_scale="interval", allowed_values=[], parser=PARSER,
                      bounds=(1.0, 5.0))
    assert reason in info.value.reason
