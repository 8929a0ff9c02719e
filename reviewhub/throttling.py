"""Throttles for credential guessing: failed sign-ins (django-axes) and bad API tokens (DRF).

Sign-in failures are counted by django-axes per (username, client IP) in the database, so every
web process sees the same count, and, from the same records, per client IP across usernames
(password spraying, `REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT`); `LoginThrottleBackend` is the
authentication backend that checks both and `login_lockout_response` the 429 page.
Bad API tokens are counted per client IP with DRF's
`SimpleRateThrottle` in the Django cache (Redis when `REDIS_URL` is set, so the count is shared
by every gunicorn worker; process-local memory otherwise). `RequestLimitsMiddleware` in
`reviewhub.middleware` applies the token throttle. Rates and windows are settings documented in
docs/deploy.md.
"""

from __future__ import annotations

import math
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.helpers import get_cool_off
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from rest_framework.throttling import SimpleRateThrottle


def client_ip(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the address the trusted proxies saw.

    X-Forwarded-For is believed only for the last `REVIEWHUB_TRUSTED_PROXY_COUNT` hops (each
    proxy appends the address it received from); anything further left is client-supplied and
    would let a guesser pick a fresh key for every attempt.
    """
    remote = str(request.META.get("REMOTE_ADDR") or "")
    hops = settings.REVIEWHUB_TRUSTED_PROXY_COUNT
    if hops > 0:
        forwarded = [part.strip() for part in
                     str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",") if part.strip()]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return remote


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes' lockout check, first in AUTHENTICATION_BACKENDS.

    Calls without a request (the shell, management commands, the test client's `login()`)
    have no client to count against and go straight to the next backend; every sign-in form
    (the site's and the admin's) passes its request.
    """

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None,
        password: str | None = None, **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username, password, **kwargs)
        limit = settings.REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT
        if limit > 0 and address_failures(request) >= limit:
            # Locked out as axes locks a pair out: the lockout page (429, Retry-After), the
            # right password refused too, and this attempt counted (restarting the cool-off).
            request.axes_locked_out = True  # type: ignore[attr-defined]
            raise AxesBackendPermissionDenied(
                "too many failed sign-ins from this address across usernames")
        return None


def address_failures(request: HttpRequest) -> int:
    """Failed sign-ins from this request's client address within the cool-off, whatever the
    username: the sum of django-axes' per-(username, address) counts that are still live."""
    from axes.models import AccessAttempt
    from django.db.models import Sum
    from django.utils import timezone

    cool_off = get_cool_off(request)
    since = timezone.now() - (cool_off if cool_off is not None else settings.AXES_COOLOFF_TIME)
    total = AccessAttempt.objects.filter(
        ip_address=client_ip(request), attempt_time__gt=since,
    ).aggregate(n=Sum("failures_since_start"))["n"]
    return int(total or 0)


def login_lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """The page a locked-out sign-in gets: 429 with Retry-After (AXES_LOCKOUT_CALLABLE).

    Every further attempt during the lockout, right or wrong, restarts the cool-off, so the
    client may try again after one full cool-off from now.
    """
    cool_off = get_cool_off(request)
    seconds = max(1, math.ceil(cool_off.total_seconds())) if cool_off else 3600
    body = render_to_string(
        "registration/locked_out.html",
        {"minutes": max(1, math.ceil(seconds / 60))},
        request=request,
    )
    response = HttpResponse(body, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _cache_errors() -> tuple[type[BaseException], ...]:
    """What the cache raises when its server is down: redis-py's errors (when installed) and
    socket errors."""
    try:
        from redis.exceptions import RedisError
    except ImportError:  # pragma: no cover - redis is a dependency, but the cache may be local
        return (OSError,)
    return (RedisError, OSError)


CACHE_ERRORS = _cache_errors()


class TokenFailureThrottle(SimpleRateThrottle):
    """Failed API-token authentications per client IP (`REVIEWHUB_TOKEN_FAILURE_RATE`).

    DRF's throttles run after authentication and count every request; this one counts only
    the requests that came back 401 with a token, and refuses every token request from that
    address while the count is over the rate, so that a right guess is not told apart from a
    wrong one during the lockout.
    """

    scope = "token_failure"

    def get_rate(self) -> str:
        return str(settings.REVIEWHUB_TOKEN_FAILURE_RATE)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request)}

    def seconds_locked(self, request: HttpRequest) -> float | None:
        """Seconds until this client may present a token again, or None if it may now."""
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        num_requests, duration = self.parse_rate(self.get_rate())
        assert num_requests is not None and duration is not None
        while self.history and self.history[-1] <= self.now - duration:
            self.history.pop()
        if len(self.history) >= num_requests:
            # The oldest failure in the window leaves it at history[-1] + duration.
            return float(max(1.0, self.history[-1] + duration - self.now))
        return None

    def record_failure(self) -> None:
        """Count one failure (after `seconds_locked` has loaded the window)."""
        self.throttle_success()
