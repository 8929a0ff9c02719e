"""The judge reliability audit in plain words: what a lead can act on.

From a typed `AgreementResult` this module writes, per judge version, where the judge can stand
in for the human annotators and where it cannot, and the next step for every cell that is not
trustworthy or has too few labels ("label 12 more outputs in language=de / length=long"). It
also holds the small formatting the audit page needs: stratum names for people, intervals that
are absent instead of "[, ]", readable names of coefficients and methods, and the warning shown
beside a system-level correlation over few candidates.

Pure module: no Django (a test imports it without settings), so every sentence is tested on
hand-built results.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from studies.strata import CROSS_SEPARATOR

from ..results import AgreementCell, AgreementResult, CriterionRef, Estimate, JudgeRef
from ..verdict import NOT_TRUSTWORTHY, TOO_FEW, TRUSTWORTHY

# Below this many candidates a system-level rank correlation is shown with a warning: with m
# candidates a judge that ranks them at random reaches Kendall tau = 1 with probability 1 / m!
# (1 in 6 for three, 1 in 24 for four, 1 in 120 for five).
SYSTEM_MIN_CANDIDATES = 5
EMPTY = "—"

# The CSS class of a cell's verdict: the table and the heat-map colour by verdict, not by value.
VERDICT_CLASS = {
    TRUSTWORTHY: "verdict-trustworthy",
    NOT_TRUSTWORTHY: "verdict-not-trustworthy",
    TOO_FEW: "verdict-too-few",
}


def verdict_class(verdict: str) -> str:
    """The CSS class that colours a cell of this verdict (an unknown verdict is neutral)."""
    return VERDICT_CLASS.get(verdict, "verdict-unknown")


# --- numbers and intervals ----------------------------------------------------------------------


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def number_text(value: Any, digits: int = 3) -> str:
    """A number to `digits` decimals, or "—" when there is none (None, NaN)."""
    v = _finite(value)
    return EMPTY if v is None else f"{v:.{digits}f}"


def interval_text(low: Any, high: Any, digits: int = 3) -> str:
    """"[low, high]", or "" when either end is missing: never "[, ]"."""
    lo, hi = _finite(low), _finite(high)
    if lo is None or hi is None:
        return ""
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def estimate_text(est: Estimate | None, digits: int = 3) -> str:
    """ "0.812 [0.701, 0.900]"; the value alone without an interval; "—" without a value."""
    if est is None or _finite(est.value) is None:
        return EMPTY
    interval = interval_text(est.ci_low, est.ci_high, digits)
    value = number_text(est.value, digits)
    return f"{value} {interval}" if interval else value


# --- names for people ---------------------------------------------------------------------------

# The report's coefficient keys (reports.agreement.coefficients) and the statistic names in the
# `method` strings evalstats writes.
_NAMES = {
    "accuracy": "accuracy",
    "agreement_with_ties": "agreement with ties",
    "agreement_without_ties": "agreement without ties",
    "alpha_interval": "Krippendorff's alpha (interval)",
    "alpha_ordinal": "Krippendorff's alpha (ordinal)",
    "cohen_kappa": "Cohen's kappa",
    "fleiss_kappa": "Fleiss' kappa",
    "gwet_ac1": "Gwet's AC1",
    "gwet_ac1_multi": "Gwet's AC1",
    "kappa": "Cohen's kappa",
    "kendall": "Kendall's tau-b",
    "kendall_tau_b": "Kendall's tau-b",
    "krippendorff_alpha": "Krippendorff's alpha",
    "krippendorff_alpha_fast": "Krippendorff's alpha",
    "macro_f1": "macro F1",
    "macro_precision": "macro precision",
    "macro_recall": "macro recall",
    "mae": "mean absolute error",
    "pass_accuracy": "accuracy (pass/fail at the threshold)",
    "pass_kappa": "Cohen's kappa (pass/fail at the threshold)",
    "mean_pairwise_cohen_kappa": "mean pairwise Cohen's kappa",
    "pairwise_agreement": "pairwise agreement",
    "pearson": "Pearson's r",
    "percent_agreement": "percent agreement",
    "qwk": "Cohen's kappa (quadratic weights)",
    "signed_bias": "signed bias",
    "spearman": "Spearman's rho",
    "alt_test": "alternative annotator test",
    "wilson": "Wilson interval",
    "t interval": "t interval",
}
_WEIGHTS = {
    "quadratic": "quadratic weights",
    "linear": "linear weights",
    "ties=drop": "ties dropped",
}
_ACRONYMS = {"BY FDR": "Benjamini-Yekutieli FDR"}


def metric_name(key: str) -> str:
    """A coefficient's key ("qwk", "gwet_ac1") as people read it; unknown keys lose their
    underscores."""
    return _NAMES.get(key, key.replace("_", " "))


WHOLE_STUDY = "whole study"


def stratum_words(dimension: str, label: str) -> str:
    """A stratum for people: "whole study", "language=de", "language=de / length=long"."""
    if not dimension:
        return WHOLE_STUDY
    dims = dimension.split(CROSS_SEPARATOR)
    labels = label.split(CROSS_SEPARATOR)
    if len(dims) != len(labels):  # a label that itself holds the separator: keep it whole
        return f"{dimension}={label}"
    return " / ".join(f"{d}={v}" for d, v in zip(dims, labels, strict=True))


def _in(where: str) -> str:
    """A stratum after "in": "in the whole study", "in language=de"."""
    return f"the {where}" if where == WHOLE_STUDY else where


def criterion_words(criterion: CriterionRef | None) -> str:
    """A criterion's name (with its key when the two differ), "?" when unknown."""
    if criterion is None:
        return "?"
    if criterion.name and criterion.name != criterion.key:
        return f"{criterion.name} ({criterion.key})"
    return criterion.name or criterion.key


