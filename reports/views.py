"""Pages of the agreement report (leads only): the study's reports, the judge reliability
audit, its heatmap and bias charts, and the disagreements. The calibration and selection
pages are their kinds' own (reports/calibration/views.py, reports/selection/views.py)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from reviewhub.errors import AppError
from reviewhub.pages import page_study
from studies.models import Membership, Study

from . import audit_summary, audit_tables, charts, selectors, services
from .agreement import DEFAULT_PARAMS
from .agreement.verdict import rule_items
from .export import TABLES
from .models import ReportSnapshot
from .responses import svg_response
from .results import AgreementResult


def _lead_study(request: HttpRequest, slug: str) -> Study:
    # A 404 for every refusal, as on every other page: annotators (who grade blind) and viewers
    # get the same answer as a stranger, so these pages reveal nothing about the study's judges.
    study, _role = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


def _report(study: Study, report_id: int) -> ReportSnapshot:
    report = selectors.report_get(study=study, report_id=report_id)
    if report is None:
        raise Http404("No such report")
    return report


def _form_params(post: Any) -> dict[str, Any]:
    """Report parameters from the page's form (the API takes any parameter as JSON)."""
    params: dict[str, Any] = {}
    for key in ("seed", "n_resamples", "min_items"):
        if post.get(key, "").strip():
            try:
                params[key] = int(post[key])
            except ValueError:
                params[key] = post[key]
    for key in ("margin",):
        if post.get(key, "").strip():
            try:
                params[key] = float(post[key])
            except ValueError:
                params[key] = post[key]
    if post.get("annotator_type"):
        params["annotator_type"] = post["annotator_type"]
    if post.get("system_level"):
        params["system_level"] = True
    crosses = [c.strip() for c in post.get("crosses", "").split(",") if c.strip()]
    if crosses:
        params["crosses"] = [[x.strip() for x in c.split("*", 1)] for c in crosses]
    return params


@login_required
@require_http_methods(["GET", "POST"])
def reports_list(request: HttpRequest, slug: str) -> HttpResponse:
    study = _lead_study(request, slug)
    error = None
    if request.method == "POST":
        try:
            report = services.report_build(
                study=study, params=_form_params(request.POST), created_by=request.user
            )
        except AppError as exc:
            error = exc.message
        else:
            return HttpResponseRedirect(
                reverse("reports-audit", kwargs={"slug": slug, "report_id": report.pk})
            )
    # Every kind's snapshots in one list, each linked to the page that reads it.
    every_kind = [
        {"report": r, "url": _snapshot_url(slug, r)}
        for r in selectors.reports_of_every_kind(study=study)[:100]
    ]
    return render(
        request,
        "reports/list.html",
        {
            "study": study,
            "study_role": "lead",
            "every_kind": every_kind,
            "error": error,
            "defaults": DEFAULT_PARAMS,
            "dimensions": list(study.dimensions.values_list("key", flat=True)),
        },
        status=400 if error else 200,
    )


def _snapshot_url(slug: str, report: ReportSnapshot) -> str:
    """Where a snapshot of any kind is read."""
    if report.kind == ReportSnapshot.Kind.CALIBRATION:
        return reverse("reports-calibration", kwargs={"slug": slug}) + f"?snapshot={report.pk}"
    if report.kind == ReportSnapshot.Kind.SELECTION:
        return reverse("reports-selection-detail",
                       kwargs={"slug": slug, "snapshot_id": report.pk})
    return reverse("reports-audit", kwargs={"slug": slug, "report_id": report.pk})


def _result(report: ReportSnapshot) -> AgreementResult | None:
    """The typed result of a finished report (None before it is finished)."""
    return AgreementResult.from_json(report.result) if report.result else None


def _words(text: str) -> list[str]:
    """A header's words: the page keeps each whole (a judge named "coin-judge" must not break
    at its hyphen), wrapping only at spaces."""
    return text.split()


