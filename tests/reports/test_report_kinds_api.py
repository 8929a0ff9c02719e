"""The reports API builds and reads calibration snapshots at reports/calibration/ as it does
agreement reports at reports/agreement/; a snapshot of one kind is a 404 under the other's
URL; bad params are a 400 naming the parameter and create nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from reports.services import report_compute
from snapshots.models import ReportSnapshot
from tests.browser.factories import grading_study

pytestmark = pytest.mark.django_db
BASE = "/api/studies/support/reports/calibration/"
AGREEMENT = "/api/studies/support/reports/agreement/"


def _client() -> tuple[Any, APIClient]:
    g = grading_study()
    client = APIClient()
    client.force_authenticate(g.lead)
    return g, client


def test_build_list_and_read_a_calibration_snapshot() -> None:
    _g, client = _client()
    r = client.post(BASE, {"params": {"folds": 3}}, format="json")
    assert r.status_code == 202, r.json()
    body = r.json()
    assert body["kind"] == "calibration" and body["url"] == f"{BASE}{body['id']}/"
    report_compute(report_id=body["id"])
    assert ReportSnapshot.objects.get(pk=body["id"]).status == ReportSnapshot.Status.DONE
    listed = client.get(BASE).json()["results"]
    assert [x["id"] for x in listed] == [body["id"]]
    assert client.get(AGREEMENT).json()["results"] == []
    detail = client.get(body["url"])
    assert detail.status_code == 200 and detail.json()["result"]["kind"] == "calibration"
    assert client.get(f"{AGREEMENT}{body['id']}/").status_code == 404  # not an agreement report


def test_bad_params_name_the_field_and_create_nothing() -> None:
    _g, client = _client()
    r = client.post(BASE, {"params": {"folds": 1}}, format="json")
    assert r.status_code == 400 and "params.folds" in str(r.json()["error"]["details"])
    assert not ReportSnapshot.objects.exists()
