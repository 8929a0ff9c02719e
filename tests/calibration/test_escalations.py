"""Escalations go to humans: a snapshot's escalated outputs become a sampling plan version."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotations import services as annotation_services
from annotations.models import Annotation, QueueEntry, SamplingPlan
from annotations.services.escalations import _open_entries
from calibration.escalations import escalated_subjects, escalations_plan_create
from calibration.models import CalibratedScore
from reviewhub.errors import NotFound, ValidationFailed
from studies.models import Membership, StratumDimension, Study
from tests.factories import MembershipFactory, UserFactory

from .scores_factory import World, snapshot_make, world_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(study: Study) -> World:
    w = world_make(study, n_outputs=9)
    snapshot_make(w)
    return w


def _expected_order(world: World) -> list[int]:
    """Escalated outputs by their smallest |p - 0.5|, then id, computed in Python."""
    best: dict[int, float] = {}
    for out_id, p in CalibratedScore.objects.filter(
        snapshot_id=world.snapshots[-1], decision="escalate"
    ).values_list("output_id", "p_pass"):
        best[out_id] = min(best.get(out_id, 1.0), abs(p - 0.5))
    return sorted(best, key=lambda o: (best[o], o))


def test_plan_holds_the_escalated_outputs_as_escalation_draws(world: World, lead: Any) -> None:
    expected = _expected_order(world)
    assert 0 < len(expected) <= len(world.outputs)
    assert escalated_subjects(study=world.study, snapshot_id=world.snapshots[-1],
                              subject="output") == expected
    result = escalations_plan_create(study=world.study, snapshot_id=None, created_by=lead)
    assert result.created and result.subject == "output" and result.subjects == len(expected)
    assert result.snapshot_id == world.snapshots[-1]
    plan = result.plan
    assert plan.is_active and plan.version == 1
    assert plan.spec["mode"] == "escalation"
    assert plan.summary["draw_kinds"] == {"escalation": len(expected)}
    entries = list(QueueEntry.objects.filter(plan=plan))
    assert sorted(e.output_id for e in entries) == sorted(expected)
    assert {e.draw_kind for e in entries} == {"escalation"}
    assert all(e.inclusion_probability is None and not e.is_gold for e in entries)


def test_limit_keeps_the_most_uncertain(world: World, lead: Any) -> None:
    expected = _expected_order(world)
    result = escalations_plan_create(study=world.study, snapshot_id=world.snapshots[-1],
                                     created_by=lead, limit=2)
    got = set(QueueEntry.objects.filter(plan=result.plan).values_list("output_id", flat=True))
    assert got == set(expected[:2]) and result.subjects == 2


def test_idempotent_per_snapshot(world: World, lead: Any) -> None:
    first = escalations_plan_create(study=world.study, snapshot_id=None, created_by=lead)
    again = escalations_plan_create(study=world.study, snapshot_id=world.snapshots[-1],
                                    created_by=lead, limit=1)
    assert not again.created and again.plan.pk == first.plan.pk
    assert again.subjects == first.subjects
    assert SamplingPlan.objects.filter(study=world.study).count() == 1
    # A newer snapshot gets a plan of its own, which supersedes the first.
    snapshot_make(world)
    newer = escalations_plan_create(study=world.study, snapshot_id=None, created_by=lead)
    assert newer.created and newer.plan.version == 2
    first.plan.refresh_from_db()
    assert not first.plan.is_active and newer.plan.is_active


def test_without_keep_sampling_it_replaces_the_plan_and_counts_earlier_labels(
        world: World, lead: Any) -> None:
    annotator = UserFactory(username="ann")
    MembershipFactory(study=world.study, user=annotator, role=Membership.Role.ANNOTATOR)
    random_plan = annotation_services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 1}, k=2, gold_rate=0, created_by=lead)
    expected = _expected_order(world)
    # The annotator labels outputs until one that will be escalated is done.
    labelled: set[int] = set()
    while not labelled & set(expected):
        assignment = annotation_services.assignment_next(study=world.study, annotator=annotator)
        assert assignment is not None
        annotation_services.annotation_submit(
            assignment=assignment, annotator=annotator, submission_id=uuid.uuid4(),
            labels={"correct": {"value": "pass"}, "safe": {"value": "pass"}})
        labelled.add(assignment.entry.output_id)  # type: ignore[arg-type]
    result = escalations_plan_create(study=world.study, snapshot_id=None, created_by=lead,
                                     keep_sampling=False)
    random_plan.refresh_from_db()
    assert not random_plan.is_active and result.plan.k == 2
    assert result.carried_over == 0 and result.escalated == len(expected)
    done = dict(QueueEntry.objects.filter(plan=result.plan).values_list("output_id",
                                                                        "done_count"))
    assert {o for o, n in done.items() if n == 1} == labelled & set(expected)
    # The annotator is never offered an output they labelled already.
    offered = annotation_services.assignment_next(study=world.study, annotator=annotator)
    assert offered is not None and offered.entry.output_id not in labelled


def _label(world: World, annotator: Any, n: int) -> list[int]:
    done = []
    for _ in range(n):
        assignment = annotation_services.assignment_next(study=world.study, annotator=annotator)
        assert assignment is not None
        annotation_services.annotation_submit(
            assignment=assignment, annotator=annotator, submission_id=uuid.uuid4(),
            labels={"correct": {"value": "pass"}, "safe": {"value": "pass"}})
        done.append(int(assignment.entry.output_id))  # type: ignore[arg-type]
    return done


def test_random_sampling_goes_on_beside_the_escalations(world: World, lead: Any) -> None:
    annotator = UserFactory(username="ann")
    MembershipFactory(study=world.study, user=annotator, role=Membership.Role.ANNOTATOR)
    # The items' strata are set by the factory; the plan needs the dimension declared.
    StratumDimension.objects.create(study=world.study, key="language",
                                    kind=StratumDimension.Kind.CATEGORICAL,
                                    source="metadata.language")
    random_plan = annotation_services.sampling_plan_create(
        study=world.study, spec={"mode": "per_stratum", "dimension": "language", "n": 2,
                                 "seed": 3},
        k=2, gold_rate=0, created_by=lead)
    drawn = {e.output_id: e for e in QueueEntry.objects.filter(plan=random_plan)}
    assert len(drawn) == 4 and all(0 < (e.inclusion_probability or 0) < 1
                                   for e in drawn.values())
    labelled = _label(world, annotator, 1)
    expected = _expected_order(world)
    result = escalations_plan_create(study=world.study, snapshot_id=None, created_by=lead)
    random_plan.refresh_from_db()
    assert not random_plan.is_active and result.plan.is_active
    entries = {e.output_id: e for e in QueueEntry.objects.filter(plan=result.plan)}
    # Every random draw is still in the queue, exactly as drawn (none was finished at k = 2).
    assert result.carried_over == 4 and set(drawn) <= set(entries)
    for out_id, old in drawn.items():
        new = entries[out_id]
        assert (new.draw_kind, new.inclusion_probability, new.sample_weight, new.stratum,
                new.sort_key, new.needed) == (old.draw_kind, old.inclusion_probability,
                                              old.sample_weight, old.stratum, old.sort_key,
                                              old.needed)
        assert new.done_count == (1 if out_id in labelled else 0)
    # Escalated outputs the random plan had drawn keep their random draw; the others are
    # escalation entries without an inclusion probability.
    escalation_ids = {o for o, e in entries.items() if e.draw_kind == "escalation"}
    assert escalation_ids == set(expected) - set(drawn)
    assert result.escalated == len(escalation_ids) > 0
    assert result.subjects == len(entries) == len(escalation_ids) + 4
    assert all(entries[o].inclusion_probability is None for o in escalation_ids)
    summary = result.plan.summary
    assert summary["escalated_already_drawn"] == len(set(expected) & set(drawn))
    assert summary["carried_over_from"] == [random_plan.pk]
    assert summary["draw_kinds"] == {"escalation": len(escalation_ids),
                                     drawn[next(iter(drawn))].draw_kind: 4}
    # The annotator goes on with the random draws and the escalations, never one labelled
    # before, and an annotation under a carried entry keeps its draw's inclusion probability.
    more = _label(world, annotator, len(entries) - 1)
    assert set(more) == set(entries) - set(labelled)
    assert annotation_services.assignment_next(study=world.study, annotator=annotator) is None
    for out_id in drawn:
        got = set(Annotation.objects.filter(output_id=out_id, annotator=annotator)
                  .values_list("assignment__entry__inclusion_probability", flat=True))
        assert got == {drawn[out_id].inclusion_probability}


def test_a_plan_of_comparisons_is_not_carried_into_one_of_outputs(
        world: World, lead: Any) -> None:
    random_plan = annotation_services.sampling_plan_create(
        study=world.study, spec={"mode": "all", "seed": 1}, k=1, gold_rate=0, created_by=lead)
    assert len(_open_entries([random_plan.pk], "output", "output_id")) == len(world.outputs)
    assert _open_entries([random_plan.pk], "comparison", "comparison_id") == []


def test_nothing_escalated_and_no_snapshot(study: Study, lead: Any) -> None:
    with pytest.raises(NotFound):
        escalations_plan_create(study=study, snapshot_id=None, created_by=lead)
    world = world_make(study)
    snapshot_make(world, decisions=("pass", "fail"))
    with pytest.raises(ValidationFailed) as exc:
        escalations_plan_create(study=study, snapshot_id=None, created_by=lead)
    assert exc.value.details["errors"][0]["path"] == "snapshot"


def test_api_201_then_200_and_access(world: World, lead_client: APIClient,
                                     client_for: Callable[..., APIClient], lead: Any) -> None:
    url = reverse("calibration-api-escalations", kwargs={"slug": world.study.slug})
    viewer, annotator = UserFactory(username="v"), UserFactory(username="a")
    MembershipFactory(study=world.study, user=viewer, role=Membership.Role.VIEWER)
    MembershipFactory(study=world.study, user=annotator, role=Membership.Role.ANNOTATOR)
    assert client_for(viewer).post(url, {}, format="json").status_code == 403
    assert client_for(annotator).post(url, {}, format="json").status_code == 403
    assert client_for(lead, can_write=False).post(url, {}, format="json").status_code == 403
    r = lead_client.post(url, {"limit": 3}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["outputs"] == 3 and body["created"] is True
    assert body["snapshot"] == world.snapshots[-1] and body["subject"] == "output"
    plan = SamplingPlan.objects.get(pk=body["plan_id"])
    assert plan.version == body["plan_version"]
    r = lead_client.post(url, {"snapshot": world.snapshots[-1]}, format="json")
    assert r.status_code == 200 and r.json()["plan_id"] == body["plan_id"]
    assert r.json()["created"] is False
    for bad, path in (({"limit": 0}, "limit"), ({"snapshot": "x"}, "snapshot")):
        r = lead_client.post(url, bad, format="json")
        assert r.status_code == 400
        assert path in [e["path"] for e in r.json()["error"]["details"]["errors"]]
    r = lead_client.post(url, {"snapshot": 987654}, format="json")
    assert r.status_code == 404
