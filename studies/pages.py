"""The study of a server-rendered page, for every app's pages.

`page_study` is the access check for pages: `study_get_for_actor` with any refusal turned into
a 404. It lives here, beside the study access it calls, so that `reviewhub/pages.py` (the
helpers that need no study: CSP, error rows, form numbers) stays below `studies` in the order.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest

from reviewhub.errors import Forbidden, NotFound

from .access import study_get_for_actor
from .models import Membership, Study


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
