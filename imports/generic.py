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

Where a guess could silently invert or re-type data the importer refuses to guess: pairwise
files declare what their values refer to (`pairwise_values`), numeric values never become
categorical labels by inference, and a misspelt optional column is an error while other extra
columns are ignored with a warning. Where comparisons were rated in both orders, the orders are
checked against each other (`imports.pairwise_check`).
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from annotations.imports_service import annotation_import_clean, annotations_import_bulk
from annotations.services.labels import CleanLabel
from judges.services import (
    ImportedSample,
    VerdictImport,
    judge_imported_version_get_or_create,
    verdict_probability_problem,
    verdicts_import_bulk,
)
from reviewhub.errors import Problems, ValidationFailed
from studies import imports_service as studies_imports
from studies.criteria import (
    PAIRWISE_VALUES,
    criterion_allowed_values,
    interval_bounds,
    interval_value,
    number_text,
)
from studies.imports_service import (
    criterion_import_problems,
    criterion_unsaved,
    importer_username,  # noqa: F401  (re-exported: the account name of an imported rater)
)
from studies.models import Criterion, Study

from .pairwise_check import PairwiseVote, order_consistency_warnings

BATCH = 5000
DEFAULT_CANDIDATE = "imported"
DEFAULT_JUDGE_VERSION = "imported"
SCALES = ("binary", "ordinal", "pairwise", "categorical", "interval")
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
# What a pairwise value refers to: "outputs" (A = output_a is better) or "presented" (A = the
# output the rater saw first is better). There is no default: the two read a swapped-order
# rating in opposite ways, and guessing wrong inverts it silently.
PAIRWISE_CONVENTIONS = ("outputs", "presented")
# Candidates standing in for missing candidate_a / candidate_b: the positions in the file.
POSITION_CANDIDATES = ("position-a", "position-b")
# Optional columns whose misspelling would change the meaning of a row without any error if the
# misspelt column were ignored like other extra columns (e.g. "ordr": every row read as "ab").
_MEANINGFUL_OPTIONAL = (
    "order",
    "pairwise_values",
    "value_type",
    "judge_version",
    "severity",
    "candidate",
    "candidate_a",
    "candidate_b",
    "output_a",
    "output_b",
    "output_id",
    "probability",
    "sample",
)
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
        "pairwise_values",
        "stratum",
        "meta",
        "rater",
        "probability",
        "sample",
    }
)
_PREFIXES = ("stratum.", "meta.", "rater.")


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
    """How to create a missing criterion: scale plus ordinal points, categorical labels or an
    interval's (min, max), and for an ordinal scale optionally the first passing point
    (`--pass-threshold KEY=N`)."""

    scale: str
    points: tuple[str, ...] = ()
    pass_threshold: int | None = None
    bounds: tuple[float, float] | None = None

    def as_points(self) -> list[dict[str, Any]]:
        if self.scale == "ordinal":
            return [{"value": int(p), "label": p} for p in self.points]
        if self.scale == "categorical":
            return [{"value": p, "label": p} for p in self.points]
        return []

    def criterion_fields(self, key: str) -> dict[str, Any]:
        """The rubric criterion this spec creates (validated by `studies.spec`)."""
        fields: dict[str, Any] = {
            "key": key, "name": key, "scale": self.scale, "points": self.as_points()
        }
        if self.pass_threshold is not None:
            fields["pass_threshold"] = self.pass_threshold
        if self.scale == "interval" and self.bounds is not None:
            fields["min"], fields["max"] = self.bounds
        return fields

    def describe(self) -> str:
        if self.scale == "interval" and self.bounds is not None:
            return f"interval {number_text(self.bounds[0])}..{number_text(self.bounds[1])}"
        if self.scale == "ordinal":
            passing = f", pass >= {self.pass_threshold}" if self.pass_threshold is not None else ""
            return f"ordinal {self.points[0]}..{self.points[-1]}{passing}"
        if self.scale == "categorical":
            return "categorical (" + ", ".join(self.points) + ")"
        return self.scale


_INTERVAL_RANGE = re.compile(
    r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:\.\.|-)\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*$"
)


def _interval_parse(text: str, rest: str) -> ScaleSpec:
    """``interval:1-5``, ``interval:0-1``, ``interval:0.5..4.5``, ``interval:-1..1``."""
    m = _INTERVAL_RANGE.match(rest)
    if m is None:
        raise ValueError(
            f"interval scale needs 'interval:MIN-MAX' (e.g. interval:1-5), got {text!r}"
        )
    lo, hi = float(m.group(1)), float(m.group(2))
    if not lo < hi:
        raise ValueError(f"an interval scale needs MIN < MAX, got {text!r}")
    return ScaleSpec("interval", bounds=(lo, hi))


