"""Export of a study's annotations, one row per annotation (= per annotator, subject and
criterion), as CSV or JSON Lines, streamed in id order with a bounded number of queries.

Lead-only: the rows name the candidate(s). Pairwise values are canonical (A = output_a) with
`presented_swapped` saying whether the annotator saw output_b on the left. `draw_kind` and
`inclusion_probability` come from the queue entry the annotation was made on, so that
estimates can weight each subject by 1 / pi (empty for imported annotations, which have none).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any

from studies.models import Study

from .constants import FLAG_KEYS, SEVERITY_LABELS
from .models import Annotation

COLUMNS = [
    "annotation_id",
    "item_external_id",
    "strata",
    "subject",
    "output_id",
    "comparison_id",
    "candidate",
    "candidate_b",
    "annotator",
    "criterion",
    "value",
    "value_num",
    "severity",
    "severity_label",
    "severity_note",
    "rationale",
    "flags",
    "time_on_task_ms",
    "plan_version",
    "draw_kind",
    "inclusion_probability",
    "presented_swapped",
    "source",
    "created_at",
    "revised_at",
]
# Free-text cells that a spreadsheet could read as a formula get a leading apostrophe in CSV
# (OWASP's CSV-injection advice); JSON Lines carries the text untouched.
_TEXT_COLUMNS = {
    "item_external_id",
    "annotator",
    "severity_note",
    "rationale",
    "candidate",
    "candidate_b",
}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CHUNK = 2000


def export_rows(*, study: Study) -> Iterator[dict[str, Any]]:
    """The export rows as dicts (JSON-ready values). One query per CHUNK annotations."""
    qs = (
        Annotation.objects.filter(criterion__rubric__study=study)
        .select_related(
            "annotator",
            "criterion",
            "plan",
            "assignment__entry",
            "output__item",
            "output__candidate",
            "comparison__item",
            "comparison__output_a__candidate",
            "comparison__output_b__candidate",
        )
        .order_by("id")
    )
    for a in qs.iterator(chunk_size=CHUNK):
        if a.output is not None:
            item = a.output.item
            candidate, candidate_b, subject = a.output.candidate.name, "", "output"
        else:
            assert a.comparison is not None
            item = a.comparison.item
            candidate = a.comparison.output_a.candidate.name
            candidate_b = a.comparison.output_b.candidate.name
            subject = "comparison"
        entry = a.assignment.entry if a.assignment is not None else None
        yield {
            "annotation_id": a.pk,
            "item_external_id": item.external_id,
            "strata": item.strata,
            "subject": subject,
            "output_id": a.output_id,
            "comparison_id": a.comparison_id,
            "candidate": candidate,
            "candidate_b": candidate_b,
            "annotator": a.annotator.username,
            "criterion": a.criterion.key,
            "value": a.value,
            "value_num": a.value_num,
            "severity": a.severity,
            "severity_label": SEVERITY_LABELS.get(a.severity) if a.severity else None,
            "severity_note": a.severity_note,
            "rationale": a.rationale,
            "flags": {k: bool(a.flags.get(k, False)) for k in FLAG_KEYS},
            "time_on_task_ms": a.time_on_task_ms,
            "plan_version": a.plan.version if a.plan is not None else None,
            "draw_kind": entry.draw_kind if entry is not None else None,
            "inclusion_probability": entry.inclusion_probability if entry is not None else None,
            "presented_swapped": bool(a.assignment.swapped) if a.assignment else None,
            "source": a.source,
            "created_at": a.created_at.isoformat(),
            "revised_at": a.revised_at.isoformat() if a.revised_at else None,
        }


class _Echo:
    """A file-like object whose write returns the line, for csv.writer in a generator."""

    def write(self, value: str) -> str:
        return value


def _csv_cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if column in _TEXT_COLUMNS and text.startswith(_FORMULA_START):
        return "'" + text
    return text


def export_csv(*, study: Study) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(COLUMNS)
    for row in export_rows(study=study):
        yield writer.writerow([_csv_cell(c, row[c]) for c in COLUMNS])


def export_jsonl(*, study: Study) -> Iterator[str]:
    for row in export_rows(study=study):
        yield json.dumps(row, ensure_ascii=False) + "\n"
