"""REST views of calibrated scores: validate -> selector or service -> serialize.

Leads and viewers read calibrated scores (superusers act as leads); annotators grade blind, so
judge verdicts and what they imply are 403 for them, as on every other judge-data endpoint.
Sending escalations to humans is a lead's write.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.api.pagination import PAGE_PARAMETERS, IdCursorPagination, paginated
from reviewhub.capabilities import Capability
from reviewhub.errors import Problems, ValidationFailed
from studies.access import api_study
from studies.serializers import error_responses

from . import escalations, export, selectors
from .models import CalibratedScore

TAGS = ["calibration"]


# What a caller without sight of judge data is told.
_BLIND = {Capability.VIEW_JUDGE_DATA:
          "Calibrated scores are for leads and viewers; annotators grade blind."}


def _filters(request: Request) -> dict[str, list[str]]:
    return {k: v for k, v in request.query_params.lists()}


def _snapshot(request: Request) -> int | None:
    values = request.query_params.getlist("snapshot")
    values = [v for v in values if v != ""]
    return selectors.parse_id(values[-1], "snapshot") if values else None


class ProvenanceSerializer(serializers.Serializer):
    judge_version = serializers.IntegerField(
        allow_null=True, help_text="The judge version whose verdict was calibrated (null for "
                                   "the rubric's row and rows decided by humans alone).")
    judge_version_hash = serializers.CharField(allow_blank=True)
    snapshot_id = serializers.IntegerField(help_text="The calibration snapshot (report id).")
    plan_version = serializers.IntegerField(allow_null=True,
                                            help_text="The analysis plan version.")
    n_labels = serializers.IntegerField(help_text="Human labels behind the curve (the cell's "
                                                  "own, after shrinkage toward the pool).")


class CalibratedScoreSerializer(serializers.Serializer):
    """Documents the row shape; rows are built by `calibration.selectors.score_row`."""

    id = serializers.IntegerField()
    output_id = serializers.IntegerField(allow_null=True)
    comparison_id = serializers.IntegerField(allow_null=True)
    item_external_id = serializers.CharField(allow_null=True)
    candidate = serializers.CharField(allow_null=True, help_text="The output's candidate name.")
    strata = serializers.DictField(help_text="The item's stratum labels, by dimension.")
    stratum = serializers.CharField(allow_blank=True, help_text='The calibration cell the curve '
                                    'came from ("" = the whole study).')
    criterion = serializers.CharField(help_text='Criterion key, or "rubric" for the rubric\'s '
                                                'aggregate.')
    raw_value = serializers.CharField(allow_blank=True, help_text="The judge's raw value.")
    raw_confidence = serializers.FloatField(allow_null=True)
    p_pass = serializers.FloatField(help_text="Calibrated P(a human would pass this).")
    p_low = serializers.FloatField(allow_null=True)
    p_high = serializers.FloatField(allow_null=True)
    decision = serializers.ChoiceField(choices=CalibratedScore.Decision.choices)
    expected_cost = serializers.FloatField()
    # The row's field is called "source"; on a serializer the name shadows Field.source.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=CalibratedScore.Source.choices)
    evidence_at = serializers.DateTimeField(allow_null=True, help_text="The newest verdict, "
                                            "annotation or adjudication behind the row.")
    provenance = ProvenanceSerializer()


SNAPSHOT_PARAM = OpenApiParameter(
    "snapshot", OpenApiTypes.INT,
    description="A calibration snapshot id (default: the study's latest). 404 if the study has "
                "no such snapshot.")
FILTER_PARAMETERS = [
    SNAPSHOT_PARAM,
    OpenApiParameter("candidate", OpenApiTypes.STR, many=True,
                     description="Candidate name; repeat for any of several."),
    OpenApiParameter("criterion", OpenApiTypes.STR, many=True,
                     description='Criterion key, or "rubric"; repeat for any of several.'),
    OpenApiParameter("stratum", OpenApiTypes.STR, many=True,
                     description="Calibration cell label, e.g. `language=de|length=long`."),
    OpenApiParameter("judge_version", OpenApiTypes.INT, many=True,
                     description="Judge version id; repeat for any of several."),
    OpenApiParameter("decision", OpenApiTypes.STR, many=True,
                     enum=list(selectors.DECISIONS)),
    OpenApiParameter("source", OpenApiTypes.STR, many=True, enum=list(selectors.SOURCES)),
    OpenApiParameter("changed_since", OpenApiTypes.DATETIME,
                     description="Rows whose newest evidence is at or after this ISO 8601 "
                                 "date-time (naive = UTC)."),
]
ERRORS = error_responses({
    400: "A filter did not validate (details.errors names the parameter).",
    403: "Annotators grade blind; read-only token on a write.",
    404: "No such study, no access to it, or no such snapshot in it.",
})


class CalibratedScoreList(APIView):
    @extend_schema(
        operation_id="calibrated_scores_list", tags=TAGS,
        summary="Calibrated scores of a snapshot (the latest by default)",
        parameters=[*FILTER_PARAMETERS, *PAGE_PARAMETERS],
        responses={200: paginated(CalibratedScoreSerializer), **ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, judge_data=True, messages=_BLIND).study
        qs = selectors.calibrated_scores_query(
            study=study, snapshot_id=_snapshot(request), filters=_filters(request)
        ).values_list(*selectors.COLUMNS)
        paginator = _TuplePagination()
        page = paginator.paginate_queryset(qs, request, view=self) or []
        return paginator.get_paginated_response([selectors.score_row(r) for r in page])


class _TuplePagination(IdCursorPagination):
    """Cursor pages over `values_list` rows: the cursor position is the row's id (column 0)."""

    def _get_position_from_instance(self, instance: Any, ordering: Any) -> str:
        return str(instance[0])

    def decode_cursor(self, request: Request) -> Any:
        # A hand-made cursor whose position is no id would reach the id filter: 404 like any
        # other invalid cursor, not a 500.
        cursor = super().decode_cursor(request)
        position = None if cursor is None or cursor.position is None else str(cursor.position)
        if position is not None and not (
            position.isascii() and position.isdigit() and int(position) <= selectors.MAX_ID
        ):
            raise drf_exceptions.NotFound(self.invalid_cursor_message)
        return cursor


