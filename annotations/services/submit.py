"""Submitting an assignment's annotations and revising an annotation within its window.

Takes the same locks as the queue, in the same order (entry, then assignment); see queue.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from reviewhub.errors import Conflict, NotFound, ValidationFailed
from reviewhub.rawrows import RowShape, db_value, fetch_one
from studies.models import RubricVersion

from ..models import Annotation, AnnotationRevision, Assignment, QueueEntry, SamplingPlan
from .common import cached_plan_criteria
from .labels import CleanLabel, LabelInput, flags_clean, label_clean, labels_clean, text_clean
from .queue import ASSIGNMENT_ROW, assignment_owned_check, for_update_clause

MAX_TIME_ON_TASK_MS = 24 * 3600 * 1000
# The fields a label sets on its annotation (`CleanLabel`'s, beside the criterion): written by
# a submit, replaced by a revision.
LABEL_FIELDS = ("value", "value_num", "severity", "severity_note")
# What an `AnnotationRevision` keeps of the annotation as it was before the revision.
REVISION_FIELDS = ("value", "severity", "severity_note", "rationale", "flags")
_L_ENTRY = RowShape(QueueEntry, "e")
_L_PLAN = RowShape(SamplingPlan, "p")
_L_RUBRIC = RowShape(RubricVersion, "r")


def _lock_for_submit(entry_id: int, assignment_id: int) -> tuple[QueueEntry, Assignment]:
    """The entry and the assignment, both locked, in one statement (the plan and rubric are
    read along, not locked).

    PostgreSQL takes the row locks of one statement in the order of its FROM list, so this
    keeps the lock order every queue write uses: entry first, then assignment.
    """
    row = fetch_one(
        f"SELECT {_L_ENTRY.select}, {_L_PLAN.select}, {_L_RUBRIC.select}, {ASSIGNMENT_ROW.select} "
        f"FROM {QueueEntry._meta.db_table} e "
        f"JOIN {Assignment._meta.db_table} a ON a.entry_id = e.id "
        f"JOIN {SamplingPlan._meta.db_table} p ON p.id = e.plan_id "
        f"JOIN {RubricVersion._meta.db_table} r ON r.id = p.rubric_id "
        "WHERE e.id = %s AND a.id = %s" + for_update_clause("e, a"),
        [entry_id, assignment_id],
    )
    if row is None:
        raise Assignment.DoesNotExist(f"assignment {assignment_id} of entry {entry_id} is gone")
    entry = _L_ENTRY.load(row)
    at = _L_ENTRY.width
    entry.plan = _L_PLAN.load(row, at)
    entry.plan.rubric = _L_RUBRIC.load(row, at + _L_PLAN.width)
    return entry, ASSIGNMENT_ROW.load(row, at + _L_PLAN.width + _L_RUBRIC.width)


def _submission_replay(
    *, submission_id: uuid.UUID, assignment: Assignment, annotator: User
) -> list[Annotation] | None:
    existing = list(
        Annotation.objects.filter(submission_id=submission_id)
        .select_related("criterion")
        .order_by("criterion__position", "criterion_id")
    )
    if not existing:
        return None
    if any(a.annotator_id != annotator.pk or a.assignment_id != assignment.pk for a in existing):
        raise Conflict(
            "This submission_id was already used for another assignment.",
            code="submission_id_reused",
            details={"submission_id": "already used"},
        )
    return existing


def annotation_submit(
    *,
    assignment: Assignment,
    annotator: User,
    submission_id: uuid.UUID,
    labels: Mapping[str, LabelInput],
    rationale: str = "",
    flags: Mapping[str, bool] | None = None,
    time_on_task_ms: int | None = None,
    source: str = "ui",
) -> list[Annotation]:
    """Record one annotation per criterion of the plan and complete the assignment.

    Idempotent on `submission_id`: a repeat (double click, retry, second tab) returns the
    annotations of the first call, even when the two calls race; the first payload wins. A
    different submission for an assignment already submitted is a 409. A late submit after the
    lease expired is accepted while the entry still has room, else 409 `lease_expired`.
    """
    assignment_owned_check(assignment, annotator)
    submission_id = _submission_args_clean(submission_id, source, time_on_task_ms)
    clean_flags = flags_clean(flags)
    rationale = text_clean(rationale, "rationale")
    now = timezone.now()
    try:
        with transaction.atomic():
            # Entry first, then assignment: the lock order every queue write uses.
            locked, current = _lock_for_submit(assignment.entry_id, assignment.pk)
            if current.status in (Assignment.Status.SUBMITTED, Assignment.Status.SKIPPED):
                return _finished_assignment_answer(current, submission_id, assignment, annotator)
            # Validation runs under the lock so that a repeat of a submission that just went
            # through is answered with its result, whatever its payload.
            criteria = cached_plan_criteria(locked.plan)
            clean = labels_clean(criteria=criteria, labels=labels, swapped=current.swapped)
            holds_slot = current.status == Assignment.Status.LEASED
            if not holds_slot:
                _late_submit_check(locked)
            created = Annotation.objects.bulk_create(
                [
                    Annotation(
                        annotator_id=annotator.pk,
                        criterion=c.criterion,
                        assignment_id=current.pk,
                        plan_id=locked.plan_id,
                        **_label_fields(c),
                        rationale=rationale,
                        flags=clean_flags,
                        time_on_task_ms=time_on_task_ms,
                        submission_id=submission_id,
                        source=source,
                        created_at=now,
                        **_subject_of(locked),
                    )
                    for c in clean
                ]
            )
            _assignment_complete(current.pk, locked.pk, submission_id, now, holds_slot)
    except IntegrityError as exc:
        return _integrity_answer(exc, submission_id, assignment, annotator)
    assignment.status = Assignment.Status.SUBMITTED
    assignment.submission_id = submission_id
    assignment.finished_at = now
    assignment.lease_expires_at = None
    for annotation in created:
        # Callers serialise these; spare them a lazy load per row.
        annotation.plan = locked.plan
        annotation.assignment = assignment
    return created


def _submission_args_clean(
    submission_id: Any, source: str, time_on_task_ms: int | None
) -> uuid.UUID:
    """The submission id as a UUID, after checking it, the source and the time on task."""
    if not isinstance(submission_id, uuid.UUID):
        try:
            submission_id = uuid.UUID(str(submission_id))
        except ValueError as exc:
            raise ValidationFailed.at("submission_id", "submission_id must be a UUID.") from exc
    if source not in Annotation.Source.values:
        raise ValidationFailed.at("source", "source is invalid.")
    if time_on_task_ms is not None and (
        isinstance(time_on_task_ms, bool)
        or not isinstance(time_on_task_ms, int)
        or not 0 <= time_on_task_ms <= MAX_TIME_ON_TASK_MS
    ):
        raise ValidationFailed.at(
            "time_on_task_ms", "time_on_task_ms must be an integer from 0 to 86400000.",
        )
    return submission_id


def _finished_assignment_answer(
    current: Assignment, submission_id: uuid.UUID, assignment: Assignment, annotator: User
) -> list[Annotation]:
    """A submit to an assignment submitted or skipped: the first call's annotations for a
    repeat of the submission that completed it, else a 409."""
    if current.status == Assignment.Status.SUBMITTED:
        if current.submission_id == submission_id:
            done = _submission_replay(
                submission_id=submission_id, assignment=assignment, annotator=annotator
            )
            if done is not None:
                return done
        raise Conflict(
            "This assignment was already submitted; revise the annotations instead.",
            code="already_submitted",
        )
    raise Conflict("This assignment was skipped.", code="assignment_skipped")


def _late_submit_check(locked: QueueEntry) -> None:
    """A submit after the lease expired: accepted while the plan is active and the entry still
    has room."""
    # Superseding a plan ends its leases, so only an expired lease can belong to an
    # inactive plan.
    if not SamplingPlan.objects.filter(pk=locked.plan_id, is_active=True).exists():
        raise Conflict(
            "The sampling plan of this assignment was superseded.",
            code="plan_superseded",
        )
    if locked.done_count + locked.leased_count >= locked.needed:
        raise Conflict(
            "The lease expired and the output got its annotations from others.",
            code="lease_expired",
        )


def _label_fields(clean: CleanLabel) -> dict[str, Any]:
    return {name: getattr(clean, name) for name in LABEL_FIELDS}


def _subject_of(entry: QueueEntry) -> dict[str, int | None]:
    if entry.comparison_id is not None:
        return {"comparison_id": entry.comparison_id}
    return {"output_id": entry.output_id}


def _assignment_complete(
    assignment_id: int, entry_id: int, submission_id: uuid.UUID, now: datetime, holds_slot: bool
) -> None:
    """Mark the (locked) assignment submitted and count it on its (locked) entry."""
    # Precompiled (see reviewhub/rawrows.py); values prepared by their fields. Both
    # rows are locked already; on PostgreSQL the two updates are one statement.
    done_assignment = (
        f"UPDATE {Assignment._meta.db_table} SET status = %s, submission_id = %s, "
        "finished_at = %s, lease_expires_at = NULL WHERE id = %s"
    )
    done_params = [Assignment.Status.SUBMITTED.value,
                   db_value(Assignment, "submission_id", submission_id),
                   db_value(Assignment, "finished_at", now), assignment_id]
    count_entry = (
        f"UPDATE {QueueEntry._meta.db_table} SET done_count = done_count + 1, "
        "leased_count = leased_count - %s WHERE id = %s"
    )
    count_params = [1 if holds_slot else 0, entry_id]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"WITH done AS ({done_assignment} RETURNING 1) {count_entry}",
                           done_params + count_params)
        else:
            cursor.execute(done_assignment, done_params)
            cursor.execute(count_entry, count_params)


def _integrity_answer(
    exc: IntegrityError, submission_id: uuid.UUID, assignment: Assignment, annotator: User
) -> list[Annotation]:
    """The submission_id is already taken (another assignment, or a racing repeat of this
    submission), or the annotator already labelled this subject through another route (an
    import): the first call's annotations for a repeat, else a 409."""
    replay = _submission_replay(
        submission_id=submission_id, assignment=assignment, annotator=annotator
    )
    if replay is not None:
        return replay
    if (
        Assignment.objects.filter(submission_id=submission_id)
        .exclude(pk=assignment.pk)
        .exists()
    ):
        raise Conflict(
            "This submission_id was already used for another assignment.",
            code="submission_id_reused",
            details={"submission_id": "already used"},
        ) from exc
    raise Conflict(
        "These annotations conflict with ones you already recorded for this output.",
        code="duplicate_annotation",
    ) from exc


