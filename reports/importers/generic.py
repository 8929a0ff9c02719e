"""The generic long ratings format: one row per rating, CSV or JSON Lines (docs/import-ratings.md).

Reading (`ratings_read`) yields ``(line number, row dict)``; `ratings_validate` checks every row
and resolves it against the study without writing; `ratings_import` (the service) validates
everything first and then writes ordinary ReviewHub rows in one transaction, so that reports
treat imported and native data the same: Items (with strata), Candidates, Outputs,
Comparisons, imported Judges / JudgeVersions / Verdicts, inactive annotator users with
memberships, and Annotations. Re-importing the same rows changes nothing (upsert by natural
keys); any invalid row means nothing is written.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection, models, transaction
from django.db.models import Max
from django.utils import timezone

from annotations.models import Annotation
from judges.models import Judge, JudgeVersion, Verdict
from reviewhub.api.errors import ValidationFailed
from studies.criteria import PAIRWISE_VALUES, criterion_allowed_values
from studies.models import (
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)

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

    def __init__(self, key: str, scale: str, values: list[str], existing: Criterion | None) -> None:
        self.key = key
        self.scale = scale
        self.values = values
        self.existing = existing
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
    severity: int | None
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
        if not _slug_ok(key):
            problems.add(
                line,
                "criterion",
                f"'{key}' is not a valid criterion key (letters, "
                "digits, - and _; at most 60 characters)",
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
        new_criteria[key] = spec
        values = (
            list(PAIRWISE_VALUES)
            if spec.scale == "pairwise"
            else (["pass", "fail"] if spec.scale == "binary" else list(spec.points))
        )
        criteria[key] = _CriterionView(key, spec.scale, values, None)
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
        elif view.canonical(r.raw_value) is None:
            problems.add(
                r.line,
                "value",
                f"{r.raw_value!r} is not a value of the {view.scale} "
                f"criterion '{r.criterion}' (allowed: {', '.join(view.values)})",
            )
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
    severity: int | None = None
    sev_text = _text(row, "severity")
    if sev_text:
        sev = _as_number(sev_text)
        if kind != "human":
            problems.add(line, "severity", "only human ratings carry a severity")
        elif sev is None or not float(sev).is_integer() or not 1 <= sev <= 5:
            problems.add(line, "severity", f"must be an integer 1..5, got {sev_text!r}")
        else:
            severity = int(sev)

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


def _value_num(scale: str, value: str, continuous: bool) -> float | None:
    if continuous:
        return float(value)
    if scale == "binary":
        return 1.0 if value == "pass" else 0.0
    if scale == "pairwise":
        return {"A": 1.0, "B": 0.0, "tie": 0.5}[value]
    if scale == "ordinal":
        return float(int(value))
    return None


def _continuous_text(raw: str) -> str:
    return repr(float(raw))


def importer_username(study: Study, rater_id: str) -> str:
    """The username of the inactive account that holds an imported human rater's labels."""
    name = f"{study.slug}:{rater_id}"
    if len(name) <= 150:
        return name
    digest = hashlib.sha256(rater_id.encode()).hexdigest()[:16]
    return f"{study.slug}:{rater_id[: 150 - len(study.slug) - 18]}~{digest}"


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
    model family (for the self-preference audit).
    """
    plan = ratings_validate(study=study, rows=rows, scales=scales)
    families = dict(families or {})
    summary = ImportSummary(rows=len(plan.ratings))
    with transaction.atomic():
        crit_by_key = _write_criteria(study, plan, summary, created_by)
        item_ids = _write_items(study, plan, summary)
        cand_ids = _write_candidates(study, plan, families, summary)
        output_ids = _write_outputs(study, plan, item_ids, cand_ids, summary)
        comparison_of = _write_comparisons(study, plan, item_ids, output_ids, summary)
        user_ids = _write_humans(study, plan, summary)
        version_ids = _write_judges(study, plan, families, created_by, summary)
        _write_ratings(plan, crit_by_key, output_ids, comparison_of, user_ids, version_ids, summary)
    return summary


def _write_criteria(
    study: Study, plan: _Plan, summary: ImportSummary, created_by: Any
) -> dict[str, Criterion]:
    out = {k: v.existing for k, v in plan.criteria.items() if v.existing is not None}
    if plan.new_criteria:
        rubric = study.rubric_versions.order_by("-version").first()
        if rubric is None:
            rubric = RubricVersion.objects.create(
                study=study,
                version=1,
                created_by=created_by,
                notes="created by the ratings importer",
            )
        pos = (Criterion.objects.filter(rubric=rubric).aggregate(m=Max("position"))["m"] or 0) + 1
        for i, (key, spec) in enumerate(plan.new_criteria.items()):
            out[key] = Criterion.objects.create(
                rubric=rubric,
                key=key,
                name=key,
                scale=spec.scale,
                points=spec.as_points(),
                position=pos + i,
            )
            summary.criteria_created.append(key)
            summary.notes.append(
                f"criterion '{key}' created in rubric v{rubric.version} as {spec.describe()}"
            )
            summary.bump("created", "criterion")
    return out


def _write_items(study: Study, plan: _Plan, summary: ImportSummary) -> dict[str, int]:
    existing = {
        it.external_id: it
        for it in Item.objects.filter(study=study, external_id__in=list(plan.items))
    }
    new: list[Item] = []
    changed: list[Item] = []
    dims: dict[str, None] = {}
    for ext, spec in plan.items.items():
        for dim in spec["strata"]:
            dims.setdefault(dim, None)
        meta = {**spec["meta"], **spec["strata"]}
        it = existing.get(ext)
        if it is None:
            new.append(
                Item(
                    study=study,
                    external_id=ext,
                    input=spec["input"],
                    metadata=meta,
                    strata=dict(spec["strata"]),
                )
            )
            continue
        merged_meta = {**(it.metadata or {}), **meta}
        merged_strata = {**(it.strata or {}), **spec["strata"]}
        new_input = spec["input"] or it.input
        if merged_meta != it.metadata or merged_strata != it.strata or new_input != it.input:
            it.metadata, it.strata, it.input = merged_meta, merged_strata, new_input
            changed.append(it)
        else:
            summary.bump("unchanged", "item")
    Item.objects.bulk_create(new, batch_size=BATCH)
    Item.objects.bulk_update(changed, ["metadata", "strata", "input"], batch_size=BATCH)
    summary.bump("created", "item", len(new))
    summary.bump("updated", "item", len(changed))
    # Strata columns become categorical dimensions reading the same metadata key, so that a
    # later recompute of the scheme gives every item the label it was imported with.
    have = set(StratumDimension.objects.filter(study=study).values_list("key", flat=True))
    pos = StratumDimension.objects.filter(study=study).aggregate(m=Max("position"))["m"] or 0
    for i, dim in enumerate(d for d in dims if d not in have):
        StratumDimension.objects.create(
            study=study,
            key=dim,
            name=dim,
            kind="categorical",
            source=f"metadata.{dim}",
            config={},
            position=pos + 1 + i,
        )
        summary.bump("created", "stratum_dimension")
    return dict(
        Item.objects.filter(study=study, external_id__in=list(plan.items)).values_list(
            "external_id", "id"
        )
    )


def _write_candidates(
    study: Study, plan: _Plan, families: Mapping[str, str], summary: ImportSummary
) -> dict[str, int]:
    names = {cand for (_, cand) in plan.outputs}
    existing = {c.name: c for c in Candidate.objects.filter(study=study, name__in=names)}
    new = [
        Candidate(study=study, name=n, model_id=n, model_family=families.get(n, ""))
        for n in sorted(names)
        if n not in existing
    ]
    Candidate.objects.bulk_create(new)
    summary.bump("created", "candidate", len(new))
    for name, cand in existing.items():
        fam = families.get(name)
        if fam and cand.model_family != fam:
            cand.model_family = fam
            cand.save(update_fields=["model_family", "updated_at"])
            summary.bump("updated", "candidate")
    return dict(Candidate.objects.filter(study=study, name__in=names).values_list("name", "id"))


def _write_outputs(
    study: Study,
    plan: _Plan,
    item_ids: Mapping[str, int],
    cand_ids: Mapping[str, int],
    summary: ImportSummary,
) -> dict[tuple[str, str], int]:
    existing: dict[tuple[int, int], Output] = {
        (o.item_id, o.candidate_id): o
        for o in Output.objects.filter(
            study=study,
            item_id__in=list(item_ids.values()),
            candidate_id__in=list(cand_ids.values()),
        )
    }
    new: list[Output] = []
    changed: list[Output] = []
    for (item, cand), spec in plan.outputs.items():
        key = (item_ids[item], cand_ids[cand])
        out = existing.get(key)
        if out is None:
            new.append(
                Output(
                    study=study,
                    item_id=key[0],
                    candidate_id=key[1],
                    text=spec["text"],
                    metadata={"import_output_id": spec["output_id"]},
                )
            )
        elif spec["text"] and out.text != spec["text"]:
            out.text = spec["text"]
            changed.append(out)
    Output.objects.bulk_create(new, batch_size=BATCH)
    Output.objects.bulk_update(changed, ["text"], batch_size=BATCH)
    summary.bump("created", "output", len(new))
    summary.bump("updated", "output", len(changed))
    ids = {
        (i, c): oid
        for oid, i, c in Output.objects.filter(
            study=study,
            item_id__in=list(item_ids.values()),
            candidate_id__in=list(cand_ids.values()),
        ).values_list("id", "item_id", "candidate_id")
    }
    return {(item, cand): ids[(item_ids[item], cand_ids[cand])] for (item, cand) in plan.outputs}


def _write_comparisons(
    study: Study,
    plan: _Plan,
    item_ids: Mapping[str, int],
    output_ids: Mapping[tuple[str, str], int],
    summary: ImportSummary,
) -> dict[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]]:
    """Comparison id per pair as written in the file, and whether it is stored reversed."""
    if not plan.pairs:
        return {}
    out_ids = {output_ids[k] for pair in plan.pairs for k in pair}
    existing = {
        (a, b): cid
        for cid, a, b in Comparison.objects.filter(
            study=study, output_a_id__in=out_ids
        ).values_list("id", "output_a_id", "output_b_id")
    }
    new: list[Comparison] = []
    planned: set[tuple[int, int]] = set()
    for pair in plan.pairs:
        a, b = output_ids[pair[0]], output_ids[pair[1]]
        if (a, b) in existing or (b, a) in existing or (b, a) in planned or (a, b) in planned:
            continue
        planned.add((a, b))
        new.append(
            Comparison(study=study, item_id=item_ids[pair[0][0]], output_a_id=a, output_b_id=b)
        )
    Comparison.objects.bulk_create(new, batch_size=BATCH)
    summary.bump("created", "comparison", len(new))
    existing = {
        (a, b): cid
        for cid, a, b in Comparison.objects.filter(
            study=study, output_a_id__in=out_ids
        ).values_list("id", "output_a_id", "output_b_id")
    }
    result: dict[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]] = {}
    for pair in plan.pairs:
        a, b = output_ids[pair[0]], output_ids[pair[1]]
        result[pair] = (existing[(a, b)], False) if (a, b) in existing else (existing[(b, a)], True)
    return result


def _write_humans(study: Study, plan: _Plan, summary: ImportSummary) -> dict[str, int]:
    User = get_user_model()
    raters = list({r.rater: None for r in plan.ratings if r.kind == "human"})
    names = {r: importer_username(study, r) for r in raters}
    existing = dict(
        User.objects.filter(username__in=list(names.values())).values_list("username", "id")
    )
    unusable = make_password(None)
    new = [
        User(username=names[r], is_active=False, password=unusable)
        for r in raters
        if names[r] not in existing
    ]
    User.objects.bulk_create(new, batch_size=BATCH)
    summary.bump("created", "user", len(new))
    ids = dict(User.objects.filter(username__in=list(names.values())).values_list("username", "id"))
    members = set(
        Membership.objects.filter(study=study, user_id__in=list(ids.values())).values_list(
            "user_id", flat=True
        )
    )
    new_members = [
        Membership(study=study, user_id=uid, role=Membership.Role.ANNOTATOR)
        for uid in ids.values()
        if uid not in members
    ]
    Membership.objects.bulk_create(new_members, batch_size=BATCH)
    summary.bump("created", "membership", len(new_members))
    return {r: ids[names[r]] for r in raters}


def _version_hash(label: str, value_type: str) -> str:
    canon = json.dumps({"imported_label": label, "value_type": value_type}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def _write_judges(
    study: Study,
    plan: _Plan,
    families: Mapping[str, str],
    created_by: Any,
    summary: ImportSummary,
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for (name, label), value_type in plan.judge_value_types.items():
        judge = Judge.objects.filter(study=study, name=name).first()
        if judge is None:
            judge = Judge.objects.create(
                study=study,
                name=name,
                kind=Judge.Kind.IMPORTED,
                description="Ratings imported from a file",
                created_by=created_by,
            )
            summary.bump("created", "judge")
        elif judge.kind != Judge.Kind.IMPORTED:
            raise ValidationFailed(
                f"The ratings did not validate: rater_id: '{name}' is an existing {judge.kind} "
                "judge; imported ratings need their own judge name",
                details={
                    "errors": [f"rater_id: '{name}' is an existing {judge.kind} judge"],
                    "error_count": 1,
                },
            )
        digest = _version_hash(label, value_type)
        version = JudgeVersion.objects.filter(judge=judge, content_hash=digest).first()
        family = families.get(name, "")
        if version is None:
            number = (judge.versions.aggregate(m=Max("version"))["m"] or 0) + 1
            version = JudgeVersion.objects.create(
                judge=judge,
                version=number,
                content_hash=digest,
                model_family=family,
                config={"imported": True, "label": label, "value_type": value_type},
            )
            summary.bump("created", "judge_version")
        elif family and version.model_family != family:
            version.model_family = family
            version.save(update_fields=["model_family"])
        out[(name, label)] = version.pk
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
    ann: dict[tuple[int, int, str, int], dict[str, Any]] = {}
    ver: dict[tuple[int, int, str, int], dict[str, Any]] = {}
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
            ann[(user_ids[r.rater], crit.pk, *subject)] = {
                "value": value,
                "value_num": _value_num(view.scale, value, False),
                "severity": r.severity,
            }
        else:
            key = (version_ids[(r.rater, r.judge_version)], crit.pk, *subject)
            entry = ver.setdefault(
                key, {"orders": {}, "continuous": continuous, "scale": view.scale}
            )
            # The order key records which output the judge saw first, in canonical terms.
            if r.pair is not None:
                cid, reversed_ = comparison_of[r.pair]
                entry["orders"]["ab" if (r.order == "ab") != reversed_ else "ba"] = value
            else:
                entry["orders"][""] = value
    _upsert_annotations(ann, summary)
    _upsert_verdicts(ver, summary)


def _bulk_insert(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    """Insert many rows of simple values (ints, floats, str, None).

    On PostgreSQL this streams them with COPY: building 75k model instances for bulk_create
    costs several seconds of pure Python, COPY a fraction of that. Every other concrete column
    gets its model default, so columns added later with a default keep working.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create([model(**r) for r in rows], batch_size=BATCH)
        return
    given = list(rows[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    by_attname = {f.attname: f for f in fields}
    now = timezone.now()
    defaults: dict[str, Any] = {}
    for f in fields:
        if f.attname in given:
            continue
        column = str(f.column)
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[column] = now
        elif isinstance(f, models.JSONField):
            defaults[column] = json.dumps(f.get_default())
        else:
            defaults[column] = f.get_default()
    columns = [str(by_attname[a].column) for a in given] + list(defaults)
    tail = tuple(defaults.values())
    sql = f'COPY "{model._meta.db_table}" (' + ", ".join(f'"{c}"' for c in columns) + ") FROM STDIN"
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        for r in rows:
            copy.write_row((*r.values(), *tail))


def _upsert_annotations(
    ann: Mapping[tuple[int, int, str, int], dict[str, Any]], summary: ImportSummary
) -> None:
    if not ann:
        return
    users = {k[0] for k in ann}
    crits = {k[1] for k in ann}
    existing: dict[tuple[int, int, str, int], Annotation] = {}
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
        subj = ("output", a.output_id) if a.output_id else ("comparison", a.comparison_id)
        existing[(a.annotator_id, a.criterion_id, *subj)] = a  # type: ignore[index]
    new: list[dict[str, Any]] = []
    changed: list[Annotation] = []
    for key, spec in ann.items():
        cur = existing.get(key)
        if cur is None:
            is_output = key[2] == "output"
            new.append(
                {
                    "annotator_id": key[0],
                    "criterion_id": key[1],
                    "output_id": key[3] if is_output else None,
                    "comparison_id": None if is_output else key[3],
                    "value": spec["value"],
                    "value_num": spec["value_num"],
                    "severity": spec["severity"],
                    "source": Annotation.Source.IMPORT.value,
                }
            )
        elif (cur.value, cur.severity) != (spec["value"], spec["severity"]):
            cur.value, cur.value_num, cur.severity = (
                spec["value"],
                spec["value_num"],
                spec["severity"],
            )
            changed.append(cur)
        else:
            summary.bump("unchanged", "annotation")
    _bulk_insert(Annotation, new)
    Annotation.objects.bulk_update(changed, ["value", "value_num", "severity"], batch_size=BATCH)
    summary.bump("created", "annotation", len(new))
    summary.bump("updated", "annotation", len(changed))


def _verdict_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    orders: dict[str, str] = spec["orders"]
    details: dict[str, Any] = {"imported": True}
    if spec["continuous"]:
        details["value_type"] = "continuous"
    if "" in orders:
        value = orders[""]
    else:
        details["orders"] = dict(sorted(orders.items()))
        vals = list(orders.values())
        # Same rule as judge runs: consistent orders give that label, inconsistent ones a tie.
        value = vals[0] if len(set(vals)) == 1 else "tie"
        if len(vals) == 2:
            details["position_inconsistent"] = len(set(vals)) > 1
    return {
        "value": value,
        "value_num": _value_num(spec["scale"], value, spec["continuous"]),
        "details": details,
        "n_samples": max(1, len(orders)),
    }


def _upsert_verdicts(
    ver: Mapping[tuple[int, int, str, int], dict[str, Any]], summary: ImportSummary
) -> None:
    if not ver:
        return
    versions = {k[0] for k in ver}
    crits = {k[1] for k in ver}
    existing: dict[tuple[int, int, str, int], Verdict] = {}
    for v in Verdict.objects.filter(judge_version_id__in=versions, criterion_id__in=crits).only(
        "id",
        "judge_version_id",
        "criterion_id",
        "output_id",
        "comparison_id",
        "value",
        "value_num",
        "details",
        "n_samples",
        "is_scored",
    ):
        subj = ("output", v.output_id) if v.output_id else ("comparison", v.comparison_id)
        existing[(v.judge_version_id, v.criterion_id, *subj)] = v  # type: ignore[index]
    new: list[dict[str, Any]] = []
    changed: list[Verdict] = []
    for key, spec in ver.items():
        fields = _verdict_fields(spec)
        cur = existing.get(key)
        if cur is None:
            is_output = key[2] == "output"
            new.append(
                {
                    "judge_version_id": key[0],
                    "criterion_id": key[1],
                    "output_id": key[3] if is_output else None,
                    "comparison_id": None if is_output else key[3],
                    "source": Verdict.Source.IMPORT.value,
                    "is_scored": True,
                    "value": fields["value"],
                    "value_num": fields["value_num"],
                    "details": json.dumps(fields["details"])
                    if connection.vendor == "postgresql"
                    else fields["details"],
                    "n_samples": fields["n_samples"],
                }
            )
        elif (cur.value, cur.details, cur.is_scored) != (fields["value"], fields["details"], True):
            for k, v in fields.items():
                setattr(cur, k, v)
            cur.is_scored = True
            changed.append(cur)
        else:
            summary.bump("unchanged", "verdict")
    _bulk_insert(Verdict, new)
    Verdict.objects.bulk_update(
        changed, ["value", "value_num", "details", "n_samples", "is_scored"], batch_size=BATCH
    )
    summary.bump("created", "verdict", len(new))
    summary.bump("updated", "verdict", len(changed))
