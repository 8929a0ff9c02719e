"""Helpers every app's server-rendered pages share.

`page_study` is the access check for pages, turned into a 404 for anything the user may not
see; `strict_csp` adds a Content-Security-Policy that keeps any HTML that slipped through
escaping inert; `error_rows` lays out an application error for a page's error list, and
`form_number` reads a number from a form field with the error naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from reviewhub.errors import AppError, Forbidden, NotFound, ValidationFailed
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


def error_rows(exc: AppError) -> list[dict[str, Any]]:
    """An application error as rows {"line", "path", "message"} for a page's error list.

    Services still answer in several `details` shapes (docs/api.md, "Errors"): a list of
    problems ({"errors": [{"path", "message"}]}, ingest's {"line", "field", "reason"}), one
    field ({"field": name}) or {name: reason} pairs. The first row of the last two carries the
    error's own message, so the page says what is wrong and where.
    """
    details = exc.details if isinstance(exc.details, dict) else {}
    listed = details.get("errors")
    if isinstance(listed, list) and listed:
        return [{"line": e.get("line"), "path": str(e.get("path") or e.get("field") or ""),
                 "message": str(e.get("message") or e.get("reason") or "")}
                for e in listed if isinstance(e, dict)]
    if isinstance(details.get("field"), str):
        return [{"line": None, "path": details["field"], "message": exc.message}]
    pairs = list(details.items())
    if not pairs:
        return [{"line": None, "path": "", "message": exc.message}]
    first = {"line": None, "path": str(pairs[0][0]), "message": exc.message}
    return [first, *({"line": None, "path": str(k), "message": v}
                     for k, v in pairs[1:] if isinstance(v, str))]


def form_number(post: Any, name: str, cast: Callable[[str], Any], *, required: bool = False,
                minimum: float | None = None) -> Any:
    """The number in form field `name` (None when empty), or a 400 naming the field: not a
    number (NaN included), missing when `required`, or below `minimum`."""
    text = str(post.get(name, "")).strip()
    if not text:
        if required:
            raise ValidationFailed(f"{name} is required.", details={"field": name})
        return None
    try:
        value = cast(text)
    except ValueError:
        raise ValidationFailed(f"{name} must be a number.", details={"field": name}) from None
    if value != value:  # NaN
        raise ValidationFailed(f"{name} must be a number.", details={"field": name})
    if minimum is not None and value < minimum:
        raise ValidationFailed(f"{name} must be at least {minimum:g}.", details={"field": name})
    return value
