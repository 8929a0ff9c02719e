"""Long contexts on the grading page: the rubric flag `needs_context` (spec, services, API,
OpenAPI, import) and the context's default state and `C` key on the page.

The context starts open when a criterion being graded needs it, otherwise when it is at most
`CONTEXT_OPEN_CHARS` characters; it is a <details> element, so it opens without script too.
"""

from __future__ import annotations

import json
import re
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from annotations.models import Annotation, Assignment
from annotations.services import annotation_submit, assignment_next
from annotations.views import CONTEXT_OPEN_CHARS
from studies.models import Criterion, RubricVersion, Study
from studies.spec import criteria_validate
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403
from tests.factories import UserFactory

GRADE = "/studies/support/grade/"
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "study.yaml"
DETAILS_RE = re.compile(r"<details\b[^>]*\bid=\"context\"[^>]*>")
BINARY = {"key": "grounded", "name": "Grounded", "scale": "binary"}
ORDINAL = {"key": "clear", "scale": "ordinal", "pass_threshold": 2,
           "points": [{"value": 1, "label": "no"}, {"value": 2, "label": "yes"}]}


def _study_with_context(context: str, *, needs: tuple[str, ...] = ()) -> Any:
    """The support study with one output whose item has `context`; `needs` names the
    criteria flagged needs_context."""
    gs = grading_study(n_annotators=1, k=1, rows=[0])
    item = gs.outputs[0].item
    item.context = context
    item.save()
    Criterion.objects.filter(pk__in=[gs.criteria[k].pk for k in needs]).update(
        needs_context=True)
    return gs


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _details(html: str) -> str | None:
    match = DETAILS_RE.search(html)
    return match.group(0) if match else None


def _is_open(tag: str) -> bool:
    return re.search(r"\sopen(\s|>|=)", tag) is not None


# --- the grading page (Django client) ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("length", "needs", "expect_open"),
    [
        (CONTEXT_OPEN_CHARS, (), True),          # at the threshold: short, open
        (CONTEXT_OPEN_CHARS + 1, (), False),     # one more: long, collapsed
        (40, (), True),
        (5000, ("correct",), True),              # long, but a graded criterion needs it
        (5000, ("clarity", "tone"), True),
        (40, ("correct",), True),
    ],
)
def test_context_default_state_follows_the_flag_and_the_length(
    length: int, needs: tuple[str, ...], expect_open: bool
) -> None:
    context = ("Passage: the refund window is 30 days. " * 200)[:length]
    assert len(context) == length
    gs = _study_with_context(context, needs=needs)
    page = _client(gs.annotators[0]).get(GRADE)
    assert page.status_code == 200
    html = page.content.decode()
    tag = _details(html)
    assert tag is not None, html
    assert _is_open(tag) is expect_open, tag
    assert f"({length} characters" in html
    names = [gs.criteria[k].name for k in needs]
    if names:
        assert f"needed for {', '.join(names)}" in html
    else:
        assert "needed for" not in html
    # The key is announced where the context is and in the shortcut list.
    assert "<kbd>C</kbd></summary>" in html
    assert re.search(r"<dt><kbd>C</kbd></dt><dd>Show or hide the context", html)


@pytest.mark.django_db
def test_no_context_no_disclosure() -> None:
    gs = _study_with_context("")
    html = _client(gs.annotators[0]).get(GRADE).content.decode()
    assert _details(html) is None and 'id="context-text"' not in html


@pytest.mark.django_db
def test_the_page_stays_blind_with_the_flag() -> None:
    gs = _study_with_context("x" * 2000, needs=("correct",))
    html = _client(gs.annotators[0]).get(GRADE).content.decode()
    candidate = gs.candidates[0]
    for secret in (candidate.name, candidate.provider, candidate.model_id):
        assert secret not in html


