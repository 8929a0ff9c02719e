"""Sampling plans: drawing the population into queue entries, replacing and deactivating plans."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from judges.models import Verdict
from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Criterion, Output, Study
from studies.subjects import subject_field as subject_field_of

from .. import sampling
from ..models import Annotation, Assignment, GoldLabel, QueueEntry, SamplingPlan
from .common import latest_rubric, require_lead


def _population(
    *, study: Study, spec: sampling.SamplingSpec
) -> tuple[list[tuple[int, str]], dict[int, str]]:
    """[(subject id, stratum)] sorted by id, and the subject → item external id map."""
    rows: Any
    if spec.subject == "comparison":
        rows = (
            Comparison.objects.filter(study=study)
            .order_by("id")
            .values_list("id", "item__strata", "item__external_id")
        )
    else:
        qs = Output.objects.filter(study=study)
        if not spec.include_errors:
            qs = qs.filter(error="")
        rows = qs.order_by("id").values_list("id", "item__strata", "item__external_id")
    subjects = [(sid, sampling.stratum_label(strata, spec.dimension)) for sid, strata, _ in rows]
    return subjects, {sid: ext for sid, _, ext in rows}


@dataclass(frozen=True)
class PlanDraw:
    """A plan's draw before anything is written: what `sampling_plan_preview` shows and
    `sampling_plan_create` stores."""

    parsed: sampling.SamplingSpec
    rubric: Any
    criterion_ids: list[int]
    subject_field: str
    result: sampling.SampleResult
    k: int
    gold_rate: float

    def summary(self) -> dict[str, Any]:
        result = self.result
        return {
            "seed": self.parsed.seed,
            "population": result.population,
            "allocation": result.allocation,
            "entries": len(result.chosen),
            "gold_available": result.gold_available,
            "gold_entries": result.gold_chosen,
            "warnings": result.warnings,
            # Per stratum: the design and its inclusion probabilities (docs/annotation.md).
            "designs": {h: d.as_dict() for h, d in result.designs.items()},
            "draw_kinds": result.draw_kinds(),
        }


def _plan_draw(*, study: Study, spec: Mapping[str, Any], k: int, gold_rate: float) -> PlanDraw:
    """Validate the plan and draw it (seeded: the same spec and seed draw the same entries)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise ValidationFailed.at("k", "k must be an integer from 1 to 100.")
    if (
        isinstance(gold_rate, bool)
        or not isinstance(gold_rate, int | float)
        or not 0.0 <= float(gold_rate) < 1.0
    ):
        raise ValidationFailed.at("gold_rate", "gold_rate must be in [0, 1).")
    gold_rate = float(gold_rate)
    parsed = sampling.spec_parse(spec, default_seed=secrets.randbelow(2**31))
    rubric = latest_rubric(study)
    if rubric is None:
        raise ValidationFailed.at("rubric", "The study has no rubric yet.")
    criteria_qs = Criterion.objects.filter(rubric=rubric)
    if parsed.subject == "comparison":
        criteria_qs = criteria_qs.filter(scale=Criterion.Scale.PAIRWISE)
    else:
        criteria_qs = criteria_qs.exclude(scale=Criterion.Scale.PAIRWISE)
    criterion_ids = list(criteria_qs.values_list("id", flat=True))
    if not criterion_ids:
        kind = "pairwise" if parsed.subject == "comparison" else "non-pairwise"
        raise ValidationFailed.at(
            "spec.subject",
            f"The rubric v{rubric.version} has no {kind} criteria for spec.subject "
            f"'{parsed.subject}'.",
        )
    if parsed.dimension is not None and not study.dimensions.filter(key=parsed.dimension).exists():
        raise ValidationFailed.at(
            "spec.dimension",
            f"spec.dimension '{parsed.dimension}' is not a dimension of this study.",
        )
    subjects, _ = _population(study=study, spec=parsed)
    subject_field = subject_field_of(parsed.subject)
    gold_ids = set(
        GoldLabel.objects.filter(criterion_id__in=criterion_ids)
        .exclude(**{f"{subject_field}__isnull": True})
        .values_list(subject_field, flat=True)
    )
    uncertainty: dict[int, float] = {}
    if parsed.disagreement_weight > 0:
        verdict_rows = (
            Verdict.objects.filter(criterion_id__in=criterion_ids, is_scored=True)
            .exclude(**{f"{subject_field}__isnull": True})
            .values_list(subject_field, "criterion_id", "value", "probability")
        )
        if parsed.subject == "output":
            verdict_rows = verdict_rows.filter(output__study=study)
        else:
            verdict_rows = verdict_rows.filter(comparison__study=study)
        uncertainty = sampling.judge_uncertainty(verdict_rows)
    population = [
        sampling.Subject(sid, h, uncertainty.get(sid, 0.0))
        for sid, h in subjects
        if sid not in gold_ids
    ]
    gold = [sampling.Subject(sid, h) for sid, h in subjects if sid in gold_ids]
    if not population and not gold:
        raise ValidationFailed.at("spec.subject", f"The study has no {parsed.subject}s to sample.")
    result = sampling.draw(spec=parsed, population=population, gold=gold, gold_rate=gold_rate)
    return PlanDraw(parsed=parsed, rubric=rubric, criterion_ids=criterion_ids,
                    subject_field=subject_field, result=result, k=k, gold_rate=gold_rate)


