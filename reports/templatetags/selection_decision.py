"""`{% study_decision study %}`: the study's current decision and next step (the overview's
lead block); `{% study_decision_states rows as decisions %}` then
`{% study_decision_state decisions study %}`: the state alone (the home page's list, every
study's decision read in one query).

Template tags, so that the studies app's pages show the decision without importing reports
(reports depends on studies, never the other way round).
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from reports.selection.present.tables import difference_text, margin_text
from reports.selectors import study_decision_summaries, study_decision_summary

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


@register.simple_tag
def study_decision_states(rows: Any) -> dict[int, dict[str, Any]]:
    """Every listed study's decision (the home page's rows, each `{"study": …, …}`), by study
    id, in one query rather than one per study."""
    return study_decision_summaries(studies=[row["study"] for row in rows])


@register.inclusion_tag("reports/_decision_state.html")
def study_decision_state(decisions: dict[int, dict[str, Any]], study: Any) -> dict[str, Any]:
    return {"d": decisions.get(study.pk)}
