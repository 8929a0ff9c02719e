"""Helpers every app's server-rendered pages share.

`page_study` is the access check for pages, turned into a 404 for anything the user may not
see; `strict_csp` adds a Content-Security-Policy that keeps any HTML that slipped through
escaping inert.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from reviewhub.errors import Forbidden, NotFound
from studies.access import study_get_for_actor
from studies.models import Membership, Study

# Pages hold model output (untrusted text). Autoescaping is the first defence; this policy is
# the second: no inline script, no foreign origins, no plugins, no framing, forms post home.
CSP_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)


def strict_csp(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Add the strict Content-Security-Policy to a page view's responses."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        response.headers.setdefault("Content-Security-Policy", CSP_POLICY)
        return response

    return wrapper


def page_study(
    request: HttpRequest, slug: str, *, min_role: str = Membership.Role.VIEWER
) -> tuple[Study, str]:
    """`study_get_for_actor` for pages: any refusal becomes a plain 404.

    Pages do not distinguish "no such study" from "not for you" (an annotator asking for a lead
    page gets the same 404 as a stranger), so nothing about other studies leaks.
    """
    try:
        return study_get_for_actor(user=request.user, slug=slug, min_role=min_role)
    except (NotFound, Forbidden) as exc:
        raise Http404(exc.message) from exc
