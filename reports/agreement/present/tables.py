"""The audit page's tables of result versions 2 and 3, per criterion: correlation at three
levels, agreement per vote and per majority beside the humans' pooled agreement, verdicts in
both presentation orders, and agreement by rater group (pure: typed result in, strings and
numbers out).

Each table is one row per judge x stratum, so a criterion with many strata stays one table;
rows past `MAX_ROWS` are left to the CSV export (the page says how many).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..results import AgreementResult, CriterionRef, Estimate, OrderFigures
from . import summary

# Rows per table on the page; the CSV export has them all.
MAX_ROWS = 40

METHODS = (
    ("spearman", "Spearman's rho"),
    ("pearson", "Pearson's r"),
    ("kendall", "Kendall's tau-b"),
)
ORDER_FIGURES = (
    ("accuracy_ab", "Accuracy, A first"),
    ("accuracy_ba", "Accuracy, B first"),
    ("accuracy_mean", "Mean of the two orders"),
    ("accuracy_consistent", "Correct in both orders"),
    ("positional_agreement", "Positional agreement"),
)


def _est(est: Estimate | None) -> dict[str, str]:
    """A figure as two strings (the interval shown smaller under the value)."""
    if est is None:
        return {"value": summary.EMPTY, "interval": ""}
    return {
        "value": summary.number_text(est.value),
        "interval": summary.interval_text(est.ci_low, est.ci_high),
    }


def _cap(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    return rows[:MAX_ROWS], max(0, len(rows) - MAX_ROWS)


def _row_head(result: AgreementResult, jid: int, dimension: str, label: str) -> dict[str, Any]:
    judges = result.judges_by_id()
    return {
        "judge": judges[jid].display.split() if jid in judges else ["?"],
        "stratum": summary.stratum_words(dimension, label).split(),
    }


def correlation_levels_table(result: AgreementResult, criterion: int) -> dict[str, Any] | None:
    """Sample-, dataset- and system-level correlation of every judge x stratum of an ordinal
    criterion, with the items the sample level skipped; None when the report has none."""
    rows = []
    for r in result.correlation_levels:
        if r.criterion != criterion:
            continue
        sample = [_est(getattr(r.sample, m)) for m, _ in METHODS]
        dataset = [_est(getattr(r.dataset, m)) for m, _ in METHODS]
        system = [_est(getattr(r.system, m) if r.system else None) for m, _ in METHODS]
        rows.append(
            {
                **_row_head(result, r.judge_version, r.dimension, r.label),
                "sample": sample,
                "sample_items": r.sample.n_items,
                "skipped_constant": r.sample.n_items_constant,
                "skipped_too_few": r.sample.n_items_too_few,
                "dataset": dataset,
                "dataset_subjects": r.dataset.n_subjects,
                "system": system,
                "system_candidates": r.system.n_candidates if r.system else None,
            }
        )
    if not rows:
        return None
    shown, more = _cap(rows)
    return {"methods": [name for _, name in METHODS], "rows": shown, "more": more}


def votes_table(result: AgreementResult, criterion: int) -> dict[str, Any] | None:
    """Judge agreement per human majority and per human vote (with and, on pairwise scales,
    without ties) beside the humans' pooled pair agreement on the same subjects; None when no
    cell of the criterion has per-vote figures (ordinal criteria, version 1 results)."""
    rows = []
    without_ties = False
    for c in result.cells_for(criterion=criterion):
        if "agreement_per_vote" not in c.metrics:
            continue
        no_ties = c.metrics.get("agreement_per_vote_without_ties")
        without_ties = without_ties or no_ties is not None
        rows.append(
            {
                **_row_head(result, c.judge_version, c.dimension, c.label),
                "majority": _est(c.metrics.get("accuracy")),
                "majority_without_ties": _est(c.metrics.get("agreement_without_ties")),
                "vote": _est(c.metrics["agreement_per_vote"]),
                "vote_without_ties": _est(no_ties),
                "pooled": _est(c.ceiling.pooled_agreement),
                "pooled_without_ties": _est(c.ceiling.pooled_agreement_without_ties),
                "n_subjects": c.n_subjects,
                "n_votes": c.metrics["agreement_per_vote"].n,
            }
        )
    if not rows:
        return None
    shown, more = _cap(rows)
    return {"rows": shown, "more": more, "without_ties": without_ties}


def _figures(figs: OrderFigures) -> list[dict[str, str]]:
    return [_est(getattr(figs, key)) for key, _ in ORDER_FIGURES]


def orders_table(result: AgreementResult, criterion: int) -> dict[str, Any] | None:
    """Verdicts in both presentation orders per judge x stratum of a pairwise criterion: the
    figures with unparseable verdicts counted and, when any is unparseable, on parseable
    verdicts only; None when no judge rated both orders."""
    rows = []
    any_unparseable = False
    counted_as = ""
    for r in result.orders:
        if r.criterion != criterion:
            continue
        unparseable = r.n_unparseable_ab + r.n_unparseable_ba
        any_unparseable = any_unparseable or unparseable > 0
        counted_as = r.unparseable_as
        rows.append(
            {
                **_row_head(result, r.judge_version, r.dimension, r.label),
                "n_pairs": r.n_pairs,
                "n_unparseable_ab": r.n_unparseable_ab,
                "n_unparseable_ba": r.n_unparseable_ba,
                "counted": _figures(r.counted),
                "parseable": _figures(r.parseable),
            }
        )
    if not rows:
        return None
    shown, more = _cap(rows)
    return {
        "figures": [name for _, name in ORDER_FIGURES],
        "rows": shown,
        "more": more,
        "with_parseable": any_unparseable,
        "counted_as": counted_as,
    }


GROUP_KINDS = {
    "judge_vs_group": "Judge vs group",
    "group_vs_group": "Group vs group",
    "within_group": "Within group",
}


def groups_table(result: AgreementResult, criterion: int) -> dict[str, Any] | None:
    """Agreement by rater group of one criterion (judge vs group, group vs group, within
    group) per stratum, with the group sizes and the raters left out; None when the report was
    computed without the `rater_groups` parameter."""
    if result.rater_groups is None or result.rater_group_members is None:
        return None
    members = next((m for m in result.rater_group_members if m.criterion == criterion), None)
    if members is None:
        return None
    judges = result.judges_by_id()
    rows = []
    for r in result.rater_groups:
        if r.criterion != criterion:
            continue
        judge = judges[r.judge_version].display if r.judge_version in judges else "judge"
        primary = r.primary
        rows.append(
            {
                "title": r.title(judge).split(),
                "kind": GROUP_KINDS.get(r.kind, r.kind),
                "stratum": summary.stratum_words(r.dimension, r.label).split(),
                "metric": summary.metric_name(r.primary_metric),
                "too_few": r.too_few,
                "figure": _est(primary),
                "pooled": _est(r.metrics.get("pooled_agreement"))
                if r.kind == "within_group" and not r.too_few
                else None,
                # Judge vs each vote of the group (result version 4, nominal criteria).
                "per_vote": _est(r.metrics.get("agreement_per_vote"))
                if "agreement_per_vote" in r.metrics
                else None,
                "per_vote_without_ties": _est(r.metrics.get("agreement_per_vote_without_ties"))
                if "agreement_per_vote_without_ties" in r.metrics
                else None,
                "n_subjects": r.n_subjects,
                "n_raters": r.n_raters,
            }
        )
    shown, more = _cap(rows)
    return {
        "attribute": members.attribute,
        "groups": [(g.group, g.n_raters) for g in members.groups],
        "n_without": members.n_raters_without,
        "rows": shown,
        "more": more,
    }


def criterion_tables(result: AgreementResult, criterion: CriterionRef) -> dict[str, Any]:
    """The tables of one criterion for its section of the audit page (None: absent)."""
    return {
        "levels": correlation_levels_table(result, criterion.id),
        "votes": votes_table(result, criterion.id),
        "orders": orders_table(result, criterion.id),
        "groups": groups_table(result, criterion.id),
    }


def attach(result: AgreementResult, sections: Iterable[dict[str, Any]]) -> None:
    """Add each section's tables under ``"v2"`` (sections as `page.audit_sections` builds them)."""
    for s in sections:
        s["v2"] = criterion_tables(result, s["criterion"])


__all__ = [
    "MAX_ROWS",
    "attach",
    "correlation_levels_table",
    "criterion_tables",
    "groups_table",
    "orders_table",
    "votes_table",
]
