"""Serializers of the judges API. Configs are returned as stored: they never contain a key
(only the NAME of the environment variable that holds one)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .models import Judge, JudgeVersion


class JudgeSerializer(serializers.ModelSerializer):
    # Null once the creating account is deleted (on_delete=SET_NULL) or for seeded judges.
    created_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True)
    versions_count = serializers.IntegerField(read_only=True)
    latest_version = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = Judge
        fields = ["id", "name", "kind", "description", "created_by", "created_at",
                  "versions_count", "latest_version"]


class JudgeVersionSerializer(serializers.ModelSerializer):
    judge: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        read_only=True)
    config = serializers.JSONField(read_only=True)

    class Meta:
        model = JudgeVersion
        # simulated: the version's verdicts are simulated (its config's `simulated: true`).
        fields = ["id", "judge", "version", "content_hash", "model_family", "config",
                  "simulated", "created_at"]


class JudgeCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=Judge.Kind.choices)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    config = serializers.JSONField(
        required=False, help_text="Optional: also create version 1 from this config."
    )


class JudgeCreatedSerializer(serializers.Serializer):
    judge = JudgeSerializer()
    version = JudgeVersionSerializer(allow_null=True)


class VersionCreateSerializer(serializers.Serializer):
    config = serializers.JSONField(help_text="The judge config; see docs/judges.md.")


class VersionCreatedSerializer(serializers.Serializer):
    created = serializers.BooleanField(
        help_text="True: a new version was made; false: an identical config already existed."
    )
    version = JudgeVersionSerializer()


class PreviewRequestSerializer(serializers.Serializer):
    output_id = serializers.IntegerField(required=False, min_value=1)
    comparison_id = serializers.IntegerField(required=False, min_value=1)
    order = serializers.ChoiceField(choices=["ab", "ba"], required=False, default="ab")
    criterion_key = serializers.CharField(
        required=False, allow_blank=True,
        help_text="Default: the first criterion of the current rubric that fits the subject.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("output_id" in attrs) == ("comparison_id" in attrs):
            raise serializers.ValidationError(
                {"output_id": "Give exactly one of output_id and comparison_id."}
            )
        return attrs


class PreviewSerializer(serializers.Serializer):
    judge_version = serializers.IntegerField()
    content_hash = serializers.CharField()
    criterion = serializers.DictField()
    subject = serializers.DictField()
    api_key_env = serializers.CharField(allow_null=True)
    method = serializers.CharField()
    url = serializers.CharField()
    headers = serializers.DictField(child=serializers.CharField(),
                                    help_text="Key-bearing headers are REDACTED.")
    body = serializers.DictField(help_text="The JSON body, exactly as it would be sent.")
    body_text = serializers.CharField(help_text="The body bytes as text.")
    messages = serializers.ListField(child=serializers.DictField())


class ConnectionTestRequestSerializer(serializers.Serializer):
    config = serializers.DictField(
        help_text="An LLM judge config, as for creating a version (docs/judges.md).")
    criterion_key = serializers.CharField(
        required=False, allow_blank=True,
        help_text="Default: the first single-output criterion of the current rubric.")
    output_id = serializers.IntegerField(
        required=False, min_value=1, help_text="Default: the study's first output.")


class ConnectionTestSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    latency_ms = serializers.FloatField(allow_null=True)
    url = serializers.CharField()
    model = serializers.CharField()
    criterion = serializers.CharField()
    output_id = serializers.IntegerField()
    value = serializers.CharField(help_text="The parsed verdict ('' when the test failed).")
    value_num = serializers.FloatField(allow_null=True)
    probability = serializers.FloatField(allow_null=True)
    rationale = serializers.CharField()
    raw_response = serializers.CharField(
        help_text="The answer's text (or the error body), shown only for a listed base URL.")
    error = serializers.CharField()
    error_kind = serializers.CharField(
        help_text="connection | timeout | rate_limited | server_error | refused | bad_response "
                  "| parse | not_sent | other; '' when ok.")
    error_label = serializers.CharField()
    http_status = serializers.IntegerField(allow_null=True)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
