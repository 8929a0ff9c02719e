"""An annotator's own assignment, looked up for the API and the grading pages alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from studies.models import Study

from . import selectors
from .models import Assignment


def own_assignment(study: Study, annotator: Any, assignment_id: int, *,
                   missing: Callable[[str], Exception]) -> Assignment:
    """The assignment `assignment_id` of `annotator` in `study`. Anyone else's, or none, raises
    `missing("Assignment not found.")`: the API's error body and a page's 404 alike, so that
    another annotator's assignment is indistinguishable from one that does not exist."""
    assignment = selectors.assignment_for_annotator(
        study=study, annotator=annotator, assignment_id=assignment_id
    )
    if assignment is None:
        raise missing("Assignment not found.")
    return assignment
