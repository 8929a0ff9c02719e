"""Report snapshots: the kind, the inputs' fingerprint, the parameters, the plan version, the
numbers. Every kind of report (agreement, calibration, selection) shares this one row and one
lifecycle (reports/services.py, reports/kinds.py).

The table keeps the name it had when the model lived in `reports` (`reports_reportsnapshot`):
the model moved here, below `calibration`, by a state-only migration, so that calibrated scores
and deployments can point to their snapshot with a foreign key."""

from __future__ import annotations

from django.db import models

from studies.model_fields import CreatedBy
from studies.models import AnalysisPlan, Study


class ReportSnapshot(CreatedBy):
    class Kind(models.TextChoices):
        AGREEMENT = "agreement", "Agreement"
        CALIBRATION = "calibration", "Calibration"
        SELECTION = "selection", "Selection"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="report_snapshots")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.AGREEMENT)
    plan = models.ForeignKey(
        AnalysisPlan, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Validated by the kind's params_validate; for agreement: {"seed", "n_resamples", "ci",
    # "level", "min_items", "epsilon", "margin", "crosses", ...}
    params = models.JSONField(default=dict)
    input_fingerprint = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    # The schema version of `result` (reports/results.py); null until a result is recorded.
    # Readers refuse a version they do not know instead of misreading its keys.
    result_version = models.PositiveSmallIntegerField(null=True, blank=True)
    # When a worker claimed the computation; a "running" report older than
    # REVIEWHUB_REPORT_STALE_S is reclaimed (its worker died before recording).
    started_at = models.DateTimeField(null=True, blank=True)
    computed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reports_reportsnapshot"
        ordering = ["-id"]
        # The index keeps its name from when the table held agreement reports only.
        indexes = [models.Index(fields=["study", "-id"], name="agreementreport_study")]

    def __str__(self) -> str:
        return f"{self.kind} report {self.pk}"
