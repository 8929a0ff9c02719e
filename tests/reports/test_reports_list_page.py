"""The reports page lists snapshots of every kind (agreement, calibration, selection), each linked
to the page that reads it, and requests a calibration or selection snapshot through those pages'
own build forms (the same service as the API); in Chromium it is reachable from the navigation
and by keyboard and fits a 390 px screen."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db
HOSTILE = "<script>window.__pwned=1</script>"


def _snap(study: Study, kind: str, status: str = "done") -> ReportSnapshot:
    return ReportSnapshot.objects.create(study=study, kind=kind, status=status, params={},
                                         input_fingerprint="a" * 64)


def test_every_kind_is_listed_and_linked(study: Study, lead: Any) -> None:
    client = Client()
    client.force_login(lead)
    page = reverse("reports-list", kwargs={"slug": study.slug})
    assert "No reports yet." in client.get(page).content.decode()
    agreement = _snap(study, "agreement")
    calibration = _snap(study, "calibration")
    selection = _snap(study, "selection", status="pending")
    html = client.get(page).content.decode()
    assert f'href="/studies/alpha/reports/{agreement.pk}/">#{agreement.pk}' in html
    assert f'href="/studies/alpha/calibration?snapshot={calibration.pk}">#{calibration.pk}' in html
    assert f'href="/studies/alpha/selection/{selection.pk}/">#{selection.pk}' in html
    for word in ("Agreement", "Calibration", "Selection", "Pending", "Done"):
        assert f"<td>{word}</td>" in html
    # Newest first.
    assert html.index(f"#{selection.pk}<") < html.index(f"#{agreement.pk}<")
    # Another study's snapshots are not listed.
    other = StudyFactory(slug="other", owner=lead)
    MembershipFactory(study=other, user=lead, role=Membership.Role.LEAD)
    foreign = _snap(other, "calibration")
    assert f"snapshot={foreign.pk}" not in client.get(page).content.decode()


def test_build_buttons_post_to_each_kinds_page(study: Study, lead: Any) -> None:
    client = Client()
    client.force_login(lead)
    html = client.get(reverse("reports-list", kwargs={"slug": study.slug})).content.decode()
    assert 'action="/studies/alpha/calibration"' in html
    assert 'action="/studies/alpha/selection/"' in html
    r = client.post("/studies/alpha/calibration", {"action": "build"})
    assert r.status_code == 302
    r = client.post("/studies/alpha/selection/", {"action": "build"})
    assert r.status_code == 302
    kinds = sorted(ReportSnapshot.objects.filter(study=study).values_list("kind", flat=True))
    assert kinds == ["calibration", "selection"]
    listing = client.get(reverse("reports-list", kwargs={"slug": study.slug})).content.decode()
    assert listing.count("<td>Pending</td>") == 2


def test_only_leads(study: Study) -> None:
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        user = UserFactory()
        MembershipFactory(study=study, user=user, role=role)
        c = Client()
        c.force_login(user)
        assert c.get(reverse("reports-list", kwargs={"slug": study.slug})).status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_reports_page_in_chromium(new_session: Any, viewport: str) -> None:
    lead = UserFactory(username="reports-lead")
    lead.set_password("pw-reports-lead-1")
    lead.save()
    study = StudyFactory(slug="rep", owner=lead, name=HOSTILE)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    _snap(study, "agreement")
    cal = _snap(study, "calibration")
    s = new_session(viewport)
    s.login("reports-lead", "pw-reports-lead-1")
    page = s.page
    page.goto(s.url("/studies/rep/"))
    page.get_by_role("link", name="Reports", exact=True).first.click()
    assert page.url.endswith("/studies/rep/reports/")
    assert page.locator("#reports-table tbody tr").count() == 2
    # Keyboard: the calibration build button is reachable with Tab.
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == \
                "build-calibration":
            break
    else:
        raise AssertionError("the build button is not reachable by keyboard")
    page.get_by_role("link", name=f"#{cal.pk}").click()
    page.wait_for_url(f"**/studies/rep/calibration?snapshot={cal.pk}")
    page.go_back()
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