def scale_parse(text: str) -> ScaleSpec:
    """Parse ``binary``, ``pairwise``, ``ordinal:1-5`` (or ``1..5``), ``categorical:No,Yes``,
    ``interval:1-5`` (or ``1..5``; any finite MIN < MAX, e.g. ``interval:0-1``)."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("binary", "pairwise"):
        return ScaleSpec(kind)
    if kind == "interval":
        return _interval_parse(text, rest)
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
    raise ValueError(
        f"unknown scale {text!r} (binary, pairwise, ordinal:1-K, categorical:a,b,..., "
        "interval:MIN-MAX)"
    )


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
        if self.scale == "interval":
            try:
                return number_text(interval_value(self.model, raw))
            except ValueError:
                return None
        return self.lower.get(raw.lower())


def _as_number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _number_text(num: float) -> str:
    return str(int(num)) if float(num).is_integer() else repr(num)


def _values_preview(values: Iterable[str], limit: int = 6) -> str:
    distinct = list(dict.fromkeys(values))
    shown = ", ".join(distinct[:limit])
    return shown + (f", ... ({len(distinct)} distinct)" if len(distinct) > limit else "")


@dataclass(frozen=True)
class _Inference:
    """The scale inferred for a new criterion, or why none can be (the user must state it)."""

    spec: ScaleSpec | None
    reason: str


def _infer_scale(key: str, values: list[str], pairwise: bool) -> _Inference:
    """Infer the scale of a criterion from its values, or refuse where a guess could re-type
    data: numbers never become categorical labels ("3" and "3.0" would be two labels)."""
    if pairwise:
        return _Inference(ScaleSpec("pairwise"), "the rows are pairwise")
    lowered = {v.lower() for v in values}
    if lowered and lowered <= {"pass", "fail"}:
        return _Inference(ScaleSpec("binary"), "every value is pass or fail")
    nums = [_as_number(v) for v in values]
    numeric = [n for n in nums if n is not None]
    if numeric and len(numeric) == len(nums):
        if all(float(n).is_integer() for n in numeric):
            lo, top = int(min(numeric)), int(max(numeric))
            labels = ",".join(sorted({_number_text(n) for n in numeric}, key=float))
            if lo >= 1 and top >= 2:
                return _Inference(
                    ScaleSpec("ordinal", tuple(str(v) for v in range(1, top + 1))),
                    f"every value is an integer from {lo} to {top}",
                )
            return _Inference(
                None,
                f"the values of '{key}' are integers from {lo} to {top} "
                f"({_values_preview(values)}); ReviewHub's ordinal scales run 1..K, so state the "
                f"scale: --scale {key}=binary (1 = pass, 0 = fail), --scale "
                f"{key}=categorical:{labels}, or recode the values to 1..K",
            )
        # Continuous scores (a mean over raters) are not re-typed by inference either: the
        # range of an interval criterion is the scale's, which the values cannot tell.
        low, high = number_text(min(numeric)), number_text(max(numeric))
        return _Inference(
            None,
            f"the values of '{key}' are non-integer numbers from {low} to {high} "
            f"({_values_preview(values)}): continuous scores (such as a mean over raters) "
            f"import under an interval criterion, whose range the values cannot tell: state "
            f"it, --scale {key}=interval:{low}-{high} (the range seen here; give the rating "
            f"scale's, e.g. interval:1-5, where it is wider)",
        )
    if numeric:
        return _Inference(
            None,
            f"'{key}' mixes numbers and text ({_values_preview(values)}); state its scale "
            f"(--scale {key}=ordinal:1-5, --scale {key}=categorical:a,b,...)",
        )
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    if len(seen) < 2:
        return _Inference(
            None,
            f"cannot infer the scale of '{key}' from its values; "
            "give it explicitly (--scale KEY=ordinal:1-5, ...)",
        )
    return _Inference(
        ScaleSpec("categorical", tuple(seen)), "the values are text labels, in order of appearance"
    )


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
    # The presentation order in terms of `pair`: "ab" = pair[0] was shown first.
    order: str = ""
    # The file's value names the winner in the other orientation than `pair` (the row lists the
    # outputs the other way round, or its values are presentation-relative and pair[1] was shown
    # first): swap it to state it in terms of `pair`.
    flip: bool = False
    convention: str = ""  # pairwise: "outputs" | "presented"
    # Judges: the judge's probability, meaning per scale (docs/import-ratings.md, "Judge
    # confidences"), as written in the file (pairwise: in the file's own orientation), and
    # which of several samples of the same judge call this row is.
    probability: float | None = None
    sample: int = 0


@dataclass
class ImportSummary:
    """What an import found and did; `created`/`updated`/`unchanged` count rows per model.

    `criteria` says, per criterion of the file, its scale and whether it existed, was stated
    (`--scale`) or was inferred (and from what); `warnings` are findings that do not stop the
    import but that a user must look at (also printed by the command). `dry_run`: validated
    and written in a transaction that was rolled back, so the counts are what an import would do.
    """

    rows: int = 0
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    criteria_created: list[str] = field(default_factory=list)
    criteria: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

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
            "criteria": self.criteria,
            "notes": self.notes,
            "warnings": self.warnings,
            "dry_run": self.dry_run,
        }


class _Problems(Problems):
    """The one collector (`reviewhub.errors.Problems`), added to by line: the column is the
    entry's path, the line its `line`, and a problem of the `--texts` file has `file: "texts"`."""

    # Problems are listed so that the first screen names the fix: a column the file lacks
    # (FILE_LEVEL), then a column in the wrong role (STRUCTURAL: outputs of an item that no
    # column separates, a stratum that describes the output or the rater), then row-level ones.
    FILE_LEVEL, STRUCTURAL, ROW = 0, 1, 2

    def __init__(self) -> None:
        super().__init__()
        self.ranks: list[int] = []

    def add(self, line: int, fld: str, message: str, *,  # type: ignore[override]
            where: str = "line", rank: int = 2) -> None:
        super().add(fld, message, line=line, file="texts" if where == "texts line" else None)
        self.ranks.append(rank)

    def replace_all(self, entries: list[tuple[int, dict[str, Any]]]) -> None:
        """Replace the collection by (rank, entry) pairs (a missing column collapsed)."""
        self.ranks = [rank for rank, _ in entries]
        self.items = [entry for _, entry in entries]
        self.count = len(self.items)

    def raise_if_any(self, what: str = "The ratings", **extra: Any) -> None:
        if self:
            # A stable sort: within a rank, file order.
            order = sorted(range(len(self.items)), key=lambda i: self.ranks[i])
            self.items = [self.items[i] for i in order]
            self.ranks = [self.ranks[i] for i in order]
        super().raise_if_any(what, **extra)


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


