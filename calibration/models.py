"""Calibrated scores: one row per (output or comparison, criterion or the rubric) of one
calibration snapshot.

A calibration snapshot is a `snapshots.ReportSnapshot` of kind "calibration" (one lifecycle for
every report kind, run by `reports`); its rows live here and hold a foreign key to it (the
`snapshots` app sits below `calibration` in the app order for that). Rows of a snapshot are
written once, in one transaction, when the snapshot is computed, and never changed afterwards:
a snapshot is immutable and the API serves any of them by id.
"""

from __future__ import annotations

from django.db import models

from judges.models import JudgeVersion
from snapshots.models import ReportSnapshot
from studies.model_fields import index_where_set
from studies.models import (
    Candidate,
    Criterion,
    OutputOrComparison,
    Study,
    comparison_link,
    output_link,
)


class CalibratedScore(OutputOrComparison):
    class Decision(models.TextChoices):
        PASS = "pass", "Pass"
        FAIL = "fail", "Fail"
        ESCALATE = "escalate", "Escalate to a human"
        HUMAN = "human", "Decided by humans"

    class Source(models.TextChoices):
        JUDGE = "judge", "Judge"
        HUMAN = "human", "Human consensus"
        ADJUDICATED = "adjudicated", "Adjudicated"

    # The row's references carry no database constraint (db_constraint=False) and only the
    # indexes its reads and deletes use: a snapshot writes up to a million rows, and at that
    # size PostgreSQL spent 12 s of a 35 s snapshot checking six foreign keys per row at
    # commit (bench/calibration.py). The rows are written once from ids the same transaction
    # just read, and Django still cascades deletes of a study, output, comparison, candidate,
    # criterion or judge version to them (on_delete runs in the ORM, not in the database).
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+",
                              db_constraint=False, db_index=False)
    # The snapshot (kind "calibration") these rows belong to: the one reference that keeps its
    # database constraint (one check per row, against a single parent row), so no row can
    # outlive or precede its snapshot. The column keeps its name (the COPY writer in
    # services.py writes it by attname); no index of its own: the (study, snapshot_id, id)
    # index below serves every read and delete, which all name the study.
    snapshot = models.ForeignKey(ReportSnapshot, on_delete=models.CASCADE, related_name="+",
                                 db_column="snapshot_id", db_index=False)
    output = output_link(db_constraint=False)
    # Indexed only where set (Meta.indexes): most studies' rows are all outputs.
    comparison = comparison_link(db_constraint=False, db_index=False)
    candidate = models.ForeignKey(
        Candidate, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        db_constraint=False, db_index=False,
    )
    # Null for the rubric's aggregate row (`criterion_key` "rubric").
    criterion = models.ForeignKey(
        Criterion, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        db_constraint=False, db_index=False,
    )
    criterion_key = models.CharField(max_length=64)
    # The judge version whose verdict was calibrated (null for the rubric row and for rows
    # decided by humans without a verdict).
    judge_version = models.ForeignKey(
        JudgeVersion, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        db_constraint=False, db_index=False,
    )
    judge_version_hash = models.CharField(max_length=64, blank=True)
    # The calibration cell the curve came from ("" for the whole study) and the item's labels.
    stratum = models.CharField(max_length=255, blank=True)
    strata = models.JSONField(default=dict)
    raw_value = models.CharField(max_length=64, blank=True)
    raw_confidence = models.FloatField(null=True, blank=True)
    p_pass = models.FloatField()
    p_low = models.FloatField(null=True, blank=True)
    p_high = models.FloatField(null=True, blank=True)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    expected_cost = models.FloatField()
    source = models.CharField(max_length=12, choices=Source.choices)
    plan_version = models.PositiveIntegerField(null=True, blank=True)
    # Human labels behind the curve that produced p_pass (after shrinkage: the cell's own).
    n_labels = models.PositiveIntegerField(default=0)
    # The newest verdict, annotation or adjudication behind the row: what "changed since" reads.
    evidence_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(OutputOrComparison.Meta):
        ordering = ["snapshot_id", "id"]
        # Every read names the study and the snapshot (the latest is the greatest snapshot id
        # of a study; a page is a keyset by id inside one), so one index serves them all and
        # the deletes of a snapshot's rows. Each index costs the write of every row: with
        # (snapshot_id, id) and (study, snapshot_id) apart, and a full comparison index,
        # PostgreSQL took ~1 s longer to store a million-verdict snapshot (docs/benchmarks.md).
        indexes = [
            models.Index(fields=["study", "snapshot_id", "id"], name="calscore_study_snap_id"),
            index_where_set("comparison", "calscore_comparison"),
        ]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            models.CheckConstraint(
                condition=models.Q(p_pass__gte=0.0, p_pass__lte=1.0), name="calscore_p_range"
            ),
        ]

    def __str__(self) -> str:
        return f"calibrated score {self.pk} (snapshot {self.snapshot_id})"
