"""REST views of a deployment's Langfuse source: its settings and "pull now".

The source names where traffic is pulled from and which environment variables hold the keys:
a lead's business, read and written by leads only (a read-only token may read it).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from studies.access import Capability

from . import langfuse_pull, selectors
from .api import ERRORS, TAGS, endpoint_schema
from .models import LangfuseSource

SOURCE_ERRORS = {**ERRORS, 409: OpenApiResponse(
    description="A source exists already (create), there is none (update, pull), or the "
                "deployment takes no traffic.")}


def _deployment(request: Request, deployment_id: int, *, write: bool) -> Any:
    need = [Capability.LEAD, Capability.VIEW_JUDGE_DATA] + ([Capability.WRITE] if write else [])
    deployment, _ = selectors.deployment_access_get(
        user=request.user, token=request.auth, deployment_id=deployment_id, need=need)
    return deployment


class LangfuseSourceSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="The Langfuse base URL (e.g. https://cloud.langfuse."
                                           "com); must be under the base-URL allow-list.")
    public_key_env = serializers.CharField(help_text="NAME of the variable holding the public "
                                                     "key (never the key).")
    secret_key_env = serializers.CharField(help_text="NAME of the variable holding the secret "
                                                     "key (never the key).")
    filters = serializers.DictField(required=False, help_text='{"name", "environment", '
                                    '"trace_name", "tags": [...]}')
    start_from = serializers.DateTimeField(required=False, help_text="The cursor: pull "
                                           "observations that started at or after this "
                                           "(default: now).")


class LangfuseSourceDetail(APIView):
    @endpoint_schema("deployment_langfuse_read",
                     "Read the deployment's Langfuse source, its cursor and last error",
                     errors=SOURCE_ERRORS)
    def get(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=False)
        source = LangfuseSource.objects.filter(deployment=deployment).first()
        return Response({"source": langfuse_pull.source_json(source) if source else None})

    @endpoint_schema("deployment_langfuse_create",
                     "Pull the deployment's traffic from a Langfuse project",
                     request=LangfuseSourceSerializer, status=201, errors=SOURCE_ERRORS)
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        source = langfuse_pull.source_create(deployment=deployment, raw=request.data)
        return Response({"source": langfuse_pull.source_json(source)},
                        status=status.HTTP_201_CREATED)

    @endpoint_schema("deployment_langfuse_update",
                     "Change the Langfuse source's host, key names, filters or cursor",
                     request=LangfuseSourceSerializer(partial=True), errors=SOURCE_ERRORS)
    def patch(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        source = langfuse_pull.source_update(deployment=deployment, raw=request.data)
        return Response({"source": langfuse_pull.source_json(source)})

    @extend_schema(operation_id="deployment_langfuse_delete", tags=TAGS,
                   summary="Stop pulling from Langfuse (the rows pulled stay)",
                   responses={204: None, **SOURCE_ERRORS})
    def delete(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        LangfuseSource.objects.filter(deployment=deployment).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class LangfusePull(APIView):
    @endpoint_schema("deployment_langfuse_pull", "Pull new observations from Langfuse now",
                     description="The tick's pull, run now: pages committed, the cursor moved, "
                                 "a failure recorded on the source (and in the answer's error).",
                     request=None, errors=SOURCE_ERRORS)
    def post(self, request: Request, deployment_id: int) -> Response:
        deployment = _deployment(request, deployment_id, write=True)
        source = langfuse_pull.source_get(deployment=deployment)
        report = langfuse_pull.source_pull(source=source)
        return Response({"pull": report, "source": langfuse_pull.source_json(source)})
