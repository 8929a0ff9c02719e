"""Shared helpers of the reports management commands."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from reviewhub.api.errors import AppError
from studies.models import Membership, Study


def study_for_import(slug: str, *, owner: str | None, name: str | None) -> Study:
    """The study to import into; created (with `owner` as its lead) when `owner` is given."""
    study = Study.objects.filter(slug=slug).first()
    if study is not None:
        return study
    if not owner:
        raise CommandError(f"study '{slug}' does not exist (pass --owner USERNAME to create it)")
    user = get_user_model().objects.filter(username=owner).first()
    if user is None:
        raise CommandError(f"user '{owner}' does not exist")
    study = Study.objects.create(slug=slug, name=name or slug, owner=user, status=Study.Status.OPEN)
    Membership.objects.create(study=study, user=user, role=Membership.Role.LEAD)
    return study


def app_error_text(exc: AppError) -> str:
    """The error message plus its listed problems, one a line."""
    lines = [exc.message]
    details: Any = exc.details
    if isinstance(details, dict):
        errors = details.get("errors") or []
        lines.extend(f"  {e}" for e in errors)
        total = details.get("error_count")
        if isinstance(total, int) and total > len(errors):
            lines.append(f"  ... and {total - len(errors)} more")
    return "\n".join(lines)
