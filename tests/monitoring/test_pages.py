"""The monitoring pages: the state in words, charts with tables, alerts acknowledged and
resolved from the page, user text escaped, the chart an SVG image."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client

from monitoring import alerts
from monitoring.models import Alert, Deployment
from monitoring.services import (
    deployment_create,
    traffic_ingest,
    traffic_labels_record,
    window_compute,
)
from monitoring.window.params import WindowParams

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 12, 7, 0, tzinfo=dt.UTC)
EVIL = "<script>alert(1)</script>"


@pytest.fixture
def watched(shipped_study: Any, lead: Any) -> Deployment:
    # Half the rows graded by humans (the draws follow the deployment's id, which differs from
    # run to run); the second day's pass rate is far enough below the floor that the alert
    # below does not depend on which rows were drawn.
    dep = deployment_create(study=shipped_study, name=f"prod {EVIL}", candidate="shipped",
                            sampling_spec={"judge": {"default": 1.0},
                                           "human": {"default": 0.5}})
    Deployment.objects.filter(pk=dep.pk).update(created_at=T0)
    dep.refresh_from_db()
    for day, share in ((0, 0.92), (1, 0.1)):
        start = T0 + dt.timedelta(days=day)
        rows = [{"request_id": f"d{day}-{i}", "input": EVIL, "output": "ok",
                 "metadata": {"language": "de" if i % 3 == 0 else "en"},
                 "occurred_at": (start + dt.timedelta(minutes=i)).isoformat()}
                for i in range(240)]
        traffic_ingest(deployment=dep, rows=rows)
        labels = []
        for i, r in enumerate(rows):
            value = float(i % 100 < share * 100)
            labels.append({"request_id": r["request_id"], "source": "judge", "rater": "j",
                           "value": value})
            labels.append({"request_id": r["request_id"], "source": "human", "rater": "h",
                           "value": value})
        traffic_labels_record(deployment=dep, labels=labels)
        window_compute(deployment=dep, params=WindowParams("day", start))
        for h in range(4):
            window_compute(deployment=dep, params=WindowParams(
                "hour", start + dt.timedelta(hours=h)))
    alerts.alerts_evaluate(deployment=dep, now=T0 + dt.timedelta(days=2))
    return dep


def test_the_page_says_where_each_stratum_stands(watched: Deployment, lead: Any) -> None:
    client = Client()
    client.force_login(lead)
    url = f"/studies/{watched.study.slug}/deployments/{watched.pk}/"
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "lang = de: pass rate" in html and "(prediction-powered)" in html
    assert "was 9" in html  # the first day's rate, beside the latest
    assert "the judge agrees with humans on 100 %" in html
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "pass-rate.svg?granularity=day" in html
    assert Alert.objects.filter(deployment=watched).exists()
    assert "below the floor" in html
    listing = client.get(f"/studies/{watched.study.slug}/deployments/")
    assert listing.status_code == 200 and f"/deployments/{watched.pk}/" in listing.content.decode()


def test_alerts_are_acknowledged_and_resolved_from_the_page(watched: Deployment,
                                                            lead: Any) -> None:
    client = Client()
    client.force_login(lead)
    url = f"/studies/{watched.study.slug}/deployments/{watched.pk}/"
    alert = Alert.objects.filter(deployment=watched).first()
    assert alert is not None
    assert client.post(url, {"action": "acknowledge", "alert": alert.pk}).status_code == 302
    alert.refresh_from_db()
    assert alert.status == "acknowledged" and alert.acknowledged_by == lead
    assert client.post(url, {"action": "resolve", "alert": alert.pk}).status_code == 302
    alert.refresh_from_db()
    assert alert.status == "resolved"
    again = client.post(url, {"action": "resolve", "alert": alert.pk})
    assert again.status_code == 200 and "already resolved" in again.content.decode()


def test_the_chart_is_an_svg_image(watched: Deployment, lead: Any) -> None:
    client = Client()
    client.force_login(lead)
    response = client.get(f"/studies/{watched.study.slug}/deployments/{watched.pk}/"
                          "pass-rate.svg?granularity=hour&stratum=de")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert "default-src 'none'" in response["Content-Security-Policy"]
    body = response.content.decode()
    assert body.lstrip().startswith("<?xml") and "prediction-powered" in body
    assert "<script" not in body
