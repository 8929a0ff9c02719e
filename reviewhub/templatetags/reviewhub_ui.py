"""Template helpers for the site layout (navigation) and the one date format of the pages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

from reviewhub import heartbeat
from reviewhub.capabilities import Capability, capabilities
from studies.access import study_role
from studies.models import Study

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

# (label, URL names to try in order). Pages owned by other areas appear in the navigation as
# soon as one of their names resolves, so base.html never breaks on a page that is not there.
_LEAD_LINKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Data", ("study-data",)),
    ("Queue", ("annotations-lead-queue",)),
    ("Plans", ("annotations-lead-plans",)),
    ("Disagreements", ("annotations-lead-disagreements",)),
    ("Members", ("annotations-lead-members",)),
    ("Judges", ("judge-list-page",)),
    ("Candidate runs", ("generation-runs-page",)),
    ("Runs", ("judge-run-list-page",)),
    ("Reports", ("report-list-page", "reports-list", "report-list", "reports-page")),
    ("Calibration", ("reports-calibration",)),
    ("Selection", ("reports-selection",)),
    ("Deployments", ("monitoring-list",)),
    ("Analysis plan", ("study-plan",)),
)


def _first_url(names: tuple[str, ...], slug: str) -> str | None:
    for name in names:
        try:
            return reverse(name, kwargs={"slug": slug})
        except NoReverseMatch:
            continue
    return None


@register.simple_tag(takes_context=True)
def study_nav_links(context: Any, study: Any) -> list[dict[str, Any]]:
    """Links to the lead pages of `study` when the signed-in user leads it, else []."""
    request = context.get("request")
    if request is None or not isinstance(study, Study):
        return []
    role = context.get("study_role") or study_role(user=request.user, study=study)
    if Capability.LEAD not in capabilities(role):
        return []
    links = []
    for label, names in _LEAD_LINKS:
        url = _first_url(names, study.slug)
        if url:
            links.append({"label": label, "url": url, "current": request.path == url})
    return links


@register.simple_tag
def background_status() -> Any:
    """The background-work status when it is stale (base.html's banner), else None.

    base.html asks only on a study's lead pages (where `study_nav_links` found lead links):
    leads start the judge runs and reports that wait when the worker is down; annotators'
    grading does not need it, so their pages stay quiet. One query.
    """
    status = heartbeat.background_status()
    return status if status.stale else None
