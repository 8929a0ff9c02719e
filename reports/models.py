"""Report snapshots: the inputs' fingerprint, the parameters, the plan version, the numbers."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studies.models import AnalysisPlan, Study


class AgreementReport(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="agreement_reports")
    plan = models.ForeignKey(
        AnalysisPlan, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # {"seed", "n_resamples", "ci", "level", "min_items", "epsilon", "margin", "crosses", ...}
    params = models.JSONField(default=dict)
    input_fingerprint = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When a worker claimed the computation; a "running" report older than
    # REVIEWHUB_REPORT_STALE_S is reclaimed (its worker died before recording).
    started_at = models.DateTimeField(null=True, blank=True)
    computed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["study", "-id"], name="agreementreport_study")]

    def __str__(self) -> str:
        return f"agreement report {self.pk}"