def _cell_view(c: Any) -> dict[str, Any]:
    """A heat-map table cell: the figures as text and the verdict's colour class."""
    m = c.primary
    return {
        "metric": audit_summary.metric_name(c.primary_metric),
        "value": audit_summary.number_text(m.value if m else None),
        "interval": audit_summary.interval_text(m.ci_low, m.ci_high) if m else "",
        "verdict": c.verdict,
        "cls": audit_summary.verdict_class(c.verdict),
        "n": c.n_subjects,
        "reason": c.verdict_reason,
    }


def _ceiling_view(ceil: Any) -> dict[str, Any] | None:
    if ceil is None:
        return None
    return {
        "metric": audit_summary.method_text(ceil.point_metric) if ceil.point_metric else "",
        "point": audit_summary.number_text(ceil.point),
        "alpha": audit_summary.estimate_text(ceil.alpha),
        "n_subjects": ceil.n_subjects,
        "n_humans": ceil.n_humans,
    }


def _estimate_view(name: str, m: Any) -> dict[str, Any]:
    return {
        "name": audit_summary.metric_name(name),
        "key": name,
        "value": audit_summary.number_text(m.value, 4),
        "interval": audit_summary.interval_text(m.ci_low, m.ci_high),
        "method": audit_summary.method_text(m.method),
    }


def _audit_sections(
    result: AgreementResult, study: Study, report: ReportSnapshot
) -> list[dict[str, Any]]:
    judges = result.judges_by_id()
    sections = []
    for crit in result.criteria:
        cid = crit.id
        hm = charts.heatmap_data(result, cid)
        ceilings = [c for c in result.ceiling if c.criterion == cid]
        if not hm["judges"] and not ceilings:
            continue
        table = []
        for dim, lab in hm["rows"]:
            cells = []
            for jid in hm["judges"]:
                c = hm["cells"].get((dim, lab, jid))
                cells.append(None if c is None else _cell_view(c))
            table.append(
                {
                    "stratum": _words(audit_summary.stratum_words(dim, lab)),
                    "cells": cells,
                    "ceiling": _ceiling_view(hm["ceilings"].get((dim, lab))),
                }
            )
        overall = [c for c in result.cells_for(criterion=cid) if c.dimension == ""]
        confusion = [
            {
                "judge": judges[c.judge_version].display,
                "labels": c.labels,
                "rows_zipped": list(zip(c.labels, c.matrix, strict=True)),
            }
            for c in result.confusion
            if c.criterion == cid and c.dimension == ""
        ]
        examples = [
            {
                "judge": judges[d.judge_version].display,
                "row": d,
                "url": reverse(
                    "reports-disagreements", kwargs={"slug": study.slug, "report_id": report.pk}
                )
                + f"?judge={d.judge_version}&criterion={cid}",
            }
            for d in result.disagreements
            if d.criterion == cid
        ]
        system = [
            {
                "judge": _words(judges[s.judge_version].display),
                "row": s,
                "kendall": audit_summary.estimate_text(s.kendall),
                "spearman": audit_summary.number_text(s.spearman.value),
                "pearson": audit_summary.number_text(s.pearson.value),
                "per_subject": audit_summary.estimate_text(s.per_subject_kendall),
                "warning": audit_summary.system_warning(s.n_candidates),
            }
            for s in result.system
            if s.criterion == cid
        ]
        sections.append(
            {
                "criterion": crit,
                "judges": [_words(judges[j].display) for j in hm["judges"]],
                "table": table,
                "truncated": hm["truncated"],
                "overall": [
                    {
                        "judge": judges[c.judge_version].display,
                        "alt_test": c.alt_test,
                        "verdict": c.verdict,
                        "cls": audit_summary.verdict_class(c.verdict),
                        "verdict_reason": c.verdict_reason,
                        "metric_items": [
                            _estimate_view(name, m) for name, m in sorted(c.metrics.items())
                        ],
                    }
                    for c in overall
                ],
                "confusion": confusion,
                "examples": examples,
                "system": system,
                "system_warning": any(x["warning"] for x in system),
                "heatmap_url": reverse(
                    "reports-heatmap", kwargs={"slug": study.slug, "report_id": report.pk}
                )
                + f"?criterion={cid}",
            }
        )
    return sections


