"""Study setup without a hand-written file: the "New study" page offers a template study file
(valid, commented) and a form for the study, its rubric and strata that makes the same study as
the file path, checked by the same validator with errors naming the form's fields; the page
links the docs (served at /docs/<page>/) instead of printing file paths."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studies.docs_views import markdown_html
from studies.models import AnalysisPlan, Study
from studies.selectors import dimensions_current, rubric_criteria_as_specs, rubric_current
from studies.spec import study_file_validate
from studies.studyfile import study_file_parse
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PAGE = "/new-study/"
TEMPLATE_URL = "/docs/examples/study-template.yaml"


def _client(user: Any = None) -> Client:
    client = Client()
    client.force_login(user or UserFactory(username="maker"))
    return client


def _form(**over: str) -> dict[str, str]:
    """Two criteria (a binary primary with a 0.8 target and an ordinal) and one stratum."""
    data = {
        "action": "form-preview", "n_criteria": "2", "n_strata": "1",
        "study.name": "Support bot", "study.slug": "support-bot",
        "study.task_description": "Answer support questions.",
        "rubric.criteria[0].key": "correct", "rubric.criteria[0].name": "Correct",
        "rubric.criteria[0].scale": "binary",
        "rubric.criteria[1].key": "clarity", "rubric.criteria[1].name": "Clarity",
        "rubric.criteria[1].scale": "ordinal",
        "rubric.criteria[1].labels": "Hard to follow, Understandable, Clear",
        "rubric.criteria[1].pass": "2",
        "primary": "0", "primary_target": "0.8",
        "strata[0].key": "language", "strata[0].source": "language",
        "strata[0].values": "en, de",
    }
    data.update(over)
    return data


# The same study, written by hand as a study file.
SAME_AS_FILE = """
study: {slug: support-bot-file, name: Support bot, task_description: Answer support questions.}
rubric:
  criteria:
    - {key: correct, name: Correct, scale: binary}
    - key: clarity
      name: Clarity
      scale: ordinal
      points: [{value: 1, label: Hard to follow}, {value: 2, label: Understandable},
               {value: 3, label: Clear}]
      pass_threshold: 2
strata:
  - {key: language, name: language, kind: categorical, source: metadata.language,
     config: {values: [en, de]}}
plan:
  spec:
    criteria: {correct: {metric: pass_rate, threshold: 0.8, primary: true}}
    primary_metric: correct