def _prefixed(row: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """`prefix.<key>` columns, and a JSON Lines object under `prefix` (empty cells absent)."""
    out: dict[str, Any] = {}
    dotted = prefix + "."
    for key, value in row.items():
        if key.startswith(dotted) and value not in (None, ""):
            out[key[len(dotted) :]] = value
    nested = row.get(prefix)
    if isinstance(nested, dict):
        out.update({str(k): v for k, v in nested.items() if v not in (None, "")})
    return out


def _strata_and_meta(row: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    strata = {k: str(v) for k, v in _prefixed(row, "stratum").items()}
    meta = _prefixed(row, "meta")
    if isinstance(row.get("meta"), dict):
        # An explicit empty value in a JSON object is metadata too.
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
    criteria_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    rater_attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _label_field(exc: ValidationFailed, criterion: str) -> str:
    """The file column a label-rule error is about ("labels.KEY.severity" -> "severity")."""
    details = exc.details if isinstance(exc.details, dict) else {}
    for entry in details.get("errors") or []:
        name = str(entry.get("path", "")) if isinstance(entry, dict) else ""
        tail = name[len(criterion) + 1 :] if name.startswith(criterion + ".") else ""
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


@dataclass
class _StratumSeen:
    line: int
    subject: str  # the output id, or the two output ids of a pair
    rater: str
    label: str


@dataclass
class _State:
    """What the row loop accumulates (see `_validate_row`)."""

    problems: _Problems
    pairwise_values: str | None
    ratings: list[_Rating] = field(default_factory=list)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    output_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    output_lines: dict[str, int] = field(default_factory=dict)
    values_by_criterion: dict[str, list[str]] = field(default_factory=dict)
    pairwise_criteria: set[str] = field(default_factory=set)
    single_criteria: set[str] = field(default_factory=set)
    judge_value_types: dict[tuple[str, str], str] = field(default_factory=dict)
    pair_orientation: dict[
        frozenset[tuple[str, str]], tuple[tuple[str, str], tuple[str, str]]
    ] = field(default_factory=dict)
    ignored_columns: dict[str, int] = field(default_factory=dict)
    # dimension -> item -> the rows that gave the item a label in it
    strata_seen: dict[str, dict[str, list[_StratumSeen]]] = field(default_factory=dict)
    rater_attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    rater_attribute_lines: dict[tuple[str, str], int] = field(default_factory=dict)
    judge_attribute_keys: dict[str, int] = field(default_factory=dict)
    position_candidate_rows: int = 0
    # The candidates the texts file gives: output id -> (candidate, texts line).
    text_candidates: dict[str, tuple[str, int]] = field(default_factory=dict)
    # output id -> (line, the row's columns outside the format) of the row that registered it:
    # what a collision compares to name the column that separates two outputs of an item.
    output_columns: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    # column -> how many rows lacked it, and the columns of the file (any row's keys): a
    # column the file does not have is reported once, not on every row.
    missing: dict[str, int] = field(default_factory=dict)
    columns: set[str] = field(default_factory=set)


def ratings_validate(
    *,
    study: Study,
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    scales: Mapping[str, ScaleSpec] | None = None,
    pairwise_values: str | None = None,
    texts: Iterable[tuple[int, Mapping[str, Any]]] | None = None,
    pass_thresholds: Mapping[str, int] | None = None,
) -> _Plan:
    """Check every row (collecting "line N: field: reason" problems) and resolve criteria.

    `pairwise_values` ("outputs" or "presented") says what pairwise values refer to for rows
    without a `pairwise_values` column; a pairwise row with neither is refused. `texts` are the
    rows of a JSON Lines file of input and output texts keyed by `item_id` / `output_id`.
    `pass_thresholds` (`--pass-threshold KEY=N`) gives the first passing point of an ordinal
    criterion the import creates; on an existing criterion it must equal the stored threshold.
    Raises ValidationFailed listing the problems (capped at 50, with the total) when any row is
    invalid; returns the resolved plan otherwise. Reads the database, never writes.
    """
    scales = dict(scales or {})
    thresholds = dict(pass_thresholds or {})
    if pairwise_values is not None and pairwise_values not in PAIRWISE_CONVENTIONS:
        raise ValidationFailed.at(
            "pairwise_values",
            f"pairwise_values must be one of {', '.join(PAIRWISE_CONVENTIONS)}, "
            f"got {pairwise_values!r}",
        )
    problems = _Problems()
    st = _State(problems=problems, pairwise_values=pairwise_values)
    # The texts file is read first: the candidate of an output may come from it.
    text_rows = _texts_read(texts, st) if texts is not None else None
    n_rows = 0
    try:
        for line, row in rows:
            n_rows += 1
            _validate_row(line, row, st)
    except ReadError as exc:
        problems.add(exc.line, exc.message.split(":", 1)[0], exc.message.split(":", 1)[-1].strip())
    if n_rows == 0 and not problems.items:
        problems.add(1, "file", "no rating rows")
    _missing_columns(st, n_rows)
    _strata_conflicts(st)
    notes: list[str] = []
    warnings: list[str] = []
    if text_rows is not None:
        _apply_texts(text_rows, st, warnings)
    problems.raise_if_any()
    ratings = st.ratings

    rubric = study.rubric_versions.order_by("-version").first()
    existing = {c.key: c for c in Criterion.objects.filter(rubric=rubric)} if rubric else {}
    criteria: dict[str, _CriterionView] = {}
    new_criteria: dict[str, ScaleSpec] = {}
    info: dict[str, dict[str, Any]] = {}
    first_line = {r.criterion: r.line for r in reversed(ratings)}
    unrated = sorted(set(thresholds) - set(st.values_by_criterion))
    if unrated:
        raise ValidationFailed.at(
            "pass_threshold",
            "--pass-threshold names "
            + ", ".join(f"'{k}'" for k in unrated)
            + ", not a criterion of the file",
            criteria=unrated,
        )
    for key in st.values_by_criterion:
        line = first_line[key]
        if key in st.pairwise_criteria and key in st.single_criteria:
            problems.add(line, "criterion", f"'{key}' has both single-output and pairwise rows")
            continue
        if key in existing:
            crit = existing[key]
            criteria[key] = _CriterionView(key, crit.scale, criterion_allowed_values(crit), crit)
            info[key] = {"scale": crit.scale, "how": "existing"}
            if key in scales and scales[key].scale != crit.scale:
                problems.add(
                    line,
                    "criterion",
                    f"'{key}' exists as {crit.scale}; --scale says {scales[key].scale}",
                )
            elif key in scales and crit.scale == "interval":
                _interval_range_check(line, key, crit, scales[key], problems)
            if key in thresholds:
                n = thresholds[key]
                if crit.scale != "ordinal":
                    problems.add(line, "criterion", _threshold_not_ordinal(key, n, crit.scale))
                elif crit.pass_threshold != n:
                    stored = crit.pass_threshold
                    problems.add(
                        line,
                        "criterion",
                        f"--pass-threshold {key}={n}: '{key}' exists with "
                        + (f"pass_threshold {stored}" if stored is not None else
                           "no pass_threshold")
                        + "; an import does not change a criterion's threshold (set it in "
                        "the rubric, or pass the stored one)",
                    )
                else:
                    info[key]["pass_threshold"] = n
            continue
        if key in scales:
            spec = scales[key]
            how = "stated (--scale)"
        else:
            inferred = _infer_scale(
                key, st.values_by_criterion[key], key in st.pairwise_criteria
            )
            if inferred.spec is None:
                problems.add(line, "criterion", inferred.reason)
                continue
            spec = inferred.spec
            how = f"inferred: {inferred.reason}"
        if key in thresholds:
            n = thresholds[key]
            if spec.scale != "ordinal":
                problems.add(line, "criterion", _threshold_not_ordinal(key, n, spec.scale))
                continue
            if not 1 <= n <= len(spec.points):
                problems.add(
                    line,
                    "criterion",
                    f"--pass-threshold {key}={n}: {n} is outside the scale "
                    f"{spec.points[0]}..{spec.points[-1]} of '{key}'",
                )
                continue
            spec = replace(spec, pass_threshold=n)
        # The rubric's own rules decide whether the criterion may be created.
        refused = criterion_import_problems(spec.criterion_fields(key))
        if refused:
            for message in refused:
                problems.add(line, "criterion", message)
            continue
        new_criteria[key] = spec
        info[key] = {"scale": spec.describe(), "how": how}
        if spec.pass_threshold is not None:
            info[key]["pass_threshold"] = spec.pass_threshold
        values = (
            list(PAIRWISE_VALUES)
            if spec.scale == "pairwise"
            else (["pass", "fail"] if spec.scale == "binary" else list(spec.points))
        )
        criteria[key] = _CriterionView(
            key, spec.scale, values, None, criterion_unsaved(spec.criterion_fields(key))
        )
    for key, view in criteria.items():
        if (view.scale == "pairwise") != (key in st.pairwise_criteria):
            problems.add(
                first_line[key],
                "criterion",
                f"'{key}' is {view.scale} but the rows are "
                f"{'pairwise' if key in st.pairwise_criteria else 'single-output'}",
            )
    problems.raise_if_any()

    seen: dict[tuple[Any, ...], tuple[int, str]] = {}
    for r in ratings:
        view = criteria[r.criterion]
        continuous = r.value_type == "continuous"
        if _unparseable(r):
            pass  # no value to check: stored unscored
        elif continuous:
            if view.scale != "ordinal":
                hint = (
                    ": a judge's score on an interval criterion is its value, leave value_type "
                    "empty"
                    if view.scale == "interval"
                    else ""
                )
                problems.add(
                    r.line,
                    "value_type",
                    "continuous scores are only allowed on "
                    f"ordinal criteria ('{r.criterion}' is {view.scale}{hint})",
                )
            elif _as_number(r.raw_value) is None:
                problems.add(r.line, "value", f"{r.raw_value!r} is not a finite number")
            elif (why := _probability_problem(r, view, _continuous_text(r.raw_value))):
                problems.add(r.line, "probability", why)
        elif (canon := view.canonical(r.raw_value)) is None:
            problems.add(r.line, "value", _not_a_value(r, view))
        elif r.kind == "judge" and (why := _probability_problem(r, view, canon)) is not None:
            problems.add(r.line, "probability", why)
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
            r.sample,
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

    for key, entry in info.items():
        if entry["how"] != "existing":
            notes.append(f"criterion '{key}': {entry['scale']} ({entry['how']})")
    if st.position_candidate_rows:
        notes.append(
            f"{st.position_candidate_rows} pairwise rows have no candidate_a/candidate_b: the "
            f"positions stand in as candidates '{POSITION_CANDIDATES[0]}' and "
            f"'{POSITION_CANDIDATES[1]}' (per-candidate figures then describe positions)"
        )
    for col, line in st.ignored_columns.items():
        warnings.append(
            f"column '{col}' (first on line {line}) is not a column of the format and was "
            f"ignored; name it meta.{col} to keep it as item metadata or rater.{col} for an "
            "attribute of the rater"
        )
    for key, line in st.judge_attribute_keys.items():
        warnings.append(
            f"rater.{key} (first on line {line}) on judge rows was ignored: rater attributes are "
            "kept for human raters only (a judge's identity is its name and version)"
        )
    warnings.extend(
        order_consistency_warnings(
            ratings=[
                PairwiseVote(
                    kind=r.kind,
                    rater=r.rater,
                    version=r.judge_version,
                    criterion=r.criterion,
                    pair=r.pair,
                    order=r.order,
                    value=_pair_value(criteria[r.criterion], r),
                    convention=r.convention,
                )
                for r in ratings
                if r.pair is not None and not _unparseable(r)
            ]
        )
    )
    unparseable = sum(1 for r in ratings if _unparseable(r))
    if unparseable:
        notes.append(
            f"{unparseable} judge rating{'s' if unparseable != 1 else ''} with an empty value: "
            "stored as unparseable verdicts (unscored, except that a pair rated in both orders "
            "keeps the order that parsed as its verdict; the orders table counts them, as a "
            "miss or a tie where it says so, beside the figures on parseable verdicts)"
        )
    pairs = list({r.pair: None for r in ratings if r.pair is not None})
    return _Plan(
        ratings=ratings,
        criteria=criteria,
        new_criteria=new_criteria,
        items=st.items,
        outputs=st.outputs,
        pairs=pairs,
        judge_value_types=st.judge_value_types,
        criteria_info=info,
        rater_attributes=st.rater_attributes,
        notes=notes,
        warnings=warnings,
    )


def _threshold_not_ordinal(key: str, n: int, scale: str) -> str:
    return (
        f"--pass-threshold {key}={n}: '{key}' is {scale}; only an ordinal criterion has a "
        "pass threshold"
    )


def _unparseable(r: _Rating) -> bool:
    """A judge rating whose value is empty: the judge's answer could not be read."""
    return r.kind == "judge" and r.raw_value == ""


def _pair_value(view: _CriterionView, r: _Rating) -> str:
    """A pairwise rating's value in terms of its `pair` (A = pair[0] is better)."""
    value = view.canonical(r.raw_value)
    assert value is not None
    return _SWAP[value] if r.flip else value


def _interval_range_check(
    line: int, key: str, crit: Criterion, spec: ScaleSpec, problems: _Problems
) -> None:
    """--scale KEY=interval:MIN-MAX on an existing interval criterion must state its range."""
    if spec.bounds is not None and spec.bounds != interval_bounds(crit):
        problems.add(
            line,
            "criterion",
            f"'{key}' exists as {ScaleSpec('interval', bounds=interval_bounds(crit)).describe()}; "
            f"--scale says {spec.describe()}",
        )


def _not_a_value(r: _Rating, view: _CriterionView) -> str:
    if view.scale == "interval":
        assert view.model is not None
        try:
            interval_value(view.model, r.raw_value)
        except ValueError as exc:
            reason = str(exc)
        else:  # pragma: no cover - canonical() accepted it
            reason = "not a value"
        return f"{r.raw_value!r} is not a value of the interval criterion '{r.criterion}': {reason}"
    message = (
        f"{r.raw_value!r} is not a value of the {view.scale} "
        f"criterion '{r.criterion}' (allowed: {', '.join(view.values)})"
    )
    num = _as_number(r.raw_value)
    if view.scale == "ordinal" and num is not None and not float(num).is_integer():
        if r.kind == "judge":
            message += "; a judge's continuous scores need value_type=continuous"
        else:
            message += (
                "; continuous human scores (such as a mean over raters) import under an "
                "interval criterion: give them a criterion key of their own with --scale "
                "KEY=interval:MIN-MAX"
            )
    return message


def _validate_row(line: int, row: Mapping[str, Any], st: _State) -> None:
    problems = st.problems
    start = len(problems.items)
    st.columns.update(row.keys())
    for key, value in row.items():
        if isinstance(value, str) and "\x00" in value:
            problems.add(line, key, "contains a NUL byte")
    for key in row:
        if key in _KNOWN_FIELDS or key.startswith(_PREFIXES) or key in st.ignored_columns:
            continue
        near = _near_known(key)
        if near is not None:
            # Ignoring a misspelt column that changes a row's meaning would be a silent error.
            problems.add(line, key, f"unknown column; did you mean '{near}'?")
        else:
            st.ignored_columns[key] = line
    for nested in ("stratum", "meta", "rater"):
        if row.get(nested) not in (None, "") and not isinstance(row[nested], dict):
            # A plain "rater" column is not the rater's id (rater_id): refuse, never ignore.
            problems.add(
                line, nested, f"must be a JSON object of {nested}.<key> values (see the docs)"
            )
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
        # An empty judge value is an unparseable verdict (the judge answered, nothing could be
        # read from it): stored unscored, as the judge runs store theirs. Humans always answer.
        if not val and not (name == "value" and kind == "judge"):
            problems.add(line, name, "required")
            st.missing[name] = st.missing.get(name, 0) + 1
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
        prev = st.judge_value_types.setdefault((rater, judge_version), value_type)
        if prev != value_type:
            problems.add(
                line,
                "value_type",
                f"judge '{rater}' version '{judge_version}' mixes label and continuous values",
            )
    _rater_attributes(line, row, kind, rater, st)
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

    probability, sample = _confidence_cells(line, row, kind, st)

    strata, meta = _strata_and_meta(row)
    for dim in strata:
        if not _slug_ok(dim):
            problems.add(line, f"stratum.{dim}", "dimension keys are slugs (letters, digits, - _)")
    if item:
        entry = st.items.get(item)
        item_input = _text(row, "item_input")
        if entry is None:
            st.items[item] = {"input": item_input, "strata": dict(strata), "meta": dict(meta)}
        else:
            for dim, label in strata.items():
                entry["strata"].setdefault(dim, label)
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
        probability=probability,
        sample=sample,
    )

    # The row's columns outside the format (kept or not): one of them may be what separates
    # two outputs of an item that collide on the candidate.
    extras = {
        str(k): _text(row, k)
        for k in row
        if k not in _KNOWN_FIELDS and not isinstance(row[k], dict) and _text(row, k)
    }

    def register_output(out_id: str, candidate: str, text: str, fld: str) -> tuple[str, str]:
        key = (item, candidate)
        if len(candidate) > 200:
            problems.add(line, fld, "candidate names are at most 200 characters")
        known = st.output_ids.get(out_id)
        if known is not None and known != key:
            problems.add(
                line,
                fld,
                f"output '{out_id}' was item '{known[0]}' / candidate "
                f"'{known[1]}' earlier in the file",
            )
        st.output_ids.setdefault(out_id, key)
        st.output_lines.setdefault(out_id, line)
        st.output_columns.setdefault(out_id, (line, extras))
        entry = st.outputs.setdefault(key, {"text": "", "output_id": out_id})
        if entry["output_id"] != out_id:
            problems.add(
                line,
                fld,
                f"item '{item}' already has output '{entry['output_id']}' of "
                f"candidate '{candidate}' (one output per item and candidate): "
                + _collision_hint(candidate, extras, st.output_columns.get(entry["output_id"])),
                rank=_Problems.STRUCTURAL,
            )
        if text and not entry["text"]:
            entry["text"] = text
        return key

    if pairwise:
        st.pairwise_criteria.add(criterion)
        out_a, out_b = _text(row, "output_a"), _text(row, "output_b")
        for name, val in (("output_a", out_a), ("output_b", out_b)):
            if not val:
                problems.add(line, name, "required for a pairwise rating")
        cand_a, cand_b = _candidates(line, item, out_a, out_b, row, st)
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
        convention = _convention(line, row, st)
        if _text(row, "output_id"):
            problems.add(line, "output_id", "give either output_id or output_a/output_b")
        if len(problems.items) == start:
            key_a = register_output(out_a, cand_a, _text(row, "output_a_text"), "output_a")
            key_b = register_output(out_b, cand_b, _text(row, "output_b_text"), "output_b")
            # A pair listed the other way round later in the file is the same comparison: keep
            # the first orientation and describe this row's presentation order in its terms.
            first = st.pair_orientation.setdefault(frozenset((key_a, key_b)), (key_a, key_b))
            row_reversed = first != (key_a, key_b)
            if row_reversed:
                order = "ba" if order == "ab" else "ab"
            rating.pair = first
            rating.order = order
            rating.convention = convention
            # "outputs": A names this row's output_a, which is first[1] when the row lists the
            # pair the other way round. "presented": A names the output shown first.
            rating.flip = row_reversed if convention == "outputs" else order == "ba"
            subject = " / ".join(sorted((out_a, out_b)))
            _strata_record(line, item, subject, rater, strata, st)
    else:
        st.single_criteria.add(criterion)
        out_id = _text(row, "output_id")
        if not out_id:
            problems.add(line, "output_id", "required (or output_a/output_b for pairwise)")
            st.missing["output_id"] = st.missing.get("output_id", 0) + 1
        if _text(row, "order"):
            problems.add(line, "order", "only pairwise ratings have an order")
        candidate = _text_candidate(line, out_id, _text(row, "candidate"), "candidate", st)
        candidate = candidate or DEFAULT_CANDIDATE
        if len(problems.items) == start:
            rating.output = register_output(
                out_id, candidate, _text(row, "output_text"), "output_id"
            )
            _strata_record(line, item, out_id, rater, strata, st)
    if len(problems.items) == start:
        st.ratings.append(rating)
        if value_type != "continuous" and value:
            st.values_by_criterion.setdefault(criterion, []).append(value)
        else:
            st.values_by_criterion.setdefault(criterion, [])


def _confidence_cells(
    line: int, row: Mapping[str, Any], kind: str, st: _State
) -> tuple[float | None, int]:
    """The `probability` and `sample` cells of a row: judges only; a probability is a finite
    number in [0, 1], a sample index an integer >= 0 (default 0)."""
    problems = st.problems
    prob: float | None = None
    raw_p = _text(row, "probability")
    if raw_p:
        num = _as_number(raw_p)
        if kind != "judge":
            problems.add(line, "probability", "only judge rows carry a probability")
        elif num is None or not 0.0 <= num <= 1.0:
            problems.add(line, "probability", f"must be a number in [0, 1], got {raw_p!r}")
        else:
            prob = float(num)
    sample = 0
    raw_s = _text(row, "sample")
    if raw_s:
        num = _as_number(raw_s)
        if kind != "judge":
            problems.add(line, "sample", "only judge rows have samples")
        elif num is None or not float(num).is_integer() or num < 0 or num > 1_000_000:
            problems.add(line, "sample", f"must be an integer >= 0 (the sample index), got "
                                         f"{raw_s!r}")
        else:
            sample = int(num)
    return prob, sample


def _probability_problem(r: _Rating, view: _CriterionView, canon: str) -> str | None:
    """Why a judge row's probability contradicts its value: the judges app's rule
    (`judges.services.verdict_probability_problem`), read in the file's own orientation."""
    if r.probability is None:
        return None
    crit: Any = view.model
    if crit is None:  # pragma: no cover - every criterion view has its model
        return None
    return verdict_probability_problem(crit, canon, r.probability)


def _near_known(column: str) -> str | None:
    """The optional column `column` looks like a misspelling of, if any."""
    norm = "".join(c for c in column.lower() if c.isalnum())
    for known in _MEANINGFUL_OPTIONAL:
        if norm == known.replace("_", ""):
            return known
    close = difflib.get_close_matches(column.lower(), _MEANINGFUL_OPTIONAL, n=1, cutoff=0.8)
    return close[0] if close else None


def _convention(line: int, row: Mapping[str, Any], st: _State) -> str:
    """What this pairwise row's value refers to: its column, else the option; never a guess."""
    stated = _text(row, "pairwise_values").lower()
    if stated and stated not in PAIRWISE_CONVENTIONS:
        st.problems.add(
            line,
            "pairwise_values",
            f"must be 'outputs' (A = output_a is better) or 'presented' (A = the output shown "
            f"first is better), got {stated!r}",
        )
        return ""
    if stated and st.pairwise_values and stated != st.pairwise_values:
        st.problems.add(
            line,
            "pairwise_values",
            f"the row says '{stated}' but --pairwise-values says '{st.pairwise_values}'",
        )
        return ""
    convention = stated or st.pairwise_values or ""
    if not convention:
        st.problems.add(
            line,
            "pairwise_values",
            "required for a pairwise rating: 'outputs' if A means output_a is better, "
            "'presented' if A means the output the rater saw first is better (a column, or "
            "--pairwise-values for the whole file)",
        )
    return convention


def _candidates(
    line: int, item: str, out_a: str, out_b: str, row: Mapping[str, Any], st: _State
) -> tuple[str, str]:
    """candidate_a / candidate_b (from the row or the texts file), or the positions standing
    in when neither file gives them."""
    cand_a = _text_candidate(line, out_a, _text(row, "candidate_a"), "candidate_a", st)
    cand_b = _text_candidate(line, out_b, _text(row, "candidate_b"), "candidate_b", st)
    if cand_a and cand_b:
        return cand_a, cand_b
    if cand_a or cand_b:
        missing = "candidate_b" if cand_a else "candidate_a"
        st.problems.add(
            line,
            missing,
            "give both candidate columns or neither (positions then stand in); the texts file "
            "may give them too (a candidate key on the output's row)",
        )
        return cand_a, cand_b
    # An output seen before keeps its candidate (a pair listed the other way round later).
    known = [st.output_ids.get(o) for o in (out_a, out_b)]
    got = [k[1] if k is not None and k[0] == item else "" for k in known]
    first, second = POSITION_CANDIDATES
    if not got[0] and not got[1]:
        got = [first, second]
    elif not got[0]:
        got[0] = first if got[1] != first else second
    elif not got[1]:
        got[1] = second if got[0] != second else first
    st.position_candidate_rows += 1
    return got[0], got[1]


def _text_candidate(line: int, out_id: str, given: str, fld: str, st: _State) -> str:
    """The candidate of an output: the ratings row's, else the texts file's; the two files
    naming different candidates is an error naming both lines."""
    from_texts = st.text_candidates.get(out_id) if out_id else None
    if from_texts is None:
        return given
    text_candidate, text_line = from_texts
    if given and given != text_candidate:
        st.problems.add(
            line,
            fld,
            f"output '{out_id}' is candidate '{given}' on line {line} of the ratings file but "
            f"'{text_candidate}' on line {text_line} of the texts file",
        )
        return given
    return text_candidate


def _collision_hint(
    candidate: str, extras: Mapping[str, str], first: tuple[int, dict[str, str]] | None
) -> str:
    """Which column would separate two outputs of an item that share a candidate."""
    pairs = candidate in POSITION_CANDIDATES
    parts: list[str] = []
    if pairs:
        parts.append(
            "without candidate_a/candidate_b the positions stand in for candidates, so an item "
            "can have one comparison only: add candidate_a and candidate_b columns (or a "
            "candidate key per output in the texts file)"
        )
    elif candidate == DEFAULT_CANDIDATE:
        parts.append(
            "the file has no candidate column, so every output is of candidate "
            f"'{DEFAULT_CANDIDATE}': add a candidate column naming the system that produced "
            "each output (or a candidate key per output in the texts file)"
        )
    else:
        parts.append(
            "two outputs of one item need different candidates (a further output of the same "
            "system is another item)"
        )
    if first is not None:
        first_line, first_cols = first
        varying = [c for c, v in extras.items() if first_cols.get(c) != v]
        varying += [c for c in first_cols if c not in extras and c not in varying]
        if varying:
            shown = ", ".join(f"'{c}'" for c in varying[:3])
            target = "candidate_a/candidate_b" if pairs else "candidate"
            parts.append(
                f"column {shown} differs between line {first_line} and this line: if it names "
                f"the system, that is the {target} column"
            )
    return "; ".join(parts)


def _missing_columns(st: _State, n_rows: int) -> None:
    """A column the file does not have is one problem, listed first, instead of one per row
    (an empty cell of a column the file has stays a problem of its row)."""
    absent = [
        col
        for col, n in st.missing.items()
        if n_rows and n == n_rows and col not in st.columns
    ]
    if not absent:
        return
    problems = st.problems
    kept = [
        (rank, entry)
        for rank, entry in zip(problems.ranks, problems.items, strict=True)
        if not (entry.get("path") in absent and str(entry["message"]).startswith("required"))
    ]
    header = [
        (
            _Problems.FILE_LEVEL,
            {
                "path": col,
                "message": (
                    "the file has neither an output_id column nor output_a/output_b "
                    "(pairwise); every row needs one"
                    if col == "output_id"
                    else f"the file has no '{col}' column (every row needs one)"
                ),
                "line": 1,
            },
        )
        for col in absent
    ]
    problems.replace_all(header + kept)


def _rater_attributes(line: int, row: Mapping[str, Any], kind: str, rater: str, st: _State) -> None:
    attrs = _prefixed(row, "rater")
    if not attrs or not rater:
        return
    if kind == "judge":
        for key in attrs:
            st.judge_attribute_keys.setdefault(key, line)
        return
    if kind != "human":
        return
    stored = st.rater_attributes.setdefault(rater, {})
    for key, raw in attrs.items():
        if not _slug_ok(key):
            st.problems.add(line, f"rater.{key}", "attribute keys are slugs (letters, digits, - _)")
            continue
        value = str(raw).strip()
        if len(value) > 200:
            st.problems.add(line, f"rater.{key}", "longer than 200 characters")
            continue
        if stored.setdefault(key, value) != value:
            first = st.rater_attribute_lines[(rater, key)]
            st.problems.add(
                line,
                f"rater.{key}",
                f"rater '{rater}' is '{stored[key]}' on line {first} but '{value}' here "
                "(a rater attribute describes the rater, the same on all of its rows)",
            )
        st.rater_attribute_lines.setdefault((rater, key), line)


def _strata_record(
    line: int, item: str, subject: str, rater: str, strata: Mapping[str, str], st: _State
) -> None:
    for dim, label in strata.items():
        st.strata_seen.setdefault(dim, {}).setdefault(item, []).append(
            _StratumSeen(line=line, subject=subject, rater=rater, label=label)
        )


def _strata_conflicts(st: _State) -> None:
    """One problem per item whose stratum label differs between its rows, saying what the
    column describes instead (the output, the rater) and which column to use for that."""
    for dim, by_item in st.strata_seen.items():
        conflicting = {
            item: seen for item, seen in by_item.items() if len({s.label for s in seen}) > 1
        }
        if not conflicting:
            continue
        per_subject = all(
            len({s.label for s in seen if s.subject == subj}) == 1
            for seen in conflicting.values()
            for subj in {s.subject for s in seen}
        )
        rater_labels: dict[str, set[str]] = {}
        for seen in by_item.values():
            for s in seen:
                rater_labels.setdefault(s.rater, set()).add(s.label)
        per_rater = all(len(labels) == 1 for labels in rater_labels.values())
        if per_subject:
            hint = (
                "it differs between the outputs of the item, so it describes the output, not "
                "the item: if it names the system that produced the output, that is the "
                "candidate column (candidate_a / candidate_b for pairs); strata label items"
            )
        elif per_rater:
            hint = (
                f"it is the same on every row of a rater, so it describes the rater: make it "
                f"the rater attribute column rater.{dim}"
            )
        else:
            hint = (
                "strata label items; a label of the output belongs in the candidate column, "
                f"one of the rater in rater.{dim}"
            )
        for item, seen in conflicting.items():
            first = seen[0]
            other = next(s for s in seen if s.label != first.label)
            st.problems.add(
                other.line,
                f"stratum.{dim}",
                f"item '{item}' is '{first.label}' on line {first.line} but '{other.label}' "
                f"here: {hint}",
                rank=_Problems.STRUCTURAL,
            )


_TEXT_KEYS = frozenset(
    {
        "item_id",
        "output_id",
        "input",
        "item_input",
        "text",
        "output_text",
        "candidate",
        "output_a",
        "output_b",
        "candidate_a",
        "candidate_b",
    }
)
# Where a texts row names an output's candidate: (output column, candidate column).
_TEXT_CANDIDATE_KEYS = (
    ("output_id", "candidate"),
    ("output_a", "candidate_a"),
    ("output_b", "candidate_b"),
)


def _texts_read(
    texts: Iterable[tuple[int, Mapping[str, Any]]], st: _State
) -> list[tuple[int, Mapping[str, Any]]]:
    """Read the texts file once, before the ratings: the candidate of an output may come from
    it (a ``candidate`` key on the output's row, or ``candidate_a``/``candidate_b`` beside
    ``output_a``/``output_b``). One output named as two candidates in it is an error."""
    rows: list[tuple[int, Mapping[str, Any]]] = []
    try:
        for line, row in texts:
            rows.append((line, row))
            for out_key, cand_key in _TEXT_CANDIDATE_KEYS:
                out, cand = _text(row, out_key), _text(row, cand_key)
                if cand and not out:
                    st.problems.add(
                        line, out_key, f"a {cand_key} needs its {out_key}", where="texts line"
                    )
                if not out or not cand:
                    continue
                if len(cand) > 200:
                    st.problems.add(
                        line, cand_key, "candidate names are at most 200 characters",
                        where="texts line",
                    )
                    continue
                known = st.text_candidates.setdefault(out, (cand, line))
                if known[0] != cand:
                    st.problems.add(
                        line,
                        cand_key,
                        f"output '{out}' is candidate '{cand}' on line {line} of the texts file "
                        f"but '{known[0]}' on line {known[1]} of the texts file",
                        where="texts line",
                    )
    except ReadError as exc:
        field_name, _, message = exc.message.partition(":")
        st.problems.add(exc.line, field_name, message.strip(), where="texts line")
    return rows


def _apply_texts(
    texts: Iterable[tuple[int, Mapping[str, Any]]], st: _State, warnings: list[str]
) -> None:
    """Fill item inputs and output texts from a texts file (JSON Lines keyed by id).

    A text the ratings file also gives must be the same; ids the ratings do not name are
    counted and ignored (a release's texts file often covers more than the rated subset).
    """
    problems = st.problems
    unmatched = 0
    ignored: dict[str, int] = {}
    given: dict[tuple[str, str], int] = {}
    try:
        for line, row in texts:
            for key in row:
                if key not in _TEXT_KEYS:
                    ignored.setdefault(str(key), line)
            item, out = _text(row, "item_id"), _text(row, "output_id")
            item_input = _text(row, "input") or _text(row, "item_input")
            out_text = _text(row, "text") or _text(row, "output_text")
            if not item and not out:
                if _text(row, "output_a") or _text(row, "output_b"):
                    continue  # candidates of a pair's outputs only (read by _texts_read)
                problems.add(
                    line, "item_id", "each row needs item_id or output_id", where="texts line"
                )
                continue
            if item_input and not item:
                problems.add(line, "item_id", "an input needs its item_id", where="texts line")
            if out_text and not out:
                problems.add(line, "output_id", "a text needs its output_id", where="texts line")
            for kind, ident, text in (("item", item, item_input), ("output", out, out_text)):
                if not ident or not text:
                    continue
                entry: dict[str, Any] | None
                if kind == "item":
                    entry = st.items.get(ident)
                    slot = "input"
                else:
                    out_key = st.output_ids.get(ident)
                    if out_key is not None and item and out_key[0] != item:
                        problems.add(
                            line,
                            "output_id",
                            f"output '{ident}' is of item '{out_key[0]}' in the ratings file, "
                            f"not '{item}'",
                            where="texts line",
                        )
                        continue
                    entry = st.outputs.get(out_key) if out_key is not None else None
                    slot = "text"
                if entry is None:
                    unmatched += 1
                    continue
                first = given.get((kind, ident))
                if first is not None and entry[slot] != text:
                    problems.add(
                        line,
                        "output_id" if kind == "output" else "item_id",
                        f"{kind} '{ident}' has another text on texts line {first}",
                        where="texts line",
                    )
                elif first is None and entry[slot] and entry[slot] != text:
                    problems.add(
                        line,
                        "output_id" if kind == "output" else "item_id",
                        f"{kind} '{ident}' has a different text in the ratings file",
                        where="texts line",
                    )
                else:
                    entry[slot] = text
                    given.setdefault((kind, ident), line)
    except ReadError as exc:  # a caller passing an unread file (read errors once)
        field_name, _, message = exc.message.partition(":")
        problems.add(exc.line, field_name, message.strip(), where="texts line")
    if unmatched:
        warnings.append(
            f"{unmatched} texts of the texts file name an item or output that is not in the "
            "ratings file; they were ignored"
        )
    for key, line in ignored.items():
        warnings.append(
            f"texts file: key '{key}' (first on line {line}) is not item_id, output_id, input, "
            "text or candidate and was ignored"
        )


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
    pairwise_values: str | None = None,
    texts: Iterable[tuple[int, Mapping[str, Any]]] | None = None,
    dry_run: bool = False,
    pass_thresholds: Mapping[str, int] | None = None,
) -> ImportSummary:
    """Validate all rows, then write them in one transaction (all-or-nothing, idempotent).

    `scales` gives the scale of criteria that do not exist yet (otherwise inferred from the
    values where that cannot re-type them, and stated in the summary); `families` maps
    candidate and judge names to a model family (for the self-preference audit);
    `pairwise_values` ("outputs" | "presented") what pairwise values refer to where the rows
    do not say; `texts` the rows of a texts file (JSON Lines keyed by item_id / output_id);
    `pass_thresholds` the first passing point of ordinal criteria (see `ratings_validate`).
    `dry_run` writes everything and rolls it back, so the summary says what an import would
    do and nothing stays. Every table is written by its owning app's import services
    (studies, judges, annotations), which also hold the rules the rows obey.
    """
    plan = ratings_validate(
        study=study,
        rows=rows,
        scales=scales,
        pairwise_values=pairwise_values,
        texts=texts,
        pass_thresholds=pass_thresholds,
    )
    families = dict(families or {})
    summary = ImportSummary(
        rows=len(plan.ratings),
        criteria=plan.criteria_info,
        notes=list(plan.notes),
        warnings=list(plan.warnings),
        dry_run=dry_run,
    )
    with transaction.atomic():
        _write(study, plan, families, created_by, summary)
        if dry_run:
            # Everything was checked by the writing services too; nothing may stay.
            transaction.set_rollback(True)
    return summary


