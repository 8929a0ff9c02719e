"""Project-level views: health check, and the password-reset page that sends e-mail only when
a mail server is configured."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.auth.views import PasswordResetView
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render

from reviewhub.celery import app


def _check_database() -> dict[str, object]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # the health check reports any failure rather than raising
        return {"ok": False, "vendor": connection.vendor, "error": str(exc)[:200]}
    return {"ok": True, "vendor": connection.vendor,
            "ms": round((time.perf_counter() - started) * 1000, 2)}


def _check_broker() -> dict[str, object]:
    url = settings.CELERY_BROKER_URL
    transport = url.split("://", 1)[0]
    started = time.perf_counter()
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return {"ok": False, "transport": transport, "error": str(exc)[:200]}
    return {"ok": True, "transport": transport,
            "ms": round((time.perf_counter() - started) * 1000, 2)}


def healthz(request: HttpRequest) -> JsonResponse:
    database = _check_database()
    broker = _check_broker()
    ok = bool(database["ok"] and broker["ok"])
    return JsonResponse({"ok": ok, "database": database, "broker": broker},
                        status=200 if ok else 503)


class PasswordResetByEmailView(PasswordResetView):
    """Django's reset by e-mail when REVIEWHUB_EMAIL_ENABLED; otherwise a page that says who
    can reset the password (a study lead, from the Members page), and no form that would
    pretend to send a message."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.REVIEWHUB_EMAIL_ENABLED:
            return render(request, "registration/password_reset_unavailable.html")
        return super().dispatch(request, *args, **kwargs)
