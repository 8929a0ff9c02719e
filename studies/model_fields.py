"""Field groups and constraint / index builders that the apps' models share.

The abstract models add no table: a model that inherits one keeps the same columns, so the
migrations see no change. The builders give each constraint and index the name it has in the
migrations; the caller passes that name (or its prefix).

This module imports no other model module, so that every app's models may import it (studies
sits below every app but reviewhub).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class CreatedAt(models.Model):
    """When the row was made."""

    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


class CreatedBy(CreatedAt):
    """Who made the row, and when; the row outlives the account (the link becomes null)."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    class Meta:
        abstract = True


class ContentVersion(models.Model):
    """One immutable version of a configuration: numbered within its owner, named by the hash
    of its canonical content. Its constraints: `version_constraints`; a model inherits
    `CreatedAt` or `CreatedBy` beside it."""

    version = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)

    class Meta:
        abstract = True

    @property
    def version_label(self) -> str:
        return f"v{self.version} ({self.content_hash[:8]})"


def version_constraints(owner: str, version_name: str,
                        hash_name: str | None = None) -> list[models.BaseConstraint]:
    """One row per (owner, version) and, when `hash_name` is given, one per (owner,
    content hash), so that saving the same content again finds the existing version."""
    unique: list[models.BaseConstraint] = [
        models.UniqueConstraint(fields=[owner, "version"], name=version_name)]
    if hash_name is not None:
        unique.append(models.UniqueConstraint(fields=[owner, "content_hash"], name=hash_name))
    return unique


class CallMeasures(models.Model):
    """What one model call cost, as the client measured it, and why it failed if it did.

    latency_ms: time to last byte (of a call made here, as the client measured it around the
    HTTP exchange); error: non-empty when the call failed (the model's own docstring says what
    such a row counts as).
    """

    latency_ms = models.FloatField(null=True, blank=True)
    tokens_in = models.PositiveIntegerField(null=True, blank=True)
    tokens_out = models.PositiveIntegerField(null=True, blank=True)
    cost = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        abstract = True


class GeneratedAnswer(CallMeasures):
    """A candidate's answer: the call's measures, why the model stopped, and whether the
    answer met the output schema (null when no schema applies)."""

    finish_reason = models.CharField(max_length=50, blank=True)
    schema_valid = models.BooleanField(null=True, blank=True)

    class Meta:
        abstract = True


class ProviderJob(CallMeasures, CreatedAt):
    """One queued provider call: the lease fields every queue of this codebase shares
    (judges/runs/leases.py) and what the provider answered besides the payload.

    attempts: claims so far (each claim is at most one provider call); available_at: not
    claimable before this time (the backoff / Retry-After of the last transient error);
    details: the per-attempt record behind `error`, {"attempt_errors": [{"attempt", "reason",
    "http_status", "retry_after_s"}, ...]}, and whatever else the kind of job records. Its
    indexes: `job_indexes`.
    """

    attempts = models.PositiveIntegerField(default=0)
    lease_token = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    available_at = models.DateTimeField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)
    http_status = models.PositiveIntegerField(null=True, blank=True)
    provider_request_id = models.CharField(max_length=200, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


def job_indexes(prefix: str) -> list[models.Index]:
    """The indexes of a `ProviderJob` table: a run's jobs by status (`<prefix>_run_status`,
    which also serves every lookup by run) and the expired leases (`<prefix>_lease`)."""
    return [
        models.Index(fields=["run", "status"], name=f"{prefix}_run_status"),
        models.Index(fields=["status", "lease_expires_at"], name=f"{prefix}_lease"),
    ]


class BudgetedRun(models.Model):
    """A run of provider calls on the job queue (judges/runs/leases.py) and its bookkeeping;
    runs list newest first.

    selection: which subjects the run covers ({"kind": ...}, each kind of run says which);
    stop_reason: why it stopped before its end; max_cost: its budget (null: none); calls_made:
    provider calls claimed so far (one per attempt), incremented under the run row lock when
    jobs are claimed, so that a budget holds exactly however many workers claim at once;
    creation_stats: what starting the run found (jobs created and adopted, ...);
    last_activity_at: the last claim or record by any worker (the sweeper re-kicks runs idle
    for longer than a lease). A model inherits `CreatedAt` or `CreatedBy` beside it.
    """

    selection = models.JSONField(default=dict)
    stop_reason = models.TextField(blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    calls_made = models.PositiveIntegerField(default=0)
    creation_stats = models.JSONField(default=dict, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-id"]


def index_where_set(field: str, name: str) -> models.Index:
    """An index of a nullable column over the rows where it is set: a full one holds an entry
    for every NULL, which no lookup by value reads and every insert writes."""
    return models.Index(fields=[field], condition=Q(**{f"{field}__isnull": False}), name=name)
