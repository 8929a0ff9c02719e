"""Studies and what they are made of: rubrics, criteria, strata, items, candidates, outputs,
analysis plans, memberships and API tokens.

Models hold fields, choices, constraints and trivial properties only; the rules live in
`studies/services.py` (writes) and `studies/selectors.py` (reads).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from studies.model_fields import CreatedBy, GeneratedAnswer, version_constraints


class ThresholdField(models.FloatField):
    """A pass threshold: an ordinal point (an integer) or an interval score (any number).

    Stored as a double; read back as an int when it is integral, so that an ordinal
    criterion's threshold is the integer it always was (3, not 3.0) wherever it is read.
    """

    def from_db_value(self, value: float | None, expression: object, connection: object
                      ) -> int | float | None:
        if value is None:
            return None
        return int(value) if float(value).is_integer() else float(value)


class Study(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    task_description = models.TextField(blank=True)
    deployment_context = models.TextField(blank=True)
    # The production prompt template and generation parameters the candidates ran under.
    run_conditions = models.JSONField(default=dict, blank=True)
    output_schema = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    # Whether annotators see the reference answer while grading.
    show_reference = models.BooleanField(default=False)
    # Demo and test studies made of simulated data say so on every page that shows them.
    is_simulated = models.BooleanField(default=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="owned_studies"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        LEAD = "lead", "Lead"
        ANNOTATOR = "annotator", "Annotator"
        VIEWER = "viewer", "Viewer"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    # The account was created by an invitation to this study (annotations.annotator_invite).
    # Only then may the study's leads reset its password, and only while it has no access
    # beyond this study: a lead must never gain an account that can see more than they can.
    created_account = models.BooleanField(default=False)
    # Attributes of an imported rater in this study, e.g. {"group": "expert"} (the ratings
    # importer's rater.<key> columns); null for members that have none.
    metadata = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.study_id}:{self.role}"


class ApiToken(models.Model):
    """A client token. Only a SHA-256 of the secret is stored; the secret is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    # Null: the token acts for the whole account; otherwise only inside this study.
    study = models.ForeignKey(
        Study, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens"
    )
    can_write = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class RubricVersion(models.Model):
    """An immutable-once-used version of a study's rubric; criteria hang off a version."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="rubric_versions")
    version = models.PositiveIntegerField()
    notes = models.TextField(blank=True)
    # The rubric's rule (studies.spec.rubric_aggregate_validate): {} or {"kind": "all"} —
    # an output passes when every pass/fail criterion passes — or {"kind": "weighted",
    # "pass_share": x}.
    aggregate = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study", "-version"]
        constraints = version_constraints("study", "rubric_unique_version")

    def __str__(self) -> str:
        return f"{self.study_id} rubric v{self.version}"


class Criterion(models.Model):
    class Scale(models.TextChoices):
        BINARY = "binary", "Binary pass/fail"
        ORDINAL = "ordinal", "Ordinal 1..k"
        PAIRWISE = "pairwise", "Pairwise preference (A / B / tie)"
        CATEGORICAL = "categorical", "Categorical labels"
        INTERVAL = "interval", "Interval (a score on a closed range)"

    rubric = models.ForeignKey(RubricVersion, on_delete=models.CASCADE, related_name="criteria")
    key = models.SlugField(max_length=60)
    name = models.CharField(max_length=200)
    guidance = models.TextField(blank=True)
    scale = models.CharField(max_length=12, choices=Scale.choices)
    # ordinal: [{"value": 1, "label": "..."}, ...] with values 1..k;
    # categorical: [{"value": "label", "label": "shown text"}, ...]; binary/pairwise: [].
    points = models.JSONField(default=list, blank=True)
    # Ordinal (an integer point) and interval (any number in [min, max]): a rating >=
    # pass_threshold counts as a pass. Interval criteria may have none (no pass/fail reading).
    pass_threshold = ThresholdField(null=True, blank=True)
    # Interval only: the closed range of a score (min < max); null for the other scales.
    min = models.FloatField(null=True, blank=True)
    max = models.FloatField(null=True, blank=True)
    # Categorical only: the labels that count as a pass (empty: no pass/fail reading).
    pass_labels = models.JSONField(default=list, blank=True)
    is_hard_gate = models.BooleanField(default=False)
    weight = models.FloatField(default=1.0)
    # Grading needs the item's context (e.g. groundedness): the grading page shows it open.
    needs_context = models.BooleanField(default=False)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["rubric", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "key"], name="criterion_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.scale})"


class StratumDimension(models.Model):
    """One dimension of a study's strata scheme; every item gets exactly one label per
    dimension (missing inputs land in the explicit "unknown" label)."""

    class Kind(models.TextChoices):
        CATEGORICAL = "categorical", "Categorical (metadata key)"
        NUMERIC_BINS = "numeric_bins", "Numeric bins (edges or quantiles)"
        BOOLEAN = "boolean", "Boolean flag"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="dimensions")
    key = models.SlugField(max_length=60)
    name = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    # "metadata.<key>" or a derived measure: "input_length", "context_length",
    # "reference_length".
    source = models.CharField(max_length=200)
    # categorical: {"values": [...] (optional whitelist), "other": "other"};
    # numeric_bins: {"edges": [..]} or {"quantiles": [..]}, optional "labels";
    # boolean: {"true_label": "yes", "false_label": "no"}.
    config = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["study", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["study", "key"], name="dimension_unique_key")
        ]

    def __str__(self) -> str:
        return self.key


class Item(models.Model):
    class InputFormat(models.TextChoices):
        TEXT = "text", "Text"
        JSON = "json", "JSON"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="items")
    external_id = models.CharField(max_length=200)
    # JSON inputs are stored as canonical JSON text so that length measures and display are
    # the same for both formats.
    input = models.TextField()
    input_format = models.CharField(
        max_length=4, choices=InputFormat.choices, default=InputFormat.TEXT
    )
    context = models.TextField(blank=True)
    reference = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # The application's request as logged in production (an OpenAI chat-completions body:
    # messages, tools, response_format, parameters), which a candidate run's replay sends to
    # each candidate (generation/replay.py). A field of its own rather than a metadata key: it
    # is checked at ingest as a chat request, and it never collides with, or is expanded as, a
    # team's own metadata. Null: none recorded.
    recorded_request = models.JSONField(null=True, blank=True)
    # Denormalised {dimension key: stratum label}, recomputed whenever the scheme changes.
    strata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["study", "external_id"], name="item_unique_external")
        ]
        # Keyset pages (API lists, strata recompute) walk a study's items in id order.
        indexes = [models.Index(fields=["study", "id"], name="item_study_id")]

    def __str__(self) -> str:
        return self.external_id


class Candidate(models.Model):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="candidates")
    # The external id of a candidate is its name, unique in the study.
    name = models.CharField(max_length=200)
    provider = models.CharField(max_length=100, blank=True)
    model_id = models.CharField(max_length=200, blank=True)
    model_version = models.CharField(max_length=100, blank=True)
    # Used by the self-preference audit: judge and candidate of the same family.
    model_family = models.CharField(max_length=100, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    notes = models.TextField(blank=True)
    public_scores = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["study", "name"], name="candidate_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class Output(GeneratedAnswer):
    """A candidate's answer to an item, with its call's measures (`GeneratedAnswer`).

    An output whose `error` is non-empty (the generation call failed) counts as a failure,
    not as missing; `schema_valid` is null when the study has no output schema.
    """

    # study is denormalised from item/candidate so that list filters need no join.
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="outputs")
    candidate = models.ForeignKey(Candidate, on_delete=models.CASCADE, related_name="outputs")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="outputs")
    text = models.TextField(blank=True)
    parsed_json = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["candidate", "item"], name="output_unique_per_item")
        ]
        indexes = [
            models.Index(fields=["study", "candidate"], name="output_study_candidate"),
            models.Index(fields=["study", "id"], name="output_study_id"),
        ]

    def __str__(self) -> str:
        return f"output {self.pk}"

    @property
    def has_error(self) -> bool:
        return bool(self.error)


class Comparison(models.Model):
    """Two outputs for the same item, the unit that pairwise criteria judge.

    "A" always means ``output_a`` in stored values, whatever order a judge or annotator saw.
    """

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="comparisons")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="comparisons")
    output_a = models.ForeignKey(Output, on_delete=models.CASCADE, related_name="+")
    output_b = models.ForeignKey(Output, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["output_a", "output_b"], name="comparison_unique"),
            models.CheckConstraint(
                condition=~Q(output_a=models.F("output_b")), name="comparison_distinct"
            ),
        ]

    def __str__(self) -> str:
        return f"comparison {self.pk}"


# What a judgement is about: one output, or one comparison of two outputs, never both nor
# neither. Verdicts, judge jobs, annotations, gold labels, adjudications, queue entries and
# calibrated scores all hold this pair (through `OutputOrComparison`).
ONE_SUBJECT = (Q(output__isnull=False, comparison__isnull=True)
               | Q(output__isnull=True, comparison__isnull=False))


def output_link(*, related_name: str = "+",
                **options: Any) -> models.ForeignKey[Output | None, Output | None]:
    """The optional link to the output a row is about (deleted with it); `options` are the
    model's own index and constraint choices (db_index, db_constraint)."""
    return models.ForeignKey(Output, null=True, blank=True, on_delete=models.CASCADE,
                             related_name=related_name, **options)