@pytest.mark.django_db
def test_revise_page_opens_the_context_only_for_a_criterion_that_needs_it() -> None:
    gs = _study_with_context("y" * 3000, needs=("correct",))
    ann = gs.annotators[0]
    assignment = assignment_next(study=gs.study, annotator=ann)
    assert assignment is not None
    annotation_submit(assignment=assignment, annotator=ann, submission_id=uuid.uuid4(),
                      labels={"correct": {"value": "pass"}, "clarity": {"value": "4"},
                              "tone": {"value": "friendly"}})
    client = _client(ann)
    state = {}
    for a in Annotation.objects.filter(annotator=ann).select_related("criterion"):
        html = client.get(f"/studies/support/my-annotations/{a.pk}/revise/").content.decode()
        tag = _details(html)
        assert tag is not None
        state[a.criterion.key] = _is_open(tag)
    assert state == {"correct": True, "clarity": False, "tone": False}


@pytest.mark.django_db
def test_the_grading_api_says_which_criteria_need_the_context() -> None:
    from rest_framework.test import APIClient

    gs = _study_with_context("z" * 50, needs=("tone",))
    api = APIClient()
    api.force_authenticate(gs.annotators[0])
    r = api.post("/api/studies/support/queue/next")
    assert r.status_code == 200, r.content
    flags = {c["key"]: c["needs_context"] for c in r.json()["assignment"]["criteria"]}
    assert flags == {"correct": False, "clarity": False, "tone": True}


def test_the_documented_threshold_is_the_code_s() -> None:
    for doc in ("grading.md", "study-spec.md"):
        text = (REPO / "docs" / doc).read_text()
        # Lines wrap anywhere in the prose: any whitespace between the words.
        found = re.findall(r"([\d,]+)\s+characters\s+or\s+fewer"
                           r"|longer\s+than\s+([\d,]+)\s+characters", text)
        numbers = {int(n.replace(",", "")) for pair in found for n in pair if n}
        assert numbers == {CONTEXT_OPEN_CHARS}, (doc, numbers)


# --- the rubric flag: spec, API, OpenAPI, import ----------------------------------------------


@pytest.mark.parametrize("value", ["yes", 1, 0, None, [], {}])
def test_spec_refuses_a_needs_context_that_is_not_a_boolean(value: Any) -> None:
    from reviewhub.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as info:
        criteria_validate([BINARY, {**ORDINAL, "needs_context": value}])
    errors = info.value.details["errors"]
    assert [e["path"] for e in errors] == ["criteria[1].needs_context"]
    assert "needs_context must be true or false" in errors[0]["message"]


def test_spec_defaults_needs_context_to_false() -> None:
    out = criteria_validate([BINARY, {**ORDINAL, "needs_context": True}])
    assert [c["needs_context"] for c in out] == [False, True]


@pytest.mark.django_db
def test_rubric_api_stores_returns_and_compares_the_flag(study: Study, lead_client: Any) -> None:
    bad = lead_client.put("/api/studies/alpha/rubric",
                          {"criteria": [{**BINARY, "needs_context": "true"}]}, format="json")
    assert bad.status_code == 400, bad.content
    error = bad.json()["error"]
    assert error["code"] == "validation_failed"
    assert "criteria[0].needs_context" in error["message"]
    assert [e["path"] for e in error["details"]["errors"]] == ["criteria[0].needs_context"]
    assert not RubricVersion.objects.filter(study=study).exists()

    body = {"criteria": [{**BINARY, "needs_context": True}, ORDINAL]}
    r = lead_client.put("/api/studies/alpha/rubric", body, format="json")
    assert r.status_code == 201 and r.json()["outcome"] == "created", r.content
    assert [c["needs_context"] for c in r.json()["criteria"]] == [True, False]
    got = lead_client.get("/api/studies/alpha/rubric").json()
    assert [(c["key"], c["needs_context"]) for c in got["criteria"]] == [
        ("grounded", True), ("clear", False)]
    assert list(Criterion.objects.filter(rubric__study=study).order_by("position")
                .values_list("needs_context", flat=True)) == [True, False]
    again = lead_client.put("/api/studies/alpha/rubric", body, format="json")
    assert (again.status_code, again.json()["outcome"]) == (200, "unchanged")
    flipped = {"criteria": [BINARY, {**ORDINAL, "needs_context": True}]}
    r = lead_client.put("/api/studies/alpha/rubric", flipped, format="json")
    assert (r.status_code, r.json()["outcome"]) == (200, "updated")
    assert [c["needs_context"] for c in r.json()["criteria"]] == [False, True]


