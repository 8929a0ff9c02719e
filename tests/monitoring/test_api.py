"""The monitoring API: access, the ingest error shape, idempotent batches, windows, export."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from monitoring.models import Deployment, TrafficRow
from studies.models import Membership
from tests.factories import MembershipFactory, UserFactory, api_token_create

pytestmark = pytest.mark.django_db


def _rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"request_id": f"a{i}", "input": f"q{i}", "output": "fine",
             "metadata": {"language": "de"}, "latency_ms": 100 + i,
             "occurred_at": "2026-12-07T09:30:00Z"} for i in range(start, start + n)]


def test_traffic_batches_are_idempotent(lead_client: APIClient, deployment: Deployment) -> None:
    url = f"/api/deployments/{deployment.pk}/traffic"
    first = lead_client.post(url, _rows(5), format="json")
    assert first.status_code == 200, first.content
    assert first.json() == {"created": 5, "unchanged": 0}
    again = lead_client.post(url, _rows(6), format="json")
    assert again.json() == {"created": 1, "unchanged": 5}
    assert TrafficRow.objects.filter(deployment=deployment).count() == 6


def test_a_bad_batch_is_a_400_naming_row_and_field(lead_client: APIClient,
                                                   deployment: Deployment) -> None:
    rows = _rows(3)
    rows[2]["cost"] = -1
    del rows[1]["input"]
    response = lead_client.post(f"/api/deployments/{deployment.pk}/traffic", rows,
                                format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert [(e["path"], e["index"]) for e in error["details"]["errors"]] == [
        ("[1].input", 1), ("[2].cost", 2)]
    assert error["details"]["rows_with_errors"] == 2
    assert not TrafficRow.objects.exists()
    not_array = lead_client.post(f"/api/deployments/{deployment.pk}/traffic",
                                 {"rows": []}, format="json")
    assert not_array.status_code == 400


def test_access(deployment: Deployment, study: Any) -> None:
    annotator = UserFactory(username="ann")
    MembershipFactory(study=study, user=annotator, role=Membership.Role.ANNOTATOR)
    viewer = UserFactory(username="viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    stranger = UserFactory(username="stranger")
    url = f"/api/deployments/{deployment.pk}"
    for user, get, post in ((annotator, 403, 403), (viewer, 200, 403), (stranger, 404, 404)):
        client = APIClient()
        client.force_authenticate(user)
        assert client.get(url).status_code == get, user
        assert client.post(url + "/traffic", _rows(1), format="json").status_code == post
    read_only = APIClient()
    read_only.credentials(HTTP_AUTHORIZATION="Bearer " + api_token_create(
        user=deployment.study.owner, can_write=False))
    assert read_only.post(url + "/traffic", _rows(1), format="json").status_code == 403
    assert APIClient().get("/api/deployments/999999").status_code in (401, 403)


def test_create_windows_and_export(lead_client: APIClient, shipped_study: Any) -> None:
    created = lead_client.post(f"/api/studies/{shipped_study.slug}/deployments", {
        "name": "prod", "candidate": "shipped",
        "sampling": {"judge": {"default": 1.0}, "human": {"default": 0.5}}}, format="json")
    assert created.status_code == 201, created.content
    dep = created.json()["id"]
    assert created.json()["watch_dimension"] == "lang"
    bad = lead_client.post(f"/api/studies/{shipped_study.slug}/deployments",
                           {"name": "x", "candidate": "ghost"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["errors"][0]["path"] == "candidate"
    lead_client.post(f"/api/deployments/{dep}/traffic", _rows(20), format="json")
    body = {"granularity": "hour", "start": "2026-12-07T09:00:00Z"}
    computed = lead_client.post(f"/api/deployments/{dep}/windows", body, format="json")
    assert computed.status_code == 200, computed.content
    assert computed.json()["n_rows"] == 20
    assert lead_client.post(f"/api/deployments/{dep}/windows",
                            {"granularity": "hour", "start": "2026-12-07T09:30:00Z"},
                            format="json").status_code == 400
    listed = lead_client.get(f"/api/deployments/{dep}/windows?granularity=hour").json()
    assert len(listed["results"]) == 1
    export = lead_client.get(f"/api/deployments/{dep}/windows/export?format=csv")
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [r["stratum"] for r in rows] == ["", "de"]
    assert rows[0]["n_rows"] == "20"
    as_json = lead_client.get(f"/api/deployments/{dep}/windows/export?format=json").json()
    assert as_json["rows"][1]["stratum"] == "de"


def test_reopen_the_selection_with_recent_traffic(lead_client: APIClient,
                                                  deployment: Deployment) -> None:
    from django.utils import timezone

    from studies.models import Item, Output, Study
    now = timezone.now().isoformat()
    rows = [{**r, "occurred_at": now} for r in _rows(4)]
    rows[3]["error"] = "timeout"
    lead_client.post(f"/api/deployments/{deployment.pk}/traffic", rows, format="json")
    bad = lead_client.post(f"/api/deployments/{deployment.pk}/reopen", {"days": 0},
                           format="json")
    assert bad.status_code == 400 and bad.json()["error"]["details"]["errors"][0]["path"] == \
        "days"
    response = lead_client.post(f"/api/deployments/{deployment.pk}/reopen", {"days": 2},
                                format="json")
    assert response.status_code == 201, response.content
    new = Study.objects.get(slug=response.json()["study"])
    assert new.status == "draft" and new.slug.startswith("alpha-reopened-")
    # The failed request is left out; the others are items, with the live answers as outputs.
    items = Item.objects.filter(study=new)
    assert sorted(items.values_list("external_id", flat=True)) == ["a0", "a1", "a2"]
    assert items.get(external_id="a1").strata["lang"] == "de"  # the new study's scheme
    outputs = Output.objects.filter(study=new)
    assert outputs.count() == 3 and {o.candidate.name for o in outputs} == {"shipped"}
    assert outputs.get(item__external_id="a2").latency_ms == 102
    assert [c.key for c in new.rubric_versions.get().criteria.all()] == ["ok"]
    assert sorted(new.dimensions.values_list("key", flat=True)) == ["lang", "len"]
