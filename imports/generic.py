"""The generic long ratings format: one row per rating, CSV or JSON Lines (docs/import-ratings.md).

Reading (`ratings_read`) yields ``(line number, row dict)``; `ratings_validate` checks every row
and resolves it against the study without writing; `ratings_import` (the service) validates
everything first and then writes ordinary ReviewHub rows in one transaction, so that reports
treat imported and native data the same: Items (with strata), Candidates, Outputs,
Comparisons, imported Judges / JudgeVersions / Verdicts, inactive annotator users with
memberships, and Annotations, each through the import services of the app that owns the table
(`studies.imports_service`, `judges.services`, `annotations.imports_service`), which also hold
the rules the rows must obey. Re-importing the same rows changes nothing (upsert by natural
keys); any invalid row means nothing is written.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from annotations.imports_service import annotation_import_clean, annotations_import_bulk
from annotations.services.labels import CleanLabel
from judges.services import (
    VerdictImport,
    judge_imported_version_get_or_create,
    verdicts_import_bulk,
)
from reviewhub.errors import ValidationFailed
from studies import imports_service as studies_imports
from studies.criteria import PAIRWISE_VALUES, criterion_allowed_values
from studies.imports_service import (
    criterion_import_problems,
    criterion_unsaved,
    importer_username,  # noqa: F401  (re-exported: the account name of an imported rater)
)
from studies.models import Criterion, Study

MAX_ERRORS = 50
BATCH = 5000
DEFAULT_CANDIDATE = "imported"
DEFAULT_JUDGE_VERSION = "imported"
SCALES = ("binary", "ordinal", "pairwise", "categorical")
_BINARY_ALIASES = {
    "pass": "pass",
    "fail": "fail",
    "true": "pass",
    "false": "fail",
    "1": "pass",
    "0": "fail",
    "yes": "pass",
    "no": "fail",
}
_PAIRWISE_ALIASES = {"a": "A", "b": "B", "tie": "tie"}
_SWAP = {"A": "B", "B": "A", "tie": "tie"}
_KNOWN_FIELDS = frozenset(
    {
        "item_id",
        "item_input",
        "output_id",
        "candidate",
        "output_text",
        "output_a",
        "output_b",
        "candidate_a",
        "candidate_b",
        "output_a_text",
        "output_b_text",
        "order",
        "rater_id",
        "rater_kind",
        "judge_version",
        "value_type",
        "criterion",
        "value",
        "severity",
        "stratum",
        "meta",
    }
)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


class ReadError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


def _detect_format(name: str, head: str) -> str:
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    return "jsonl" if head.lstrip().startswith("{") else "csv"


def ratings_read(
    source: str | Path | IO[str], *, fmt: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line, row) from a CSV (header row: line 1) or JSON Lines file.

    CSV cells are strings ("" = absent). JSON Lines rows may also give ``"stratum": {dim: label}``
    and ``"meta": {key: value}`` objects instead of dotted columns. Unreadable lines raise
    `ReadError` naming the line.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        with path.open(encoding="utf-8", newline="") as opened:
            yield from ratings_read(opened, fmt=fmt or _detect_format(path.name, ""))
        return
    fh: IO[str] = source
    if fmt is None:
        text = fh.read()
        fmt = _detect_format("", text)
        fh = io.StringIO(text)
    if fmt == "csv":
        reader = csv.DictReader(fh)
        if not reader.fieldnames:
            raise ReadError(1, "file: the CSV file is empty (no header row)")
        for row in reader:
            line = reader.line_num
            if None in row:
                raise ReadError(line, "row: more cells than header columns")
            yield line, {k: v for k, v in row.items() if k is not None}
        return
    for i, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ReadError(i, f"row: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise ReadError(i, "row: each line must be a JSON object")
        yield i, obj


# ---------------------------------------------------------------------------------------------
# Scales
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleSpec:
    """How to create a missing criterion: scale plus ordinal points or categorical labels."""

    scale: str
    points: tuple[str, ...] = ()

    def as_points(self) -> list[dict[str, Any]]:
        if self.scale == "ordinal":
            return [{"value": int(p), "label": p} for p in self.points]
        if self.scale == "categorical":
            return [{"value": p, "label": p} for p in self.points]
        return []

    def criterion_fields(self, key: str) -> dict[str, Any]:
        """The rubric criterion this spec creates (validated by `studies.spec`)."""
        return {"key": key, "name": key, "scale": self.scale, "points": self.as_points()}

    def describe(self) -> str:
        if self.scale == "ordinal":
            return f"ordinal {self.points[0]}..{self.points[-1]}"
        if self.scale == "categorical":
            return "categorical (" + ", ".join(self.points) + ")"
        return self.scale


def scale_parse(text: str) -> ScaleSpec:
    """Parse ``binary``, ``pairwise``, ``ordinal:1-5`` (or ``1..5``), ``categorical:No,Yes``."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("binary", "pairwise"):
        return ScaleSpec(kind)
    if kind == "ordinal":
        sep = ".." if ".." in rest else "-"
        lo_s, _, hi_s = rest.partition(sep)
        try:
            lo, hi = int(lo_s or 1), int(hi_s)
        except ValueError as exc:
            raise ValueError(f"ordinal scale needs 'ordinal:1-K', got {text!r}") from exc
        if lo != 1 or hi < 2:
            raise ValueError(f"ordinal scales run 1..K with K >= 2, got {text!r}")
        return ScaleSpec("ordinal", tuple(str(v) for v in range(lo, hi + 1)))
    if kind == "categorical":
        labels = tuple(x.strip() for x in rest.split(",") if x.strip())
        if len(labels) < 2:
            raise ValueError(f"categorical scale needs at least two labels, got {text!r}")
        return ScaleSpec("categorical", labels)
    raise ValueError(f"unknown scale {text!r} (binary, pairwise, ordinal:1-K, categorical:a,b,...)")


