"""`python manage.py windows_recompute --deployment ID [--granularity day] --start ISO --end ISO`.

Recomputes a deployment's stored windows over a range (docs/monitoring.md, "Windows"): after a
new calibration snapshot is put in force or the plan's gates change, the history is read again
under them. Idempotent; `--force` recomputes windows whose input did not change too.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from monitoring.models import Deployment
from monitoring.services import windows_range_compute
from monitoring.window.params import GRANULARITIES, window_params_validate
from reviewhub.errors import AppError


class Command(BaseCommand):
    help = "Recompute a deployment's windows that start in [start, end) (docs/monitoring.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", type=int, required=True, help="deployment id")
        parser.add_argument("--granularity", default="day", choices=sorted(GRANULARITIES))
        parser.add_argument("--start", required=True, help="ISO 8601 date-time (UTC if naive)")
        parser.add_argument("--end", required=True, help="ISO 8601 date-time, exclusive")
        parser.add_argument("--force", action="store_true",
                            help="recompute windows whose input did not change too")
        parser.add_argument("--workers", type=int, default=None,
                            help="windows computed at once on PostgreSQL (default: cores, <= 4)")

    def handle(self, *args: Any, **opts: Any) -> None:
        deployment = Deployment.objects.filter(pk=opts["deployment"]).first()
        if deployment is None:
            raise CommandError(f"--deployment: no deployment {opts['deployment']}")
        # The bounds are read as a window start is (ISO 8601, naive = UTC, on the hour).
        bounds: dict[str, dt.datetime] = {}
        for name in ("start", "end"):
            try:
                bounds[name] = window_params_validate(
                    {"granularity": "hour", "start": opts[name]}).start
            except AppError as exc:
                raise CommandError(f"--{name}: {opts[name]!r} is not an ISO 8601 date-time "
                                   "on the hour") from exc
        t0 = time.perf_counter()
        try:
            windows = windows_range_compute(
                deployment=deployment, granularity=opts["granularity"], start=bounds["start"],
                end=bounds["end"], force=opts["force"], workers=opts["workers"])
        except AppError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{len(windows)} {opts['granularity']} windows of deployment "
                          f"{deployment.pk} in {time.perf_counter() - t0:.2f} s")
