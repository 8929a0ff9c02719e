"""Deployments, live traffic, its labels, windows and alerts.

Models hold fields, choices, constraints and trivial properties only; the rules live in
`monitoring/services.py` (writes) and `monitoring/selectors.py` (reads).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from judges.models import JudgeVersion
from snapshots.models import ReportSnapshot
from studies.model_fields import CreatedBy, GeneratedAnswer
from studies.models import AnalysisPlan, Candidate, Output, Study


class Deployment(CreatedBy):
    """The shipped candidate of a study on live traffic, and what it was chosen under."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        ENDED = "ended"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="deployments")
    name = models.CharField(max_length=200)
    candidate = models.ForeignKey(Candidate, on_delete=models.PROTECT,
                                  related_name="deployments")
    shadow_candidates = models.ManyToManyField(Candidate, blank=True,
                                               related_name="shadow_deployments")
    # The locked plan the candidate was chosen under: its deployment mix and gates are what
    # the windows are compared against.
    plan = models.ForeignKey(AnalysisPlan, on_delete=models.PROTECT, related_name="deployments")
    judge_versions = models.ManyToManyField(JudgeVersion, blank=True,
                                            related_name="deployments")
    # The calibration snapshot in force (resolved through calibration.selectors); null when
    # the study had none when the deployment was created, or once that snapshot is deleted.
    calibration_snapshot = models.ForeignKey(
        ReportSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        db_column="calibration_snapshot_id",
    )
    # The study's stratum dimensions frozen at creation (quantile bins turned into their
    # edges), so a later change of the study's scheme never moves live rows between strata.
    strata_scheme = models.JSONField(default=list, blank=True)
    # The dimension whose labels are the windows' strata ("" = no strata: one window cell).
    watch_dimension = models.CharField(max_length=60, blank=True)
    # {"judge": {"default": r, "<stratum>": r}, "human": {...}}; human <= judge per stratum.
    sampling = models.JSONField(default=dict)
    # Alert settings: {"alpha", "cooldown_minutes", "webhook_url", "emails"}.
    alerting = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    # The study the sampled live rows are judged and graded in (monitoring.dispatch): the
    # selection study's rubric, frozen strata, shipped candidate, judges and members, created
    # at the first dispatch, so live rows never enter the selection study's reports.
    live_study = models.ForeignKey(Study, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.study_id})"


