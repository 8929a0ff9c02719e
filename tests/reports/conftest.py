"""Fixtures of the reports tests: data sets imported once per module, eager Celery."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Annotation
from imports.datasets import dataset_import
from judges.models import Verdict
from reports.services import report_compute
from reviewhub.celery import app as celery_app
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study


def shared_data_dir() -> Path:
    """`$REVIEWHUB_DATA_DIR` or skip (fail in CI), as the root `data_dir` fixture does."""
    value = os.environ.get("REVIEWHUB_DATA_DIR")
    if not value or not Path(value).is_dir():
        if os.environ.get("CI"):
            pytest.fail("REVIEWHUB_DATA_DIR must point at ../shared/data in CI")
        pytest.skip("REVIEWHUB_DATA_DIR is not set to the shared data folder")
    return Path(value)


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


def study_delete(study: Study) -> None:
    """Remove an imported study (verdicts and annotations protect their parents)."""
    users = list(Membership.objects.filter(study=study).values_list("user_id", flat=True))
    Verdict.objects.filter(criterion__rubric__study=study).delete()
    Annotation.objects.filter(criterion__rubric__study=study).delete()
    ReportSnapshot.objects.filter(study=study).delete()
    owner_id = study.owner_id
    study.delete()
    get_user_model().objects.filter(pk__in=[*users, owner_id]).delete()


def imported_study(slug: str, datasets: list[str], data_dir: Path) -> Study:
    owner = get_user_model().objects.create(username=f"{slug}-lead")
    study = Study.objects.create(slug=slug, name=slug, owner=owner, status=Study.Status.OPEN)
    Membership.objects.create(study=study, user=owner, role=Membership.Role.LEAD)
    for name in datasets:
        dataset_import(study=study, name=name, data_dir=data_dir)
    return study


def computed_report(study: Study, params: dict[str, Any]) -> ReportSnapshot:
    """A report computed synchronously through the service (the Celery task's code path)."""
    from reports.agreement import params_validate

    report = ReportSnapshot.objects.create(
        study=study, params=params_validate(params), created_by=study.owner
    )
    return report_compute(report_id=report.pk)


def module_study(
    request: pytest.FixtureRequest, django_db_blocker: Any, slug: str, datasets: list[str]
) -> Iterator[Study]:
    data_dir = shared_data_dir()
    with django_db_blocker.unblock():
        Study.objects.filter(slug=slug).exists() and study_delete(Study.objects.get(slug=slug))
        study = imported_study(slug, datasets, data_dir)
    yield study
    with django_db_blocker.unblock():
        study_delete(study)
