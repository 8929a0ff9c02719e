"""REST bulk ingest: every kind of bad row gets line + field + reason and writes nothing;
re-ingest is idempotent; counts; 413 / 415; schema_valid; permissions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from studies import ingest
from studies.models import Candidate, Item, Membership, Output, StratumDimension, Study
from tests.factories import MembershipFactory, OutputFactory, StudyFactory, UserFactory

from .factories_ingest import (
    csv_bytes,
    encode,
    errors_of,
    json_array,
    ndjson,
    one_error,
    post,
    seeded,
    snapshot,
    stored_text,
)

__all__ = ["seeded"]  # the fixture, imported for pytest

FORMATS = ["json", "ndjson", "csv"]
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _items(n: int = 3, **extra: Any) -> list[dict[str, Any]]:
    return [{"external_id": f"i{k}", "input": f"Question {k}?", "context": "ctx",
             "metadata": {"lang": "en" if k % 2 else "de"}, **extra} for k in range(1, n + 1)]


def _outputs() -> list[dict[str, Any]]:
    return [{"item": f"i{k}", "candidate": c, "text": f"answer {k}{c}", "latency_ms": 12.5,
             "tokens_in": 10, "tokens_out": 5, "cost": 0.001, "finish_reason": "stop"}
            for k in (1, 2, 3) for c in ("A", "B")]


# --- happy path, counts, idempotency ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_items_reingest_is_idempotent_and_writes_nothing(lead_client, study, fmt):
    body = encode(fmt, _items())
    first = post(lead_client, "alpha", "items", body, fmt)
    assert first.status_code == 200, first.content
    assert first.json() == {"created": 3, "updated": 0, "unchanged": 0}
    before = snapshot(study)
    second = post(lead_client, "alpha", "items", body, fmt)
    assert second.json() == {"created": 0, "updated": 0, "unchanged": 3}
    assert snapshot(study) == before  # same updated_at: no row was rewritten
    item = Item.objects.get(study=study, external_id="i2")
    assert (item.input, item.context, item.metadata) == ("Question 2?", "ctx", {"lang": "de"})


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_outputs_reingest_is_idempotent(lead_client, seeded, fmt):
    body = encode(fmt, _outputs())
    assert post(lead_client, "alpha", "outputs", body, fmt).json() == {
        "created": 6, "updated": 0, "unchanged": 0}
    before = snapshot(seeded)
    assert post(lead_client, "alpha", "outputs", body, fmt).json() == {
        "created": 0, "updated": 0, "unchanged": 6}
    assert snapshot(seeded) == before
    out = Output.objects.get(item__external_id="i3", candidate__name="B")
    assert (out.text, out.latency_ms, out.tokens_in, out.cost, out.finish_reason,
            out.study_id) == ("answer 3B", 12.5, 10, 0.001, "stop", seeded.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_candidates_reingest_is_idempotent(lead_client, study, fmt):
    rows = [{"name": "gpt", "provider": "openai", "model_id": "gpt-4o", "model_version": "2024",
             "model_family": "gpt-4", "parameters": {"temperature": 0.2}, "notes": "n",
             "public_scores": {"mmlu": 88.7}},
            {"name": "claude", "provider": "anthropic"}]
    body = encode(fmt, rows)
    assert post(lead_client, "alpha", "candidates", body, fmt).json()["created"] == 2
    assert post(lead_client, "alpha", "candidates", body, fmt).json() == {
        "created": 0, "updated": 0, "unchanged": 2}
    gpt = Candidate.objects.get(study=study, name="gpt")
    assert gpt.parameters == {"temperature": 0.2}
    assert gpt.public_scores == {"mmlu": 88.7}
    assert gpt.model_family == "gpt-4"


@pytest.mark.django_db
def test_counts_created_updated_unchanged(lead_client, study):
    post(lead_client, "alpha", "items", ndjson(_items(3)))
    rows = _items(4)
    rows[0]["input"] = "Changed question?"  # i1 updated
    rows[1]["metadata"] = {"lang": "fr"}  # i2 updated (metadata only)
    response = post(lead_client, "alpha", "items", ndjson(rows))
    assert response.json() == {"created": 1, "updated": 2, "unchanged": 1}
    assert Item.objects.get(study=study, external_id="i1").input == "Changed question?"
    assert Item.objects.get(study=study, external_id="i2").metadata == {"lang": "fr"}
    assert Item.objects.filter(study=study).count() == 4


@pytest.mark.django_db
def test_a_row_replaces_the_stored_values(lead_client, study):
    """Upsert semantics: a field left out of a row goes back to its default."""
    post(lead_client, "alpha", "items", ndjson([{"external_id": "x", "input": "q",
                                                "reference": "ref", "metadata": {"a": 1}}]))
    response = post(lead_client, "alpha", "items", ndjson([{"external_id": "x", "input": "q"}]))
    assert response.json()["updated"] == 1
    item = Item.objects.get(study=study, external_id="x")
    assert (item.reference, item.metadata) == ("", {})


@pytest.mark.django_db
def test_json_input_is_stored_as_canonical_json(lead_client, study):
    rows = [{"external_id": "j", "input": {"b": [1, 2], "a": "é"}},
            {"external_id": "t", "input": '{"kept": "as text"}'},
            {"external_id": "p", "input": '{"z": 1, "y": 2}', "input_format": "json"}]
    assert post(lead_client, "alpha", "items", ndjson(rows)).status_code == 200
    stored = {i.external_id: (i.input, i.input_format) for i in Item.objects.filter(study=study)}
    assert stored["j"] == ('{"a":"é","b":[1,2]}', "json")
    assert stored["t"] == ('{"kept": "as text"}', "text")
    assert stored["p"] == ('{"y":2,"z":1}', "json")
    again = post(lead_client, "alpha", "items", ndjson(rows))
    assert again.json()["unchanged"] == 3


@pytest.mark.django_db
def test_csv_metadata_columns_and_json_column(lead_client, study):
    body = csv_bytes(
        ["external_id", "input", "metadata", "metadata.lang", "metadata.length",
         "metadata.zip", "metadata.noisy"],
        [["a", "q", '{"source": "web"}', "en", "523", "007", "true"],
         ["b", "q", "", "", "1.5e3", "", "false"]],
    )
    response = post(lead_client, "alpha", "items", body, "csv")
    assert response.status_code == 200, response.content
    a = Item.objects.get(study=study, external_id="a")
    b = Item.objects.get(study=study, external_id="b")
    assert a.metadata == {"source": "web", "lang": "en", "length": 523, "zip": "007",
                          "noisy": True}
    assert b.metadata == {"length": 1500.0, "noisy": False}  # empty cells: key absent


@pytest.mark.django_db
def test_items_import_recomputes_strata(lead_client, study):
    StratumDimension.objects.create(study=study, key="lang", kind="categorical",
                                    source="metadata.lang")
    post(lead_client, "alpha", "items",
         ndjson([*_items(2), {"external_id": "x", "input": "no lang"}]))
    strata = dict(Item.objects.filter(study=study).values_list("external_id", "strata"))
    assert strata["i1"] == {"lang": "en"}
    assert strata["i2"] == {"lang": "de"}
    assert strata["x"]["lang"] == "unknown"


# --- every kind of bad input -----------------------------------------------------------------


@pytest.mark.django_db
def test_ndjson_row_that_is_not_json(lead_client, seeded):
    before = snapshot(seeded)
    body = b'{"external_id": "n1", "input": "ok"}\n{"external_id": "n2", "input": \n'
    err = one_error(post(lead_client, "alpha", "items", body))
    assert (err["line"], err["path"]) == (2, "(row)")
    assert "not valid JSON" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["json", "ndjson"])
def test_missing_required_field(lead_client, seeded, fmt):
    before = snapshot(seeded)
    rows = [{"external_id": "n1", "input": "a"}, {"input": "no id"},
            {"external_id": "n3", "input": None}]
    errors = errors_of(post(lead_client, "alpha", "items", encode(fmt, rows), fmt))
    if fmt == "json":  # element index; pretty-printed lines
        assert [(e["index"], e["path"]) for e in errors] == [(1, "external_id"), (2, "input")]
        assert all(e["line"] > 1 for e in errors)
    else:
        assert [(e["line"], e["path"]) for e in errors] == [(2, "external_id"), (3, "input")]
    assert errors[0]["message"] == "required field is missing"
    assert errors[1]["message"] == "required field must not be null"
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value", "reason"), [
    ("tokens_in", "ten", "must be a whole number, got string"),
    ("tokens_out", 2.5, "must be a whole number, got 2.5"),
    ("latency_ms", True, "must be a number, got boolean"),
    ("text", {"a": 1}, "must be a string, got object"),
    ("metadata", [1], "must be a JSON object, got array"),
    ("item", 1.5, "must be a string, got number"),
])
def test_wrong_type(lead_client, seeded, field, value, reason):
    before = snapshot(seeded)
    row = {"item": "i1", "candidate": "A", "text": "ok", field: value}
    err = one_error(post(lead_client, "alpha", "outputs", ndjson([row])))
    assert (err["line"], err["path"], err["message"]) == (1, field, reason)
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_external_id_in_one_file(lead_client, seeded, fmt):
    before = snapshot(seeded)
    rows = [{"external_id": "d", "input": "a"}, {"external_id": "e", "input": "b"},
            {"external_id": "d", "input": "c"}]
    err = one_error(post(lead_client, "alpha", "items", encode(fmt, rows), fmt))
    assert err["path"] == "external_id"
    assert "duplicate external_id 'd'" in err["message"]
    if fmt == "json":
        assert err["index"] == 2 and "element [0]" in err["message"]
    else:
        expected = 4 if fmt == "csv" else 3  # CSV line 1 is the header
        assert err["line"] == expected
        assert f"line {expected - 2}" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_duplicate_output_pair_in_one_file(lead_client, seeded):
    before = snapshot(seeded)
    rows = [{"item": "i1", "candidate": "A"}, {"item": "i1", "candidate": "B"},
            {"item": "i1", "candidate": "A", "text": "again"}]
    err = one_error(post(lead_client, "alpha", "outputs", ndjson(rows)))
    assert (err["line"], err["path"]) == (3, "(item, candidate)")
    assert "duplicate output for item 'i1' and candidate 'A'" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_output_for_unknown_item_or_candidate(lead_client, seeded):
    before = snapshot(seeded)
    rows = [{"item": "i1", "candidate": "A"}, {"item": "nope", "candidate": "A"},
            {"item": "i2", "candidate": "Z"}, {"item": "gone", "candidate": "Y"}]
    errors = errors_of(post(lead_client, "alpha", "outputs", ndjson(rows)))
    got = [(e["line"], e["path"]) for e in errors]
    assert got == [(2, "item"), (3, "candidate"), (4, "item"), (4, "candidate")]
    assert "unknown item 'nope'" in errors[0]["message"]
    assert "unknown candidate 'Z'" in errors[1]["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_output_cannot_reference_another_studys_item(lead_client, seeded, user_factory):
    other = StudyFactory(slug="other")
    from tests.factories import ItemFactory

    ItemFactory(study=other, external_id="foreign")
    err = one_error(post(lead_client, "alpha", "outputs",
                         ndjson([{"item": "foreign", "candidate": "A"}])))
    assert (err["line"], err["path"]) == (1, "item")


@pytest.mark.django_db
def test_nul_bytes_are_rejected_in_every_format(lead_client, seeded):
    before = snapshot(seeded)
    # JSON carries a NUL only as an escape; it is named by field.
    err = one_error(post(lead_client, "alpha", "items",
                         ndjson([{"external_id": "n", "input": "a\u0000b"}])))
    assert (err["line"], err["path"]) == (1, "input")
    assert "NUL character (U+0000)" in err["message"] and "PostgreSQL" in err["message"]
    # ...also nested inside a JSON value.
    err = one_error(post(lead_client, "alpha", "items", json_array(
        [{"external_id": "n", "input": "a", "metadata": {"tags": ["x", "\u0000"]}}]), "json"))
    assert err["path"] == "metadata" and "tags[1]" in err["message"]
    # A raw NUL byte makes a JSON Lines row unreadable.
    err = one_error(post(lead_client, "alpha", "items",
                         b'{"external_id": "n", "input": "a\x00b"}\n'))
    assert (err["line"], err["path"]) == (1, "(row)") and "NUL byte" in err["message"]
    # CSV cells can hold raw NULs.
    err = one_error(post(lead_client, "alpha", "items",
                         b"external_id,input\nok,fine\nn,a\x00b\n", "csv"))
    assert (err["line"], err["path"]) == (3, "input") and "NUL" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_ten_megabyte_field_is_over_the_default_limit(lead_client, seeded, fmt, settings):
    assert settings.REVIEWHUB_MAX_FIELD_CHARS < 10 * 2**20
    before = snapshot(seeded)
    rows = [{"item": "i1", "candidate": "A", "text": "ok"},
            {"item": "i2", "candidate": "A", "text": "x" * (10 * 2**20)}]
    err = one_error(post(lead_client, "alpha", "outputs", encode(fmt, rows), fmt))
    assert err["path"] == "text"
    assert "10,485,760 characters" in err["message"]
    assert "REVIEWHUB_MAX_FIELD_CHARS" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_field_limit_follows_the_setting(lead_client, seeded, settings):
    settings.REVIEWHUB_MAX_FIELD_CHARS = 50
    before = snapshot(seeded)
    rows = [{"item": "i1", "candidate": "A", "text": "y" * 50},
            {"item": "i2", "candidate": "A", "text": "y" * 51},
            {"item": "i3", "candidate": "A", "parsed_json": {"k": "z" * 60}}]
    errors = errors_of(post(lead_client, "alpha", "outputs", ndjson(rows)))
    assert [(e["line"], e["path"]) for e in errors] == [(2, "text"), (3, "parsed_json")]
    assert "51 characters long; the limit is 50" in errors[0]["message"]
    assert snapshot(seeded) == before
    settings.REVIEWHUB_MAX_FIELD_CHARS = 51
    assert post(lead_client, "alpha", "outputs", ndjson(rows[:2])).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_html_and_script_are_stored_byte_for_byte(lead_client, seeded, fmt):
    nasty = '<script>alert("x")</script><img src=x onerror=alert(1)> &amp; \'"\n\tünï'
    rows = [{"item": "i1", "candidate": "A", "text": nasty, "error": "<b>boom</b>"}]
    assert post(lead_client, "alpha", "outputs", encode(fmt, rows), fmt).status_code == 200
    out = Output.objects.get(item__external_id="i1", candidate__name="A")
    assert stored_text("studies_output", "text", out.pk) == nasty.encode("utf-8")
    assert out.error == "<b>boom</b>"


@pytest.mark.django_db
def test_csv_with_a_missing_column(lead_client, seeded):
    before = snapshot(seeded)
    err = one_error(post(lead_client, "alpha", "outputs", b"item,text\ni1,hello\n", "csv"))
    assert (err["line"], err["path"]) == (1, "candidate")
    assert err["message"] == "required column is missing from the header"
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_csv_row_with_too_few_cells(lead_client, seeded):
    err = one_error(post(lead_client, "alpha", "items", b"external_id,input\na,b\nc\n", "csv"))
    assert (err["line"], err["path"]) == (3, "(row)")
    assert "1 cells but the header has 2" in err["message"]


@pytest.mark.django_db
def test_csv_extra_unknown_columns_are_rejected_unless_prefixed(lead_client, seeded):
    before = snapshot(seeded)
    err = one_error(post(lead_client, "alpha", "items",
                         b"external_id,input,language,metadata.ok\na,b,en,1\n", "csv"))
    assert (err["line"], err["path"]) == (1, "language")
    assert "unknown column" in err["message"] and "metadata.<key>" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_unknown_json_field_is_rejected(lead_client, seeded):
    err = one_error(post(lead_client, "alpha", "items",
                         ndjson([{"external_id": "a", "input": "b", "lang": "en"}])))
    assert (err["line"], err["path"]) == (1, "lang")
    assert err["message"].startswith("unknown field")


@pytest.mark.django_db
@pytest.mark.parametrize(("fmt", "body"), [
    ("ndjson", b""), ("ndjson", b"\n  \n"), ("json", b""), ("json", b"[]"), ("csv", b""),
    ("csv", b"external_id,input\n"),
])
def test_empty_file(lead_client, seeded, fmt, body):
    before = snapshot(seeded)
    err = one_error(post(lead_client, "alpha", "items", body, fmt))
    assert (err["line"], err["path"]) == (1, "(file)")
    assert "no rows" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize(("fmt", "body", "line"), [
    ("ndjson", b'{"external_id": "a", "input": "ok"}\n{"external_id": "b", "input": "\xff"}\n',
     2),
    ("csv", b"external_id,input\na,ok\nb,caf\xe9\n", 3),
    ("json", b'[{"external_id": "a", "input": "ok"},\n {"external_id": "b", "input": "\xc3"}]',
     2),
])
def test_invalid_utf8(lead_client, seeded, fmt, body, line):
    before = snapshot(seeded)
    err = one_error(post(lead_client, "alpha", "items", body, fmt))
    assert err["line"] == line
    assert "invalid UTF-8" in err["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "raw", "reason"), [
    ("tokens_in", "-3", "must not be negative, got -3"),
    ("tokens_out", "NaN", "must be a finite number, got nan"),
    ("latency_ms", "-0.5", "must not be negative, got -0.5"),
    ("latency_ms", "NaN", "must be a finite number, got nan"),
    ("cost", "Infinity", "must be a finite number, got inf"),
    ("cost", "-1e-3", "must not be negative, got -0.001"),
])
def test_negative_or_nan_numbers_ndjson(lead_client, seeded, field, raw, reason):
    before = snapshot(seeded)
    body = f'{{"item": "i1", "candidate": "A", "{field}": {raw}}}\n'.encode()
    err = one_error(post(lead_client, "alpha", "outputs", body))
    assert (err["line"], err["path"], err["message"]) == (1, field, reason)
    assert snapshot(seeded) == before


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "cell", "reason"), [
    ("tokens_in", "-1", "must not be negative, got -1"),
    ("tokens_in", "nan", "must be a finite number, got nan"),
    ("latency_ms", "-2", "must not be negative, got -2"),
    ("cost", "inf", "must be a finite number, got inf"),
    ("cost", "cheap", "must be a number, got 'cheap'"),
])
def test_negative_or_nan_numbers_csv(lead_client, seeded, field, cell, reason):
    before = snapshot(seeded)
    body = csv_bytes(["item", "candidate", field], [["i1", "A", cell]])
    err = one_error(post(lead_client, "alpha", "outputs", body, "csv"))
    assert (err["line"], err["path"], err["message"]) == (2, field, reason)
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_nan_inside_json_metadata_is_rejected(lead_client, seeded):
    body = b'{"item": "i1", "candidate": "A", "metadata": {"score": NaN}}\n'
    err = one_error(post(lead_client, "alpha", "outputs", body))
    assert err["path"] == "metadata" and "NaN" in err["message"]


@pytest.mark.django_db
def test_one_bad_row_blocks_the_valid_updates_too(lead_client, seeded):
    OutputFactory(study=seeded, item=Item.objects.get(external_id="i1"),
                  candidate=Candidate.objects.get(name="A"), text="original")
    before = snapshot(seeded)
    rows = [{"item": "i1", "candidate": "A", "text": "changed"},
            {"item": "i2", "candidate": "A", "text": "new"},
            {"item": "i3", "candidate": "A", "tokens_in": -1}]
    errors_of(post(lead_client, "alpha", "outputs", ndjson(rows)))
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_error_list_is_capped_and_counts_the_rest(lead_client, seeded):
    rows = [{"external_id": f"x{n}", "input": n} for n in range(60)]
    response = post(lead_client, "alpha", "items", ndjson(rows))
    details = response.json()["error"]["details"]
    assert len(details["errors"]) == ingest.ERROR_LIMIT == 50
    assert (details["error_count"], details["more_errors"], details["rows_with_errors"]) == (
        60, 10, 60)
    assert [e["line"] for e in details["errors"]] == list(range(1, 51))
    assert response.json()["error"]["message"].startswith("60 of 60 rows are invalid")


@pytest.mark.django_db
def test_json_array_structural_errors(lead_client, seeded):
    err = one_error(post(lead_client, "alpha", "items", b'{"external_id": "a"}', "json"))
    assert err["path"] == "(file)" and "application/x-ndjson" in err["message"]
    err = one_error(post(lead_client, "alpha", "items",
                         b'[{"external_id": "a", "input": "b"},\n 3]', "json"))
    assert (err["line"], err["index"], err["path"]) == (2, 1, "(row)")
    assert "must be a JSON object, got number" in err["message"]
    err = one_error(post(lead_client, "alpha", "items",
                         b'[{"external_id": "a", "input": "b"}\n\n {"x": 1}]', "json"))
    assert err["line"] == 3 and "expected ','" in err["message"]
    err = one_error(post(lead_client, "alpha", "items",
                         b'[{"external_id": "a", "input": "b"}', "json"))
    assert "not closed" in err["message"]


# --- schema_valid ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_schema_valid_is_computed_at_ingest(lead_client, seeded):
    seeded.output_schema = {"type": "object", "required": ["answer"],
                            "properties": {"answer": {"type": "string"}}}
    seeded.save()
    rows = [
        {"item": "i1", "candidate": "A", "parsed_json": {"answer": "yes"}, "text": "nope"},
        {"item": "i1", "candidate": "B", "parsed_json": {"answer": 3}},
        {"item": "i2", "candidate": "A", "text": '{"answer": "from text"}'},
        {"item": "i2", "candidate": "B", "text": "not json at all"},
        {"item": "i3", "candidate": "A", "text": "", "error": "timeout"},
    ]
    assert post(lead_client, "alpha", "outputs", ndjson(rows)).status_code == 200
    got = {(o.item.external_id, o.candidate.name): o.schema_valid
           for o in Output.objects.select_related("item", "candidate")}
    assert got == {("i1", "A"): True, ("i1", "B"): False, ("i2", "A"): True,
                   ("i2", "B"): False, ("i3", "A"): False}
    # A schema change makes the same file an update of schema_valid.
    seeded.output_schema = {"type": "object"}
    seeded.save()
    assert post(lead_client, "alpha", "outputs", ndjson(rows)).json() == {
        "created": 0, "updated": 1, "unchanged": 4}


@pytest.mark.django_db
def test_schema_valid_is_null_without_a_schema(lead_client, seeded):
    post(lead_client, "alpha", "outputs", ndjson([{"item": "i1", "candidate": "A",
                                                  "text": "{}"}]))
    assert Output.objects.get().schema_valid is None


@pytest.mark.django_db
def test_invalid_study_schema_is_reported(lead_client, seeded):
    seeded.output_schema = {"type": "no-such-type"}
    seeded.save()
    response = post(lead_client, "alpha", "outputs", ndjson([{"item": "i1", "candidate": "A"}]))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_output_schema"


# --- size, media type, permissions -----------------------------------------------------------


@pytest.mark.django_db
def test_413_over_the_upload_limit(lead_client, seeded, settings):
    settings.REVIEWHUB_MAX_UPLOAD_BYTES = 100
    before = snapshot(seeded)
    response = post(lead_client, "alpha", "items",
                    ndjson([{"external_id": f"x{n}", "input": "q"} for n in range(10)]))
    assert response.status_code == 413
    body = response.json()["error"]
    assert body["code"] == "payload_too_large" and "REVIEWHUB_MAX_UPLOAD_BYTES" in body["message"]
    assert "import_outputs" in body["message"]
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_413_is_decided_from_content_length_before_reading(lead_client, seeded, settings):
    settings.REVIEWHUB_MAX_UPLOAD_BYTES = 100
    # The declared length exceeds the 2-byte body: reading would fail in the test client, so a
    # 413 proves the body was never read.
    response = post(lead_client, "alpha", "items", b"{}", CONTENT_LENGTH="5000")
    assert response.status_code == 413


def test_upload_limit_is_enforced_while_streaming():
    import io

    from reviewhub.api.errors import PayloadTooLarge

    with pytest.raises(PayloadTooLarge):
        ingest.upload_spool(io.BytesIO(b"x" * 5000), content_length=None, limit=1000)
    spool = ingest.upload_spool(io.BytesIO(b"x" * 1000), content_length=None, limit=1000)
    assert spool.read() == b"x" * 1000


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["text/plain", "application/xml",
                                          "text/csv; charset=latin-1", ""])
def test_415_for_unsupported_content_types(lead_client, seeded, content_type):
    response = post(lead_client, "alpha", "items", b"external_id,input\na,b\n",
                    content_type=content_type)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.django_db
def test_content_type_parameters_and_aliases(lead_client, study):
    body = b"external_id,input\na,b\n"
    assert post(lead_client, "alpha", "items", body,
                content_type="text/csv; charset=utf-8").status_code == 200
    assert post(lead_client, "alpha", "items", ndjson([{"external_id": "b", "input": "c"}]),
                content_type="application/jsonl").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Membership.Role.ANNOTATOR, Membership.Role.VIEWER])
def test_non_leads_get_403(client_for, seeded, role):
    user = UserFactory(username=f"u-{role}")
    MembershipFactory(study=seeded, user=user, role=role)
    before = snapshot(seeded)
    for kind, body in (("items", ndjson(_items(1))), ("outputs", ndjson(_outputs()[:1]))):
        response = post(client_for(user), "alpha", kind, body)
        assert response.status_code == 403, response.content
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_read_only_token_gets_403(client_for, seeded, lead):
    response = post(client_for(lead, can_write=False), "alpha", "items", ndjson(_items(1)))
    assert response.status_code == 403
    assert "read-only" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_other_studies_and_strangers_get_404(client_for, seeded, lead, api_client):
    stranger = UserFactory(username="stranger")
    other = StudyFactory(slug="other", owner=lead)
    MembershipFactory(study=other, user=lead, role=Membership.Role.LEAD)
    before = snapshot(seeded)
    # Not a member; a token scoped to another study (even the lead's own); no such study.
    assert post(client_for(stranger), "alpha", "items", ndjson(_items(1))).status_code == 404
    assert post(client_for(lead, study=other), "alpha", "items",
                ndjson(_items(1))).status_code == 404
    assert post(client_for(lead), "missing", "items", ndjson(_items(1))).status_code == 404
    assert post(api_client, "alpha", "items", ndjson(_items(1))).status_code in (401, 403)
    assert snapshot(seeded) == before
    # Access is decided before the body is even looked at.
    assert post(client_for(stranger), "alpha", "items", b"\xff",
                content_type="text/plain").status_code == 404


@pytest.mark.django_db
def test_closed_study_refuses_ingest(lead_client, seeded):
    Study.objects.filter(pk=seeded.pk).update(status=Study.Status.CLOSED)
    response = post(lead_client, "alpha", "items", ndjson(_items(1)))
    assert response.status_code == 409


@pytest.mark.django_db
def test_bulk_endpoints_are_in_the_openapi_schema(lead_client):
    schema = lead_client.get("/api/schema/?format=json").json()
    for kind in ("items", "candidates", "outputs"):
        operation = schema["paths"][f"/api/studies/{{slug}}/{kind}/bulk"]["post"]
        assert set(operation["requestBody"]["content"]) == {
            "application/json", "application/x-ndjson", "text/csv"}
        assert {"200", "400", "413", "415"} <= set(operation["responses"])


# --- the documented example files ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_docs_example_files_ingest(lead_client, study, fmt):
    """docs/ingest.md's examples, each format, in order: items, candidates, outputs."""
    ext = {"json": "json", "ndjson": "jsonl", "csv": "csv"}[fmt]
    study.output_schema = json.loads((EXAMPLES / "outputs.schema.json").read_text())
    study.save()
    counts = {}
    for kind in ("items", "candidates", "outputs"):
        body = (EXAMPLES / f"{kind}.{ext}").read_bytes()
        response = post(lead_client, "alpha", kind, body, fmt)
        assert response.status_code == 200, (kind, response.content)
        counts[kind] = response.json()["created"]
        assert post(lead_client, "alpha", kind, body, fmt).json()["unchanged"] == counts[kind]
    assert counts["items"] >= 3 and counts["candidates"] >= 2 and counts["outputs"] >= 4
    assert Output.objects.filter(study=study, schema_valid=True).exists()
    assert Output.objects.filter(study=study, schema_valid=False).exists()


