"""Password pages in the app's style: change (for signed-in users), and reset by e-mail only
when a mail server is configured; without one the page says to ask a study lead and sends
nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_without_a_mail_server_the_reset_page_says_to_ask_a_lead(settings: Any) -> None:
    settings.REVIEWHUB_EMAIL_ENABLED = False
    UserFactory(email="someone@example.com")
    for method in ("get", "post"):
        r = getattr(Client(), method)("/accounts/password_reset/", {"email": "someone@example.com"})
        html = r.content.decode()
        assert r.status_code == 200 and 'id="reset-unavailable"' in html
        assert "Members" in html and 'class="site-nav"' in html  # the app's layout
    assert mail.outbox == []
    assert "Forgot your password?" in Client().get("/accounts/login/").content.decode()


def test_with_a_mail_server_the_reset_link_sets_a_new_password(settings: Any) -> None:
    settings.REVIEWHUB_EMAIL_ENABLED = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    user = UserFactory(username="forgetful", email="forgetful@example.com")
    client = Client()
    form = client.get("/accounts/password_reset/").content.decode()
    assert 'name="email"' in form and 'class="site-nav"' in form
    r = client.post("/accounts/password_reset/", {"email": "forgetful@example.com"})
    assert r.status_code == 302 and len(mail.outbox) == 1
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", mail.outbox[0].body)
    assert link, mail.outbox[0].body
    page = client.get(link.group(1), follow=True)
    assert "Choose a new password" in page.content.decode()
    done = client.post(page.redirect_chain[-1][0], {"new_password1": "a-Long-new-pass-42",
                                                     "new_password2": "a-Long-new-pass-42"})
    assert done.status_code == 302
    user.refresh_from_db()
    assert user.check_password("a-Long-new-pass-42")


def test_change_password_page_is_styled_and_works() -> None:
    user = UserFactory(username="changer")
    user.set_password("old-Pass-123")
    user.save()
    client = Client()
    client.force_login(user)
    page = client.get("/accounts/password_change/").content.decode()
    assert 'class="site-nav"' in page and "Change your password" in page
    bad = client.post("/accounts/password_change/", {
        "old_password": "wrong", "new_password1": "x", "new_password2": "y"})
    assert bad.status_code == 200 and 'id="password-error"' in bad.content.decode()
    r = client.post("/accounts/password_change/", {
        "old_password": "old-Pass-123", "new_password1": "n3w-Pass-long-9",
        "new_password2": "n3w-Pass-long-9"}, follow=True)
    assert "Password changed" in r.content.decode()
    user.refresh_from_db()
    assert user.check_password("n3w-Pass-long-9")
