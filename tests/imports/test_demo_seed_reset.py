"""`demo_seed --reset` rebuilds the demo study even after reports, calibration snapshots and
sampling plans were made on it (a plan's protected rubric made it fail)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from annotations.models import SamplingPlan
from imports import demo_data
from reports.models import ReportSnapshot
from studies.models import Study

pytestmark = pytest.mark.django_db


def test_reset_after_reports_and_plans_rebuilds_the_study() -> None:
    call_command("demo_seed", "--items", "12", verbosity=0)
    study = Study.objects.get(slug=demo_data.DEMO_SLUG)
    assert SamplingPlan.objects.filter(study=study).exists()
    call_command("report", "agreement", "--study", study.slug, "--params",
                 '{"n_resamples": 100}', verbosity=0)
    call_command("report", "calibration", "--study", study.slug, "--params",
                 '{"n_resamples": 20, "curve_resamples": 0}', verbosity=0)
    kinds = set(ReportSnapshot.objects.filter(study=study).values_list("kind", flat=True))
    assert kinds == {"agreement", "calibration"}
    call_command("demo_seed", "--items", "12", "--reset", verbosity=0)
    rebuilt = Study.objects.get(slug=demo_data.DEMO_SLUG)
    assert rebuilt.pk != study.pk
    assert not ReportSnapshot.objects.filter(study=study).exists()  # the old study's are gone
    assert SamplingPlan.objects.filter(study=rebuilt).count() == 1
