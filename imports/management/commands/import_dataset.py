"""`python manage.py import_dataset pandalm|judge-bench:newsroom|...|hanna --study SLUG`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from imports.datasets import DATASETS, DatasetError, dataset_import
from reviewhub.errors import AppError

from ._common import app_error_text, study_for_import, summary_write


class Command(BaseCommand):
    help = "Import one of the public evaluation data sets through the generic ratings importer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dataset", choices=DATASETS)
        parser.add_argument(
            "--data-dir",
            default=os.environ.get("REVIEWHUB_DATA_DIR", ""),
            help="the shared data folder (default: $REVIEWHUB_DATA_DIR)",
        )
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--owner", help="create the study with this lead if it is missing")

    def handle(self, *args: Any, **opts: Any) -> None:
        data_dir = Path(opts["data_dir"] or "")
        if not opts["data_dir"] or not data_dir.is_dir():
            raise CommandError("--data-dir (or $REVIEWHUB_DATA_DIR) must name the data folder")
        try:
            # One transaction around the study too: a failed import leaves no new study behind.
            with transaction.atomic():
                study = study_for_import(
                    opts["study"], owner=opts.get("owner"), name=opts["dataset"]
                )
                summary = dataset_import(study=study, name=opts["dataset"], data_dir=data_dir)
        except DatasetError as exc:
            raise CommandError(str(exc)) from exc
        except AppError as exc:
            raise CommandError(app_error_text(exc)) from exc
        summary_write(self, summary)
