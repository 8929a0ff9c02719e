"""The annotation REST API: annotator operations, blinding, lead operations, export."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from annotations import services
from annotations.export import COLUMNS
from annotations.models import Annotation, AnnotationRevision, Assignment
from judges.models import Judge, JudgeVersion, Verdict
from studies.models import Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory

from .factories import (
    SECRET_CANDIDATES,
    SECRET_PROVIDERS,
    World,
    annotators_make,
    failing_labels,
    passing_labels,
    world_build,
)

pytestmark = pytest.mark.django_db
Client = Callable[..., APIClient]


def _paths(response: Any) -> list[str]:
    """The paths of the problems a 400 answer lists."""
    return [e["path"] for e in response.json()["error"]["details"]["errors"]]


def _base(slug: str = "alpha") -> str:
    return f"/api/studies/{slug}"


@pytest.fixture
def plan(world: World, lead: Any) -> Any:
    return services.sampling_plan_create(
        study=world.study,
        spec={"mode": "all", "dimension": "lang", "seed": 4},
        k=2,
        gold_rate=0,
        created_by=lead,
    )


def _next(client: APIClient) -> dict[str, Any]:
    response = client.post(f"{_base()}/queue/next")
    assert response.status_code == 200, response.content
    return response.json()


def _submit(client: APIClient, assignment_id: int, **body: Any) -> Any:
    payload = {"submission_id": str(uuid.uuid4()), "labels": passing_labels(), **body}
    return client.post(f"{_base()}/assignments/{assignment_id}/submit", payload, format="json")


# --- annotator operations ---------------------------------------------------------------------


def test_next_submit_skip_heartbeat_revise(
    world: World, plan: Any, annotators: list[Any], client_for: Client
) -> None:
    client = client_for(annotators[0])
    body = _next(client)
    ctx = body["assignment"]
    assert ctx["kind"] == "output" and ctx["criteria"][0]["key"] == "correct"
    assert ctx["item"]["reference"] is None  # the study does not show references
    assert ctx["criteria"][0]["failing_values"] == ["fail"]
    assert ctx["criteria"][1]["failing_values"] == ["1", "2"]
    assert len(ctx["severity_scale"]) == 5
    assert body["progress"] == {
        "done_today": 0,
        "done_total": 0,
        "left_in_queue": 9,
        "plan_version": 1,
    }
    aid = ctx["assignment_id"]
    assert client.get(f"{_base()}/assignments/{aid}").json()["assignment_id"] == aid
    hb = client.post(f"{_base()}/assignments/{aid}/heartbeat")
    assert hb.status_code == 200 and hb.json()["status"] == "leased"

    sid = str(uuid.uuid4())
    labels = failing_labels(severity=3, note="misleading")
    first = _submit(
        client, aid, submission_id=sid, labels=labels, time_on_task_ms=2500, flags={"unsure": True}
    )
    assert first.status_code == 200, first.content
    assert first.json()["progress"]["done_total"] == 1
    again = _submit(client, aid, submission_id=sid, labels=labels)
    assert again.status_code == 200
    assert [a["id"] for a in again.json()["annotations"]] == [
        a["id"] for a in first.json()["annotations"]
    ]
    conflict = _submit(client, aid)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "already_submitted"
    assert Annotation.objects.count() == 2

    skip_id = _next(client)["assignment"]["assignment_id"]
    skipped = client.post(f"{_base()}/assignments/{skip_id}/skip")
    assert skipped.status_code == 200 and skipped.json()["left_in_queue"] == 8

    mine = client.get(f"{_base()}/my/annotations").json()
    assert len(mine["results"]) == 2
    correct = next(a for a in mine["results"] if a["criterion"] == "correct")
    assert correct["severity"] == 3 and correct["time_on_task_ms"] == 2500
    assert correct["flags"] == {"unsure": True} and correct["plan_version"] == 1
    patched = client.patch(
        f"{_base()}/my/annotations/{correct['id']}", {"value": "pass"}, format="json"
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["value"] == "pass" and patched.json()["revised_at"]
    assert patched.json()["severity"] is None
    assert AnnotationRevision.objects.get().value == "fail"
    bad = client.patch(
        f"{_base()}/my/annotations/{correct['id']}", {"value": "fail"}, format="json"
    )
    assert bad.status_code == 400 and "value.severity" in _paths(bad)


@pytest.mark.postgres  # SQLite (the demo) claims through the ORM, with a few more statements
def test_next_and_submit_round_trips_stay_few(
    world: World,
    plan: Any,
    annotators: list[Any],
    client_for: Client,
    django_assert_max_num_queries: Any,
    settings: Any,
) -> None:
    """next and submit are on every annotator's critical path (issue 4's latency goal): a query
    added to either shows up here, not only in bench/assignment.py."""
    settings.REVIEWHUB_LEASE_SWEEP_SECONDS = 3600  # the sweep runs once a minute, not per call
    client = client_for(annotators[0])
    # Warm up: the token's last_used_at write, the first sweep, the criteria cache (filled once
    # the rubric has annotations).
    for _ in range(2):
        _submit(client, _next(client)["assignment"]["assignment_id"])
    # token, study + role, BEGIN, plan + membership + own leases (+ the annotator's queue lock,
    # in the same statement), claim, COMMIT, context, progress. The transaction serialises one
    # annotator's concurrent calls (two tabs get one lease; test_queue_concurrency.py).
    with django_assert_max_num_queries(8):
        aid = _next(client)["assignment"]["assignment_id"]
    # token, study + role, own assignment, BEGIN, entry and assignment locked together,
    # insert, both updates in one statement, COMMIT, progress
    with django_assert_max_num_queries(9):
        assert _submit(client, aid).status_code == 200


def test_submit_validation_errors_are_400_naming_the_field(
    world: World, plan: Any, annotators: list[Any], client_for: Client
) -> None:
    client = client_for(annotators[0])
    aid = _next(client)["assignment"]["assignment_id"]
    r = _submit(client, aid, labels={**passing_labels(), "nonsense": {"value": "x"}})
    assert r.status_code == 400
    assert r.json()["error"]["details"] == {
        "errors": [{"path": "labels.nonsense", "message": "unknown criterion"}], "error_count": 1}
    r = _submit(client, aid, labels={"correct": {"value": "pass"}})
    assert r.status_code == 400 and "labels.helpful" in _paths(r)
    r = _submit(client, aid, submission_id="not-a-uuid")
    assert r.status_code == 400 and "submission_id" in _paths(r)
    r = _submit(client, aid, labels=failing_labels(severity=9))
    assert r.status_code == 400 and "labels.correct.severity" in _paths(r)


def test_revision_window_over_api(
    world: World, plan: Any, annotators: list[Any], client_for: Client
) -> None:
    client = client_for(annotators[0])
    aid = _next(client)["assignment"]["assignment_id"]
    created = _submit(client, aid).json()["annotations"]
    Annotation.objects.update(created_at=timezone.now() - timedelta(hours=2))
    r = client.patch(
        f"{_base()}/my/annotations/{created[0]['id']}", {"value": "pass"}, format="json"
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "revision_window_closed"
    assert client.get(f"{_base()}/my/annotations?revisable=1").json()["results"] == []


def test_annotators_see_only_their_own_work(
    world: World, plan: Any, annotators: list[Any], client_for: Client
) -> None:
    first, second = client_for(annotators[0]), client_for(annotators[1])
    aid = _next(first)["assignment"]["assignment_id"]
    created = _submit(first, aid).json()["annotations"]
    assert second.get(f"{_base()}/assignments/{aid}").status_code == 404
    assert second.post(f"{_base()}/assignments/{aid}/submit", {}, format="json").status_code == 404
    assert second.post(f"{_base()}/assignments/{aid}/skip").status_code == 404
    assert second.get(f"{_base()}/my/annotations").json()["results"] == []
    r = second.patch(
        f"{_base()}/my/annotations/{created[0]['id']}", {"value": "fail"}, format="json"
    )
    assert r.status_code == 404


def test_access_rules(world: World, plan: Any, annotators: list[Any], client_for: Client) -> None:
    outsider = client_for(UserFactory(username="outsider"))
    assert outsider.post(f"{_base()}/queue/next").status_code == 404
    viewer = UserFactory(username="viewer")
    MembershipFactory(study=world.study, user=viewer, role=Membership.Role.VIEWER)
    assert client_for(viewer).post(f"{_base()}/queue/next").status_code == 403
    read_only = client_for(annotators[0], can_write=False)
    assert read_only.post(f"{_base()}/queue/next").status_code == 403
    annotator = client_for(annotators[0])
    for path in (
        "sampling-plans",
        "annotation-progress",
        "disagreements",
        "adjudications",
        "gold-labels",
        "annotations/export?format=csv",
    ):
        assert annotator.get(f"{_base()}/{path}").status_code == 403, path
    assert annotator.post(f"{_base()}/annotators/invite", {"username": "x"}).status_code == 403
    assert APIClient().post(f"{_base()}/queue/next").status_code in (401, 403)


# --- blinding ---------------------------------------------------------------------------------


def test_annotator_responses_are_blind(study: Study, lead: Any, client_for: Client) -> None:
    world = world_build(study=study, strata={"en": 3}, n_candidates=2, pairwise=True)
    judge = Judge.objects.create(study=study, name="JUDGE-NAME-Q7", kind=Judge.Kind.IMPORTED)
    version = JudgeVersion.objects.create(
        judge=judge, version=1, content_hash="c" * 64, model_family="judgefamily-q7"
    )
    Verdict.objects.bulk_create(
        [
            Verdict(
                judge_version=version,
                criterion=world.criteria["correct"],
                output=o,
                value="fail",
                rationale="JUDGE-RATIONALE-Q7",
                probability=0.123456,
            )
            for o in world.outputs
        ]
        + [
            Verdict(
                judge_version=version,
                criterion=world.criteria["better"],
                comparison=c,
                value="B",
                rationale="JUDGE-RATIONALE-Q7",
                probability=0.654321,
            )
            for c in world.comparisons
        ]
    )
    people = annotators_make(study, 2)
    other = client_for(people[1])
    secrets_ = [
        *SECRET_CANDIDATES,
        *SECRET_PROVIDERS,
        "JUDGE-NAME-Q7",
        "JUDGE-RATIONALE-Q7",
        "judgefamily-q7",
        "0.123456",
        "0.654321",
        "OTHER-ANNOTATOR-NOTE",
        "ann1",
    ]
    seen: list[str] = []

    def grade_all(client: APIClient, note: str) -> None:
        while True:
            r = client.post(f"{_base()}/queue/next")
            seen.append(r.content.decode()) if client is not other else None
            ctx = r.json()["assignment"]
            if ctx is None:
                return
            aid = ctx["assignment_id"]
            for extra in (
                client.get(f"{_base()}/assignments/{aid}"),
                client.post(f"{_base()}/assignments/{aid}/heartbeat"),
            ):
                if client is not other:
                    seen.append(extra.content.decode())
            if ctx["kind"] == "pairwise":
                labels: dict[str, Any] = {"better": {"value": "A"}}
            else:
                labels = failing_labels(note=note)
            s = client.post(
                f"{_base()}/assignments/{aid}/submit",
                {"submission_id": str(uuid.uuid4()), "labels": labels, "rationale": note},
                format="json",
            )
            assert s.status_code == 200, s.content
            if client is not other:
                seen.append(s.content.decode())

    # Another annotator grades first, leaving labels and notes that must never leak.
    services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=2, gold_rate=0, created_by=lead
    )
    grade_all(other, "OTHER-ANNOTATOR-NOTE")
    services.sampling_plan_create(
        study=study,
        spec={"mode": "all", "subject": "comparison"},
        k=2,
        gold_rate=0,
        created_by=lead,
    )
    grade_all(other, "OTHER-ANNOTATOR-NOTE")
    me = client_for(people[0])
    services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=2, gold_rate=0, created_by=lead
    )
    grade_all(me, "my own note")
    services.sampling_plan_create(
        study=study,
        spec={"mode": "all", "subject": "comparison"},
        k=2,
        gold_rate=0,
        created_by=lead,
    )
    grade_all(me, "my own note")
    seen.append(me.get(f"{_base()}/my/annotations").content.decode())
    assert len(seen) > 20
    payload = "\n".join(seen)
    for secret in secrets_:
        assert secret not in payload, secret
    for key in (
        '"candidate',
        '"provider',
        '"model',
        '"verdict',
        '"judge',
        '"output_id',
        '"annotator',
        '"swapped',
    ):
        assert key not in payload, key
    # The pairwise texts were shown in the recorded order.
    swaps = dict(
        Assignment.objects.filter(annotator=people[0], entry__comparison__isnull=False).values_list(
            "pk", "swapped"
        )
    )
    assert set(swaps.values()) <= {True, False}


# --- leads ------------------------------------------------------------------------------------


def test_sampling_plan_crud(world: World, lead_client: APIClient) -> None:
    r = lead_client.post(
        f"{_base()}/sampling-plans",
        {
            "spec": {"mode": "per_stratum", "dimension": "lang", "n": 2, "seed": 9},
            "k": 3,
            "gold_rate": 0,
        },
        format="json",
    )
    assert r.status_code == 201, r.content
    assert r.json()["version"] == 1 and r.json()["summary"]["allocation"] == {
        "de": 2,
        "en": 2,
        "fr": 1,
    }
    r2 = lead_client.post(
        f"{_base()}/sampling-plans", {"spec": {"mode": "all"}, "k": 2}, format="json"
    )
    assert r2.status_code == 201 and r2.json()["version"] == 2
    listing = lead_client.get(f"{_base()}/sampling-plans").json()
    assert [(p["version"], p["is_active"]) for p in listing] == [(2, True), (1, False)]
    detail = lead_client.get(f"{_base()}/sampling-plans/1").json()
    assert {row["stratum"]: row["entries"] for row in detail["strata"]} == {
        "de": 2,
        "en": 2,
        "fr": 1,
    }
    bad = lead_client.post(
        f"{_base()}/sampling-plans",
        {"spec": {"mode": "per_stratum", "dimension": "lang"}},
        format="json",
    )
    assert bad.status_code == 400 and "spec.n" in _paths(bad)
    assert lead_client.get(f"{_base()}/sampling-plans/9").status_code == 404
    gone = lead_client.delete(f"{_base()}/sampling-plans/2")
    assert gone.status_code == 200 and gone.json()["is_active"] is False


def test_progress_disagreements_adjudication_gold(
    world: World, plan: Any, annotators: list[Any], lead_client: APIClient, client_for: Client
) -> None:
    target = world.outputs[0]
    g = lead_client.post(
        f"{_base()}/gold-labels",
        {"criterion": "correct", "output": target.pk, "value": "pass"},
        format="json",
    )
    assert g.status_code == 201, g.content
    for ann, labels in ((annotators[0], passing_labels()), (annotators[1], failing_labels())):
        client = client_for(ann)
        while True:
            ctx = _next(client)["assignment"]
            if ctx is None:
                break
            a = Assignment.objects.get(pk=ctx["assignment_id"])
            use = labels if a.entry.output_id == target.pk else passing_labels()
            assert (
                _submit(client, ctx["assignment_id"], labels=use, time_on_task_ms=1000).status_code
                == 200
            )
    progress = lead_client.get(f"{_base()}/annotation-progress").json()
    assert {r["stratum"]: (r["needed"], r["done"], r["leased"]) for r in progress["strata"]} == {
        "en": (12, 12, 0),
        "de": (6, 6, 0),
        "fr": (2, 2, 0),
    }
    stats = {r["username"]: r for r in progress["annotators"]}
    assert stats["ann0"]["submitted"] == 10 and stats["ann0"]["median_time_on_task_ms"] == 1000
    assert stats["ann0"]["gold_accuracy"] == 1.0 and stats["ann1"]["gold_accuracy"] == 0.0
    rows = lead_client.get(f"{_base()}/disagreements?criterion=correct").json()
    assert [(r["subject_id"], r["human_values"]) for r in rows] == [
        (target.pk, {"pass": 1, "fail": 1})
    ]
    adj = lead_client.post(
        f"{_base()}/adjudications",
        {"criterion": "correct", "output": target.pk, "value": "pass", "note": "gold agrees"},
        format="json",
    )
    assert adj.status_code == 201, adj.content
    rows = lead_client.get(f"{_base()}/disagreements?criterion=correct").json()
    assert rows[0]["adjudicated_value"] == "pass"
    assert lead_client.get(f"{_base()}/adjudications").json()["results"][0]["value"] == "pass"
    bad = lead_client.post(
        f"{_base()}/adjudications",
        {"criterion": "nope", "output": target.pk, "value": "pass"},
        format="json",
    )
    assert bad.status_code == 400 and "criterion" in _paths(bad)


def test_invite_and_reset_password(
    world: World, lead_client: APIClient, client_for: Client
) -> None:
    r = lead_client.post(
        f"{_base()}/annotators/invite",
        {"email": "newbie@example.test", "role": "annotator"},
        format="json",
    )
    assert r.status_code == 201, r.content
    password = r.json()["one_time_password"]
    assert password and len(password) >= 12
    user = get_user_model().objects.get(username=r.json()["username"])
    assert user.check_password(password)
    assert Membership.objects.get(study=world.study, user=user).role == "annotator"
    # Inviting an existing member again changes the role and creates no password.
    again = lead_client.post(
        f"{_base()}/annotators/invite", {"username": user.username, "role": "viewer"},
        format="json"
    )
    assert again.status_code == 201 and again.json()["one_time_password"] is None
    assert Membership.objects.get(study=world.study, user=user).role == "viewer"
    bad = lead_client.post(f"{_base()}/annotators/invite", {"email": "not-an-email"}, format="json")
    assert bad.status_code == 400 and "email" in _paths(bad)
    reset = lead_client.post(f"{_base()}/annotators/{user.pk}/reset-password")
    assert reset.status_code == 200
    user.refresh_from_db()
    assert user.check_password(reset.json()["one_time_password"])
    assert not user.check_password(password)
    # A lead may not reset another lead's password (an admin may).
    other_lead = UserFactory(username="lead2")
    MembershipFactory(study=world.study, user=other_lead, role=Membership.Role.LEAD)
    assert (
        lead_client.post(f"{_base()}/annotators/{other_lead.pk}/reset-password").status_code == 403
    )
    admin = get_user_model().objects.create_superuser("root", "root@example.test", "pw-123456!")
    assert (
        client_for(admin).post(f"{_base()}/annotators/{other_lead.pk}/reset-password").status_code
        == 200
    )
    # Not a member of this study: 404, even if the account exists.
    stranger = UserFactory(username="stranger")
    elsewhere = StudyFactory(slug="beta", owner=stranger)
    MembershipFactory(study=elsewhere, user=stranger, role=Membership.Role.ANNOTATOR)
    assert lead_client.post(f"{_base()}/annotators/{stranger.pk}/reset-password").status_code == 404


def test_export_csv_and_jsonl(
    world: World, plan: Any, annotators: list[Any], lead_client: APIClient, client_for: Client
) -> None:
    for ann in annotators[:2]:
        client = client_for(ann)
        while (ctx := _next(client)["assignment"]) is not None:
            labels = failing_labels(note="=HYPERLINK(1)")
            assert (
                _submit(
                    client,
                    ctx["assignment_id"],
                    labels=labels,
                    time_on_task_ms=700,
                    flags={"offensive": True},
                ).status_code
                == 200
            )
    r = lead_client.get(f"{_base()}/annotations/export?format=csv")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    text = b"".join(r.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0].keys()) == COLUMNS
    assert len(rows) == 10 * 2 * 2  # outputs x annotators x criteria
    row = next(x for x in rows if x["criterion"] == "correct")
    assert row["candidate"] == SECRET_CANDIDATES[0] and row["annotator"] in ("ann0", "ann1")
    assert row["value"] == "fail" and row["severity"] == "3" and row["severity_label"]
    assert row["severity_note"] == "'=HYPERLINK(1)"  # neutralised for spreadsheets
    assert json.loads(row["flags"]) == {
        "malformed_input": False,
        "offensive": True,
        "unsure": False,
    }
    assert json.loads(row["strata"]) in ({"lang": "en"}, {"lang": "de"}, {"lang": "fr"})
    assert row["plan_version"] == "1" and row["time_on_task_ms"] == "700"
    j = lead_client.get(f"{_base()}/annotations/export?format=jsonl")
    assert j.status_code == 200
    lines = [json.loads(line) for line in b"".join(j.streaming_content).decode().splitlines()]
    assert len(lines) == 40 and set(lines[0]) == set(COLUMNS)
    assert lines[0]["severity_note"] == "=HYPERLINK(1)"
    assert lead_client.get(f"{_base()}/annotations/export?format=xml").status_code == 400
    # Without ?format= the export is JSON Lines (docs/annotation.md), not a 400.
    default = lead_client.get(f"{_base()}/annotations/export")
    assert default.status_code == 200
    assert default["Content-Type"] == "application/x-ndjson"
    default_lines = b"".join(default.streaming_content).decode().splitlines()
    assert [json.loads(line) for line in default_lines] == lines


def test_list_endpoints_have_bounded_queries(
    world: World,
    plan: Any,
    annotators: list[Any],
    lead_client: APIClient,
    client_for: Client,
    django_assert_max_num_queries: Any,
    settings: Any,
) -> None:
    client = client_for(annotators[0])
    while (ctx := _next(client)["assignment"]) is not None:
        _submit(client, ctx["assignment_id"])
    with django_assert_max_num_queries(6):
        assert len(client.get(f"{_base()}/my/annotations").json()["results"]) == 20
    # Constant in the number of outputs and annotations: auth and access (3-4), then a fixed
    # set of aggregate queries.
    with django_assert_max_num_queries(12):
        lead_client.get(f"{_base()}/annotation-progress")
    with django_assert_max_num_queries(10):
        lead_client.get(f"{_base()}/disagreements")
    with django_assert_max_num_queries(6):
        r = lead_client.get(f"{_base()}/annotations/export?format=jsonl")
        assert len(b"".join(r.streaming_content).splitlines()) == 20


# --- interval criteria (issue 15, section 5) --------------------------------------------------


def test_interval_criterion_is_graded_with_a_number_in_its_range(
    world: World, lead: Any, annotators: list[Any], client_for: Client
) -> None:
    from django.test import Client as PageClient

    from studies.models import Criterion

    Criterion.objects.create(
        rubric=world.rubric, key="quality", name="Quality", scale=Criterion.Scale.INTERVAL,
        min=1, max=5, pass_threshold=3.5, position=2,
    )
    services.sampling_plan_create(study=world.study, spec={"mode": "all", "seed": 4}, k=2,
                                  gold_rate=0, created_by=lead)
    client = client_for(annotators[0])
    aid = _next(client)["assignment"]["assignment_id"]
    labels = passing_labels()
    for bad, detail in ((6, "labels.quality.value"), ("4 out of 5", "labels.quality.value"),
                        (0.99, "labels.quality.value")):
        r = _submit(client, aid, labels={**labels, "quality": {"value": bad}})
        assert r.status_code == 400, bad
        assert [e["path"] for e in r.json()["error"]["details"]["errors"]] == [detail], bad
    r = _submit(client, aid, labels={**labels, "quality": {"value": 6}})
    assert "must be a number from 1 to 5 (6 is outside the range 1..5)" in (
        r.json()["error"]["message"])
    # Below the threshold a score is a failure: the severity is asked exactly then.
    r = _submit(client, aid, labels={**labels, "quality": {"value": 2.5}})
    assert r.status_code == 400 and [
        e["path"] for e in r.json()["error"]["details"]["errors"]] == ["labels.quality.severity"]
    r = _submit(client, aid, labels={**labels, "quality": {"value": 4.25, "severity": 2}})
    assert r.status_code == 400 and [
        e["path"] for e in r.json()["error"]["details"]["errors"]] == ["labels.quality.severity"]
    assert not Annotation.objects.filter(criterion__key="quality").exists()
    r = _submit(client, aid, labels={**labels, "quality": {"value": 4.25}})
    assert r.status_code == 200, r.content
    saved = Annotation.objects.get(criterion__key="quality")
    assert (saved.value, saved.value_num, saved.severity) == ("4.25", 4.25, None)
    # A failing score with its severity, as text (the form's encoding).
    aid = _next(client)["assignment"]["assignment_id"]
    r = _submit(client, aid, labels={**labels, "quality": {"value": "2.5", "severity": 3}})
    assert r.status_code == 200, r.content
    # The grading page asks it with a number input of the range (keyboard: type, Enter moves).
    page = PageClient()
    page.force_login(annotators[1])
    html = page.get(f"/studies/{world.study.slug}/grade/").content.decode()
    assert 'type="number" name="label-quality"' in html
    assert 'min="1" max="5" step="any"' in html and 'data-threshold="3.5"' in html
    assert 'id="severity-quality"' in html
