"""The sampling-plans page: a preview shows how many outputs each stratum gets and writes
nothing; "Create" draws exactly what was previewed (same seed) through the API's service;
bad settings are named; only leads reach it; and the same in Chromium, keyboard only."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from annotations.models import QueueEntry, SamplingPlan
from studies.models import Item, Membership, StratumDimension
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
PAGE = "/studies/support/annotation/plans/"


def _study_with_languages() -> Any:
    g = grading_study()
    StratumDimension.objects.create(study=g.study, key="lang", name="Language",
                                    kind="categorical", source="metadata.lang")
    for i, item in enumerate(Item.objects.filter(study=g.study).order_by("id")):
        item.strata = {"lang": "de" if i % 3 == 0 else "en"}
        item.save(update_fields=["strata"])
    return g


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(html: str) -> dict[str, tuple[int, int]]:
    table = re.search(r'id="preview-table".*?</table>', html, re.S)
    assert table, "no preview table"
    return {h: (int(n), int(d)) for h, n, d in re.findall(
        r'<th scope="row">([^<]+)</th><td class="num">(\d+)</td><td class="num">(\d+)</td>',
        table.group(0))}


def test_preview_writes_nothing_and_create_draws_what_was_previewed() -> None:
    g = _study_with_languages()
    client = _client(g.lead)
    n_de = sum(1 for i in Item.objects.filter(study=g.study) if i.strata["lang"] == "de")
    n_en = Item.objects.filter(study=g.study).count() - n_de
    before = SamplingPlan.objects.count(), QueueEntry.objects.count()
    r = client.post(PAGE, {"action": "preview", "mode": "per_stratum", "dimension": "lang",
                           "n": "2", "k": "2", "gold_rate": "0"})
    assert r.status_code == 200
    html = r.content.decode()
    assert _rows(html) == {"de": (n_de, min(2, n_de)), "en": (n_en, min(2, n_en))}
    assert (SamplingPlan.objects.count(), QueueEntry.objects.count()) == before
    seed = re.search(r'name="seed" id="plan-seed" min="0" value="(\d+)"', html)
    assert seed, "the preview's seed is put into the form"
    # The same settings through the service with the previewed seed: the same draw.
    r = client.post(PAGE, {"action": "create", "mode": "per_stratum", "dimension": "lang",
                           "n": "2", "k": "2", "gold_rate": "0", "seed": seed.group(1)})
    assert r.status_code == 302 and r["Location"] == "/studies/support/annotation/queue/"
    plan = SamplingPlan.objects.get(study=g.study, is_active=True)
    assert plan.version == 2 and plan.k == 2 and plan.spec["seed"] == int(seed.group(1))
    assert plan.summary["allocation"] == {"de": min(2, n_de), "en": min(2, n_en)}
    listing = client.get(PAGE).content.decode()
    assert "v2" in listing and "superseded" in listing


@pytest.mark.parametrize(("form", "field"), [
    ({"mode": "per_stratum", "dimension": "lang", "k": "2"}, "spec.n"),
    ({"mode": "proportional", "k": "2", "total": "3"}, "spec.dimension"),
    ({"mode": "all", "k": "0"}, "k"),
    ({"mode": "all", "k": "two"}, "k"),
    ({"mode": "all", "k": "2", "gold_rate": "1.5"}, "gold_rate"),
    ({"mode": "all", "k": "2", "dimension": "nope"}, "spec.dimension"),
    ({"mode": "all", "k": "2", "n": "1.5"}, "n"),
])
def test_bad_settings_are_a_400_naming_the_field(form: dict[str, str], field: str) -> None:
    g = _study_with_languages()
    before = SamplingPlan.objects.count()
    for action in ("preview", "create"):
        r = _client(g.lead).post(PAGE, {"action": action, **form})
        assert r.status_code == 400
        assert f"<strong>{field}</strong>" in r.content.decode()
    assert SamplingPlan.objects.count() == before


def test_only_leads_reach_the_page_and_the_queue_links_to_it() -> None:
    g = _study_with_languages()
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        user = UserFactory()
        MembershipFactory(study=g.study, user=user, role=role)
        assert _client(user).get(PAGE).status_code == 404
        assert _client(user).post(PAGE, {"action": "create", "k": "1"}).status_code == 404
    lead = _client(g.lead)
    assert 'href="/studies/support/annotation/plans/"' in lead.get(
        "/studies/support/annotation/queue/").content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_preview_then_create_with_the_keyboard_in_chromium(new_session: Any,
                                                           viewport: str) -> None:
    g = _study_with_languages()
    s = new_session(viewport)
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url("/studies/support/"))
    page.get_by_role("link", name="Plans", exact=True).click()
    assert page.url.endswith(PAGE)
    page.locator("#plan-mode").select_option("per_stratum")
    page.locator("#plan-dimension").select_option("lang")
    page.locator("#plan-n").focus()
    page.keyboard.type("1")
    with page.expect_navigation():
        page.get_by_role("button", name="Preview").press("Enter")
    assert page.locator("#preview-table tbody tr").count() == 2
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    if viewport == "desktop":
        s.screenshot("docs/img/sampling-plan-preview.png")
    with page.expect_navigation():
        page.get_by_role("button", name="Create plan").press("Enter")
    assert "Sampling plan v2 created: 2 entries" in page.locator(".messages").inner_text()
    assert not s.page_errors
