"""Refuses NUL characters (and lone surrogates) in query strings and form fields, everywhere.

PostgreSQL text cannot hold a NUL, so a filter such as `?name=%00` or a form field with one
reached the database and answered 500. One check here covers every API filter, every page and
every form post (login, grading) before any view runs: a 400 that names the parameter, in the
API's error shape under /api/ and as plain text elsewhere. JSON bodies are checked by the JSON
parser (`reviewhub.api.parsers`); ingest bodies by the ingest readers, line by line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

from .errors import error_body
from .strictjson import check_text

_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _problem(request: HttpRequest, *, forms: bool) -> tuple[str, str, str] | None:
    """(where, name, reason) of the first parameter that cannot be stored, if any."""
    sources = [("query", request.GET)]
    if forms and request.method not in ("GET", "HEAD", "OPTIONS") and (
            request.content_type in _FORM_TYPES):
        sources.append(("form", request.POST))  # MultiPartParserError: the caller's 400
    for where, params in sources:
        for name, values in params.lists():
            reason = check_text(name)
            if reason:
                return where, name, f"its name {reason}"
            for value in values:
                reason = check_text(value)
                if reason:
                    return where, name, reason
    return None


class RejectUnstorableTextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: Callable[..., Any],
                     view_args: Any, view_kwargs: Any) -> HttpResponse | None:
        # A view that reads its body raw (bulk ingest: parser_classes = []) checks it itself;
        # parsing it as a form here would read a large upload for nothing.
        view_class = getattr(view_func, "cls", None)
        forms = getattr(view_class, "parser_classes", None) != []
        try:
            problem = _problem(request, forms=forms)
        except MultiPartParserError as exc:
            problem = ("form", "(body)", f"is not a valid multipart body ({exc})")
        if problem is None:
            return None
        where, name, reason = problem
        kind = "Query parameter" if where == "query" else "Form field"
        message = (f"The form body {reason}." if name == "(body)" else
                   f"{kind} {name!r} {reason}.")
        if request.path.startswith("/api/"):
            return JsonResponse(error_body("invalid_parameter", message, {"errors": [
                {"path": name, "message": reason, "in": where}], "error_count": 1}), status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
