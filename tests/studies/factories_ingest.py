"""Helpers for the ingest tests: file builders, a REST poster and a "nothing changed" snapshot.

Fixtures are defined here and imported by the `test_ingest*.py` modules (the studies
conftest belongs to another area).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from studies.models import Candidate, Item, Output, Study
from tests.factories import CandidateFactory, ItemFactory

CONTENT_TYPES = {"json": "application/json", "ndjson": "application/x-ndjson",
                 "csv": "text/csv"}


def ndjson(rows: Iterable[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def json_array(rows: Iterable[Any]) -> bytes:
    return json.dumps(list(rows), indent=1).encode()


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


def encode(fmt: str, rows: list[Any]) -> bytes:
    """The same rows in one of the three formats (CSV: JSON-valued fields as JSON cells)."""
    if fmt == "ndjson":
        return ndjson(rows)
    if fmt == "json":
        return json_array(rows)
    header: list[str] = []
    for row in rows:
        header.extend(k for k in row if k not in header)

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, dict | list):
            return json.dumps(value)
        return str(value)

    return csv_bytes(header, ([cell(r.get(h)) for h in header] for r in rows))


def post(client: APIClient, slug: str, kind: str, body: bytes, fmt: str = "ndjson",
         **extra: Any) -> Any:
    content_type = extra.pop("content_type", CONTENT_TYPES[fmt])
    return client.generic("POST", f"/api/studies/{slug}/{kind}/bulk",
                          body,  # type: ignore[arg-type]  # the stubs say str; bytes work
                          content_type=content_type, **extra)


def errors_of(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 400, response.content[:500]
    body = response.json()["error"]
    assert "nothing was written" in body["message"]
    return list(body["details"]["errors"])


def one_error(response: Any) -> dict[str, Any]:
    errors = errors_of(response)
    assert len(errors) == 1, errors
    return errors[0]


def snapshot(study: Study) -> dict[str, Any]:
    """Every stored row of the study's items, candidates and outputs, timestamps included."""
    return {
        "items": list(Item.objects.filter(study=study).order_by("id").values()),
        "candidates": list(Candidate.objects.filter(study=study).order_by("id").values()),
        "outputs": list(Output.objects.filter(study=study).order_by("id").values()),
    }


def stored_text(table: str, column: str, pk: int) -> bytes:
    """The raw UTF-8 bytes the database holds, read past the ORM."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return str(cur.fetchone()[0]).encode("utf-8")


@pytest.fixture
def seeded(study: Study) -> Study:
    """The `alpha` study with items i1..i3 and candidates A and B."""
    for n in (1, 2, 3):
        ItemFactory(study=study, external_id=f"i{n}", input=f"Question {n}?")
    CandidateFactory(study=study, name="A")
    CandidateFactory(study=study, name="B")
    return study
