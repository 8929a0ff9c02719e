"""What the audit page renders from a typed agreement result: per criterion, the judge x stratum
table beside the human ceiling, the overall figures of each judge, the confusion matrices, the
disagreeing examples and the system-level rows; and the bias audits and the trust rule.

Everything is text and numbers ready for the template (reports/audit.html); the URLs come from
the caller, so this module needs no request.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from ..results import AgreementCell, AgreementResult, CriterionRef, HumanCeiling, JudgeRef
from ..verdict import rule_items
from . import summary
from .charts import heatmap_data


def words(text: str) -> list[str]:
    """A header's words: the page keeps each whole (a judge named "coin-judge" must not break
    at its hyphen), wrapping only at spaces."""
    return text.split()


def _cell_view(c: AgreementCell) -> dict[str, Any]:
    """A heat-map table cell: the figures as text and the verdict's colour class."""
    m = c.primary
    return {
        "metric": summary.metric_name(c.primary_metric),
        "value": summary.number_text(m.value if m else None),
        "interval": summary.interval_text(m.ci_low, m.ci_high) if m else "",
        "verdict": c.verdict,
        "cls": summary.verdict_class(c.verdict),
        "n": c.n_subjects,
        "reason": c.verdict_reason,
    }


def _ceiling_view(ceil: HumanCeiling | None) -> dict[str, Any] | None:
    if ceil is None:
        return None
    return {
        "metric": summary.method_text(ceil.point_metric) if ceil.point_metric else "",
        "point": summary.number_text(ceil.point),
        "alpha": summary.estimate_text(ceil.alpha),
        "n_subjects": ceil.n_subjects,
        "n_humans": ceil.n_humans,
    }


def _estimate_view(name: str, m: Any) -> dict[str, Any]:
    return {
        "name": summary.metric_name(name),
        "key": name,
        "value": summary.number_text(m.value, 4),
        "interval": summary.interval_text(m.ci_low, m.ci_high),
        "method": summary.method_text(m.method),
    }


def _stratum_table(hm: dict[str, Any]) -> list[dict[str, Any]]:
    """The judge x stratum table of a criterion: one row per stratum, the ceiling beside."""
    table = []
    for dim, lab in hm["rows"]:
        cells = []
        for jid in hm["judges"]:
            c = hm["cells"].get((dim, lab, jid))
            cells.append(None if c is None else _cell_view(c))
        table.append(
            {
                "stratum": words(summary.stratum_words(dim, lab)),
                "cells": cells,
                "ceiling": _ceiling_view(hm["ceilings"].get((dim, lab))),
            }
        )
    return table


def _overall(result: AgreementResult, cid: int,
             judges: dict[int, JudgeRef]) -> list[dict[str, Any]]:
    """Each judge's figures over every subject of the criterion (the "overall" stratum)."""
    return [
        {
            "judge": judges[c.judge_version].display,
            "alt_test": c.alt_test,
            "verdict": c.verdict,
            "cls": summary.verdict_class(c.verdict),
            "verdict_reason": c.verdict_reason,
            "metric_items": [_estimate_view(name, m) for name, m in sorted(c.metrics.items())],
        }
        for c in result.cells_for(criterion=cid)
        if c.dimension == ""
    ]


def _confusion(result: AgreementResult, cid: int,
               judges: dict[int, JudgeRef]) -> list[dict[str, Any]]:
    return [
        {
            "judge": judges[c.judge_version].display,
            "labels": c.labels,
            "rows_zipped": list(zip(c.labels, c.matrix, strict=True)),
        }
        for c in result.confusion
        if c.criterion == cid and c.dimension == ""
    ]


def _examples(result: AgreementResult, cid: int, judges: dict[int, JudgeRef],
              disagreements_url: str) -> list[dict[str, Any]]:
    return [
        {
            "judge": judges[d.judge_version].display,
            "row": d,
            "url": disagreements_url + f"?judge={d.judge_version}&criterion={cid}",
        }
        for d in result.disagreements
        if d.criterion == cid
    ]


def _system(result: AgreementResult, cid: int,
            judges: dict[int, JudgeRef]) -> list[dict[str, Any]]:
    return [
        {
            "judge": words(judges[s.judge_version].display),
            "row": s,
            "kendall": summary.estimate_text(s.kendall),
            "spearman": summary.number_text(s.spearman.value),
            "pearson": summary.number_text(s.pearson.value),
            "per_subject": summary.estimate_text(s.per_subject_kendall),
            "warning": summary.system_warning(s.n_candidates),
        }
        for s in result.system
        if s.criterion == cid
    ]


def _section(result: AgreementResult, crit: CriterionRef, hm: dict[str, Any],
             urls: dict[str, str]) -> dict[str, Any]:
    judges = result.judges_by_id()
    cid = crit.id
    system = _system(result, cid, judges)
    return {
        "criterion": crit,
        "judges": [words(judges[j].display) for j in hm["judges"]],
        "table": _stratum_table(hm),
        "truncated": hm["truncated"],
        "overall": _overall(result, cid, judges),
        "confusion": _confusion(result, cid, judges),
        "examples": _examples(result, cid, judges, urls["disagreements"]),
        "system": system,
        "system_warning": any(x["warning"] for x in system),
        "heatmap_url": urls["heatmap"] + f"?criterion={cid}",
    }


def audit_sections(result: AgreementResult, slug: str, report_id: int) -> list[dict[str, Any]]:
    """One section per criterion that has judge cells or human ceilings, in report order."""
    ids = {"slug": slug, "report_id": report_id}
    urls = {"disagreements": reverse("reports-disagreements", kwargs=ids),
            "heatmap": reverse("reports-heatmap", kwargs=ids)}
    sections = []
    for crit in result.criteria:
        hm = heatmap_data(result, crit.id)
        if not hm["judges"] and not any(c.criterion == crit.id for c in result.ceiling):
            continue
        sections.append(_section(result, crit, hm, urls))
    return sections


def bias_view(result: AgreementResult) -> list[dict[str, Any]]:
    """The bias audits' rows as the page shows them."""
    judges, crits = result.judges_by_id(), result.criteria_by_id()
    return [
        {
            "judge": judges[b.judge_version].display if b.judge_version in judges else "?",
            "criterion": summary.criterion_words(crits.get(b.criterion)),
            "row": b,
            "value": summary.number_text(b.value),
            "interval": summary.interval_text(b.ci_low, b.ci_high),
            "method": summary.method_text(b.method),
        }
        for b in result.bias
    ]


def rule_list(result: AgreementResult) -> list[str]:
    """The trust rule as a short list; a report whose parameters lack one of the rule's
    (written by other code) keeps its stored paragraph."""
    try:
        return rule_items(result.params)
    except (KeyError, TypeError, ValueError):
        return [result.rule]


__all__ = ["audit_sections", "bias_view", "rule_list", "words"]
