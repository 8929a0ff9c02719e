"""Server-rendered pages: the home page (the user's studies) and a study's overview.

The helpers every app's pages share (`page_study`, `strict_csp`) are in `reviewhub/pages.py`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from reviewhub.pages import page_study, strict_csp

from .models import Membership, Study


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