class _FormatIsAParameter(APIView):
    """DRF reads `?format=` for renderer selection; here it names the export format instead."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return (JSONRenderer(), JSONRenderer.media_type)


class CalibratedScoreExport(_FormatIsAParameter):
    @extend_schema(
        operation_id="calibrated_scores_export", tags=TAGS,
        summary="Stream every calibrated score of a snapshot as JSON Lines or CSV",
        description="JSON Lines carries the list's row shape, one object a line; CSV has the "
                    "same fields with `provenance` spread into columns and `strata` as JSON. "
                    "Same filters as the list.",
        parameters=[
            OpenApiParameter("format", OpenApiTypes.STR, enum=list(export.FORMATS),
                             description="`jsonl` (application/x-ndjson, the default) or `csv`."),
            *FILTER_PARAMETERS,
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            (200, "text/csv"): OpenApiTypes.STR,
            **ERRORS,
        },
    )
    def get(self, request: Request, slug: str) -> StreamingHttpResponse:
        study = api_study(request, slug, judge_data=True, messages=_BLIND).study
        fmt = request.query_params.get("format", "jsonl")
        if fmt not in export.FORMATS:
            raise ValidationFailed(
                "format must be 'jsonl' or 'csv'.",
                details={"errors": [{"path": "format", "message": "must be jsonl or csv"}]},
            )
        snapshot = _snapshot(request)
        qs = selectors.calibrated_scores_query(
            study=study, snapshot_id=snapshot, filters=_filters(request)
        )
        stream = export.export_jsonl(qs) if fmt == "jsonl" else export.export_csv(qs)
        response = StreamingHttpResponse(stream, content_type=export.FORMATS[fmt])
        name = f"{study.slug}-calibrated-scores{f'-{snapshot}' if snapshot else ''}.{fmt}"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class EscalationRequestSerializer(serializers.Serializer):
    snapshot = serializers.IntegerField(required=False, min_value=1, max_value=selectors.MAX_ID,
                                        help_text="Calibration snapshot id (default: latest).")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1_000_000,
                                     help_text="At most this many outputs, the most uncertain "
                                               "first.")
    keep_sampling = serializers.BooleanField(
        required=False, default=True,
        help_text="Carry the active plan's unfinished entries (random draws, gold) into the new "
                  "version, so sampling goes on beside the escalations (default). false: the "
                  "new version holds the escalations alone.")


class EscalationPlanSerializer(serializers.Serializer):
    plan_id = serializers.IntegerField()
    plan_version = serializers.IntegerField()
    snapshot = serializers.IntegerField()
    subject = serializers.ChoiceField(choices=["output", "comparison"])
    outputs = serializers.IntegerField(help_text="Entries of the new plan version: the "
                                                 "escalations and the entries carried over.")
    escalated = serializers.IntegerField(help_text="Escalation entries (an escalated subject "
                                                   "already drawn at random keeps that draw).")
    carried_over = serializers.IntegerField(help_text="Unfinished entries of the active plan "
                                                      "carried into the new version.")
    created = serializers.BooleanField(help_text="False when the snapshot's escalations had "
                                                 "been sent before (the existing plan).")


class EscalationCreate(APIView):
    @extend_schema(
        operation_id="calibrated_scores_escalate", tags=TAGS,
        summary="Send a snapshot's escalated outputs to humans (a new sampling plan version)",
        description="Idempotent per snapshot: a second call answers 200 with the plan made by "
                    "the first. The entries are drawn as `escalation` (not a random sample).",
        request=EscalationRequestSerializer,
        responses={201: EscalationPlanSerializer, 200: EscalationPlanSerializer, **ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, judge_data=True, write=True, messages=_BLIND).study
        ser = EscalationRequestSerializer(data=request.data)
        if not ser.is_valid():
            raise Problems.from_field_errors(ser.errors).error("The request")
        result = escalations.escalations_plan_create(
            study=study, snapshot_id=ser.validated_data.get("snapshot"),
            created_by=request.user, limit=ser.validated_data.get("limit"),
            keep_sampling=ser.validated_data.get("keep_sampling", True),
        )
        body = {
            "plan_id": result.plan.pk,
            "plan_version": result.plan.version,
            "snapshot": result.snapshot_id,
            "subject": result.subject,
            "outputs": result.subjects,
            "escalated": result.escalated,
            "carried_over": result.carried_over,
            "created": result.created,
        }
        return Response(body, status=status.HTTP_201_CREATED if result.created
                        else status.HTTP_200_OK)
