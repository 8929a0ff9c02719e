"""Pages of human annotation: the grading page (annotators) and the lead pages.

Thin, like the API views: resolve the study through `page_study` (404 for anyone without the
role), call a service or selector, render. The grading page is built ONLY from
`selectors.grading_context`, whose allow-list keeps the candidate, judge verdicts and other
annotators' labels out of the page; the JSON the page fetches (submit, heartbeat) carries no
subject data at all.
"""

from __future__ import annotations

from .grading import (
    CONTEXT_OPEN_CHARS,
    INPUT_OPEN_CHARS,
    annotation_revise_page,
    grade,
    grade_heartbeat,
    grade_skip,
    grade_submit,
    labels_from_form,
)
from .lead import (
    DISAGREEMENT_PAGE,
    DISAGREEMENT_STATUSES,
    lead_disagreements,
    lead_members,
    lead_plans,
    lead_queue,
    my_invitations,
)

__all__ = [
    "CONTEXT_OPEN_CHARS",
    "DISAGREEMENT_PAGE",
    "DISAGREEMENT_STATUSES",
    "INPUT_OPEN_CHARS",
    "annotation_revise_page",
    "grade",
    "grade_heartbeat",
    "grade_skip",
    "grade_submit",
    "labels_from_form",
    "lead_disagreements",
    "lead_members",
    "lead_plans",
    "lead_queue",
    "my_invitations",
]
