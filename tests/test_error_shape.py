"""Every validation error has one `details` shape (docs/api.md, "Errors").

``{"errors": [{"path": str, "message": str, ...location/context}], "error_count": n}`` with
`error_count >= len(errors)`; only ingest adds top-level keys (`more_errors`,
`rows_with_errors`). One bad request per validator goes through the API (the importer through
`call_command`), and a scan of the source keeps new call sites to the one shape.
"""

from __future__ import annotations

import ast
import io
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from reviewhub.errors import (
    MAX_LISTED,
    AppError,
    Problems,
    ValidationFailed,
    error_text,
    problem_text,
)
from studies.models import Study

ROOT = Path(__file__).resolve().parent.parent

# Keys an entry may carry besides path and message: where in a file, and context of the field.
ENTRY_KEYS = {"path", "message", "line", "index", "column", "file", "in", "url", "setting",
              "allowed", "name", "unknown", "unknown_placeholders", "model", "max_cost",
              "max_calls"}
TOP_EXTRAS = {"more_errors", "rows_with_errors"}


def assert_one_shape(details: Any, *, extras: Collection[str] = ()) -> list[dict[str, Any]]:
    """`details` is the one shape; returns its entries."""
    assert isinstance(details, dict), details
    assert set(details) - {"errors", "error_count"} <= set(extras), details
    errors = details["errors"]
    assert isinstance(errors, list) and errors, details
    assert len(errors) <= MAX_LISTED
    assert isinstance(details["error_count"], int) and details["error_count"] >= len(errors)
    for e in errors:
        assert isinstance(e, dict) and isinstance(e["path"], str) and e["path"], e
        assert isinstance(e["message"], str) and e["message"], e
        assert set(e) <= ENTRY_KEYS, e
        for key in ("line", "index"):
            assert key not in e or (isinstance(e[key], int) and not isinstance(e[key], bool)), e
    return errors


def _answer(response: Any) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    error = body["error"]
    extras = TOP_EXTRAS if "rows_with_errors" in error["details"] else ()
    entries = assert_one_shape(error["details"], extras=extras)
    return error["message"], entries, error["details"]


def _paths(entries: list[dict[str, Any]]) -> list[str]:
    return [e["path"] for e in entries]


# --- the collector ----------------------------------------------------------------------------


def test_problems_count_everything_and_list_the_first_fifty() -> None:
    problems = Problems(keep=60)
    for i in range(70):
        problems.add(f"rows[{i}]", "bad", line=i + 1, index=None)
    error = problems.error("The file", more_errors=20)
    entries = assert_one_shape(error.details, extras={"more_errors"})
    assert len(entries) == MAX_LISTED and error.details["error_count"] == 70
    assert "index" not in entries[0]  # None locations are left out
    assert error.message == "The file did not validate: line 1: rows[0]: bad (and 69 more problems)"
    assert len(problems.items) == 60 and len(problems) == 70


def test_one_problem_and_a_literal_list_are_the_one_shape() -> None:
    one = ValidationFailed.at("base_url", "base_url is refused.", url="http://x", setting="S",
                              code="base_url_not_allowed")
    assert one.code == "base_url_not_allowed" and one.message == "base_url is refused."
    assert one.details == {"errors": [{"path": "base_url", "message": "base_url is refused.",
                                       "url": "http://x", "setting": "S"}], "error_count": 1}
    literal = ValidationFailed("x", details={"errors": [{"path": "slug", "message": "taken"}]})
    assert literal.details["error_count"] == 1


def test_serializer_errors_become_dotted_and_indexed_paths() -> None:
    problems = Problems.from_field_errors({
        "name": ["This field is required."],
        "config": {"parameters": {"seed": ["A valid integer is required."]}},
        "criteria": [{}, {"key": ["Too long.", "Not a slug."]}],
        "tags": {0: ["Not a string."]},
        "non_field_errors": ["Give one of a or b."],
    })
    assert [(e["path"], e["message"]) for e in problems.items] == [
        ("name", "This field is required."),
        ("config.parameters.seed", "A valid integer is required."),
        ("criteria[1].key", "Too long."),
        ("criteria[1].key", "Not a slug."),
        ("tags[0]", "Not a string."),
        ("$", "Give one of a or b."),
    ]
    assert Problems.from_field_errors(["Bad."]).items == [{"path": "$", "message": "Bad."}]


