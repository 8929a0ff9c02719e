"""Template helpers for the site layout and the one date format of the pages.

The study menu (`study_nav_links`, which reads the actor's study role) is the `study_nav`
library of the studies app (studies/templatetags/study_nav.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from reviewhub import heartbeat

register = template.Library()

# The one way a page shows a moment: ISO date, 24-hour time, the zone named (pages are in UTC).
WHEN_FORMAT = "%Y-%m-%d %H:%M UTC"


@register.filter
def when_text(value: Any) -> str:
    """The one date format as plain text (for attributes such as title); "" for None."""
    if not isinstance(value, datetime):
        return ""
    if timezone.is_aware(value):
        value = value.astimezone(UTC)
    return value.strftime(WHEN_FORMAT)


@register.filter
def when(value: Any) -> str:
    """A datetime as "2026-12-07 09:14 UTC" (every page uses this one format) in a <time>
    element that never wraps (Chrome would break a date after its hyphens); "" for None."""
    text = when_text(value)
    if not text:
        return ""
    return format_html('<time class="nowrap" datetime="{}">{}</time>',
                       value.isoformat(timespec="seconds"), text)

@register.simple_tag
def background_status() -> Any:
    """The background-work status when it is stale (base.html's banner), else None.

    base.html asks only on a study's lead pages (where `study_nav_links` of studies'
    `study_nav` library found lead links):
    leads start the judge runs and reports that wait when the worker is down; annotators'
    grading does not need it, so their pages stay quiet. One query.
    """
    status = heartbeat.background_status()
    return status if status.stale else None
