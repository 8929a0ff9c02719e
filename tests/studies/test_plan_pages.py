"""The analysis plan pages: leads review, edit (form or JSON/YAML) and lock a plan through the
plan services; viewers, annotators and strangers get the 404 of every lead page; every error
names the spec path of its field; a locked version is never changed; the lock confirmation
shows what is frozen and the difference from the version before; the selection and
calibration pages link here where they say there is no locked plan."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client

from studies.models import AnalysisPlan, Membership
from studies.planform import form_initial, form_spec, plan_diff
from studies.services import (
    dimension_set,
    plan_context,
    plan_create,
    plan_lock,
    rubric_update,
)
from studies.spec import plan_spec_validate
from tests.factories import MembershipFactory, StudyFactory, UserFactory

from .factories import BINARY, ORDINAL, PAIRWISE

pytestmark = pytest.mark.django_db

DIMS = [
    {"key": "lang", "kind": "categorical", "source": "metadata.language",
     "config": {"values": ["en", "de"]}},
    {"key": "len", "kind": "numeric_bins", "source": "input_length",
     "config": {"quantiles": 3}},
]


@pytest.fixture
def setup() -> SimpleNamespace:
    lead = UserFactory(username="plan-lead")
    study = StudyFactory(owner=lead, slug="plans")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    people = {}
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        people[role] = UserFactory(username=f"plan-{role}")
        MembershipFactory(study=study, user=people[role], role=role)
    rubric_update(study=study, criteria=[BINARY, ORDINAL, PAIRWISE], created_by=lead)
    dimension_set(study=study, dimensions=DIMS)
    return SimpleNamespace(study=study, lead=lead, viewer=people[Membership.Role.VIEWER],
                           annotator=people[Membership.Role.ANNOTATOR])


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**over: Any) -> dict[str, Any]:
    """A complete, valid form post: ok pass rate >= 0.9 (primary), quality mean >= 2.5, a
    language mix, one gate."""
    data: dict[str, Any] = {
        "mode": "form", "action": "new_version", "notes": "first draft",
        "primary_metric": "ok", "margin": "0.02", "confidence_level": "0.95",
        "min_human_labels_per_stratum": "30", "strata": ["lang"],
        "c-ok-on": "on", "c-ok-metric": "pass_rate", "c-ok-direction": ">=",
        "c-ok-threshold": "0.9", "c-ok-every_stratum": "on",
        "c-quality-on": "on", "c-quality-metric": "mean_score", "c-quality-direction": ">=",
        "c-quality-threshold": "2.5",
        "mix-lang-0": "0.7", "mix-lang-1": "0.3",
        "gate-error_rate": "0.05",
    }
    data.update(over)
    return data


URLS = ("/studies/plans/plan/", "/studies/plans/plan/edit/", "/studies/plans/plan/1/lock/")


def test_viewers_annotators_and_strangers_get_404_and_write_nothing(setup: Any) -> None:
    plan_create(study=setup.study, spec={"criteria": {"ok": {"metric": "pass_rate",
                                                             "threshold": 0.5}}},
                created_by=setup.lead)
    stranger = UserFactory()
    for user in (setup.viewer, setup.annotator, stranger):
        client = _client(user)
        for url in URLS:
            assert client.get(url).status_code == 404, (user.username, url)
        assert client.post(URLS[1], _form()).status_code == 404
        assert client.post(URLS[2], {"fingerprint": "x"}).status_code == 404
    assert AnalysisPlan.objects.filter(study=setup.study).count() == 1
    assert not AnalysisPlan.objects.get(study=setup.study).is_locked
    anonymous = Client().get(URLS[0])
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    admin = UserFactory(is_superuser=True, is_staff=True)
    for url in URLS:
        assert _client(admin).get(url).status_code == 200
        assert _client(setup.lead).get(url).status_code == 200


def test_the_form_creates_v1_with_the_spec_the_api_would_store(setup: Any) -> None:
    client = _client(setup.lead)
    assert "No locked analysis plan" in client.get(URLS[0]).content.decode()
    r = client.post(URLS[1], _form())
    assert r.status_code == 302 and r["Location"] == "/studies/plans/plan/?version=1"
    plan = AnalysisPlan.objects.get(study=setup.study)
    expected = plan_spec_validate({
        "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9},
                     "quality": {"metric": "mean_score", "threshold": 2.5,
                                 "every_stratum": False}},
        "primary_metric": "ok", "margin": 0.02, "confidence_level": 0.95,
        "min_human_labels_per_stratum": 30, "strata": ["lang"],
        "deployment_mix": {"lang": {"en": 0.7, "de": 0.3}}, "gates": {"error_rate": 0.05},
    }, context=plan_context(study=setup.study))
    assert plan.spec == expected
    assert plan.notes == "first draft" and plan.created_by == setup.lead
    assert plan.version == 1 and not plan.is_locked
    # The form shows the stored plan back as it was saved.
    values = form_initial(plan.spec, criteria=list(setup.study.rubric_versions.get()
                                                   .criteria.all()), dimensions=DIMS)
    assert values["c-ok-threshold"] == "0.9" and values["mix-lang-1"] == "0.3"
    page = client.get(URLS[0]).content.decode()
    assert "draft, not locked" in page and "Review and lock version 1" in page


@pytest.mark.parametrize(("over", "path"), [
    ({"c-ok-threshold": "abc"}, "spec.criteria.ok.threshold"),
    ({"c-ok-threshold": "1.5"}, "spec.criteria.ok.threshold"),
    ({"c-ok-threshold": ""}, "spec.criteria.ok.threshold"),
    ({"mix-lang-1": "0.5"}, "spec.deployment_mix.lang"),
    ({"mix-len-text": "q1 0.5"}, "spec.deployment_mix.len"),
    ({"gate-error_rate": "five"}, "spec.gates.error_rate"),
    ({"gate-error_rate": "2"}, "spec.gates.error_rate"),
    ({"margin": "-1"}, "spec.margin"),
    ({"primary_metric": "pref"}, "spec.primary_metric"),
    ({"costs_on": "on", "costs-severity-1": "5", "costs-severity-2": "1",
      "costs-severity-3": "10", "costs-severity-4": "30", "costs-severity-5": "100",
      "costs-false_fail": "3", "costs-review": "1"}, "spec.costs.severity.2"),
    ({"policy_on": "on", "policy-kind": "guaranteed_agreement", "policy-alpha": "1.5"},
     "spec.policy.alpha"),
])
def test_bad_fields_are_a_400_naming_the_field_and_write_nothing(
        setup: Any, over: dict[str, Any], path: str) -> None:
    r = _client(setup.lead).post(URLS[1], _form(**over))
    assert r.status_code == 400
    html = r.content.decode()
    assert f"<strong>{path}</strong>" in html, html[:2000]
    assert 'aria-invalid="true"' in html
    assert not AnalysisPlan.objects.filter(study=setup.study).exists()


def test_the_advanced_text_path_goes_through_the_same_rules(setup: Any) -> None:
    client = _client(setup.lead)
    r = client.post(URLS[1], {"mode": "text", "action": "new_version",
                              "spec_text": "criteria:\n  ok: {metric: pass_rate, threshold: 2}\n"})
    assert r.status_code == 400 and "<strong>spec.criteria.ok.threshold</strong>" in \
        r.content.decode()
    r = client.post(URLS[1], {"mode": "text", "action": "new_version",
                              "spec_text": "criteria: {ok: [unclosed\n"})
    assert r.status_code == 400 and "line 2" in r.content.decode()
    r = client.post(URLS[1], {"mode": "text", "action": "new_version",
                              "spec_text": '{"criteria": {"ok": {"metric": "pass_rate", '
                                           '"threshold": 0.8}}}'})
    assert r.status_code == 302
    assert AnalysisPlan.objects.get(study=setup.study).spec["criteria"]["ok"]["threshold"] == 0.8


def test_update_in_place_new_version_lock_and_refusal_once_locked(setup: Any) -> None:
    client = _client(setup.lead)
    assert client.post(URLS[1], _form()).status_code == 302
    # An unlocked version is edited in place.
    r = client.post(URLS[1], _form(action="update", base="1", **{"c-ok-threshold": "0.85"}))
    assert r.status_code == 302
    assert AnalysisPlan.objects.filter(study=setup.study).count() == 1
    v1 = AnalysisPlan.objects.get(study=setup.study, version=1)
    assert v1.spec["criteria"]["ok"]["threshold"] == 0.85

    # The confirmation shows the frozen plan and (for v1) that everything is new.
    page = client.get(URLS[2])
    html = page.content.decode()
    assert "What will be frozen" in html and "&quot;threshold&quot;: 0.85" in html
    assert "first version" in html
    fingerprint = page.context["fingerprint"]
    # A stale confirmation is refused: the plan changed after the page was shown.
    assert client.post(URLS[2], {"fingerprint": "0" * 64}).status_code == 409
    v1.refresh_from_db()
    assert not v1.is_locked
    r = client.post(URLS[2], {"fingerprint": fingerprint})
    assert r.status_code == 302
    v1.refresh_from_db()
    assert v1.is_locked and v1.locked_by == setup.lead
    assert "Version 1 is locked" in client.get(URLS[0]).content.decode()

    # A locked version cannot be edited in place, from the form or the text path.
    for data in (_form(action="update", base="1", **{"c-ok-threshold": "0.5"}),
                 {"mode": "text", "action": "update", "base": "1",
                  "spec_text": '{"criteria": {"ok": {"metric": "pass_rate", '
                               '"threshold": 0.5}}}'}):
        r = client.post(URLS[1], data)
        assert r.status_code == 409 and "is locked" in r.content.decode()
    assert client.post(URLS[2], {"fingerprint": fingerprint}).status_code == 409
    v1.refresh_from_db()
    assert v1.spec["criteria"]["ok"]["threshold"] == 0.85
    # It is superseded by a new version instead; v1 stays as it was.
    r = client.post(URLS[1], _form(base="1", **{"c-ok-threshold": "0.95",
                                                "gate-error_rate": ""}))
    assert r.status_code == 302 and r["Location"].endswith("?version=2")
    v2 = AnalysisPlan.objects.get(study=setup.study, version=2)
    assert v2.spec["criteria"]["ok"]["threshold"] == 0.95 and not v2.is_locked
    v1.refresh_from_db()
    assert v1.spec["criteria"]["ok"]["threshold"] == 0.85 and v1.is_locked
    # v2's confirmation lists exactly the two differences from v1.
    html = client.get("/studies/plans/plan/2/lock/").content.decode()
    assert "criteria.ok.threshold" in html and "gates.error_rate" in html
    assert "<del><code>0.85</code></del>" in html and "<ins><code>0.95</code></ins>" in html


def test_plan_diff_lists_added_removed_and_changed_leaves() -> None:
    before = {"criteria": {"ok": {"threshold": 0.9, "metric": "pass_rate"}},
              "gates": {"error_rate": 0.05}, "strata": ["a"]}
    after = {"criteria": {"ok": {"threshold": 0.95, "metric": "pass_rate"}},
             "margin": 0.02, "strata": ["a", "b"]}
    rows = {r.path: (r.change, r.before, r.after) for r in plan_diff(before, after)}
    assert rows == {
        "criteria.ok.threshold": ("changed", "0.9", "0.95"),
        "gates.error_rate": ("removed", "0.05", ""),
        "margin": ("added", "", "0.02"),
        "strata": ("changed", '["a"]', '["a", "b"]'),
    }
    assert plan_diff(before, before) == []


def test_form_spec_keeps_a_stored_plans_own_notes_and_reads_open_mixes() -> None:
    crit = SimpleNamespace(key="ok", name="OK", scale="binary")
    spec, problems = form_spec(
        {"c-ok-on": "on", "c-ok-metric": "pass_rate", "c-ok-threshold": "0.9",
         "c-ok-every_stratum": "on", "mix-len-text": "q1=0.5\nq2=0.5"},
        base_spec={"notes": "kept", "criteria": {}}, criteria=[crit], dimensions=DIMS[1:])
    assert not problems
    assert spec == {"notes": "kept", "criteria": {"ok": {"metric": "pass_rate",
                                                         "threshold": 0.9, "direction": ">=",
                                                         "every_stratum": True}},
                    "deployment_mix": {"len": {"q1": 0.5, "q2": 0.5}}}


def test_selection_and_calibration_link_the_plan_page_where_no_plan_is_locked(setup: Any
                                                                             ) -> None:
    view = {"plan_version": None, "decision": {}, "flips": []}
    html = render_to_string("reports/selection_body.html",
                            {"view": view, "study": setup.study, "is_lead": True, "pdf": False})
    assert '<a href="/studies/plans/plan/" id="plan-link">No locked analysis plan</a>' in html
    # Not in the PDF (no links) and not for viewers (the page is the leads').
    for extra in ({"is_lead": True, "pdf": True}, {"is_lead": False, "pdf": False}):
        html = render_to_string("reports/selection_body.html",
                                {"view": view, "study": setup.study, **extra})
        assert "No locked analysis plan" in html and 'id="plan-link"' not in html
    view["missing"] = ["no locked analysis plan: the report follows no pre-registered rule"]
    html = render_to_string("reports/selection_body.html",
                            {"view": view, "study": setup.study, "is_lead": True, "pdf": False})
    assert '<a href="/studies/plans/plan/">Review and lock the analysis plan</a>' in html
    report = SimpleNamespace(pk=1, plan=None, computed_at=None, input_fingerprint="")
    html = render_to_string("reports/calibration.html", {"report": report, "study": setup.study})
    assert '<a href="/studies/plans/plan/" id="plan-link">no locked analysis plan</a>' in html


def test_the_plan_page_shows_what_a_locked_plan_holds(setup: Any) -> None:
    plan = plan_create(study=setup.study, spec={
        "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9}},
        "gates": {"latency_p95_ms": 2000, "schema_valid_rate": 0.99},
        "deployment_mix": {"lang": {"en": 0.7, "de": 0.3}},
        "policy": {"kind": "guaranteed_agreement"},
    }, created_by=setup.lead)
    plan_lock(plan=plan, user=setup.lead)
    html = _client(setup.lead).get(URLS[0]).content.decode()
    assert "≤ 2000" in html and "≥ 0.99" in html and "en 70 %" in html
    assert "guaranteed_agreement" in html and "Rubric pass rate (default" in html
    assert "Edit as a new version" in html and "Review and lock" not in html


@pytest.mark.parametrize("stored", [
    {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9, "direction": ">=",
                         "every_stratum": True, "primary": True}}},
    {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9, "direction": ">=",
                         "every_stratum": True}}, "primary_metric": "ok", "margin": 0.02,
     "gates": {"error_rate": 0.05}, "deployment_mix": {"lang": {"en": 0.7, "de": 0.3},
                                                      "len": {"q1": 1.0}},
     "costs": {"unit": "EUR", "severity": {"1": 1.0, "2": 2.0, "3": 3.0, "4": 4.0,
                                           "5": 5.0}, "false_fail": 1.0, "review": 0.5},
     "policy": {"kind": "guaranteed_agreement", "alpha": 0.1, "delta": 0.05,
                "min_count": 20, "cascade": [3, 4]}},
])
def test_a_plan_saved_unchanged_through_the_form_has_no_difference(stored: dict[str, Any]
                                                                   ) -> None:
    crit = [SimpleNamespace(key="ok", name="OK", scale="binary"),
            SimpleNamespace(key="quality", name="Quality", scale="ordinal")]
    values = form_initial(stored, criteria=crit, dimensions=DIMS)
    spec, problems = form_spec(values, base_spec=stored, criteria=crit, dimensions=DIMS)
    assert not problems
    assert plan_diff(stored, spec) == []