def test_problem_text_and_error_text() -> None:
    assert problem_text({"path": "value", "message": "bad", "line": 3}) == "line 3: value: bad"
    assert problem_text({"path": "item_id", "message": "m", "line": 2, "file": "texts"}) == (
        "texts line 2: item_id: m")
    assert problem_text({"path": "text", "message": "m", "line": 7, "index": 3}) == (
        "line 7 (element [3]): text: m")
    assert problem_text({"path": "params.seed", "message": "m"}) == "params.seed: m"
    problems = Problems()
    for i in range(MAX_LISTED + 2):
        problems.add(f"p{i}", "m")
    text = error_text(problems.error("X"))
    assert text.splitlines()[1] == "  p0: m" and text.endswith("  ... and 2 more")
    assert error_text(AppError("plain")) == "plain"


# --- one bad request per validator ------------------------------------------------------------


@pytest.mark.django_db
def test_spec_rubric(lead_client: APIClient, study: Study) -> None:
    message, entries, details = _answer(lead_client.put(
        "/api/studies/alpha/rubric",
        {"criteria": [{"key": "ok", "scale": "binary"},
                      {"key": "q", "scale": "ordinal", "points": [{"value": 1}, {"value": 2}],
                       "pass_threshold": 9, "colour": 1}]},
        format="json"))
    assert "criteria[1].colour" in _paths(entries)
    assert "criteria[1].pass_threshold" in _paths(entries)
    assert details["error_count"] == len(entries) >= 2
    assert message.startswith(f"The rubric did not validate: {entries[0]['path']}: ")


@pytest.mark.django_db
def test_report_params(lead_client: APIClient, study: Study) -> None:
    message, entries, _ = _answer(lead_client.post(
        "/api/studies/alpha/reports/agreement/", {"params": {"seed": -1, "colour": 1}},
        format="json"))
    assert _paths(entries) == ["params.colour", "params.seed"]
    assert message == ("The report parameters did not validate: params.colour: unknown "
                       "parameter (and 1 more problem)")


@pytest.mark.django_db
def test_ingest_file(lead_client: APIClient, study: Study) -> None:
    body = b'{"external_id": "a", "input": "x"}\n{"input": "y"}\nnot json\n'
    message, entries, details = _answer(lead_client.generic(
        "POST", "/api/studies/alpha/items/bulk", body,  # type: ignore[arg-type]
        content_type="application/x-ndjson"))
    assert [(e["line"], e["path"]) for e in entries] == [(2, "external_id"), (3, "(row)")]
    assert entries[0]["message"] == "required field is missing"
    assert (details["error_count"], details["more_errors"], details["rows_with_errors"]) == (
        2, 0, 2)
    assert message.startswith("2 of 3 rows are invalid") and "First: line 2: external_id" in (
        message)


@pytest.mark.django_db
def test_rating_importer(study: Study, tmp_path: Path) -> None:
    ratings = tmp_path / "r.csv"
    ratings.write_text("item_id,output_id,candidate,rater_id,rater_kind,criterion,value\n"
                       "q1,o1,m1,ann,robot,correct,pass\n"
                       "q1,o1,m1,ann,human,correct,pass\n")
    texts = tmp_path / "t.jsonl"
    texts.write_text(json.dumps({"input": "Why?"}) + "\n")
    with pytest.raises(CommandError) as info:
        call_command("import_ratings", str(ratings), "--study", "alpha", "--texts", str(texts),
                     stdout=io.StringIO())
    error = info.value.__cause__
    assert isinstance(error, ValidationFailed)
    entries = assert_one_shape(error.details)
    assert entries[0] == {"path": "rater_kind", "message": "must be 'human' or 'judge', got "
                                                           "'robot'", "line": 2}
    assert {"file": "texts", "line": 1, "path": "item_id"}.items() <= entries[-1].items()
    assert "  line 2: rater_kind: must be 'human' or 'judge'" in str(info.value)
    assert "  texts line 1: item_id: " in str(info.value)


