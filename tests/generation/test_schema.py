"""Schema validity agrees with the jsonschema library on a corpus of valid and invalid outputs.

The corpus is the JSON-Schema-Test-Suite's shape of cases written out here: for each schema,
documents that must pass and documents that must fail; the verdict must equal what
`jsonschema.validate` (an independent call of the library, not our wrapper) says, and a
failure must name the violation the library reports first (`best_match`).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from jsonschema.exceptions import best_match

from generation.schema import schema_check

ANSWER = {"type": "object", "required": ["answer", "confidence"],
          "properties": {"answer": {"type": "string", "minLength": 1},
                         "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]},
                                  "uniqueItems": True}},
          "additionalProperties": False}
CHOICE = {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "string",
                                                           "pattern": "^[A-D]$"}]}
NESTED = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
          "properties": {"items": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/i"}}},
          "$defs": {"i": {"type": "object", "required": ["id"],
                          "properties": {"id": {"type": "integer"}}}}}

CORPUS: list[tuple[dict[str, Any], Any]] = [
    (ANSWER, {"answer": "yes", "confidence": 0.9}),
    (ANSWER, {"answer": "yes", "confidence": 0.9, "tags": ["a", "b"]}),
    (ANSWER, {"answer": "", "confidence": 0.9}),
    (ANSWER, {"answer": "yes"}),
    (ANSWER, {"answer": "yes", "confidence": 1.5}),
    (ANSWER, {"answer": "yes", "confidence": 0.5, "extra": 1}),
    (ANSWER, {"answer": "yes", "confidence": 0.5, "tags": ["a", "a"]}),
    (ANSWER, {"answer": "yes", "confidence": 0.5, "tags": ["c"]}),
    (ANSWER, ["yes", 0.5]),
    (ANSWER, None),
    (CHOICE, 9), (CHOICE, "B"), (CHOICE, 10), (CHOICE, "E"), (CHOICE, 9.5), (CHOICE, True),
    (NESTED, {"items": [{"id": 1}, {"id": 2}]}),
    (NESTED, {"items": []}),
    (NESTED, {"items": [{"id": "1"}]}),
    (NESTED, {"items": [{}]}),
    (NESTED, {}),
]


@pytest.mark.parametrize(("schema", "document"), CORPUS)
def test_validity_agrees_with_the_library(schema: dict[str, Any], document: Any) -> None:
    try:
        jsonschema.validate(document, schema)
        expected = True
    except jsonschema.ValidationError:
        expected = False
    verdict = schema_check(json.dumps(document), schema)
    assert verdict.valid is expected
    if not expected:
        cls = jsonschema.validators.validator_for(schema)
        first = best_match(cls(schema).iter_errors(document))
        assert first is not None and first.message in verdict.violation
    else:
        assert verdict.violation == ""


def test_both_outcomes_are_in_the_corpus() -> None:
    outcomes = set()
    for schema, document in CORPUS:
        outcomes.add(schema_check(json.dumps(document), schema).valid)
    assert outcomes == {True, False}


@pytest.mark.parametrize("text", ["", "yes", "{'answer': 'x'}", '{"answer": "x"', "NaN x"])
def test_text_that_is_not_json_is_invalid_with_the_reason(text: str) -> None:
    verdict = schema_check(text, ANSWER)
    assert not verdict.valid and verdict.violation.startswith("not JSON")


def test_a_code_fence_around_json_is_read_as_the_application_would() -> None:
    fenced = '```json\n{"answer": "yes", "confidence": 0.2}\n```'
    assert schema_check(fenced, ANSWER).valid
