"""`python manage.py import_peer TOOL FILE --study SLUG [--option KEY=VALUE ...]`: import an
export of Label Studio, Langfuse, promptfoo or Inspect AI (docs/import-ratings.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from imports.generic import ReadError, ScaleSpec, scale_parse
from imports.peers import TOOLS, dropped_dict, peer_import
from reviewhub.errors import AppError

from ._common import app_error_text, study_for_import, summary_write


def _pairs(specs: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"{flag} needs KEY=VALUE, got {spec!r}")
        out[key.strip()] = value.strip()
    return out


class Command(BaseCommand):
    help = ("Import an export of another evaluation tool (labelstudio, langfuse, promptfoo, "
            "inspect) as items, outputs, judge verdicts and human labels "
            "(docs/import-ratings.md).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tool", choices=TOOLS)
        parser.add_argument("file", help="the tool's export file")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--owner", help="create the study with this lead if it is missing")
        parser.add_argument(
            "--option", action="append", default=[], metavar="KEY=VALUE",
            help="what the export cannot say, per tool (repeatable): labelstudio "
            "output_field, pair_fields, pair_candidates, candidate, input_field, task_ids, "
            "anonymous_annotators, predictions; langfuse generation, api_scores, candidate; "
            "promptfoo values; inspect candidate, partial_as, noanswer_as")
        parser.add_argument("--scores", help="langfuse: a scores export (CSV or JSON)")
        parser.add_argument("--traces", help="langfuse: the traces export (CSV) beside an "
                            "observations CSV export given as FILE")
        parser.add_argument("--scale", action="append", default=[], metavar="KEY=SCALE",
                            help="scale of a new criterion, as for import_ratings (repeatable)")
        parser.add_argument("--pass-threshold", action="append", default=[], metavar="KEY=N",
                            help="first passing point of a new ordinal criterion (repeatable)")
        parser.add_argument("--family", action="append", default=[], metavar="NAME=FAMILY",
                            help="model family of a candidate or judge (repeatable)")
        parser.add_argument("--dry-run", action="store_true",
                            help="validate and show what would be written, write nothing")

    def handle(self, *args: Any, **opts: Any) -> None:
        options: dict[str, Any] = _pairs(opts["option"], "--option")
        scales: dict[str, ScaleSpec] = {}
        for key, text in _pairs(opts["scale"], "--scale").items():
            try:
                scales[key] = scale_parse(text)
            except ValueError as exc:
                raise CommandError(f"--scale {key}={text}: {exc}") from exc
        thresholds: dict[str, int] = {}
        for key, text in _pairs(opts["pass_threshold"], "--pass-threshold").items():
            try:
                thresholds[key] = int(text)
            except ValueError:
                raise CommandError(f"--pass-threshold {key}={text}: N must be an integer") from None
        try:
            for part in ("scores", "traces"):
                if opts.get(part):
                    options[part] = Path(opts[part]).read_bytes()
            data = Path(opts["file"]).read_bytes()
            with transaction.atomic():
                study = study_for_import(opts["study"], owner=opts.get("owner"), name=None)
                summary, tr = peer_import(
                    study=study, tool=opts["tool"], data=data, filename=opts["file"],
                    options=options, scales=scales, pass_thresholds=thresholds,
                    families=_pairs(opts["family"], "--family"),
                    dry_run=bool(opts.get("dry_run")),
                )
                if summary.dry_run:
                    transaction.set_rollback(True)
        except AppError as exc:
            raise CommandError(app_error_text(exc)) from exc
        except (ReadError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        for reason, n in dropped_dict(tr).items():
            self.stderr.write(f"dropped: {n} {reason}")
        summary_write(self, summary)