def _rule_items(result: AgreementResult) -> list[str]:
    """The trust rule as a short list; a report whose parameters lack one of the rule's
    (written by other code) keeps its stored paragraph."""
    try:
        return rule_items(result.params)
    except (KeyError, TypeError, ValueError):
        return [result.rule]


@require_GET
@login_required
def report_audit(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    report = _report(study, report_id)
    result = _result(report)
    judges = result.judges_by_id() if result else {}
    crits = result.criteria_by_id() if result else {}
    bias = [
        {
            "judge": judges[b.judge_version].display if b.judge_version in judges else "?",
            "criterion": audit_summary.criterion_words(crits.get(b.criterion)),
            "row": b,
            "value": audit_summary.number_text(b.value),
            "interval": audit_summary.interval_text(b.ci_low, b.ci_high),
            "method": audit_summary.method_text(b.method),
        }
        for b in (result.bias if result else ())
    ]
    export = reverse("reports-api-export", kwargs={"slug": slug, "report_id": report.pk})
    sections = _audit_sections(result, study, report) if result else []
    if result:
        audit_tables.attach(result, sections)
    return render(
        request,
        "reports/audit.html",
        {
            "study": study,
            "study_role": "lead",
            "report": report,
            "result": result,
            "summaries": audit_summary.judge_summaries(result) if result else (),
            "rule_items": _rule_items(result) if result else [],
            "sections": sections,
            "bias": bias,
            "csv_links": [(t, f"{export}?table={t}") for t in TABLES],
            "bias_url": reverse("reports-bias", kwargs={"slug": slug, "report_id": report.pk}),
            "params_json": json.dumps(report.params, indent=1, sort_keys=True),
            "refresh": report.status
            in (ReportSnapshot.Status.PENDING, ReportSnapshot.Status.RUNNING),
        },
    )


@require_GET
@login_required
def report_heatmap(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    report = _report(study, report_id)
    try:
        criterion = int(request.GET.get("criterion", ""))
    except ValueError as exc:
        raise Http404("criterion must be an id") from exc
    result = _result(report)
    if result is None or criterion not in result.criteria_by_id():
        raise Http404("No such criterion in this report")
    return svg_response(charts.heatmap_svg(result, criterion))


@require_GET
@login_required
def report_bias(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    report = _report(study, report_id)
    result = _result(report)
    if result is None:
        raise Http404("Report not finished")
    return svg_response(charts.bias_svg(result))


@require_GET
@login_required
def report_disagreements(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    report = _report(study, report_id)
    result = _result(report)
    try:
        jid, cid = int(request.GET.get("judge", "")), int(request.GET.get("criterion", ""))
    except ValueError as exc:
        raise Http404("judge and criterion must be ids") from exc
    entry = next(
        (
            d
            for d in (result.disagreements if result else ())
            if d.judge_version == jid and d.criterion == cid
        ),
        None,
    )
    if entry is None:
        raise Http404("No such judge and criterion in this report")
    page = Paginator(entry.examples, 25).get_page(request.GET.get("page"))
    texts = selectors.subjects_describe(study=study, subjects=[e.subject for e in page])
    rows = [
        {"example": e, **texts.get(e.subject, {"input": "", "outputs": []})} for e in page
    ]
    return render(
        request,
        "reports/disagreements.html",
        {
            "study": study,
            "study_role": "lead",
            "report": report,
            "entry": entry,
            "page": page,
            "rows": rows,
            "judge": result.judges_by_id().get(jid) if result else None,
            "criterion": result.criteria_by_id().get(cid) if result else None,
            "audit_url": reverse("reports-audit", kwargs={"slug": slug, "report_id": report.pk}),
        },
    )
