"""Builders for grading-page tests: a study with a rubric, outputs and an active sampling plan.

Built with the shared factories and the annotation services (never by writing queue rows by
hand), so the pages are tested against the real queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from annotations.services import sampling_plan_create
from studies.models import Criterion, Membership, Study
from tests.factories import (
    CandidateFactory,
    CriterionFactory,
    ItemFactory,
    MembershipFactory,
    OutputFactory,
    RubricVersionFactory,
    StudyFactory,
    UserFactory,
)

PASSWORD = "pw-for-tests-123"

ORDINAL_POINTS = [
    {"value": 1, "label": "Unreadable"},
    {"value": 2, "label": "Hard to follow"},
    {"value": 3, "label": "Clear enough"},
    {"value": 4, "label": "Clear"},
    {"value": 5, "label": "Very clear"},
]
TONE_POINTS = [
    {"value": "friendly", "label": "Friendly"},
    {"value": "neutral", "label": "Neutral"},
    {"value": "rude", "label": "Rude"},
]

SUPPORT_ITEMS = [
    (
        "How do I reset my password if I no longer have access to the email on my account?",
        "Customer plan: Business. Previous ticket: locked out after changing jobs.",
        "Use the 'Forgot password' link, choose 'I no longer have access to this email', and "
        "verify with the phone number on file; support can also verify identity by invoice.",
        "You can reset it from the sign-in page: choose \u201cForgot password\u201d, then "
        "\u201cI can't access this email\u201d. We'll text a code to the phone number on your "
        "account. If you have no phone on file, reply with your latest invoice number and our "
        "team will verify you within one business day.",
    ),
    (
        "Can I export all my invoices as a single CSV file?",
        "",
        "Billing > Invoices > Export > CSV (all dates).",
        "Yes. Go to Billing \u2192 Invoices, press Export and pick CSV. Leave the date range "
        "empty to get every invoice.\n\n    date,number,amount\n    2024-01-31,INV-0001,49.00",
    ),
    (
        "The app crashes every time I open the Reports tab on Android 14. What can I do?",
        "Device: Pixel 7. App version 5.2.0 (outdated; current is 5.4.1).",
        "Update to 5.4.1, which fixes the Android 14 Reports crash.",
        "Restart your phone and reinstall the app. If that does not help, Android 14 is not "
        "supported yet.",
    ),
    (
        "Is my data stored in the EU?",
        "",
        "Yes for accounts created after March 2023 (Frankfurt region); older accounts can ask "
        "to migrate.",
        "All customer data is stored in Frankfurt (EU) for accounts created after March 2023. "
        "Older accounts can request a migration from Settings \u2192 Privacy.",
    ),
]


@dataclass
class GradingStudy:
    study: Study
    lead: Any
    annotators: list[Any]
    criteria: dict[str, Criterion]
    outputs: list[Any]
    candidates: list[Any]
    plan: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def grading_study(
    *,
    slug: str = "support",
    n_annotators: int = 1,
    k: int = 1,
    texts: list[str] | None = None,
    show_reference: bool = True,
    is_simulated: bool = True,
    criteria: tuple[str, ...] = ("correct", "clarity", "tone"),
    candidate_name: str = "cand-one",
    rows: list[int] | None = None,
) -> GradingStudy:
    """A support-answers study: one candidate per output text, binary/ordinal/categorical
    criteria, an active plan with k annotators per output."""
    lead: Any = UserFactory(username=f"{slug}-lead", password=PASSWORD)
    study: Any = StudyFactory(
        slug=slug,
        name="Support answers",
        owner=lead,
        show_reference=show_reference,
        is_simulated=is_simulated,
        task_description="Answer customer-support questions for a SaaS product.",
    )
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    annotators = []
    for i in range(n_annotators):
        user = UserFactory(username=f"ann{i + 1}", password=PASSWORD)
        MembershipFactory(study=study, user=user, role=Membership.Role.ANNOTATOR)
        annotators.append(user)
    rubric = RubricVersionFactory(study=study, version=1)
    made: dict[str, Criterion] = {}
    specs: dict[str, dict[str, Any]] = {
        "correct": dict(
            name="Correctness", scale=Criterion.Scale.BINARY,
            guidance="Is every factual claim right for this customer? A wrong step fails.",
        ),
        "clarity": dict(
            name="Clarity", scale=Criterion.Scale.ORDINAL, points=ORDINAL_POINTS,
            pass_threshold=3, guidance="Could the customer follow it without asking again?",
        ),
        "tone": dict(
            name="Tone", scale=Criterion.Scale.CATEGORICAL, points=TONE_POINTS,
            pass_labels=["friendly", "neutral"], guidance="How does the answer sound?",
        ),
        "score": dict(
            name="Overall score", scale=Criterion.Scale.INTERVAL, min=1, max=5,
            pass_threshold=3.5, guidance="Any number from 1 to 5; below 3.5 fails.",
        ),
    }
    for position, key in enumerate(criteria):
        criterion: Any = CriterionFactory(rubric=rubric, key=key, position=position, **specs[key])
        made[key] = criterion
    candidate = CandidateFactory(study=study, name=candidate_name, provider="acme-ai",
                                 model_id=f"{candidate_name}-model")
    outputs = []
    picked = [SUPPORT_ITEMS[i] for i in rows] if rows is not None else SUPPORT_ITEMS
    bodies = texts or [row[3] for row in picked]
    for i, text in enumerate(bodies):
        question, context, reference, _ = picked[i % len(picked)]
        item = ItemFactory(study=study, external_id=f"ticket-{i + 1}", input=question,
                           context=context, reference=reference)
        outputs.append(OutputFactory(study=study, candidate=candidate, item=item, text=text))
    plan = sampling_plan_create(study=study, spec={"mode": "all", "seed": 7}, k=k,
                                gold_rate=0.0, created_by=lead)
    return GradingStudy(study=study, lead=lead, annotators=annotators, criteria=made,
                        outputs=outputs, candidates=[candidate], plan=plan)
