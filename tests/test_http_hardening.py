"""Request limits and response headers (reviewhub/middleware.py, reviewhub/throttling.py).

- Bodies: every endpoint but bulk ingest has a small limit (413 before anything is read);
  ingest keeps its large one; bodies without a Content-Length (chunked) get 411, tested over a
  real socket since the test client cannot send them.
- Throttles: wrong passwords lock a (username, address) pair out with 429 and Retry-After, even
  for the right password, on the site's and the admin's sign-in; bad API tokens from one address
  get 429 with Retry-After, for good tokens too, until the window clears.
- Headers: a CSP on every HTML page (per-view policies kept), `no-store` on API responses,
  Secure session cookies over https, Swagger UI from our own origin.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.test import APIClient

from imports.generic import ratings_import, ratings_read
from judges.models import Judge
from judges.runs import judge_run_start
from judges.services import judge_create, judge_version_for_config
from reports.agreement import params_validate
from reviewhub.throttling import TokenFailureThrottle
from snapshots.models import ReportSnapshot
from studies.models import Criterion, Item, Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory, api_token_create

PASSWORD = "pw-for-tests-123"
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    # Lockout tests try many passwords; the production hasher's cost buys nothing here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _json_body(size: int) -> bytes:
    """A valid JSON object of about `size` bytes."""
    return json.dumps({"name": "t", "padding": "x" * size}).encode()


def _error(response: Any) -> dict[str, Any]:
    body = json.loads(response.content)
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
    return dict(body["error"])


# --- request body limits -------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("method,path", [
    ("post", "/api/tokens"),
    ("post", "/api/studies"),
    ("patch", "/api/studies/alpha"),
    ("post", "/api/studies/alpha/members"),
    ("put", "/api/studies/alpha/strata"),
])
def test_api_bodies_over_the_default_limit_get_413(lead_client: APIClient, method: str,
                                                    path: str) -> None:
    body = _json_body(MIB + 10)
    response = getattr(lead_client, method)(path, body, content_type="application/json")
    assert response.status_code == 413, response.content[:300]
    error = _error(response)
    assert error["code"] == "payload_too_large"
    assert "REVIEWHUB_MAX_REQUEST_BYTES" in error["message"]
    assert error["details"]["limit_bytes"] == MIB


@pytest.mark.django_db
def test_a_user_with_no_membership_cannot_post_a_big_token_body(db: Any) -> None:
    # The probe's case: 101 MB to POST /api/tokens from an account that belongs nowhere.
    stranger = UserFactory(username="stranger")
    client = Client()
    client.force_login(stranger)
    response = client.post("/api/tokens", _json_body(2 * MIB), content_type="application/json")
    assert response.status_code == 413
    assert _error(response)["code"] == "payload_too_large"


@pytest.mark.django_db
def test_the_limit_is_decided_from_content_length_before_reading(
        lead_client: APIClient) -> None:
    # The declared length is over the limit but the body is 2 bytes: reading it would fail in
    # the test client, so a 413 proves nothing was read.
    response = lead_client.post("/api/tokens", b"{}", content_type="application/json",
                                CONTENT_LENGTH=str(MIB + 1))
    assert response.status_code == 413


@pytest.mark.django_db
def test_the_limit_is_a_setting_and_bodies_under_it_are_served(lead_client: APIClient,
                                                                settings: Any) -> None:
    settings.REVIEWHUB_MAX_REQUEST_BYTES = 2000
    small = lead_client.post("/api/tokens", {"name": "ok"}, format="json")
    assert small.status_code == 201, small.content
    big = lead_client.post("/api/tokens", _json_body(3000), content_type="application/json")
    assert big.status_code == 413 and _error(big)["details"]["limit_bytes"] == 2000


@pytest.mark.django_db
def test_html_forms_have_the_limit_too(db: Any) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"username": "x", "password": "y" * (MIB + 10)})
    assert response.status_code == 413
    assert _error(response)["code"] == "payload_too_large"


@pytest.mark.django_db
def test_bulk_ingest_still_takes_bodies_over_the_default_limit(lead_client: APIClient,
                                                               study: Any) -> None:
    rows = [{"external_id": f"big{k}", "input": "q" * 400_000} for k in range(3)]
    body = json.dumps(rows).encode()
    assert len(body) > MIB
    response = lead_client.post("/api/studies/alpha/items/bulk", body,
                                content_type="application/json")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["created"] == 3
    assert Item.objects.filter(study=study, external_id__startswith="big").count() == 3


@pytest.mark.django_db
def test_bulk_ingest_keeps_its_own_limit(lead_client: APIClient, study: Any,
                                         settings: Any) -> None:
    settings.REVIEWHUB_MAX_UPLOAD_BYTES = 500
    response = lead_client.post("/api/studies/alpha/items/bulk", _json_body(1000),
                                content_type="application/json")
    assert response.status_code == 413
    assert "REVIEWHUB_MAX_UPLOAD_BYTES" in _error(response)["message"]


def _chunked_post(base_url: str, path: str, body: bytes, headers: dict[str, str]) -> Any:
    """POST `body` with Transfer-Encoding: chunked and no Content-Length, over a socket.

    The whole request goes out in one write: a server that answers before reading the body
    may close the connection, and a second write would then fail with a broken pipe.
    """
    parts = urlsplit(base_url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Transfer-Encoding: chunked",
             "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    chunks = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n"
                      for c in (body[:10], body[10:]) if c) + b"0\r\n\r\n"
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80),
                                  timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + chunks)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


@pytest.mark.django_db(transaction=True)
def test_chunked_uploads_get_411_not_an_empty_ingest(live_server: Any) -> None:
    lead = UserFactory(username="chunk-lead")
    study = StudyFactory(owner=lead, slug="chunky")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    token = api_token_create(user=lead)
    rows = b'{"external_id": "c1", "input": "q"}\n{"external_id": "c2", "input": "q"}\n'
    status, _headers, content = _chunked_post(
        live_server.url, "/api/studies/chunky/items/bulk", rows,
        {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert status == 411, content
    error = json.loads(content)["error"]
    assert error["code"] == "length_required" and "Content-Length" in error["message"]
    assert not Item.objects.filter(study=study).exists()
    # Every other endpoint refuses a chunked body the same way instead of reading it as empty.
    status, _headers, content = _chunked_post(
        live_server.url, "/api/tokens", b'{"name": "chunked"}',
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert status == 411, content
    # The same rows with a Content-Length are ingested.
    parts = urlsplit(live_server.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    conn.request("POST", "/api/studies/chunky/items/bulk", body=rows, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
    ok = conn.getresponse()
    assert ok.status == 200, ok.read()
    conn.close()
    assert Item.objects.filter(study=study).count() == 2


# --- sign-in lockout -----------------------------------------------------------------------------


def _sign_in(client: Client, username: str, password: str, path: str = "/accounts/login/",
             **extra: Any) -> Any:
    return client.post(path, {"username": username, "password": password}, **extra)


@pytest.mark.django_db
def test_wrong_passwords_lock_the_account_out_from_that_address(settings: Any) -> None:
    UserFactory(username="victim", password=PASSWORD)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = _sign_in(client, "victim", "wrong-guess")
        assert response.status_code in (200, 429)
    # The right password no longer gets in while the lockout lasts.
    response = _sign_in(client, "victim", PASSWORD)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    assert "Too many sign-in attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert "Content-Security-Policy" in response


@pytest.mark.django_db
def test_under_the_limit_the_right_password_works_and_resets_the_count(settings: Any) -> None:
    UserFactory(username="typo", password=PASSWORD)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "typo", "wrong").status_code == 200
    assert _sign_in(client, "typo", PASSWORD).status_code == 302
    Client().logout()
    # The success cleared the failures: a full set of wrong guesses is needed again.
    other = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(other, "typo", "wrong").status_code == 200
    assert _sign_in(other, "typo", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_lockout_is_per_username_and_address(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="victim", password=PASSWORD)
    UserFactory(username="bystander", password=PASSWORD)
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(3):
        _sign_in(attacker, "victim", "wrong")
    assert _sign_in(attacker, "victim", PASSWORD).status_code == 429
    # Another account from the same address, and the same account from another address.
    assert _sign_in(Client(REMOTE_ADDR="203.0.113.9"), "bystander", PASSWORD).status_code == 302
    assert _sign_in(Client(REMOTE_ADDR="198.51.100.7"), "victim", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_a_forged_forwarded_for_does_not_reset_the_count(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="victim", password=PASSWORD)
    client = Client()
    for n in range(3):
        _sign_in(client, "victim", "wrong", HTTP_X_FORWARDED_FOR=f"10.9.9.{n}")
    assert _sign_in(client, "victim", PASSWORD,
                    HTTP_X_FORWARDED_FOR="10.9.9.200").status_code == 429


@pytest.mark.django_db
def test_the_admin_sign_in_is_locked_out_too(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="root", password=PASSWORD, is_staff=True, is_superuser=True)
    client = Client()
    for _ in range(3):
        _sign_in(client, "root", "wrong", path="/admin/login/")
    response = _sign_in(client, "root", PASSWORD, path="/admin/login/")
    assert response.status_code == 429 and "Retry-After" in response


@pytest.mark.django_db
def test_the_test_client_login_without_a_request_still_works(db: Any) -> None:
    UserFactory(username="plain", password=PASSWORD)
    assert Client().login(username="plain", password=PASSWORD)


# --- bad-token throttle --------------------------------------------------------------------------


def _bad_token_client(addr: str = "127.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=addr)
    client.credentials(HTTP_AUTHORIZATION="Bearer rh_not-a-real-token")
    return client


@pytest.mark.django_db
def test_bad_tokens_are_throttled_per_address_with_retry_after(
        lead: Any, study: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.REVIEWHUB_TOKEN_FAILURE_RATE = "5/m"
    clock = [1_000_000.0]
    monkeypatch.setattr(TokenFailureThrottle, "timer", lambda self: clock[0])
    guesser = _bad_token_client()
    for _ in range(5):
        assert guesser.get("/api/studies").status_code == 401
    refused = guesser.get("/api/studies")
    assert refused.status_code == 429
    assert _error(refused)["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60
    # A valid token from the throttled address is refused as well: a right guess must not
    # stand out from the wrong ones during the lockout.
    good = APIClient()
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=lead)}")
    assert good.get("/api/studies").status_code == 429
    # Other addresses are not affected, and sessions (no token) are not either.
    other = APIClient(REMOTE_ADDR="198.51.100.7")
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=lead)}")
    assert other.get("/api/studies").status_code == 200
    session = Client()
    session.force_login(lead)
    assert session.get("/api/studies").status_code == 200
    # Once the window has passed the address may try again.
    clock[0] += 61
    assert good.get("/api/studies").status_code == 200


@pytest.mark.django_db
def test_two_hundred_bad_tokens_meet_429_at_the_default_rate(db: Any) -> None:
    guesser = _bad_token_client()
    statuses = [guesser.get("/api/studies").status_code for _ in range(200)]
    limit = int(str(django_settings.REVIEWHUB_TOKEN_FAILURE_RATE).split("/")[0])
    assert statuses[:limit] == [401] * limit
    assert set(statuses[limit:]) == {429}


@pytest.mark.django_db
def test_forwarded_for_is_believed_only_for_trusted_proxies(settings: Any) -> None:
    settings.REVIEWHUB_TOKEN_FAILURE_RATE = "3/m"
    # Untrusted: a new X-Forwarded-For per request does not escape the count.
    for n in range(3):
        _bad_token_client().get("/api/studies", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
    assert _bad_token_client().get(
        "/api/studies", HTTP_X_FORWARDED_FOR="10.0.0.99").status_code == 429
    # Behind one trusted proxy, the address it appended is the client's.
    settings.REVIEWHUB_TRUSTED_PROXY_COUNT = 1
    for _ in range(3):
        _bad_token_client("10.1.1.1").get(
            "/api/studies", HTTP_X_FORWARDED_FOR="spoofed, 192.0.2.1")
    assert _bad_token_client("10.1.1.1").get(
        "/api/studies", HTTP_X_FORWARDED_FOR="192.0.2.1").status_code == 429
    assert _bad_token_client("10.1.1.1").get(
        "/api/studies", HTTP_X_FORWARDED_FOR="192.0.2.2").status_code == 401


# --- headers -------------------------------------------------------------------------------------


def _ratings_csv(n_items: int = 12) -> str:
    lines = ["item_id,stratum.language,output_id,candidate,output_text,rater_id,rater_kind,"
             "judge_version,criterion,value,severity"]
    for i in range(n_items):
        truth = "pass" if i % 3 else "fail"
        for rater in ("hum1", "hum2"):
            lines.append(f"q{i},en,o{i},m1,answer {i},{rater},human,,correct,{truth},")
        judged = truth if i >= 3 else ("fail" if truth == "pass" else "pass")
        lines.append(f"q{i},en,o{i},m1,answer {i},imp-judge,judge,v1,correct,{judged},")
    return "\n".join(lines) + "\n"


@pytest.fixture
def pages_world(db: Any) -> dict[str, Any]:
    """A study with a judge run and a computed agreement report; its lead and superuser."""
    lead = UserFactory(username="csp-lead")
    study = StudyFactory(owner=lead, slug="csp", name="CSP study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    ratings_import(study=study, rows=ratings_read(io.StringIO(_ratings_csv()), fmt="csv"))
    criterion = Criterion.objects.get(rubric__study=study, key="correct")
    check = judge_create(study=study, name="csp-length", kind=Judge.Kind.PROGRAMMATIC)
    version = judge_version_for_config(judge=check, config={"check": "length", "max": 1000})
    run = judge_run_start(study=study, judge_version=version, criteria=[criterion],
                          created_by=lead, enqueue=lambda run_id, n: None)
    # Pending: the page renders (and refreshes) without the statistics having run.
    report = ReportSnapshot.objects.create(
        study=study, params=params_validate({}), created_by=lead)
    root = UserFactory(username="csp-root", is_staff=True, is_superuser=True)
    return {"lead": lead, "study": study, "run": run, "report": report, "root": root}


def _csp_directives(header: str) -> dict[str, str]:
    return {part.strip().split(" ", 1)[0]: part.strip() for part in header.split(";")
            if part.strip()}


@pytest.mark.django_db
def test_every_html_page_has_a_content_security_policy(pages_world: dict[str, Any]) -> None:
    w = pages_world
    slug, run_id, report_id = w["study"].slug, w["run"].pk, w["report"].pk
    anonymous = ["/accounts/login/", "/admin/login/", "/api/docs/", "/no-such-page/"]
    lead_pages = [
        "/", f"/studies/{slug}/", f"/studies/{slug}/judge-runs/",
        f"/studies/{slug}/judge-runs/{run_id}/", f"/studies/{slug}/reports/",
        f"/studies/{slug}/reports/{report_id}/",
    ]
    root_pages = ["/admin/", "/admin/studies/study/", "/admin/auth/user/"]
    lead = Client()
    lead.force_login(w["lead"])
    root = Client()
    root.force_login(w["root"])
    checked = 0
    for client, paths in ((Client(), anonymous), (lead, lead_pages), (root, root_pages)):
        for path in paths:
            response = client.get(path)
            expected = 404 if path == "/no-such-page/" else 200
            assert response.status_code == expected, (path, response.status_code)
            assert response["Content-Type"].startswith("text/html"), path
            csp = response.get("Content-Security-Policy", "")
            assert csp, f"{path} has no Content-Security-Policy"
            directives = _csp_directives(csp)
            # Scripts only from our own origin, never inline, on every page.
            assert directives.get("script-src") == "script-src 'self'", (path, csp)
            assert directives.get("frame-ancestors") == "frame-ancestors 'none'", (path, csp)
            if path != "/api/docs/":
                assert "'unsafe-inline'" not in csp, (path, csp)
            checked += 1
    assert checked == len(anonymous) + len(lead_pages) + len(root_pages)


def test_per_view_policies_are_kept_and_only_html_gets_the_default(rf: Any) -> None:
    from django.http import HttpResponse

    from reviewhub.middleware import SecurityHeadersMiddleware

    def view_with(response: HttpResponse) -> Any:
        return SecurityHeadersMiddleware(lambda request: response)(rf.get("/page/"))

    own = HttpResponse("<p>x</p>")
    own["Content-Security-Policy"] = "default-src 'none'"
    assert view_with(own)["Content-Security-Policy"] == "default-src 'none'"
    plain = view_with(HttpResponse("<p>x</p>"))
    assert plain["Content-Security-Policy"] == django_settings.REVIEWHUB_CSP
    svg = view_with(HttpResponse(b"<svg/>", content_type="image/svg+xml"))
    assert "Content-Security-Policy" not in svg
    # The API docs page keeps its own policy (style-src relaxed for Swagger UI only).
    docs = Client().get("/api/docs/")
    assert "'unsafe-inline'" in _csp_directives(docs["Content-Security-Policy"])["style-src"]


@pytest.mark.django_db
def test_api_docs_use_only_same_origin_pinned_assets(db: Any) -> None:
    client = Client()
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs, html
    for ref in refs:
        assert ref.startswith("/") and not ref.startswith("//"), ref
    assert "cdn" not in html.lower() and "@latest" not in html
    assert "<script>" not in html  # the start-up script is a file too (split view)
    for ref in refs:
        response = client.get(ref)
        assert response.status_code == 200, ref
        if ref.endswith(".js") or "script" in ref:
            assert "javascript" in response["Content-Type"], ref
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert body, ref
    assert any("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in r for r in refs)


@pytest.mark.django_db
def test_api_json_is_no_store(lead_client: APIClient, lead: Any) -> None:
    responses = [
        lead_client.get("/api/studies"),
        lead_client.get("/api/studies/alpha"),
        lead_client.get("/api/studies/no-such-study"),
        APIClient().get("/api/studies"),
        lead_client.post("/api/tokens", {"name": "t"}, format="json"),
        lead_client.post("/api/studies/alpha/items/bulk", b"[]",
                         content_type="application/json"),
    ]
    for response in responses:
        assert response["Content-Type"].startswith("application/json"), response
        assert response["Cache-Control"] == "no-store", (response.status_code, response)


@pytest.mark.django_db
def test_session_cookie_is_secure_over_https(settings: Any) -> None:
    assert settings.SESSION_COOKIE_SECURE is False  # the test settings: plain http allowed
    UserFactory(username="cookie", password=PASSWORD)
    plain = _sign_in(Client(), "cookie", PASSWORD)
    assert plain.status_code == 302
    assert not plain.cookies[settings.SESSION_COOKIE_NAME]["secure"]
    tls = _sign_in(Client(), "cookie", PASSWORD, secure=True)
    assert tls.cookies[settings.SESSION_COOKIE_NAME]["secure"] is True
    assert tls.cookies[settings.CSRF_COOKIE_NAME]["secure"] is True
    # Behind a proxy that says https (DJANGO_BEHIND_PROXY=1).
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = _sign_in(Client(), "cookie", PASSWORD, HTTP_X_FORWARDED_PROTO="https")
    assert proxied.cookies[settings.SESSION_COOKIE_NAME]["secure"] is True


def test_secure_cookies_follow_the_ssl_redirect_setting(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='reviewhub.settings'; "
            "django.setup(); from django.conf import settings as s; "
            "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE)")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECURE_COOKIES"}
    env.update(DJANGO_SECRET_KEY="x" * 60, DJANGO_DEBUG="0", DJANGO_SECURE_SSL_REDIRECT="1",
               REVIEWHUB_VAR_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-2:] == ["True", "True"]