def sampling_plan_preview(
    *, study: Study, spec: Mapping[str, Any], k: int, gold_rate: float, user: User
) -> dict[str, Any]:
    """What `sampling_plan_create` would draw with these settings, written nowhere: the plan
    summary (population, allocation, gold and draw kinds per stratum). Give a seed to preview
    exactly the entries a later create with the same seed draws."""
    require_lead(study=study, user=user)
    return _plan_draw(study=study, spec=spec, k=k, gold_rate=gold_rate).summary()


def sampling_plan_create(
    *,
    study: Study,
    spec: Mapping[str, Any],
    k: int,
    gold_rate: float,
    created_by: User,
) -> SamplingPlan:
    """Draw a new plan version and fill its queue; the previous active plan is superseded.

    Superseding ends the live leases of the old plan (its entries are no longer offered and its
    assignments can no longer be submitted). Subjects already labelled under earlier versions
    keep those annotations: the new entry starts with them counted toward k, and their
    annotators are never offered the subject again.
    """
    require_lead(study=study, user=created_by)
    drawn = _plan_draw(study=study, spec=spec, k=k, gold_rate=gold_rate)
    parsed, rubric, result = drawn.parsed, drawn.rubric, drawn.result
    criterion_ids, subject_field = drawn.criterion_ids, drawn.subject_field
    gold_rate = drawn.gold_rate
    chosen_ids = [c[0] for c in result.chosen]
    # Prior annotators per subject (earlier plan versions, imports): counted toward k and never
    # offered the subject again.
    prior = prior_annotators(criterion_ids, subject_field, chosen_ids)
    now = timezone.now()
    with transaction.atomic():
        # The study row serialises concurrent plan creation (version numbers, single active).
        Study.objects.select_for_update().filter(pk=study.pk).first()
        last = SamplingPlan.objects.filter(study=study).aggregate(v=Max("version"))["v"] or 0
        old_plans = list(
            SamplingPlan.objects.filter(study=study, is_active=True).values_list("id", flat=True)
        )
        if old_plans:
            SamplingPlan.objects.filter(pk__in=old_plans).update(is_active=False, superseded_at=now)
            end_leases(plan_ids=old_plans, now=now)
        plan = SamplingPlan.objects.create(
            study=study,
            version=last + 1,
            rubric=rubric,
            spec=parsed.as_dict(),
            k=k,
            gold_rate=gold_rate,
            is_active=True,
            created_by=created_by,
            summary={
                **drawn.summary(),
                "carried_over_annotators": sum(len(v) for v in prior.values()),
            },
        )
        entries = [
            QueueEntry(
                plan=plan,
                is_gold=draw.is_gold,
                needed=k,
                done_count=min(k, len(prior.get(draw.id, ()))),
                sort_key=draw.sort_key,
                stratum=draw.stratum,
                sample_weight=draw.weight,
                draw_kind=draw.draw_kind,
                inclusion_probability=draw.inclusion_probability,
                **{subject_field: draw.id},
            )
            for draw in result.chosen
        ]
        QueueEntry.objects.bulk_create(entries, batch_size=1000)
        carried_assignments_create(plan, prior, subject_field, now)
    if connection.vendor == "postgresql":
        # A plan adds thousands of queue rows at once, long before autovacuum's next look: with
        # the stale estimate (a near-empty table) the planner nests loops in the "next" and
        # progress queries and each call costs ~20 ms instead of ~0.5 ms. Refresh the statistics
        # once the rows are visible.
        transaction.on_commit(queue_analyze)
    return plan


