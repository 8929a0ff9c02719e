"""REST views for report snapshots: validate -> service / selector -> serialize.

One pair of views serves every kind; each kind has its own URLs (reports/agreement/,
reports/calibration/), so a snapshot of one kind is not found under another kind's URL."""

from __future__ import annotations

from typing import Any, ClassVar

from django.urls import reverse
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.api.pagination import PAGE_PARAMETERS, DefaultCursorPagination, paginated
from reviewhub.capabilities import Capability
from reviewhub.errors import NotFound, Problems
from snapshots.models import ReportSnapshot
from studies.access import judge_data_need, study_access_get
from studies.models import AnalysisPlan, Study
from studies.serializers import ErrorSerializer

from . import selectors, services
from .selection.actions import next_labels_plan_create
from .selection.results import SelectionResult


def study_for_reports(request: Request, slug: str, *, write: bool = False) -> Study:
    """Leads create, leads and viewers read. Annotators grade blind, so they may not see judge
    figures or disagreeing examples even though their role ranks above viewers (the rule is
    `reviewhub.capabilities`')."""
    return study_access_get(
        user=request.user, slug=slug, token=request.auth,
        need=judge_data_need(write=write),
        messages={Capability.VIEW_JUDGE_DATA:
                  "Agreement reports are for leads and viewers; annotators grade blind."},
    ).study


class ReportCreateSerializer(serializers.Serializer):
    params = serializers.DictField(required=False, default=dict)
    plan_version = serializers.IntegerField(required=False, min_value=1)


class ReportSerializer(serializers.ModelSerializer):
    plan_version = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = ReportSnapshot
        fields = [
            "id",
            "kind",
            "status",
            "params",
            "plan_version",
            "input_fingerprint",
            "error",
            "created_at",
            "started_at",
            "computed_at",
            "url",
        ]

    def get_plan_version(self, obj: ReportSnapshot) -> int | None:
        return obj.plan.version if obj.plan_id and obj.plan else None

    def get_url(self, obj: ReportSnapshot) -> str:
        if obj.kind == ReportSnapshot.Kind.AGREEMENT:
            return reverse("reports-api-detail",
                           kwargs={"slug": obj.study.slug, "report_id": obj.pk})
        return reverse(f"reports-api-{obj.kind}-detail",
                       kwargs={"slug": obj.study.slug, "snapshot_id": obj.pk})


class ReportDetailSerializer(ReportSerializer):
    class Meta(ReportSerializer.Meta):
        fields = [*ReportSerializer.Meta.fields, "result"]


class ReportListCreateView(APIView):
    """GET: the study's reports (cursor pages, no results); POST: build a new report (202)."""

    kind: ClassVar[str] = ReportSnapshot.Kind.AGREEMENT

    @extend_schema(operation_id="agreement_reports_list",
                   summary="List the study's agreement reports", parameters=PAGE_PARAMETERS,
                   responses=paginated(ReportSerializer))
    def get(self, request: Request, slug: str) -> Response:
        study = study_for_reports(request, slug)
        paginator = DefaultCursorPagination()
        qs = selectors.reports_for_study(study=study, kind=self.kind).select_related("study")
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(ReportSerializer(page, many=True).data)

    @extend_schema(operation_id="agreement_reports_create",
                   summary="Build an agreement report", request=ReportCreateSerializer,
                   responses={202: ReportSerializer})
    def post(self, request: Request, slug: str) -> Response:
        study = study_for_reports(request, slug, write=True)
        ser = ReportCreateSerializer(data=request.data)
        if not ser.is_valid():
            raise Problems.from_field_errors(ser.errors).error("The request")
        plan = None
        version = ser.validated_data.get("plan_version")
        if version is not None:
            plan = AnalysisPlan.objects.filter(study=study, version=version).first()
            if plan is None:
                raise NotFound(f"Analysis plan version {version} not found.")
        report = services.report_build(
            study=study,
            kind=self.kind,
            params=ser.validated_data.get("params") or {},
            plan=plan,
            created_by=request.user,
        )
        report.study = study
        return Response(ReportSerializer(report).data, status=status.HTTP_202_ACCEPTED)


class ReportDetailView(APIView):
    kind: ClassVar[str] = ReportSnapshot.Kind.AGREEMENT

    @extend_schema(operation_id="agreement_reports_detail",
                   summary="An agreement report with its results", responses=ReportDetailSerializer)
    def get(self, request: Request, slug: str, report_id: int) -> Response:
        study = study_for_reports(request, slug)
        report = selectors.report_get(study=study, report_id=report_id, kind=self.kind)
        if report is None:
            raise NotFound(f"{self.kind.capitalize()} report {report_id} not found.")
        return Response(ReportDetailSerializer(report).data)


class CalibrationReportListCreateView(ReportListCreateView):
    """Calibration snapshots (docs/calibration.md): their calibrated scores are served by
    /calibrated-scores; the snapshot holds the curves, diagnostics, costs and thresholds."""

    kind = ReportSnapshot.Kind.CALIBRATION

    @extend_schema(operation_id="calibration_reports_list",
                   summary="List the study's calibration reports", parameters=PAGE_PARAMETERS,
                   responses=paginated(ReportSerializer))
    def get(self, request: Request, slug: str) -> Response:
        return super().get(request, slug)

    @extend_schema(operation_id="calibration_reports_create",
                   summary="Build a calibration report", request=ReportCreateSerializer,
                   responses={202: ReportSerializer})
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)


