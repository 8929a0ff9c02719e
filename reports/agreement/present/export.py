"""CSV exports of every table of a stored agreement report (read from the typed result)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from typing import Any

from ..results import AgreementResult, Estimate, HumanCeiling

TABLES = (
    "cells",
    "confusion",
    "bias",
    "ceiling",
    "system",
    # Result version 2 (a version 1 result exports them with the header only).
    "votes",
    "correlation_levels",
    "orders",
    # Result version 3, with the rater_groups parameter (otherwise the header only).
    "rater_groups",
    # Result version 4, with the by_candidate parameter (otherwise the header only).
    "by_candidate",
)
# Keys of the per-vote figures of a cell (and the per-majority figures they sit beside).
_VOTE_METRICS = (
    ("majority", "accuracy"),
    ("majority_without_ties", "agreement_without_ties"),
    ("per_vote", "agreement_per_vote"),
    ("per_vote_without_ties", "agreement_per_vote_without_ties"),
)
_LEVEL_METHODS = ("spearman", "pearson", "kendall")
_ORDER_FIGURES = (
    "accuracy_ab",
    "accuracy_ba",
    "accuracy_mean",
    "accuracy_consistent",
    "positional_agreement",
)


def _safe(value: Any) -> Any:
    """Neutralise spreadsheet formulas in text cells (names and labels are user input)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(value)
            return value
        except ValueError:
            return "'" + value
    return value


Table = tuple[list[str], Iterable[list[Any]]]
# The columns that say whose figure a row is: judge version, criterion and stratum.
_KEY = ["judge", "judge_version_id", "criterion", "dimension", "stratum"]


class _Names:
    """Judge and criterion names of a result, as the tables write them."""

    def __init__(self, result: AgreementResult) -> None:
        self._judges = result.judges_by_id()
        self._crits = result.criteria_by_id()

    def judge(self, jid: Any) -> str:
        judges = self._judges
        return judges[int(jid)].display if jid is not None and int(jid) in judges else ""

    def criterion(self, cid: Any) -> str:
        return self._crits[int(cid)].key if int(cid) in self._crits else str(cid)

    def key(self, jid: int, cid: int, dimension: str, label: str) -> list[Any]:
        return [self.judge(jid), jid, self.criterion(cid), dimension, label]


def _cells(result: AgreementResult, names: _Names) -> Table:
    header = [
        *_KEY, "n_subjects", "n_items", "n_humans", "metric", "value", "ci_low", "ci_high",
        "primary", "ceiling", "ceiling_metric", "verdict", "verdict_basis", "verdict_reason",
    ]

    def rows() -> Iterable[list[Any]]:
        for c in result.cells:
            head = names.key(c.judge_version, c.criterion, c.dimension, c.label)
            for name, m in c.metrics.items():
                yield [
                    *head, c.n_subjects, c.n_items, c.n_humans, name, m.value, m.ci_low,
                    m.ci_high, name == c.primary_metric, c.ceiling.point,
                    c.ceiling.point_metric, c.verdict, c.verdict_basis, c.verdict_reason,
                ]

    return header, rows()


def _confusion(result: AgreementResult, names: _Names) -> Table:
    header = [*_KEY, "human_majority", "judge_label", "count"]

    def rows() -> Iterable[list[Any]]:
        for c in result.confusion:
            head = names.key(c.judge_version, c.criterion, c.dimension, c.label)
            for i, row in enumerate(c.matrix):
                for k, n in enumerate(row):
                    yield [*head, c.labels[i], c.labels[k], n]

    return header, rows()


def _bias(result: AgreementResult, names: _Names) -> Table:
    header = ["judge", "judge_version_id", "criterion", "audit", "value", "ci_low", "ci_high",
              "n", "p_value", "method", "note"]
    return header, (
        [names.judge(b.judge_version), b.judge_version, names.criterion(b.criterion), b.audit,
         b.value, b.ci_low, b.ci_high, b.n, b.p_value, b.method, b.note]
        for b in result.bias
    )


