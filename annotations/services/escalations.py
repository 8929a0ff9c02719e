"""Escalation plans: a sampling plan version whose entries are chosen by a decision rule (the
calibrated-score policy said "ask a human"), not drawn at random.

Its entries have `draw_kind` "escalation" and no inclusion probability, so no estimator weights
them as a random sample. Like every new plan version it supersedes the active plan; subjects
labelled under earlier versions keep their annotations, counted toward k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Criterion, Output, Study
from studies.subjects import subject_field as subject_field_of

from .. import sampling
from ..models import Annotation, Assignment, QueueEntry, SamplingPlan
from .common import _require_lead, latest_rubric
from .plans import _end_leases, _queue_analyze

MODE_ESCALATION = "escalation"


def escalation_plan_create(
    *,
    study: Study,
    subject: str,
    subject_ids: Sequence[int],
    source: str,
    k: int | None = None,
    created_by: User,
    details: dict[str, object] | None = None,
) -> tuple[SamplingPlan, bool]:
    """A new plan version that sends exactly `subject_ids` (outputs or comparisons, in that
    order of priority) to `k` annotators each; returns (plan, created).

    Idempotent per `source` (e.g. "calibration:<snapshot id>"): when a plan of the study was
    already made for it, that plan is returned with created False and nothing changes. `k`
    defaults to the latest plan's k (3 without one). Ids not in the study are refused.
    """
    _require_lead(study=study, user=created_by)
    if subject not in sampling.SUBJECTS:
        raise ValidationFailed("subject must be 'output' or 'comparison'.",
                               details={"errors": [{"path": "subject", "message": "unknown"}]})
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100):
        raise ValidationFailed("k must be an integer from 1 to 100.", details={"k": "invalid"})
    ids = list(dict.fromkeys(int(i) for i in subject_ids))
    if not ids:
        raise ValidationFailed("There are no subjects to escalate.",
                               details={"errors": [{"path": "subjects", "message": "empty"}]})
    model = Comparison if subject == "comparison" else Output
    found = set(model.objects.filter(study=study, pk__in=ids).values_list("id", flat=True))
    if len(found) != len(ids):
        raise ValidationFailed(f"Some {subject}s are not in this study.",
                               details={"errors": [{"path": "subjects", "message": "unknown"}]})
    rubric = latest_rubric(study)
    if rubric is None:
        raise ValidationFailed("The study has no rubric yet.", details={"rubric": "missing"})
    criteria = Criterion.objects.filter(rubric=rubric)
    criteria = (criteria.filter(scale=Criterion.Scale.PAIRWISE) if subject == "comparison"
                else criteria.exclude(scale=Criterion.Scale.PAIRWISE))
    criterion_ids = list(criteria.values_list("id", flat=True))
    subject_field = subject_field_of(subject)
    now = timezone.now()
    with transaction.atomic():
        # The study row serialises plan creation (version numbers, one active plan) and makes
        # the "already escalated?" check race-free.
        Study.objects.select_for_update().filter(pk=study.pk).first()
        existing = (SamplingPlan.objects.filter(study=study, spec__mode=MODE_ESCALATION,
                                                spec__source=source)
                    .order_by("version").first())
        if existing is not None:
            return existing, False
        latest = SamplingPlan.objects.filter(study=study).order_by("-version").first()
        needed = k if k is not None else (latest.k if latest is not None else 3)
        last = SamplingPlan.objects.filter(study=study).aggregate(v=Max("version"))["v"] or 0
        old_plans = list(
            SamplingPlan.objects.filter(study=study, is_active=True).values_list("id", flat=True)
        )
        if old_plans:
            SamplingPlan.objects.filter(pk__in=old_plans).update(is_active=False, superseded_at=now)
            _end_leases(plan_ids=old_plans, now=now)
        prior: dict[int, set[int]] = {}
        for sid, annotator_id in (
            Annotation.objects.filter(criterion_id__in=criterion_ids,
                                      **{f"{subject_field}__in": ids})
            .values_list(subject_field, "annotator_id").distinct()
        ):
            prior.setdefault(sid, set()).add(annotator_id)
        seed = int(np.random.default_rng().integers(2**31))
        plan = SamplingPlan.objects.create(
            study=study, version=last + 1, rubric=rubric,
            spec={"mode": MODE_ESCALATION, "subject": subject, "source": source, "seed": seed},
            k=needed, gold_rate=0.0, is_active=True, created_by=created_by,
            summary={
                "seed": seed,
                "entries": len(ids),
                "gold_entries": 0,
                "carried_over_annotators": sum(len(v) for v in prior.values()),
                "draw_kinds": {sampling.DRAW_ESCALATION: len(ids)},
                "source": source,
                **(details or {}),
            },
        )
        # Every entry gets a seeded random key, as in drawn plans: each annotator's order is
        # derived from it, so annotators working in parallel do not all start at one output.
        keys = np.random.default_rng(seed).integers(0, sampling.SORT_KEY_LIMIT, size=len(ids))
        QueueEntry.objects.bulk_create(
            [
                QueueEntry(plan=plan, is_gold=False, needed=needed,
                           done_count=min(needed, len(prior.get(sid, ()))),
                           sort_key=int(key), stratum="", sample_weight=1.0,
                           draw_kind=QueueEntry.DrawKind.ESCALATION,
                           inclusion_probability=None, **{subject_field: sid})
                for sid, key in zip(ids, keys, strict=True)
            ],
            batch_size=1000,
        )
        if prior:
            entry_ids = dict(QueueEntry.objects.filter(plan=plan).values_list(subject_field, "id"))
            Assignment.objects.bulk_create(
                [
                    Assignment(entry_id=entry_ids[sid], annotator_id=annotator_id,
                               status=Assignment.Status.SUBMITTED, carried_over=True,
                               finished_at=now)
                    for sid, annotators in prior.items()
                    for annotator_id in sorted(annotators)
                ],
                batch_size=1000,
            )
    if connection.vendor == "postgresql":
        transaction.on_commit(_queue_analyze)
    return plan, True


__all__ = ["MODE_ESCALATION", "escalation_plan_create"]
