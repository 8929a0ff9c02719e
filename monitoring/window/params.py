"""Parameters of a monitoring window (pure: no Django).

A window is an hour or a day in UTC, named by its granularity and its start, which must lie on
the hour (on midnight UTC for a day). `window_params_validate` raises one `ValidationFailed`
whose details name each bad parameter (``params.granularity``, ``params.start``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reviewhub.errors import Problems

GRANULARITIES: dict[str, dt.timedelta] = {
    "hour": dt.timedelta(hours=1),
    "day": dt.timedelta(days=1),
}


@dataclass(frozen=True)
class WindowParams:
    granularity: str
    start: dt.datetime

    @property
    def end(self) -> dt.datetime:
        return self.start + GRANULARITIES[self.granularity]


def window_floor(at: dt.datetime, granularity: str) -> dt.datetime:
    """The start of the window of `granularity` that contains `at` (aware, UTC)."""
    if at.tzinfo is None:
        raise ValueError("need an aware datetime")
    at = at.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    if granularity == "day":
        at = at.replace(hour=0)
    return at


def _parse_start(raw: Any) -> dt.datetime | str:
    if isinstance(raw, dt.datetime):
        value = raw
    elif isinstance(raw, str):
        try:
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return "must be an ISO 8601 date-time, e.g. 2026-12-07T13:00:00Z"
    else:
        return "must be an ISO 8601 date-time, e.g. 2026-12-07T13:00:00Z"
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)  # naive = UTC, as everywhere in the API
    return value.astimezone(dt.UTC)


def window_params_validate(raw: Mapping[str, Any]) -> WindowParams:
    """`{"granularity": "hour"|"day", "start": ISO date-time}` checked and typed."""
    problems = Problems()
    granularity = raw.get("granularity", "hour")
    if granularity not in GRANULARITIES:
        problems.add("params.granularity", "must be 'hour' or 'day'")
    start = _parse_start(raw.get("start"))
    if isinstance(start, str):
        problems.add("params.start", start)
    elif granularity in GRANULARITIES and window_floor(start, granularity) != start:
        where = "midnight UTC" if granularity == "day" else "the hour"
        problems.add("params.start", f"a {granularity} window starts on {where}")
    problems.raise_if_any("The window")
    assert isinstance(start, dt.datetime)
    return WindowParams(granularity=str(granularity), start=start)
