"""The report snapshot model's move to the `snapshots` app and the foreign keys to it
(calibration 0004-0005, monitoring 0004-0005, snapshots 0001, reports 0006), run on a database
migrated back to before them and holding data written by the old models: the snapshot, its
calibrated scores and a deployment's reference survive unchanged, rows and references to a
snapshot that no longer exists are removed (scores) or cleared (deployments), and afterwards the
database refuses a row for a missing snapshot and deleting a snapshot cascades as declared."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from calibration.models import CalibratedScore
from monitoring.models import Deployment
from monitoring.services import deployment_create
from snapshots.models import ReportSnapshot
from studies.models import Output, Study

pytestmark = pytest.mark.postgres

# The last migration of each app before the move; found by name in the graph below.
BEFORE = {"reports": "_alter_reportsnapshot_kind", "calibration": "_fewer_row_indexes",
          "monitoring": "_langfuse_source"}


def _before_nodes() -> list[tuple[str, str]]:
    graph = MigrationExecutor(connection).loader.graph
    nodes = [max(k for k in graph.nodes if k[0] == app and k[1].endswith(suffix))
             for app, suffix in BEFORE.items()]
    assert len(nodes) == 3
    return nodes


def _migrate(targets: list[tuple[str, str]] | None) -> Any:
    """Migrate to `targets` (None: the latest) and return the apps of that state."""
    executor = MigrationExecutor(connection)
    if targets is None:
        targets = executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def _score(apps: Any, study: Study, output_id: int, snapshot_id: int, p: float) -> int:
    row = apps.get_model("calibration", "CalibratedScore").objects.create(
        study_id=study.pk, snapshot_id=snapshot_id, output_id=output_id, criterion_key="ok",
        p_pass=p, decision="pass", expected_cost=0.0, source="judge")
    return int(row.pk)


@pytest.mark.django_db(transaction=True)
def test_old_database_keeps_its_snapshots_and_gains_the_keys(shipped_study: Study,
                                                             lead: Any) -> None:
    study = shipped_study
    kept_dep = deployment_create(study=study, name="prod", candidate="shipped", created_by=lead)
    lost_dep = deployment_create(study=study, name="canary", candidate="shipped",
                                 created_by=lead)
    outputs = list(Output.objects.filter(candidate__study=study).order_by("id")
                   .values_list("pk", flat=True)[:3])
    try:
        old = _migrate(_before_nodes())
        # The old state: the snapshot is a reports model, its rows hold a plain integer.
        assert old.get_model("reports", "ReportSnapshot")._meta.db_table == \
            "reports_reportsnapshot"
        old_field = old.get_model("calibration", "CalibratedScore")._meta.get_field("snapshot_id")
        assert old_field.get_internal_type() == "BigIntegerField"
        snap = old.get_model("reports", "ReportSnapshot").objects.create(
            study_id=study.pk, kind="calibration", status="done", result={"cells": []})
        missing = snap.pk + 1000
        kept = [_score(old, study, o, snap.pk, 0.25 * (i + 1)) for i, o in enumerate(outputs)]
        orphans = [_score(old, study, o, missing, 0.5) for o in outputs[:2]]
        old_deployments = old.get_model("monitoring", "Deployment").objects
        old_deployments.filter(pk=kept_dep.pk).update(calibration_snapshot_id=snap.pk)
        old_deployments.filter(pk=lost_dep.pk).update(calibration_snapshot_id=missing)
    finally:
        _migrate(None)

    moved = ReportSnapshot.objects.get(pk=snap.pk)
    assert (moved.study_id, moved.kind, moved.status, moved.result) == (
        study.pk, "calibration", "done", {"cells": []})
    rows = CalibratedScore.objects.filter(snapshot=moved).order_by("id")
    assert list(rows.values_list("pk", "output_id", "p_pass")) == [
        (pk, o, 0.25 * (i + 1)) for i, (pk, o) in enumerate(zip(kept, outputs, strict=True))]
    assert not CalibratedScore.objects.filter(pk__in=orphans).exists()
    assert Deployment.objects.get(pk=kept_dep.pk).calibration_snapshot == moved
    assert Deployment.objects.get(pk=lost_dep.pk).calibration_snapshot_id is None

    # The keys hold in the database, not only in the ORM.
    with pytest.raises(IntegrityError), transaction.atomic():
        CalibratedScore.objects.create(
            study_id=study.pk, snapshot_id=missing, output_id=outputs[0], criterion_key="ok",
            p_pass=0.5, decision="pass", expected_cost=0.0, source="judge")
    with pytest.raises(IntegrityError), transaction.atomic():
        Deployment.objects.filter(pk=lost_dep.pk).update(calibration_snapshot_id=missing)
    with connection.cursor() as cur:
        cur.execute("SELECT app_label FROM django_content_type WHERE model = 'reportsnapshot'")
        assert [r[0] for r in cur.fetchall()] == ["snapshots"]

    moved.delete()
    assert not CalibratedScore.objects.filter(pk__in=kept).exists()
    assert Deployment.objects.get(pk=kept_dep.pk).calibration_snapshot_id is None
