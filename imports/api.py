"""REST imports: other tools' exports, `POST /api/studies/<slug>/imports/<tool>` with the
export file as the body and the options as query parameters; and ratings in the generic format,
`POST /api/studies/<slug>/imports/ratings`, the file as the body or, with its texts file beside
it, as the `file` and `texts` parts of a multipart form (docs/api.md, "Imports")."""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from imports.generic import (
    PAIRWISE_CONVENTIONS,
    ScaleSpec,
    ratings_import,
    ratings_read,
    scale_parse,
)
from imports.peers import TOOLS, dropped_dict, peer_import
from reviewhub.errors import NotFound, PayloadTooLarge, Problems, ValidationFailed
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
    "promptfoo": ("values", "file_format"),
    "inspect": ("candidate", "partial_as", "noanswer_as"),
}
_COMMON = ("dry_run", "scale", "pass_threshold", "family")


def _parse(request: Request, tool: str) -> tuple[dict[str, Any], dict[str, ScaleSpec],
                                                 dict[str, int], dict[str, str], bool]:
    problems = Problems()
    options: dict[str, Any] = {}
    q = request.query_params
    for name in q:
        if name not in _COMMON and name not in TOOL_OPTIONS[tool]:
            problems.add(name, f"unknown parameter for {tool} (options: "
                         f"{', '.join(TOOL_OPTIONS[tool] + _COMMON)})", **{"in": "query"})
        elif name in TOOL_OPTIONS[tool]:
            options[name] = q.get(name)
    scales, thresholds, families, dry = _parse_common(request, problems)
    return options, scales, thresholds, families, dry


def _parse_common(request: Request, problems: Problems) -> tuple[
        dict[str, ScaleSpec], dict[str, int], dict[str, str], bool]:
    """The parameters every import takes: scale, pass_threshold, family (KEY=VALUE,
    repeatable) and dry_run; raises the problems collected so far and these together."""
    scales: dict[str, ScaleSpec] = {}
    thresholds: dict[str, int] = {}
    families: dict[str, str] = {}
    q = request.query_params
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
    return scales, thresholds, families, dry in ("1", "true")


# The second file a tool's import takes beside its export, as the command's option of the same
# name (a multipart form's part).
TOOL_PARTS = {"langfuse": ("scores", "traces")}


def _form_limit(length: int | None) -> None:
    """A multipart body needs its Content-Length under the upload limit before Django reads
    the form (it spools the parts to disk)."""
    if length is None:
        raise LengthRequired(length_required_message())
    limit = settings.REVIEWHUB_MAX_UPLOAD_BYTES
    if length > limit:
        raise PayloadTooLarge(
            f"The request body is larger than the limit of {limit:,} bytes "
            "(REVIEWHUB_MAX_UPLOAD_BYTES).", details={"limit_bytes": limit})


def _form_files(request: Request, allowed: tuple[str, ...], what: str) -> dict[str, bytes]:
    """The parts of a multipart form: `file` and the `allowed` others, as bytes."""
    files = request.FILES
    unknown = sorted(set(files) - {"file", *allowed})
    if "file" not in files or unknown:
        others = "".join(f" and optionally `{a}`" for a in allowed)
        raise ValidationFailed.at(
            "file" if "file" not in files else unknown[0],
            f"the form's parts are `file` ({what}){others}"
            + (f"; got {', '.join(unknown)}" if unknown else ""),
        )
    return {name: files[name].read() for name in files}