@pytest.mark.django_db
def test_sampling_plan_spec(lead_client: APIClient, study: Study) -> None:
    message, entries, details = _answer(lead_client.post(
        "/api/studies/alpha/sampling-plans",
        {"spec": {"mode": "per_stratum", "n": "3", "surprise": 1}, "k": 1}, format="json"))
    assert _paths(entries) == ["spec.surprise", "spec.n", "spec.dimension"]
    assert details["error_count"] == 3
    assert message.startswith("The sampling spec did not validate: spec.surprise: unknown field")


@pytest.mark.django_db
def test_judge_configuration(lead_client: APIClient, study: Study, settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    config = {"provider": "openai", "base_url": "http://10.0.0.5/v1", "model": "m",
              "api_key_env": None}
    response = lead_client.post("/api/studies/alpha/judges",
                                {"name": "j", "kind": "llm", "config": config}, format="json")
    message, entries, _ = _answer(response)
    assert response.json()["error"]["code"] == "base_url_not_allowed"
    [entry] = entries
    assert entry["path"] == "base_url" and entry["message"] == message
    assert entry["url"] == "http://10.0.0.5/v1" and entry["setting"]
    _, entries, _ = _answer(lead_client.post(
        "/api/studies/alpha/judges",
        {"name": "k", "kind": "llm", "config": {**config, "base_url": "https://api.openai.com/v1",
                                                "temperature": 2}}, format="json"))
    assert _paths(entries) == ["temperature"]


@pytest.mark.django_db
def test_drf_serializer_fields(lead_client: APIClient, study: Study) -> None:
    message, entries, _ = _answer(lead_client.post(
        "/api/studies/alpha/judges", {"kind": "nope", "description": 5, "config": None},
        format="json"))
    assert {"name", "kind"} <= set(_paths(entries))
    assert message.startswith("The request did not validate: ")
    _, entries, _ = _answer(lead_client.post(
        "/api/studies/alpha/reports/agreement/", {"plan_version": "x"}, format="json"))
    assert _paths(entries) == ["plan_version"]


@pytest.mark.django_db
def test_query_parameters_and_json_bodies(lead_client: APIClient, study: Study) -> None:
    _, entries, _ = _answer(lead_client.get("/api/studies/alpha/items", {"meta.k": "a\x00"}))
    assert entries == [{"path": "meta.k", "message": entries[0]["message"], "in": "query"}]
    _, entries, _ = _answer(lead_client.generic(
        "POST", "/api/studies/alpha/sampling-plans", '{"spec": {"mode": NaN}}',
        content_type="application/json"))
    assert entries[0]["path"].startswith("spec") or entries[0]["path"] == "$"


# --- the source keeps to the one shape ---------------------------------------------------------

_APPS = ("annotations", "calibration", "evalstats", "imports", "judges", "reports", "reviewhub",
         "studies")


def _details_problem(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else None
    if name not in ("ValidationFailed", "IngestRejected", "InvalidJSON"):
        return None
    if name == "IngestRejected":
        return None
    details = next((k.value for k in call.keywords if k.arg == "details"), None)
    if details is None:
        return "no details: raise ValidationFailed.at(path, message) or use Problems"
    if isinstance(details, ast.Dict):
        keys = [k.value for k in details.keys if isinstance(k, ast.Constant)]
        if "errors" not in keys:
            return "details is not {\"errors\": [...]}"
    elif isinstance(details, ast.DictComp):
        return "details is a dict comprehension: use Problems.from_mapping"
    return None


def test_every_validation_error_is_raised_in_the_one_shape() -> None:
    bad = []
    for app in _APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts or path == ROOT / "reviewhub" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and (why := _details_problem(node)):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {why}")
    assert not bad, "\n".join(bad)