def revision_deadline(annotation: Annotation) -> datetime:
    return annotation.created_at + timedelta(minutes=settings.REVIEWHUB_REVISION_WINDOW_MINUTES)


def annotation_revise(
    *,
    annotation_id: int,
    annotator: User,
    value: Any,
    severity: int | None = None,
    severity_note: str = "",
    rationale: str | None = None,
    flags: Mapping[str, bool] | None = None,
) -> Annotation:
    """Change one's own annotation within the revision window; the prior state is kept.

    For pairwise criteria `value` is as presented on the annotator's assignment, like submit.
    `rationale` / `flags` None leave them as they were.
    """
    annotation = (
        Annotation.objects.select_related("criterion", "assignment")
        .filter(pk=annotation_id, annotator_id=annotator.pk)
        .first()
    )
    if annotation is None:
        raise NotFound("Annotation not found.")
    now = timezone.now()
    if now > revision_deadline(annotation):
        raise Conflict(
            f"The revision window ({settings.REVIEWHUB_REVISION_WINDOW_MINUTES} minutes after "
            "submitting) has closed.",
            code="revision_window_closed",
        )
    swapped = bool(annotation.assignment and annotation.assignment.swapped)
    clean = label_clean(
        criterion=annotation.criterion,
        raw={"value": value, "severity": severity, "severity_note": severity_note or ""},
        swapped=swapped,
        field="value",
    )
    new_flags = flags_clean(flags) if flags is not None else annotation.flags
    new_rationale = (
        text_clean(rationale, "rationale") if rationale is not None else annotation.rationale
    )
    with transaction.atomic():
        qs = Annotation.objects.filter(pk=annotation.pk)
        if connection.features.has_select_for_update:
            qs = qs.select_for_update()
        current = qs.get()
        AnnotationRevision.objects.create(
            annotation=current, **{name: getattr(current, name) for name in REVISION_FIELDS}
        )
        for name, label_value in _label_fields(clean).items():
            setattr(current, name, label_value)
        current.rationale = new_rationale
        current.flags = new_flags
        current.revised_at = now
        current.save(update_fields=[*LABEL_FIELDS, "rationale", "flags", "revised_at"])
    current.criterion = annotation.criterion
    current.assignment = annotation.assignment
    return current
