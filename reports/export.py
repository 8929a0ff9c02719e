"""CSV exports of every table of a stored agreement report (read from the typed result)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from typing import Any

from .results import AgreementResult, Estimate, HumanCeiling

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


def table_rows(result: AgreementResult, table: str) -> tuple[list[str], Iterable[list[Any]]]:
    """Header and rows of one table (`TABLES`) of a result."""
    judges, crits = result.judges_by_id(), result.criteria_by_id()

    def jname(jid: Any) -> str:
        return judges[int(jid)].display if jid is not None and int(jid) in judges else ""

    def ckey(cid: Any) -> str:
        return crits[int(cid)].key if int(cid) in crits else str(cid)

    if table == "cells":
        header = [
            "judge",
            "judge_version_id",
            "criterion",
            "dimension",
            "stratum",
            "n_subjects",
            "n_items",
            "n_humans",
            "metric",
            "value",
            "ci_low",
            "ci_high",
            "primary",
            "ceiling",
            "ceiling_metric",
            "verdict",
            "verdict_basis",
            "verdict_reason",
        ]

        def cells() -> Iterable[list[Any]]:
            for c in result.cells:
                for name, m in c.metrics.items():
                    yield [
                        jname(c.judge_version),
                        c.judge_version,
                        ckey(c.criterion),
                        c.dimension,
                        c.label,
                        c.n_subjects,
                        c.n_items,
                        c.n_humans,
                        name,
                        m.value,
                        m.ci_low,
                        m.ci_high,
                        name == c.primary_metric,
                        c.ceiling.point,
                        c.ceiling.point_metric,
                        c.verdict,
                        c.verdict_basis,
                        c.verdict_reason,
                    ]

        return header, cells()
    if table == "confusion":
        header = [
            "judge",
            "judge_version_id",
            "criterion",
            "dimension",
            "stratum",
            "human_majority",
            "judge_label",
            "count",
        ]

        def conf() -> Iterable[list[Any]]:
            for c in result.confusion:
                for i, row in enumerate(c.matrix):
                    for k, n in enumerate(row):
                        yield [
                            jname(c.judge_version),
                            c.judge_version,
                            ckey(c.criterion),
                            c.dimension,
                            c.label,
                            c.labels[i],
                            c.labels[k],
                            n,
                        ]

        return header, conf()
    if table == "bias":
        header = [
            "judge",
            "judge_version_id",
            "criterion",
            "audit",
            "value",
            "ci_low",
            "ci_high",
            "n",
            "p_value",
            "method",
            "note",
        ]
        return header, (
            [
                jname(b.judge_version),
                b.judge_version,
                ckey(b.criterion),
                b.audit,
                b.value,
                b.ci_low,
                b.ci_high,
                b.n,
                b.p_value,
                b.method,
                b.note,
            ]
            for b in result.bias
        )
    if table == "ceiling":
        header = [
            "criterion",
            "judge",
            "judge_version_id",
            "dimension",
            "stratum",
            "n_subjects",
            "n_items",
            "n_humans",
            "n_ratings",
            "alpha_level",
            "alpha",
            "alpha_ci_low",
            "alpha_ci_high",
            "mean_pairwise_kappa",
            "kappa_weights",
            "n_pairs",
        ]

        def ceil() -> Iterable[list[Any]]:
            # (judge version, criterion, dimension, label, ceiling): the table's rows (every
            # human-rated subject of the stratum), then each cell's (its subjects only).
            rows: list[tuple[int | None, int, str, str, HumanCeiling]] = [
                (None, c.criterion, c.dimension, c.label, c) for c in result.ceiling
            ]
            rows += [
                (c.judge_version, c.criterion, c.dimension, c.label, c.ceiling)
                for c in result.cells
            ]
            for jid, cid, dimension, label, c in rows:
                yield [
                    ckey(cid),
                    jname(jid) if jid else "(all human-rated subjects)",
                    jid,
                    dimension,
                    label,
                    c.n_subjects,
                    c.n_items,
                    c.n_humans,
                    c.n_ratings,
                    c.level,
                    c.alpha.value,
                    c.alpha.ci_low,
                    c.alpha.ci_high,
                    c.pairwise_kappa,
                    c.pairwise_kappa_weights,
                    c.n_pairs,
                ]

        return header, ceil()
    if table == "system":
        header = [
            "judge",
            "judge_version_id",
            "criterion",
            "method",
            "value",
            "ci_low",
            "ci_high",
            "n_candidates",
            "n_items",
            "per_subject_kendall",
        ]

        def system() -> Iterable[list[Any]]:
            for s in result.system:
                per = s.per_subject_kendall.value if s.per_subject_kendall else None
                for method, m in (
                    ("kendall", s.kendall),
                    ("spearman", s.spearman),
                    ("pearson", s.pearson),
                ):
                    yield [
                        jname(s.judge_version),
                        s.judge_version,
                        ckey(s.criterion),
                        method,
                        m.value,
                        m.ci_low,
                        m.ci_high,
                        s.n_candidates,
                        s.n_items,
                        per,
                    ]

        return header, system()
    if table in ("votes", "correlation_levels", "orders"):
        return _v2_rows(result, table, jname, ckey)
    if table == "rater_groups":
        return _group_rows(result, jname, ckey)
    if table == "by_candidate":
        return _candidate_rows(result, jname, ckey)
    raise ValueError(f"unknown table {table!r}")


def _est_cells(est: Estimate | None) -> list[Any]:
    return [None, None, None, None] if est is None else [est.value, est.ci_low, est.ci_high, est.n]


def _v2_rows(
    result: AgreementResult,
    table: str,
    jname: Callable[[Any], str],
    ckey: Callable[[Any], str],
) -> tuple[list[str], Iterable[list[Any]]]:
    """The tables of result version 2, long: one row per figure."""
    key = ["judge", "judge_version_id", "criterion", "dimension", "stratum"]
    if table == "votes":
        header = [*key, "figure", "value", "ci_low", "ci_high", "n", "n_subjects"]

        def votes() -> Iterable[list[Any]]:
            # Judge vs majority and vs every vote, then the humans' pooled pair agreement on
            # the same subjects (the cell's ceiling), for cells that have per-vote figures.
            for c in result.cells:
                if "agreement_per_vote" not in c.metrics:
                    continue
                head = [
                    jname(c.judge_version),
                    c.judge_version,
                    ckey(c.criterion),
                    c.dimension,
                    c.label,
                ]
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

        return header, votes()
    if table == "correlation_levels":
        header = [
            *key,
            "level",
            "method",
            "value",
            "ci_low",
            "ci_high",
            "n",
            "n_items",
            "n_subjects",
            "n_candidates",
            "n_items_constant",
            "n_items_too_few",
        ]

        def levels() -> Iterable[list[Any]]:
            for r in result.correlation_levels:
                head = [
                    jname(r.judge_version),
                    r.judge_version,
                    ckey(r.criterion),
                    r.dimension,
                    r.label,
                ]
                for method in _LEVEL_METHODS:
                    yield [
                        *head,
                        "sample",
                        method,
                        *_est_cells(getattr(r.sample, method)),
                        r.sample.n_items,
                        r.sample.n_subjects,
                        None,
                        r.sample.n_items_constant,
                        r.sample.n_items_too_few,
                    ]
                for method in _LEVEL_METHODS:
                    yield [
                        *head,
                        "dataset",
                        method,
                        *_est_cells(getattr(r.dataset, method)),
                        r.dataset.n_items,
                        r.dataset.n_subjects,
                        None,
                        None,
                        None,
                    ]
                if r.system is not None:
                    for method in _LEVEL_METHODS:
                        yield [
                            *head,
                            "system",
                            method,
                            *_est_cells(getattr(r.system, method)),
                            r.system.n_items,
                            r.system.n_subjects,
                            r.system.n_candidates,
                            None,
                            None,
                        ]

        return header, levels()
    header = [
        *key,
        "basis",
        "figure",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "n_pairs",
        "n_unparseable_ab",
        "n_unparseable_ba",
    ]

    def orders() -> Iterable[list[Any]]:
        # basis: "unparseable as miss|tie" (every pair) or "parseable only".
        for r in result.orders:
            head = [
                jname(r.judge_version),
                r.judge_version,
                ckey(r.criterion),
                r.dimension,
                r.label,
            ]
            for basis, figs in (
                (f"unparseable as {r.unparseable_as}", r.counted),
                ("parseable only", r.parseable),
            ):
                for name in _ORDER_FIGURES:
                    yield [
                        *head,
                        basis,
                        name,
                        *_est_cells(getattr(figs, name)),
                        r.n_pairs,
                        r.n_unparseable_ab,
                        r.n_unparseable_ba,
                    ]

    return header, orders()


def _group_rows(
    result: AgreementResult, jname: Callable[[Any], str], ckey: Callable[[Any], str]
) -> tuple[list[str], Iterable[list[Any]]]:
    """Agreement by rater group, long: one row per figure; a figure on too few subjects is one
    row with its primary metric named and no numbers."""
    header = [
        "criterion", "dimension", "stratum", "comparison", "kind", "judge", "judge_version_id",
        "group", "other_group", "n_subjects", "n_items", "n_raters", "n_pairs", "too_few",
        "metric", "value", "ci_low", "ci_high", "n", "primary",
    ]

    def rows() -> Iterable[list[Any]]:
        for r in result.rater_groups or ():
            head = [
                ckey(r.criterion), r.dimension, r.label, r.title(jname(r.judge_version) or "judge"),
                r.kind, jname(r.judge_version), r.judge_version, r.group, r.other_group,
                r.n_subjects, r.n_items, r.n_raters, r.n_pairs, r.too_few,
            ]
            if r.too_few:
                yield [*head, r.primary_metric, None, None, None, None, True]
                continue
            for name, m in r.metrics.items():
                yield [*head, name, *_est_cells(m), name == r.primary_metric]

    return header, rows()


def _candidate_rows(
    result: AgreementResult, jname: Callable[[Any], str], ckey: Callable[[Any], str]
) -> tuple[list[str], Iterable[list[Any]]]:
    """Every cell metric per candidate, long: one row per figure."""
    header = [
        "judge", "judge_version_id", "criterion", "dimension", "stratum", "candidate",
        "n_subjects", "n_items", "metric", "value", "ci_low", "ci_high", "n", "primary",
    ]

    def rows() -> Iterable[list[Any]]:
        for r in result.by_candidate or ():
            head = [
                jname(r.judge_version), r.judge_version, ckey(r.criterion), r.dimension,
                r.label, r.candidate, r.n_subjects, r.n_items,
            ]
            for name, m in r.metrics.items():
                yield [*head, name, *_est_cells(m), name == r.primary_metric]

    return header, rows()


def table_csv(result: AgreementResult, table: str) -> str:
    """One table of a result as CSV; text that starts like a formula is neutralised."""
    header, rows = table_rows(result, table)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_safe(v) for v in row])
    return buf.getvalue()
