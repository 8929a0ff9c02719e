"""Submission rules, idempotency, leases, skips and revisions (single process; runs on SQLite
and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from annotations import services
from annotations.models import Annotation, AnnotationRevision, Assignment, QueueEntry
from reviewhub.api.errors import Conflict, NotFound, ValidationFailed
from studies.models import Criterion, Study

from .factories import World, annotators_make, failing_labels, passing_labels, world_build

pytestmark = pytest.mark.django_db


def _plan(world: World, lead: Any, k: int = 3) -> Any:
    return services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 2}, k=k, gold_rate=0, created_by=lead
    )


def _next(world: World, annotator: Any) -> Assignment:
    a = services.assignment_next(study=world.study, annotator=annotator)
    assert a is not None
    return a


def _submit(a: Assignment, annotator: Any, labels: Any = None, **kw: Any) -> list[Annotation]:
    return services.annotation_submit(
        assignment=a,
        annotator=annotator,
        submission_id=kw.pop("sid", uuid.uuid4()),
        labels=labels if labels is not None else passing_labels(),
        **kw,
    )


def _error(exc: pytest.ExceptionInfo[Any]) -> dict[str, Any]:
    """{path: message} of the problems the validation error lists."""
    return {e["path"]: e["message"] for e in exc.value.details["errors"]}


# --- validation -------------------------------------------------------------------------------


def test_unknown_and_missing_criteria_are_named(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    with pytest.raises(ValidationFailed) as info:
        _submit(a, annotators[0], {**passing_labels(), "tone": {"value": "pass"}})
    assert "labels.tone" in _error(info) and "tone" in info.value.message
    with pytest.raises(ValidationFailed) as info:
        _submit(a, annotators[0], {"correct": {"value": "pass"}})
    assert "labels.helpful" in _error(info)
    with pytest.raises(ValidationFailed) as info:
        _submit(a, annotators[0], {"correct": {"value": "maybe"}, "helpful": {"value": "4"}})
    assert "labels.correct.value" in _error(info)
    with pytest.raises(ValidationFailed) as info:
        _submit(a, annotators[0], {"correct": {"value": "pass"}, "helpful": {"value": "9"}})
    assert "labels.helpful.value" in _error(info)
    assert not Annotation.objects.exists()  # nothing half-written


def test_severity_required_exactly_for_failures(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    cases = [
        ({"correct": {"value": "fail"}, "helpful": {"value": "4"}}, "labels.correct.severity"),
        (
            {"correct": {"value": "pass", "severity": 2}, "helpful": {"value": "4"}},
            "labels.correct.severity",
        ),
        (
            {"correct": {"value": "fail", "severity": 0}, "helpful": {"value": "4"}},
            "labels.correct.severity",
        ),
        (
            {"correct": {"value": "fail", "severity": 6}, "helpful": {"value": "4"}},
            "labels.correct.severity",
        ),
        (
            {"correct": {"value": "fail", "severity": True}, "helpful": {"value": "4"}},
            "labels.correct.severity",
        ),
        # ordinal: 2 < pass_threshold 3 is a failure, 3 is a pass
        ({"correct": {"value": "pass"}, "helpful": {"value": "2"}}, "labels.helpful.severity"),
        (
            {"correct": {"value": "pass"}, "helpful": {"value": "3", "severity": 1}},
            "labels.helpful.severity",
        ),
        (
            {"correct": {"value": "pass", "severity_note": "bad"}, "helpful": {"value": "3"}},
            "labels.correct.severity_note",
        ),
    ]
    for labels, field in cases:
        with pytest.raises(ValidationFailed) as info:
            _submit(a, annotators[0], labels)
        assert field in _error(info), labels
    created = _submit(a, annotators[0], failing_labels(severity=4, note="would mislead"))
    by_key = {x.criterion.key: x for x in created}
    assert by_key["correct"].severity == 4 and by_key["correct"].severity_note == "would mislead"
    assert by_key["correct"].value == "fail" and by_key["correct"].value_num == 0.0
    assert by_key["helpful"].value == "2" and by_key["helpful"].value_num == 2.0


def test_categorical_failure_reading(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 2})
    Criterion.objects.create(
        rubric=world.rubric,
        key="tone",
        name="Tone",
        scale=Criterion.Scale.CATEGORICAL,
        points=[{"value": "polite"}, {"value": "rude"}, {"value": "neutral"}],
        pass_labels=["polite", "neutral"],
        position=5,
    )
    (ann,) = annotators_make(study, 1)
    _plan(world, lead)
    a = _next(world, ann)
    with pytest.raises(ValidationFailed) as info:
        _submit(a, ann, {**passing_labels(), "tone": {"value": "rude"}})
    assert "labels.tone.severity" in _error(info)
    created = _submit(a, ann, {**passing_labels(), "tone": {"value": "rude", "severity": 2}})
    assert {x.criterion.key: x.severity for x in created}["tone"] == 2


def test_flags_rationale_time_recorded(world: World, lead: Any, annotators: list[Any]) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    with pytest.raises(ValidationFailed) as info:
        _submit(a, annotators[0], flags={"weird": True})
    assert "flags.weird" in _error(info)
    with pytest.raises(ValidationFailed):
        _submit(a, annotators[0], time_on_task_ms=-5)
    created = _submit(
        a,
        annotators[0],
        flags={"unsure": True, "offensive": False},
        rationale="fine",
        time_on_task_ms=4321,
        source="api",
    )
    assert all(x.flags == {"unsure": True} for x in created)
    assert all(x.time_on_task_ms == 4321 and x.rationale == "fine" for x in created)
    assert all(x.source == "api" and x.plan_id == a.entry.plan_id for x in created)


# --- idempotency ------------------------------------------------------------------------------


def test_same_submission_twice_returns_the_first(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    sid = uuid.uuid4()
    first = _submit(a, annotators[0], sid=sid)
    stale_copy = Assignment.objects.get(pk=a.pk)  # e.g. a second tab
    again = _submit(stale_copy, annotators[0], failing_labels(), sid=sid)  # payload ignored
    assert sorted(x.pk for x in again) == sorted(x.pk for x in first)
    assert Annotation.objects.count() == 2
    assert QueueEntry.objects.get(pk=a.entry_id).done_count == 1
    with pytest.raises(Conflict) as info:
        _submit(stale_copy, annotators[0], sid=uuid.uuid4())
    assert info.value.code == "already_submitted"
    # Reusing the submission id on another assignment is a conflict, not a replay.
    b = _next(world, annotators[0])
    with pytest.raises(Conflict) as info:
        _submit(b, annotators[0], sid=sid)
    assert info.value.code == "submission_id_reused"


def test_someone_elses_assignment_is_not_found(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    with pytest.raises(NotFound):
        _submit(a, annotators[1])
    with pytest.raises(NotFound):
        services.assignment_skip(assignment=a, annotator=annotators[1])
    with pytest.raises(NotFound):
        services.assignment_heartbeat(assignment=a, annotator=annotators[1])


# --- the queue --------------------------------------------------------------------------------


def test_entry_not_offered_while_submitted_plus_leased_reach_k(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 1})
    people = annotators_make(study, 5)
    _plan(world, lead, k=3)
    a0, a1 = _next(world, people[0]), _next(world, people[1])
    _submit(a0, people[0])
    _next(world, people[2])
    # 1 submitted + 2 live leases = k: nobody else gets it.
    assert services.assignment_next(study=study, annotator=people[3]) is None
    services.assignment_skip(assignment=a1, annotator=people[1])
    # The skip freed a slot; the skipper is never offered it again.
    assert services.assignment_next(study=study, annotator=people[1]) is None
    assert _next(world, people[3]).entry_id == a0.entry_id
    entry = QueueEntry.objects.get()
    assert (entry.done_count, entry.leased_count) == (1, 2)


def test_next_returns_the_live_lease_first(world: World, lead: Any, annotators: list[Any]) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    assert _next(world, annotators[0]).pk == a.pk
    assert Assignment.objects.filter(annotator=annotators[0]).count() == 1


def test_expired_lease_returns_to_pool_and_is_reassigned(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 1})
    people = annotators_make(study, 3)
    _plan(world, lead, k=1)
    a = _next(world, people[0])
    assert services.assignment_next(study=study, annotator=people[1]) is None
    Assignment.objects.filter(pk=a.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    b = _next(world, people[1])
    assert b.entry_id == a.entry_id
    a.refresh_from_db()
    assert a.status == Assignment.Status.EXPIRED
    # The first annotator comes back: the output is taken, and they never get a second row.
    assert services.assignment_next(study=study, annotator=people[0]) is None
    with pytest.raises(Conflict) as info:
        _submit(a, people[0])
    assert info.value.code == "lease_expired"
    with pytest.raises(Conflict):
        services.assignment_heartbeat(assignment=a, annotator=people[0])
    _submit(b, people[1])
    assert Assignment.objects.filter(entry_id=a.entry_id, annotator=people[0]).count() == 1


def test_expired_lease_is_resumed_by_its_annotator_if_free(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 2})
    (ann,) = annotators_make(study, 1)
    _plan(world, lead, k=1)
    a = _next(world, ann)
    Assignment.objects.filter(pk=a.pk).update(
        lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    services.assignments_expire_stale()
    a.refresh_from_db()
    assert a.status == Assignment.Status.EXPIRED
    assert QueueEntry.objects.get(pk=a.entry_id).leased_count == 0
    resumed = _next(world, ann)
    assert resumed.pk == a.pk and resumed.status == Assignment.Status.LEASED
    assert resumed.lease_expires_at is not None and resumed.lease_expires_at > timezone.now()
    assert QueueEntry.objects.get(pk=a.entry_id).leased_count == 1


def test_late_submit_accepted_while_room(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 1})
    (ann,) = annotators_make(study, 1)
    _plan(world, lead, k=2)
    a = _next(world, ann)
    Assignment.objects.filter(pk=a.pk).update(
        lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    services.assignments_expire_stale()
    a.refresh_from_db()
    created = _submit(a, ann)
    assert len(created) == 2
    entry = QueueEntry.objects.get()
    assert (entry.done_count, entry.leased_count) == (1, 0)


def test_heartbeat_extends_the_lease(world: World, lead: Any, annotators: list[Any]) -> None:
    _plan(world, lead)
    a = services.assignment_next(study=world.study, annotator=annotators[0], lease_minutes=1)
    assert a is not None
    before = a.lease_expires_at
    after = services.assignment_heartbeat(assignment=a, annotator=annotators[0], lease_minutes=30)
    assert before is not None and after.lease_expires_at is not None
    assert after.lease_expires_at > before + timedelta(minutes=20)
    _submit(after, annotators[0])
    with pytest.raises(Conflict):
        services.assignment_heartbeat(assignment=after, annotator=annotators[0])


def test_order_is_randomised_per_annotator(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 40})
    people = annotators_make(study, 3)
    _plan(world, lead, k=3)
    orders = []
    for p in people:
        order = []
        while (a := services.assignment_next(study=study, annotator=p)) is not None:
            order.append(a.entry_id)
            services.assignment_skip(assignment=a, annotator=p)
        orders.append(order)
    assert all(sorted(o) == sorted(orders[0]) and len(o) == 40 for o in orders)
    assert orders[0] != orders[1] != orders[2] != orders[0]


def test_pairwise_sides_randomised_and_mapped_back(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 30}, n_candidates=2, pairwise=True)
    (ann,) = annotators_make(study, 1)
    services.sampling_plan_create(
        study=study,
        spec={"mode": "all", "subject": "comparison"},
        k=1,
        gold_rate=0,
        created_by=lead,
    )
    swapped = []
    while (a := services.assignment_next(study=study, annotator=ann)) is not None:
        swapped.append(a.swapped)
        with pytest.raises(ValidationFailed):  # severity is never asked for pairwise
            _submit(a, ann, {"better": {"value": "A", "severity": 3}})
        (created,) = _submit(a, ann, {"better": {"value": "A"}})  # the LEFT one
        assert created.value == ("B" if a.swapped else "A")
        assert created.comparison_id == a.entry.comparison_id
    assert len(swapped) == 30 and 0 < sum(swapped) < 30
    assert len(world.comparisons) == 30


# --- revisions --------------------------------------------------------------------------------


def test_revise_within_window_keeps_history(world: World, lead: Any, annotators: list[Any]) -> None:
    _plan(world, lead)
    a = _next(world, annotators[0])
    created = {x.criterion.key: x for x in _submit(a, annotators[0])}
    correct = created["correct"]
    with pytest.raises(ValidationFailed):  # failure needs a severity on revision too
        services.annotation_revise(annotation_id=correct.pk, annotator=annotators[0], value="fail")
    revised = services.annotation_revise(
        annotation_id=correct.pk,
        annotator=annotators[0],
        value="fail",
        severity=5,
        severity_note="dangerous",
        rationale="looked again",
    )
    assert revised.value == "fail" and revised.severity == 5 and revised.revised_at is not None
    assert revised.rationale == "looked again"
    again = services.annotation_revise(
        annotation_id=correct.pk, annotator=annotators[0], value="pass"
    )
    assert again.severity is None and again.severity_note == ""
    history = list(
        AnnotationRevision.objects.filter(annotation=correct).values_list("value", "severity")
    )
    assert history == [("pass", None), ("fail", 5)]
    with pytest.raises(NotFound):
        services.annotation_revise(annotation_id=correct.pk, annotator=annotators[1], value="pass")


def test_revision_window_closes(
    world: World, lead: Any, annotators: list[Any], settings: Any
) -> None:
    settings.REVIEWHUB_REVISION_WINDOW_MINUTES = 60
    _plan(world, lead)
    a = _next(world, annotators[0])
    (correct, _helpful) = _submit(a, annotators[0])
    Annotation.objects.filter(pk=correct.pk).update(
        created_at=timezone.now() - timedelta(minutes=61)
    )
    with pytest.raises(Conflict) as info:
        services.annotation_revise(
            annotation_id=correct.pk, annotator=annotators[0], value="fail", severity=2
        )
    assert info.value.code == "revision_window_closed"
    assert not AnnotationRevision.objects.exists()


def test_adjudication_is_separate_from_annotations(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    _plan(world, lead, k=2)
    for ann, labels in ((annotators[0], passing_labels()), (annotators[1], failing_labels())):
        a = services.assignment_next(study=world.study, annotator=ann)
        assert a is not None
        while a.entry.output_id != world.outputs[0].pk:
            services.assignment_skip(assignment=a, annotator=ann)
            a = services.assignment_next(study=world.study, annotator=ann)
            assert a is not None
        _submit(a, ann, labels)
    from annotations import selectors

    rows = selectors.disagreements(study=world.study)
    assert {(r.criterion_key, r.subject_id) for r in rows} == {
        ("correct", world.outputs[0].pk),
        ("helpful", world.outputs[0].pk),
    }
    adj = services.adjudication_record(
        study=world.study,
        criterion=world.criteria["correct"],
        output=world.outputs[0],
        value="fail",
        note="checked the source",
        user=lead,
    )
    assert adj.value == "fail"
    assert Annotation.objects.filter(output=world.outputs[0], criterion__key="correct").count() == 2
    by_key = {r.criterion_key: r for r in selectors.disagreements(study=world.study)}
    assert by_key["correct"].adjudicated_value == "fail"
    assert by_key["helpful"].adjudicated_value is None
    with pytest.raises(ValidationFailed):
        services.adjudication_record(
            study=world.study,
            criterion=world.criteria["correct"],
            output=world.outputs[0],
            value="meh",
            note="",
            user=lead,
        )
