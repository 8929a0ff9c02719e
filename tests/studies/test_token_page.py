"""The account's API-token page: create (the secret shown once), list, revoke, scope and
read-only, errors named in the page, escaping, CSRF; and the same flow in Chromium, keyboard
only, at desktop and phone widths."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from studies.models import ApiToken, Membership
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory, api_token_create

pytestmark = pytest.mark.django_db
PAGE = "/account/tokens/"
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"


def _client(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _secret(html: str) -> str:
    match = re.search(r'id="new-token-secret">([^<]+)<', html)
    assert match, "no secret on the page"
    return match.group(1)


def test_created_secret_is_shown_once_and_works_over_the_api() -> None:
    user = UserFactory()
    study = StudyFactory(slug="alpha")
    MembershipFactory(user=user, study=study, role=Membership.Role.LEAD)
    client = _client(user)
    r = client.post(PAGE, {"name": "nightly ingest", "study": "", "can_write": "on"})
    assert r.status_code == 201 and r["Cache-Control"] == "no-store"
    secret = _secret(r.content.decode())
    token = ApiToken.objects.get(user=user)
    assert token.name == "nightly ingest" and token.can_write and token.study is None
    assert secret not in token.key_hash  # only a digest is stored
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.get("/api/tokens").status_code == 200
    again = client.get(PAGE).content.decode()
    assert secret not in again and "nightly ingest" in again and token.prefix in again


def test_a_scoped_read_only_token_reads_its_study_and_cannot_write() -> None:
    user = UserFactory()
    study = StudyFactory(slug="alpha")
    MembershipFactory(user=user, study=study, role=Membership.Role.LEAD)
    r = _client(user).post(PAGE, {"name": "reader", "study": "alpha"})
    assert r.status_code == 201
    token = ApiToken.objects.get(user=user)
    assert token.study == study and not token.can_write
    api = Client(HTTP_AUTHORIZATION=f"Bearer {_secret(r.content.decode())}")
    assert api.get("/api/studies/alpha").status_code == 200
    assert api.patch("/api/studies/alpha", {"name": "x"},
                     content_type="application/json").status_code == 403


def test_bad_input_is_named_in_the_page_and_nothing_is_created() -> None:
    user = UserFactory()
    StudyFactory(slug="not-mine")
    client = _client(user)
    empty = client.post(PAGE, {"name": "  "})
    assert empty.status_code == 400
    assert "<strong>name</strong>" in empty.content.decode()
    foreign = client.post(PAGE, {"name": "x", "study": "not-mine"})
    assert foreign.status_code == 400
    assert "<strong>study</strong>: not one of your studies" in foreign.content.decode()
    long_name = client.post(PAGE, {"name": "n" * 101})
    assert long_name.status_code == 400
    assert not ApiToken.objects.exists()


def test_revoke_own_token_only_and_it_stops_working() -> None:
    owner, other = UserFactory(), UserFactory()
    secret = api_token_create(user=owner, name="mine")
    token = ApiToken.objects.get(user=owner)
    assert _client(other).post(f"/account/tokens/{token.pk}/revoke").status_code == 404
    r = _client(owner).post(f"/account/tokens/{token.pk}/revoke", follow=True)
    assert r.status_code == 200 and "revoked" in r.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/tokens").status_code == 401
    # Revoked tokens are gone from the page; a second revoke is a 404.
    assert "mine" not in _client(owner).get(PAGE).content.decode().split("Live tokens")[1]
    assert _client(owner).post(f"/account/tokens/{token.pk}/revoke").status_code == 404


def test_names_are_escaped_posts_need_csrf_and_anonymous_users_sign_in() -> None:
    user = UserFactory()
    api_token_create(user=user, name=PAYLOAD[:100])
    html = _client(user).get(PAGE).content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html
    assert _client(user, csrf=True).post(PAGE, {"name": "x"}).status_code == 403
    r = Client().get(PAGE)
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
    assert "Content-Security-Policy" in _client(user).get(PAGE)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_keyboard_only_create_and_revoke_in_chromium(new_session: Any, viewport: str) -> None:
    user = UserFactory(username="lead-kb")
    user.set_password("pw-lead-kb")
    user.save()
    # The phone run types the XSS payload into every field; the desktop one makes the docs'
    # screenshot with plain names.
    hostile = viewport == "phone"
    study = StudyFactory(slug="alpha", name="Alpha " + PAYLOAD if hostile else "Support answers")
    MembershipFactory(user=user, study=study, role=Membership.Role.LEAD)
    s = new_session(viewport)
    s.login("lead-kb", "pw-lead-kb")
    page = s.page
    # The navigation reaches the page.
    page.get_by_role("link", name="API tokens").click()
    assert page.url.endswith(PAGE)
    page.locator("#token-name").focus()
    page.keyboard.type(PAYLOAD[:90] if hostile else "nightly ingest")
    page.keyboard.press("Tab")  # help text is not focusable: the scope select is next
    page.keyboard.press("ArrowDown")  # the first study
    page.keyboard.press("Tab")
    page.keyboard.press("Space")  # allow writes
    page.keyboard.press("Tab")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    secret = page.locator("#new-token-secret").inner_text()
    assert len(secret) > 20
    token = ApiToken.objects.get(user=user)
    assert token.study == study and token.can_write
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    if viewport == "desktop":
        s.screenshot("docs/img/api-tokens.png")
    page.get_by_role("button", name=re.compile("Revoke the token")).focus()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "revoked" in page.locator(".messages").inner_text()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert not s.page_errors
