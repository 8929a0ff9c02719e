"""Checking a ratings file row by row: who rated what, on which output or pair, in which strata."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from judges.services import (
    verdict_probability_problem,
)
from reviewhub.errors import Problems
from studies.ingest.validation import recorded_request_check
from studies.strata import as_number

from ._ratings_scales import _CriterionView

DEFAULT_CANDIDATE = "imported"
DEFAULT_JUDGE_VERSION = "imported"
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
        "item_recorded_request",
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


def _validate_row(line: int, row: Mapping[str, Any], st: _State) -> None:
    problems = st.problems
    start = len(problems.items)
    _row_columns_check(line, row, st)
    item, rater, kind, criterion, value, judge_version, value_type = _rating_cells(line, row, st)
    _rater_attributes(line, row, kind, rater, st)
    severity = _severity_cell(line, row, kind, problems)
    probability, sample = _confidence_cells(line, row, kind, st)
    strata = _item_record(line, row, item, st)
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
    if _text(row, "output_a") or _text(row, "output_b"):
        _pairwise_subject(line, row, rating, strata, extras, start, st)
    else:
        _single_subject(line, row, rating, strata, extras, start, st)
    if len(problems.items) == start:
        st.ratings.append(rating)
        if value_type != "continuous" and value:
            st.values_by_criterion.setdefault(criterion, []).append(value)
        else:
            st.values_by_criterion.setdefault(criterion, [])


def _row_columns_check(line: int, row: Mapping[str, Any], st: _State) -> None:
    """The row's columns: no NUL byte, no misspelt known column, nested objects as objects;
    other unknown columns are noted (and ignored)."""
    problems = st.problems
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


def _rating_cells(
    line: int, row: Mapping[str, Any], st: _State,
) -> tuple[str, str, str, str, str, str, str]:
    """Who rated what: item, rater, rater kind, criterion, value, judge version, value type."""
    problems = st.problems
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
    return item, rater, kind, criterion, value, judge_version, value_type


def _severity_cell(line: int, row: Mapping[str, Any], kind: str, problems: _Problems) -> Any:
    """The severity cell: an int when it holds one (which severities are allowed is the
    annotations app's rule, checked with the criterion), else the text; humans only."""
    # Which severities are allowed is the annotations app's rule (checked with the criterion);
    # here the cell only becomes an int when it holds one.
    severity: Any = None
    sev_text = _text(row, "severity")
    if sev_text:
        sev = as_number(sev_text)
        if kind != "human":
            problems.add(line, "severity", "only human ratings carry a severity")
        else:
            severity = int(sev) if sev is not None and float(sev).is_integer() else sev_text
    return severity


def _recorded_request(line: int, row: Mapping[str, Any], problems: _Problems
                      ) -> dict[str, Any] | None:
    """The row's `item_recorded_request` (the application's chat request for the item, an
    object or its JSON text), checked as the ingest checks an item's `recorded_request`."""
    value = row.get("item_recorded_request")
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            problems.add(line, "item_recorded_request", f"is not JSON ({exc})")
            return None
    try:
        return recorded_request_check(value)
    except ValueError as exc:
        problems.add(line, "item_recorded_request", str(exc))
        return None


def _item_record(line: int, row: Mapping[str, Any], item: str, st: _State) -> dict[str, str]:
    """Record the row's item (input, strata, metadata; first value wins); its strata."""
    problems = st.problems
    strata, meta = _strata_and_meta(row)
    for dim in strata:
        if not _slug_ok(dim):
            problems.add(line, f"stratum.{dim}", "dimension keys are slugs (letters, digits, - _)")
    if item:
        entry = st.items.get(item)
        item_input = _text(row, "item_input")
        recorded = _recorded_request(line, row, problems)
        if entry is None:
            st.items[item] = {"input": item_input, "strata": dict(strata), "meta": dict(meta),
                              "recorded_request": recorded}
        else:
            if recorded is not None and entry.get("recorded_request") is None:
                entry["recorded_request"] = recorded
            for dim, label in strata.items():
                entry["strata"].setdefault(dim, label)
            for k, v in meta.items():
                entry["meta"].setdefault(k, v)
            if item_input and not entry["input"]:
                entry["input"] = item_input
    return strata


def _register_output(
    line: int, item: str, out_id: str, candidate: str, text: str, fld: str,
    extras: dict[str, str], st: _State,
) -> tuple[str, str]:
    """Record an output of the file: one per (item, candidate), its id used for one only."""
    problems = st.problems
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


def _pairwise_subject(
    line: int, row: Mapping[str, Any], rating: _Rating, strata: dict[str, str],
    extras: dict[str, str], start: int, st: _State,
) -> None:
    """A pairwise row: its two outputs, their candidates, the order shown and what the value
    refers to; sets the rating's pair in the file's first orientation of it."""
    problems = st.problems
    item, rater, criterion = rating.item, rating.rater, rating.criterion
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
        key_a = _register_output(line, item, out_a, cand_a, _text(row, "output_a_text"),
                                 "output_a", extras, st)
        key_b = _register_output(line, item, out_b, cand_b, _text(row, "output_b_text"),
                                 "output_b", extras, st)
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


def _single_subject(
    line: int, row: Mapping[str, Any], rating: _Rating, strata: dict[str, str],
    extras: dict[str, str], start: int, st: _State,
) -> None:
    """A single-output row: its output and candidate."""
    problems = st.problems
    item, rater, criterion = rating.item, rating.rater, rating.criterion
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
        rating.output = _register_output(line, item, out_id, candidate,
                                         _text(row, "output_text"), "output_id", extras, st)
        _strata_record(line, item, out_id, rater, strata, st)


def _confidence_cells(
    line: int, row: Mapping[str, Any], kind: str, st: _State
) -> tuple[float | None, int]:
    """The `probability` and `sample` cells of a row: judges only; a probability is a finite
    number in [0, 1], a sample index an integer >= 0 (default 0)."""
    problems = st.problems
    prob: float | None = None
    raw_p = _text(row, "probability")
    if raw_p:
        num = as_number(raw_p)
        if kind != "judge":
            problems.add(line, "probability", "only judge rows carry a probability")
        elif num is None or not 0.0 <= num <= 1.0:
            problems.add(line, "probability", f"must be a number in [0, 1], got {raw_p!r}")
        else:
            prob = float(num)
    sample = 0
    raw_s = _text(row, "sample")
    if raw_s:
        num = as_number(raw_s)
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
