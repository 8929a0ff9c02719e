"""Constants shared by the annotation services, the API and the grading page.

The grading page (templates/annotations/) imports SEVERITY_SCALE and SEVERITY_QUESTION from
here, so the labels an annotator reads are the ones the docs and the exports describe.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class SeverityPoint(NamedTuple):
    value: int
    label: str
    description: str


SEVERITY_QUESTION: Final = "If this output reached a user, how bad would it be?"

# 1..5, asked only when a label is a failure. The descriptions anchor each point in consequences
# for the user or the business, so that the scale can later be turned into error costs.
SEVERITY_SCALE: Final[tuple[SeverityPoint, ...]] = (
    SeverityPoint(1, "Harmless", "A user would barely notice or would shrug it off; no cost."),
    SeverityPoint(
        2, "Minor", "A small annoyance or inconvenience that the user notices and works around."
    ),
    SeverityPoint(
        3,
        "Moderate",
        "Wastes real time or misleads on something that matters; the user may act on it wrongly.",
    ),
    SeverityPoint(
        4,
        "Serious",
        "Likely to cause real harm or cost: a wrong decision, lost money or time, a complaint.",
    ),
    SeverityPoint(
        5,
        "Severe harm or cost",
        "Safety, legal, financial or reputational damage that is hard or impossible to undo.",
    ),
)
SEVERITY_LABELS: Final[dict[int, str]] = {p.value: p.label for p in SEVERITY_SCALE}
SEVERITY_MIN: Final = 1
SEVERITY_MAX: Final = 5

# The flags an annotator may raise on a subject; any other key is refused.
FLAG_KEYS: Final[tuple[str, ...]] = ("malformed_input", "unsure", "offensive")
FLAG_LABELS: Final[dict[str, str]] = {
    "malformed_input": "Input is malformed",
    "unsure": "Unsure",
    "offensive": "Offensive content",
}

# Pairwise values as an annotator sees them: "A" is the LEFT text shown.
PAIRWISE_VALUES: Final[tuple[str, ...]] = ("A", "B", "tie")
