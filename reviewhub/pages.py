"""Helpers every app's server-rendered pages share, none of which needs a study.

`strict_csp` adds a Content-Security-Policy that keeps any HTML that slipped through
escaping inert; `error_rows` lays out an application error for a page's error list, and
`form_number` reads a number from a form field with the error naming the field. The page's
study (`page_study`, any refusal a 404) is resolved in `studies/pages.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpResponse

from reviewhub.errors import AppError, ValidationFailed
from reviewhub.middleware import csp_policy

# Pages hold model output (untrusted text). Autoescaping is the first defence; this policy is
# the second: no inline script, no foreign origins, no plugins, no framing, forms post home.
CSP_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)


def strict_csp(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Add the strict Content-Security-Policy to a page view's responses."""
    return csp_policy(CSP_POLICY)(view)


def error_rows(exc: AppError) -> list[dict[str, Any]]:
    """An application error as rows {"line", "path", "message"} for a page's error list.

    A validation error lists its problems in the one `details` shape (docs/api.md, "Errors"):
    one row per listed entry. Any other error is one row with its message.
    """
    details = exc.details if isinstance(exc.details, dict) else {}
    listed = [e for e in details.get("errors") or [] if isinstance(e, dict)]
    if not listed:
        return [{"line": None, "path": "", "message": exc.message}]
    return [{"line": e.get("line"), "path": str(e.get("path", "")),
             "message": str(e.get("message", ""))} for e in listed]


def form_number(post: Any, name: str, cast: Callable[[str], Any], *, required: bool = False,
                minimum: float | None = None) -> Any:
    """The number in form field `name` (None when empty), or a 400 naming the field: not a
    number (NaN included), missing when `required`, or below `minimum`."""
    text = str(post.get(name, "")).strip()
    if not text:
        if required:
            raise ValidationFailed.at(name, f"{name} is required.")
        return None
    try:
        value = cast(text)
    except ValueError:
        raise ValidationFailed.at(name, f"{name} must be a number.") from None
    if value != value:  # NaN
        raise ValidationFailed.at(name, f"{name} must be a number.")
    if minimum is not None and value < minimum:
        raise ValidationFailed.at(name, f"{name} must be at least {minimum:g}.")
    return value
