"""Hand-written hot-path SQL (reviewhub/rawrows.py) loads the same instances as the ORM.

Runs on SQLite and PostgreSQL: JSON fields, UUIDs, datetimes and booleans come back from the
two backends in different shapes, and the field converters must turn them into the same
Python values the ORM gives.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import models

from annotations import selectors, services
from annotations.models import Assignment, QueueEntry, SamplingPlan
from reviewhub.rawrows import RowShape, db_value, fetch_one
from studies.authentication import _live_token, token_hash
from studies.models import ApiToken, Study
from tests.factories import api_token_create

from .factories import World, passing_labels

pytestmark = pytest.mark.django_db


def _values(obj: models.Model) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def _raw(model: type[models.Model], pk: Any) -> models.Model:
    shape = RowShape(model, "t")
    row = fetch_one(f"SELECT {shape.select} FROM {model._meta.db_table} t WHERE t.id = %s", [pk])
    assert row is not None
    return shape.load(row)


def test_every_hot_path_model_loads_as_the_orm_loads_it(
    world: World, lead: Any, annotators: list[Any]
) -> None:
    plan = services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 3}, k=2, gold_rate=0.0, created_by=lead
    )
    assignment = services.assignment_next(study=world.study, annotator=annotators[0])
    assert assignment is not None
    services.annotation_submit(assignment=assignment, annotator=annotators[0],
                               submission_id=uuid.uuid4(), labels=passing_labels(),
                               time_on_task_ms=900)
    api_token_create(user=annotators[0], study=world.study)
    objects: list[models.Model] = [
        world.study, plan, QueueEntry.objects.filter(plan=plan).first(),  # type: ignore[list-item]
        assignment, ApiToken.objects.first(), annotators[0],  # type: ignore[list-item]
    ]
    for obj in objects:
        fresh = type(obj).objects.get(pk=obj.pk)
        raw = _raw(type(obj), obj.pk)
        assert _values(raw) == _values(fresh), type(obj).__name__
        assert raw._state.adding is False and raw._state.db == fresh._state.db
    # JSON columns decode to Python values, not text (the converters ran).
    raw_plan = _raw(SamplingPlan, plan.pk)
    assert isinstance(raw_plan.spec, dict) and raw_plan.spec["mode"] == "all"  # type: ignore[attr-defined]
    # A submitted assignment's UUID and timestamps survive the round trip.
    raw_assignment = _raw(Assignment, assignment.pk)
    assert isinstance(raw_assignment.submission_id, uuid.UUID)  # type: ignore[attr-defined]
    assert raw_assignment.finished_at is not None  # type: ignore[attr-defined]


def test_loaded_instances_save_as_updates(world: World) -> None:
    raw = _raw(Study, world.study.pk)
    raw.name = "Renamed"  # type: ignore[attr-defined]
    raw.save(update_fields=["name"])
    assert Study.objects.count() == 1
    assert Study.objects.get(pk=world.study.pk).name == "Renamed"


def test_only_defers_the_other_columns_and_rejects_unknown_ones(world: World) -> None:
    output = world.outputs[0]
    shape = RowShape(type(output), "o", only=("id", "text"))
    row = fetch_one(f"SELECT {shape.select} FROM {output._meta.db_table} o WHERE o.id = %s",
                    [output.pk])
    assert row is not None and len(row) == 2
    loaded = shape.load(row)
    assert loaded.text == output.text  # type: ignore[attr-defined]
    assert loaded.get_deferred_fields() >= {"item_id", "candidate_id"}
    assert shape.load_optional((None, None)) is None
    with pytest.raises(ValueError, match="unknown columns"):
        RowShape(type(output), "o", only=("id", "no_such_column"))


def test_db_value_prepares_parameters_like_the_orm() -> None:
    sid = uuid.uuid4()
    prepared = db_value(Assignment, "submission_id", sid)
    row = fetch_one("SELECT %s", [prepared])
    assert row is not None
    assert str(row[0]).replace("-", "") == sid.hex


def test_token_lookup_is_one_query_and_skips_revoked_tokens(
    world: World, annotators: list[Any], django_assert_num_queries: Any
) -> None:
    secret = api_token_create(user=annotators[1], study=world.study)
    with django_assert_num_queries(1):
        token = _live_token(token_hash(secret))
        assert token is not None
        assert token.user.username == annotators[1].username  # no second query
    assert isinstance(token.user, get_user_model())
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=token.created_at)
    assert _live_token(token_hash(secret)) is None
    assert _live_token(token_hash("rh_nonsense")) is None


def test_grading_entry_and_own_assignment_lookups(
    world: World, lead: Any, annotators: list[Any], study: Study
) -> None:
    services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 4}, k=1, gold_rate=0.0, created_by=lead
    )
    mine = services.assignment_next(study=world.study, annotator=annotators[0])
    assert mine is not None
    ctx = selectors.grading_context(assignment=mine)
    assert ctx.output_text == QueueEntry.objects.get(pk=mine.entry_id).output.text  # type: ignore[union-attr]
    assert mine.entry.plan.study.slug == world.study.slug
    assert selectors.assignment_for_annotator(
        study=world.study, annotator=annotators[0], assignment_id=mine.pk
    ) is not None
    # Someone else's assignment, or one in another study, is invisible.
    assert selectors.assignment_for_annotator(
        study=world.study, annotator=annotators[1], assignment_id=mine.pk
    ) is None
    other = Study.objects.create(name="Other", slug="other-study", owner=lead)
    assert selectors.assignment_for_annotator(
        study=other, annotator=annotators[0], assignment_id=mine.pk
    ) is None
