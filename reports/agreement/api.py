"""The agreement report's own API endpoint: one table of a finished report as CSV. Its list,
create and detail endpoints are the snapshot API's (reports/api.py), with kind agreement."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from reports import selectors
from reports.api import study_for_reports
from reviewhub.errors import Conflict, NotFound, ValidationFailed
from snapshots.models import ReportSnapshot
from studies.serializers import ErrorSerializer

from .present.export import TABLES, table_csv
from .results import AgreementResult


class ReportExportView(APIView):
    """CSV of one table: ?table=cells|confusion|bias|ceiling|system|votes|correlation_levels|
    orders|rater_groups|by_candidate (`reports.agreement.present.export.TABLES`)."""

    @extend_schema(
        operation_id="agreement_reports_export",
        summary="Download one table of a report as CSV",
        parameters=[OpenApiParameter("table", OpenApiTypes.STR, enum=list(TABLES))],
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (409, "application/json"): OpenApiResponse(
                ErrorSerializer, description="The report is not finished (pending, running "
                                             "or failed)."),
        },
    )
    def get(self, request: Request, slug: str, report_id: int) -> Any:
        study = study_for_reports(request, slug)
        table = request.query_params.get("table", "cells")
        if table not in TABLES:
            raise ValidationFailed(
                f"table must be one of {', '.join(TABLES)}",
                details={"errors": [{"path": "table", "message": "unknown table"}]},
            )
        report = selectors.report_get(study=study, report_id=report_id)
        if report is None:
            raise NotFound(f"Agreement report {report_id} not found.")
        if report.status != ReportSnapshot.Status.DONE or not report.result:
            raise Conflict(
                f"Report {report_id} is {report.status}; exports need a finished report."
            )
        response = HttpResponse(
            table_csv(AgreementResult.from_json(report.result), table),
            content_type="text/csv; charset=utf-8",
        )
        response["Content-Disposition"] = (
            f'attachment; filename="{study.slug}-report-{report.pk}-{table}.csv"'
        )
        return response


__all__ = ["ReportExportView"]