@pytest.mark.django_db
def test_docs_examples_agree_across_formats(client_for, study, lead):
    """The three example sets describe the same rows: after the JSON Lines set, the JSON and
    CSV sets change nothing."""
    study.output_schema = json.loads((EXAMPLES / "outputs.schema.json").read_text())
    study.save()
    client = client_for(lead)
    results = {}
    for fmt, ext in (("ndjson", "jsonl"), ("json", "json"), ("csv", "csv")):
        for kind in ("items", "candidates", "outputs"):
            body = (EXAMPLES / f"{kind}.{ext}").read_bytes()
            results[(fmt, kind)] = post(client, "alpha", kind, body, fmt).json()
    for fmt in ("json", "csv"):
        for kind in ("items", "candidates", "outputs"):
            assert results[(fmt, kind)]["unchanged"] == results[("ndjson", kind)]["created"], (
                fmt, kind, results[(fmt, kind)])


# --- both write strategies -------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db
def test_copy_and_orm_strategies_agree(seeded):
    """The PostgreSQL COPY merge and the bulk_create fallback store the same rows and count
    the same way, including updates and unchanged rows."""
    import io

    other = StudyFactory(slug="orm-twin", owner=seeded.owner)
    from tests.factories import CandidateFactory, ItemFactory

    for n in (1, 2, 3):
        ItemFactory(study=other, external_id=f"i{n}", input=f"Question {n}?")
    CandidateFactory(study=other, name="A")
    CandidateFactory(study=other, name="B")
    first = _outputs()
    first[0]["parsed_json"] = {"k": [1, True, None]}
    first[1]["metadata"] = {"m": 1}
    second = [dict(r) for r in first]
    second[0]["text"] = "changed"
    second[3]["metadata"] = {"new": "x"}

    def run(study, strategy, rows):
        return ingest.ingest_run(study=study, kind="outputs", stream=io.BytesIO(ndjson(rows)),
                                 fmt="ndjson", strategy=strategy, batch_size=4).as_dict()

    for rows in (first, second, second):
        assert run(seeded, "copy", rows) == run(other, "orm", rows)

    def rows_of(study):
        fields = ["item__external_id", "candidate__name", "text", "parsed_json", "latency_ms",
                  "tokens_in", "tokens_out", "cost", "error", "finish_reason", "schema_valid",
                  "metadata"]
        return sorted(Output.objects.filter(study=study).values_list(*fields), key=repr)

    assert rows_of(seeded) == rows_of(other)
    assert len(rows_of(seeded)) == 6


@pytest.mark.django_db
def test_rest_ingest_runs_a_bounded_number_of_queries(lead_client, seeded):
    rows = [{"item": f"i{k}", "candidate": c} for k in (1, 2, 3) for c in ("A", "B")]
    post(lead_client, "alpha", "outputs", ndjson(rows[:1]))  # the token's last_used_at touch
    Output.objects.all().delete()
    with CaptureQueriesContext(connection) as small:
        post(lead_client, "alpha", "outputs", ndjson(rows[:2]))
    Output.objects.all().delete()
    with CaptureQueriesContext(connection) as large:
        post(lead_client, "alpha", "outputs", ndjson(rows))
    assert len(large) == len(small)
