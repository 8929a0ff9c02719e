"""Sampling plans, the assignment queue, annotations (with severity), revisions, gold labels and
adjudications.

Values use the encoding documented in `judges/models.py` (pass/fail, "1".."k", A/B/tie in
canonical terms, category labels), so that reports compare judges and humans directly.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from studies.model_fields import CreatedBy, version_constraints
from studies.models import (
    Criterion,
    OutputOrComparison,
    RubricVersion,
    Study,
    comparison_link,
    output_link,
    unique_per_subject,
)


class SamplingPlan(CreatedBy):
    """Which outputs humans grade, and by how many annotators. Versioned per study."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="sampling_plans")
    version = models.PositiveIntegerField()
    rubric = models.ForeignKey(RubricVersion, on_delete=models.PROTECT, related_name="+")
    # {"mode": "all" | "per_stratum" | "proportional", "dimension": key, "n": int,
    #  "total": int, "min_per_stratum": int, "disagreement_weight": float, "seed": int,
    #  "subject": "output" | "comparison"}
    spec = models.JSONField(default=dict)
    k = models.PositiveIntegerField(default=3)
    gold_rate = models.FloatField(default=0.0)
    is_active = models.BooleanField(default=True)
    # What the sampler derived from the spec: the seed it used, the population and allocation
    # per stratum, the number of gold entries, the design and pi range per stratum and the
    # entries per draw kind (reports need these to weight the sample).
    summary = models.JSONField(default=dict, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study", "-version"]
        constraints = version_constraints("study", "samplingplan_unique")

    def __str__(self) -> str:
        return f"{self.study_id} sampling v{self.version}"


class QueueEntry(OutputOrComparison):
    """One subject (output or comparison) that the plan sends to k annotators."""

    class DrawKind(models.TextChoices):
        # Values match annotations.sampling.DRAW_KINDS (the sampler is pure and names them).
        RANDOM = "random", "Random draw"  # drawn by the plan's probability design
        CENSUS = "census", "Census"  # mode "all": every eligible subject, pi = 1
        GOLD = "gold", "Gold"  # quality control: chosen from the gold pool, not a random draw
        ESCALATION = "escalation", "Escalation"  # sent to humans by a rule, not a random draw

    plan = models.ForeignKey(SamplingPlan, on_delete=models.CASCADE, related_name="entries")
    is_gold = models.BooleanField(default=False)
    needed = models.PositiveIntegerField(default=3)
    # Submitted annotations so far; the queue stops offering the entry at `needed`.
    done_count = models.PositiveIntegerField(default=0)
    # Assignments in status "leased" (maintained with F() updates under the entry's row lock),
    # so that "is there room?" is a column test, not a count over assignments.
    leased_count = models.PositiveIntegerField(default=0)
    # A per-entry random key in [0, 2**31); each annotator's order is derived from it.
    sort_key = models.BigIntegerField(default=0)
    # The subject's label in the plan's stratum dimension ("" when the plan has none).
    stratum = models.CharField(max_length=200, blank=True, default="")
    # Relative selection weight used by the sampler (1.0 unless disagreement weighting): the
    # size measure of a pi-ps draw. Estimators use `inclusion_probability`, not this.
    sample_weight = models.FloatField(default=1.0)

    draw_kind = models.CharField(max_length=10, choices=DrawKind.choices, default=DrawKind.RANDOM)
    # First-order inclusion probability of the subject under the plan's design (random and
    # census entries), for Horvitz-Thompson re-weighting: 1 / pi is the subject's weight. NULL
    # for gold and escalation entries, and for random entries of weighted plans drawn before
    # probabilities were recorded (their draw had no closed-form pi).
    inclusion_probability = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(OutputOrComparison.Meta):
        ordering = ["id"]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            models.CheckConstraint(
                condition=Q(done_count__lte=models.F("needed")), name="queueentry_not_over"
            ),
            # Never more live leases than the annotations still needed: the database refuses
            # an over-assignment even if the queue logic were wrong.
            models.CheckConstraint(
                condition=Q(done_count__lte=F("needed") - F("leased_count")),
                name="queueentry_not_overleased",
            ),
            # A probability is in (0, 1], and only probability draws have one: an estimator
            # never weights a gold or escalated entry as if it had been drawn at random.
            models.CheckConstraint(
                condition=Q(inclusion_probability__isnull=True)
                | Q(
                    inclusion_probability__gt=0,
                    inclusion_probability__lte=1,
                    draw_kind__in=["random", "census"],
                ),
                name="queueentry_inclusion_probability",
            ),
            models.CheckConstraint(
                condition=Q(is_gold=True, draw_kind="gold")
                | (Q(is_gold=False) & ~Q(draw_kind="gold")),
                name="queueentry_gold_draw_kind",
            ),
        ]
        indexes = [
            models.Index(fields=["plan", "done_count"], name="queueentry_open"),
            # The queue walks open entries of a plan in sort_key order from a per-annotator
            # pivot; completed entries leave this partial index.
            models.Index(
                fields=["plan", "sort_key"],
                condition=Q(done_count__lt=F("needed")),
                name="queueentry_open_sort",
            ),
            models.Index(fields=["plan", "stratum"], name="queueentry_stratum"),
        ]

    def __str__(self) -> str:
        return f"entry {self.pk} (plan {self.plan_id})"


