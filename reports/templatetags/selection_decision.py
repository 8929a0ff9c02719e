"""`{% study_decision study %}`: the study's current decision and next step (the overview's
lead block); `{% study_decision_state study %}`: the state alone (the home page's list).

Template tags, so that the studies app's pages show the decision without importing reports
(reports depends on studies, never the other way round).
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from reports.selection_tables import difference_text, margin_text
from reports.selectors import study_decision_summary

register = template.Library()


def _summary(study: Any) -> dict[str, Any] | None:
    summary = study_decision_summary(study=study)
    if summary is None:
        return None
    unit = "rate" if str(summary["primary_metric"] or "").startswith(
        ("rubric_pass_rate", "pass_rate", "win_rate")) else "score"
    summary["difference_text"] = (difference_text(summary["difference"], unit)
                                  if summary["difference"] else "")
    summary["margin_text"] = margin_text(summary["margin"], unit)
    summary["url"] = reverse("reports-selection-detail",
                             kwargs={"slug": study.slug, "snapshot_id": summary["snapshot_id"]})
    return summary


@register.inclusion_tag("reports/_decision_summary.html")
def study_decision(study: Any) -> dict[str, Any]:
    return {"study": study, "d": _summary(study),
            "selection_url": reverse("reports-selection", kwargs={"slug": study.slug})}


@register.inclusion_tag("reports/_decision_state.html")
def study_decision_state(study: Any) -> dict[str, Any]:
    # One small query per listed study (the latest selection snapshot's decision keys).
    return {"d": study_decision_summary(study=study)}
