"""Docs and behaviour agree where a claim is mechanical: every documented default is read from
the docs and compared with the constant the code uses, so changing one without the other
fails here (docs/reports.md's `crosses` once said [["language","length"]] while the code used
[])."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    nxt = re.search(r"^#{1,3} ", text[start + len(heading):], re.M)
    return text[start:start + len(heading) + (nxt.start() if nxt else len(text))]


def _literal(text: str) -> Any:
    """A documented default as a value: 0, 0.95, `bca`, `[]`, null, false."""
    text = text.strip().strip("`").split(";")[0].split(" |")[0].strip().strip("`")
    if text in ("null", "none", "None"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def test_agreement_parameters_in_docs_reports_match_the_code() -> None:
    from reports.agreement import DEFAULT_PARAMS

    body = " ".join(_section(DOCS / "reports.md", "## Parameters").split())
    documented: dict[str, str] = {}
    for name, doc in re.findall(r"`(\w+)` \(([^()]*(?:\([^)]*\))?[^()]*)\)", body):
        documented.setdefault(name, doc)  # the list comes first; later mentions explain
    # Every parameter the code accepts is documented ...
    assert set(DEFAULT_PARAMS) <= set(documented), set(DEFAULT_PARAMS) - set(documented)
    # ... and where the docs give a plain default, it is the code's.
    checked = 0
    for name, default in DEFAULT_PARAMS.items():
        doc = documented[name]
        if name == "ci":
            assert doc.split("|")[0].strip().strip("`") == default
            checked += 1
        elif default is None or isinstance(default, bool | int | float | list):
            value = _literal(doc)
            if default is None and not isinstance(value, type(None)):
                continue  # documented as what None means ("null = all", "dimension keys")
            assert value == default, f"params.{name}: docs say {doc!r}, code uses {default!r}"
            checked += 1
        elif isinstance(default, str):
            assert _literal(doc) == default, f"params.{name}: docs {doc!r} vs {default!r}"
            checked += 1
    assert checked >= 12


def test_calibration_parameters_in_docs_calibration_match_the_code() -> None:
    from calibration.params import DEFAULT_PARAMS

    table = _section(DOCS / "calibration.md", "### Parameters")
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.M))
    assert set(rows) == set(DEFAULT_PARAMS), set(rows) ^ set(DEFAULT_PARAMS)
    for name, default in DEFAULT_PARAMS.items():
        if default is None:
            continue  # documented as what None means ("all", "the plan's strata")
        first = rows[name].split("(")[0].strip()
        assert _literal(first) == default, f"params.{name}: docs {rows[name]!r} vs {default!r}"


def test_default_cost_scale_in_docs_study_spec_matches_both_copies() -> None:
    from evalstats import costs
    from studies.spec import DEFAULT_PLAN_COSTS

    table = _section(DOCS / "study-spec.md", "The default scale")
    row = re.search(r"^\| Cost \(points\) \|(.+)\|\s*$", table, re.M)
    assert row, "the default cost table is missing"
    numbers = [float(x) for x in row.group(1).split("|")]
    assert numbers[:5] == list(costs.DEFAULT_SEVERITY_COSTS)
    assert numbers[5:] == [costs.DEFAULT_REJECT_COST, costs.DEFAULT_REVIEW_COST]
    assert [float(DEFAULT_PLAN_COSTS["severity"][str(k)]) for k in range(1, 6)] == numbers[:5]


@pytest.mark.django_db
def test_annotation_export_default_format_is_the_documented_one() -> None:
    text = (DOCS / "annotation.md").read_text()
    assert "JSON Lines by default" in text
    from django.test import Client

    from tests.factories import MembershipFactory, StudyFactory, UserFactory

    lead = UserFactory()
    study = StudyFactory(slug="drift")
    MembershipFactory(study=study, user=lead, role="lead")
    client = Client()
    client.force_login(lead)
    r = client.get("/api/studies/drift/annotations/export")
    assert r.status_code == 200 and r["Content-Type"] == "application/x-ndjson"
