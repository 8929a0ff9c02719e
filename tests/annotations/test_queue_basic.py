"""The queue on the single-process path (runs on SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from annotations import selectors, services
from annotations.models import Annotation, Assignment, QueueEntry

from .factories import World, passing_labels

pytestmark = pytest.mark.django_db


def test_next_submit_until_done(world: World, lead: Any, annotators: list[Any]) -> None:
    plan = services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 1}, k=2, gold_rate=0.0, created_by=lead
    )
    assert plan.entries.count() == 10
    seen: dict[int, set[int]] = {}
    for annotator in annotators:
        while True:
            a = services.assignment_next(study=world.study, annotator=annotator)
            if a is None:
                break
            assert a.entry_id not in seen.setdefault(annotator.pk, set())
            seen[annotator.pk].add(a.entry_id)
            ctx = selectors.grading_context(assignment=a)
            assert ctx.kind == "output"
            services.annotation_submit(
                assignment=a,
                annotator=annotator,
                submission_id=uuid.uuid4(),
                labels=passing_labels(),
                time_on_task_ms=1200,
            )
    assert set(QueueEntry.objects.filter(plan=plan).values_list("done_count", flat=True)) == {2}
    assert Annotation.objects.count() == 10 * 2 * 2
    assert Assignment.objects.filter(status="submitted").count() == 20
    progress = selectors.annotator_progress(study=world.study, annotator=annotators[0])
    assert progress.left_in_queue == 0
