"""Generation configs, production prompt templates, candidate runs and their jobs.

Error kinds of a call (`GenerationJob.ErrorKind`), shared by the API, the pages and the
selection gates: timeout, rate_limited (429), server_error (5xx), refused (the model declined),
truncated (stopped at the token limit), connection, client_error (other 4xx or an unusable
answer), config (the request could not be built or sent here).
"""

from __future__ import annotations

from django.db import models

from studies.model_fields import (
    BudgetedRun,
    ContentVersion,
    CreatedBy,
    GeneratedAnswer,
    ProviderJob,
    job_indexes,
    version_constraints,
)
from studies.models import Candidate, Item, Output, Study


class GenerationConfig(ContentVersion, CreatedBy):
    """One immutable version of a candidate's endpoint; `config` is canonical, its hash names it.

    config: {"provider", "base_url", "model", "api_key_env", "parameters": {"temperature",
    "max_tokens", "seed", "top_p"}, "prices", "timeout_s", "extra_body"}.
    """

    candidate = models.ForeignKey(Candidate, on_delete=models.CASCADE,
                                  related_name="generation_configs")
    config = models.JSONField(default=dict)

    class Meta:
        ordering = ["candidate", "-version"]
        constraints = version_constraints("candidate", "genconfig_version", "genconfig_hash")

    def __str__(self) -> str:
        return f"{self.candidate.name} {self.version_label}"


class PromptTemplate(ContentVersion, CreatedBy):
    """One immutable version of the study's production prompt.

    template: {"system", "user", "output_schema", "structured_output"}.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="prompt_templates")
    template = models.JSONField(default=dict)

    class Meta:
        ordering = ["study", "-version"]
        constraints = version_constraints("study", "prompttemplate_version",
                                          "prompttemplate_hash")

    def __str__(self) -> str:
        return f"prompt {self.version_label}"


class GenerationRun(BudgetedRun, CreatedBy):
    """A candidate run. selection: {"kind": "all"} | {"kind": "items", "external_ids": [...]}
    | {"kind": "sample", "n": N, "seed": S, "stratify_by": dimension key or ""};
    creation_stats: {"items", "jobs_created", "jobs_adopted", "already_finished",
    "estimated_cost"}."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        CANCELLED = "cancelled", "Cancelled"
        STOPPED = "stopped", "Stopped (budget)"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="generation_runs")
    template = models.ForeignKey(PromptTemplate, on_delete=models.PROTECT, related_name="runs")
    configs = models.ManyToManyField(GenerationConfig, through="RunCandidate",
                                     related_name="runs")
    # Replay: each item's recorded request (`Item.recorded_request`, an OpenAI
    # chat-completions body as the application logged it) is sent unchanged but for the model
    # (and the wire format of an Anthropic candidate); the template then only supplies the
    # output schema.
    replay = models.BooleanField(default=False)
    # Requests in flight per candidate, held closed-loop for the whole run.
    concurrency = models.PositiveIntegerField()
    # Open loop: requests started per second per candidate, whatever their latency (C then
    # caps the requests in flight). Null: closed loop at exactly C.
    rate = models.FloatField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    # The estimated cost of one request (largest over the run's candidates), used to keep the
    # cost of calls in flight inside the budget.
    est_request_cost = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"generation run {self.pk}"


class RunCandidate(models.Model):
    """One candidate (config version) of a run, and the slot that keeps its load at C.

    Exactly one drain at a time holds the slot (`drain_token` under a lease), so a candidate
    never has two drains' worth of requests in flight, whatever the number of workers.
    """

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="candidates")
    config = models.ForeignKey(GenerationConfig, on_delete=models.PROTECT, related_name="+")
    drain_token = models.CharField(max_length=64, blank=True)
    drain_expires_at = models.DateTimeField(null=True, blank=True)
    # Client-side load measured by the drains: {"busy_s", "window_s", "calls",
    # "max_in_flight"}; busy_s / window_s is the mean number of requests in flight.
    load = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "config"], name="runcandidate_unique"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} config {self.config_id}"


class GenerationJob(ProviderJob, GeneratedAnswer):
    """One (item, config version, sample index): unique across runs, so a re-run adopts it.

    `schema_valid` is null when neither the template nor the study has an output schema; each
    of `details`' attempt errors also names its error kind.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class ErrorKind(models.TextChoices):
        NONE = "", "No error"
        TIMEOUT = "timeout", "Timeout"
        RATE_LIMITED = "rate_limited", "Rate limited (429)"
        SERVER_ERROR = "server_error", "Server error (5xx)"
        REFUSED = "refused", "Refused"
        TRUNCATED = "truncated", "Truncated"
        CONNECTION = "connection", "Connection error"
        CLIENT_ERROR = "client_error", "Client error (4xx) or unusable answer"
        CONFIG = "config", "Request not sendable"

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="jobs",
                            db_index=False)
    config = models.ForeignKey(GenerationConfig, on_delete=models.PROTECT, related_name="jobs")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="+")
    sample_index = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    error_kind = models.CharField(max_length=14, choices=ErrorKind.choices, blank=True,
                                  default=ErrorKind.NONE)
    text = models.TextField(blank=True)
    # ReviewHub's own time on the call outside the HTTP exchange (building, queueing in the
    # event loop, parsing), so that a slow worker cannot pass for a slow model.
    overhead_ms = models.FloatField(null=True, blank=True)
    schema_violation = models.TextField(blank=True)
    # sha256 of the exact JSON body sent (the key travels in a header, never in it).
    request_hash = models.CharField(max_length=64, blank=True)
    output = models.ForeignKey(Output, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["config", "item", "sample_index"],
                                    name="genjob_unique"),
        ]
        indexes = job_indexes("genjob")

    def __str__(self) -> str:
        return f"generation job {self.pk}"
