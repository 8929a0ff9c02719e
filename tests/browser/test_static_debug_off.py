"""Pages' scripts and styles load with DEBUG off, served the way gunicorn serves them.

pytest-django's `live_server` wraps the application in Django's static-files handler, which
serves /static/ whatever the settings say; that is how a grading page could work in the tests
and have no JavaScript under gunicorn. Here the server runs `reviewhub.wsgi.application` alone
(as gunicorn does), so /static/ answers only if the application itself serves it (WhiteNoise),
and every page runs under its Content-Security-Policy: a refused script or style shows up as a
console error or as the page not doing its job.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.db import connections

from judges.models import Judge
from judges.runs import judge_run_start
from judges.services import judge_create, judge_version_for_config
from studies.models import Criterion
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403
from tests.browser.harness import BrowserSession, _open

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def wsgi_server(transactional_db: Any) -> Iterator[str]:
    """`reviewhub.wsgi.application` on a free port, with no static-files handler around it."""
    from reviewhub.wsgi import application

    # SQLite's in-memory test database exists only in this connection: the server thread
    # shares it, as Django's LiveServerTestCase does.
    override = {conn.alias: conn for conn in connections.all()
                if conn.vendor == "sqlite" and conn.is_in_memory_db()}
    for conn in override.values():
        conn.inc_thread_sharing()
    httpd = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False,
                               connections_override=override or None)
    httpd.set_app(application)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    # The first request imports every app's URLconf (seconds on a busy machine): pay that
    # here, not inside the browser's navigation timeout.
    with urllib.request.urlopen(f"{base}/accounts/login/", timeout=120) as response:
        assert response.status == 200
    try:
        yield base
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
        for conn in override.values():
            conn.dec_thread_sharing()


@pytest.fixture
def debug_off_session(chromium: Any, wsgi_server: str) -> Iterator[Callable[[], BrowserSession]]:
    opened: list[BrowserSession] = []

    def make() -> BrowserSession:
        session = _open(chromium, wsgi_server, {"width": 1280, "height": 800})
        opened.append(session)
        return session

    yield make
    for session in opened:
        session.context.close()


def _static_ok(s: BrowserSession, path: str) -> bool:
    """The page asked for `path`, and the server answers it with a non-empty 200."""
    urls = [url for url in s.seen_urls if urlsplit(url).path.endswith(path)]
    if not urls:
        return False
    with urllib.request.urlopen(urls[0], timeout=30) as response:
        return response.status == 200 and bool(response.read())


def _no_refusals(s: BrowserSession) -> None:
    assert not s.page_errors, s.page_errors
    refused = [m for m in s.console_errors if "Content Security Policy" in m or "404" in m]
    assert not refused, refused


def test_grading_and_run_pages_run_their_scripts_with_debug_off(
        debug_off_session: Callable[[], BrowserSession]) -> None:
    assert settings.DEBUG is False
    gs = grading_study()
    criterion = Criterion.objects.filter(rubric__study=gs.study).order_by("id").first()
    assert criterion is not None
    check = judge_create(study=gs.study, name="length", kind=Judge.Kind.PROGRAMMATIC)
    version = judge_version_for_config(judge=check, config={"check": "length", "max": 1000})
    run = judge_run_start(study=gs.study, judge_version=version, criteria=[criterion],
                          created_by=gs.lead, enqueue=lambda run_id, n: None)

    annotator = debug_off_session()
    annotator.login(gs.annotators[0].username, PASSWORD)
    annotator.goto(f"/studies/{gs.study.slug}/grade/")
    # grade.js marks the criterion the keyboard is on; without the script nothing is marked.
    annotator.page.wait_for_selector(".is-current")
    assert _static_ok(annotator, "/static/css/app.css")
    assert _static_ok(annotator, "/static/js/grade.js")
    # The stylesheet is applied, not just fetched.
    assert annotator.page.evaluate("() => getComputedStyle(document.body).margin") == "0px"
    _no_refusals(annotator)

    lead = debug_off_session()
    lead.login(gs.lead.username, PASSWORD)
    lead.goto(f"/studies/{gs.study.slug}/judge-runs/{run.pk}/")
    # The page's script polls the progress API and stamps the time of the refresh.
    lead.page.wait_for_function(
        "() => document.getElementById('p-updated').textContent.trim() !== 'on load'")
    assert _static_ok(lead, "/static/js/run_detail.js")
    assert lead.page.locator("#p-total").inner_text().strip() == str(run.jobs.count())
    _no_refusals(lead)


def test_api_docs_render_from_vendored_assets_with_debug_off(
        debug_off_session: Callable[[], BrowserSession]) -> None:
    s = debug_off_session()
    s.goto("/api/docs/")
    s.page.wait_for_selector(".swagger-ui .info .title")
    assert "ReviewHub API" in s.page.locator(".swagger-ui .info .title").inner_text()
    # Every request the page made stayed on our origin.
    assert s.seen_urls and all(url.startswith(s.base_url) for url in s.seen_urls), s.seen_urls
    assert _static_ok(s, "/swagger-ui-dist/swagger-ui-bundle.js")
    _no_refusals(s)
