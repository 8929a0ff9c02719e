"""The OpenAPI schema validates and lists every /api/ endpoint of every app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from .test_access import _walk

CONVERTER_RE = re.compile(r"<(?:[^>:]+:)?([^>]+)>")


def api_routes() -> list[str]:
    from django.urls import get_resolver

    out = []
    for route, _ in _walk(get_resolver().url_patterns):
        if route.startswith("api/") and not route.startswith(("api/schema", "api/docs")):
            out.append("/" + CONVERTER_RE.sub(r"{\1}", route))
    return out


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def test_schema_is_valid_openapi(schema):
    validate_schema(schema)  # raises on an invalid document


def test_every_api_route_is_in_the_schema(schema):
    missing = [r for r in api_routes() if r not in schema["paths"]]
    assert not missing, f"not in /api/schema/: {missing}"


def test_studies_operations_document_bodies_and_errors(schema):
    put = schema["paths"]["/api/studies/{slug}/rubric"]["put"]
    assert "requestBody" in put and {"200", "201", "400", "404"} <= set(put["responses"])
    outputs = schema["paths"]["/api/studies/{slug}/outputs"]["get"]
    names = {p["name"] for p in outputs["parameters"]}
    assert {"candidate", "stratum", "has_error", "schema_valid", "cursor",
            "page_size"} <= names
    ref = outputs["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("PaginatedOutputList")
    assert schema["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"


def test_spectacular_validate_fail_on_warn(tmp_path: Path):
    """The same check as CI's `manage.py spectacular --validate --fail-on-warn`: any app's
    view that the generator cannot describe fails here."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file",
                 str(tmp_path / "schema.yaml"))


@pytest.mark.django_db
def test_schema_endpoint_serves(lead_client):
    r = lead_client.get("/api/schema/")
    assert r.status_code == 200 and b"openapi" in r.content
