"""The calibrated-score API: filters, cursor pages, snapshots by id, errors, access, export."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from calibration.export import CSV_COLUMNS
from studies.models import Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory

from .scores_factory import World, snapshot_make, world_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(study: Study) -> World:
    w = world_make(study)
    snapshot_make(w)  # an older snapshot
    snapshot_make(w)  # the latest
    return w


def _url(slug: str, name: str = "calibration-api-scores") -> str:
    return reverse(name, kwargs={"slug": slug})


def _all_pages(client: APIClient, url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    r = client.get(url, params)
    assert r.status_code == 200, r.content
    pages = 1
    rows.extend(r.json()["results"])
    while r.json()["next"]:
        r = client.get(r.json()["next"])
        assert r.status_code == 200, r.content
        rows.extend(r.json()["results"])
        pages += 1
    params["_pages"] = pages
    return rows


def test_list_serves_the_latest_snapshot_with_provenance(world: World, lead_client: APIClient
                                                         ) -> None:
    r = lead_client.get(_url(world.study.slug), {"page_size": 500})
    assert r.status_code == 200
    rows = r.json()["results"]
    # 6 outputs x (2 criteria x 2 judges + the rubric row)
    assert len(rows) == 30
    assert {row["provenance"]["snapshot_id"] for row in rows} == {world.snapshots[-1]}
    first = rows[0]
    out = world.outputs[0]
    assert first["output_id"] == out.pk and first["comparison_id"] is None
    assert first["item_external_id"] == "q0" and first["candidate"] == out.candidate.name
    assert first["strata"] == {"language": "de"} and first["stratum"] == "language=de"
    assert first["provenance"]["judge_version"] == world.judges[0].pk
    assert first["provenance"]["judge_version_hash"] == world.judges[0].content_hash
    assert first["provenance"]["plan_version"] == 1 and first["provenance"]["n_labels"] == 12
    assert set(first) == {"id", "output_id", "comparison_id", "item_external_id", "candidate",
                          "strata", "stratum", "criterion", "raw_value", "raw_confidence",
                          "p_pass", "p_low", "p_high", "decision", "expected_cost", "source",
                          "evidence_at", "provenance"}
    rubric = [row for row in rows if row["criterion"] == "rubric"]
    assert len(rubric) == 6 and all(row["provenance"]["judge_version"] is None for row in rubric)


def test_pages_cover_every_row_once_in_id_order(world: World, lead_client: APIClient) -> None:
    params: dict[str, Any] = {"page_size": 7}
    rows = _all_pages(lead_client, _url(world.study.slug), params)
    assert params["_pages"] == 5
    ids = [row["id"] for row in rows]
    assert len(ids) == 30 and ids == sorted(set(ids))


def test_page_query_count_is_bounded(world: World, lead_client: APIClient,
                                     django_assert_max_num_queries: Callable[..., Any]) -> None:
    # token + study/role + latest snapshot + the page (last_used updates aside)
    with django_assert_max_num_queries(6):
        r = lead_client.get(_url(world.study.slug), {"page_size": 20})
    assert r.status_code == 200 and len(r.json()["results"]) == 20


def test_snapshot_by_id_and_another_studys_snapshot(world: World, lead_client: APIClient,
                                                    lead: Any) -> None:
    older = world.snapshots[0]
    r = lead_client.get(_url(world.study.slug), {"snapshot": older, "page_size": 500})
    assert r.status_code == 200
    assert {row["provenance"]["snapshot_id"] for row in r.json()["results"]} == {older}
    other = StudyFactory(owner=lead, slug="beta")
    MembershipFactory(study=other, user=lead, role=Membership.Role.LEAD)
    foreign = snapshot_make(world_make(other, n_outputs=2))
    for url in (_url(world.study.slug), _url(world.study.slug, "calibration-api-export")):
        r = lead_client.get(url, {"snapshot": foreign.pk})
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"candidate": "m-large"}, lambda r, w: r["candidate"] == "m-large"),
        ({"criterion": "rubric"}, lambda r, w: r["criterion"] == "rubric"),
        ({"criterion": ["correct", "safe"]}, lambda r, w: r["criterion"] in ("correct", "safe")),
        ({"stratum": "language=de"}, lambda r, w: r["stratum"] == "language=de"),
        ({"decision": "escalate"}, lambda r, w: r["decision"] == "escalate"),
        ({"decision": ["pass", "fail"]}, lambda r, w: r["decision"] in ("pass", "fail")),
        ({"source": "judge"}, lambda r, w: r["source"] == "judge"),
        ({"changed_since": "2026-11-02T00:00:00Z"},
         lambda r, w: r["evidence_at"] >= "2026-11-02T00:00:00"),
    ],
)
def test_filters(world: World, lead_client: APIClient, params: dict[str, Any],
                 expected: Callable[[dict[str, Any], World], bool]) -> None:
    every = lead_client.get(_url(world.study.slug), {"page_size": 500}).json()["results"]
    r = lead_client.get(_url(world.study.slug), {**params, "page_size": 500})
    assert r.status_code == 200, r.content
    rows = r.json()["results"]
    assert rows, params
    assert [x["id"] for x in rows] == [x["id"] for x in every if expected(x, world)]


def test_judge_version_filter(world: World, lead_client: APIClient) -> None:
    jv = world.judges[1].pk
    rows = lead_client.get(_url(world.study.slug),
                           {"judge_version": jv, "page_size": 500}).json()["results"]
    assert len(rows) == 12 and {r["provenance"]["judge_version"] for r in rows} == {jv}


def test_changed_since_counts_exactly(world: World, lead_client: APIClient) -> None:
    # Rows of a snapshot have evidence at T0 + i hours, i = 0..29: 1 Nov 12:00 + 12 h onwards.
    rows = lead_client.get(_url(world.study.slug), {"changed_since": "2026-11-02T00:00:00",
                                                    "page_size": 500}).json()["results"]
    assert len(rows) == 18


@pytest.mark.parametrize(
    ("param", "value"),
    [("decision", "maybe"), ("source", "robot"), ("judge_version", "abc"),
     ("judge_version", "99999999999999999999"), ("changed_since", "yesterday"),
     ("changed_since", "0001-01-01T00:00:00+23:59"), ("snapshot", "-3"), ("snapshot", "x")],
)
def test_bad_filter_is_a_400_naming_it(world: World, lead_client: APIClient, param: str,
                                       value: str) -> None:
    for name in ("calibration-api-scores", "calibration-api-export"):
        r = lead_client.get(_url(world.study.slug, name), {param: value})
        assert r.status_code == 400, (name, r.content)
        body = r.json()["error"]
        assert body["code"] == "validation_failed"
        assert body["details"]["errors"][0]["path"] == param


def test_bad_format_and_bad_cursor(world: World, lead_client: APIClient) -> None:
    r = lead_client.get(_url(world.study.slug, "calibration-api-export"), {"format": "xml"})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["path"] == "format"
    import base64

    for position in ("abc", "", "9" * 30):
        cursor = base64.b64encode(f"p={position}".encode()).decode()
        r = lead_client.get(_url(world.study.slug), {"cursor": cursor})
        assert r.status_code == 404, position


def test_no_snapshot_yet_is_an_empty_list(study: Study, lead_client: APIClient) -> None:
    r = lead_client.get(_url(study.slug))
    assert r.status_code == 200 and r.json()["results"] == []
    export = _url(study.slug, "calibration-api-export")
    assert _stream(lead_client.get(export, {"format": "jsonl"})) == ""
    assert _stream(lead_client.get(export, {"format": "csv"})).splitlines() == [
        ",".join(CSV_COLUMNS)]


def test_who_may_read(world: World, client_for: Callable[..., APIClient]) -> None:
    viewer, annotator, stranger = (UserFactory(username=n) for n in ("v", "a", "s"))
    MembershipFactory(study=world.study, user=viewer, role=Membership.Role.VIEWER)
    MembershipFactory(study=world.study, user=annotator, role=Membership.Role.ANNOTATOR)
    for name in ("calibration-api-scores", "calibration-api-export"):
        url = _url(world.study.slug, name)
        assert client_for(viewer).get(url).status_code == 200
        r = client_for(annotator).get(url)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert client_for(stranger).get(url).status_code == 404
        assert APIClient().get(url).status_code == 401


def _stream(response: Any) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_export_jsonl_equals_the_list(world: World, lead_client: APIClient) -> None:
    listed = lead_client.get(_url(world.study.slug), {"page_size": 500}).json()["results"]
    r = lead_client.get(_url(world.study.slug, "calibration-api-export"), {"format": "jsonl"})
    assert r.status_code == 200 and r["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in _stream(r).splitlines()]
    assert lines == listed
    # Filters and an explicit snapshot apply as on the list.
    older = world.snapshots[0]
    r = lead_client.get(_url(world.study.slug, "calibration-api-export"),
                        {"snapshot": older, "decision": "fail"})
    lines = [json.loads(line) for line in _stream(r).splitlines()]
    assert lines and all(x["decision"] == "fail" and x["provenance"]["snapshot_id"] == older
                         for x in lines)


def _from_csv(row: dict[str, str]) -> dict[str, Any]:
    def num(v: str, kind: type) -> Any:
        return None if v == "" else kind(v)

    return {
        "id": int(row["id"]), "output_id": num(row["output_id"], int),
        "comparison_id": num(row["comparison_id"], int),
        "item_external_id": row["item_external_id"] or None,
        "candidate": row["candidate"] or None, "strata": json.loads(row["strata"]),
        "stratum": row["stratum"], "criterion": row["criterion"], "raw_value": row["raw_value"],
        "raw_confidence": num(row["raw_confidence"], float), "p_pass": float(row["p_pass"]),
        "p_low": num(row["p_low"], float), "p_high": num(row["p_high"], float),
        "decision": row["decision"], "expected_cost": float(row["expected_cost"]),
        "source": row["source"], "evidence_at": row["evidence_at"] or None,
        "provenance": {
            "judge_version": num(row["judge_version"], int),
            "judge_version_hash": row["judge_version_hash"],
            "snapshot_id": int(row["snapshot_id"]),
            "plan_version": num(row["plan_version"], int), "n_labels": int(row["n_labels"]),
        },
    }


def test_export_csv_parses_back_to_the_list(world: World, lead_client: APIClient) -> None:
    listed = lead_client.get(_url(world.study.slug), {"page_size": 500}).json()["results"]
    r = lead_client.get(_url(world.study.slug, "calibration-api-export"), {"format": "csv"})
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert "attachment" in r["Content-Disposition"]
    reader = csv.DictReader(io.StringIO(_stream(r)))
    assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
    assert [_from_csv(row) for row in reader] == listed


def test_export_spans_several_chunks(world: World, lead_client: APIClient,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from calibration import selectors

    original = selectors.calibrated_scores_chunks
    monkeypatch.setattr("calibration.export.calibrated_scores_chunks",
                        lambda qs, **kw: original(qs, **{**kw, "chunk": 4}))
    monkeypatch.setattr("calibration.export.COPY_CHUNK", 4)
    listed = lead_client.get(_url(world.study.slug), {"page_size": 500}).json()["results"]
    for fmt in ("jsonl", "csv"):
        r = lead_client.get(_url(world.study.slug, "calibration-api-export"), {"format": fmt})
        text = _stream(r)
        if fmt == "jsonl":
            assert [json.loads(line) for line in text.splitlines()] == listed
        else:
            assert [_from_csv(row) for row in csv.DictReader(io.StringIO(text))] == listed


def _parsed_csv(blob: str) -> list[dict[str, Any]]:
    rows = [_from_csv(r) for r in csv.DictReader(io.StringIO(blob))]
    for r in rows:
        r["evidence_at"] = _when(r["evidence_at"])
    return rows


def _when(text: str | None) -> Any:
    return None if text is None else dt.datetime.fromisoformat(text)


def test_postgres_lines_equal_the_python_lines(world: World, study: Study) -> None:
    """The database-built lines (PostgreSQL) read back exactly as the Python-built ones, on
    text that needs quoting, escaping or neutralising, nulls, a comparison and odd floats."""
    from django.db import connection

    from calibration import export, selectors
    from calibration.models import CalibratedScore
    from tests.factories import ComparisonFactory

    if connection.vendor != "postgresql":
        pytest.skip("the database-built lines are PostgreSQL's")
    snap = world.snapshots[-1]
    cmp = ComparisonFactory(output_a=world.outputs[0], output_b=world.outputs[1], study=study,
                            item=world.outputs[0].item)
    hostile = ['=SUM(A1)', '-x', '-0.5', '+1e5', 'a "quoted", text\nwith newline', 'ü✓ 日本',
               '@me', '\ttab']
    for i, text in enumerate(hostile):
        CalibratedScore.objects.create(
            study=study, snapshot_id=snap, comparison=cmp if i % 2 else None,
            output=None if i % 2 else world.outputs[2], candidate=None,
            criterion_key=text[:60], stratum=text, strata={"language": text},
            raw_value=text[:64], raw_confidence=None if i % 3 else 1e-05,
            p_pass=1.0 if i % 2 else 0.1 + 0.2, p_low=None, p_high=None, decision="human",
            expected_cost=12345678.0, source="adjudicated", plan_version=None, n_labels=0,
            evidence_at=None if i == 3 else dt.datetime(2026, 1, 2, 3, 4, 5, 120 * i,
                                                         tzinfo=dt.UTC))
    qs = selectors.calibrated_scores_query(study=study, snapshot_id=snap, filters={})
    slow = [json.loads(x) for x in b"".join(export.export_jsonl(qs, fast=False)).splitlines()]
    fast = [json.loads(x) for x in b"".join(export.export_jsonl(qs, fast=True)).splitlines()]
    assert len(fast) == 38
    for rows in (slow, fast):
        for r in rows:
            r["evidence_at"] = _when(r["evidence_at"])
    assert fast == slow
    slow_csv = _parsed_csv(b"".join(export.export_csv(qs, fast=False)).decode())
    fast_csv = _parsed_csv(b"".join(export.export_csv(qs, fast=True)).decode())
    assert fast_csv == slow_csv and len(fast_csv) == 38
    by_id = {r["id"]: r for r in fast_csv}
    neutral = {r["stratum"] for r in by_id.values() if r["stratum"].startswith("'")}
    assert neutral == {"'=SUM(A1)", "'-x", "'@me", "'\ttab"}


def test_csv_neutralises_formulas_but_not_numbers() -> None:
    from calibration.export import csv_cell

    assert csv_cell("candidate", "=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert csv_cell("raw_value", "-0.5") == "-0.5"
    assert csv_cell("raw_value", "-x") == "'-x"
    assert csv_cell("p_pass", 0.1) == "0.1"
