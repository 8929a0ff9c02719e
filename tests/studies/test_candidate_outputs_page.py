"""A candidate's outputs page: every output reachable (keyset pages of 50 in id order), found by
item id prefix, in a bounded number of queries at any depth, escaped, and for leads only; in
Chromium the pages are walked by keyboard and fit a 390 px screen."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from studies.models import Candidate, Membership, Output
from studies.views import OUTPUTS_PAGE_SIZE
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db
DATA = "/studies/beta/data/"
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
# Session, user, study and role, candidate with its count, the page of outputs.
QUERY_BOUND = 6
N_OUTPUTS = 130  # three pages: 50, 50, 30


def _seed() -> tuple[Any, Candidate]:
    lead = UserFactory(username="outputs-lead")
    lead.set_password("pw-outputs-lead-1")
    lead.save()
    study = StudyFactory(slug="beta", owner=lead)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    client = Client()
    client.force_login(lead)
    from django.core.files.uploadedfile import SimpleUploadedFile

    def post(kind: str, lines: list[dict[str, Any]]) -> None:
        body = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        r = client.post(DATA, {"kind": kind, "file": SimpleUploadedFile(f"{kind}.jsonl", body)})
        assert r.status_code == 200, r.content.decode()[:400]

    post("items", [{"external_id": f"it-{i:03d}", "input": "q"} for i in range(N_OUTPUTS)])
    post("candidates", [{"name": "m-a"}, {"name": "m-b"}])
    post("outputs", [{"item": f"it-{i:03d}", "candidate": c, "text": f"{c} says {i}"}
                     for c in ("m-a", "m-b") for i in range(N_OUTPUTS)])
    # One output whose text is a script payload (item 0 of m-b is re-uploaded with it).
    post("outputs", [{"item": "it-000", "candidate": "m-b", "text": PAYLOAD}])
    return lead, Candidate.objects.get(study=study, name="m-a")


def _texts(html: str) -> list[str]:
    return re.findall(r'<td class="output-text">([^<]*)</td>', html)


def test_every_output_is_reached_page_by_page_in_bounded_queries(
        django_assert_max_num_queries: Any) -> None:
    lead, cand = _seed()
    client = Client()
    client.force_login(lead)
    url = f"/studies/beta/data/candidates/{cand.pk}/outputs/"
    # The data page links each candidate's outputs page.
    assert f'href="{url}"' in client.get(DATA).content.decode()
    seen: list[str] = []
    nxt: str | None = url
    pages = 0
    while nxt:
        with django_assert_max_num_queries(QUERY_BOUND):
            r = client.get(nxt)
        assert r.status_code == 200
        html = r.content.decode()
        seen += _texts(html)
        m = re.search(r'id="next-page" rel="next"[^>]*>|href="\?([^"]*)" id="next-page"', html)
        nxt = url + "?" + m.group(1).replace("&amp;", "&") if m and m.group(1) else None
        pages += 1
    assert pages == 3
    expected = [o.text for o in Output.objects.filter(candidate=cand).order_by("id")]
    assert len(expected) == N_OUTPUTS and seen == expected
    assert len(_texts(client.get(url).content.decode())) == OUTPUTS_PAGE_SIZE


def test_item_prefix_filter_and_bad_cursor() -> None:
    lead, cand = _seed()
    client = Client()
    client.force_login(lead)
    url = f"/studies/beta/data/candidates/{cand.pk}/outputs/"
    html = client.get(url, {"item": "it-12"}).content.decode()
    # it-120..it-129 (not it-012: a prefix, not a substring)
    assert _texts(html) == [f"m-a says {i}" for i in range(120, 130)]
    assert "No output of an item" in client.get(url, {"item": "zz"}).content.decode()
    bad = client.get(url, {"after": "1;drop"})
    assert bad.status_code == 400 and "<strong>after</strong>" in bad.content.decode()
    # Another study's candidate id is not found here.
    other = StudyFactory(slug="gamma", owner=lead)
    MembershipFactory(study=other, user=lead, role=Membership.Role.LEAD)
    assert client.get(f"/studies/gamma/data/candidates/{cand.pk}/outputs/").status_code == 404


def test_text_is_escaped_and_only_leads_see_it() -> None:
    lead, cand = _seed()
    b = Candidate.objects.get(study=cand.study, name="m-b")
    url = f"/studies/beta/data/candidates/{b.pk}/outputs/"
    client = Client()
    client.force_login(lead)
    html = client.get(url).content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        user = UserFactory()
        MembershipFactory(study=cand.study, user=user, role=role)
        c = Client()
        c.force_login(user)
        assert c.get(url).status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_outputs_pages_by_keyboard_in_chromium(new_session: Any, viewport: str) -> None:
    _lead, cand = _seed()
    b = Candidate.objects.get(study=cand.study, name="m-b")
    s = new_session(viewport)
    s.login("outputs-lead", "pw-outputs-lead-1")
    page = s.page
    page.goto(s.url(DATA))
    page.get_by_role("link", name="All outputs of m-b").click()
    assert page.url.endswith(f"/candidates/{b.pk}/outputs/")
    assert page.locator("#outputs-table tbody tr").count() == OUTPUTS_PAGE_SIZE
    # Keyboard: focus the next-page link and follow it with Enter.
    page.locator("#next-page").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"after=\d+"))
    assert page.locator("#outputs-table tbody tr").count() == OUTPUTS_PAGE_SIZE
    page.locator("#item-filter").fill("it-00")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"item=it-00"))
    assert page.locator("#outputs-table tbody tr").count() == 10
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    assert not s.page_errors
