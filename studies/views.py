"""Server-rendered pages: the home page (the user's studies) and a study's overview.

Page views share two helpers with the other apps' pages: `page_study` (the access check, turned
into a 404 for anything the user may not see) and `strict_csp` (a Content-Security-Policy that
keeps any HTML that slipped through escaping inert).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from reviewhub.api.errors import Forbidden, NotFound

from .access import study_get_for_actor
from .models import Membership, Study

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


def _optional_url(name: str, slug: str) -> str | None:
    # Pages owned by other areas are linked only once their URL name exists.
    try:
        return reverse(name, kwargs={"slug": slug})
    except NoReverseMatch:
        return None


@require_GET
@login_required
@strict_csp
def home(request: HttpRequest) -> HttpResponse:
    """The studies the user belongs to, with their role in each."""
    user = request.user
    if not isinstance(user, AbstractBaseUser):  # login_required makes this unreachable
        raise Http404("Sign in first.")
    rows: list[dict[str, Any]]
    if getattr(user, "is_superuser", False):
        rows = [
            {"study": s, "role": Membership.Role.LEAD, "role_label": "Lead (admin)"}
            for s in Study.objects.order_by("name")
        ]
    else:
        memberships = (
            Membership.objects.filter(user__pk=user.pk).select_related("study")
            .order_by("study__name")
        )
        rows = [
            {"study": m.study, "role": m.role, "role_label": m.get_role_display()}
            for m in memberships
        ]
    return render(request, "studies/home.html", {"rows": rows})


@require_GET
@login_required
@strict_csp
def study_overview(request: HttpRequest, slug: str) -> HttpResponse:
    """A study's front page: annotators get "Start grading", leads get counts and links."""
    study, role = page_study(request, slug)
    context: dict[str, Any] = {
        "study": study,
        "study_role": role,
        "grade_url": _optional_url("annotations-grade", slug),
        "rubric": study.rubric_versions.order_by("-version").prefetch_related("criteria").first(),
    }
    if role == Membership.Role.LEAD:
        counts = Study.objects.filter(pk=study.pk).aggregate(
            n_items=Count("items", distinct=True),
            n_candidates=Count("candidates", distinct=True),
        )
        context.update(
            n_items=counts["n_items"],
            n_candidates=counts["n_candidates"],
            # Counted apart: a third join would multiply the rows the other two count.
            n_outputs=study.outputs.count(),
            n_errored=study.outputs.exclude(error="").count(),
            n_members=study.memberships.count(),
            lead_links=[
                (label, url)
                for label, url in (
                    ("Queue status", _optional_url("annotations-lead-queue", slug)),
                    ("Disagreements", _optional_url("annotations-lead-disagreements", slug)),
                    ("Members", _optional_url("annotations-lead-members", slug)),
                )
                if url
            ],
        )
    return render(request, "studies/overview.html", context)
