"""Shared helpers of the import management commands."""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from imports.generic import ImportSummary
from reviewhub.errors import AppError
from reviewhub.errors import error_text as app_error_text
from studies.models import Study
from studies.services import study_create


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
    try:
        # The studies app's rules (slug, name) apply as for a study created over the API.
        fields = {"slug": slug, "name": name or slug, "status": "open"}
        return study_create(owner=user, fields=fields)
    except AppError as exc:
        raise CommandError(app_error_text(exc)) from exc
    return study


def summary_write(command: BaseCommand, summary: ImportSummary) -> None:
    """Print what an import did: notes (criteria and how their scales were decided), then
    warnings on standard error, then the summary as JSON on standard output."""
    if summary.dry_run:
        command.stdout.write("dry run: nothing was written; an import would do the following")
    for note in summary.notes:
        command.stdout.write(note)
    for warning in summary.warnings:
        command.stderr.write(f"warning: {warning}")
    command.stdout.write(json.dumps(summary.as_dict(), indent=2, sort_keys=True))


__all__ = ["app_error_text", "study_for_import", "summary_write"]
