"""OpenAPI post-processing: the error responses that every operation can give.

Views document the errors of their own logic (400 validation, 409 conflicts, ...). Some
answers come from the plumbing in front of every view: an invalid or missing token (401), a
token without the scope or role (403), a study one cannot see (404), too many failed tokens
(429), a NUL in a query parameter or a malformed JSON body (400), and for bodies an unsupported
media type (415), a body over the limit (413) or one without a length (411). Declaring them
here, once, keeps the schema true for every endpoint, including ones added later; each has the
one error body, except the two the web server itself answers (414, 431).
"""

from __future__ import annotations

from typing import Any

ERROR_REF = {"$ref": "#/components/schemas/Error"}

_ALWAYS = {
    "400": "Invalid request: a parameter or the body did not validate (details.errors names "
           "each problem).",
    "401": "No credentials, or an invalid or revoked API token.",
    "403": "The token or role does not allow this.",
    "404": "No such resource, or no access to it.",
    "406": "None of the media types in Accept can be produced.",
    "429": "Too many failed authentication attempts from this address (Retry-After).",
}
_WITH_BODY = {
    "411": "A body without Content-Length (chunked bodies are not accepted).",
    "413": "The request body is over the size limit.",
    "415": "Unsupported Content-Type.",
}
# Answered by the web server (gunicorn) before a request reaches ReviewHub, as its own small
# HTML page: a request line over `--limit-request-line` (4094 bytes by default, so a long query
# string) or oversized headers.
_SERVER = {
    "414": "The request line (path and query string) is too long for the web server.",
    "431": "The request headers are too large for the web server.",
}
_SERVER_CONTENT = {"text/html": {"schema": {"type": "string"}}}
_METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")

# One problem of a validation answer (reviewhub.errors.Problems); context keys such as `url`,
# `setting` or `in` may follow.
_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "One problem: `path` names the field (a JSON path such as "
                   "`criteria[1].pass_threshold`, a parameter, or a file's column) and `message` "
                   "what is wrong; `line` (1-based) and `index` (element of a JSON array line) "
                   "locate it in a file, `file` names the file when there are several.",
    "properties": {
        "path": {"type": "string"},
        "message": {"type": "string"},
        "line": {"type": "integer"},
        "index": {"type": "integer"},
        "column": {"type": "integer"},
        "file": {"type": "string"},
    },
    "required": ["path", "message"],
}
# `details` of the error body (also the schema of ErrorDetailSerializer.details, which views
# name in their own error responses).
ERROR_DETAILS_SCHEMA = {
    "type": "object",
    "description": "For bad input (400): `errors` lists the problems (the first 50) and "
                   "`error_count` counts them all (ingest adds `more_errors` and "
                   "`rows_with_errors`); other errors may carry their own context here.",
    "properties": {
        "errors": {"type": "array", "items": _PROBLEM_SCHEMA},
        "error_count": {"type": "integer", "minimum": 0},
        "more_errors": {"type": "integer", "minimum": 0},
        "rows_with_errors": {"type": "integer", "minimum": 0},
    },
}
_ERROR_SCHEMA = {
    "type": "object",
    "description": 'The one error body: {"error": {"code", "message", "details"}}.',
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": ERROR_DETAILS_SCHEMA,
            },
            "required": ["code", "message", "details"],
        },
    },
    "required": ["error"],
}


def document_error_responses(result: dict[str, Any], generator: Any, request: Any,
                             public: bool) -> dict[str, Any]:
    """drf-spectacular POSTPROCESSING_HOOKS entry (see the module docstring)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", _ERROR_SCHEMA)
    for path, item in result.get("paths", {}).items():
        if not path.startswith("/api/"):
            continue
        for method, operation in item.items():
            if method not in _METHODS:
                continue
            responses = operation.setdefault("responses", {})
            wanted = dict(_ALWAYS)
            if method in ("put", "post", "patch"):
                wanted.update(_WITH_BODY)
            for code, description in wanted.items():
                responses.setdefault(code, {"description": description})
            for code, description in _SERVER.items():
                responses.setdefault(code, {"description": description, "content": _SERVER_CONTENT})
            for code, response in responses.items():
                if not code.isdigit() or int(code) < 400 or code in _SERVER:
                    continue
                # Errors are JSON even where the success body is CSV or SVG.
                content = response.setdefault("content", {})
                content.setdefault("application/json", {"schema": ERROR_REF})
    return result