class _CriterionView:
    """The scale facts validation needs, for an existing criterion or one to be created."""

    def __init__(
        self,
        key: str,
        scale: str,
        values: list[str],
        existing: Criterion | None,
        model: Criterion | None = None,
    ) -> None:
        self.key = key
        self.scale = scale
        self.values = values
        self.existing = existing
        # The stored criterion, or the unsaved one the import will create: the label rules of
        # annotations and judges are checked against it.
        self.model = existing if existing is not None else model
        self.lower = {v.lower(): v for v in values}

    def canonical(self, raw: str) -> str | None:
        if self.scale == "binary":
            return _BINARY_ALIASES.get(raw.lower())
        if self.scale == "pairwise":
            return _PAIRWISE_ALIASES.get(raw.lower())
        if self.scale == "ordinal":
            num = _as_number(raw)
            if num is None or not float(num).is_integer():
                return None
            text = str(int(num))
            return text if text in self.values else None
        return self.lower.get(raw.lower())


def _as_number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _infer_scale(values: list[str], pairwise: bool) -> ScaleSpec:
    if pairwise:
        return ScaleSpec("pairwise")
    lowered = {v.lower() for v in values}
    if lowered and lowered <= {"pass", "fail"}:
        return ScaleSpec("binary")
    nums = [_as_number(v) for v in values]
    if nums and all(n is not None and float(n).is_integer() and n >= 1 for n in nums):
        top = int(max(n for n in nums if n is not None))
        if top >= 2:
            return ScaleSpec("ordinal", tuple(str(v) for v in range(1, top + 1)))
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return ScaleSpec("categorical", tuple(seen))


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@dataclass
class _Rating:
    line: int
    kind: str  # "human" | "judge"
    rater: str
    judge_version: str
    value_type: str
    criterion: str
    raw_value: str
    severity: Any  # an int when the cell is one; otherwise the text, refused by the label rule
    item: str
    # single output: (item, candidate); pairwise: ((item, cand_a), (item, cand_b)) + order
    output: tuple[str, str] | None = None
    pair: tuple[tuple[str, str], tuple[str, str]] | None = None
    order: str = ""


