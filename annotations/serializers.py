"""Request and response shapes of the annotation API.

Request serializers check types only; the services own the domain rules (criterion keys,
severity, the revision window) so that the grading page and the API refuse the same things with
the same messages. Response serializers for annotators are allow-lists: nothing about the
candidate, the judges or other annotators is ever a field here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework import serializers

from studies.models import Membership

from .models import Adjudication, Annotation, GoldLabel, SamplingPlan
from .services import revision_deadline


class SubmitRequestSerializer(serializers.Serializer):
    submission_id = serializers.UUIDField(
        help_text="Client-generated UUID; repeating it returns the first submission's result."
    )
    labels = serializers.JSONField(
        help_text='{criterion key: {"value": str, "severity": 1..5 | null, "severity_note": str}}'
        "; pairwise values are as presented (A = left)."
    )
    rationale = serializers.CharField(required=False, allow_blank=True, default="")
    flags = serializers.JSONField(
        required=False, default=dict, help_text='{"malformed_input", "unsure", "offensive"}: bool'
    )
    time_on_task_ms = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0
    )


class ReviseRequestSerializer(serializers.Serializer):
    value = serializers.CharField()
    severity = serializers.IntegerField(required=False, allow_null=True, default=None)
    severity_note = serializers.CharField(required=False, allow_blank=True, default="")
    rationale = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None
    )
    flags = serializers.JSONField(required=False, allow_null=True, default=None)


class ProgressSerializer(serializers.Serializer):
    done_today = serializers.IntegerField()
    done_total = serializers.IntegerField()
    left_in_queue = serializers.IntegerField()
    plan_version = serializers.IntegerField(allow_null=True)


class CriterionViewSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    guidance = serializers.CharField()
    scale = serializers.CharField()
    points = serializers.ListField(child=serializers.DictField())
    pass_threshold = serializers.FloatField(
        allow_null=True, help_text="ordinal: an integer point; interval: a score (optional).")
    pass_labels = serializers.ListField(child=serializers.CharField())
    min = serializers.FloatField(allow_null=True, help_text="interval: the lowest score.")
    max = serializers.FloatField(allow_null=True, help_text="interval: the highest score.")
    failing_values = serializers.ListField(child=serializers.CharField())
    needs_context = serializers.BooleanField(
        help_text="Grading this criterion needs the item's context (the page shows it open)."
    )


class GradingContextSerializer(serializers.Serializer):
    """Documentation of `GradingContext.as_dict()` (the blind payload)."""

    assignment_id = serializers.IntegerField()
    study = serializers.DictField()
    kind = serializers.ChoiceField(choices=["output", "pairwise"])
    status = serializers.CharField()
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    item = serializers.DictField()
    output = serializers.DictField(allow_null=True)
    pair = serializers.DictField(allow_null=True)
    criteria = CriterionViewSerializer(many=True)
    severity_question = serializers.CharField()
    severity_scale = serializers.ListField(child=serializers.DictField())
    flags = serializers.DictField()


class NextResponseSerializer(serializers.Serializer):
    assignment = GradingContextSerializer(allow_null=True)
    progress = ProgressSerializer()


class HeartbeatResponseSerializer(serializers.Serializer):
    assignment_id = serializers.IntegerField()
    status = serializers.CharField()
    lease_expires_at = serializers.DateTimeField(allow_null=True)


class MyAnnotationSerializer(serializers.ModelSerializer):
    """An annotator's own annotation. Pairwise values are shown as the annotator saw them."""

    criterion = serializers.CharField(source="criterion.key")
    value = serializers.SerializerMethodField(method_name="presented_value")
    assignment_id = serializers.IntegerField(allow_null=True)
    plan_version = serializers.SerializerMethodField()
    revisable_until = serializers.SerializerMethodField()

    class Meta:
        model = Annotation
        fields = [
            "id",
            "assignment_id",
            "criterion",
            "value",
            "severity",
            "severity_note",
            "rationale",
            "flags",
            "time_on_task_ms",
            "plan_version",
            "source",
            "created_at",
            "revised_at",
            "revisable_until",
        ]

    def presented_value(self, obj: Annotation) -> str:
        if obj.assignment is not None and obj.assignment.swapped and obj.value in ("A", "B"):
            return "B" if obj.value == "A" else "A"
        return obj.value

    def get_plan_version(self, obj: Annotation) -> int | None:
        return obj.plan.version if obj.plan is not None else None

    def get_revisable_until(self, obj: Annotation) -> datetime:
        return revision_deadline(obj)


class SubmitResponseSerializer(serializers.Serializer):
    annotations = MyAnnotationSerializer(many=True)
    progress = ProgressSerializer()


class SamplingPlanCreateSerializer(serializers.Serializer):
    spec = serializers.JSONField(
        help_text='{"mode": "all"|"per_stratum"|"proportional", "subject": "output"|"comparison",'
        ' "dimension", "n", "counts" ({label: n}, per_stratum), "total", "min_per_stratum",'
        ' "disagreement_weight", "seed", "include_errors"}'
    )
    k = serializers.IntegerField(min_value=1, max_value=100, default=3)
    gold_rate = serializers.FloatField(min_value=0.0, max_value=0.99, default=0.0)


