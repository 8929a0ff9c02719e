"""A range of windows recomputed at once: the same stored results as computing each window on
its own, one row per window however often it runs, and the bounds checked. On PostgreSQL the
windows are computed on a pool of threads, each on its own connection, so the test commits
(``transaction=True``): the threads must see the rows."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from monitoring import services
from monitoring.models import Deployment, Window
from monitoring.services import traffic_ingest, windows_range_compute
from monitoring.window.params import WindowParams
from reviewhub.errors import ValidationFailed

pytestmark = pytest.mark.django_db(transaction=True)

DAY0 = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
DAYS = 4


def _traffic(deployment: Deployment) -> None:
    rng = np.random.default_rng(5)
    rows = [{
        "request_id": f"r{i}",
        "input": f"question {i}",
        "output": "x" * int(rng.integers(20, 300)),
        "metadata": {"language": str(rng.choice(["en", "de"]))},
        "latency_ms": float(rng.gamma(4, 100)),
        "cost": float(rng.uniform(0, 0.01)),
        "occurred_at": (DAY0 + dt.timedelta(minutes=int(rng.integers(0, DAYS * 1440)))
                        ).isoformat(),
    } for i in range(600)]
    traffic_ingest(deployment=deployment, rows=rows)


def test_a_range_stores_what_each_window_computes_alone(deployment: Deployment,
                                                       monkeypatch: Any) -> None:
    _traffic(deployment)
    threads: set[str] = set()
    inner = services.window_compute

    def spy(**kw: Any) -> Window:
        threads.add(threading.current_thread().name)
        return inner(**kw)

    monkeypatch.setattr(services, "window_compute", spy)
    got = windows_range_compute(deployment=deployment, granularity="day", start=DAY0,
                                end=DAY0 + dt.timedelta(days=DAYS), workers=2)
    assert [w.start for w in got] == [DAY0 + dt.timedelta(days=d) for d in range(DAYS)]
    if connection.vendor == "postgresql":
        assert threads and "MainThread" not in threads  # computed on the pool
    ranged = {w.start: (w.n_rows, w.result, w.fingerprint) for w in got}
    assert sum(n for n, _, _ in ranged.values()) == 600
    # Each window computed alone, forced, stores the same result.
    for d in range(DAYS):
        alone = inner(deployment=deployment, params=WindowParams("day", DAY0 + dt.timedelta(
            days=d)), force=True)
        assert (alone.n_rows, alone.result, alone.fingerprint) == ranged[alone.start]
    # Again, unchanged and forced: still one row per window.
    windows_range_compute(deployment=deployment, granularity="day", start=DAY0,
                          end=DAY0 + dt.timedelta(days=DAYS), workers=2)
    windows_range_compute(deployment=deployment, granularity="day", start=DAY0,
                          end=DAY0 + dt.timedelta(days=DAYS), workers=2, force=True)
    assert Window.objects.filter(deployment=deployment, granularity="day").count() == DAYS


def test_the_range_starts_on_the_first_whole_window(deployment: Deployment) -> None:
    got = windows_range_compute(deployment=deployment, granularity="day",
                                start=DAY0 + dt.timedelta(hours=5),
                                end=DAY0 + dt.timedelta(days=2, hours=1), workers=1)
    assert [w.start for w in got] == [DAY0 + dt.timedelta(days=1),
                                      DAY0 + dt.timedelta(days=2)]
    with pytest.raises(ValidationFailed) as err:
        windows_range_compute(deployment=deployment, granularity="day", start=DAY0, end=DAY0)
    assert err.value.details["errors"][0]["path"] == "end"


def test_the_command_names_a_bad_bound(deployment: Deployment, capsys: Any) -> None:
    with pytest.raises(CommandError, match="--start"):
        call_command("windows_recompute", deployment=deployment.pk, start="yesterday",
                     end="2026-12-01T00:00:00Z")
    with pytest.raises(CommandError, match="--deployment"):
        call_command("windows_recompute", deployment=999999, start="2026-11-30T00:00:00Z",
                     end="2026-12-01T00:00:00Z")
    call_command("windows_recompute", deployment=deployment.pk, start="2026-11-30T00:00:00Z",
                 end="2026-12-02T00:00:00Z")
    assert "2 day windows" in capsys.readouterr().out
