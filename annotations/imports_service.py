"""Annotations brought in from files (`imports`): the label rule and the bulk upsert.

Imported human labels obey the same rule as labels submitted in the browser or over the API
(`label_clean`: the criterion's values, severity 1..5 only on failures), with one difference
the source forces on us: a file may record a failing label without a severity (the source
never asked for one), so a missing severity on an imported failure is accepted and stored as
NULL. Everything else is refused with `label_clean`'s own message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from reviewhub.bulkcopy import BATCH, bulk_insert
from studies.models import Criterion
from studies.subjects import SubjectRef

from .constants import SEVERITY_MIN
from .models import Annotation
from .services.common import is_failure
from .services.labels import CleanLabel, label_clean

# (annotator id, criterion id, "output" | "comparison", subject id)
AnnotationKey = tuple[int, int, str, int]


def annotation_import_clean(
    *, criterion: Criterion, value: str, severity: int | None, field: str | None = None
) -> CleanLabel:
    """Validate one imported label (canonical value) with the submit rule; see module docstring.

    Raises ValidationFailed with `label_clean`'s message. `criterion` may be unsaved (a
    criterion the import is about to create).
    """
    if severity is None and is_failure(criterion, value):
        # Check the value with the submit rule, then drop the stand-in severity again.
        clean = label_clean(
            criterion=criterion, raw={"value": value, "severity": SEVERITY_MIN}, field=field
        )
        return CleanLabel(clean.criterion, clean.value, clean.value_num, None, "")
    raw: dict[str, Any] = {"value": value}
    if severity is not None:
        raw["severity"] = severity
    return label_clean(criterion=criterion, raw=raw, field=field)


@dataclass
class BulkCounts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def annotations_import_bulk(
    *, labels: Mapping[AnnotationKey, CleanLabel | Mapping[str, Any]], rationale: str = ""
) -> BulkCounts:
    """Upsert imported labels keyed by (annotator, criterion, subject kind, subject id).

    Values are `CleanLabel`s from `annotation_import_clean` (or mappings with value, value_num
    and severity already cleaned by it). New rows go in with COPY on PostgreSQL; changed ones
    are updated; equal ones are counted as unchanged. `rationale` goes on the new rows. One
    transaction.
    """
    counts = BulkCounts()
    if not labels:
        return counts
    specs: dict[AnnotationKey, tuple[str, float | None, int | None]] = {}
    for key, lab in labels.items():
        if isinstance(lab, CleanLabel):
            specs[key] = (lab.value, lab.value_num, lab.severity)
        else:
            specs[key] = (lab["value"], lab["value_num"], lab["severity"])
    users = {k[0] for k in specs}
    crits = {k[1] for k in specs}
    with transaction.atomic():
        existing: dict[AnnotationKey, Annotation] = {}
        for a in Annotation.objects.filter(annotator_id__in=users, criterion_id__in=crits).only(
            "id",
            "annotator_id",
            "criterion_id",
            "output_id",
            "comparison_id",
            "value",
            "value_num",
            "severity",
        ):
            subj = SubjectRef.of(a.output_id, a.comparison_id).pair
            existing[(a.annotator_id, a.criterion_id, *subj)] = a
        new: list[dict[str, Any]] = []
        changed: list[Annotation] = []
        for key, (value, value_num, severity) in specs.items():
            cur = existing.get(key)
            if cur is None:
                is_output = key[2] == "output"
                new.append(
                    {
                        "annotator_id": key[0],
                        "criterion_id": key[1],
                        "output_id": key[3] if is_output else None,
                        "comparison_id": None if is_output else key[3],
                        "value": value,
                        "value_num": value_num,
                        "severity": severity,
                        "source": Annotation.Source.IMPORT.value,
                        "rationale": rationale,
                    }
                )
            elif (cur.value, cur.severity) != (value, severity):
                cur.value, cur.value_num, cur.severity = value, value_num, severity
                changed.append(cur)
            else:
                counts.unchanged += 1
        bulk_insert(Annotation, new)
        Annotation.objects.bulk_update(
            changed, ["value", "value_num", "severity"], batch_size=BATCH
        )
    counts.created, counts.updated = len(new), len(changed)
    return counts
