"""`python manage.py import_items --study SLUG FILE`: `import_outputs --kind items`."""

from __future__ import annotations

from studies import ingest

from .import_outputs import Command as ImportCommand


class Command(ImportCommand):
    help = "Import items into a study (JSON array, JSON Lines or CSV). All or nothing."
    default_kind: ingest.Kind | None = "items"
