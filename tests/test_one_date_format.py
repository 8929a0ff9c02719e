"""Pages show a moment in one format ("2026-12-07 09:14 UTC", the `when` filter), never by
their own |date format strings."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from reviewhub.templatetags.reviewhub_ui import when, when_text

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
# Templates whose pages belong to other work in progress; they move to |when with it.
ELSEWHERE: set[str] = set()
# |date:'c' is the machine-readable datetime attribute of a <time>, not shown to anyone.
SHOWN_DATE = re.compile(r"\|(date|time)\b(?!:['\"]c['\"])")


def test_templates_show_dates_only_through_when() -> None:
    offenders = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        name = path.relative_to(TEMPLATES).as_posix()
        if name in ELSEWHERE:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SHOWN_DATE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


def test_when_is_utc_to_the_minute_and_never_wraps() -> None:
    moment = datetime(2026, 12, 7, 10, 14, 59, tzinfo=timezone(timedelta(hours=1)))
    assert when_text(moment) == "2026-12-07 09:14 UTC"
    assert str(when(moment)) == (
        '<time class="nowrap" datetime="2026-12-07T10:14:59+01:00">2026-12-07 09:14 UTC</time>')
    assert when(None) == "" and when_text("2026-12-07") == ""
    assert when_text(datetime(2026, 1, 2, 3, 4, tzinfo=UTC)) == "2026-01-02 03:04 UTC"
