"""REST views of monitoring: validate -> service or selector -> serialize.

Monitoring data is judge data: leads and viewers read it, annotators (who grade blind) get
403, and every write (a deployment, traffic, labels, a window, an alert's state) is a lead's
with a credential that may write. A deployment whose study the caller cannot see is 404.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.errors import Problems, ValidationFailed
from studies.access import judge_data_need, study_access_get
from studies.serializers import error_responses

from . import alerts, reopen, selectors, services
from .window.results import WindowResult

TAGS = ["monitoring"]
ERRORS = error_responses({
    400: "Invalid input; details.errors names the row and field.",
    403: "Annotators grade blind; read-only token on a write.",
    404: "No such deployment, or no access.",
    409: "The deployment takes no traffic, or the alert is resolved.",
})


def endpoint_schema(operation_id: str, summary: str, *, status: int = 200,
                    errors: Mapping[int, Any] = ERRORS, **schema: Any) -> Any:
    """The schema of one monitoring operation: the monitoring tag, and a JSON object answered
    with `status` beside the operation's error answers."""
    return extend_schema(operation_id=operation_id, tags=TAGS, summary=summary,
                         responses={status: OpenApiTypes.OBJECT, **errors}, **schema)


def _deployment(request: Request, deployment_id: int, *, write: bool = False) -> Any:
    deployment, _ = selectors.deployment_access_get(
        user=request.user, token=request.auth, deployment_id=deployment_id, write=write)
    return deployment


class DeploymentCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    candidate = serializers.CharField(max_length=200, help_text="The shipped candidate's name.")
    plan_version = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1,
                                            help_text="A locked plan (default: the latest "
                                                      "locked one).")
    shadow_candidates = serializers.ListField(child=serializers.CharField(max_length=200),
                                              required=False, max_length=20)
    judge_versions = serializers.ListField(child=serializers.IntegerField(
        min_value=1, max_value=2**63 - 1), required=False, max_length=20)
    calibration_snapshot = serializers.IntegerField(required=False, min_value=1,
                                                    max_value=2**63 - 1)
    watch_dimension = serializers.CharField(required=False, allow_blank=True, max_length=60)
    sampling = serializers.DictField(required=False, help_text='{"judge": {"default": 0.1, '
                                     '"<stratum>": r}, "human": {...}}')
    alerting = serializers.DictField(required=False, help_text='{"alpha", "cooldown_minutes", '
                                     '"pass_rate_floor", "agreement_floor", "webhook_url", '
                                     '"emails"}')


class DeploymentList(APIView):
    @endpoint_schema("deployments_list", "List a study's deployments")
    def get(self, request: Request, slug: str) -> Response:
        study = study_access_get(user=request.user, slug=slug, token=request.auth,
                                 need=judge_data_need(write=False)).study
        rows = selectors.deployments_list(study=study).prefetch_related(
            "shadow_candidates", "judge_versions")
        return Response({"results": [selectors.deployment_json(d) for d in rows]})

    @endpoint_schema("deployments_create",
                     "Deploy a study's shipped candidate under its locked plan",
                     request=DeploymentCreateSerializer, status=201)
    def post(self, request: Request, slug: str) -> Response:
        study = study_access_get(user=request.user, slug=slug, token=request.auth,
                                 need=judge_data_need(write=True)).study
        ser = DeploymentCreateSerializer(data=request.data)
        if not ser.is_valid():
            raise Problems.from_field_errors(ser.errors).error("The deployment")
        v = ser.validated_data
        deployment = services.deployment_create(
            study=study, name=v["name"], candidate=v["candidate"],
            plan_version=v.get("plan_version"),
            shadow_candidates=v.get("shadow_candidates", []),
            judge_version_ids=v.get("judge_versions", []),
            calibration_snapshot_id=v.get("calibration_snapshot"),
            watch_dimension=v.get("watch_dimension"), sampling_spec=v.get("sampling"),
            alerting=v.get("alerting"), created_by=request.user)
        return Response(selectors.deployment_json(deployment), status=status.HTTP_201_CREATED)


class DeploymentDetail(APIView):
    @endpoint_schema("deployments_detail", "Read a deployment")
    def get(self, request: Request, deployment_id: int) -> Response:
        return Response(selectors.deployment_json(_deployment(request, deployment_id)))


