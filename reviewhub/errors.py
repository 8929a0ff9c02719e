"""Typed application errors: what services and pure modules raise when a request cannot be served.

This module imports neither Django nor DRF, so that the pure modules (sampling designs, judge
config validation, the analysis plan spec, report parameters) can raise them and still import
with no Django settings (tests/test_pure_imports.py). They are rendered to the one error body
``{"error": {"code", "message", "details"}}`` in one place, `reviewhub.api.errors`.

Every validation error (`ValidationFailed`) has one ``details`` shape::

    {"errors": [{"path": "criteria[1].pass_threshold", "message": "...", ...}, ...],
     "error_count": 3}

`path` names the field (a JSON path, a form field, or a file's column), `message` says what
is wrong; an entry may add where it is (`line`, 1-based, and `index`, the element of a JSON
array line, of a file; `file` when a command reads more than one) and context (e.g. `url` and
`setting` for a refused base URL). The first `MAX_LISTED` problems are listed; `error_count`
counts them all. `Problems` collects them; `ValidationFailed.at` raises a single one;
`Problems.from_field_errors` converts DRF serializer errors (plain dicts and lists).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

__all__ = [
    "MAX_LISTED",
    "AppError",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "Problems",
    "UnsupportedMediaType",
    "ValidationFailed",
    "error_body",
    "error_text",
    "problem_text",
]

# A validation answer lists at most this many problems (error_count says how many there were).
MAX_LISTED = 50


class AppError(Exception):
    """Base class of errors that services raise for the API layer to render."""

    status_code: int = HTTPStatus.BAD_REQUEST.value
    code = "bad_request"

    def __init__(self, message: str, *, details: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details if details is not None else {}
        if code is not None:
            self.code = code


class ValidationFailed(AppError):
    """Bad input. `details` is ``{"errors": [{path, message, ...}], "error_count": n}``: build it
    with `Problems` (several problems) or `ValidationFailed.at` (one); a literal
    ``{"errors": [...]}`` gets its `error_count` filled in."""

    code = "validation_failed"

    def __init__(self, message: str, *, details: Any = None, code: str | None = None) -> None:
        if isinstance(details, Mapping) and isinstance(details.get("errors"), list) and (
            "error_count" not in details
        ):
            details = {**details, "error_count": len(details["errors"])}
        super().__init__(message, details=details, code=code)

    @classmethod
    def at(cls, path: str, message: str, *, code: str | None = None,
           **context: Any) -> ValidationFailed:
        """One problem at `path`: `message` is the answer's message and the entry's; `context`
        (keys such as `url`, `setting`, `line`) goes into the entry (None values left out)."""
        problems = Problems()
        problems.add(path, message, **context)
        return problems.error(message=message, code=code)


def _entry(path: Any, message: Any, location: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": str(path) if path not in (None, "") else "$",
                             "message": str(message)}
    for key, value in location.items():
        if value is not None and key not in entry:
            entry[key] = value
    return entry


class Problems:
    """The one collector of validation problems.

    `add(path, message, **location)` records one problem; `raise_if_any` (or `error`) turns
    the collection into one `ValidationFailed` whose message names the first problem.
    `keep` bounds how many entries are held in memory (a bulk file with millions of bad rows);
    `count` always counts every problem. Without `keep`, `items` holds them all, so a
    validator can tell whether a step added any (``len(problems.items)``).
    """

    def __init__(self, *, keep: int | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self.count = 0
        self.keep = keep

    def add(self, path: str, message: str, **location: Any) -> None:
        self.count += 1
        if self.keep is None or len(self.items) < self.keep:
            self.items.append(_entry(path, message, location))

    def extend(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """Add entries already in the one shape (e.g. from a helper that returns a list)."""
        for e in entries:
            rest = {k: v for k, v in e.items() if k not in ("path", "message")}
            self.add(e.get("path", "$"), e.get("message", ""), **rest)

    def __bool__(self) -> bool:
        return self.count > 0

    def __len__(self) -> int:
        return self.count

    def details(self, **extra: Any) -> dict[str, Any]:
        """The `details` of the answer; `extra` adds top-level keys (ingest's row counts)."""
        return {"errors": self.items[:MAX_LISTED], "error_count": self.count, **extra}

    def summary(self, what: str | None = None) -> str:
        """The answer's message: the first problem, and how many more there are."""
        if not self.items:
            return f"{what} did not validate." if what else "The request did not validate."
        more = self.count - 1
        suffix = f" (and {more} more problem{'s' if more != 1 else ''})" if more else ""
        first = problem_text(self.items[0])
        return f"{what} did not validate: {first}{suffix}" if what else f"{first}{suffix}"

    def error(self, what: str | None = None, *, message: str | None = None,
              code: str | None = None, **extra: Any) -> ValidationFailed:
        """The collection as one ValidationFailed (`message` overrides the summary)."""
        return ValidationFailed(message if message is not None else self.summary(what),
                                details=self.details(**extra), code=code)

    def raise_if_any(self, what: str = "The spec", *, message: str | None = None,
                     code: str | None = None, **extra: Any) -> None:
        if self:
            raise self.error(what, message=message, code=code, **extra)

    @classmethod
    def from_mapping(cls, messages: Mapping[str, str]) -> Problems:
        """One problem per ``{path: message}`` pair, in order."""
        problems = cls()
        for path, message in messages.items():
            problems.add(path, message)
        return problems

    @classmethod
    def from_field_errors(cls, data: Any, prefix: str = "") -> Problems:
        """DRF serializer errors (``{"field": ["message"], "nested": {"x": [...]},
        "list": [{}, {"y": [...]}], "non_field_errors": [...]}``) as problems with dotted and
        indexed paths (``nested.x``, ``list[1].y``); errors of the whole object are at the
        parent's path (``$`` at the top)."""
        problems = cls()

        def walk(value: Any, path: str) -> None:
            if isinstance(value, Mapping):
                for key, sub in value.items():
                    if key in ("non_field_errors", "__all__"):
                        walk(sub, path)
                    elif isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                        walk(sub, f"{path}[{key}]")
                    else:
                        walk(sub, f"{path}.{key}" if path else str(key))
            elif isinstance(value, Sequence) and not isinstance(value, str):
                for i, sub in enumerate(value):
                    if isinstance(sub, Mapping | list | tuple):
                        walk(sub, f"{path}[{i}]")
                    else:
                        walk(sub, path)
            elif value not in (None, ""):
                problems.add(path or "$", str(value))

        walk(data, prefix)
        if not problems:
            problems.add(prefix or "$", "is invalid")
        return problems


def problem_text(entry: Mapping[str, Any]) -> str:
    """One problem as a line of text: ``texts line 3 (element [2]): path: message``."""
    where = ""
    if entry.get("line") is not None:
        where = f"line {entry['line']}"
        if entry.get("index") is not None:
            where += f" (element [{entry['index']}])"
    if entry.get("file"):
        where = f"{entry['file']} {where}".strip()
    path = str(entry.get("path") or "")
    parts = [p for p in (where, "" if path == "$" and where else path) if p]
    return ": ".join([*parts, str(entry.get("message", ""))])


def error_text(exc: AppError) -> str:
    """An application error for a terminal: its message, then each listed problem a line."""
    lines = [exc.message]
    details: Any = exc.details
    if isinstance(details, Mapping):
        errors = details.get("errors") or []
        lines.extend(f"  {problem_text(e) if isinstance(e, Mapping) else e}" for e in errors)
        total = details.get("error_count")
        if isinstance(total, int) and total > len(errors):
            lines.append(f"  ... and {total - len(errors)} more")
    return "\n".join(lines)


class NotFound(AppError):
    status_code = HTTPStatus.NOT_FOUND.value
    code = "not_found"


class Forbidden(AppError):
    status_code = HTTPStatus.FORBIDDEN.value
    code = "forbidden"


class Conflict(AppError):
    status_code = HTTPStatus.CONFLICT.value
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = HTTPStatus.REQUEST_ENTITY_TOO_LARGE.value
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status_code = HTTPStatus.UNSUPPORTED_MEDIA_TYPE.value
    code = "unsupported_media_type"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The one error body every 4xx/5xx answer carries."""
    return {"error": {"code": code, "message": message, "details": details or {}}}