class PeerImportView(APIView):
    # The export is read raw from the stream under REVIEWHUB_MAX_UPLOAD_BYTES, as bulk ingest;
    # or, with a second file (a Langfuse scores export), as the parts of a multipart form.
    parser_classes: list[Any] = [MultiPartParser, StreamedBodyParser]
    streams_request_body = True

    @extend_schema(
        summary="Import an export of Label Studio, Langfuse, promptfoo or Inspect AI",
        description=(
            "The body is the tool's export file (Label Studio JSON, CSV or TSV, Langfuse trace "
            "JSON, promptfoo results JSON or CSV, Inspect .eval or .json log; a CSV needs "
            "file_format). A Langfuse scores export (and, with an observations CSV as `file`, "
            "the traces CSV) goes beside it as a multipart form (parts `file`, `scores`, "
            "`traces`). Options the export cannot "
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
        if (request.META.get("CONTENT_TYPE") or "").lower().startswith("multipart/form-data"):
            _form_limit(length)
            parts = _form_files(request, TOOL_PARTS.get(tool, ()), f"the {tool} export")
            data = parts.pop("file")
            options.update(parts)
        else:
            with ingest.upload_spool(request.stream, content_length=length) as body:
                data = body.read()
        summary, tr = peer_import(
            study=study, tool=tool, data=data, filename=f"upload.{tool}", options=options,
            scales=scales, pass_thresholds=thresholds, families=families,
            created_by=request.user, dry_run=dry_run,
        )
        return Response({**summary.as_dict(), "dropped": dropped_dict(tr)})


# Query parameters of the generic ratings import (as the options of `import_ratings`).
RATINGS_PARAMS = ("dry_run", "scale", "pass_threshold", "family", "pairwise_values",
                  "file_format")
_RATINGS_FORMATS = ("csv", "jsonl")


def _text_of_upload(data: bytes, part: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationFailed.at(part, f"the {part} file is not UTF-8 text ({exc.reason} at "
                                  f"byte {exc.start})") from None


def _ratings_format(request: Request, name: str) -> str | None:
    """csv / jsonl from `file_format`, else the part's file name or the body's content type;
    None: read from the first character (as `import_ratings` does for a file without one)."""
    fmt = request.query_params.get("file_format") or ""
    if fmt:
        return fmt
    lower = name.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    ctype = (request.META.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    if ctype == "text/csv":
        return "csv"
    if ctype in ("application/x-ndjson", "application/jsonl", "application/json-lines"):
        return "jsonl"
    return None


class RatingsImportView(APIView):
    """The generic ratings import of `import_ratings` over REST, with its texts file."""

    # A multipart form (the ratings and texts files) or the ratings file alone as the body;
    # either way under REVIEWHUB_MAX_UPLOAD_BYTES, checked here (the body streams).
    parser_classes: list[Any] = [MultiPartParser, StreamedBodyParser]
    streams_request_body = True

    @extend_schema(
        summary="Import ratings in the generic format, with an optional texts file",
        description=(
            "The ratings file of docs/import-ratings.md (CSV or JSON Lines) as the body, or, to "
            "send its texts file too (`--texts` of `import_ratings`: JSON Lines keyed by "
            "item_id / output_id, with text and candidate), a multipart form with the parts "
            "`file` and `texts`. Query parameters as the command's options: `scale`, "
            "`pass_threshold`, `family` (repeatable, KEY=VALUE), `pairwise_values`, "
            "`file_format` (csv or jsonl; default: the part's file name, the content type, "
            "else the first character), `dry_run=1`. All or nothing; re-importing changes "
            "nothing. Needs the lead role and a read-write token."
        ),
        request={"multipart/form-data": OpenApiTypes.OBJECT, "text/csv": OpenApiTypes.BINARY,
                 "application/x-ndjson": OpenApiTypes.BINARY},
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(ErrorSerializer, description="Invalid rows or parameters."),
            403: OpenApiResponse(ErrorSerializer, description="Not a lead, or read-only token."),
            404: OpenApiResponse(ErrorSerializer, description="No such study."),
            411: OpenApiResponse(ErrorSerializer, description="No Content-Length."),
            413: OpenApiResponse(ErrorSerializer, description="Body over "
                                                              "REVIEWHUB_MAX_UPLOAD_BYTES."),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        study, _ = study_get_for_actor(
            user=request.user, slug=slug, token=request.auth, write=True,
            min_role=Membership.Role.LEAD,
        )
        problems = Problems()
        for name in request.query_params:
            if name not in RATINGS_PARAMS:
                problems.add(name, "unknown parameter (parameters: "
                             f"{', '.join(RATINGS_PARAMS)})", **{"in": "query"})
        pairwise = request.query_params.get("pairwise_values") or None
        if pairwise is not None and pairwise not in PAIRWISE_CONVENTIONS:
            problems.add("pairwise_values", f"one of {', '.join(PAIRWISE_CONVENTIONS)}",
                         **{"in": "query"})
        fmt_param = request.query_params.get("file_format") or ""
        if fmt_param and fmt_param not in _RATINGS_FORMATS:
            problems.add("file_format", "csv or jsonl", **{"in": "query"})
        scales, thresholds, families, dry_run = _parse_common(request, problems)
        try:
            length: int | None = int(request.META.get("CONTENT_LENGTH") or "")
        except ValueError:
            length = None
        if length is None and request.META.get("HTTP_TRANSFER_ENCODING"):
            raise LengthRequired(length_required_message())
        ctype = (request.META.get("CONTENT_TYPE") or "").lower()
        texts: str | None = None
        if ctype.startswith("multipart/form-data"):
            _form_limit(length)
            name = getattr(request.FILES.get("file"), "name", "") or ""
            parts = _form_files(request, ("texts",), "the ratings file")
            ratings = _text_of_upload(parts["file"], "file")
            fmt = _ratings_format(request, name)
            if "texts" in parts:
                texts = _text_of_upload(parts["texts"], "texts")
        else:
            with ingest.upload_spool(request.stream, content_length=length) as body:
                ratings = _text_of_upload(body.read(), "file")
            fmt = _ratings_format(request, "")
        summary = ratings_import(
            study=study,
            rows=ratings_read(io.StringIO(ratings, newline=""), fmt=fmt),
            scales=scales,
            families=families,
            created_by=request.user,
            pairwise_values=pairwise,
            texts=(ratings_read(io.StringIO(texts, newline=""), fmt="jsonl")
                   if texts is not None else None),
            pass_thresholds=thresholds,
            dry_run=dry_run,
        )
        return Response(summary.as_dict())