class SamplingPlanSerializer(serializers.ModelSerializer):
    rubric_version = serializers.IntegerField(source="rubric.version")
    created_by = serializers.CharField(source="created_by.username", default=None)
    summary = serializers.JSONField(
        read_only=True,
        help_text='{"seed", "population": {stratum: N_h}, "allocation": {stratum: n_h}, '
        '"entries", "gold_available", "gold_entries", "carried_over_annotators", "warnings", '
        '"designs": {stratum: {"design": "census"|"take_all"|"srswor"|"pps_systematic"|"none", '
        '"population", "drawn", "certainty", "pi_min", "pi_max"}}, '
        '"draw_kinds": {"random"|"census"|"gold"|"escalation": count}}; plans drawn before '
        "inclusion probabilities were recorded have no designs or draw_kinds.",
    )

    class Meta:
        model = SamplingPlan
        fields = [
            "version",
            "rubric_version",
            "spec",
            "k",
            "gold_rate",
            "is_active",
            "summary",
            "created_by",
            "created_at",
            "superseded_at",
        ]


class StratumQueueRowSerializer(serializers.Serializer):
    stratum = serializers.CharField()
    entries = serializers.IntegerField()
    complete = serializers.IntegerField()
    needed = serializers.IntegerField()
    leased = serializers.IntegerField()
    done = serializers.IntegerField()
    gold_entries = serializers.IntegerField()


class AnnotatorStatsRowSerializer(serializers.Serializer):
    annotator_id = serializers.IntegerField()
    username = serializers.CharField()
    submitted = serializers.IntegerField()
    submitted_last_hour = serializers.IntegerField()
    submitted_today = serializers.IntegerField()
    per_active_hour = serializers.FloatField(allow_null=True)
    median_time_on_task_ms = serializers.FloatField(allow_null=True)
    skipped = serializers.IntegerField()
    gold_labels = serializers.IntegerField()
    gold_correct = serializers.IntegerField()
    gold_accuracy = serializers.FloatField(allow_null=True)
    imported = serializers.IntegerField(
        help_text="Subjects labelled outside the grading page (imported or before the plan)."
    )


class ProgressResponseSerializer(serializers.Serializer):
    plan = SamplingPlanSerializer(allow_null=True)
    strata = StratumQueueRowSerializer(many=True)
    annotators = AnnotatorStatsRowSerializer(many=True)


class DisagreementRowSerializer(serializers.Serializer):
    criterion_key = serializers.CharField()
    criterion_id = serializers.IntegerField()
    subject = serializers.CharField()
    subject_id = serializers.IntegerField()
    item_external_id = serializers.CharField()
    human_values = serializers.DictField(child=serializers.IntegerField())
    n_annotators = serializers.IntegerField()
    human_majority = serializers.CharField(allow_null=True)
    humans_disagree = serializers.BooleanField()
    judge_values = serializers.DictField(child=serializers.IntegerField())
    judges_disagree = serializers.BooleanField()
    adjudicated_value = serializers.CharField(allow_null=True)
    adjudication_note = serializers.CharField()


class SubjectLabelRequestSerializer(serializers.Serializer):
    criterion = serializers.CharField(help_text="Criterion key in the study's latest rubric.")
    output = serializers.IntegerField(required=False, allow_null=True, default=None)
    comparison = serializers.IntegerField(required=False, allow_null=True, default=None)
    value = serializers.CharField(help_text="Canonical value (pairwise: A = output_a).")
    note = serializers.CharField(required=False, allow_blank=True, default="")


class AdjudicationSerializer(serializers.ModelSerializer):
    criterion = serializers.CharField(source="criterion.key")
    adjudicated_by = serializers.CharField(source="adjudicated_by.username")

    class Meta:
        model = Adjudication
        fields = [
            "id",
            "criterion",
            "output_id",
            "comparison_id",
            "value",
            "note",
            "adjudicated_by",
            "created_at",
        ]


class GoldLabelSerializer(serializers.ModelSerializer):
    criterion = serializers.CharField(source="criterion.key")

    class Meta:
        model = GoldLabel
        fields = ["id", "criterion", "output_id", "comparison_id", "value", "created_at"]


class InviteRequestSerializer(serializers.Serializer):
    username = serializers.CharField(required=False, allow_blank=True, default="")
    email = serializers.CharField(required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(choices=Membership.Role.choices, default="annotator")


class MemberSerializer(serializers.Serializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.CharField()
    role = serializers.CharField()


class InviteResponseSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["invited", "created", "added"],
        help_text="invited: waiting for the account to accept (the same answer whether or not "
        "the name exists); created: a new account; added: an existing member's role changed, "
        "or staff added the account.")
    username = serializers.CharField()
    role = serializers.CharField()
    user_id = serializers.IntegerField(allow_null=True, help_text="Null when `invited`.")
    email = serializers.CharField(help_text="Only for an account created by this call.")
    one_time_password = serializers.CharField(
        allow_null=True, help_text="Only when the account was created by this call; shown once."
    )


class InvitationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    study = serializers.CharField(source="study.slug")
    study_name = serializers.CharField(source="study.name")
    role = serializers.CharField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()


class PasswordResetResponseSerializer(serializers.Serializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField()
    one_time_password = serializers.CharField()


def member_dict(user: Any, role: str) -> dict[str, Any]:
    return {"user_id": user.pk, "username": user.username, "email": user.email, "role": role}