@dataclass
class ImportSummary:
    """What an import found and did; `created`/`updated`/`unchanged` count rows per model."""

    rows: int = 0
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    criteria_created: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def bump(self, which: str, model: str, n: int = 1) -> None:
        target = getattr(self, which)
        target[model] = target.get(model, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "criteria_created": self.criteria_created,
            "notes": self.notes,
        }


class _Problems:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, line: int, fld: str, message: str) -> None:
        self.items.append({"line": line, "field": fld, "message": message})

    def raise_if_any(self) -> None:
        if not self.items:
            return
        first = self.items[0]
        more = len(self.items) - 1
        suffix = f" (and {more} more problem{'s' if more != 1 else ''})" if more else ""
        raise ValidationFailed(
            f"The ratings did not validate: line {first['line']}: {first['field']}: "
            f"{first['message']}{suffix}",
            details={
                "errors": [
                    f"line {p['line']}: {p['field']}: {p['message']}"
                    for p in self.items[:MAX_ERRORS]
                ],
                "error_count": len(self.items),
            },
        )


def _text(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value).strip() if isinstance(value, str) else str(value)


def _strata_and_meta(row: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    strata: dict[str, str] = {}
    meta: dict[str, Any] = {}
    for key, value in row.items():
        if key.startswith("stratum.") and value not in (None, ""):
            strata[key[len("stratum.") :]] = str(value)
        elif key.startswith("meta.") and value not in (None, ""):
            meta[key[len("meta.") :]] = value
    if isinstance(row.get("stratum"), dict):
        strata.update({str(k): str(v) for k, v in row["stratum"].items() if v not in (None, "")})
    if isinstance(row.get("meta"), dict):
        meta.update({str(k): v for k, v in row["meta"].items()})
    return strata, meta


@dataclass
class _Plan:
    """Everything validated and resolved, ready to be written."""

    ratings: list[_Rating]
    criteria: dict[str, _CriterionView]
    new_criteria: dict[str, ScaleSpec]
    items: dict[str, dict[str, Any]]  # external id -> {"input", "strata", "meta"}
    outputs: dict[tuple[str, str], dict[str, Any]]  # (item, candidate) -> {"text", "output_id"}
    pairs: list[tuple[tuple[str, str], tuple[str, str]]]
    judge_value_types: dict[tuple[str, str], str]


def _label_field(exc: ValidationFailed, criterion: str) -> str:
    """The file column a label-rule error is about ("labels.KEY.severity" -> "severity")."""
    details = exc.details if isinstance(exc.details, dict) else {}
    for name in details:
        tail = str(name)[len(criterion) + 1 :] if str(name).startswith(criterion + ".") else ""
        if tail in ("severity", "severity_note"):
            return "severity"
    return "value"


def _slug_ok(key: str) -> bool:
    return (
        bool(key)
        and len(key) <= 60
        and all(c.isalnum() or c in "-_" for c in key)
        and key.isascii()
    )


def ratings_validate(
    *,
    study: Study,
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    scales: Mapping[str, ScaleSpec] | None = None,
) -> _Plan:
    """Check every row (collecting "line N: field: reason" problems) and resolve criteria.

    Raises ValidationFailed listing the problems (capped at 50, with the total) when any row is
    invalid; returns the resolved plan otherwise. Reads the database, never writes.
    """
    scales = dict(scales or {})
    problems = _Problems()
    ratings: list[_Rating] = []
    items: dict[str, dict[str, Any]] = {}
    item_first_line: dict[str, int] = {}
    outputs: dict[tuple[str, str], dict[str, Any]] = {}
    output_ids: dict[str, tuple[str, str]] = {}
    values_by_criterion: dict[str, list[str]] = {}
    pairwise_criteria: set[str] = set()
    single_criteria: set[str] = set()
    judge_value_types: dict[tuple[str, str], str] = {}
    pair_orientation: dict[frozenset[tuple[str, str]], tuple[tuple[str, str], tuple[str, str]]] = {}
    n_rows = 0
    try:
        for line, row in rows:
            n_rows += 1
            _validate_row(
                line,
                row,
                problems,
                ratings,
                items,
                item_first_line,
                outputs,
                output_ids,
                values_by_criterion,
                pairwise_criteria,
                single_criteria,
                judge_value_types,
                pair_orientation,
            )
    except ReadError as exc:
        problems.add(exc.line, exc.message.split(":", 1)[0], exc.message.split(":", 1)[-1].strip())
    if n_rows == 0 and not problems.items:
        problems.add(1, "file", "no rating rows")
    problems.raise_if_any()

    rubric = study.rubric_versions.order_by("-version").first()
    existing = {c.key: c for c in Criterion.objects.filter(rubric=rubric)} if rubric else {}
    criteria: dict[str, _CriterionView] = {}
    new_criteria: dict[str, ScaleSpec] = {}
    first_line = {r.criterion: r.line for r in reversed(ratings)}
    for key in values_by_criterion:
        line = first_line[key]
        if key in pairwise_criteria and key in single_criteria:
            problems.add(line, "criterion", f"'{key}' has both single-output and pairwise rows")
            continue
        if key in existing:
            crit = existing[key]
            criteria[key] = _CriterionView(key, crit.scale, criterion_allowed_values(crit), crit)
            if key in scales and scales[key].scale != crit.scale:
                problems.add(
                    line,
                    "criterion",
                    f"'{key}' exists as {crit.scale}; --scale says {scales[key].scale}",
                )
            continue
        spec = scales.get(key) or _infer_scale(values_by_criterion[key], key in pairwise_criteria)
        if spec.scale == "categorical" and len(spec.points) < 2:
            problems.add(
                line,
                "criterion",
                f"cannot infer the scale of '{key}' from its values; "
                "give it explicitly (--scale KEY=ordinal:1-5, ...)",
            )
            continue
        # The rubric's own rules decide whether the criterion may be created.
        refused = criterion_import_problems(spec.criterion_fields(key))
        if refused:
            for message in refused:
                problems.add(line, "criterion", message)
            continue
        new_criteria[key] = spec
        values = (
            list(PAIRWISE_VALUES)
            if spec.scale == "pairwise"
            else (["pass", "fail"] if spec.scale == "binary" else list(spec.points))
        )
        criteria[key] = _CriterionView(
            key, spec.scale, values, None, criterion_unsaved(spec.criterion_fields(key))
        )
    for key, view in criteria.items():
        if (view.scale == "pairwise") != (key in pairwise_criteria):
            problems.add(
                first_line[key],
                "criterion",
                f"'{key}' is {view.scale} but the rows are "
                f"{'pairwise' if key in pairwise_criteria else 'single-output'}",
            )
    problems.raise_if_any()

    seen: dict[tuple[Any, ...], tuple[int, str]] = {}
    for r in ratings:
        view = criteria[r.criterion]
        continuous = r.value_type == "continuous"
        if continuous:
            if view.scale != "ordinal":
                problems.add(
                    r.line,
                    "value_type",
                    "continuous scores are only allowed on "
                    f"ordinal criteria ('{r.criterion}' is {view.scale})",
                )
            elif _as_number(r.raw_value) is None:
                problems.add(r.line, "value", f"{r.raw_value!r} is not a finite number")
        elif (canon := view.canonical(r.raw_value)) is None:
            problems.add(
                r.line,
                "value",
                f"{r.raw_value!r} is not a value of the {view.scale} "
                f"criterion '{r.criterion}' (allowed: {', '.join(view.values)})",
            )
        elif r.kind == "human" and view.model is not None:
            # The annotations app's label rule (values, severity only on failures) applies to
            # imported labels exactly as to submitted ones.
            try:
                annotation_import_clean(
                    criterion=view.model, value=canon, severity=r.severity, field=r.criterion
                )
            except ValidationFailed as exc:
                problems.add(r.line, _label_field(exc, r.criterion), exc.message)
        subject = r.output if r.output is not None else r.pair
        dedupe = (
            r.kind,
            r.rater,
            r.judge_version,
            r.criterion,
            subject,
            r.order if r.kind == "judge" else "",
        )
        if dedupe in seen:
            problems.add(
                r.line,
                "rater_id",
                f"duplicate rating of this subject for criterion "
                f"'{r.criterion}' by '{r.rater}' (first on line {seen[dedupe][0]})",
            )
        else:
            seen[dedupe] = (r.line, r.raw_value)
    problems.raise_if_any()
    pairs = list({r.pair: None for r in ratings if r.pair is not None})
    return _Plan(
        ratings=ratings,
        criteria=criteria,
        new_criteria=new_criteria,
        items=items,
        outputs=outputs,
        pairs=pairs,
        judge_value_types=judge_value_types,
    )


def _validate_row(
    line: int,
    row: Mapping[str, Any],
    problems: _Problems,
    ratings: list[_Rating],
    items: dict[str, dict[str, Any]],
    item_first_line: dict[str, int],
    outputs: dict[tuple[str, str], dict[str, Any]],
    output_ids: dict[str, tuple[str, str]],
    values_by_criterion: dict[str, list[str]],
    pairwise_criteria: set[str],
    single_criteria: set[str],
    judge_value_types: dict[tuple[str, str], str],
    pair_orientation: dict[frozenset[tuple[str, str]], tuple[tuple[str, str], tuple[str, str]]],
) -> None:
    start = len(problems.items)
    for key, value in row.items():
        if isinstance(value, str) and "\x00" in value:
            problems.add(line, key, "contains a NUL byte")
    unknown = [k for k in row if k not in _KNOWN_FIELDS and not k.startswith(("stratum.", "meta."))]
    if unknown:
        problems.add(line, unknown[0], "unknown column (see docs/import-ratings.md)")
    item = _text(row, "item_id")
    rater = _text(row, "rater_id")
    kind = _text(row, "rater_kind").lower()
    criterion = _text(row, "criterion")
    value = _text(row, "value")
    for name, val in (
        ("item_id", item),
        ("rater_id", rater),
        ("rater_kind", kind),
        ("criterion", criterion),
        ("value", value),
    ):
        if not val:
            problems.add(line, name, "required")
    if len(item) > 200:
        problems.add(line, "item_id", "longer than 200 characters")
    if kind and kind not in ("human", "judge"):
        problems.add(line, "rater_kind", f"must be 'human' or 'judge', got {kind!r}")
    judge_version = _text(row, "judge_version")
    value_type = _text(row, "value_type").lower() or "label"
    if value_type not in ("label", "continuous"):
        problems.add(line, "value_type", f"must be 'label' or 'continuous', got {value_type!r}")
    if kind == "human":
        if judge_version:
            problems.add(line, "judge_version", "only judge rows have a judge version")
        if value_type == "continuous":
            problems.add(line, "value_type", "human ratings are labels, not continuous scores")
    elif kind == "judge":
        judge_version = judge_version or DEFAULT_JUDGE_VERSION
        if len(rater) > 200:
            problems.add(line, "rater_id", "judge names are at most 200 characters")
        prev = judge_value_types.setdefault((rater, judge_version), value_type)
        if prev != value_type:
            problems.add(
                line,
                "value_type",
                f"judge '{rater}' version '{judge_version}' mixes label and continuous values",
            )
    # Which severities are allowed is the annotations app's rule (checked with the criterion);
    # here the cell only becomes an int when it holds one.
    severity: Any = None
    sev_text = _text(row, "severity")
    if sev_text:
        sev = _as_number(sev_text)
        if kind != "human":
            problems.add(line, "severity", "only human ratings carry a severity")
        else:
            severity = int(sev) if sev is not None and float(sev).is_integer() else sev_text

    strata, meta = _strata_and_meta(row)
    for dim in strata:
        if not _slug_ok(dim):
            problems.add(line, f"stratum.{dim}", "dimension keys are slugs (letters, digits, - _)")
    if item:
        entry = items.get(item)
        item_input = _text(row, "item_input")
        if entry is None:
            items[item] = {"input": item_input, "strata": dict(strata), "meta": dict(meta)}
            item_first_line[item] = line
        else:
            for dim, label in strata.items():
                if entry["strata"].setdefault(dim, label) != label:
                    problems.add(
                        line,
                        f"stratum.{dim}",
                        f"item '{item}' is '{entry['strata'][dim]}'"
                        f" on line {item_first_line[item]} but '{label}' here",
                    )
            for k, v in meta.items():
                entry["meta"].setdefault(k, v)
            if item_input and not entry["input"]:
                entry["input"] = item_input

    pairwise = bool(_text(row, "output_a") or _text(row, "output_b"))
    rating = _Rating(
        line=line,
        kind=kind,
        rater=rater,
        judge_version=judge_version,
        value_type=value_type,
        criterion=criterion,
        raw_value=value,
        severity=severity,
        item=item,
    )

    def register_output(out_id: str, candidate: str, text: str, fld: str) -> tuple[str, str]:
        key = (item, candidate)
        if len(candidate) > 200:
            problems.add(line, fld, "candidate names are at most 200 characters")
        known = output_ids.get(out_id)
        if known is not None and known != key:
            problems.add(
                line,
                fld,
                f"output '{out_id}' was item '{known[0]}' / candidate "
                f"'{known[1]}' earlier in the file",
            )
        output_ids.setdefault(out_id, key)
        entry = outputs.setdefault(key, {"text": "", "output_id": out_id})
        if entry["output_id"] != out_id:
            problems.add(
                line,
                fld,
                f"item '{item}' already has output '{entry['output_id']}' of "
                f"candidate '{candidate}' (one output per item and candidate)",
            )
        if text and not entry["text"]:
            entry["text"] = text
        return key

    if pairwise:
        pairwise_criteria.add(criterion)
        out_a, out_b = _text(row, "output_a"), _text(row, "output_b")
        cand_a, cand_b = _text(row, "candidate_a"), _text(row, "candidate_b")
        for name, val in (
            ("output_a", out_a),
            ("output_b", out_b),
            ("candidate_a", cand_a),
            ("candidate_b", cand_b),
        ):
            if not val:
                problems.add(line, name, "required for a pairwise rating")
        if out_a and out_a == out_b:
            problems.add(line, "output_b", "a comparison needs two different outputs")
        if cand_a and cand_a == cand_b:
            problems.add(
                line, "candidate_b", "the two outputs of an item come from different candidates"
            )
        order = _text(row, "order").lower() or "ab"
        if order not in ("ab", "ba"):
            problems.add(
                line, "order", f"must be 'ab' or 'ba' (the order the rater saw them), got {order!r}"
            )
        if _text(row, "output_id"):
            problems.add(line, "output_id", "give either output_id or output_a/output_b")
        if len(problems.items) == start:
            key_a = register_output(out_a, cand_a, _text(row, "output_a_text"), "output_a")
            key_b = register_output(out_b, cand_b, _text(row, "output_b_text"), "output_b")
            # A pair listed the other way round later in the file is the same comparison: keep
            # the first orientation and describe this row's presentation order in its terms.
            first = pair_orientation.setdefault(frozenset((key_a, key_b)), (key_a, key_b))
            if first != (key_a, key_b):
                order = "ba" if order == "ab" else "ab"
            rating.pair = first
            rating.order = order
    else:
        single_criteria.add(criterion)
        out_id = _text(row, "output_id")
        if not out_id:
            problems.add(line, "output_id", "required (or output_a/output_b for pairwise)")
        if _text(row, "order"):
            problems.add(line, "order", "only pairwise ratings have an order")
        candidate = _text(row, "candidate") or DEFAULT_CANDIDATE
        if len(problems.items) == start:
            rating.output = register_output(
                out_id, candidate, _text(row, "output_text"), "output_id"
            )
    if len(problems.items) == start:
        ratings.append(rating)
        if value_type != "continuous":
            values_by_criterion.setdefault(criterion, []).append(value)
        else:
            values_by_criterion.setdefault(criterion, [])


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _continuous_text(raw: str) -> str:
    return repr(float(raw))


def ratings_import(
    *,
    study: Study,
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    scales: Mapping[str, ScaleSpec] | None = None,
    families: Mapping[str, str] | None = None,
    created_by: Any = None,
) -> ImportSummary:
    """Validate all rows, then write them in one transaction (all-or-nothing, idempotent).

    `scales` gives the scale of criteria that do not exist yet (otherwise inferred from the
    values and stated in the summary's notes); `families` maps candidate and judge names to a
    model family (for the self-preference audit). Every table is written by its owning app's
    import services (studies, judges, annotations), which also hold the rules the rows obey.
    """
    plan = ratings_validate(study=study, rows=rows, scales=scales)
    families = dict(families or {})
    summary = ImportSummary(rows=len(plan.ratings))
    with transaction.atomic():
        crit_by_key = _write_criteria(study, plan, summary, created_by)
        item_ids, counts, n_dims = studies_imports.items_import_bulk(study=study, items=plan.items)
        _bump(summary, "item", counts)
        if n_dims:
            summary.bump("created", "stratum_dimension", n_dims)
        cand_ids, counts = studies_imports.candidates_import_bulk(
            study=study, names={cand for (_, cand) in plan.outputs}, families=families
        )
        summary.bump("created", "candidate", counts.created)
        if counts.updated:
            summary.bump("updated", "candidate", counts.updated)
        by_ids, counts = studies_imports.outputs_import_bulk(
            study=study,
            outputs={
                (item_ids[item], cand_ids[cand]): spec
                for (item, cand), spec in plan.outputs.items()
            },
        )
        summary.bump("created", "output", counts.created)
        summary.bump("updated", "output", counts.updated)
        output_ids = {
            (item, cand): by_ids[(item_ids[item], cand_ids[cand])] for (item, cand) in plan.outputs
        }
        comparison_of: dict[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]] = {}
        if plan.pairs:
            stored, counts = studies_imports.comparisons_import_bulk(
                study=study,
                pairs=[(item_ids[a[0]], output_ids[a], output_ids[b]) for a, b in plan.pairs],
            )
            summary.bump("created", "comparison", counts.created)
            comparison_of = {
                pair: stored[(output_ids[pair[0]], output_ids[pair[1]])] for pair in plan.pairs
            }
        raters = list({r.rater: None for r in plan.ratings if r.kind == "human"})
        user_ids, n_users, n_members = studies_imports.annotator_accounts_import(
            study=study, rater_ids=raters
        )
        summary.bump("created", "user", n_users)
        summary.bump("created", "membership", n_members)
        version_ids = _write_judges(study, plan, families, created_by, summary)
        _write_ratings(plan, crit_by_key, output_ids, comparison_of, user_ids, version_ids, summary)
    return summary