"""


def _study_state(study: Study) -> tuple[Any, Any, Any]:
    rubric = rubric_current(study)
    assert rubric is not None
    plan = AnalysisPlan.objects.get(study=study)
    return rubric_criteria_as_specs(rubric=rubric), dimensions_current(study=study), plan.spec


def test_the_form_makes_the_same_study_as_the_file_path() -> None:
    user = UserFactory(username="maker")
    client = _client(user)
    r = client.post(PAGE, _form())
    assert r.status_code == 200, r.content.decode()[:2000]
    html = r.content.decode()
    assert 'id="study-preview"' in html and 'id="form-yaml"' in html
    assert not Study.objects.exists()  # a preview writes nothing
    text = r.context["text"]
    r = client.post(PAGE, {"action": "create", "text": text, "file_name": "study.yaml"})
    assert r.status_code == 302 and r["Location"] == "/studies/support-bot/"
    from_form = Study.objects.get(slug="support-bot")
    assert from_form.owner == user
    r = client.post(PAGE, {"action": "create", "file": SimpleUploadedFile(
        "s.yaml", SAME_AS_FILE.encode(), content_type="text/yaml")})
    assert r.status_code == 302
    from_file = Study.objects.get(slug="support-bot-file")
    assert _study_state(from_form) == _study_state(from_file)
    assert from_form.name == from_file.name
    assert from_form.task_description == from_file.task_description


@pytest.mark.parametrize(("over", "field", "path"), [
    ({"study.slug": "Not A Slug"}, "study.slug", "study.slug"),
    ({"study.name": ""}, "study.name", "study.name"),
    ({"rubric.criteria[1].pass": "9"}, "rubric.criteria[1].pass",
     "rubric.criteria[1].pass_threshold"),
    ({"rubric.criteria[1].labels": "Only one"}, "rubric.criteria[1].labels",
     "rubric.criteria[1].points"),
    ({"rubric.criteria[0].labels": "a, b"}, "rubric.criteria[0].labels",
     "rubric.criteria[0].points"),
    ({"rubric.criteria[0].key": "Bad Key"}, "rubric.criteria[0].key",
     "rubric.criteria[0].key"),
    ({"rubric.criteria[1].scale": "interval", "rubric.criteria[1].labels": "",
      "rubric.criteria[1].pass": "", "rubric.criteria[1].min": "5",
      "rubric.criteria[1].max": "1"}, "rubric.criteria[1].max", "rubric.criteria[1].max"),
    ({"strata[0].values": "en, en"}, "strata[0].values", "strata[0].config.values"),
    ({"strata[0].key": ""}, "strata[0].key", "strata[0].key"),
    ({"primary_target": ""}, "primary_target", "primary_target"),
    ({"primary_target": "1.5"}, "primary_target", "plan.spec.criteria.correct.threshold"),
])
def test_bad_fields_are_a_400_naming_the_field_and_create_nothing(
        over: dict[str, str], field: str, path: str) -> None:
    r = _client().post(PAGE, _form(**over))
    assert r.status_code == 400
    html = r.content.decode()
    assert f"<strong>{path}</strong>" in html, html[:3000]
    # The field the problem is about is marked, with the file path's message under it.
    assert re.search(rf'name="{re.escape(field)}"[^>]*aria-invalid="true"', html), field
    assert not Study.objects.exists()


def test_errors_land_on_the_row_shown_when_a_blank_row_comes_first() -> None:
    data = _form(**{"n_criteria": "3", "primary": "1"})
    # Row 0 left blank; rows 1 and 2 are the criteria, row 2 with a bad threshold.
    for f in ("key", "name", "scale", "labels", "pass"):
        data[f"rubric.criteria[2].{f}"] = data.get(f"rubric.criteria[1].{f}", "")
        data[f"rubric.criteria[1].{f}"] = data.get(f"rubric.criteria[0].{f}", "")
        data.pop(f"rubric.criteria[0].{f}", None)
    data["rubric.criteria[2].pass"] = "7"
    r = _client().post(PAGE, data)
    assert r.status_code == 400
    html = r.content.decode()
    # The file holds two criteria: the problem is at the file's criteria[1], the form's row 2.
    assert "<strong>rubric.criteria[1].pass_threshold</strong>" in html
    assert re.search(r'name="rubric.criteria\[2\].pass"[^>]*aria-invalid="true"', html)


def test_add_a_criterion_or_stratum_keeps_what_was_typed() -> None:
    r = _client().post(PAGE, _form(action="form-add-criterion"))
    html = r.content.decode()
    assert r.status_code == 200 and 'name="rubric.criteria[2].key"' in html
    assert 'value="Hard to follow, Understandable, Clear"' in html
    r = _client().post(PAGE, _form(action="form-add-stratum"))
    assert 'name="strata[1].key"' in r.content.decode()
    assert not Study.objects.exists()


def test_the_template_study_file_is_valid_commented_and_creates_a_study() -> None:
    client = _client()
    r = client.get(PAGE)
    html = r.content.decode()
    assert f'href="{TEMPLATE_URL}"' in html and 'href="/docs/study-spec/"' in html
    # Docs are linked, not printed as repository paths.
    assert "docs/study-spec.md" not in html and "<code>docs/" not in html
    r = client.get(TEMPLATE_URL)
    assert r.status_code == 200 and "attachment" in r["Content-Disposition"]
    text = b"".join(r.streaming_content).decode()
    assert text.count("\n#") >= 3  # commented
    study_file_validate(study_file_parse(text, name="study-template.yaml"))
    r = client.post(PAGE, {"action": "create", "file": SimpleUploadedFile(
        "study-template.yaml", text.encode(), content_type="text/yaml")})
    assert r.status_code == 302
    study = Study.objects.get(slug=yaml.safe_load(text)["study"]["slug"])
    assert rubric_current(study) is not None and AnalysisPlan.objects.filter(study=study).exists()


def test_docs_pages_are_served_rendered_with_anchors_and_without_raw_html() -> None:
    client = _client()
    r = client.get("/docs/study-spec/")
    assert r.status_code == 200
    html = r.content.decode()
    assert '<h2 id="analysis-plan">' in html and '<h2 id="strata">' in html
    assert "Content-Security-Policy" in r.headers
    title, body = markdown_html("# The `plan`\n\n<script>alert(1)</script>\n\n"
                                "[plan](study-spec.md#analysis-plan) ![s](img/x.png) "
                                "[ex](examples/study.yaml) [web](https://example.org/a.md)\n")
    assert title == "The plan" and '<h1 id="the-plan">' in body
    # Raw HTML in a doc is shown as text, never as markup.
    assert "<script>" not in body and "&lt;script&gt;" in body
    assert 'href="/docs/study-spec/#analysis-plan"' in body
    assert 'src="/docs/img/x.png"' in body and 'href="/docs/examples/study.yaml"' in body
    assert 'href="https://example.org/a.md"' in body
    for bad in ("/docs/nope/", "/docs/..%2Fsettings/", "/docs/examples/..",
                "/docs/img/nope.png", "/docs/examples/study-template.txt"):
        assert client.get(bad).status_code == 404, bad
    assert Client().get("/docs/study-spec/").status_code == 302


def test_the_data_page_links_the_ingest_docs_and_examples() -> None:
    from studies.models import Membership
    from tests.factories import MembershipFactory, StudyFactory

    lead = UserFactory()
    study = StudyFactory(owner=lead, slug="with-data")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    client = _client(lead)
    html = client.get("/studies/with-data/data/").content.decode()
    assert 'href="/docs/ingest/"' in html and "docs/ingest.md" not in html
    assert "<code>docs/" not in html
    for name in re.findall(r'href="/docs/examples/([^"]+)"', html):
        r = client.get(f"/docs/examples/{name}")
        assert r.status_code == 200 and "attachment" in r["Content-Disposition"], name