def _split_top(text: str, sep: str = ";") -> list[str]:
    """Split at `sep` outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


_BOOTSTRAP = re.compile(r"^(?:(?P<kind>[a-z]+) bootstrap ?|bootstrap-(?P<kind2>[a-z]+))"
                        r"\s*\((?P<args>.*)\)$")
_CALL = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\[(?P<opt>[^\]]*)\])?"
                   r"(?:\((?P<args>.*)\))?(?P<rest>.*)$")


def _bootstrap_text(match: re.Match[str]) -> str:
    kind = (match.group("kind") or match.group("kind2") or "").lower()
    label = {"bca": "BCa", "percentile": "percentile", "basic": "basic"}.get(kind, kind)
    args = [a.strip() for a in match.group("args").split(",")]
    out = f"{label} bootstrap"
    for arg in args:
        if arg.startswith("B="):
            out += f", {arg[2:]} resamples"
        elif arg == "clustered by item":
            out += " clustered by item"
        elif arg == "items resampled":
            out += " of items"
        elif arg:
            out += f" ({arg})"
    return out


def _segment_text(segment: str) -> str:
    """One `;`-separated part of a method string in words."""
    seg = segment.strip()
    boot = _BOOTSTRAP.match(seg)
    if boot:
        return _bootstrap_text(boot)
    if seg in _NAMES:
        return _NAMES[seg]
    if seg.endswith(" wilson"):  # "flip rate wilson": a rate with its Wilson interval
        return f"{seg.removesuffix(' wilson').replace('_', ' ')}, Wilson interval"
    call = _CALL.match(seg)
    if not call:
        return seg
    name = _NAMES.get(call.group("name"), call.group("name").replace("_", " "))
    opt = call.group("opt")
    args = call.group("args")
    rest = call.group("rest") or ""
    if opt is not None:
        inner = ", ".join(_segment_text(p) for p in _split_top(opt))
        name += f" ({_WEIGHTS.get(opt, inner)})"
    if args is not None:
        for short, long in _ACRONYMS.items():
            args = args.replace(short, long)
        name += f" ({args})"
    return name + rest.replace("_", " ")


def _is_interval_method(segment: str) -> bool:
    seg = segment.strip()
    return bool(_BOOTSTRAP.match(seg)) or seg in ("wilson", "t interval") or seg.endswith(
        " wilson"
    )


def method_text(method: str) -> str:
    """A coefficient's `method` string as a sentence fragment for people.

    "cohen_kappa[quadratic]; bootstrap-bca(B=1000, clustered by item)" reads "Cohen's kappa
    (quadratic weights), BCa bootstrap, 1000 resamples clustered by item". Where the method
    names the point and then "interval: <its own method>", the statistic is named once and
    the interval the report kept (the bootstrap's) replaces the point's own (a Wilson
    interval, say).
    """
    parts = _split_top(method or "")
    if not parts:
        return ""
    interval: list[str] = []
    for i, part in enumerate(parts):
        if part.startswith("interval:"):
            interval = [part[len("interval:"):].strip(), *parts[i + 1:]]
            parts = parts[:i]
            break
    if interval and parts:
        parts = [p for p in parts if not _is_interval_method(p)] or parts[:1]
        if interval[0] == parts[0]:
            interval = interval[1:]
    words = [_segment_text(p) for p in [*parts, *interval] if p]
    text = ", ".join(w for w in words if w)
    return text[:1].upper() + text[1:]


def system_warning(n_candidates: int) -> str | None:
    """The warning beside a system-level correlation over fewer than SYSTEM_MIN_CANDIDATES
    candidates, None from there on."""
    if n_candidates >= SYSTEM_MIN_CANDIDATES:
        return None
    if n_candidates < 2:
        return f"Only {n_candidates} candidate: no correlation can be read from it."
    chance = math.factorial(n_candidates)
    return (
        f"Only {n_candidates} candidates: a judge that ranks them at random still gets Kendall "
        f"tau = 1 one time in {chance} (1/{n_candidates}!), so this correlation says little. "
        f"Rely on the per-stratum verdicts above, or compare at least {SYSTEM_MIN_CANDIDATES} "
        "candidates."
    )


# --- the summary --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NextStep:
    """What to do about one cell that is not trustworthy or has too few labels."""

    stratum: str
    verdict: str
    figure: str
    reason: str
    # More subjects with a judge and a human label the cell needs ("too few labels" by count).
    labels_needed: int | None
    text: str

    @property
    def css_class(self) -> str:
        return verdict_class(self.verdict)


@dataclass(frozen=True, kw_only=True)
class CriterionSummary:
    """Where one judge version can stand in for humans on one criterion."""

    criterion: str
    trusted: tuple[str, ...]
    not_trusted: tuple[str, ...]
    too_few: tuple[str, ...]
    sentence: str
    steps: tuple[NextStep, ...]


@dataclass(frozen=True, kw_only=True)
class JudgeSummary:
    """The audit of one judge version in words, per criterion."""

    judge: str
    headline: str
    criteria: tuple[CriterionSummary, ...]


def join_words(words: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def _unit(criterion: CriterionRef | None, n: int = 2) -> str:
    noun = "pair" if criterion is not None and criterion.scale == "pairwise" else "output"
    return noun if n == 1 else f"{noun}s"


def labels_needed(cell: AgreementCell, min_items: int) -> int:
    """How many more subjects with both a judge and a human label the cell needs to reach
    `min_items` (0 when it has them)."""
    return max(0, min_items - cell.n_subjects)


def _figure(cell: AgreementCell) -> str:
    est = cell.primary
    return f"{metric_name(cell.primary_metric)} {estimate_text(est)}, n={cell.n_subjects}"


def next_step(
    cell: AgreementCell,
    *,
    params: Mapping[str, Any],
    criterion: CriterionRef | None = None,
    judge: JudgeRef | None = None,
) -> NextStep | None:
    """The next step for a cell that is not trustworthy or has too few labels (None for a
    trustworthy one). `params` are the report's parameters (min_items and the rest)."""
    if cell.verdict == TRUSTWORTHY:
        return None
    where = stratum_words(cell.dimension, cell.label)
    # The step starts with its stratum ("Whole study: ...", "language=de: ..."); the
    # dimension names are the study's own keys and keep their case.
    head = "Whole study" if where == WHOLE_STUDY else where
    inside, unit = _in(where), _unit(criterion)
    figure = _figure(cell)
    need: int | None = None
    if cell.verdict == NOT_TRUSTWORTHY:
        text = (
            f"{head}: not trustworthy ({figure}): keep humans on this stratum, or try "
            "another judge/prompt."
        )
    elif cell.verdict == TOO_FEW and cell.verdict_basis == "min_items":
        min_items = int(params.get("min_items", 0))
        need = max(1, labels_needed(cell, min_items))
        text = (
            f"{head}: too few labels ({cell.n_subjects} of the {min_items} {unit} needed "
            f"have both a judge and a human label): label {need} more in {inside}."
        )
    elif cell.verdict == TOO_FEW and judge is not None and judge.value_type == "continuous":
        text = (
            f"{head}: too few labels for a continuous score, which only the alternative "
            f"annotator test can judge: have at least {params.get('min_alt_annotators', 2)} "
            f"annotators each grade at least {params.get('min_items', '?')} of the same "
            f"{unit} in {inside}."
        )
    elif cell.verdict == TOO_FEW and cell.ceiling.point is None:
        text = (
            f"{head}: no two annotators graded enough of the same {unit}, so there is no "
            "human ceiling to hold the judge to: have a second annotator grade at least "
            f"{params.get('min_pair_items', '?')} of the {unit} in {inside} (overlap in the "
            "sampling plan)."
        )
    elif cell.verdict == TOO_FEW:
        text = (
            f"{head}: the judge's coefficient has no interval here ({figure}; the labels may "
            f"all be the same): label more varied {unit} in {inside}."
        )
    else:
        text = f"{head}: {cell.verdict} ({figure}): {cell.verdict_reason}."
    return NextStep(
        stratum=where,
        verdict=cell.verdict,
        figure=figure,
        reason=cell.verdict_reason,
        labels_needed=need,
        text=text,
    )


# A summary sentence names at most this many strata per verdict; the next steps list them all.
SENTENCE_MAX_STRATA = 6


def _listing(strata: Sequence[str]) -> str:
    words = [_in(w) for w in strata]
    if len(words) <= SENTENCE_MAX_STRATA:
        return join_words(words)
    shown = ", ".join(words[:SENTENCE_MAX_STRATA])
    return f"{shown} and {len(words) - SENTENCE_MAX_STRATA} more (see the next steps)"


def _criterion_sentence(
    name: str, trusted: Sequence[str], not_trusted: Sequence[str], too_few: Sequence[str]
) -> str:
    if trusted and not not_trusted and not too_few:
        return f"{name}: can stand in for humans everywhere measured ({_listing(trusted)})."
    clauses = []
    if trusted:
        clauses.append(f"can stand in for humans in {_listing(trusted)}")
    elif not_trusted and not too_few:
        clauses.append("cannot stand in for humans in any stratum")
    else:
        clauses.append("cannot stand in for humans in any stratum yet")
    if not_trusted:
        clauses.append(f"not trustworthy in {_listing(not_trusted)}")
    if too_few:
        clauses.append(f"too few labels to tell in {_listing(too_few)}")
    return f"{name}: {'; '.join(clauses)}."


def criterion_summary(
    cells: Iterable[AgreementCell],
    *,
    params: Mapping[str, Any],
    criterion: CriterionRef | None,
    judge: JudgeRef | None = None,
) -> CriterionSummary:
    """Where a judge version can stand in for humans on one criterion (its cells, in report
    order), and the next step for each cell that is not trustworthy or has too few labels."""
    trusted: list[str] = []
    not_trusted: list[str] = []
    too_few: list[str] = []
    steps: list[NextStep] = []
    for cell in cells:
        where = stratum_words(cell.dimension, cell.label)
        if cell.verdict == TRUSTWORTHY:
            trusted.append(where)
        elif cell.verdict == NOT_TRUSTWORTHY:
            not_trusted.append(where)
        else:
            too_few.append(where)
        step = next_step(cell, params=params, criterion=criterion, judge=judge)
        if step is not None:
            steps.append(step)
    name = criterion_words(criterion)
    return CriterionSummary(
        criterion=name,
        trusted=tuple(trusted),
        not_trusted=tuple(not_trusted),
        too_few=tuple(too_few),
        sentence=_criterion_sentence(name, trusted, not_trusted, too_few),
        steps=tuple(steps),
    )


def judge_summaries(result: AgreementResult) -> tuple[JudgeSummary, ...]:
    """Per judge version, per criterion: where it can stand in for humans, where not, and what
    to do next. The judges that can stand in for humans in the most places come first (ties
    in the report's order)."""
    crits = result.criteria_by_id()
    out: list[tuple[int, JudgeSummary]] = []
    for judge in result.judges:
        per_criterion = []
        for crit in result.criteria:
            cells = result.cells_for(criterion=crit.id, judge_version=judge.id)
            if cells:
                per_criterion.append(
                    criterion_summary(
                        cells, params=result.params, criterion=crits.get(crit.id), judge=judge
                    )
                )
        if not per_criterion:
            continue
        n_trusted = sum(len(c.trusted) for c in per_criterion)
        n_not = sum(len(c.not_trusted) for c in per_criterion)
        n_few = sum(len(c.too_few) for c in per_criterion)
        total = n_trusted + n_not + n_few
        # One criterion: its strata; several: each criterion's strata counted apart.
        places = "strata" if len(per_criterion) == 1 else "criterion and stratum combinations"
        if n_trusted == total:
            headline = f"{judge.display} can stand in for humans in all {total} {places} measured."
        elif n_trusted == 0:
            headline = (
                f"{judge.display} cannot stand in for humans anywhere yet: of {total} {places} "
                f"measured, {n_not} not trustworthy and {n_few} with too few labels."
            )
        else:
            headline = (
                f"{judge.display} can stand in for humans in {n_trusted} of {total} {places} "
                f"measured; {n_not} not trustworthy, {n_few} with too few labels."
            )
        out.append((
            -n_trusted,
            JudgeSummary(judge=judge.display, headline=headline, criteria=tuple(per_criterion)),
        ))
    # sorted() is stable: equal counts keep the report's order.
    return tuple(summary for _, summary in sorted(out, key=lambda pair: pair[0]))


__all__ = [
    "EMPTY",
    "SENTENCE_MAX_STRATA",
    "SYSTEM_MIN_CANDIDATES",
    "VERDICT_CLASS",
    "CriterionSummary",
    "JudgeSummary",
    "NextStep",
    "criterion_summary",
    "criterion_words",
    "estimate_text",
    "interval_text",
    "join_words",
    "judge_summaries",
    "labels_needed",
    "method_text",
    "metric_name",
    "next_step",
    "number_text",
    "stratum_words",
    "system_warning",
    "verdict_class",
]