def _write(
    study: Study,
    plan: _Plan,
    families: Mapping[str, str],
    created_by: Any,
    summary: ImportSummary,
) -> None:
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
            (item_ids[item], cand_ids[cand]): spec for (item, cand), spec in plan.outputs.items()
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
    if plan.rater_attributes:
        n_attr = studies_imports.annotator_attributes_import(
            study=study,
            attributes={user_ids[r]: attrs for r, attrs in plan.rater_attributes.items() if attrs},
        )
        if n_attr:
            summary.bump("updated", "rater_attributes", n_attr)
    version_ids = _write_judges(study, plan, families, created_by, summary)
    _write_ratings(plan, crit_by_key, output_ids, comparison_of, user_ids, version_ids, summary)


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
        summary.criteria[key] = {**summary.criteria.get(key, {}), "rubric": f"v{rubric.version}"}
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
    ver: dict[tuple[int, int, str, int], list[ImportedSample]] = {}
    ver_crit: dict[tuple[int, int, str, int], tuple[Criterion, bool]] = {}
    for r in plan.ratings:
        view = plan.criteria[r.criterion]
        crit = crit_by_key[r.criterion]
        continuous = r.value_type == "continuous"
        value: str | None
        if _unparseable(r):
            value = ""  # unparseable: no value to canonicalise or swap
        else:
            value = _continuous_text(r.raw_value) if continuous else view.canonical(r.raw_value)
        assert value is not None
        if r.pair is not None:
            cid, reversed_ = comparison_of[r.pair]
            # In terms of the file's first orientation of the pair (r.flip), then of the
            # comparison as stored (reversed_ when an earlier import stored it the other way).
            value = _SWAP[value] if value and r.flip != reversed_ else value
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
            calls = ver.setdefault(key, [])
            ver_crit[key] = (crit, continuous)
            # The order key records which output the judge saw first, in canonical terms.
            prob = r.probability
            if r.pair is not None:
                cid, reversed_ = comparison_of[r.pair]
                order = "ab" if (r.order == "ab") != reversed_ else "ba"
                # P(A better) turns with the value when A and B are swapped.
                if prob is not None and r.flip != reversed_:
                    prob = 1.0 - prob
            else:
                order = ""
            calls.append(ImportedSample(order=order, sample=r.sample, value=value,
                                        probability=prob))
    counts = annotations_import_bulk(labels=ann)
    if ann:
        summary.bump("created", "annotation", counts.created)
        summary.bump("updated", "annotation", counts.updated)
        if counts.unchanged:
            summary.bump("unchanged", "annotation", counts.unchanged)
    vcounts = verdicts_import_bulk(
        verdicts={
            key: VerdictImport(criterion=crit, continuous=continuous, samples=tuple(calls))
            for key, calls in ver.items()
            for crit, continuous in (ver_crit[key],)
        }
    )
    if ver:
        summary.bump("created", "verdict", vcounts.created)
        summary.bump("updated", "verdict", vcounts.updated)
        if vcounts.unchanged:
            summary.bump("unchanged", "verdict", vcounts.unchanged)
