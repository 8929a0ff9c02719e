"""Importers of the exports of other evaluation tools (Label Studio, Langfuse, promptfoo,
Inspect AI): docs/import-ratings.md, "Imports from other tools".

Each tool module reads its export and translates it into the rows of the generic ratings
format (`imports.generic`: one row per rating, with the item input and output text inline), so
that everything is validated and written by `imports.generic.ratings_import` (one writer per
table, through the owning apps' import services). What the generic rows cannot carry — an
output's latency, tokens and cost — is written in the same transaction by the studies app's
`outputs_measurements_import`. A translation never guesses a convention it cannot know from
the file: it asks for it as an option, and lists what it dropped (counts and reasons). What
every tool module shares (`Translation`, `ExportError`, the JSON helpers) is in
`translation.py`, below this module and the tool modules alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from imports.generic import ImportSummary, ScaleSpec, ratings_import
from reviewhub.errors import Problems, ValidationFailed
from studies import imports_service as studies_imports
from studies.models import Study

from . import inspect_ai, labelstudio, langfuse, promptfoo
from .translation import ExportError, Translation

Translator = Callable[[bytes, str, Mapping[str, Any]], Translation]


def _translators() -> dict[str, Translator]:
    return {
        "labelstudio": labelstudio.translate,
        "langfuse": langfuse.translate,
        "promptfoo": promptfoo.translate,
        "inspect": inspect_ai.translate,
    }


TOOLS = ("labelstudio", "langfuse", "promptfoo", "inspect")


def peer_translate(*, tool: str, data: bytes, filename: str,
                   options: Mapping[str, Any]) -> Translation:
    """Translate one export (`data`, named `filename` for its format) of `tool`. Raises
    ValidationFailed naming the place in the export that cannot be read or the missing option."""
    translators = _translators()
    if tool not in translators:
        raise ValidationFailed.at("tool", f"tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    try:
        return translators[tool](data, filename, options)
    except ExportError as exc:
        raise ValidationFailed.at(exc.path, exc.message) from None


def _with_records(exc: ValidationFailed, tr: Translation) -> ValidationFailed:
    """The generic importer's problems name the line of the translated rows, which the user
    never sees: name the record of the export each came from instead (`record`, e.g.
    "task 2, annotation 1", also at the head of the message)."""
    details = exc.details if isinstance(exc.details, Mapping) else {}
    entries = details.get("errors")
    if not isinstance(entries, list):
        return exc
    problems = Problems()
    for e in entries:
        extra = {k: v for k, v in e.items() if k not in ("path", "message", "line")}
        line = e.get("line")
        message = str(e.get("message", ""))
        if isinstance(line, int) and line in tr.record:
            extra["record"] = tr.record[line]
            message = f"{tr.record[line]}: {message}"
        elif line is not None:
            extra["line"] = line
        problems.add(e.get("path", "$"), message, **extra)
    problems.count = max(problems.count, int(details.get("error_count") or 0))
    return problems.error("The export")


def peer_import(
    *,
    study: Study,
    tool: str,
    data: bytes,
    filename: str,
    options: Mapping[str, Any] | None = None,
    scales: Mapping[str, ScaleSpec] | None = None,
    pass_thresholds: Mapping[str, int] | None = None,
    families: Mapping[str, str] | None = None,
    created_by: Any = None,
    dry_run: bool = False,
) -> tuple[ImportSummary, Translation]:
    """Import one export of `tool` into `study`: translate, then validate and write everything
    in one transaction through `ratings_import` (all or nothing; re-importing changes nothing),
    plus the outputs' latency, tokens and cost. `dry_run` writes and rolls back. The summary's
    notes say what was dropped (reason and count); the translation is returned beside it."""
    opts = dict(options or {})
    tr = peer_translate(tool=tool, data=data, filename=filename, options=opts)
    if not tr.rows:
        dropped = "; ".join(f"{n} {reason}" for reason, n in sorted(tr.dropped.items()))
        raise ValidationFailed.at(
            "(file)", "the export holds no rating that can be imported"
            + (f" (dropped: {dropped})" if dropped else ""),
        )
    with transaction.atomic():
        try:
            summary = ratings_import(
                study=study,
                rows=tr.rows,
                scales=scales,
                families=families,
                created_by=created_by,
                pairwise_values=opts.get("pairwise_values"),
                pass_thresholds=pass_thresholds,
                dry_run=False,
            )
        except ValidationFailed as exc:
            raise _with_records(exc, tr) from None
        if tr.measurements:
            n = studies_imports.outputs_measurements_import(
                study=study, measurements=tr.measurements
            )
            if n:
                summary.bump("updated", "output_measurements", n)
        summary.notes[:0] = [f"{tool}: {note}" for note in tr.notes]
        for reason, n in sorted(tr.dropped.items()):
            summary.notes.append(f"{tool}: dropped {n} {reason}")
        summary.dry_run = dry_run
        if dry_run:
            transaction.set_rollback(True)
    return summary, tr


def dropped_dict(tr: Translation) -> dict[str, int]:
    return dict(sorted(tr.dropped.items()))


__all__ = [
    "TOOLS",
    "ExportError",
    "Translation",
    "dropped_dict",
    "load_json",
    "number_or_none",
    "obj",
    "peer_import",
    "peer_translate",
    "text_of",
]