class TrafficRow(GeneratedAnswer):
    """One live request answered by the shipped candidate, with its call's measures."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="rows")
    request_id = models.CharField(max_length=200)
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    input = models.TextField()
    output = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    strata = models.JSONField(default=dict, blank=True)
    stratum = models.CharField(max_length=200, blank=True)
    request = models.JSONField(null=True, blank=True)
    # Label-free signals, computed once on the way in.
    output_chars = models.PositiveIntegerField(default=0)
    refusal = models.BooleanField(default=False)
    injection_rules = models.JSONField(default=list, blank=True)
    # Poisson sampling with a permanent random number: `u` is fixed by the request id, the
    # row goes to the judges when u < judge_pi and to humans when u < human_pi (<= judge_pi).
    sample_u = models.FloatField()
    judge_pi = models.FloatField()
    human_pi = models.FloatField()
    to_judge = models.BooleanField(default=False)
    to_human = models.BooleanField(default=False)
    # Sent to humans because the judge policy escalated it: not a random draw.
    escalated = models.BooleanField(default=False)
    # The live study's output holding this row once dispatched (monitoring.dispatch), and when
    # the row went to the live study's annotation queue.
    live_output = models.ForeignKey(Output, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    queued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "request_id"],
                                    name="traffic_unique_request"),
        ]
        indexes = [models.Index(fields=["deployment", "occurred_at"],
                                name="traffic_deployment_time")]


    def __str__(self) -> str:
        return f"{self.deployment_id}:{self.request_id}"


class TrafficLabel(models.Model):
    """A judge verdict or a human grade of one traffic row (value 1 = pass, 0 = fail)."""

    class Source(models.TextChoices):
        JUDGE = "judge"
        HUMAN = "human"

    class Decision(models.TextChoices):
        NONE = ""
        PASS = "pass"
        FAIL = "fail"
        ESCALATE = "escalate"

    row = models.ForeignKey(TrafficRow, on_delete=models.CASCADE, related_name="labels")
    source = models.CharField(max_length=8, choices=Source.choices)
    # Who gave it: a judge version's id as text, or the annotator's name.
    rater = models.CharField(max_length=200)
    value = models.FloatField()
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["row", "source", "rater"],
                                    name="traffic_label_unique"),
            models.CheckConstraint(condition=Q(value__gte=0) & Q(value__lte=1),
                                   name="traffic_label_value_0_1"),
        ]


    def __str__(self) -> str:
        return f"{self.source} {self.rater}: {self.value:g}"


class Window(models.Model):
    """One computed window (hour or day) of a deployment: its typed, versioned result."""

    class Granularity(models.TextChoices):
        HOUR = "hour"
        DAY = "day"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="windows")
    granularity = models.CharField(max_length=4, choices=Granularity.choices)
    start = models.DateTimeField()
    end = models.DateTimeField()
    n_rows = models.PositiveIntegerField(default=0)
    # What the result was computed from (row count, newest row and label ids), so a beat that
    # finds nothing new leaves the window as it is.
    fingerprint = models.CharField(max_length=64, blank=True)
    result_version = models.PositiveIntegerField(default=1)
    result = models.JSONField(default=dict)
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["start"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "granularity", "start"],
                                    name="window_unique_start"),
        ]


    def __str__(self) -> str:
        return f"{self.granularity} {self.start:%Y-%m-%d %H:%M}"


class Alert(models.Model):
    """An alert of a deployment; one open (unresolved) alert per dedup key."""

    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=40)
    stratum = models.CharField(max_length=200, blank=True)
    dedup_key = models.CharField(max_length=300)
    status = models.CharField(max_length=14, choices=Status.choices, default=Status.OPEN)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    opened_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    seen_count = models.PositiveIntegerField(default=1)
    notified_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                        on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "dedup_key"],
                                    condition=~Q(status="resolved"),
                                    name="alert_one_unresolved_per_key"),
        ]


    def __str__(self) -> str:
        return f"{self.kind} {self.stratum or 'all'} ({self.status})"


class AlertEvent(models.Model):
    """The history of an alert: opened, seen again, notified, acknowledged, resolved."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    event = models.CharField(max_length=20)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.event} at {self.at:%Y-%m-%d %H:%M}"


class LangfuseSource(models.Model):
    """A Langfuse project whose GENERATION observations are pulled as the deployment's traffic
    (monitoring/langfuse_pull.py). The keys are named, never stored: the public and secret key
    are read from the named environment variables when a pull runs."""

    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE,
                                      related_name="langfuse_source")
    host = models.CharField(max_length=500)
    public_key_env = models.CharField(max_length=100)
    secret_key_env = models.CharField(max_length=100)
    # {"name": observation name, "environment": Langfuse environment}: sent as the API's
    # query parameters; {"trace_name", "tags"}: checked against each observation's trace.
    filters = models.JSONField(default=dict, blank=True)
    # The cursor: observations with startTime >= cursor_from are pulled. While a pull is under
    # way `pull_to` fixes its upper bound (so pages do not shift under it) and `next_page` is
    # the first page not yet committed.
    cursor_from = models.DateTimeField()
    pull_to = models.DateTimeField(null=True, blank=True)
    next_page = models.PositiveIntegerField(default=1)
    rows_created = models.PositiveBigIntegerField(default=0)
    rows_skipped = models.PositiveBigIntegerField(default=0)
    last_pull_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"langfuse {self.host} ({self.deployment_id})"
