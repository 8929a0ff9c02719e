"""The one report lifecycle: `manage.py report`, the kind registry, typed results, the task."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from imports.generic import ratings_import
from reports import kinds
from reports.agreement.present.export import TABLES, table_csv
from reports.agreement.results import (
    AGREEMENT_RESULT_VERSION,
    AgreementResult,
    Estimate,
    ResultFormatError,
)
from reports.celery_tasks import agreement_report_compute, report_compute_task
from reports.services import report_build, report_compute, report_retry
from reviewhub.api.errors import ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import Study

from .conftest import computed_report
from .test_import_and_api import _rows, _single

pytestmark = pytest.mark.django_db


@pytest.fixture
def imported(study: Study) -> Study:
    ratings_import(study=study, rows=_rows(_single(60), "csv"))
    return study


def _cli(*args: str) -> str:
    out = io.StringIO()
    call_command("report", *args, stdout=out)
    return out.getvalue()


def _api_json(client: Any, study: Study, report_id: int) -> Any:
    url = reverse("reports-api-detail", kwargs={"slug": study.slug, "report_id": report_id})
    resp = client.get(url)
    assert resp.status_code == 200, resp.content
    return json.loads(resp.content)


def test_cli_writes_what_the_api_serves(imported: Study, lead_client: Any, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    message = _cli("agreement", "--study", imported.slug, "--params",
                   '{"n_resamples": 200, "seed": 3}', "--out", str(out))
    snapshot = ReportSnapshot.objects.get(study=imported)
    assert f"report {snapshot.pk}: done" in message
    assert snapshot.kind == "agreement" and snapshot.result_version == AGREEMENT_RESULT_VERSION
    written = json.loads(out.read_text())
    assert written == _api_json(lead_client, imported, snapshot.pk)
    assert written["status"] == "done" and written["params"]["seed"] == 3
    assert written["input_fingerprint"] == written["result"]["fingerprint"] != ""


def test_cli_params_from_a_file_and_to_stdout(
    imported: Study, lead_client: Any, tmp_path: Path
) -> None:
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"n_resamples": 200, "seed": 3}))
    printed = json.loads(_cli("agreement", "--study", imported.slug, "--params", str(params)))
    assert printed == _api_json(lead_client, imported, printed["id"])
    # Same inputs and seed: the same numbers as the inline run would give.
    again = json.loads(_cli("agreement", "--study", imported.slug, "--params",
                            '{"n_resamples": 200, "seed": 3}'))
    assert again["result"] == printed["result"] and again["id"] != printed["id"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["calibrationx", "--study", "alpha"], "kind"),
        (["agreement", "--study", "no-such-study"], "--study"),
        (["agreement", "--study", "alpha", "--params", '{"colour": 1}'], "params.colour"),
        (["agreement", "--study", "alpha", "--params", '{"n_resamples": "many"}'],
         "params.n_resamples"),
        (["agreement", "--study", "alpha", "--params", '{"seed": 1,}'], "line 1, column"),
        (["agreement", "--study", "alpha", "--params", "missing.json"], "--params"),
        (["agreement", "--study", "alpha", "--plan-version", "7"], "--plan-version"),
    ],
)
def test_cli_bad_input_names_the_field_and_stores_nothing(
    imported: Study, args: list[str], named: str
) -> None:
    with pytest.raises(CommandError) as err:
        _cli(*args)
    assert named in str(err.value)
    assert not ReportSnapshot.objects.exists()


def test_cli_bad_input_exits_non_zero(
    imported: Study, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import load_command_class
    from django.db import connections

    # run_from_argv closes the connections when it ends; the test's transaction needs them.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    command = load_command_class("reports", "report")
    with pytest.raises(SystemExit) as exit_info:
        command.run_from_argv(["manage.py", "report", "agreement", "--study", imported.slug,
                               "--params", '{"n_resamples": 5}'])
    assert exit_info.value.code != 0
    assert "params.n_resamples" in capsys.readouterr().err
    assert not ReportSnapshot.objects.exists()


def test_cli_json_file_that_is_not_an_object(imported: Study, tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text("[1, 2]")
    with pytest.raises(CommandError, match="must be a JSON object"):
        _cli("agreement", "--study", imported.slug, "--params", str(params))
    assert not ReportSnapshot.objects.exists()


# --- typed results ------------------------------------------------------------------------------


def test_typed_result_round_trips_and_matches_its_schema(imported: Study) -> None:
    stored = computed_report(imported, {"n_resamples": 200}).result
    typed = AgreementResult.from_json(stored)
    assert typed.to_json() == stored
    jsonschema.validate(stored, AgreementResult.json_schema())
    assert typed.version == AGREEMENT_RESULT_VERSION
    crit = typed.criteria[0]
    judge = typed.judges[0]
    cells = typed.cells_for(criterion=crit.id, judge_version=judge.id)
    overall = next(c for c in cells if c.dimension == "")
    assert overall.n_subjects == 60 and overall.primary == overall.metrics["kappa"]
    assert isinstance(overall.primary, Estimate) and overall.primary.n == 60
    assert overall.metrics["accuracy"].value == pytest.approx(55 / 60)
    assert typed.judges_by_id()[judge.id].display == "gpt-judge v1"
    for table in TABLES:
        assert table_csv(typed, table).count("\n") >= 1


def test_schema_and_reader_refuse_what_does_not_fit(imported: Study) -> None:
    stored = computed_report(imported, {"n_resamples": 200}).result
    schema = AgreementResult.json_schema()
    with pytest.raises(ResultFormatError, match="version"):
        AgreementResult.from_json({**stored, "version": AGREEMENT_RESULT_VERSION + 1})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**stored, "version": AGREEMENT_RESULT_VERSION + 1}, schema)
    broken_cell = {**stored["cells"][0], "n_subjects": "sixty"}
    broken = {**stored, "cells": [broken_cell, *stored["cells"][1:]]}
    with pytest.raises(ResultFormatError) as err:
        AgreementResult.from_json(broken)
    assert err.value.path == "cells[0].n_subjects"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    missing = {k: v for k, v in stored.items() if k != "fingerprint"}
    with pytest.raises(ResultFormatError, match="fingerprint: is required"):
        AgreementResult.from_json(missing)
    with pytest.raises(ResultFormatError, match="unknown field"):
        AgreementResult.from_json({**stored, "extra": 1})


def test_an_estimate_keeps_p_value_only_where_given() -> None:
    from reports.results import decode_dataclass, encode

    plain = {"value": 0.5, "ci_low": 0.4, "ci_high": None, "n": 3, "method": "bca",
             "warnings": []}
    assert encode(decode_dataclass(Estimate, plain, "m")) == plain
    tested = {**plain, "p_value": 0.03}
    assert decode_dataclass(Estimate, tested, "m").p_value == 0.03
    assert encode(decode_dataclass(Estimate, tested, "m")) == tested
    with pytest.raises(ResultFormatError, match=r"m\.n: must be an integer"):
        decode_dataclass(Estimate, {**plain, "n": 1.5}, "m")


def test_agreement_module_writes_the_version_the_reader_reads() -> None:
    from reports.agreement import RESULT_VERSION

    assert RESULT_VERSION == AGREEMENT_RESULT_VERSION
    assert kinds.kind_get("agreement").result_version == AGREEMENT_RESULT_VERSION


def test_results_module_needs_no_django() -> None:
    import subprocess
    import sys

    code = ("import sys, reports.results, reports.agreement.results; "
            "assert 'django' not in sys.modules, 'django imported'")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# --- the generic lifecycle, exercised with a second kind ---------------------------------------


@dataclass(frozen=True)
class _ProbeResult:
    version: int
    total: int
    plan_version: int | None
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "total": self.total,
                "plan_version": self.plan_version, "fingerprint": self.fingerprint}


CALLS: list[str] = []


def _probe_compute(inputs: Any, params: Any, plan_version: int | None, fp: str) -> _ProbeResult:
    CALLS.append(fp)
    if params.get("fail"):
        raise RuntimeError("probe failed on purpose")
    return _ProbeResult(version=4, total=inputs, plan_version=plan_version, fingerprint=fp)


def _probe_params(raw: Any) -> dict[str, Any]:
    raw = dict(raw or {})
    if set(raw) - {"fail"}:
        name = sorted(set(raw) - {"fail"})[0]
        raise ValidationFailed.at(f"params.{name}", "bad")
    return raw


@pytest.fixture
def probe_kind(monkeypatch: pytest.MonkeyPatch) -> str:
    CALLS.clear()
    probe = kinds.ReportKind(
        key="probe",
        result_version=4,
        params_validate=_probe_params,
        plan_defaults=lambda params, plan: params,
        load=lambda study, params: 40,
        fingerprint=lambda inputs: f"fp-{inputs}",
        compute=_probe_compute,
        result_from_json=lambda data: _ProbeResult(**data),
    )
    monkeypatch.setitem(kinds._FACTORIES, "probe", lambda: probe)
    monkeypatch.setattr(kinds, "_CACHE", {})
    return "probe"


def test_any_registered_kind_gets_the_lifecycle(
    study: Study, probe_kind: str, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    # Celery runs eagerly here (tests/reports/conftest.py).
    with django_capture_on_commit_callbacks(execute=True):
        snap = report_build(study=study, kind=probe_kind, params={}, created_by=None)
    snap.refresh_from_db()
    assert (snap.kind, snap.status, snap.result_version) == ("probe", "done", 4)
    assert snap.result == {"version": 4, "total": 40, "plan_version": None, "fingerprint": "fp-40"}
    assert snap.input_fingerprint == "fp-40" and CALLS == ["fp-40"]
    # A redelivered message finds it done and computes nothing.
    assert report_compute_task.apply(args=[snap.pk]).get() == "done" and CALLS == ["fp-40"]

    # A failure is recorded, and report_retry computes again.
    failing = ReportSnapshot.objects.create(study=study, kind="probe", params={"fail": True})
    assert report_compute(report_id=failing.pk).status == "failed"
    failing.refresh_from_db()
    assert "probe failed on purpose" in failing.error and failing.result is None
    ReportSnapshot.objects.filter(pk=failing.pk).update(params={})
    with django_capture_on_commit_callbacks(execute=True):
        report_retry(report=failing)
    failing.refresh_from_db()
    assert failing.status == "done" and failing.error == ""

    # A running snapshot is left to its worker until it is stale, then reclaimed.
    running = ReportSnapshot.objects.create(
        study=study, kind="probe", status="running", started_at=timezone.now()
    )
    assert report_compute(report_id=running.pk).status == "running"
    ReportSnapshot.objects.filter(pk=running.pk).update(
        started_at=timezone.now() - timedelta(seconds=settings.REVIEWHUB_REPORT_STALE_S + 5)
    )
    assert report_compute(report_id=running.pk).status == "done"


def test_unknown_kind_is_refused_naming_kind(study: Study) -> None:
    with pytest.raises(ValidationFailed) as err:
        report_build(study=study, kind="nope", params={}, created_by=None)
    assert err.value.details["errors"][0]["path"] == "kind"
    assert not ReportSnapshot.objects.exists()


def test_old_task_name_still_computes(imported: Study) -> None:
    snap = ReportSnapshot.objects.create(
        study=imported, params=kinds.kind_get("agreement").params_validate({"n_resamples": 200})
    )
    assert agreement_report_compute.name == "reports.celery_tasks.agreement_report_compute"
    assert report_compute_task.name == "reports.celery_tasks.report_compute_task"
    assert agreement_report_compute.apply(args=[snap.pk]).get() == "done"


def test_agreement_api_does_not_serve_another_kind(
    study: Study, probe_kind: str, lead_client: Any
) -> None:
    other = ReportSnapshot.objects.create(study=study, kind="probe", params={})
    url = reverse("reports-api-detail", kwargs={"slug": study.slug, "report_id": other.pk})
    assert lead_client.get(url).status_code == 404
    listing = lead_client.get(reverse("reports-api-list", kwargs={"slug": study.slug})).json()
    assert listing["results"] == []


@pytest.mark.django_db(transaction=True)
def test_migration_keeps_existing_agreement_reports(lead: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from tests.factories import StudyFactory

    before = [("reports", "0002_agreementreport_started_at_and_more")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("reports")
    executor.migrate(before)
    try:
        old_apps = executor.loader.project_state(before).apps
        study = StudyFactory(owner=lead, slug="kept")
        old = old_apps.get_model("reports", "AgreementReport").objects.create(
            study_id=study.pk, params={"seed": 7}, status="done", result={"version": 1},
            input_fingerprint="f" * 64,
        )
        pending = old_apps.get_model("reports", "AgreementReport").objects.create(
            study_id=study.pk, params={"seed": 8}
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    kept = ReportSnapshot.objects.get(pk=old.pk)
    assert (kept.kind, kept.result_version, kept.params, kept.status) == (
        "agreement", 1, {"seed": 7}, "done"
    )
    assert kept.input_fingerprint == "f" * 64 and kept.result == {"version": 1}
    assert ReportSnapshot.objects.get(pk=pending.pk).result_version is None
    assert list(study.report_snapshots.order_by("id")) == [kept, ReportSnapshot.objects.get(
        pk=pending.pk)]
