"""REST API for judge runs and verdicts (thin views: validate → service/selector → serialize).

    POST /api/studies/<slug>/judge-runs                    start a run (lead, write)
    GET  /api/studies/<slug>/judge-runs                    list runs with progress
    GET  /api/studies/<slug>/judge-runs/<id>               one run with progress
    POST /api/studies/<slug>/judge-runs/<id>/cancel        cancel (queued jobs → cancelled)
    POST /api/studies/<slug>/judge-runs/<id>/resume        resume (optional new budgets)
    POST /api/studies/<slug>/judge-runs/<id>/rerun         new run, same spec, skips finished
    GET  /api/studies/<slug>/verdicts?run=&criterion=&candidate=&judge_version=&scored=

All of them go through `studies.access.api_study` and need the lead role: verdicts are lead data.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.api.pagination import DefaultCursorPagination
from reviewhub.errors import Problems, ValidationFailed
from studies.access import api_study
from studies.models import Membership

from . import runs, selectors
from .models import JudgeRun, JudgeVersion, Verdict


def run_data(run: JudgeRun, *, progress: bool = True) -> dict[str, Any]:
    version = run.judge_version
    data: dict[str, Any] = {
        "id": run.pk,
        "judge": {"id": version.judge_id, "name": version.judge.name, "kind": version.judge.kind},
        "judge_version": {"id": version.pk, "version": version.version,
                          "content_hash": version.content_hash},
        "criteria": [c.key for c in run.criteria.all()],
        "selection": run.selection,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "max_cost": run.max_cost,
        "max_calls": run.max_calls,
        "created_by": run.created_by.get_username() if run.created_by else None,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }
    if progress:
        data["progress"] = selectors.judge_run_progress(run=run)
        data["outcome"] = selectors.judge_run_outcome_for(run=run)
    return data


def verdict_data(v: Verdict) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": v.pk,
        "judge_version": v.judge_version_id,
        "judge": v.judge_version.judge.name,
        "criterion": v.criterion.key,
        "run": v.run_id,
        "is_scored": v.is_scored,
        "value": v.value,
        "value_num": v.value_num,
        "probability": v.probability,
        "rationale": v.rationale,
        "n_samples": v.n_samples,
        "details": v.details,
        "source": v.source,
        "updated_at": v.updated_at,
    }
    if v.output is not None:
        data["output"] = {"id": v.output_id, "candidate": v.output.candidate.name,
                          "item": v.output.item.external_id}
    if v.comparison is not None:
        c = v.comparison
        data["comparison"] = {"id": c.pk, "item": c.item.external_id,
                              "a": {"output": c.output_a_id,
                                    "candidate": c.output_a.candidate.name},
                              "b": {"output": c.output_b_id,
                                    "candidate": c.output_b.candidate.name}}
    return data


class RunStartSerializer(serializers.Serializer[Any]):
    judge_version = serializers.IntegerField(min_value=1)
    criteria = serializers.ListField(child=serializers.CharField(max_length=60),
                                     allow_empty=False, max_length=200)
    selection = serializers.DictField(required=False, default=dict)
    max_cost = serializers.FloatField(required=False, allow_null=True, min_value=0)
    max_calls = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class BudgetSerializer(serializers.Serializer[Any]):
    max_cost = serializers.FloatField(required=False, allow_null=True, min_value=0)
    max_calls = serializers.IntegerField(required=False, allow_null=True, min_value=1)


def _valid(serializer: serializers.Serializer[Any]) -> dict[str, Any]:
    if not serializer.is_valid():
        raise Problems.from_field_errors(serializer.errors).error("The request")
    return dict(serializer.validated_data)


class JudgeRunListCreate(APIView):
    @extend_schema(operation_id="judge_runs_list",
                   summary="List the study's judge runs with job counts and outcome",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=Membership.Role.LEAD).study
        paginator = DefaultCursorPagination()
        page = paginator.paginate_queryset(selectors.judge_run_list(study=study), request,
                                           view=self) or []
        rows = []
        for r, jobs, outcome in selectors.judge_run_page_outcomes(runs=page):
            row = run_data(r, progress=False)
            row["jobs"] = jobs
            row["calls_made"] = r.calls_made
            row["outcome"] = outcome
            rows.append(row)
        return paginator.get_paginated_response(rows)

    @extend_schema(operation_id="judge_runs_create",
                   summary="Start a judge run", request=RunStartSerializer,
                   responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, min_role=Membership.Role.LEAD).study
        data = _valid(RunStartSerializer(data=request.data))
        version = JudgeVersion.objects.select_related("judge").filter(
            pk=data["judge_version"], judge__study=study
        ).first()
        if version is None:
            raise ValidationFailed.at(
                "judge_version", "judge_version is not a judge version of this study",
            )
        run = runs.judge_run_start(
            study=study, judge_version=version,
            criteria=selectors.criteria_for_refs(study=study, refs=data["criteria"]),
            selection=data.get("selection") or {"kind": "all"}, max_cost=data.get("max_cost"),
            max_calls=data.get("max_calls"), created_by=request.user,
        )
        run = selectors.judge_run_get(study=study, run_id=run.pk)
        return Response(run_data(run), status=status.HTTP_201_CREATED)


class JudgeRunDetail(APIView):
    @extend_schema(operation_id="judge_runs_detail",
                   summary="A judge run with its progress and outcome",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str, run_id: int) -> Response:
        study = api_study(request, slug, min_role=Membership.Role.LEAD).study
        return Response(run_data(selectors.judge_run_get(study=study, run_id=run_id)))


class JudgeRunCancel(APIView):
    @extend_schema(operation_id="judge_runs_cancel",
                   summary="Cancel a judge run", request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str, run_id: int) -> Response:
        study = api_study(request, slug, write=True, min_role=Membership.Role.LEAD).study
        run = runs.judge_run_cancel(run=selectors.judge_run_get(study=study, run_id=run_id))
        return Response(run_data(selectors.judge_run_get(study=study, run_id=run.pk)))


class JudgeRunResume(APIView):
    @extend_schema(operation_id="judge_runs_resume",
                   summary="Resume a judge run (optionally with new budgets)",
                   request=BudgetSerializer,
                   responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str, run_id: int) -> Response:
        study = api_study(request, slug, write=True, min_role=Membership.Role.LEAD).study
        data = _valid(BudgetSerializer(data=request.data or {}))
        run = runs.judge_run_resume(run=selectors.judge_run_get(study=study, run_id=run_id),
                                    max_cost=data.get("max_cost"),
                                    max_calls=data.get("max_calls"))
        return Response(run_data(selectors.judge_run_get(study=study, run_id=run.pk)))


class JudgeRunRerun(APIView):
    @extend_schema(operation_id="judge_runs_rerun",
                   summary="Re-run a judge run's spec as a new run", request=None,
                   responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, slug: str, run_id: int) -> Response:
        study = api_study(request, slug, write=True, min_role=Membership.Role.LEAD).study
        new = runs.judge_run_rerun(run=selectors.judge_run_get(study=study, run_id=run_id),
                                   created_by=request.user)
        return Response(run_data(selectors.judge_run_get(study=study, run_id=new.pk)),
                        status=status.HTTP_201_CREATED)


class VerdictList(APIView):
    @extend_schema(operation_id="verdicts_list",
                   summary="List the study's verdicts (filter: run, criterion, candidate, ...)",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=Membership.Role.LEAD).study
        qs = selectors.verdict_list(study=study, filters=request.query_params)
        paginator = DefaultCursorPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response([verdict_data(v) for v in page or []])
