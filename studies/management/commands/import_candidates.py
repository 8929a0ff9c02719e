"""`python manage.py import_candidates --study SLUG FILE`: `import_outputs --kind candidates`."""

from __future__ import annotations

from studies import ingest

from .import_outputs import Command as ImportCommand


class Command(ImportCommand):
    help = "Import candidates into a study (JSON array, JSON Lines or CSV). All or nothing."
    default_kind: ingest.Kind | None = "candidates"
