"""Escalation plans: a sampling plan version whose entries are chosen by a decision rule (the
calibrated-score policy said "ask a human"), not drawn at random.

Its entries have `draw_kind` "escalation" and no inclusion probability, so no estimator weights
them as a random sample. Like every new plan version it supersedes the active plan, but by
default it keeps that plan's sampling going: every unfinished entry of the active plan (random
draws, gold, earlier escalations) is carried into the new version as it was drawn, with its draw
kind, inclusion probability, weight and stratum, so the random sample stays whole and its
estimates stay unbiased while the escalations are graded beside it. An escalated subject that
the active plan had already drawn at random keeps its random entry (the random draw is what the
estimators need; it gets labelled either way). Subjects labelled under earlier versions keep
their annotations, counted toward k, and their annotators are never offered them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Max
from django.utils import timezone

from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Criterion, Output, RubricVersion, Study
from studies.subjects import subject_field as subject_field_of

from .. import sampling
from ..models import QueueEntry, SamplingPlan
from .common import latest_rubric, require_lead
from .plans import carried_assignments_create, end_leases, prior_annotators, queue_analyze

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
    keep_sampling: bool = True,
) -> tuple[SamplingPlan, bool]:
    """A new plan version that sends `subject_ids` (outputs or comparisons, in that order of
    priority) to `k` annotators each; returns (plan, created).

    With `keep_sampling` (the default) the active plan's unfinished entries are carried into the
    new version unchanged (see the module docstring), when that plan samples the same kind of
    subject; without it the new version holds the escalations alone and the active plan's
    sampling stops, as with any new plan version. Idempotent per `source` (e.g.
    "calibration:<snapshot id>"): when a plan of the study was already made for it, that plan is
    returned with created False and nothing changes. `k` defaults to the latest plan's k (3
    without one). Ids not in the study are refused.
    """
    require_lead(study=study, user=created_by)
    ids = _escalation_subjects_check(study, subject, subject_ids, k)
    rubric, criterion_ids = _escalation_criteria(study, subject)
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
        carried = _open_entries(old_plans, subject, subject_field) if keep_sampling else []
        carried_ids = {getattr(e, subject_field) for e in carried}
        # An escalated subject that is already an open entry keeps that entry (see above).
        escalate_ids = [sid for sid in ids if sid not in carried_ids]
        if old_plans:
            SamplingPlan.objects.filter(pk__in=old_plans).update(is_active=False, superseded_at=now)
            end_leases(plan_ids=old_plans, now=now)
        all_ids = escalate_ids + [getattr(e, subject_field) for e in carried]
        prior = prior_annotators(criterion_ids, subject_field, all_ids)
        seed = int(np.random.default_rng().integers(2**31))
        plan = SamplingPlan.objects.create(
            study=study, version=last + 1, rubric=rubric,
            spec={"mode": MODE_ESCALATION, "subject": subject, "source": source, "seed": seed,
                  "keep_sampling": keep_sampling},
            k=needed, gold_rate=0.0, is_active=True, created_by=created_by,
            summary={
                "seed": seed,
                "entries": len(all_ids),
                "escalated_entries": len(escalate_ids),
                "escalated_already_drawn": len(ids) - len(escalate_ids),
                "carried_over_entries": len(carried),
                "carried_over_from": sorted(old_plans) if carried else [],
                "gold_entries": sum(1 for e in carried if e.is_gold),
                "carried_over_annotators": sum(len(v) for v in prior.values()),
                "draw_kinds": _draw_kinds(escalate_ids, carried),
                "source": source,
                **(details or {}),
            },
        )
        _escalation_entries_create(plan, seed, escalate_ids, carried, prior, subject_field,
                                   now)
    if connection.vendor == "postgresql":
        transaction.on_commit(queue_analyze)
    return plan, True


def escalation_entries_add(
    *,
    plan: SamplingPlan,
    subject_ids: Sequence[int],
    created_by: User,
    details: dict[str, int] | None = None,
) -> int:
    """Escalations added to an active escalation plan in place, without a new plan version;
    returns how many entries were added.

    For a caller that escalates a few subjects at a time, again and again (the monitoring
    dispatch, every tick): a plan version per call would pile up versions, each carrying every
    unfinished entry of the last. The added entries are like the ones `escalation_plan_create`
    makes (draw kind "escalation", no inclusion probability, the plan's k, earlier annotators
    counted toward it); the plan's other entries are left as they are. Idempotent per subject:
    a subject that already has an entry in the plan is not added again. `details` (counts) are
    added to the plan summary's. Refused when the plan is not (or no longer) the study's
    active escalation plan: the caller then makes a new version with
    `escalation_plan_create`.
    """
    study = plan.study
    require_lead(study=study, user=created_by)
    subject = (plan.spec or {}).get("subject", "output")
    ids = _escalation_subjects_check(study, subject, subject_ids, None)
    _rubric, criterion_ids = _escalation_criteria(study, subject)
    subject_field = subject_field_of(subject)
    with transaction.atomic():
        # The study row, as in `escalation_plan_create`: no plan change can run beside this.
        Study.objects.select_for_update().filter(pk=study.pk).first()
        locked = SamplingPlan.objects.get(pk=plan.pk)
        if not locked.is_active or (locked.spec or {}).get("mode") != MODE_ESCALATION:
            raise ValidationFailed.at("plan", "Escalations are added only to the study's "
                                              "active escalation plan.")
        present = set(QueueEntry.objects.filter(plan=locked, **{f"{subject_field}__in": ids})
                      .values_list(subject_field, flat=True))
        new_ids = [sid for sid in ids if sid not in present]
        if not new_ids:
            return 0
        prior = prior_annotators(criterion_ids, subject_field, new_ids)
        summary = dict(locked.summary or {})
        # Each addition's sort keys from the plan's seed and its entry count so far: seeded
        # like the plan's first entries, and different from them.
        seed = [int(locked.spec.get("seed", 0)), int(summary.get("entries", 0))]
        _escalation_entries_create(locked, seed, new_ids, [], prior, subject_field,
                                   timezone.now())
        kinds = dict(summary.get("draw_kinds") or {})
        kinds[sampling.DRAW_ESCALATION] = kinds.get(sampling.DRAW_ESCALATION, 0) + len(new_ids)
        summary.update({
            "entries": int(summary.get("entries", 0)) + len(new_ids),
            "escalated_entries": int(summary.get("escalated_entries", 0)) + len(new_ids),
            "escalated_already_drawn": int(summary.get("escalated_already_drawn", 0))
            + len(ids) - len(new_ids),
            "additions": int(summary.get("additions", 0)) + 1, "draw_kinds": kinds,
            **{k: int(summary.get(k, 0)) + int(v) for k, v in (details or {}).items()}})
        SamplingPlan.objects.filter(pk=locked.pk).update(summary=summary)
    if connection.vendor == "postgresql":
        transaction.on_commit(queue_analyze)
    return len(new_ids)


def _escalation_subjects_check(
    study: Study, subject: str, subject_ids: Sequence[int], k: int | None
) -> list[int]:
    """The subject ids to escalate, distinct in their order, all of the study; `subject` and
    `k` checked."""
    if subject not in sampling.SUBJECTS:
        raise ValidationFailed("subject must be 'output' or 'comparison'.",
                               details={"errors": [{"path": "subject", "message": "unknown"}]})
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100):
        raise ValidationFailed.at("k", "k must be an integer from 1 to 100.")
    ids = list(dict.fromkeys(int(i) for i in subject_ids))
    if not ids:
        raise ValidationFailed("There are no subjects to escalate.",
                               details={"errors": [{"path": "subjects", "message": "empty"}]})
    model = Comparison if subject == "comparison" else Output
    found = set(model.objects.filter(study=study, pk__in=ids).values_list("id", flat=True))
    if len(found) != len(ids):
        raise ValidationFailed(f"Some {subject}s are not in this study.",
                               details={"errors": [{"path": "subjects", "message": "unknown"}]})
    return ids


def _escalation_criteria(study: Study, subject: str) -> tuple[RubricVersion, list[int]]:
    """The latest rubric and its criteria for `subject` (pairwise ones for comparisons, the
    others for outputs)."""
    rubric = latest_rubric(study)
    if rubric is None:
        raise ValidationFailed.at("rubric", "The study has no rubric yet.")
    criteria = Criterion.objects.filter(rubric=rubric)
    criteria = (criteria.filter(scale=Criterion.Scale.PAIRWISE) if subject == "comparison"
                else criteria.exclude(scale=Criterion.Scale.PAIRWISE))
    criterion_ids = list(criteria.values_list("id", flat=True))
    return rubric, criterion_ids


def _draw_kinds(escalate_ids: list[int], carried: list[QueueEntry]) -> dict[str, int]:
    """How many entries of the new plan were drawn each way (escalations first)."""
    draw_kinds: dict[str, int] = {}
    if escalate_ids:
        draw_kinds[sampling.DRAW_ESCALATION] = len(escalate_ids)
    for e in carried:
        draw_kinds[e.draw_kind] = draw_kinds.get(e.draw_kind, 0) + 1
    return draw_kinds


def _escalation_entries_create(
    plan: SamplingPlan,
    seed: int | list[int],
    escalate_ids: list[int],
    carried: list[QueueEntry],
    prior: dict[int, set[int]],
    subject_field: str,
    now: datetime,
) -> None:
    """The new plan's entries (escalations, then the carried entries) and, for annotators who
    already labelled a subject, their carried-over submitted assignments."""
    needed = plan.k
    # Every escalation gets a seeded random key, as in drawn plans: each annotator's order
    # is derived from it, so annotators working in parallel do not all start at one output.
    # Carried entries keep their keys, so their order does not change.
    keys = np.random.default_rng(seed).integers(0, sampling.SORT_KEY_LIMIT,
                                                size=len(escalate_ids))
    QueueEntry.objects.bulk_create(
        [
            QueueEntry(plan=plan, is_gold=False, needed=needed,
                       done_count=min(needed, len(prior.get(sid, ()))),
                       sort_key=int(key), stratum="", sample_weight=1.0,
                       draw_kind=QueueEntry.DrawKind.ESCALATION,
                       inclusion_probability=None, **{subject_field: sid})
            for sid, key in zip(escalate_ids, keys, strict=True)
        ]
        + [
            QueueEntry(plan=plan, is_gold=e.is_gold, needed=e.needed,
                       done_count=min(e.needed, len(prior.get(getattr(e, subject_field),
                                                               ()))),
                       sort_key=e.sort_key, stratum=e.stratum,
                       sample_weight=e.sample_weight, draw_kind=e.draw_kind,
                       inclusion_probability=e.inclusion_probability,
                       **{subject_field: getattr(e, subject_field)})
            for e in carried
        ],
        batch_size=1000,
    )
    carried_assignments_create(plan, prior, subject_field, now)


def _open_entries(plan_ids: list[int], subject: str, subject_field: str) -> list[QueueEntry]:
    """The unfinished entries of the active plan(s) that sample `subject`, in id order.

    A plan holds one kind of subject: an active plan of comparisons is not carried into a plan
    of outputs (and the other way round); it stops, as any superseded plan does.
    """
    if not plan_ids:
        return []
    same_subject = [
        pk for pk, spec in SamplingPlan.objects.filter(pk__in=plan_ids).values_list("id", "spec")
        if (spec or {}).get("subject", "output") == subject
    ]
    return list(
        QueueEntry.objects.filter(plan_id__in=same_subject, done_count__lt=F("needed"))
        .order_by("id")
    )


__all__ = ["MODE_ESCALATION", "escalation_entries_add", "escalation_plan_create"]