class CalibrationReportDetailView(ReportDetailView):
    kind = ReportSnapshot.Kind.CALIBRATION

    @extend_schema(operation_id="calibration_reports_detail",
                   summary="A calibration report with its results",
                   responses=ReportDetailSerializer)
    def get(self, request: Request, slug: str, snapshot_id: int) -> Response:
        return super().get(request, slug, snapshot_id)


def _openapi_30(schema: Any) -> Any:
    """A JSON Schema (draft 2020-12, as the result types derive it) in OpenAPI 3.0's dialect:
    ``anyOf [X, {"type": "null"}]`` becomes X with ``nullable: true``, ``const`` a one-value
    ``enum``."""
    if isinstance(schema, list):
        return [_openapi_30(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$schema":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "anyOf":
            others = [v for v in value if v != {"type": "null"}]
            if len(others) < len(value):
                out["nullable"] = True
            if len(others) == 1:
                out.update(_openapi_30(others[0]))
            else:
                out["anyOf"] = _openapi_30(others)
        elif key in ("properties", "additionalProperties", "items"):
            if key == "properties":
                out[key] = {k: _openapi_30(v) for k, v in value.items()}
            else:
                out[key] = _openapi_30(value)
        else:
            out[key] = value
    return out


def _selection_result_schema() -> dict[str, Any]:
    """The selection result's JSON Schema in the OpenAPI document."""
    schema: dict[str, Any] = _openapi_30(SelectionResult.json_schema())
    schema["nullable"] = True
    return schema


@extend_schema_field(_selection_result_schema())
class SelectionResultField(serializers.JSONField):
    """The stored selection result (typed in the schema; null until the snapshot is done)."""


class SelectionReportDetailSerializer(ReportSerializer):
    result = SelectionResultField(allow_null=True, read_only=True)

    class Meta(ReportSerializer.Meta):
        fields = [*ReportSerializer.Meta.fields, "result"]


class SelectionReportListCreateView(ReportListCreateView):
    """Selection snapshots (docs/reports.md, "Selection report"): which candidate to ship, per
    stratum and for the deployment mix, with prediction-powered estimates and hard gates."""

    kind = ReportSnapshot.Kind.SELECTION

    @extend_schema(operation_id="selection_reports_list",
                   summary="List the study's selection reports", parameters=PAGE_PARAMETERS,
                   responses=paginated(ReportSerializer))
    def get(self, request: Request, slug: str) -> Response:
        return super().get(request, slug)

    @extend_schema(
        operation_id="selection_reports_create",
        summary="Build a selection report", request=ReportCreateSerializer,
        responses={202: ReportSerializer, 400: OpenApiResponse(
            ErrorSerializer, description="A bad parameter or mix; details.errors names each "
                                         "field (params.mix.<label>, "
                                         "plan.deployment_mix.<dimension>.unknown, ...).")},
    )
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)


class SelectionReportDetailView(ReportDetailView):
    kind = ReportSnapshot.Kind.SELECTION

    @extend_schema(operation_id="selection_reports_detail",
                   summary="A selection report with its decision and results",
                   responses=SelectionReportDetailSerializer)
    def get(self, request: Request, slug: str, snapshot_id: int) -> Response:
        study = study_for_reports(request, slug)
        report = selectors.report_get(study=study, report_id=snapshot_id, kind=self.kind)
        if report is None:
            raise NotFound(f"Selection report {snapshot_id} not found.")
        return Response(SelectionReportDetailSerializer(report).data)


class NextLabelsPlanSerializer(serializers.Serializer):
    plan_id = serializers.IntegerField()
    plan_version = serializers.IntegerField()
    snapshot = serializers.IntegerField()
    dimension = serializers.CharField(allow_null=True)
    requested = serializers.DictField(child=serializers.IntegerField(),
                                      help_text="Extra human labels per stratum the report "
                                                "asked for.")
    drawn = serializers.DictField(child=serializers.IntegerField(),
                                  help_text="Outputs the plan draws per stratum: the requested "
                                            "labels times the candidates compared.")
    drawn_per_stratum = serializers.IntegerField(help_text="The largest of `drawn`.")
    entries = serializers.IntegerField(help_text="Queue entries of the new plan.")
    note = serializers.CharField()


class SelectionNextLabelsView(APIView):
    @extend_schema(
        operation_id="selection_reports_next_labels",
        summary="Create the sampling plan of a too-close report's next labels",
        description="Leads only. A new sampling plan version (it supersedes the active plan) "
                    "drawing at random, per stratum of the report's dimension, the labels the "
                    "report asks for there (times the candidates compared).",
        request=None,
        responses={201: NextLabelsPlanSerializer, 409: OpenApiResponse(
            ErrorSerializer, description="The report is not finished or asks for no labels.")},
    )
    def post(self, request: Request, slug: str, snapshot_id: int) -> Response:
        study = study_for_reports(request, slug, write=True)
        report = selectors.report_get(study=study, report_id=snapshot_id,
                                      kind=ReportSnapshot.Kind.SELECTION)
        if report is None:
            raise NotFound(f"Selection report {snapshot_id} not found.")
        made = next_labels_plan_create(study=study, snapshot=report, user=request.user)
        summary = made.plan.summary if isinstance(made.plan.summary, dict) else {}
        body = {"plan_id": made.plan.pk, "plan_version": made.plan.version,
                "snapshot": made.snapshot_id, "dimension": made.dimension,
                "requested": made.requested, "drawn": dict(made.plan.spec.get("counts") or {}),
                "drawn_per_stratum": made.drawn_per_stratum,
                "entries": int(summary.get("entries", 0)), "note": made.note}
        return Response(body, status=status.HTTP_201_CREATED)