def test_openapi_describes_the_flag() -> None:
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    for name in ("Criterion", "CriterionInputRequest", "CriterionView"):
        prop = schemas[name]["properties"]["needs_context"]
        assert prop["type"] == "boolean", (name, prop)
        assert "context" in prop.get("description", ""), (name, prop)
    assert "needs_context" in schemas["Criterion"]["required"]
    assert "needs_context" not in schemas["CriterionInputRequest"].get("required", [])
    assert schemas["CriterionInputRequest"]["properties"]["needs_context"]["default"] is False


def _import(path: Path) -> str:
    out = StringIO()
    call_command("import_study", str(path), stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_import_stores_the_flag_and_a_reimport_is_unchanged(tmp_path: Path) -> None:
    UserFactory(username="lead")
    UserFactory(username="annotator")
    doc = yaml.safe_load(EXAMPLE.read_text())
    flags = {c["key"]: c.get("needs_context", False) for c in doc["rubric"]["criteria"]}
    assert flags["correct"] is True and not flags["tone"]
    path = tmp_path / "study.json"
    path.write_text(json.dumps(doc))
    assert "rubric: created" in _import(path)
    rubric = RubricVersion.objects.get(study__slug="support-answers")
    assert dict(rubric.criteria.values_list("key", "needs_context")) == flags
    again = _import(path)
    assert "rubric: unchanged" in again, again
    doc["rubric"]["criteria"][2]["needs_context"] = True
    path.write_text(json.dumps(doc))
    assert "rubric: updated" in _import(path)
    assert rubric.criteria.get(key=doc["rubric"]["criteria"][2]["key"]).needs_context
    assert RubricVersion.objects.filter(study__slug="support-answers").count() == 1


# --- the page in Chromium ---------------------------------------------------------------------


def _open_state(page: Any) -> bool:
    return bool(page.evaluate("document.getElementById('context').open"))


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_c_toggles_the_context_but_not_while_typing(new_session: Any, viewport: str) -> None:
    # Long, with an unbreakable token that must wrap rather than scroll sideways.
    context = "Help-centre passage: refunds take 30 days. " * 40 + "TOKEN" + "q" * 400
    gs = _study_with_context(context)
    s = new_session(viewport)
    page = s.page
    width = 390 if viewport == "phone" else 1280
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    assert not _open_state(page)
    assert not page.locator("#context-text").is_visible()

    page.keyboard.press("c")
    assert _open_state(page)
    assert page.locator("#context-text").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # Focus stayed on the current criterion: the next digit still answers it.
    page.keyboard.press("1")
    assert page.locator("#label-correct-1").is_checked()
    page.keyboard.press("C")  # Shift+C (caps) toggles too
    assert not _open_state(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    # Typing in the rationale box types; the context does not move.
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.id") == "rationale"
    page.keyboard.type("check the context")
    assert page.locator("#rationale").input_value() == "check the context"
    assert not _open_state(page)
    # Ctrl+C is copy, never the toggle.
    page.keyboard.press("Escape")
    page.locator("#label-correct-1").focus()
    page.keyboard.press("Control+c")
    assert not _open_state(page)
    # The summary toggles it without the key (what works without JavaScript too).
    page.locator("#context summary").click()
    assert _open_state(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not s.page_errors, s.page_errors


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_criterion_that_needs_the_context_opens_it(browser_session: Any) -> None:
    gs = _study_with_context("Passage. " * 300, needs=("correct",))
    s = browser_session
    page = s.page
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    assert _open_state(page)
    assert page.locator("#context-text").is_visible()
    assert "needed for Correctness" in page.locator("#context summary").inner_text()
    page.keyboard.press("c")
    assert not _open_state(page)
    page.keyboard.press("c")
    assert _open_state(page)
    assert Assignment.objects.filter(status="leased").count() == 1
    assert not s.page_errors, s.page_errors
