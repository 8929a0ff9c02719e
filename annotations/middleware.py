"""An account whose password someone else set must change it before using the site.

A one-time password (a new account made by an invitation, or a lead's reset) is known to the
lead who handed it over; until its owner chooses a new one (`PasswordChangeRequired`), every
page redirects to the password change form and session API calls get 403
`password_change_required`. A successful change (Django's form redirects to its done page)
lifts the requirement.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import Resolver404, resolve

from reviewhub.errors import error_body

from .services import password_change_done, password_change_required

_SESSION_KEY = "reviewhub_password_change_required"
# Pages an account may reach while its password must change.
_ALLOWED = frozenset({"password_change", "password_change_done", "logout", "login"})


def _url_name(request: HttpRequest) -> str | None:
    try:
        return resolve(request.path_info).url_name
    except Resolver404:
        return None


class PasswordChangeRequiredMiddleware:
    """After AuthenticationMiddleware: session users only (API tokens are made from a signed-in
    session, which has to change the password first)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or request.path_info.startswith(
                "/static/"):
            return self.get_response(request)
        # Decided once per session (no query on later requests): the requirement only ever
        # starts with a password set by someone else, which ends every session of the account
        # (Django checks the password hash in the session), so a cached "no" cannot go stale.
        required = request.session.get(_SESSION_KEY)
        if required is None:
            required = password_change_required(user=user)
            request.session[_SESSION_KEY] = required
        if not required:
            return self.get_response(request)
        name = _url_name(request)
        if name not in _ALLOWED:
            if request.path_info.startswith("/api/"):
                return JsonResponse(error_body(
                    "password_change_required",
                    "This account's password was set by someone else: change it at "
                    "/accounts/password_change/ before using the site.",
                ), status=403)
            return redirect("password_change")
        response = self.get_response(request)
        if name == "password_change" and request.method == "POST" and (
                response.status_code == 302):
            password_change_done(user=user)
            request.session[_SESSION_KEY] = False
        return response
