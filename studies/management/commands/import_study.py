"""`manage.py import_study FILE`: create or update a study from a JSON or YAML file.

The format is documented in docs/study-spec.md (example: docs/examples/study.yaml). The import
is all or nothing and idempotent: re-running with the same file reports "unchanged" everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviewhub.errors import AppError, ValidationFailed, error_text
from studies.services import study_import
from studies.studyfile import study_file_parse


def load_study_file(path: Path) -> Any:
    """Parse FILE as JSON (.json) or YAML (anything else), strictly (studies/studyfile.py)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"Cannot read {path}: {exc}") from exc
    try:
        return study_file_parse(text, name=path.name)
    except ValidationFailed as exc:
        raise CommandError(f"{path}: {exc.message}") from exc


class Command(BaseCommand):
    help = "Create or update a study (fields, rubric, strata, plan, members) from a JSON/YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--owner", help="Owner's username for a new study (unless the file "
                                            "sets study.owner).")
        parser.add_argument("--new-plan-version", action="store_true",
                            help="When the latest plan is locked and the file's plan differs, "
                                 "save the file's plan as the next version.")

    def handle(self, *args: Any, **options: Any) -> None:
        doc = load_study_file(options["file"])
        try:
            report = study_import(doc=doc, owner_username=options.get("owner"),
                                  allow_new_plan_version=options["new_plan_version"])
        except AppError as exc:
            raise CommandError(f"{error_text(exc)}\nNothing was written.") from exc
        for section, outcome, detail in report.lines:
            self.stdout.write(f"{section}: {outcome}" + (f" ({detail})" if detail else ""))
        summary = "changes applied" if report.changed else "nothing to change"
        self.stdout.write(self.style.SUCCESS(f"Study '{report.study.slug}': {summary}."))
