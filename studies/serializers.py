"""Serializers for the studies API.

Response serializers are read-only views of the models. Request serializers describe the
request bodies for the OpenAPI schema; the rules themselves live in `studies/spec.py` (shared
with `import_study`), so REST and CLI report the same problems with the same JSON paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from reviewhub.api.schema import ERROR_DETAILS_SCHEMA

from .criteria import criterion_allowed_values
from .models import (
    AnalysisPlan,
    ApiToken,
    Candidate,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)


@extend_schema_field(ERROR_DETAILS_SCHEMA)
class ErrorDetailsField(serializers.JSONField):
    """`details` of an error: for bad input, the one shape {"errors": [{path, message}],
    "error_count"} (reviewhub.errors)."""


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = ErrorDetailsField()


class ErrorSerializer(serializers.Serializer):
    """The one error body: {"error": {"code", "message", "details"}}."""

    error = ErrorDetailSerializer()


def error_responses(descriptions: Mapping[int, str]) -> dict[int, OpenApiResponse]:
    """An endpoint's error statuses for the OpenAPI schema: each answers with the one error
    body, described by what that status means there."""
    return {status: OpenApiResponse(ErrorSerializer, description=text)
            for status, text in descriptions.items()}


# --- Studies ----------------------------------------------------------------------------------

class StudySerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta:
        model = Study
        fields = ["id", "slug", "name", "task_description", "deployment_context",
                  "run_conditions", "output_schema", "status", "show_reference", "is_simulated",
                  "owner", "created_at", "updated_at"]
        read_only_fields = fields


class StudyWriteSerializer(serializers.Serializer):
    """Create: name and slug are required. PATCH: any subset (the slug is fixed; status only
    moves draft -> open -> closed)."""

    name = serializers.CharField(max_length=200)
    slug = serializers.SlugField(max_length=80)
    task_description = serializers.CharField(required=False, allow_blank=True)
    deployment_context = serializers.CharField(required=False, allow_blank=True)
    run_conditions = serializers.JSONField(required=False,
                                           help_text="Production prompt template and "
                                                     "generation parameters (an object).")
    output_schema = serializers.JSONField(required=False, allow_null=True,
                                          help_text="JSON Schema that outputs must satisfy.")
    status = serializers.ChoiceField(choices=Study.Status.choices, required=False)
    show_reference = serializers.BooleanField(required=False)
    is_simulated = serializers.BooleanField(required=False)


class StudyPatchSerializer(StudyWriteSerializer):
    name = serializers.CharField(max_length=200, required=False)
    slug = serializers.SlugField(max_length=80, required=False)


class MembershipSerializer(serializers.ModelSerializer):
    user_id = serializers.IntegerField(read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["user_id", "username", "role", "created_at"]
        read_only_fields = fields


class MembershipWriteSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MembershipRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices)


# --- Rubric -----------------------------------------------------------------------------------

NEEDS_CONTEXT_HELP = ("Grading this criterion needs the item's context (e.g. groundedness): the "
                      "grading page shows the context open instead of collapsing a long one.")

class _ThresholdOutField(serializers.FloatField):
    """A pass threshold as stored: an ordinal point stays an integer (3, not 3.0)."""

    def to_representation(self, value: Any) -> Any:
        return value


class CriterionSerializer(serializers.ModelSerializer):
    allowed_values = serializers.SerializerMethodField()
    pass_threshold = _ThresholdOutField(read_only=True, allow_null=True)

    class Meta:
        model = Criterion
        fields = ["id", "key", "name", "guidance", "scale", "points", "pass_threshold",
                  "pass_labels", "is_hard_gate", "weight", "needs_context", "min", "max",
                  "position", "allowed_values"]
        read_only_fields = fields
        extra_kwargs = {"needs_context": {"help_text": NEEDS_CONTEXT_HELP}}

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_allowed_values(self, obj: Criterion) -> list[str]:
        return criterion_allowed_values(obj)


class RubricVersionSerializer(serializers.ModelSerializer):
    criteria = CriterionSerializer(many=True, read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True,
                                       allow_null=True, default=None)

    class Meta:
        model = RubricVersion
        fields = ["version", "notes", "aggregate", "created_by", "created_at", "criteria"]
        read_only_fields = fields


class RubricSaveResponseSerializer(RubricVersionSerializer):
    outcome = serializers.ChoiceField(
        choices=["created", "updated", "unchanged"], read_only=True,
        help_text="created: a new version (the previous one was in use or none existed); "
                  "updated: the current version edited in place; unchanged: nothing to do.",
    )

    class Meta(RubricVersionSerializer.Meta):
        fields = [*RubricVersionSerializer.Meta.fields, "outcome"]
        read_only_fields = fields


class CriterionInputSerializer(serializers.Serializer):
    key = serializers.SlugField(max_length=60)
    name = serializers.CharField(required=False)
    guidance = serializers.CharField(required=False, allow_blank=True)
    scale = serializers.ChoiceField(choices=Criterion.Scale.choices)
    points = serializers.ListField(child=serializers.JSONField(), required=False,
                                   help_text="ordinal: [{value: 1..k, label}]; categorical: "
                                             "[{value, label}] or label strings.")
    pass_threshold = serializers.FloatField(
        required=False, allow_null=True,
        help_text="ordinal: an integer point; interval (optional): scores >= it pass.")
    min = serializers.FloatField(required=False, help_text="interval: the lowest score.")
    max = serializers.FloatField(required=False, help_text="interval: the highest score.")
    pass_labels = serializers.ListField(child=serializers.CharField(), required=False)
    is_hard_gate = serializers.BooleanField(required=False)
    weight = serializers.FloatField(required=False, min_value=0)
    needs_context = serializers.BooleanField(required=False, default=False,
                                             help_text=NEEDS_CONTEXT_HELP)


class RubricUpdateSerializer(serializers.Serializer):
    criteria = CriterionInputSerializer(many=True)
    notes = serializers.CharField(required=False, allow_blank=True)
    aggregate = serializers.JSONField(
        required=False, help_text="The rubric's rule: {kind: all} (default: every pass/fail "
        "criterion passes) or {kind: weighted, pass_share: 0.75}.")


# --- Strata -----------------------------------------------------------------------------------

class DimensionSerializer(serializers.ModelSerializer):
    class Meta:
        model = StratumDimension
        fields = ["key", "name", "kind", "source", "config"]


class StrataSerializer(serializers.Serializer):
    dimensions = DimensionSerializer(many=True)
    counts = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()), read_only=True,
        help_text="Items per label, per dimension.",
    )


class StrataUpdateResultSerializer(StrataSerializer):
    """PUT's answer: GET's plus how many items were relabelled (a read-only field is required
    in the response schema, so GET, which has no such count, must not share this one)."""

    items_changed = serializers.IntegerField(read_only=True,
                                             help_text="Items whose labels changed.")


class StrataUpdateSerializer(serializers.Serializer):
    dimensions = DimensionSerializer(many=True)


# --- Items, candidates, outputs ---------------------------------------------------------------

class ItemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Item
        fields = ["id", "external_id", "input", "input_format", "context", "reference",
                  "metadata", "strata", "created_at", "updated_at"]
        read_only_fields = fields


class ItemDetailSerializer(ItemSerializer):
    """One item, with the recorded production request it was ingested with, so a client can
    check what a replay will send; lists leave it out (it can be many times the input)."""

    recorded_request = serializers.JSONField(
        read_only=True, allow_null=True,
        help_text="The recorded chat request as ingested (docs/generation.md §7), or null.")

    class Meta(ItemSerializer.Meta):
        fields = [*ItemSerializer.Meta.fields, "recorded_request"]
        read_only_fields = fields


class CandidateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Candidate
        fields = ["id", "name", "provider", "model_id", "model_version", "model_family",
                  "parameters", "notes", "public_scores", "created_at", "updated_at"]
        read_only_fields = fields


class OutputSerializer(serializers.ModelSerializer):
    candidate = serializers.CharField(source="candidate.name", read_only=True)
    item = serializers.IntegerField(source="item_id", read_only=True)
    item_external_id = serializers.CharField(source="item.external_id", read_only=True)
    item_strata = serializers.JSONField(source="item.strata", read_only=True)
    has_error = serializers.BooleanField(read_only=True)

    class Meta:
        model = Output
        fields = ["id", "candidate", "item", "item_external_id", "item_strata", "text",
                  "parsed_json", "latency_ms", "tokens_in", "tokens_out", "cost", "error",
                  "has_error", "finish_reason", "schema_valid", "metadata", "created_at",
                  "updated_at"]
        read_only_fields = fields


# --- Analysis plans ---------------------------------------------------------------------------

class AnalysisPlanSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True,
                                       allow_null=True, default=None)
    locked_by = serializers.CharField(source="locked_by.username", read_only=True,
                                      allow_null=True, default=None)
    is_locked = serializers.BooleanField(read_only=True)

    class Meta:
        model = AnalysisPlan
        fields = ["version", "spec", "notes", "created_by", "created_at", "is_locked",
                  "locked_at", "locked_by"]
        read_only_fields = fields


class PlanWriteSerializer(serializers.Serializer):
    spec = serializers.JSONField(help_text="See docs/study-spec.md#analysis-plan.")
    notes = serializers.CharField(required=False, allow_blank=True)


class PlanPatchSerializer(serializers.Serializer):
    spec = serializers.JSONField(required=False)
    notes = serializers.CharField(required=False, allow_blank=True)


class PlanNewVersionSerializer(serializers.Serializer):
    spec = serializers.JSONField(required=False,
                                 help_text="Omitted: the spec of the plan in the URL.")
    notes = serializers.CharField(required=False, allow_blank=True)


# --- Tokens -----------------------------------------------------------------------------------

class ApiTokenSerializer(serializers.ModelSerializer):
    study = serializers.CharField(source="study.slug", read_only=True, allow_null=True,
                                  default=None)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "study", "can_write", "created_at", "last_used_at",
                  "revoked_at"]
        read_only_fields = fields


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    secret = serializers.SerializerMethodField(
        help_text="The secret, shown this once; only its hash is stored.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "secret"]
        read_only_fields = fields

    def get_secret(self, obj: Any) -> str:
        return str(self.context["secret"])


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    study = serializers.SlugField(required=False, allow_null=True,
                                  help_text="Slug of the one study the token may act in; "
                                            "omit for the whole account.")
    can_write = serializers.BooleanField(default=False)