def _ceiling(result: AgreementResult, names: _Names) -> Table:
    header = [
        "criterion", "judge", "judge_version_id", "dimension", "stratum", "n_subjects",
        "n_items", "n_humans", "n_ratings", "alpha_level", "alpha", "alpha_ci_low",
        "alpha_ci_high", "mean_pairwise_kappa", "kappa_weights", "n_pairs",
    ]

    def rows() -> Iterable[list[Any]]:
        # (judge version, criterion, dimension, label, ceiling): the table's rows (every
        # human-rated subject of the stratum), then each cell's (its subjects only).
        ceilings: list[tuple[int | None, int, str, str, HumanCeiling]] = [
            (None, c.criterion, c.dimension, c.label, c) for c in result.ceiling
        ]
        ceilings += [
            (c.judge_version, c.criterion, c.dimension, c.label, c.ceiling)
            for c in result.cells
        ]
        for jid, cid, dimension, label, c in ceilings:
            yield [
                names.criterion(cid), names.judge(jid) if jid else "(all human-rated subjects)",
                jid, dimension, label, c.n_subjects, c.n_items, c.n_humans, c.n_ratings,
                c.level, c.alpha.value, c.alpha.ci_low, c.alpha.ci_high, c.pairwise_kappa,
                c.pairwise_kappa_weights, c.n_pairs,
            ]

    return header, rows()


def _system(result: AgreementResult, names: _Names) -> Table:
    header = ["judge", "judge_version_id", "criterion", "method", "value", "ci_low", "ci_high",
              "n_candidates", "n_items", "per_subject_kendall"]

    def rows() -> Iterable[list[Any]]:
        for s in result.system:
            per = s.per_subject_kendall.value if s.per_subject_kendall else None
            for method, m in (("kendall", s.kendall), ("spearman", s.spearman),
                              ("pearson", s.pearson)):
                yield [
                    names.judge(s.judge_version), s.judge_version, names.criterion(s.criterion),
                    method, m.value, m.ci_low, m.ci_high, s.n_candidates, s.n_items, per,
                ]

    return header, rows()


def _est_cells(est: Estimate | None) -> list[Any]:
    return [None, None, None, None] if est is None else [est.value, est.ci_low, est.ci_high, est.n]


def _votes(result: AgreementResult, names: _Names) -> Table:
    """Result version 2, long: one row per figure."""
    header = [*_KEY, "figure", "value", "ci_low", "ci_high", "n", "n_subjects"]

    def rows() -> Iterable[list[Any]]:
        # Judge vs majority and vs every vote, then the humans' pooled pair agreement on
        # the same subjects (the cell's ceiling), for cells that have per-vote figures.
        for c in result.cells:
            if "agreement_per_vote" not in c.metrics:
                continue
            head = names.key(c.judge_version, c.criterion, c.dimension, c.label)
            figures: list[tuple[str, Estimate | None]] = [
                (name, c.metrics[k]) for name, k in _VOTE_METRICS if k in c.metrics
            ]
            figures.append(("human_pooled", c.ceiling.pooled_agreement))
            if c.ceiling.pooled_agreement_without_ties is not None:
                figures.append(
                    ("human_pooled_without_ties", c.ceiling.pooled_agreement_without_ties)
                )
            for name, est in figures:
                yield [*head, name, *_est_cells(est), c.n_subjects]

    return header, rows()


def _correlation_levels(result: AgreementResult, names: _Names) -> Table:
    """Result version 2, long: one row per level and method."""
    header = [*_KEY, "level", "method", "value", "ci_low", "ci_high", "n", "n_items",
              "n_subjects", "n_candidates", "n_items_constant", "n_items_too_few"]

    def rows() -> Iterable[list[Any]]:
        for r in result.correlation_levels:
            head = names.key(r.judge_version, r.criterion, r.dimension, r.label)
            sample, dataset, system = r.sample, r.dataset, r.system
            for method in _LEVEL_METHODS:
                yield [*head, "sample", method, *_est_cells(getattr(sample, method)),
                       sample.n_items, sample.n_subjects, None, sample.n_items_constant,
                       sample.n_items_too_few]
            for method in _LEVEL_METHODS:
                yield [*head, "dataset", method, *_est_cells(getattr(dataset, method)),
                       dataset.n_items, dataset.n_subjects, None, None, None]
            if system is not None:
                for method in _LEVEL_METHODS:
                    yield [*head, "system", method, *_est_cells(getattr(system, method)),
                           system.n_items, system.n_subjects, system.n_candidates, None, None]

    return header, rows()