def _bump(summary: ImportSummary, model: str, counts: studies_imports.Counts) -> None:
    summary.bump("created", model, counts.created)
    summary.bump("updated", model, counts.updated)
    if counts.unchanged:
        summary.bump("unchanged", model, counts.unchanged)


def _write_criteria(
    study: Study, plan: _Plan, summary: ImportSummary, created_by: Any
) -> dict[str, Criterion]:
    out = {k: v.existing for k, v in plan.criteria.items() if v.existing is not None}
    created, rubric = studies_imports.criteria_import_create(
        study=study,
        specs=[spec.criterion_fields(key) for key, spec in plan.new_criteria.items()],
        created_by=created_by,
    )
    for key, spec in plan.new_criteria.items():
        out[key] = created[key]
        assert rubric is not None
        summary.criteria_created.append(key)
        summary.notes.append(
            f"criterion '{key}' created in rubric v{rubric.version} as {spec.describe()}"
        )
        summary.bump("created", "criterion")
    return out


def _write_judges(
    study: Study,
    plan: _Plan,
    families: Mapping[str, str],
    created_by: Any,
    summary: ImportSummary,
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for (name, label), value_type in plan.judge_value_types.items():
        outcome = judge_imported_version_get_or_create(
            study=study,
            name=name,
            label=label,
            value_type=value_type,
            model_family=families.get(name, ""),
            created_by=created_by,
        )
        if outcome.judge_created:
            summary.bump("created", "judge")
        if outcome.version_created:
            summary.bump("created", "judge_version")
        out[(name, label)] = outcome.version.pk
    return out


def _write_ratings(
    plan: _Plan,
    crit_by_key: Mapping[str, Criterion],
    output_ids: Mapping[tuple[str, str], int],
    comparison_of: Mapping[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]],
    user_ids: Mapping[str, int],
    version_ids: Mapping[tuple[str, str], int],
    summary: ImportSummary,
) -> None:
    # Canonical values per (rater, criterion, subject); judges may give both orders of a pair.
    ann: dict[tuple[int, int, str, int], CleanLabel] = {}
    ver: dict[tuple[int, int, str, int], dict[str, str]] = {}
    ver_crit: dict[tuple[int, int, str, int], tuple[Criterion, bool]] = {}
    for r in plan.ratings:
        view = plan.criteria[r.criterion]
        crit = crit_by_key[r.criterion]
        continuous = r.value_type == "continuous"
        value = _continuous_text(r.raw_value) if continuous else view.canonical(r.raw_value)
        assert value is not None
        if r.pair is not None:
            cid, reversed_ = comparison_of[r.pair]
            presented_first_is_a = (r.order == "ab") != reversed_
            value = value if presented_first_is_a else _SWAP[value]
            subject = ("comparison", cid)
        else:
            assert r.output is not None
            subject = ("output", output_ids[r.output])
        if r.kind == "human":
            # Validated in ratings_validate; this gives the stored form (value_num).
            ann[(user_ids[r.rater], crit.pk, *subject)] = annotation_import_clean(
                criterion=crit, value=value, severity=r.severity, field=r.criterion
            )
        else:
            key = (version_ids[(r.rater, r.judge_version)], crit.pk, *subject)
            orders = ver.setdefault(key, {})
            ver_crit[key] = (crit, continuous)
            # The order key records which output the judge saw first, in canonical terms.
            if r.pair is not None:
                cid, reversed_ = comparison_of[r.pair]
                orders["ab" if (r.order == "ab") != reversed_ else "ba"] = value
            else:
                orders[""] = value
    counts = annotations_import_bulk(labels=ann)
    if ann:
        summary.bump("created", "annotation", counts.created)
        summary.bump("updated", "annotation", counts.updated)
        if counts.unchanged:
            summary.bump("unchanged", "annotation", counts.unchanged)
    vcounts = verdicts_import_bulk(
        verdicts={
            key: VerdictImport(criterion=crit, orders=orders, continuous=continuous)
            for key, orders in ver.items()
            for crit, continuous in (ver_crit[key],)
        }
    )
    if ver:
        summary.bump("created", "verdict", vcounts.created)
        summary.bump("updated", "verdict", vcounts.updated)
        if vcounts.unchanged:
            summary.bump("unchanged", "verdict", vcounts.unchanged)
