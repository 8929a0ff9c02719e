"""`manage.py judge_sweep [--every SECONDS]`: re-queue expired leases, finish and re-kick runs."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from judges.celery_tasks import judge_run_enqueue
from judges.runs import judge_sweep


def _enqueue(run_id: int, n: int) -> None:
    judge_run_enqueue(run_id=run_id, n=n)


class Command(BaseCommand):
    help = "Sweep judge runs once (or every N seconds): expired leases, idle runs, verdicts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0.0,
                            help="repeat every SECONDS until interrupted (default: once)")

    def handle(self, *args: Any, **options: Any) -> None:
        every = float(options["every"])
        while True:
            result = judge_sweep(enqueue=_enqueue)
            self.stdout.write(
                f"requeued={result.requeued} failed={result.failed} "
                f"runs_finished={result.runs_finished} runs_kicked={result.runs_kicked} "
                f"settled={result.settled}"
            )
            if every <= 0:
                return
            time.sleep(every)
