"""The study menu of the site layout: links to a study's lead pages for the actor who leads it.

It reads the actor's study role, so it lives in the studies app (base.html loads `study_nav`
beside reviewhub's generic `reviewhub_ui`).
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse

from reviewhub.capabilities import Capability, capabilities

from ..access import study_role
from ..models import Study

register = template.Library()

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
