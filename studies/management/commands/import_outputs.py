"""`python manage.py import_outputs --study SLUG FILE` (also items and candidates with --kind).

Streams the file twice (validate, then upsert in batches inside one transaction), so memory
stays bounded whatever the file size and an invalid row means nothing is written. Errors are
printed as `line N: field: reason`, the same checks and wording as the REST bulk endpoints.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from reviewhub.errors import AppError
from studies import ingest
from studies.models import Study


class TqdmProgress:
    """tqdm bars on stderr: bytes of the file while validating, rows while writing."""

    def __init__(self, file_size: int, enabled: bool) -> None:
        self.file_size = file_size
        self.enabled = enabled
        self.bar: tqdm[Any] | None = None

    def phase(self, name: str, total: int | None) -> None:
        self.close()
        if not self.enabled:
            return
        if total is None:
            self.bar = tqdm(total=self.file_size, desc=name, unit="B", unit_scale=True,
                            unit_divisor=1024, file=sys.stderr, dynamic_ncols=True)
        else:
            self.bar = tqdm(total=total, desc=name, unit=" rows", file=sys.stderr,
                            dynamic_ncols=True)

    def advance(self, nbytes: int) -> None:
        if self.bar is not None:
            self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Command(BaseCommand):
    help = ("Import outputs (or items / candidates with --kind) into a study from a JSON array "
            "(.json), JSON Lines (.jsonl/.ndjson) or CSV (.csv) file. All or nothing.")
    default_kind: ingest.Kind | None = "outputs"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the file to import")
        parser.add_argument("--study", required=True, help="the study's slug")
        parser.add_argument("--kind", choices=ingest.KINDS, default=self.default_kind,
                            help=f"what the rows are (default: {self.default_kind})")
        parser.add_argument("--format", choices=("json", "ndjson", "csv"),
                            help="override the format implied by the file extension")
        parser.add_argument("--batch-size", type=int, default=ingest.DEFAULT_BATCH_SIZE,
                            help="rows per database batch (default %(default)s)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        fmt = options["format"] or ingest.format_for_path(path)
        if fmt is None:
            raise CommandError(f"{path}: cannot tell the format from the extension; use "
                               "--format json|ndjson|csv")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        study = Study.objects.filter(slug=options["study"]).first()
        if study is None:
            raise CommandError(f"Study '{options['study']}' not found.")
        kind: ingest.Kind = options["kind"]
        progress = TqdmProgress(path.stat().st_size, enabled=not options["no_progress"])
        try:
            with path.open("rb", buffering=1 << 20) as stream:
                result = ingest.ingest_run(
                    study=study, kind=kind, stream=stream, fmt=fmt,
                    batch_size=options["batch_size"], progress=progress,
                )
        except ingest.IngestRejected as exc:
            for error in exc.errors:
                self.stderr.write(str(error))
            if exc.more_errors:
                self.stderr.write(f"... and {exc.more_errors} more errors")
            raise CommandError(f"{path}: {exc.message}") from None
        except AppError as exc:
            raise CommandError(f"{path}: {exc.message}") from None
        self.stdout.write(
            f"{kind}: created {result.created}, updated {result.updated}, "
            f"unchanged {result.unchanged}"
        )
