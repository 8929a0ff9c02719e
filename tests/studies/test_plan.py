"""Analysis plan: validation with JSON paths, lock, 409 after the lock, versions."""

from __future__ import annotations

import pytest

from reviewhub.api.errors import Conflict, ValidationFailed
from studies.models import AnalysisPlan
from studies.services import (
    dimension_set,
    plan_create,
    plan_lock,
    plan_new_version,
    plan_update,
    rubric_update,
)

from .factories import BINARY, ORDINAL, PAIRWISE

DIMS = [
    {"key": "lang", "kind": "categorical", "source": "metadata.language",
     "config": {"values": ["en", "de"]}},
    {"key": "len", "kind": "numeric_bins", "source": "input_length",
     "config": {"quantiles": 3}},
]
SPEC = {
    "criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9},
                 "quality": {"metric": "mean_score", "threshold": 2.5}},
    "strata": ["lang", "len"],
    "min_human_labels_per_stratum": 30,
    "deployment_mix": {"lang": {"en": 0.6, "de": 0.4}},
}


@pytest.fixture
def ready(study, lead):
    rubric_update(study=study, criteria=[BINARY, ORDINAL, PAIRWISE], created_by=lead)
    dimension_set(study=study, dimensions=DIMS)
    return study


@pytest.mark.django_db
def test_create_normalises_and_names_the_rubric_version(ready, lead):
    plan = plan_create(study=ready, spec=SPEC, created_by=lead)
    assert plan.version == 1
    assert plan.spec["rubric_version"] == 1
    assert plan.spec["criteria"]["ok"] == {"metric": "pass_rate", "threshold": 0.9,
                                           "direction": ">=", "every_stratum": True}
    with pytest.raises(Conflict):
        plan_create(study=ready, spec=SPEC, created_by=lead)


@pytest.mark.django_db
def test_lock_then_409_then_new_version(ready, lead):
    plan = plan_create(study=ready, spec=SPEC, created_by=lead)
    edited = {**SPEC, "min_human_labels_per_stratum": 40}
    plan = plan_update(plan=plan, spec=edited)
    assert plan.spec["min_human_labels_per_stratum"] == 40

    locked = plan_lock(plan=plan, user=lead)
    assert locked.locked_by == lead and locked.locked_at is not None
    with pytest.raises(Conflict, match="save it as a new version"):
        plan_update(plan=locked, spec=SPEC)
    with pytest.raises(Conflict, match="already locked"):
        plan_lock(plan=locked, user=lead)
    locked.refresh_from_db()
    assert locked.spec["min_human_labels_per_stratum"] == 40

    v2 = plan_new_version(study=ready, spec=SPEC, created_by=lead)
    assert v2.version == 2 and not v2.is_locked
    versions = dict(AnalysisPlan.objects.filter(study=ready).values_list("version",
                                                                          "locked_at"))
    assert set(versions) == {1, 2} and versions[1] is not None and versions[2] is None


@pytest.mark.django_db
def test_removing_a_dimension_a_locked_plan_uses_is_refused(ready, lead):
    plan_lock(plan=plan_create(study=ready, spec=SPEC, created_by=lead), user=lead)
    with pytest.raises(Conflict, match="lang"):
        dimension_set(study=ready, dimensions=DIMS[1:])
    assert ready.dimensions.count() == 2


@pytest.mark.django_db
def test_lock_rechecks_against_the_current_rubric(ready, lead):
    plan = plan_create(study=ready, spec=SPEC, created_by=lead)
    rubric_update(study=ready, criteria=[BINARY], created_by=lead)  # in place: quality gone
    with pytest.raises(ValidationFailed, match="unknown criterion key 'quality'"):
        plan_lock(plan=plan, user=lead)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("spec", "path", "fragment"),
    [
        ({**SPEC, "criteria": {"nope": {"metric": "pass_rate", "threshold": 0.9}}},
         "spec.criteria.nope", "unknown criterion key 'nope'"),
        ({**SPEC, "strata": ["lang", "region"]}, "spec.strata[1]", "unknown strata dimension"),
        ({**SPEC, "deployment_mix": {"lang": {"en": 0.6, "de": 0.3}}},
         "spec.deployment_mix.lang", "sum to 1"),
        ({**SPEC, "deployment_mix": {"lang": {"en": 0.5, "fr": 0.5}}},
         "spec.deployment_mix.lang.fr", "not a label"),
        ({**SPEC, "deployment_mix": {"lang": {"en": 1.5, "de": -0.5}}},
         "spec.deployment_mix.lang.en", "maximum"),
        ({**SPEC, "criteria": {"ok": {"metric": "pass_rate", "threshold": 1.2}}},
         "spec.criteria.ok.threshold", "[0, 1]"),
        ({**SPEC, "criteria": {"quality": {"metric": "mean_score", "threshold": 7}}},
         "spec.criteria.quality.threshold", "inside the scale 1..3"),
        ({**SPEC, "criteria": {"pref": {"metric": "pass_rate", "threshold": 0.5}}},
         "spec.criteria.pref.metric", "does not apply"),
        ({**SPEC, "criteria": {"ok": {"metric": "accuracy", "threshold": 0.5}}},
         "spec.criteria.ok.metric", "is not one of"),
        ({**SPEC, "criteria": {"ok": {"threshold": 0.5}}}, "spec.criteria.ok", "'metric'"),
        ({**SPEC, "min_human_labels_per_stratum": -1}, "spec.min_human_labels_per_stratum",
         "minimum"),
        ({**SPEC, "extra": 1}, "spec", "Additional properties"),
        ([], "spec", "not of type 'object'"),
    ],
)
def test_spec_errors_name_the_json_path(ready, lead, spec, path, fragment):
    with pytest.raises(ValidationFailed) as exc:
        plan_create(study=ready, spec=spec, created_by=lead)
    errors = exc.value.details["errors"]
    assert any(e["path"] == path and fragment in e["message"] for e in errors), errors
    assert not AnalysisPlan.objects.filter(study=ready).exists()


@pytest.mark.django_db
def test_mix_tolerance(ready, lead):
    spec = {**SPEC, "deployment_mix": {"lang": {"en": 1 / 3, "de": 2 / 3 + 5e-7}}}
    assert plan_create(study=ready, spec=spec, created_by=lead).version == 1
