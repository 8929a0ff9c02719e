"""Programmatic checks: deterministic pass/fail verdicts with the LLM verdict shape."""

from __future__ import annotations

from typing import Any

import pytest

from judges.config import config_validate
from judges.parsing import ParsedVerdict, Unparseable
from judges.programmatic import normalise_answer, programmatic_evaluate
from reviewhub.api.errors import ValidationFailed
from tests.factories import CriterionFactory
from tests.judges.judge_fixtures import make_output

pytestmark = pytest.mark.django_db


def run(check: dict[str, Any], **output_fields: Any) -> ParsedVerdict:
    config = config_validate(check, kind="programmatic", allowed_base_urls=[])
    output = make_output(**output_fields)
    criterion = CriterionFactory(rubric__study=output.study)
    return programmatic_evaluate(config=config, output=output, criterion=criterion)


def test_json_schema_check() -> None:
    schema = {"type": "object", "required": ["answer"],
              "properties": {"answer": {"type": "integer"}}}
    ok = run({"check": "json_schema", "schema": schema}, text='{"answer": 4}')
    assert (ok.value, ok.value_num, ok.probability) == ("pass", 1.0, None)
    bad = run({"check": "json_schema", "schema": schema}, text='{"answer": "four"}')
    assert bad.value == "fail" and "answer" in bad.rationale
    broken = run({"check": "json_schema", "schema": schema}, text="{answer: 4")
    assert broken.value == "fail" and "not valid JSON" in broken.rationale


def test_json_schema_uses_study_schema_and_parsed_json() -> None:
    output = make_output(text="ignored", parsed_json={"a": 1})
    output.study.output_schema = {"type": "object", "required": ["b"]}
    output.study.save()
    config = config_validate({"check": "json_schema"}, kind="programmatic", allowed_base_urls=[])
    criterion = CriterionFactory(rubric__study=output.study)
    verdict = programmatic_evaluate(config=config, output=output, criterion=criterion)
    assert verdict.value == "fail" and "'b' is a required property" in verdict.rationale


def test_json_schema_without_any_schema_is_unscored() -> None:
    with pytest.raises(Unparseable):
        run({"check": "json_schema"}, text="{}")


def test_regex_check() -> None:
    check = {"check": "regex", "must_match": [r"\bParis\b"], "must_not_match": ["(?i)as an ai"],
             "ignore_case": False}
    assert run(check, text="The capital is Paris.").value == "pass"
    missing = run(check, text="The capital is Lyon.")
    assert missing.value == "fail" and "missing" in missing.rationale
    forbidden = run(check, text="As an AI, I think Paris.")
    assert forbidden.value == "fail" and "forbidden" in forbidden.rationale
    assert run({"check": "regex", "must_match": "paris", "ignore_case": True},
               text="PARIS").value == "pass"


def test_match_check() -> None:
    assert run({"check": "match", "mode": "exact"}, text="4", item__reference="4").value == "pass"
    assert run({"check": "match", "mode": "exact"}, text="4.", item__reference="4").value == "fail"
    assert run({"check": "match"}, text="The  Eiffel tower!",
               item__reference="eiffel Tower").value == "pass"
    with pytest.raises(Unparseable, match="no reference"):
        run({"check": "match"}, text="x", item__reference="")


def test_normalise_answer() -> None:
    # NFKC folds the full-width digits.
    assert normalise_answer("  The ANSWER, is: \uff14\uff12! ") == "answer is 42"


def test_length_check() -> None:
    assert run({"check": "length", "max": 5}, text="12345").value == "pass"
    long = run({"check": "length", "max": 5}, text="123456")
    assert long.value == "fail" and "6 chars" in long.rationale
    assert run({"check": "length", "unit": "words", "min": 3}, text="two words").value == "fail"
    assert run({"check": "length", "unit": "words", "min": 2, "max": 2},
               text="two words").value == "pass"


def test_errored_check_and_errors_fail_every_check() -> None:
    assert run({"check": "errored"}, text="fine").value == "pass"
    failed = run({"check": "errored"}, text="", error="HTTP 500 from candidate")
    assert failed.value == "fail" and "HTTP 500" in failed.rationale
    assert run({"check": "length", "max": 100}, text="", error="timeout").value == "fail"


def test_non_binary_criterion_refused() -> None:
    config = config_validate({"check": "errored"}, kind="programmatic", allowed_base_urls=[])
    output = make_output()
    criterion = CriterionFactory(rubric__study=output.study, scale="ordinal",
                                 points=[{"value": 1}, {"value": 2}])
    with pytest.raises(ValueError, match="pass/fail"):
        programmatic_evaluate(config=config, output=output, criterion=criterion)


@pytest.mark.parametrize(("config", "field"), [
    ({"check": "nope"}, "check"),
    ({"check": "regex"}, "must_match"),
    ({"check": "regex", "must_match": "(unclosed"}, "must_match"),
    ({"check": "length"}, "min"),
    ({"check": "length", "min": 5, "max": 2}, "min"),
    ({"check": "match", "mode": "fuzzy"}, "mode"),
    ({"check": "json_schema", "schema": {"type": "nonsense"}}, "schema"),
    ({"check": "errored", "extra": 1}, "extra"),
])
def test_programmatic_config_validation(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        config_validate(config, kind="programmatic", allowed_base_urls=[])
    assert info.value.details["errors"][0]["path"] == field
