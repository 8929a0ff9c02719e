"""REST API for candidate runs (thin views: validate → service or selector → serialize).

    GET/POST /api/studies/<slug>/generation-configs          a candidate's endpoint versions
    GET/POST /api/studies/<slug>/prompt-templates            production prompt versions
    POST     /api/studies/<slug>/prompt-templates/<id>/preview  the exact request of one item
    GET/POST /api/studies/<slug>/generation-runs             list / start a run
    POST     /api/studies/<slug>/generation-runs/estimate    the cost estimate of a run spec
    GET      /api/studies/<slug>/generation-runs/<id>        a run with its progress
    POST     /api/studies/<slug>/generation-runs/<id>/cancel cancel a run
    POST     /api/studies/<slug>/generation-runs/<id>/resume re-queue what has no result yet

Every operation needs the lead role (the configs name endpoints and key variables). Bad input
is a 400 whose details name the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from judges.providers import ProviderError
from reviewhub.errors import NotFound, ValidationFailed
from studies.access import api_study
from studies.models import Candidate, Membership, Study

from . import runs, selectors, services
from .config import MissingField
from .estimate import run_estimate
from .executor import request_preview
from .models import GenerationConfig, GenerationRun, PromptTemplate

LEAD = Membership.Role.LEAD  # every candidate-run endpoint is the lead's


def _body(request: Request) -> Mapping[str, Any]:
    if not isinstance(request.data, Mapping):
        raise ValidationFailed.at("body", "the request body must be a JSON object.")
    return request.data


def config_data(c: GenerationConfig) -> dict[str, Any]:
    return {"id": c.pk, "candidate": c.candidate.name, "version": c.version,
            "content_hash": c.content_hash, "config": c.config, "created_at": c.created_at}


def template_data(t: PromptTemplate) -> dict[str, Any]:
    return {"id": t.pk, "version": t.version, "content_hash": t.content_hash,
            "template": t.template, "created_at": t.created_at}


def run_data(run: GenerationRun, *, progress: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": run.pk, "status": run.status, "stop_reason": run.stop_reason,
        "template": {"id": run.template_id, "version": run.template.version,
                     "content_hash": run.template.content_hash},
        "concurrency": run.concurrency, "samples": run.samples, "selection": run.selection,
        "replay": run.replay, "rate": run.rate,
        "max_cost": run.max_cost, "creation_stats": run.creation_stats,
        "created_at": run.created_at, "finished_at": run.finished_at,
    }
    if progress:
        data["progress"] = selectors.generation_run_progress(run=run)
    return data


def _run_get(study: Study, run_id: int) -> GenerationRun:
    run = selectors.generation_runs_list(study=study).filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no generation run {run_id} in this study")
    return run


class _Spec:
    """The run spec of a start or estimate request, resolved against the study."""

    def __init__(self, study: Study, body: Mapping[str, Any]) -> None:
        tid = body.get("template")
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise ValidationFailed.at("template", "template must be a prompt template id.")
        template = PromptTemplate.objects.filter(study=study, pk=tid).first()
        if template is None:
            raise ValidationFailed.at("template", f"no prompt template {tid} in this study.")
        ids = body.get("configs")
        if not isinstance(ids, list) or not ids or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ValidationFailed.at("configs", "configs must be a non-empty list of "
                                                 "generation config ids.")
        configs = {c.pk: c for c in GenerationConfig.objects.select_related("candidate")
                   .filter(candidate__study=study, pk__in=ids)}
        missing = [i for i in ids if i not in configs]
        if missing:
            raise ValidationFailed.at("configs", f"no generation config {missing[0]} in this "
                                                 "study.")
        self.template = template
        self.configs = [configs[i] for i in ids]
        self.samples = body.get("samples", 1)
        self.selection = body.get("selection") or {"kind": "all"}
        if not isinstance(self.selection, Mapping):
            raise ValidationFailed.at("selection", "selection must be an object.")


class GenerationConfigListCreate(APIView):
    @extend_schema(operation_id="generation_configs_list",
                   summary="List the candidates' generation config versions",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        return Response({"results": [config_data(c) for c in
                                     selectors.generation_configs_list(study=study)]})

    @extend_schema(operation_id="generation_configs_create",
                   summary="Create (or find) a candidate's generation config version",
                   request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD, write=True).study
        body = _body(request)
        name = body.get("candidate")
        candidate = Candidate.objects.filter(study=study, name=name).first() if isinstance(
            name, str) else None
        if candidate is None:
            raise ValidationFailed.at("candidate", f"no candidate {name!r} in this study.")
        row, created = services.generation_config_create(
            candidate=candidate, config=body.get("config"), created_by=request.user)
        return Response(config_data(row),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class PromptTemplateListCreate(APIView):
    @extend_schema(operation_id="prompt_templates_list",
                   summary="List the study's production prompt template versions",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        return Response({"results": [template_data(t) for t in
                                     selectors.prompt_templates_list(study=study)]})

    @extend_schema(operation_id="prompt_templates_create",
                   summary="Create (or find) a production prompt template version",
                   request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD, write=True).study
        row, created = services.prompt_template_create(study=study, template=_body(request),
                                                       created_by=request.user)
        return Response(template_data(row),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class GenerationRunListCreate(APIView):
    @extend_schema(operation_id="generation_runs_list",
                   summary="List the study's candidate runs", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        return Response({"results": [run_data(r, progress=False) for r in
                                     selectors.generation_runs_list(study=study)[:200]]})

    @extend_schema(operation_id="generation_runs_create",
                   summary="Start a candidate run (closed loop at C requests per candidate)",
                   request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD, write=True).study
        body = _body(request)
        spec = _Spec(study, body)
        run = runs.generation_run_start(
            study=study, template=spec.template, configs=spec.configs,
            concurrency=body.get("concurrency"),  # type: ignore[arg-type]  # validated there
            samples=spec.samples, selection=spec.selection, max_cost=body.get("max_cost"),
            replay=body.get("replay", False), rate=body.get("rate"), created_by=request.user)
        return Response(run_data(_run_get(study, run.pk)), status=status.HTTP_201_CREATED)


class GenerationRunEstimate(APIView):
    # A POST only for its JSON body: it computes an estimate and stores nothing, so a read-only
    # token may call it (tests/studies/test_access.py).
    read_only_methods = ("post",)

    @extend_schema(operation_id="generation_runs_estimate",
                   summary="Estimate a candidate run's requests and cost before starting it",
                   request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        body = _body(request)
        spec = _Spec(study, body)
        _, item_ids = runs.selection_items(study=study, selection=spec.selection)
        samples = spec.samples if isinstance(spec.samples, int) and spec.samples > 0 else 1
        est = run_estimate(template=spec.template, configs=spec.configs, item_ids=item_ids,
                           samples=samples, replay=body.get("replay") is True)
        return Response({
            "items": len(item_ids), "requests": est.requests, "total_cost": est.total,
            "per_request_max": est.per_request_max,
            "candidates": [{"candidate": c.candidate, "config": c.config_id,
                            "requests": c.requests, "tokens_in": c.tokens_in,
                            "tokens_out": c.tokens_out, "cost": c.cost} for c in est.candidates],
        })


class GenerationRunDetail(APIView):
    @extend_schema(operation_id="generation_runs_detail",
                   summary="A candidate run with progress, errors by kind and measured figures",
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, slug: str, generation_run_id: int) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        return Response(run_data(_run_get(study, generation_run_id)))


class GenerationRunCancel(APIView):
    @extend_schema(operation_id="generation_runs_cancel", summary="Cancel a candidate run",
                   request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str, generation_run_id: int) -> Response:
        study = api_study(request, slug, min_role=LEAD, write=True).study
        runs.generation_run_cancel(run=_run_get(study, generation_run_id))
        return Response(run_data(_run_get(study, generation_run_id)))


class GenerationRunResume(APIView):
    @extend_schema(operation_id="generation_runs_resume",
                   summary="Resume a cancelled, stopped or stalled candidate run",
                   description="Re-queues only the (item, config version, sample) jobs with no "
                               "result yet (cancelled, failed for a transient reason, never "
                               "created); idempotent. Optional body: {\"max_cost\": USD} "
                               "replaces the budget.",
                   request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str, generation_run_id: int) -> Response:
        study = api_study(request, slug, min_role=LEAD, write=True).study
        body = request.data if isinstance(request.data, Mapping) else {}
        runs.generation_run_resume(run=_run_get(study, generation_run_id),
                                   max_cost=body.get("max_cost"))
        return Response(run_data(_run_get(study, generation_run_id)))


class PromptTemplatePreview(APIView):
    # A POST only for its JSON body: it builds the request and stores or sends nothing, so a
    # read-only token may call it (tests/studies/test_access.py).
    read_only_methods = ("post",)

    @extend_schema(operation_id="prompt_templates_preview",
                   summary="Preview the exact request a template sends to a candidate",
                   description="Body: {\"config\": generation config id, \"item\": external "
                               "id (default: the study's first item)}. Returns method, URL, "
                               "headers (key redacted), JSON body and its sha256.",
                   request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, slug: str, template_id: int) -> Response:
        study = api_study(request, slug, min_role=LEAD).study
        template = PromptTemplate.objects.select_related("study").filter(
            study=study, pk=template_id).first()
        if template is None:
            raise NotFound(f"no prompt template {template_id} in this study")
        body = _body(request)
        cid = body.get("config")
        config = GenerationConfig.objects.filter(candidate__study=study, pk=cid).first() \
            if isinstance(cid, int) and not isinstance(cid, bool) else None
        if config is None:
            raise ValidationFailed.at("config", "config must be a generation config id of this "
                                                "study.")
        ext = body.get("item")
        items = study.items.order_by("id")
        item = items.filter(external_id=ext).first() if isinstance(ext, str) else items.first()
        if item is None:
            raise ValidationFailed.at("item", f"no item {ext!r} in this study.")
        try:
            return Response(request_preview(template=template, config=config, item=item))
        except MissingField as exc:
            raise ValidationFailed.at("item", f"item {item.external_id!r}: {exc}.") from None
        except ProviderError as exc:
            raise ValidationFailed.at("config", f"the request cannot be sent: {exc}.") from None
