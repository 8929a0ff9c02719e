"""Items' `recorded_request` (the application's chat request, replayed by candidate runs): a
field of its own in every ingest format, checked as a chat request; a bad one is a 400 naming
the row and the field, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from studies.models import Item

from .factories_ingest import encode, one_error, post, seeded, snapshot

__all__ = ["seeded"]  # the fixture, imported for pytest

FORMATS = ["json", "ndjson", "csv"]

RECORDED = {
    "model": "gpt-4o-2024-08-06", "temperature": 0.2,
    "messages": [{"role": "system", "content": "You are the support bot."},
                 {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]}],
    "tools": [{"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}}],
    "response_format": {"type": "json_object"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_recorded_request_is_stored_in_its_own_field(lead_client: Any, study: Any,
                                                         fmt: str) -> None:
    rows = [{"external_id": "r1", "input": "Where is my order?", "recorded_request": RECORDED},
            {"external_id": "r2", "input": "No request logged"}]
    first = post(lead_client, "alpha", "items", encode(fmt, rows), fmt)
    assert first.status_code == 200, first.content
    items = {i.external_id: i for i in Item.objects.filter(study=study)}
    assert items["r1"].recorded_request == RECORDED
    assert items["r1"].metadata == {}  # not a metadata key
    assert items["r2"].recorded_request is None
    # Re-ingest is idempotent; a changed request updates the item.
    again = post(lead_client, "alpha", "items", encode(fmt, rows), fmt)
    assert again.json() == {"created": 0, "updated": 0, "unchanged": 2}
    rows[0]["recorded_request"] = {**RECORDED, "temperature": 0.7}
    changed = post(lead_client, "alpha", "items", encode(fmt, rows), fmt)
    assert changed.json() == {"created": 0, "updated": 1, "unchanged": 1}
    assert Item.objects.get(external_id="r1").recorded_request["temperature"] == 0.7


@pytest.mark.django_db
@pytest.mark.parametrize(("fmt", "value", "reason"), [
    ("json", [1, 2], "must be a JSON object (a chat request), got array"),
    ("ndjson", {"model": "x"}, "must be a chat request: 'messages' must be a non-empty list"),
    ("csv", {"messages": []}, "must be a chat request: 'messages' must be a non-empty list"),
    ("ndjson", {"messages": [{"content": "hi"}]},
     "messages[0] must be an object with a string 'role'"),
    ("csv", {"messages": [{"role": "user", "content": "hi"}], "tools": {"name": "t"}},
     "'tools' must be a JSON array, got object"),
    ("json", {"messages": [{"role": "user", "content": "hi"}], "response_format": "json"},
     "'response_format' must be a JSON object, got string"),
])
def test_a_bad_recorded_request_names_the_row_and_field(lead_client: Any, seeded: Any,
                                                         fmt: str, value: Any,
                                                         reason: str) -> None:
    before = snapshot(seeded)
    rows = [{"external_id": "ok", "input": "a"},
            {"external_id": "bad", "input": "b", "recorded_request": value}]
    err = one_error(post(lead_client, "alpha", "items", encode(fmt, rows), fmt))
    assert err["path"] == "recorded_request"
    assert err["message"] == reason
    if fmt == "json":
        assert err["index"] == 1
    else:
        assert err["line"] == (3 if fmt == "csv" else 2)  # CSV line 1 is the header
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_a_csv_cell_that_is_not_json_is_refused(lead_client: Any, seeded: Any) -> None:
    body = b'external_id,input,recorded_request\nx,"q","{not json"\n'
    err = one_error(post(lead_client, "alpha", "items", body, "csv"))
    assert (err["line"], err["path"]) == (2, "recorded_request")
    assert "not valid JSON" in err["message"] or "JSON" in err["message"]