def _orders(result: AgreementResult, names: _Names) -> Table:
    """Result version 2, long: one row per basis and figure."""
    header = [*_KEY, "basis", "figure", "value", "ci_low", "ci_high", "n", "n_pairs",
              "n_unparseable_ab", "n_unparseable_ba"]

    def rows() -> Iterable[list[Any]]:
        # basis: "unparseable as miss|tie" (every pair) or "parseable only".
        for r in result.orders:
            head = names.key(r.judge_version, r.criterion, r.dimension, r.label)
            for basis, figs in (
                (f"unparseable as {r.unparseable_as}", r.counted),
                ("parseable only", r.parseable),
            ):
                for name in _ORDER_FIGURES:
                    yield [*head, basis, name, *_est_cells(getattr(figs, name)), r.n_pairs,
                           r.n_unparseable_ab, r.n_unparseable_ba]

    return header, rows()


def _group_rows(result: AgreementResult, names: _Names) -> Table:
    """Agreement by rater group, long: one row per figure; a figure on too few subjects is one
    row with its primary metric named and no numbers."""
    header = [
        "criterion", "dimension", "stratum", "comparison", "kind", "judge", "judge_version_id",
        "group", "other_group", "n_subjects", "n_items", "n_raters", "n_pairs", "too_few",
        "metric", "value", "ci_low", "ci_high", "n", "primary",
    ]
    jname = names.judge

    def rows() -> Iterable[list[Any]]:
        for r in result.rater_groups or ():
            head = [
                names.criterion(r.criterion), r.dimension, r.label,
                r.title(jname(r.judge_version) or "judge"), r.kind, jname(r.judge_version),
                r.judge_version, r.group, r.other_group, r.n_subjects, r.n_items, r.n_raters,
                r.n_pairs, r.too_few,
            ]
            if r.too_few:
                yield [*head, r.primary_metric, None, None, None, None, True]
                continue
            for name, m in r.metrics.items():
                yield [*head, name, *_est_cells(m), name == r.primary_metric]

    return header, rows()


def _candidate_rows(result: AgreementResult, names: _Names) -> Table:
    """Every cell metric per candidate, long: one row per figure."""
    header = [*_KEY, "candidate", "n_subjects", "n_items", "metric", "value", "ci_low",
              "ci_high", "n", "primary"]

    def rows() -> Iterable[list[Any]]:
        for r in result.by_candidate or ():
            head = [*names.key(r.judge_version, r.criterion, r.dimension, r.label),
                    r.candidate, r.n_subjects, r.n_items]
            for name, m in r.metrics.items():
                yield [*head, name, *_est_cells(m), name == r.primary_metric]

    return header, rows()


_BUILDERS: dict[str, Callable[[AgreementResult, _Names], Table]] = {
    "cells": _cells,
    "confusion": _confusion,
    "bias": _bias,
    "ceiling": _ceiling,
    "system": _system,
    "votes": _votes,
    "correlation_levels": _correlation_levels,
    "orders": _orders,
    "rater_groups": _group_rows,
    "by_candidate": _candidate_rows,
}


def table_rows(result: AgreementResult, table: str) -> Table:
    """Header and rows of one table (`TABLES`) of a result."""
    build = _BUILDERS.get(table)
    if build is None:
        raise ValueError(f"unknown table {table!r}")
    return build(result, _Names(result))


def table_csv(result: AgreementResult, table: str) -> str:
    """One table of a result as CSV; text that starts like a formula is neutralised."""
    header, rows = table_rows(result, table)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_safe(v) for v in row])
    return buf.getvalue()
