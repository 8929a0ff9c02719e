"""REST import of other tools' exports: `POST /api/studies/<slug>/imports/<tool>` with the
export file as the body and the options as query parameters (docs/api.md, "Imports")."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from imports.generic import ScaleSpec, scale_parse
from imports.peers import TOOLS, dropped_dict, peer_import
from reviewhub.errors import NotFound, Problems
from reviewhub.middleware import LengthRequired, length_required_message
from studies import ingest
from studies.access import study_get_for_actor
from studies.ingest_views import StreamedBodyParser
from studies.models import Membership
from studies.serializers import ErrorSerializer

# The options each tool understands (query parameters); anything else is refused by name.
TOOL_OPTIONS = {
    "labelstudio": ("output_field", "pair_fields", "pair_candidates", "candidate",
                    "input_field", "task_ids", "anonymous_annotators", "predictions", "file_format",
                    "results"),
    "langfuse": ("generation", "api_scores", "candidate"),
    "promptfoo": ("values",),
    "inspect": ("candidate", "partial_as", "noanswer_as"),
}
_COMMON = ("dry_run", "scale", "pass_threshold", "family")


def _parse(request: Request, tool: str) -> tuple[dict[str, Any], dict[str, ScaleSpec],
                                                 dict[str, int], dict[str, str], bool]:
    problems = Problems()
    options: dict[str, Any] = {}
    scales: dict[str, ScaleSpec] = {}
    thresholds: dict[str, int] = {}
    families: dict[str, str] = {}
    q = request.query_params
    for name in q:
        if name not in _COMMON and name not in TOOL_OPTIONS[tool]:
            problems.add(name, f"unknown parameter for {tool} (options: "
                         f"{', '.join(TOOL_OPTIONS[tool] + _COMMON)})", **{"in": "query"})
        elif name in TOOL_OPTIONS[tool]:
            options[name] = q.get(name)
    for name in ("scale", "pass_threshold", "family"):
        for spec in q.getlist(name):
            key, sep, text = spec.partition("=")
            key = key.strip()
            if not sep or not key:
                problems.add(name, f"KEY=VALUE, got {spec!r}", **{"in": "query"})
                continue
            try:
                if name == "scale":
                    scales[key] = scale_parse(text)
                elif name == "pass_threshold":
                    thresholds[key] = int(text)
                else:
                    families[key] = text.strip()
            except ValueError as exc:
                problems.add(name, f"{spec}: {exc}", **{"in": "query"})
    dry = q.get("dry_run", "")
    if dry not in ("", "0", "1", "true", "false"):
        problems.add("dry_run", "1/true or 0/false", **{"in": "query"})
    problems.raise_if_any("The import parameters")
    return options, scales, thresholds, families, dry in ("1", "true")


class PeerImportView(APIView):
    # The export is read raw from the stream under REVIEWHUB_MAX_UPLOAD_BYTES, as bulk ingest.
    parser_classes: list[Any] = [StreamedBodyParser]
    streams_request_body = True

    @extend_schema(
        summary="Import an export of Label Studio, Langfuse, promptfoo or Inspect AI",
        description=(
            "The body is the tool's export file (Label Studio JSON, Langfuse trace JSON, "
            "promptfoo results JSON, Inspect .eval or .json log). Options the export cannot "
            "state are query parameters (docs/import-ratings.md); `dry_run=1` validates and "
            "answers what an import would do without writing. All or nothing; re-importing "
            "changes nothing. Needs the lead role and a read-write token."
        ),
        parameters=[OpenApiParameter("tool", OpenApiTypes.STR, OpenApiParameter.PATH,
                                     enum=list(TOOLS))],
        request={"application/octet-stream": OpenApiTypes.BINARY,
                 "application/json": OpenApiTypes.BINARY,
                 "application/zip": OpenApiTypes.BINARY},
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(ErrorSerializer, description="Invalid export or options."),
            403: OpenApiResponse(ErrorSerializer, description="Not a lead, or read-only token."),
            404: OpenApiResponse(ErrorSerializer, description="No such study or tool."),
            411: OpenApiResponse(ErrorSerializer, description="No Content-Length."),
            413: OpenApiResponse(ErrorSerializer, description="Body over "
                                                              "REVIEWHUB_MAX_UPLOAD_BYTES."),
        },
    )
    def post(self, request: Request, slug: str, tool: str) -> Response:
        study, _ = study_get_for_actor(
            user=request.user, slug=slug, token=request.auth, write=True,
            min_role=Membership.Role.LEAD,
        )
        if tool not in TOOLS:
            raise NotFound(f"no importer '{tool}' (tools: {', '.join(TOOLS)})")
        options, scales, thresholds, families, dry_run = _parse(request, tool)
        try:
            length: int | None = int(request.META.get("CONTENT_LENGTH") or "")
        except ValueError:
            length = None
        if length is None and request.META.get("HTTP_TRANSFER_ENCODING"):
            raise LengthRequired(length_required_message())
        with ingest.upload_spool(request.stream, content_length=length) as body:
            data = body.read()
        summary, tr = peer_import(
            study=study, tool=tool, data=data, filename=f"upload.{tool}", options=options,
            scales=scales, pass_thresholds=thresholds, families=families,
            created_by=request.user, dry_run=dry_run,
        )
        return Response({**summary.as_dict(), "dropped": dropped_dict(tr)})