def comparison_link(*, related_name: str = "+",
                    **options: Any) -> models.ForeignKey[Comparison | None, Comparison | None]:
    """The optional link to the comparison a row is about (deleted with it)."""
    return models.ForeignKey(Comparison, null=True, blank=True, on_delete=models.CASCADE,
                             related_name=related_name, **options)


def unique_per_subject(name: str, *fields: str,
                       after: tuple[str, ...] = ()) -> list[models.BaseConstraint]:
    """A row's uniqueness among the rows about each kind of subject: one per (fields, output,
    after) where the output is set (`<name>_output`), one per (fields, comparison, after)
    where the comparison is (`<name>_comparison`)."""
    return [models.UniqueConstraint(fields=[*fields, subject, *after],
                                    condition=Q(**{f"{subject}__isnull": False}),
                                    name=f"{name}_{subject}")
            for subject in ("output", "comparison")]


class OutputOrComparison(models.Model):
    """Abstract base of every row about one subject: the two optional links and the check that
    exactly one is set (named `<model>_one_subject`). A model that needs a reverse accessor or
    its own index choices redeclares a link with `output_link` / `comparison_link`; a model
    with constraints of its own lists them after `OutputOrComparison.Meta.constraints`
    (`unique_per_subject` builds the usual pair: one row per subject among the output rows
    and among the comparison rows)."""

    output = output_link()
    comparison = comparison_link()

    class Meta:
        abstract = True
        constraints = [models.CheckConstraint(condition=ONE_SUBJECT,
                                              name="%(class)s_one_subject")]


class AnalysisPlan(CreatedBy):
    """The pre-registered analysis plan. Locked versions are frozen; edits make a new version."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="plans")
    version = models.PositiveIntegerField()
    # {"criteria": {key: {"metric", "threshold", "direction", "every_stratum"}},
    #  "strata": [dimension keys], "min_human_labels_per_stratum": int,
    #  "deployment_mix": {dimension: {label: share}}, "confidence_level": float,
    #  "costs": {"unit", "severity": {"1".."5": cost}, "false_fail", "review"},
    #  "policy": {"kind": "cost_optimal" | "guaranteed_agreement", "alpha", "delta",
    #             "min_count", "cascade": [judge version ids]}}
    # (validated by studies.spec.plan_spec_validate; plan_costs / plan_policy read the last two
    # with their documented defaults)
    spec = models.JSONField(default=dict)
    notes = models.TextField(blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["study", "-version"]
        constraints = version_constraints("study", "plan_unique_version")

    def __str__(self) -> str:
        return f"{self.study_id} plan v{self.version}"

    @property
    def is_locked(self) -> bool:
        return self.locked_at is not None
