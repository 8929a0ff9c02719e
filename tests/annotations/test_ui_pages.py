"""Server-rendered annotation pages through Django's test client: blinding, escaping, access,
CSRF, the form-to-service mapping (severity, idempotency, pairwise order) and the lead pages."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Adjudication, Annotation, Assignment
from annotations.services import annotation_submit, assignment_next, sampling_plan_create
from judges.models import Judge, JudgeVersion, Verdict
from studies.models import Criterion, Membership
from tests.browser.factories import grading_study
from tests.browser.harness import fast_password_hashing  # noqa: F401 - autouse fixture
from tests.factories import (
    ComparisonFactory,
    CriterionFactory,
    MembershipFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

GRADE = "/studies/support/grade/"
LEAD_PAGES = ["annotation/queue/", "annotation/disagreements/", "annotation/members/"]
PAYLOAD = (
    "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
    "<a href=\"javascript:window.__pwned=3\">x</a>"
)


def _paths(response: Any) -> list[str]:
    """The paths of the problems a 400 answer lists."""
    return [e["path"] for e in response.json()["error"]["details"]["errors"]]


def _client(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _leased(user: Any) -> Assignment:
    return Assignment.objects.select_related("entry").get(annotator=user, status="leased")


def _form(assignment: Assignment | None = None, **labels: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"submission_id": str(uuid.uuid4()), "time_on_task_ms": "4200"}
    defaults = {"correct": ("pass", None), "clarity": ("4", None), "tone": ("friendly", None)}
    defaults.update(labels)
    for key, (value, severity) in defaults.items():
        data[f"label-{key}"] = value
        if severity is not None:
            data[f"severity-{key}"] = str(severity)
    return data


def _submit_url(assignment: Assignment, what: str = "submit") -> str:
    return f"/studies/support/grade/{assignment.pk}/{what}/"


# --- blinding and escaping -------------------------------------------------------------------


def test_grading_page_and_its_json_never_show_candidate_judges_or_other_labels() -> None:
    gs = grading_study(n_annotators=2, k=2, candidate_name="CandSecretName")
    cand = gs.candidates[0]
    cand.provider, cand.model_id, cand.notes = "ProvSecret", "ModelSecret", "NotesSecret"
    cand.save()
    judge = Judge.objects.create(study=gs.study, name="JudgeSecretName", kind="llm")
    version = JudgeVersion.objects.create(judge=judge, version=1, content_hash="a" * 64)
    for output in gs.outputs:
        Verdict.objects.create(judge_version=version, criterion=gs.criteria["tone"],
                               output=output, value="rude", probability=0.42424242,
                               rationale="JudgeRationaleSecret")
    other = gs.annotators[1]
    while (a := assignment_next(study=gs.study, annotator=other)) is not None:
        annotation_submit(assignment=a, annotator=other, submission_id=uuid.uuid4(),
                          labels={"correct": {"value": "pass"}, "clarity": {"value": "5"},
                                  "tone": {"value": "neutral"}},
                          rationale="OtherRationaleSecret")
    client = _client(gs.annotators[0])
    secrets = ["CandSecretName", "ProvSecret", "ModelSecret", "NotesSecret", "JudgeSecretName",
               "JudgeRationaleSecret", "0.4242", "OtherRationaleSecret"]
    page = client.get(GRADE)
    assert page.status_code == 200
    assignment = _leased(gs.annotators[0])
    bodies = [page.content.decode()]
    bodies.append(client.post(_submit_url(assignment, "heartbeat")).content.decode())
    bodies.append(client.post(_submit_url(assignment), _form(),
                              HTTP_ACCEPT="application/json").content.decode())
    bodies.append(client.get(GRADE).content.decode())
    mine = Annotation.objects.filter(annotator=gs.annotators[0]).first()
    assert mine is not None
    bodies.append(client.get(f"/studies/support/my-annotations/{mine.pk}/revise/").content.decode())
    for body in bodies:
        for secret in secrets:
            assert secret not in body
    # Nothing preselected (no hint of anybody's label), and the other annotator is not named.
    assert "checked" not in re.sub(r"<fieldset class=\"flags\">.*?</fieldset>", "",
                                   bodies[0], flags=re.S)
    assert other.username not in bodies[0]


def test_untrusted_text_is_escaped_everywhere_and_pages_send_a_strict_csp() -> None:
    gs = grading_study(n_annotators=1, texts=[PAYLOAD])
    item = gs.outputs[0].item
    item.input, item.context, item.reference = PAYLOAD, PAYLOAD, PAYLOAD
    item.save()
    gs.criteria["correct"].guidance = PAYLOAD
    gs.criteria["correct"].save()
    client = _client(gs.annotators[0])
    response = client.get(GRADE)
    html = response.content.decode()
    assert "<script>window.__pwned" not in html
    assert "<img src=x" not in html
    assert 'href="javascript:' not in html
    # input, context, reference, output and guidance: five escaped copies.
    assert html.count("&lt;script&gt;window.__pwned=1&lt;/script&gt;") == 5
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "object-src 'none'" in csp
    assert "no-store" in response["Cache-Control"]
    # Every script on the page is a same-origin file (nothing inline for the CSP to allow).
    for tag in re.findall(r"<script[^>]*>", html):
        assert 'src="/static/' in tag
    client.post(_submit_url(_leased(gs.annotators[0])), _form())
    html = client.get(GRADE).content.decode()
    assert "<script>window.__pwned" not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html  # the recent-list excerpt
    mine = Annotation.objects.filter(annotator=gs.annotators[0]).first()
    assert mine is not None
    html = client.get(f"/studies/support/my-annotations/{mine.pk}/revise/").content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html


# --- access ---------------------------------------------------------------------------------


def test_lead_pages_are_404_for_annotators_viewers_and_strangers_and_200_for_leads() -> None:
    gs = grading_study(n_annotators=1)
    viewer = UserFactory(username="viewer")
    MembershipFactory(study=gs.study, user=viewer, role=Membership.Role.VIEWER)
    stranger = UserFactory(username="stranger")
    for user in (gs.annotators[0], viewer, stranger):
        client = _client(user)
        for page in LEAD_PAGES:
            assert client.get(f"/studies/support/{page}").status_code == 404, (user, page)
        assert client.post("/studies/support/annotation/members/",
                           {"action": "invite", "username": "x"}).status_code == 404
        assert client.post("/studies/support/annotation/disagreements/", {}).status_code == 404
    lead = _client(gs.lead)
    for page in LEAD_PAGES:
        assert lead.get(f"/studies/support/{page}").status_code == 200, page
    assert not UserFactory._meta.model.objects.filter(username="x").exists()
    # Grading needs the annotator role: viewers and strangers get 404 too.
    assert _client(viewer).get(GRADE).status_code == 404
    assert _client(stranger).get(GRADE).status_code == 404
    assert _client(stranger).get("/studies/support/").status_code == 404
    # Anonymous visitors are sent to the login page.
    response = Client().get(GRADE)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_an_annotator_cannot_touch_another_annotators_assignment_or_annotation() -> None:
    gs = grading_study(n_annotators=2, k=2)
    first, second = gs.annotators
    _client(first).get(GRADE)
    theirs = _leased(first)
    intruder = _client(second)
    for what in ("submit", "skip", "heartbeat"):
        assert intruder.post(_submit_url(theirs, what), _form()).status_code == 404, what
    _client(first).post(_submit_url(theirs), _form())
    annotation = Annotation.objects.filter(annotator=first).first()
    assert annotation is not None
    url = f"/studies/support/my-annotations/{annotation.pk}/revise/"
    assert intruder.get(url).status_code == 404
    assert intruder.post(url, {"label-correct": "fail", "severity-correct": "5"}).status_code == 404
    annotation.refresh_from_db()
    assert annotation.revised_at is None


def test_every_post_is_csrf_protected() -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann, csrf=True)
    client.get(GRADE)
    assignment = _leased(ann)
    for what in ("submit", "skip", "heartbeat"):
        assert client.post(_submit_url(assignment, what), _form()).status_code == 403, what
    assert not Annotation.objects.exists()
    assert _leased(ann).pk == assignment.pk
    lead = _client(gs.lead, csrf=True)
    for page in ("annotation/members/", "annotation/disagreements/"):
        assert lead.post(f"/studies/support/{page}",
                         {"action": "invite", "username": "newbie"}).status_code == 403
    assert not UserFactory._meta.model.objects.filter(username="newbie").exists()
    # With the token from the page the same submit goes through.
    html = client.get(GRADE).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token is not None
    data = _form() | {"csrfmiddlewaretoken": token.group(1)}
    response = client.post(_submit_url(assignment), data, HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response.json()["ok"] is True
    annotation = Annotation.objects.filter(annotator=ann).first()
    assert annotation is not None
    url = f"/studies/support/my-annotations/{annotation.pk}/revise/"
    assert client.post(url, {"label-correct": "fail", "severity-correct": "2"}).status_code == 403
    # Logout is a POST (with CSRF), never a GET.
    assert client.get("/accounts/logout/").status_code == 405


# --- the grading form and the services -------------------------------------------------------


def test_submit_through_the_form_is_idempotent_and_records_time_flags_rationale() -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann)
    client.get(GRADE)
    assignment = _leased(ann)
    data = _form(correct=("fail", 4)) | {
        "severity_note-correct": "Wrong menu path.", "rationale": "Checked the docs.",
        "flag-unsure": "1", "flag-offensive": "1",
    }
    first = client.post(_submit_url(assignment), data, HTTP_ACCEPT="application/json")
    again = client.post(_submit_url(assignment), data, HTTP_ACCEPT="application/json")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == {"ok": True, "saved": 3, "next_url": GRADE}
    rows = {a.criterion.key: a for a in Annotation.objects.select_related("criterion")}
    assert len(rows) == 3
    correct = rows["correct"]
    assert (correct.value, correct.severity, correct.severity_note) == ("fail", 4,
                                                                          "Wrong menu path.")
    assert correct.flags == {"unsure": True, "offensive": True}
    assert correct.rationale == "Checked the docs." and correct.time_on_task_ms == 4200
    assert str(correct.submission_id) == data["submission_id"]
    # A second submission (another tab) of the same assignment is refused, not duplicated.
    other = _form()
    response = client.post(_submit_url(assignment), other, HTTP_ACCEPT="application/json")
    assert response.status_code == 409
    assert Annotation.objects.count() == 3


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"correct": ("fail", None)}, "labels.correct.severity"),
        ({"clarity": ("2", None)}, "labels.clarity.severity"),
        ({"tone": ("rude", None)}, "labels.tone.severity"),
        ({"correct": ("pass", 3)}, "labels.correct.severity"),
        ({"clarity": ("9", None)}, "labels.clarity.value"),
    ],
)
def test_the_server_enforces_the_severity_rule_and_valid_values(
    labels: dict[str, Any], field: str
) -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann)
    client.get(GRADE)
    response = client.post(_submit_url(_leased(ann)), _form(**labels),
                           HTTP_ACCEPT="application/json")
    assert response.status_code == 400
    assert field in _paths(response)
    assert not Annotation.objects.exists()


def test_bad_form_fields_are_named_and_a_plain_post_falls_back_to_a_redirect() -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann)
    client.get(GRADE)
    assignment = _leased(ann)
    for bad, field in (({"submission_id": "nope"}, "submission_id"),
                       ({"time_on_task_ms": "soon"}, "time_on_task_ms"),
                       ({"severity-correct": "x"}, "severity-correct")):
        response = client.post(_submit_url(assignment), _form() | bad,
                               HTTP_ACCEPT="application/json")
        assert response.status_code == 400, bad
        assert field in _paths(response), bad
    missing = _form()
    del missing["label-tone"]
    response = client.post(_submit_url(assignment), missing, HTTP_ACCEPT="application/json")
    assert "labels.tone" in _paths(response)
    # Without JavaScript: an error comes back as a message on the grading page.
    response = client.post(_submit_url(assignment), missing, follow=True)
    assert response.redirect_chain[-1][0] == GRADE
    assert "Not saved" in response.content.decode()
    assert not Annotation.objects.exists()
    response = client.post(_submit_url(assignment), _form(), follow=True)
    assert "Saved" in response.content.decode()
    assert Annotation.objects.count() == 3


def test_skip_and_heartbeat() -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann)
    client.get(GRADE)
    first = _leased(ann)
    Assignment.objects.filter(pk=first.pk).update(
        lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    beat = client.post(_submit_url(first, "heartbeat"))
    assert beat.status_code == 200
    first.refresh_from_db()
    assert first.lease_expires_at is not None
    assert first.lease_expires_at > timezone.now() + timedelta(minutes=10)
    assert beat.json() == {"lease_expires_at": first.lease_expires_at.isoformat()}
    response = client.post(_submit_url(first, "skip"))
    assert response.status_code == 302 and response["Location"] == GRADE
    first.refresh_from_db()
    assert first.status == "skipped"
    # The lease is gone: a heartbeat now says so (the page warns the annotator).
    assert client.post(_submit_url(first, "heartbeat")).status_code == 409
    client.get(GRADE)
    assert _leased(ann).entry_id != first.entry_id


def test_progress_and_empty_queue() -> None:
    gs = grading_study(n_annotators=1, rows=[0, 1])
    ann = gs.annotators[0]
    client = _client(ann)
    html = client.get(GRADE).content.decode()
    assert re.search(r'id="progress-today">0<', html) and re.search(r'id="progress-left">1<', html)
    client.post(_submit_url(_leased(ann)), _form())
    html = client.get(GRADE).content.decode()
    assert re.search(r'id="progress-today">1<', html) and re.search(r'id="progress-left">0<', html)
    client.post(_submit_url(_leased(ann)), _form())
    html = client.get(GRADE).content.decode()
    assert "Nothing left for you to grade" in html
    assert re.search(r'id="progress-total">2<', html)
    assert "grade.js" not in html  # no form, no script
    assert html.count("/revise/") == 6  # both submissions, three criteria each


def test_revision_within_the_window_keeps_history_and_refuses_after_it() -> None:
    gs = grading_study(n_annotators=1)
    ann = gs.annotators[0]
    client = _client(ann)
    client.get(GRADE)
    client.post(_submit_url(_leased(ann)), _form(tone=("rude", 2)))
    tone = Annotation.objects.get(criterion__key="tone")
    url = f"/studies/support/my-annotations/{tone.pk}/revise/"
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'value="rude"\s+data-role="label" data-fails="1"[^>]*checked', html)
    # Revising to a pass without dropping the severity is refused with the field named.
    bad = client.post(url, {"label-tone": "friendly", "severity-tone": "2"})
    assert bad.status_code == 400 and "severity" in bad.content.decode()
    response = client.post(url, {"label-tone": "neutral", "rationale": "Re-read it."})
    assert response.status_code == 302 and response["Location"] == GRADE
    tone.refresh_from_db()
    assert (tone.value, tone.severity, tone.rationale) == ("neutral", None, "Re-read it.")
    assert [(r.value, r.severity) for r in tone.revisions.all()] == [("rude", 2)]
    Annotation.objects.filter(pk=tone.pk).update(created_at=timezone.now() - timedelta(days=1))
    closed = client.get(url)
    assert "revision window" in closed.content.decode()
    assert "grade.js" not in closed.content.decode()
    assert client.post(url, {"label-tone": "rude", "severity-tone": "5"}).status_code == 400
    tone.refresh_from_db()
    assert tone.value == "neutral"
    # Outside the window the annotation is no longer listed as revisable.
    assert url not in client.get(GRADE).content.decode()


def test_pairwise_left_right_as_presented_and_mapped_back() -> None:
    gs = grading_study(n_annotators=1, criteria=("correct",))
    rubric = gs.criteria["correct"].rubric
    CriterionFactory(rubric=rubric, key="preferred", name="Preferred answer",
                     scale=Criterion.Scale.PAIRWISE, position=5)
    comparisons = []
    for i in range(6):
        comparison: Any = ComparisonFactory(output_a__candidate=gs.candidates[0],
                                       output_a__text=f"LEFT-OR-RIGHT A{i}",
                                       output_b__text=f"LEFT-OR-RIGHT B{i}")
        comparisons.append(comparison)
    assert comparisons[0].study_id == gs.study.pk
    sampling_plan_create(study=gs.study, spec={"mode": "all", "subject": "comparison"}, k=1,
                         gold_rate=0.0, created_by=gs.lead)
    ann = gs.annotators[0]
    client = _client(ann)
    for i in range(len(comparisons)):
        client.get(GRADE)  # leases the next comparison
        assignment = _leased(ann)
        # The service randomises the order; fix it here so both orders are always covered.
        Assignment.objects.filter(pk=assignment.pk).update(swapped=i % 2 == 1)
        assignment.refresh_from_db()
        html = client.get(GRADE).content.decode()  # a reload returns the same lease
        assert _leased(ann).pk == assignment.pk
        left = re.search(r'id="output-left">\s*LEFT-OR-RIGHT ([AB])\d', html)
        assert left is not None
        assert left.group(1) == ("B" if assignment.swapped else "A")
        assert 'data-shortcut-letter="a"' in html and 'data-shortcut-letter="t"' in html
        # The annotator prefers the LEFT text as shown.
        response = client.post(_submit_url(assignment),
                               {"submission_id": str(uuid.uuid4()), "label-preferred": "A"},
                               HTTP_ACCEPT="application/json")
        assert response.status_code == 200, response.content
        stored = Annotation.objects.get(assignment=assignment)
        assert stored.value == ("B" if assignment.swapped else "A")
    assert Annotation.objects.filter(value="A").count() == 3
    assert Annotation.objects.filter(value="B").count() == 3


# --- lead pages -------------------------------------------------------------------------------


def test_queue_page_shows_strata_and_annotator_stats() -> None:
    gs = grading_study(n_annotators=2, k=2)
    for ann in gs.annotators:
        assignment = assignment_next(study=gs.study, annotator=ann)
        assert assignment is not None
        annotation_submit(assignment=assignment, annotator=ann, submission_id=uuid.uuid4(),
                          labels={"correct": {"value": "pass"}, "clarity": {"value": "4"},
                                  "tone": {"value": "neutral"}}, time_on_task_ms=30_000)
    html = _client(gs.lead).get("/studies/support/annotation/queue/").content.decode()
    assert "Sampling plan v1" in html and "k = 2" in html
    row = re.search(r"<th scope=\"row\">\(all\)</th>(.*?)</tr>", html, flags=re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    assert cells[:5] == ["4", "0", "8", "0", "2"]  # outputs, gold, needed, leased, done
    assert "ann1" in html and "ann2" in html
    assert "30 s" in html  # median time on task


def test_disagreements_page_and_adjudication_kept_apart() -> None:
    gs = grading_study(n_annotators=2, k=2, rows=[0])
    for ann, tone in zip(gs.annotators, ("friendly", "rude"), strict=True):
        assignment = assignment_next(study=gs.study, annotator=ann)
        assert assignment is not None
        labels: dict[str, Any] = {"correct": {"value": "pass"}, "clarity": {"value": "4"},
                                  "tone": {"value": tone}}
        if tone == "rude":
            labels["tone"]["severity"] = 2
        annotation_submit(assignment=assignment, annotator=ann, submission_id=uuid.uuid4(),
                          labels=labels)
    lead = _client(gs.lead)
    url = "/studies/support/annotation/disagreements/"
    html = lead.get(url).content.decode()
    assert "1 subject\u2013criterion pair" in html
    assert "Friendly \u00d7 1" in html and "Rude \u00d7 1" in html
    output = gs.outputs[0]
    response = lead.post(url, {"criterion_id": gs.criteria["tone"].pk, "subject": "output",
                               "subject_id": output.pk, "value": "friendly",
                               "note": "Polite enough."}, follow=True)
    assert "Adjudication recorded" in response.content.decode()
    adjudication = Adjudication.objects.get()
    assert (adjudication.value, adjudication.note, adjudication.output_id) == (
        "friendly", "Polite enough.", output.pk)
    assert sorted(Annotation.objects.filter(criterion__key="tone").values_list("value", flat=True)
                  ) == ["friendly", "rude"]
    # Invalid input is named and nothing is recorded.
    response = lead.post(url, {"criterion_id": gs.criteria["tone"].pk, "subject": "output",
                               "subject_id": output.pk, "value": "sarcastic"}, follow=True)
    assert "Not recorded" in response.content.decode()
    response = lead.post(url, {"criterion_id": "x", "subject": "output", "subject_id": "1"},
                         follow=True)
    assert "criterion_id" in response.content.decode()
    assert Adjudication.objects.count() == 1
    filtered = lead.get(url + "?criterion=correct").content.decode()
    assert "No disagreements on this criterion" in filtered


def test_members_page_invites_and_resets_with_a_one_time_password_shown_once() -> None:
    gs = grading_study(n_annotators=1)
    lead = _client(gs.lead)
    url = "/studies/support/annotation/members/"
    response = lead.post(url, {"action": "invite", "username": "",
                               "email": "newbie@example.test", "role": "annotator"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    match = re.search(r'id="one-time-password">([^<]+)<', response.content.decode())
    assert match is not None
    password = match.group(1)
    assert password not in lead.get(url).content.decode()  # shown once
    newbie = UserFactory._meta.model.objects.get(username__startswith="newbie-")
    assert Client().login(username=newbie.username, password=password)
    assert Membership.objects.get(study=gs.study, user=newbie).role == "annotator"
    response = lead.post(url, {"action": "reset", "user_id": newbie.pk})
    match = re.search(r'id="one-time-password">([^<]+)<', response.content.decode())
    assert match is not None and match.group(1) != password
    assert Client().login(username=newbie.username, password=match.group(1))
    assert not Client().login(username=newbie.username, password=password)
    # Errors are shown with their reason; a lead cannot reset another lead.
    bad = lead.post(url, {"action": "invite", "username": "bad name!", "role": "annotator"})
    assert bad.status_code == 400 and "username" in bad.content.decode()
    other_lead: Any = UserFactory(username="colead")
    MembershipFactory(study=gs.study, user=other_lead, role=Membership.Role.LEAD)
    refused = lead.post(url, {"action": "reset", "user_id": other_lead.pk})
    assert refused.status_code == 400 and "admin" in refused.content.decode()
    assert lead.post(url, {"action": "reset", "user_id": "abc"}).status_code == 400


# --- home, overview, navigation ------------------------------------------------------------------


def test_home_lists_only_my_studies_with_roles_and_the_overview_fits_the_role() -> None:
    gs = grading_study(n_annotators=1)
    grading_study(slug="second", n_annotators=0)
    ann = _client(gs.annotators[0])
    home = ann.get("/").content.decode()
    assert "Support answers" in home and "Annotator" in home
    assert "/studies/second/" not in home
    overview = ann.get("/studies/support/").content.decode()
    assert "Start grading" in overview and "Simulated data" in overview
    assert "Outputs</dt>" not in overview
    for page in LEAD_PAGES:
        assert f"/studies/support/{page}" not in overview
    lead = _client(gs.lead).get("/studies/support/").content.decode()
    assert re.search(r"<dt>Outputs</dt><dd>4</dd>", lead)
    assert re.search(r"<dt>Items</dt><dd>4</dd>", lead)
    assert re.search(r"<dt>Candidates</dt><dd>1</dd>", lead)
    for page in LEAD_PAGES:
        assert f"/studies/support/{page}" in lead
    assert "Correctness" in lead and "Clarity" in lead  # the rubric


def test_login_page_and_json_error_shape() -> None:
    html = Client().get("/accounts/login/").content.decode()
    assert 'for="id_username"' in html and 'autocomplete="current-password"' in html
    gs = grading_study(n_annotators=1)
    client = _client(gs.annotators[0])
    client.get(GRADE)
    response = client.post(_submit_url(_leased(gs.annotators[0])), {"submission_id": "x"},
                           HTTP_ACCEPT="application/json")
    body = json.loads(response.content)
    assert set(body["error"]) == {"code", "message", "details"}
