"""`python manage.py report <kind> --study SLUG [--params JSON|FILE] [--out result.json]`.

Computes a report snapshot synchronously, through the same services as the API and the Celery
worker (no broker, no worker), stores it, and writes the JSON that `GET` on the snapshot's API
resource returns (docs/reports.md, "Offline: manage.py report").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.utils.encoders import JSONEncoder

from reports.api import ReportDetailSerializer
from reports.kinds import kind_get, kind_names
from reports.services import report_compute, report_snapshot_create
from reviewhub.errors import AppError
from snapshots.models import ReportSnapshot
from studies.models import AnalysisPlan, Study

from ._common import app_error_text


def params_read(text: str | None) -> dict[str, Any]:
    """--params as inline JSON (it starts with "{") or as the path of a JSON file."""
    if text is None:
        return {}
    source = "--params"
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise CommandError(f"--params: {text!r} is neither a JSON object nor a file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--params: cannot read {path}: {exc}") from exc
        source = f"--params {path}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    if not isinstance(value, dict):
        raise CommandError(f"{source}: params must be a JSON object")
    return value


class Command(BaseCommand):
    help = (
        "Compute a report snapshot now, without a worker, store it and write the JSON of its "
        "API resource (docs/reports.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help=f"report kind: {', '.join(kind_names())}")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument(
            "--params", help="parameters as a JSON object, or the path of a JSON file"
        )
        parser.add_argument(
            "--plan-version",
            type=int,
            help="analysis plan version to record (default: the latest locked plan)",
        )
        parser.add_argument(
            "--out", help="write the JSON here (default: standard output)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            kind = kind_get(opts["kind"]).key
        except AppError as exc:
            raise CommandError(app_error_text(exc)) from exc
        study = Study.objects.filter(slug=opts["study"]).first()
        if study is None:
            raise CommandError(f"--study: study '{opts['study']}' does not exist")
        params = params_read(opts.get("params"))
        plan = None
        if opts.get("plan_version") is not None:
            plan = AnalysisPlan.objects.filter(study=study, version=opts["plan_version"]).first()
            if plan is None:
                raise CommandError(
                    f"--plan-version: analysis plan version {opts['plan_version']} not found"
                )
        try:
            snapshot = report_snapshot_create(
                study=study, kind=kind, params=params, plan=plan, created_by=None
            )
        except AppError as exc:
            raise CommandError(app_error_text(exc)) from exc
        # Synchronous: the worker's own code path, called in this process.
        snapshot = report_compute(report_id=snapshot.pk)
        text = json.dumps(ReportDetailSerializer(snapshot).data, cls=JSONEncoder, indent=2,
                          ensure_ascii=False, allow_nan=False)
        if opts.get("out"):
            try:
                Path(opts["out"]).write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"--out: cannot write {opts['out']}: {exc}") from exc
            self.stdout.write(
                f"{kind} report {snapshot.pk}: {snapshot.status}, inputs "
                f"{snapshot.input_fingerprint[:12] or '-'}, written to {opts['out']}"
            )
        else:
            self.stdout.write(text)
        if snapshot.status != ReportSnapshot.Status.DONE:
            raise CommandError(f"{kind} report {snapshot.pk} failed: {snapshot.error}")
