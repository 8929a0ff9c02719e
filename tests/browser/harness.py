"""Playwright harness for browser tests: Debian's Chromium driven through the sync API.

Tests opt in with ``@pytest.mark.browser`` and these fixtures (tests outside this folder import
them with ``from tests.browser.harness import *``). Chromium is found at ``$REVIEWHUB_CHROMIUM``
(default ``/usr/lib/chromium/chromium``); when it is missing the tests are skipped with a reason,
unless ``REVIEWHUB_REQUIRE_BROWSER=1`` (CI), where they fail instead. Playwright's own browser
downloads are never used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "BrowserSession",
    "browser_session",
    "chromium",
    "fast_password_hashing",
    "new_session",
]

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
REPO_ROOT = Path(__file__).resolve().parents[2]


def chromium_path() -> str:
    return os.environ.get("REVIEWHUB_CHROMIUM", "/usr/lib/chromium/chromium")


def _unavailable(reason: str) -> None:
    if os.environ.get("REVIEWHUB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser required (REVIEWHUB_REQUIRE_BROWSER=1) but {reason}")
    pytest.skip(reason)


# One Chromium per test session. The fixture below is defined once per module that imports the
# harness, and Playwright's sync API refuses a second instance, so every definition shares this
# process (reference-counted: the last user closes it).
_shared: dict[str, Any] = {"users": 0}


def _launch() -> Any:
    path = chromium_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        _unavailable(f"Chromium not found at {path} (set REVIEWHUB_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is a dev dependency
        _unavailable("the playwright package is not installed")
    # Playwright's sync API keeps an asyncio loop running in this thread; Django would then
    # refuse the ORM calls tests make to build fixtures and check results. Those calls are
    # plain synchronous code in the test thread, so the guard does not apply.
    _shared["previous_env"] = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    manager = sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
    except Exception as exc:
        manager.stop()
        _restore_env()
        _unavailable(f"Chromium at {path} did not start: {exc}")
    _shared.update(manager=manager, browser=browser)
    return browser


def _restore_env() -> None:
    previous = _shared.pop("previous_env", None)
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


# Module scope, not session: Playwright's sync API keeps an asyncio loop marked as running in
# the main thread until it stops, which breaks every later test that calls asyncio.run().
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The module's Chromium (skipped, or failed under REVIEWHUB_REQUIRE_BROWSER=1, if absent)."""
    browser = _shared.get("browser") or _launch()
    _shared["users"] += 1
    try:
        yield browser
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            _shared.pop("browser").close()
            _shared.pop("manager").stop()
            _restore_env()


@dataclass
class BrowserSession:
    """A browser context and page, with everything the page did recorded for assertions."""

    context: Any
    page: Any
    base_url: str
    # (url, status, body) of every response the page received.
    responses: list[tuple[str, int, bytes]] = field(default_factory=list)
    # URLs of the responses the page itself reported (page.on("response")), to check that the
    # route saw every one of them.
    seen_urls: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def goto(self, path: str) -> Any:
        return self.page.goto(self.url(path))

    def login(self, username: str, password: str) -> None:
        """Sign in through the login form with the keyboard only."""
        page = self.page
        page.goto(self.url("/accounts/login/"))
        page.locator("#id_username").focus()
        page.keyboard.type(username)
        page.keyboard.press("Tab")
        page.keyboard.type(password)
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert "/accounts/login/" not in page.url, "login failed"

    def bodies(self) -> list[tuple[str, bytes]]:
        return [(url, body) for url, _status, body in self.responses]

    def screenshot(self, relative: str) -> Path:
        path = REPO_ROOT / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=False)
        return path


def _open(browser: Any, base_url: str, viewport: dict[str, int]) -> BrowserSession:
    context = browser.new_context(viewport=viewport, device_scale_factor=1,
                                  locale="en-US", timezone_id="UTC")
    context.set_default_timeout(10_000)
    page = context.new_page()
    session = BrowserSession(context=context, page=page, base_url=base_url)

    def record_fetch(route: Any) -> None:
        # Bodies of the page's own fetch() calls are captured here, before the page can
        # navigate away: the page follows a submit with a navigation, and a response event
        # can then have lost the body.
        if route.request.resource_type not in ("fetch", "xhr"):
            route.fallback()
            return
        try:
            response = route.fetch(max_redirects=0)
        except Exception:
            route.abort()
            return
        session.responses.append((route.request.url, response.status, response.body()))
        route.fulfill(response=response)

    def on_response(response: Any) -> None:
        session.seen_urls.append(response.url)
        if response.request.resource_type in ("fetch", "xhr"):
            return  # recorded by the route
        # Documents, scripts, styles: read now, while the response is current. Redirects
        # have no body.
        try:
            body = response.body() if not 300 <= response.status < 400 else b""
        except Exception:
            body = b"<body unavailable>"
        session.responses.append((response.url, response.status, body))

    def on_dialog(dialog: Any) -> None:
        session.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    context.route("**/*", record_fetch)
    page.on("response", on_response)
    page.on("dialog", on_dialog)
    page.on("pageerror", lambda exc: session.page_errors.append(str(exc)))
    page.on("console", lambda msg: session.console_errors.append(msg.text)
            if msg.type == "error" else None)
    return session


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Tests make and check many passwords; the production hasher's cost buys nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def new_session(chromium: Any, live_server: Any) -> Iterator[Callable[..., BrowserSession]]:
    """Factory: new_session(viewport="desktop" | "phone") opens an isolated browser context."""
    opened: list[BrowserSession] = []

    def make(viewport: str = "desktop") -> BrowserSession:
        size = PHONE if viewport == "phone" else DESKTOP
        session = _open(chromium, live_server.url, size)
        opened.append(session)
        return session

    yield make
    for session in opened:
        session.context.close()


@pytest.fixture
def browser_session(new_session: Callable[..., BrowserSession]) -> BrowserSession:
    """A desktop-sized (1280x800) session."""
    return new_session("desktop")
