"""REST bulk ingest: POST a JSON array, JSON Lines or CSV body of items, candidates or outputs.

Thin views: access check -> content type and size -> the shared ingest service. The body is
read from the request stream (never `request.body` or `request.data`), spooled to a temporary
file with the size limit enforced while reading, and handed to `studies.ingest.ingest_run`,
the same two-pass validate-then-upsert code the `import_*` commands run.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, ClassVar

from django.conf import settings
from django.db import connection
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.errors import AppError, error_body
from reviewhub.middleware import LengthRequired, length_required_message

from . import ingest
from .access import study_get_for_actor
from .models import Membership
from .serializers import error_responses


class IngestResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()


def _content_length(request: Request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


_BODY = {
    "application/json": OpenApiTypes.BINARY,
    "application/x-ndjson": OpenApiTypes.BINARY,
    "text/csv": OpenApiTypes.BINARY,
}


class StreamedBodyParser(BaseParser):
    """Claims every body and reads none of it: the view spools `request.stream` itself.

    Without a parser DRF answers 415 as soon as anything reads `request.POST`, and the CSRF
    check of session-authenticated requests (the data page's upload) reads it first, before
    the X-CSRFToken header. With this one `request.POST` is empty and the stream untouched.
    """

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Any = None) -> Any:
        return {}


logger = logging.getLogger(__name__)
_DONE = object()


class _QueueProgress:
    """`ingest.IngestRowProgress` that puts events for the streamed answer on a queue: every
    phase change, and an advance at most every REVIEWHUB_INGEST_PROGRESS_SECONDS (the service
    calls `advance` once per ~256 KB read or per batch written; the client needs far fewer).
    `rows` is the rows read so far while validating, the rows written while writing."""

    def __init__(self, events: queue.Queue[Any], nbytes: int) -> None:
        self.events, self.nbytes = events, nbytes
        self.interval = float(settings.REVIEWHUB_INGEST_PROGRESS_SECONDS)
        self.name, self.done, self.rows, self.last = "", 0, 0, 0.0
        self.total: int | None = None

    def _emit(self) -> None:
        self.last = time.monotonic()
        validating = self.name == "validating"
        self.events.put({
            "phase": self.name, "done": self.done,
            "total": self.nbytes if validating else self.total,
            "unit": "bytes" if validating else "rows",
            "rows": self.rows if validating else self.done,
        })

    def phase(self, name: str, total: int | None) -> None:
        self.name, self.total, self.done = name, total, 0
        self._emit()

    def rows_read(self, rows: int) -> None:
        self.rows = rows

    def advance(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.last >= self.interval:
            self._emit()

    def close(self) -> None:
        pass


def _ingest_events(study: Any, kind: ingest.Kind, body: IO[bytes], fmt: Any) -> Iterator[bytes]:
    """The streamed answer of `?progress=ndjson`: progress events while the service validates
    and writes, then one `{"result": …}` or `{"error": …}` line (the body a plain request
    would get). The service runs in a thread of its own (with its own database connection),
    so that this generator can hand each event to the client as it happens; the import is the
    same one transaction, all or nothing."""
    events: queue.Queue[Any] = queue.Queue()
    size = body.seek(0, 2)
    body.seek(0)

    def run() -> None:
        try:
            result = ingest.ingest_run(study=study, kind=kind, stream=body, fmt=fmt,
                                       progress=_QueueProgress(events, size))
            events.put({"result": result.as_dict()})
        except AppError as exc:
            events.put({"status": exc.status_code, **error_body(exc.code, exc.message,
                                                                  exc.details)})
        except Exception:
            logger.exception("streamed ingest of %s failed", kind)
            events.put({"status": 500, **error_body("server_error", "The import failed; "
                                                   "nothing was written.")})
        finally:
            body.close()
            connection.close()
            events.put(_DONE)

    worker = threading.Thread(target=run, name=f"ingest-{kind}", daemon=True)
    worker.start()
    while (event := events.get()) is not _DONE:
        yield (json.dumps(event) + "\n").encode()
    worker.join()


class BulkIngestView(APIView):
    kind: ClassVar[ingest.Kind]
    # The body is read raw from the stream; DRF's parsers would load it all into memory.
    parser_classes: list[Any] = [StreamedBodyParser]
    # The one kind of endpoint allowed a large body: it enforces REVIEWHUB_MAX_UPLOAD_BYTES
    # itself while spooling, so RequestLimitsMiddleware's small limit does not apply.
    streams_request_body = True

    def post(self, request: Request, slug: str) -> Response:
        study, _ = study_get_for_actor(
            user=request.user, slug=slug, token=request.auth, write=True,
            min_role=Membership.Role.LEAD,
        )
        fmt = ingest.format_for_content_type(request.META.get("CONTENT_TYPE", ""))
        content_length = _content_length(request)
        if request.META.get("HTTP_TRANSFER_ENCODING"):
            # A chunked body reads as empty from the WSGI stream: refuse rather than report an
            # empty file (RequestLimitsMiddleware refuses chunked bodies earlier already). With
            # neither header the body is empty by HTTP's rules.
            raise LengthRequired(length_required_message())
        if request.query_params.get("progress") == "ndjson":
            # Progress while the server checks and writes (docs/ingest.md): the body is
            # spooled first, then the answer streams; the generator owns the spool.
            body = ingest.upload_spool(request.stream, content_length=content_length)
            streamed = StreamingHttpResponse(
                _ingest_events(study, self.kind, body, fmt),
                content_type="application/x-ndjson")
            # A buffering proxy (nginx) would hold every line until the end: ask it not to.
            streamed["X-Accel-Buffering"] = "no"
            streamed["Cache-Control"] = "no-store"
            return streamed  # type: ignore[return-value]
        with ingest.upload_spool(request.stream, content_length=content_length) as body:
            result = ingest.ingest_run(study=study, kind=self.kind, stream=body, fmt=fmt)
        return Response(result.as_dict())


def _schema(kind: str, key: str) -> Any:
    return extend_schema(
        summary=f"Bulk create/update {kind}",
        description=(
            f"Upsert {kind} by {key} from a JSON array (`application/json`), JSON Lines "
            "(`application/x-ndjson`) or CSV (`text/csv`) body; see docs/ingest.md for the "
            "fields. Every row is validated before anything is written: any invalid row means "
            "a 400 listing each problem (line, field, reason; at most 50, with `more_errors`) "
            "and nothing written. Re-sending the same file reports every row unchanged. Needs "
            "the lead role and a read-write token."
        ),
        request=_BODY,
        responses={200: IngestResultSerializer, **error_responses({
            400: "Invalid rows; nothing written.",
            403: "Not a lead, or read-only token.",
            404: "No such study, or no access.",
            409: "Closed study or concurrent change; nothing written.",
            411: "No Content-Length (chunked bodies are not accepted).",
            413: "Body over REVIEWHUB_MAX_UPLOAD_BYTES.",
            415: "Unsupported Content-Type.",
        })},
        examples=[OpenApiExample("counts", value={"created": 2, "updated": 0, "unchanged": 1},
                                 response_only=True)],
    )


class ItemBulkIngest(BulkIngestView):
    kind = "items"

    @_schema("items", "external_id")
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)


class CandidateBulkIngest(BulkIngestView):
    kind = "candidates"

    @_schema("candidates", "name")
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)


class OutputBulkIngest(BulkIngestView):
    kind = "outputs"

    @_schema("outputs", "(candidate, item)")
    def post(self, request: Request, slug: str) -> Response:
        return super().post(request, slug)
