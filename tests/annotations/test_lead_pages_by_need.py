"""The lead's annotation pages on the seeded demo study, and the annotator's revision list.

Disagreements: every pair reachable through pages (no "first 200" dead end), ordered by need
(annotators split before one judge against unanimous annotators, unresolved before
adjudicated), with an unresolved-only filter. The queue page: the annotators table accounts
for every annotation the plan counts as done (imported ones included), so it never says
"nobody" above a non-zero count. "My recent annotations": every annotation still revisable,
each with its item.
"""

from __future__ import annotations

import io
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from annotations.models import Annotation
from annotations.services import annotation_submit, assignment_next
from studies.models import Study
from tests.browser.factories import grading_study
from tests.browser.harness import fast_password_hashing  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.django_db

ARTICLE = re.compile(r'<article class="card disagreement".*?</article>', re.S)
BADGE = re.compile(r'<span class="badge[^"]*">(adjudicated|annotators split|judge differs)</span>')


@pytest.fixture
def demo() -> Study:
    call_command("demo_seed", items=60, stdout=io.StringIO())
    return Study.objects.get(slug="demo-support-answers")


def _lead(study: Study) -> Client:
    client = Client()
    client.force_login(study.owner)
    return client


def _articles(html: str) -> list[str]:
    return ARTICLE.findall(html)


def _kinds(html: str) -> list[str]:
    out = []
    for article in _articles(html):
        match = BADGE.search(article)
        assert match is not None, article[:300]
        out.append(match.group(1))
    return out


def _total(html: str) -> int:
    match = re.search(r'id="disagreements-summary">(\d+) subject', html)
    assert match is not None
    return int(match.group(1))


def test_disagreements_are_paginated_and_ordered_by_need(demo: Study) -> None:
    lead = _lead(demo)
    url = f"/studies/{demo.slug}/annotation/disagreements/"
    first = lead.get(url).content.decode()
    total = _total(first)
    assert total > 100, "the demo should have enough pairs for several pages"
    assert "Showing the first" not in first
    assert len(_articles(first)) == 50
    pages = -(-total // 50)
    assert f"page 1 of {pages}" in first
    # Every page is reachable and together they hold every pair once.
    seen: list[str] = []
    kinds: list[str] = []
    for number in range(1, pages + 1):
        html = lead.get(url, {"page": number}).content.decode()
        seen += re.findall(r'<h2 id="d-\d+-h">(.*?)</h2>', html, flags=re.S)
        kinds += _kinds(html)
    assert len(seen) == total and len(set(seen)) == total
    # By need: every annotator split comes before every "one judge against them all".
    assert "annotators split" in kinds and "judge differs" in kinds
    assert kinds.index("judge differs") > max(i for i, k in enumerate(kinds)
                                              if k == "annotators split")
    # The page links keep the filters.
    filtered = lead.get(url, {"judges": "0"}).content.decode()
    assert "judges=0&amp;page=2" in filtered or "page=2&amp;judges=0" in filtered


def test_adjudicated_pairs_go_last_and_the_unresolved_filter_hides_them(demo: Study) -> None:
    lead = _lead(demo)
    url = f"/studies/{demo.slug}/annotation/disagreements/"
    first = lead.get(url).content.decode()
    total = _total(first)
    form = re.search(r'<article class="card disagreement".*?name="criterion_id" value="(\d+)".*?'
                     r'name="subject" value="(\w+)".*?name="subject_id" value="(\d+)"',
                     first, re.S)
    assert form is not None
    criterion_id, subject, subject_id = form.groups()
    value = re.search(r'<option value="([^"]+)"', _articles(first)[0])
    assert value is not None
    response = lead.post(url, {"criterion_id": criterion_id, "subject": subject,
                               "subject_id": subject_id, "value": value.group(1),
                               "note": "checked"}, follow=True)
    assert "Adjudication recorded" in response.content.decode()
    after = lead.get(url).content.decode()
    assert _total(after) == total
    assert "adjudicated" not in _kinds(after)  # it went to the end, past page 1
    pages = -(-total // 50)
    last = lead.get(url, {"page": pages}).content.decode()
    assert _kinds(last)[-1] == "adjudicated"
    unresolved = lead.get(url, {"status": "unresolved"}).content.decode()
    assert _total(unresolved) == total - 1
    adjudicated = lead.get(url, {"status": "adjudicated"}).content.decode()
    assert _total(adjudicated) == 1 and _kinds(adjudicated) == ["adjudicated"]
    # A bad page number or filter falls back rather than failing.
    assert lead.get(url, {"page": "x", "status": "nonsense"}).status_code == 200


def test_queue_page_names_who_gave_the_annotations_it_counts(demo: Study) -> None:
    html = _lead(demo).get(f"/studies/{demo.slug}/annotation/queue/").content.decode()
    done = re.search(r"<dt>Annotations done</dt><dd>(\d+) / (\d+)</dd>", html)
    assert done is not None and int(done.group(1)) > 0
    assert "Nobody has" not in html
    table = html[html.index('id="annotator-table"'):]
    for name in ("sim-annotator-1", "sim-annotator-2", "sim-annotator-3"):
        assert name in table
    imported = [int(n) for n in re.findall(
        r'<td class="num">(\d+)</td>\s*</tr>', table)]
    assert sum(imported) > 0


def test_queue_page_with_nothing_annotated_says_so() -> None:
    gs = grading_study(n_annotators=1)
    client = Client()
    client.force_login(gs.lead)
    html = client.get("/studies/support/annotation/queue/").content.decode()
    assert "Nobody has annotated anything in this study yet." in html
    assert "<dt>Annotations done</dt><dd>0 / " in html


def _grade_all(gs: Any, annotator: Any) -> list[Annotation]:
    made: list[Annotation] = []
    while (assignment := assignment_next(study=gs.study, annotator=annotator)) is not None:
        made += annotation_submit(assignment=assignment, annotator=annotator,
                                  submission_id=uuid.uuid4(),
                                  labels={"correct": {"value": "pass"}, "clarity": {"value": "4"},
                                          "tone": {"value": "neutral"}})
    return made


def test_recent_annotations_list_everything_still_revisable_with_the_item() -> None:
    gs = grading_study(n_annotators=1, texts=[f"Answer number {i}." for i in range(12)])
    annotator = gs.annotators[0]
    made = _grade_all(gs, annotator)
    assert len(made) == 36  # 12 outputs x 3 criteria: more than any "last 10" list
    # One output graded long ago is past the revision window: not listed.
    old = [a for a in made if a.output_id == gs.outputs[0].pk]
    Annotation.objects.filter(pk__in=[a.pk for a in old]).update(
        created_at=timezone.now() - timedelta(hours=3))
    client = Client()
    client.force_login(annotator)
    html = client.get("/studies/support/grade/").content.decode()
    start = html.index('id="recent-list"')
    recent = html[start:html.index("</ul>", start)]
    rows = re.findall(r"<li>.*?</li>", recent, re.S)
    assert len(rows) == 33
    for row in rows:
        assert re.search(r'class="recent-item">item <strong>ticket-\d+</strong>', row), row
        assert "/revise/" in row
    listed = set(re.findall(r"ticket-\d+", recent))
    assert listed == {f"ticket-{i}" for i in range(2, 13)}