class Assignment(models.Model):
    """An annotator's lease on a queue entry; at most one per (entry, annotator), ever."""

    class Status(models.TextChoices):
        LEASED = "leased", "Leased"
        SUBMITTED = "submitted", "Submitted"
        SKIPPED = "skipped", "Skipped"
        EXPIRED = "expired", "Expired"

    entry = models.ForeignKey(QueueEntry, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.LEASED)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Pairwise: True when comparison.output_b was shown on the left.
    swapped = models.BooleanField(default=False)
    # The client submission that completed this assignment (idempotency of submit).
    submission_id = models.UUIDField(null=True, blank=True)
    # True for rows made by a new plan version for annotators who had already labelled the
    # subject under an earlier version (so the subject is never offered to them again).
    carried_over = models.BooleanField(default=False)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["entry", "annotator"], name="assignment_unique"),
            models.UniqueConstraint(
                fields=["submission_id"],
                condition=Q(submission_id__isnull=False),
                name="assignment_unique_submission",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="assignment_lease"),
            models.Index(fields=["annotator", "status"], name="assignment_annotator"),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk}: {self.status}"


class Annotation(OutputOrComparison):
    """One annotator's label of one subject for one criterion."""

    class Source(models.TextChoices):
        UI = "ui", "Grading page"
        API = "api", "REST API"
        IMPORT = "import", "Imported"

    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="annotations"
    )
    criterion = models.ForeignKey(Criterion, on_delete=models.PROTECT, related_name="annotations")
    output = output_link(related_name="annotations")
    comparison = comparison_link(related_name="annotations")
    assignment = models.ForeignKey(
        Assignment, null=True, blank=True, on_delete=models.SET_NULL, related_name="annotations"
    )
    plan = models.ForeignKey(
        SamplingPlan, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    value = models.CharField(max_length=200)
    value_num = models.FloatField(null=True, blank=True)
    # 1 (harmless) .. 5 (severe harm or cost); asked only when the label is a failure.
    severity = models.PositiveSmallIntegerField(null=True, blank=True)
    severity_note = models.TextField(blank=True)
    rationale = models.TextField(blank=True)
    # {"malformed_input": bool, "unsure": bool, "offensive": bool}
    flags = models.JSONField(default=dict, blank=True)
    time_on_task_ms = models.PositiveIntegerField(null=True, blank=True)
    # Client-generated; a retried or doubled submit finds the first one instead of a second.
    submission_id = models.UUIDField(null=True, blank=True)
    source = models.CharField(max_length=6, choices=Source.choices, default=Source.UI)
    created_at = models.DateTimeField(auto_now_add=True)
    revised_at = models.DateTimeField(null=True, blank=True)

    class Meta(OutputOrComparison.Meta):
        ordering = ["id"]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            *unique_per_subject("annotation_unique", "annotator", "criterion"),
            models.UniqueConstraint(
                fields=["submission_id", "criterion"],
                condition=Q(submission_id__isnull=False),
                name="annotation_unique_submission",
            ),
            models.CheckConstraint(
                condition=Q(severity__isnull=True) | Q(severity__gte=1, severity__lte=5),
                name="annotation_severity_range",
            ),
        ]
        indexes = [
            models.Index(fields=["annotator", "created_at"], name="annotation_annotator_time"),
            models.Index(fields=["plan", "criterion"], name="annotation_plan_criterion"),
        ]

    def __str__(self) -> str:
        return f"annotation {self.pk}: {self.value}"


class AnnotationRevision(models.Model):
    """The state of an annotation before a revision (history is append-only)."""

    annotation = models.ForeignKey(Annotation, on_delete=models.CASCADE, related_name="revisions")
    value = models.CharField(max_length=200)
    severity = models.PositiveSmallIntegerField(null=True, blank=True)
    severity_note = models.TextField(blank=True)
    rationale = models.TextField(blank=True)
    flags = models.JSONField(default=dict, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["annotation", "id"]

    def __str__(self) -> str:
        return f"revision {self.pk} of {self.annotation_id}"


class GoldLabel(OutputOrComparison, CreatedBy):
    """A lead's known answer for a subject, used to score annotators (quality control)."""

    criterion = models.ForeignKey(Criterion, on_delete=models.CASCADE, related_name="gold_labels")
    value = models.CharField(max_length=200)

    class Meta(OutputOrComparison.Meta):
        ordering = ["id"]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            *unique_per_subject("gold_unique", "criterion"),
        ]

    def __str__(self) -> str:
        return f"gold {self.pk}: {self.value}"


class Adjudication(OutputOrComparison):
    """A lead's adjudicated label, kept apart from the raw annotations it settles."""

    criterion = models.ForeignKey(
        Criterion, on_delete=models.CASCADE, related_name="adjudications"
    )
    value = models.CharField(max_length=200)
    note = models.TextField(blank=True)
    adjudicated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(OutputOrComparison.Meta):
        # History is kept: the latest adjudication of a (subject, criterion) is the one in force.
        ordering = ["id"]

    def __str__(self) -> str:
        return f"adjudication {self.pk}: {self.value}"


class Invitation(models.Model):
    """A lead's invitation of an existing account (by username) to a study, waiting for that
    account to accept or decline (annotations/services/members.py).

    The username is kept as typed: an invitation of a name that has no account is recorded
    the same way (the lead's answer is the same either way, so it tells nothing about which
    names exist) and is offered to an account of that name if one is made later."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=20)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # One open invitation per (study, name): inviting again updates its role.
            models.UniqueConstraint(fields=["study", "username"],
                                    condition=Q(status="pending"),
                                    name="invitation_one_pending_per_study_username"),
        ]

    def __str__(self) -> str:
        return f"invitation of {self.username} to {self.study_id} ({self.status})"


class PasswordChangeRequired(models.Model):
    """The account's password was set by someone else (a one-time password from an invitation
    or a lead's reset): its owner must choose a new one before using the site."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", primary_key=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"password change required for {self.user_id}"
