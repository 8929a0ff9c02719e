"""REST views for judges and judge versions (runs: `judges/run_api.py`).

Thin: access check (`studies.access.api_study`; 404 without access) → validate → service or
selector → serialize. Leads write; leads and viewers read; annotators grade blind and see no
judge data.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.api.pagination import DefaultCursorPagination
from reviewhub.capabilities import Capability
from reviewhub.errors import ValidationFailed
from studies.access import api_study, study_get_for_actor
from studies.models import Comparison, Membership
from studies.serializers import error_responses

from . import push, selectors, services
from .connection_test import judge_connection_test
from .models import Judge, JudgeVersion
from .preview import judge_version_preview
from .serializers import (
    ConnectionTestRequestSerializer,
    ConnectionTestSerializer,
    JudgeCreatedSerializer,
    JudgeCreateSerializer,
    JudgeSerializer,
    JudgeVersionSerializer,
    PreviewRequestSerializer,
    PreviewSerializer,
    VersionCreatedSerializer,
    VersionCreateSerializer,
)

ERRORS = error_responses({
    400: "Validation failed (details.errors[].path names the offending field).",
    403: "Read-only token or role too low.",
    404: "No such study/judge, or no access.",
})
TAGS = ["judges"]


# What a caller without sight of judge data is told.
_BLIND = {Capability.VIEW_JUDGE_DATA:
          "Annotators grade blind: judge data is for leads and viewers."}


def _validated(serializer_cls: type, request: Request) -> dict[str, Any]:
    serializer = serializer_cls(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class JudgeListCreate(generics.ListAPIView):
    serializer_class = JudgeSerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Judge]:
        if getattr(self, "swagger_fake_view", False):
            return Judge.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True,
                          messages=_BLIND).study
        return selectors.judges_list(study=study)

    @extend_schema(tags=TAGS, summary="List the study's judges",
                   responses={200: JudgeSerializer(many=True), **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(tags=TAGS, summary="Create a judge (optionally with version 1)",
                   request=JudgeCreateSerializer,
                   responses={201: JudgeCreatedSerializer,
                              **error_responses({409: "A judge with this name exists."}),
                              **ERRORS})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, judge_data=True, write=True, messages=_BLIND).study
        data = _validated(JudgeCreateSerializer, request)
        judge, version = services.judge_create_with_config(
            study=study, name=data["name"], kind=data["kind"],
            description=data.get("description", ""), config=data.get("config"),
            created_by=request.user,
        )
        judge = selectors.judge_get(study=study, judge_id=judge.pk)
        return Response({"judge": JudgeSerializer(judge).data,
                         "version": JudgeVersionSerializer(version).data if version else None},
                        status=status.HTTP_201_CREATED)


class JudgeDetail(APIView):
    @extend_schema(tags=TAGS, summary="A judge", responses={200: JudgeSerializer, **ERRORS})
    def get(self, request: Request, slug: str, judge_id: int) -> Response:
        study = api_study(request, slug, judge_data=True, messages=_BLIND).study
        return Response(JudgeSerializer(selectors.judge_get(study=study, judge_id=judge_id)).data)


class JudgeVersionListCreate(generics.ListAPIView):
    serializer_class = JudgeVersionSerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[JudgeVersion]:
        if getattr(self, "swagger_fake_view", False):
            return JudgeVersion.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True, messages=_BLIND).study
        judge = selectors.judge_get(study=study, judge_id=self.kwargs["judge_id"])
        return selectors.judge_versions_list(judge=judge)

    @extend_schema(tags=TAGS, summary="List a judge's versions (newest first)",
                   responses={200: JudgeVersionSerializer(many=True), **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        tags=TAGS, summary="Get or create the version for a config",
        description="Validates and canonicalises the config and hashes it. An identical config "
                    "returns the existing version (200, created=false); anything else makes "
                    "version n+1 (201, created=true). Versions are immutable.",
        request=VersionCreateSerializer,
        responses={200: VersionCreatedSerializer, 201: VersionCreatedSerializer, **ERRORS},
    )
    def post(self, request: Request, slug: str, judge_id: int) -> Response:
        study = api_study(request, slug, judge_data=True, write=True, messages=_BLIND).study
        judge = selectors.judge_get(study=study, judge_id=judge_id)
        data = _validated(VersionCreateSerializer, request)
        outcome = services.judge_version_get_or_create(judge=judge, config=data["config"])
        return Response(
            {"created": outcome.created, "version": JudgeVersionSerializer(outcome.version).data},
            status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK,
        )


class JudgeVersionDetail(APIView):
    @extend_schema(tags=TAGS, summary="A judge version (its config holds no key)",
                   responses={200: JudgeVersionSerializer, **ERRORS})
    def get(self, request: Request, slug: str, judge_id: int, version_id: int) -> Response:
        study = api_study(request, slug, judge_data=True, messages=_BLIND).study
        judge = selectors.judge_get(study=study, judge_id=judge_id)
        version = selectors.judge_version_get(judge=judge, version_id=version_id)
        return Response(JudgeVersionSerializer(version).data)


class JudgeVersionPreview(APIView):
    @extend_schema(
        tags=TAGS, summary="Preview the exact provider request, without sending it",
        description="Renders the request this version would send for one output (or one "
                    "comparison in one order): URL, headers (the API key REDACTED; the "
                    "environment is never read) and the JSON body. Nothing is called.",
        request=PreviewRequestSerializer, responses={200: PreviewSerializer, **ERRORS},
    )
    def post(self, request: Request, slug: str, judge_id: int, version_id: int) -> Response:
        # Leads only: the preview shows item inputs and outputs, which is lead data.
        study, _role = study_get_for_actor(user=request.user, slug=slug, token=request.auth,
                                           min_role=Membership.Role.LEAD)
        judge = selectors.judge_get(study=study, judge_id=judge_id)
        version = selectors.judge_version_get(judge=judge, version_id=version_id)
        data = _validated(PreviewRequestSerializer, request)
        subject = selectors.preview_subject_get(study=study, output_id=data.get("output_id"),
                                                comparison_id=data.get("comparison_id"))
        pairwise = isinstance(subject, Comparison)
        criterion = selectors.preview_criterion_get(
            study=study, criterion_key=data.get("criterion_key") or None, pairwise=pairwise)
        if not pairwise and data.get("order") not in (None, "", "ab"):
            raise ValidationFailed.at("order", "order applies to comparisons only.")
        preview = judge_version_preview(version=version, criterion=criterion, subject=subject,
                                        order=data.get("order", "ab") if pairwise else "")
        return Response(preview)


class JudgeConnectionTest(APIView):
    @extend_schema(
        tags=TAGS, summary="Test a judge config with one real call",
        description="Validates the config as saving it would (allow-lists, key by environment "
                    "variable name), then makes one real call on one output of the study (the "
                    "first, or output_id) for one single-output criterion, and answers the "
                    "latency and the parsed verdict, or the error and its kind. Nothing is "
                    "stored. A config the allow-lists refuse is a 400; a call that fails is a "
                    "200 with ok false.",
        request=ConnectionTestRequestSerializer,
        responses={200: ConnectionTestSerializer, **ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        # Lead and a write token: the call costs money and shows item text to the lead.
        study, _role = study_get_for_actor(user=request.user, slug=slug, token=request.auth,
                                           write=True, min_role=Membership.Role.LEAD)
        data = _validated(ConnectionTestRequestSerializer, request)
        result = judge_connection_test(study=study, config=data["config"],
                                       criterion_key=data.get("criterion_key") or None,
                                       output_id=data.get("output_id"))
        return Response(result.as_dict())


class VerdictPushSerializer(serializers.Serializer):
    """The body of `POST /api/studies/<slug>/verdicts/bulk` (docs/api.md, "Verdicts from judges
    run elsewhere"); the rows are checked by `push.verdicts_push_bulk`."""

    judge = serializers.DictField(help_text="{name, config_hash, external?, model_family?, "
                                            "config?}: the judge version by name and config "
                                            "hash; external: true creates it on first use.")
    verdicts = serializers.ListField(
        child=serializers.DictField(), help_text="Up to 10,000 of {criterion, item, candidate | "
        "candidate_a + candidate_b, value, probability?, sample?, order?, rationale?}.")


class VerdictPushResultSerializer(serializers.Serializer):
    judge_version = serializers.DictField()
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()


class VerdictBulkPush(APIView):
    @extend_schema(
        tags=TAGS, operation_id="verdicts_bulk_push",
        summary="Push verdicts of a judge run elsewhere (idempotent, all or nothing)",
        description="Upserts by (judge version, criterion, subject, sample): a sample sent "
                    "again replaces that sample; a subject's samples combine by the judge-run "
                    "rules. `probability` is P(pass) where the criterion has a pass reading, "
                    "P(output_a better) for comparisons, P(the given label) for categorical "
                    "criteria. Any invalid verdict: 400 naming verdicts[i].field, nothing "
                    "written.",
        request=VerdictPushSerializer,
        responses={200: VerdictPushResultSerializer, 201: VerdictPushResultSerializer, **ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, judge_data=True, write=True, messages=_BLIND).study
        body = request.data if isinstance(request.data, dict) else {}
        if not isinstance(request.data, dict):
            raise ValidationFailed.at("$", "the body is a JSON object {judge, verdicts}")
        unknown = sorted(set(body) - {"judge", "verdicts"})
        if unknown:
            raise ValidationFailed.at(unknown[0], "unknown field")
        outcome = push.verdicts_push_bulk(
            study=study, judge=body.get("judge"), verdicts=body.get("verdicts"),
            created_by=request.user,
        )
        v = outcome.version
        return Response(
            {"judge_version": {"id": v.pk, "judge": v.judge.name, "version": v.version,
                               "config_hash": v.content_hash, "created": outcome.version_created},
             "created": outcome.counts.created, "updated": outcome.counts.updated,
             "unchanged": outcome.counts.unchanged},
            status=status.HTTP_201_CREATED if outcome.counts.created else status.HTTP_200_OK,
        )
