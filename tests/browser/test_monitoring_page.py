"""A deployment's monitoring page in Chromium: the state per stratum in words, the pass-rate
chart drawn as an image, a model-written script shown as text and never run, an alert
acknowledged and resolved with the page's buttons, and no sideways scroll on a phone."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from monitoring import alerts
from monitoring.models import Alert, Deployment
from monitoring.services import (
    deployment_create,
    traffic_ingest,
    traffic_labels_record,
    window_compute,
)
from monitoring.window.params import WindowParams
from studies.models import Membership
from studies.services import dimension_set, plan_create, plan_lock, rubric_update
from tests.browser.factories import PASSWORD
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import CandidateFactory, MembershipFactory, StudyFactory, UserFactory

T0 = dt.datetime(2026, 12, 7, 0, tzinfo=dt.UTC)
EVIL = "<img src=x onerror=window.__pwned=1>"


def _deployment() -> Deployment:
    lead = UserFactory(username="mon-lead")
    study = StudyFactory(owner=lead, slug="shop", name="Shop assistant")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    rubric_update(study=study, criteria=[{"key": "ok", "name": "OK", "scale": "binary"}],
                  created_by=lead)
    dimension_set(study=study, dimensions=[{"key": "lang", "kind": "categorical",
                                            "source": "metadata.language",
                                            "config": {"values": ["en", "de"]}}])
    CandidateFactory(study=study, name="shipped")
    plan = plan_create(study=study, created_by=lead, spec={
        "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.8}},
        "deployment_mix": {"lang": {"en": 0.5, "de": 0.5}},
        "gates": {"error_rate": 0.05}})
    plan_lock(plan=plan, user=lead)
    # The second day is far enough below the floor that the alert does not depend on the
    # draws (they follow the deployment's id).
    dep = deployment_create(study=study, name=f"web {EVIL}", candidate="shipped",
                            sampling_spec={"judge": {"default": 1.0},
                                           "human": {"default": 0.5}})
    Deployment.objects.filter(pk=dep.pk).update(created_at=T0)
    dep.refresh_from_db()
    for day, share in ((0, 0.95), (1, 0.1)):
        start = T0 + dt.timedelta(days=day)
        rows = [{"request_id": f"d{day}-{i}", "input": "hi", "output": EVIL,
                 "metadata": {"language": "de" if i % 2 else "en"},
                 "occurred_at": (start + dt.timedelta(minutes=i)).isoformat()}
                for i in range(240)]
        traffic_ingest(deployment=dep, rows=rows)
        labels = []
        for i, r in enumerate(rows):
            value = float(i % 100 < share * 100)
            labels += [{"request_id": r["request_id"], "source": s, "rater": s, "value": value}
                       for s in ("judge", "human")]
        traffic_labels_record(deployment=dep, labels=labels)
        window_compute(deployment=dep, params=WindowParams("day", start))
        for h in range(4):
            window_compute(deployment=dep, params=WindowParams(
                "hour", start + dt.timedelta(hours=h)))
    alerts.alerts_evaluate(deployment=dep, now=T0 + dt.timedelta(days=2))
    return dep


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_monitoring_page_in_chromium(new_session: Any) -> None:
    dep = _deployment()
    assert Alert.objects.filter(deployment=dep, dedup_key="pass_rate|").exists()
    s = new_session("desktop")
    s.login("mon-lead", PASSWORD)
    page = s.page
    page.goto(s.url(f"/studies/shop/deployments/{dep.pk}/"))
    states = page.locator(".monitoring-state")
    assert states.count() == 3  # all traffic, de, en
    assert "All traffic: pass rate" in states.first.inner_text()
    assert "was 9" in states.first.inner_text()
    assert EVIL in page.locator("h1").inner_text()  # shown as text
    assert page.evaluate("window.__pwned === undefined")
    chart = page.locator("img[src*='pass-rate.svg']").first
    chart.wait_for()
    assert page.evaluate("img => img.complete && img.naturalWidth > 100",
                         chart.element_handle())
    s.screenshot("docs/img/monitoring-page.png")

    row = page.locator("tr", has_text="pass rate on all traffic")
    row.get_by_role("button", name="Acknowledge").click()
    page.wait_for_load_state()
    row = page.locator("tr", has_text="pass rate on all traffic")
    assert "acknowledged" in row.inner_text()
    row.get_by_role("button", name="Resolve").click()
    page.wait_for_load_state()
    assert Alert.objects.get(deployment=dep, dedup_key="pass_rate|").status == "resolved"
    assert not s.page_errors

    phone = new_session("phone")
    phone.login("mon-lead", PASSWORD)
    phone.page.goto(phone.url(f"/studies/shop/deployments/{dep.pk}/"))
    width = phone.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"horizontal scroll on a phone: {width}px"
