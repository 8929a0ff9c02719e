"""GET of one item shows its `recorded_request` as ingested (what a replay run will send), so
a client can check it; the list of items leaves it out."""

from __future__ import annotations

from typing import Any

import pytest

from studies.models import Item

from .factories_ingest import encode, post
from .test_ingest_recorded_request import RECORDED

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_one_item_shows_the_recorded_request_as_ingested(lead_client: Any, study: Any,
                                                         fmt: str) -> None:
    rows = [{"external_id": "r1", "input": "Where is my order?", "recorded_request": RECORDED},
            {"external_id": "r2", "input": "No request logged"}]
    assert post(lead_client, "alpha", "items", encode(fmt, rows), fmt).status_code == 200
    ids = {i.external_id: i.pk for i in Item.objects.filter(study=study)}
    with_request = lead_client.get(f"/api/studies/alpha/items/{ids['r1']}")
    assert with_request.status_code == 200
    assert with_request.json()["recorded_request"] == RECORDED
    without = lead_client.get(f"/api/studies/alpha/items/{ids['r2']}").json()
    assert "recorded_request" in without and without["recorded_request"] is None
    listed = lead_client.get("/api/studies/alpha/items").json()["results"]
    assert listed and all("recorded_request" not in row for row in listed)


def test_the_field_is_in_the_schema_of_one_item_only(lead_client: Any, study: Any) -> None:
    schema = lead_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    components = schema["components"]["schemas"]
    assert "recorded_request" in components["ItemDetail"]["properties"]
    assert components["ItemDetail"]["properties"]["recorded_request"]["readOnly"] is True
    assert "recorded_request" not in components["Item"]["properties"]