def prior_annotators(
    criterion_ids: list[int], subject_field: str, subject_ids: list[int]
) -> dict[int, set[int]]:
    """Subject id -> the annotators who already labelled it on these criteria (earlier plan
    versions, imports): a new plan counts them toward k and never offers them the subject."""
    prior: dict[int, set[int]] = {}
    for sid, annotator_id in (
        Annotation.objects.filter(
            criterion_id__in=criterion_ids, **{f"{subject_field}__in": subject_ids}
        )
        .values_list(subject_field, "annotator_id")
        .distinct()
    ):
        prior.setdefault(sid, set()).add(annotator_id)
    return prior


def carried_assignments_create(
    plan: SamplingPlan, prior: Mapping[int, set[int]], subject_field: str, now: datetime
) -> None:
    """A submitted, carried-over assignment on the new plan's entry for every earlier
    annotator of its subject (`prior_annotators`)."""
    if not prior:
        return
    entry_ids = dict(QueueEntry.objects.filter(plan=plan).values_list(subject_field, "id"))
    Assignment.objects.bulk_create(
        [
            Assignment(
                entry_id=entry_ids[sid],
                annotator_id=annotator_id,
                status=Assignment.Status.SUBMITTED,
                carried_over=True,
                finished_at=now,
            )
            for sid, annotators in prior.items()
            for annotator_id in sorted(annotators)
        ],
        batch_size=1000,
    )


def queue_analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotations_queueentry, annotations_assignment")


def end_leases(*, plan_ids: list[int], now: datetime) -> None:
    """Expire the live leases of plans that stop being offered (inside the caller's atomic).

    The entries are locked first, in id order, like every other queue write, so that a submit
    racing with the plan change cannot deadlock with it.
    """
    entries = QueueEntry.objects.filter(plan_id__in=plan_ids, leased_count__gt=0).order_by("id")
    if connection.features.has_select_for_update:
        entries = entries.select_for_update()
    entry_ids = list(entries.values_list("id", flat=True))
    if not entry_ids:
        return
    Assignment.objects.filter(entry_id__in=entry_ids, status=Assignment.Status.LEASED).update(
        status=Assignment.Status.EXPIRED, finished_at=now
    )
    QueueEntry.objects.filter(pk__in=entry_ids).update(leased_count=0)


def sampling_plan_deactivate(*, plan: SamplingPlan, by: User) -> SamplingPlan:
    """Stop offering a plan's entries without replacing it (its live leases end)."""
    require_lead(study=plan.study, user=by)
    now = timezone.now()
    with transaction.atomic():
        SamplingPlan.objects.filter(pk=plan.pk).update(is_active=False, superseded_at=now)
        end_leases(plan_ids=[plan.pk], now=now)
    plan.refresh_from_db()
    return plan