class TrafficCreate(APIView):
    @endpoint_schema(
        "deployment_traffic_create",
        "Record a batch of live traffic rows (idempotent on request_id)",
        description="A JSON array of rows: request_id and input required; output, metadata "
                    "(the strata fields), occurred_at, latency_ms, tokens_in, tokens_out, "
                    "cost, error, finish_reason, schema_valid, context, request optional. "
                    "Validated whole: a 400 names each bad row and field and nothing is "
                    "written. A request_id already recorded is counted as unchanged.",
        request=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        return Response(services.traffic_ingest(deployment=deployment, rows=request.data))


class LabelsCreate(APIView):
    @endpoint_schema(
        "deployment_labels_create",
        "Record judge verdicts and human grades of traffic rows",
        description="A JSON array of {request_id, source: judge|human, rater, value (0..1 or "
                    "true/false; 1 = pass), decision (judge only: pass|fail|escalate)}. A "
                    "repeated (request_id, source, rater) replaces the value.",
        request=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        return Response(services.traffic_labels_record(deployment=deployment,
                                                       labels=request.data))


GRANULARITY = OpenApiParameter("granularity", OpenApiTypes.STR, enum=["hour", "day"],
                               description="Only windows of this granularity.")


class WindowList(APIView):
    @endpoint_schema("deployment_windows_list",
                     "List a deployment's computed windows with their results",
                     parameters=[GRANULARITY])
    def get(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id)
        granularity = _granularity(request)
        rows = selectors.windows_list(deployment=deployment, granularity=granularity)
        return Response({"results": [selectors.window_json(w) for w in rows]})

    @endpoint_schema("deployment_windows_compute",
                     "Compute one window now (idempotent: the same window is updated)",
                     request=OpenApiTypes.OBJECT)
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        params = services.params_or_400(request.data)
        window = services.window_compute(deployment=deployment, params=params)
        return Response(selectors.window_json(window))


def _granularity(request: Request) -> str | None:
    value = request.query_params.get("granularity")
    if value not in (None, "", "hour", "day"):
        raise ValidationFailed.at("granularity", "must be 'hour' or 'day'")
    return value or None


EXPORT_COLUMNS = ("granularity", "start", "end", "stratum", "n_rows", "share", "plan_share",
                  "n_judged", "n_human", "n_escalated", "pass_judge", "pass_human",
                  "pass_ppi", "pass_ppi_low", "pass_ppi_high", "error_rate",
                  "latency_p95_ms", "cost_per_1000", "refusal_rate", "injection_rate",
                  "mean_output_chars", "pass_calibrated", "pass_calibrated_low",
                  "pass_calibrated_high", "judge_agreement", "judge_agreement_low",
                  "judge_agreement_high", "selection_agreement", "human_ceiling",
                  "judge_trust")


def export_rows(windows: Any) -> list[dict[str, Any]]:
    """One row per window and stratum ("" = all traffic): the CSV export's rows."""
    out = []
    for w in windows:
        result = WindowResult.from_json(w.result)
        for cell in (result.overall, *result.strata):
            ppi = cell.pass_ppi or {}
            out.append({
                "granularity": w.granularity, "start": w.start.isoformat(),
                "end": w.end.isoformat(), "stratum": cell.stratum, "n_rows": cell.n_rows,
                "share": cell.share, "plan_share": cell.plan_share,
                "n_judged": cell.n_judged, "n_human": cell.n_human,
                "n_escalated": cell.n_escalated,
                "pass_judge": (cell.pass_judge or {}).get("value"),
                "pass_human": (cell.pass_human or {}).get("value"),
                "pass_ppi": ppi.get("value"), "pass_ppi_low": ppi.get("ci_low"),
                "pass_ppi_high": ppi.get("ci_high"), "error_rate": cell.error_rate,
                "latency_p95_ms": cell.latency_p95_ms, "cost_per_1000": cell.cost_per_1000,
                "refusal_rate": cell.refusal_rate, "injection_rate": cell.injection_rate,
                "mean_output_chars": cell.mean_output_chars,
                **_trust_columns(cell),
            })
    return out


def _trust_columns(cell: Any) -> dict[str, Any]:
    cal = cell.pass_calibrated or {}
    trust = cell.judge_trust or {}
    agreement = trust.get("agreement") or {}
    return {"pass_calibrated": cal.get("value"), "pass_calibrated_low": cal.get("ci_low"),
            "pass_calibrated_high": cal.get("ci_high"),
            "judge_agreement": agreement.get("value", cell.judge_agreement),
            "judge_agreement_low": agreement.get("ci_low"),
            "judge_agreement_high": agreement.get("ci_high"),
            "selection_agreement": (trust.get("selection") or {}).get("value"),
            "human_ceiling": trust.get("ceiling"), "judge_trust": trust.get("state")}


class WindowExport(APIView):
    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # DRF reads `?format=` for renderer selection; here it names the export's format.
        return (JSONRenderer(), JSONRenderer.media_type)

    @extend_schema(
        operation_id="deployment_windows_export", tags=TAGS,
        summary="Export a deployment's windows per stratum as CSV or JSON",
        parameters=[GRANULARITY, OpenApiParameter("format", OpenApiTypes.STR,
                                                  enum=["csv", "json"])],
        responses={(200, "text/csv"): OpenApiTypes.STR,
                   (200, "application/json"): OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, deployment_id: int) -> Any:
        deployment = _deployment(request, deployment_id)
        fmt = request.query_params.get("format") or "csv"
        if fmt not in ("csv", "json"):
            raise ValidationFailed.at("format", "must be 'csv' or 'json'")
        rows = export_rows(selectors.windows_list(deployment=deployment,
                                                  granularity=_granularity(request)))
        if fmt == "json":
            return Response({"columns": list(EXPORT_COLUMNS), "rows": rows})
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS)
        writer.writeheader()
        for row in rows:
            # A stratum label is user data: a leading formula character is neutralised.
            label = str(row["stratum"])
            if label[:1] in ("=", "+", "-", "@"):
                row = {**row, "stratum": "'" + label}
            writer.writerow(row)
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="deployment-{deployment.pk}-windows.csv"')
        return response


class AlertList(APIView):
    @endpoint_schema("deployment_alerts_list", "List a deployment's alerts with their history")
    def get(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id)
        return Response({"results": [selectors.alert_json(a)
                                     for a in selectors.alerts_list(deployment=deployment)]})


class AlertAcknowledge(APIView):
    @endpoint_schema("deployment_alert_acknowledge", "Acknowledge an alert", request=None)
    def post(self, request: Request, deployment_id: int, alert_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        alert = selectors.alert_get(deployment=deployment, alert_id=alert_id)
        alert = alerts.alert_acknowledge(alert=alert, user=request.user, now=timezone.now())
        return Response(selectors.alert_json(alert))


class AlertResolve(APIView):
    @endpoint_schema("deployment_alert_resolve",
                     "Resolve an alert (a new one may open after the cool-down)", request=None)
    def post(self, request: Request, deployment_id: int, alert_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        alert = selectors.alert_get(deployment=deployment, alert_id=alert_id)
        alert = alerts.alert_resolve(alert=alert, user=request.user, now=timezone.now())
        return Response(selectors.alert_json(alert))


class ReopenCreate(APIView):
    @endpoint_schema(
        "deployment_selection_reopen",
        "Re-open the selection: a new draft study seeded with recent live traffic",
        description="Copies the study's task, latest rubric and strata scheme and the "
                    "deployment's candidates; the items are the last `days` (default 7) of "
                    "successful requests, at most `limit` (default 2000), with the shipped "
                    "candidate's live answers as outputs.",
        request=OpenApiTypes.OBJECT,
        status=201,
    )
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        raw = request.data if isinstance(request.data, dict) else {}
        problems = Problems()
        days, limit = raw.get("days", 7), raw.get("limit", 2000)
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 90:
            problems.add("days", "must be a whole number of days from 1 to 90")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50_000:
            problems.add("limit", "must be a whole number from 1 to 50000")
        problems.raise_if_any("The request")
        study = reopen.selection_reopen(deployment=deployment, user=request.user, days=days,
                                        limit=limit)
        return Response({"study": study.slug, "items": study.items.count()},
                        status=status.HTTP_201_CREATED)
