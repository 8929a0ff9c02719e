"""Pages of the agreement report (leads only): the judge reliability audit, its heat-map and
bias charts, and the disagreeing examples. The study's list of reports of every kind, with the
form that builds an agreement report, is reports/views.py."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from reports import selectors
from reports.responses import svg_response
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from studies.pages import page_study

from .present import charts, page, summary, tables
from .present.export import TABLES
from .results import AgreementResult


def lead_study(request: HttpRequest, slug: str) -> Study:
    """The study of a reports page, for its leads."""
    # A 404 for every refusal, as on every other page: annotators (who grade blind) and viewers
    # get the same answer as a stranger, so these pages reveal nothing about the study's judges.
    study, _role = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


def agreement_form_params(post: Any) -> dict[str, Any]:
    """Report parameters from the reports page's form (the API takes any parameter as JSON)."""
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


def _report(study: Study, report_id: int) -> ReportSnapshot:
    report = selectors.report_get(study=study, report_id=report_id)
    if report is None:
        raise Http404("No such report")
    return report


def _result(report: ReportSnapshot) -> AgreementResult | None:
    """The typed result of a finished report (None before it is finished)."""
    return AgreementResult.from_json(report.result) if report.result else None


@require_GET
@login_required
def report_audit(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = lead_study(request, slug)
    report = _report(study, report_id)
    result = _result(report)
    export = reverse("reports-api-export", kwargs={"slug": slug, "report_id": report.pk})
    sections = page.audit_sections(result, slug, report.pk) if result else []
    if result:
        tables.attach(result, sections)
    return render(
        request,
        "reports/audit.html",
        {
            "study": study,
            "study_role": "lead",
            "report": report,
            "result": result,
            "summaries": summary.judge_summaries(result) if result else (),
            "rule_items": page.rule_list(result) if result else [],
            "sections": sections,
            "bias": page.bias_view(result) if result else [],
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
    study = lead_study(request, slug)
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
    study = lead_study(request, slug)
    report = _report(study, report_id)
    result = _result(report)
    if result is None:
        raise Http404("Report not finished")
    return svg_response(charts.bias_svg(result))


@require_GET
@login_required
def report_disagreements(request: HttpRequest, slug: str, report_id: int) -> HttpResponse:
    study = lead_study(request, slug)
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
    paged = Paginator(entry.examples, 25).get_page(request.GET.get("page"))
    texts = selectors.subjects_describe(study=study, subjects=[e.subject for e in paged])
    rows = [
        {"example": e, **texts.get(e.subject, {"input": "", "outputs": []})} for e in paged
    ]
    return render(
        request,
        "reports/disagreements.html",
        {
            "study": study,
            "study_role": "lead",
            "report": report,
            "entry": entry,
            "page": paged,
            "rows": rows,
            "judge": result.judges_by_id().get(jid) if result else None,
            "criterion": result.criteria_by_id().get(cid) if result else None,
            "audit_url": reverse("reports-audit", kwargs={"slug": slug, "report_id": report.pk}),
        },
    )
