"""Judges, their immutable versions, runs, jobs and verdicts.

Value encoding shared with `annotations` and read by `reports` (keep it in sync):
- binary: value "pass" | "fail", value_num 1.0 | 0.0
- ordinal: value "1".."k", value_num the point
- pairwise: value "A" | "B" | "tie" in canonical terms (A = Comparison.output_a), value_num
  1.0 | 0.0 | 0.5
- categorical: value the label, value_num null
An unscored verdict (parse failure, permanent provider error) has is_scored False, value "".
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from studies.model_fields import (
    BudgetedRun,
    ContentVersion,
    CreatedAt,
    ProviderJob,
    index_where_set,
    job_indexes,
    version_constraints,
)
from studies.models import (
    Criterion,
    OutputOrComparison,
    Study,
    comparison_link,
    output_link,
    unique_per_subject,
)


class Judge(models.Model):
    class Kind(models.TextChoices):
        LLM = "llm", "LLM judge"
        PROGRAMMATIC = "programmatic", "Programmatic check"
        # Verdicts brought in from elsewhere (importers); no config can be run.
        IMPORTED = "imported", "Imported ratings"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="judges")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["study", "name"], name="judge_unique_name")]

    def __str__(self) -> str:
        return self.name


class JudgeVersion(ContentVersion, CreatedAt):
    """Immutable: anything that can change a verdict lives in `config`; its hash names it."""

    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="versions")
    # LLM: {"provider", "base_url", "model", "api_key_env", "system_prompt", "user_prompt",
    #       "parameters": {...}, "response_format", "parser", "samples", "logprobs", "prices"}
    # programmatic: {"check": "json_schema" | "regex" | "match" | "length" | "errored", ...}
    config = models.JSONField(default=dict)
    # For the self-preference audit (e.g. "gpt-4", "claude").
    model_family = models.CharField(max_length=100, blank=True)
    # Recorded by whatever made the verdicts (the demo seed, a simulated provider): the
    # reports stamp "simulated" from this flag, never from a name.
    simulated = models.BooleanField(default=False)

    class Meta:
        ordering = ["judge", "-version"]
        constraints = version_constraints("judge", "judgeversion_unique", "judgeversion_hash")

    def __str__(self) -> str:
        return f"{self.judge.name} {self.version_label}"


class JudgeRun(BudgetedRun, CreatedAt):
    """A judge run. selection: {"kind": "all" | "stratum" | "candidate" | "sample", ...};
    creation_stats: what `judge_run_start` found, {"subjects", "jobs_created",
    "jobs_adopted", "already_finished", "in_other_runs", "comparisons_created"} (see
    judges/runs.py); `max_calls` holds exactly like the cost budget."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        CANCELLED = "cancelled", "Cancelled"
        STOPPED = "stopped", "Stopped (budget)"
        FAILED = "failed", "Failed"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="judge_runs")
    judge_version = models.ForeignKey(JudgeVersion, on_delete=models.PROTECT, related_name="runs")
    criteria = models.ManyToManyField(Criterion, related_name="judge_runs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    started_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"run {self.pk}"


class JudgeJob(OutputOrComparison, ProviderJob):
    """One provider call: (judge version, subject, criterion, sample index, order).

    `attempts` is reset when a lead resumes a run; `details` also holds the answer's
    "finish_reason" and "logprobs". The result of the call (`raw_response` to `rationale`) is
    filled once, by a conditional update on the lease.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        UNPARSEABLE = "unparseable", "Unparseable"
        CANCELLED = "cancelled", "Cancelled"

    class Order(models.TextChoices):
        NONE = "", "Single output"
        AB = "ab", "A then B"
        BA = "ba", "B then A"

    # No index of its own: judgejob_run_status (run, status) serves every lookup by run, and
    # each extra index is written for every job inserted and every status change.
    run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="jobs",
                            db_index=False)
    judge_version = models.ForeignKey(JudgeVersion, on_delete=models.PROTECT, related_name="jobs")
    criterion = models.ForeignKey(Criterion, on_delete=models.PROTECT, related_name="+")
    output = output_link(related_name="judge_jobs")
    comparison = comparison_link(related_name="judge_jobs")
    sample_index = models.PositiveIntegerField(default=0)
    order = models.CharField(max_length=2, choices=Order.choices, default=Order.NONE, blank=True)
    class ErrorKind(models.TextChoices):
        NONE = "", "No error"
        TRANSIENT = "transient", "Transient (retries exhausted or pending)"
        PERMANENT = "permanent", "Permanent"
        PARSE = "parse", "Answer did not parse"

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    error_kind = models.CharField(
        max_length=10, choices=ErrorKind.choices, default=ErrorKind.NONE, blank=True
    )
    raw_response = models.TextField(blank=True)
    parsed_value = models.CharField(max_length=200, blank=True)
    value_num = models.FloatField(null=True, blank=True)
    probability = models.FloatField(null=True, blank=True)
    rationale = models.TextField(blank=True)

    class Meta(OutputOrComparison.Meta):
        ordering = ["id"]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            *unique_per_subject("judgejob_unique", "judge_version", "criterion",
                                after=("sample_index", "order")),
        ]
        indexes = job_indexes("judgejob")

    def __str__(self) -> str:
        return f"job {self.pk}"


class Verdict(OutputOrComparison):
    """The judge's verdict on one subject for one criterion (samples/orders aggregated)."""

    class Source(models.TextChoices):
        RUN = "run", "Judge run"
        IMPORT = "import", "Imported"

    judge_version = models.ForeignKey(
        JudgeVersion, on_delete=models.PROTECT, related_name="verdicts"
    )
    criterion = models.ForeignKey(Criterion, on_delete=models.PROTECT, related_name="verdicts")
    # The subject and run indexes are partial (see Meta.indexes): db_index off here.
    output = output_link(related_name="verdicts", db_index=False)
    comparison = comparison_link(related_name="verdicts", db_index=False)
    is_scored = models.BooleanField(default=True)
    value = models.CharField(max_length=200, blank=True)
    value_num = models.FloatField(null=True, blank=True)
    # P(pass) for binary/ordinal when logprobs or samples give one; P(A wins) for pairwise.
    probability = models.FloatField(null=True, blank=True)
    rationale = models.TextField(blank=True)
    # e.g. {"position_inconsistent": true, "orders": {"ab": "A", "ba": "B"}, "samples": [...]}
    details = models.JSONField(default=dict, blank=True)
    n_samples = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=6, choices=Source.choices, default=Source.RUN)
    run = models.ForeignKey(
        JudgeRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="verdicts",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(OutputOrComparison.Meta):
        ordering = ["id"]
        # Partial: an index of a nullable foreign key otherwise holds an entry for every row
        # where it is NULL (the comparison of every output's verdict, the run of every
        # imported one), which no query reads (`= id` and `IN (...)` lookups, the cascades
        # and the foreign keys' own checks among them, imply NOT NULL) and every insert
        # writes: two of a new output verdict's eight index entries (docs/benchmarks.md,
        # "Verdict push").
        indexes = [
            index_where_set("output", "verdict_output"),
            index_where_set("comparison", "verdict_comparison"),
            index_where_set("run", "verdict_run"),
        ]
        constraints = [
            *OutputOrComparison.Meta.constraints,
            *unique_per_subject("verdict_unique", "judge_version", "criterion"),
        ]

    def __str__(self) -> str:
        return f"verdict {self.pk}: {self.value}"
