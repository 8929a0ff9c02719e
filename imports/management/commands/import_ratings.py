"""`python manage.py import_ratings --study SLUG FILE` (generic long format, CSV or JSON Lines)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from imports.generic import (
    PAIRWISE_CONVENTIONS,
    ReadError,
    ratings_import,
    ratings_read,
    scale_parse,
)
from reviewhub.errors import AppError

from ._common import app_error_text, study_for_import, summary_write


class Command(BaseCommand):
    help = "Import human and judge ratings in the generic long format (docs/import-ratings.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="a .csv or .jsonl file, one row per rating")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--owner", help="create the study with this lead if it is missing")
        parser.add_argument("--format", choices=["csv", "jsonl"], help="default: by extension")
        parser.add_argument(
            "--scale",
            action="append",
            default=[],
            metavar="KEY=SCALE",
            help="scale of a new criterion: binary, pairwise, ordinal:1-5, "
            "categorical:a,b,c, interval:1-5 (a continuous score on a closed range, e.g. "
            "interval:0-1) (repeatable)",
        )
        parser.add_argument(
            "--pass-threshold",
            action="append",
            default=[],
            metavar="KEY=N",
            help="first passing point of an ordinal criterion the import creates: points >= N "
            "pass (repeatable; on an existing criterion it must equal the stored threshold)",
        )
        parser.add_argument(
            "--family",
            action="append",
            default=[],
            metavar="NAME=FAMILY",
            help="model family of a candidate or judge (repeatable)",
        )
        parser.add_argument(
            "--pairwise-values",
            choices=PAIRWISE_CONVENTIONS,
            help="what pairwise values refer to where a row has no pairwise_values column: "
            "'outputs' (A = output_a is better) or 'presented' (A = the output shown first)",
        )
        parser.add_argument(
            "--texts",
            help="a JSON Lines file of texts keyed by id: {item_id, input} and/or "
            "{output_id, text, candidate} per line (the candidate is used where the ratings "
            "row gives none)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="validate and show what would be created (criteria and their scales, "
            "counts, warnings) without writing anything",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        scales = {}
        for spec in opts["scale"]:
            key, sep, text = spec.partition("=")
            if not sep:
                raise CommandError(f"--scale needs KEY=SCALE, got {spec!r}")
            try:
                scales[key.strip()] = scale_parse(text)
            except ValueError as exc:
                raise CommandError(f"--scale {spec}: {exc}") from exc
        thresholds: dict[str, int] = {}
        for spec in opts["pass_threshold"]:
            key, sep, text = spec.partition("=")
            key = key.strip()
            if not sep or not key:
                raise CommandError(f"--pass-threshold needs KEY=N, got {spec!r}")
            try:
                n = int(text.strip())
            except ValueError:
                raise CommandError(
                    f"--pass-threshold {spec}: N must be an integer point of the scale of "
                    f"'{key}', got {text.strip()!r}"
                ) from None
            if key in thresholds and thresholds[key] != n:
                raise CommandError(
                    f"--pass-threshold {spec}: '{key}' is given {thresholds[key]} already"
                )
            thresholds[key] = n
        families = {}
        for spec in opts["family"]:
            name, sep, fam = spec.partition("=")
            if not sep:
                raise CommandError(f"--family needs NAME=FAMILY, got {spec!r}")
            families[name.strip()] = fam.strip()
        try:
            # One transaction around the study too: a refused file leaves no new study behind.
            with transaction.atomic():
                study = study_for_import(opts["study"], owner=opts.get("owner"), name=None)
                summary = ratings_import(
                    study=study,
                    rows=ratings_read(opts["file"], fmt=opts["format"]),
                    scales=scales,
                    families=families,
                    pairwise_values=opts.get("pairwise_values"),
                    texts=ratings_read(opts["texts"], fmt="jsonl") if opts.get("texts") else None,
                    dry_run=bool(opts.get("dry_run")),
                    pass_thresholds=thresholds,
                )
                if summary.dry_run:
                    transaction.set_rollback(True)
        except AppError as exc:
            raise CommandError(app_error_text(exc)) from exc
        except ReadError as exc:
            raise CommandError(str(exc)) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(str(exc)) from exc
        summary_write(self, summary)
