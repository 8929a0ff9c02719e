"""The selection report's pages: the snapshots and the latest in full, one snapshot, its
charts (SVG), CSV tables and PDF, and the "next labels" sampling plan (leads act; leads and
viewers read; annotators get a 404 like a stranger). Thin: the stored result is shown through
`present`; writes go through reports.services and `actions`."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from generation.selectors import gate_provenance
from reports import selectors, services
from reports.kinds import kind_names
from reports.responses import svg_response
from reports.results import ResultFormatError
from reviewhub.errors import AppError, ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from studies.pages import page_study

from .actions import next_labels_plan_create
from .present import charts, page, tables
from .present import pdf as pdf_render

SELECTION = "selection"
SELECTION_LIST_LIMIT = 50


def _selection_study(request: HttpRequest, slug: str) -> tuple[Study, str]:
    """The study and the caller's role for the selection pages: leads and viewers read (as on
    the reports API); annotators grade blind, so they get the same 404 as a stranger."""
    study, role = page_study(request, slug, min_role=Membership.Role.VIEWER)
    if role == Membership.Role.ANNOTATOR:
        raise Http404("No such study")
    return study, role


def _selection_report(study: Study, snapshot_id: int) -> ReportSnapshot:
    report = selectors.report_get(study=study, report_id=snapshot_id, kind=SELECTION)
    if report is None:
        raise Http404("No such selection snapshot")
    return report


def _selection_result(report: ReportSnapshot | None) -> dict[str, Any] | None:
    """The stored result of a finished snapshot (None before it is finished)."""
    if report is None or report.status != ReportSnapshot.Status.DONE:
        return None
    return report.result if isinstance(report.result, dict) else None


def _selection_kind_registered() -> bool:
    return SELECTION in kind_names()


def _selection_context(study: Study, role: str, report: ReportSnapshot | None, *,
                       pdf: bool = False) -> dict[str, Any]:
    """What the page and the PDF render for one snapshot (the result's tables, chart links or
    inline charts, CSV links)."""
    result = _selection_result(report)
    view = page.page_view(result) if result else None
    if view is not None and report is not None and result is not None:
        for section in view["metric_sections"]:
            if pdf:
                section["chart_src"] = pdf_render.svg_data_url(
                    charts.forest_svg(result, section["key"]))
            else:
                section["chart_src"] = reverse(
                    "reports-selection-forest",
                    kwargs={"slug": study.slug, "snapshot_id": report.pk,
                            "metric": section["index"]})
        if view["frontier"]:
            view["pareto_src"] = (
                pdf_render.svg_data_url(charts.pareto_svg(result)) if pdf
                else reverse("reports-selection-pareto",
                             kwargs={"slug": study.slug, "snapshot_id": report.pk}))
    csv = {}
    if report is not None and not pdf:
        csv = {t: reverse("reports-selection-csv",
                          kwargs={"slug": study.slug, "snapshot_id": report.pk, "table": t})
               for t in tables.TABLES}
    return {
        "study": study,
        "study_role": role,
        "is_lead": role == Membership.Role.LEAD,
        "report": report,
        "result": result,
        "view": view,
        "csv": csv,
        "pdf": pdf,
        "params_json": json.dumps(report.params, indent=1, sort_keys=True) if report else "",
        # The gates' latency, error, schema and cost figures: the candidate runs that measured
        # the outputs (generation/), named beside the gates.
        "gate_provenance": gate_provenance(study=study),
    }


def _selection_post(request: HttpRequest, study: Study) -> HttpResponse:
    """The list page's form: build a new selection snapshot (leads only)."""
    if request.POST.get("action") != "build":
        raise ValidationFailed("action must be 'build'.",
                               details={"errors": [{"path": "action", "message": "unknown"}]})
    report = services.report_build(study=study, kind=SELECTION, params={},
                                   created_by=request.user)
    messages.success(request, f"Selection snapshot #{report.pk} is being computed.")
    return HttpResponseRedirect(
        reverse("reports-selection-detail", kwargs={"slug": study.slug, "snapshot_id": report.pk}))


@login_required
@require_http_methods(["GET", "POST"])
def selection_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's selection snapshots and the latest finished one in full."""
    study, role = _selection_study(request, slug)
    error = None
    if request.method == "POST":
        if role != Membership.Role.LEAD:
            raise Http404("No such study")
        try:
            return _selection_post(request, study)
        except AppError as exc:
            error = exc.message
    snapshots = list(selectors.reports_for_study(study=study, kind=SELECTION)
                     [:SELECTION_LIST_LIMIT])
    done = next((s.pk for s in snapshots if s.status == ReportSnapshot.Status.DONE), None)
    latest = _selection_report(study, done) if done is not None else None
    context = _selection_context(study, role, latest)
    newest = snapshots[0] if snapshots else None
    context.update({
        "snapshots": snapshots,
        "newest": newest,
        "listing": True,
        "can_build": role == Membership.Role.LEAD and _selection_kind_registered(),
        "refresh": newest is not None and newest.status in (
            ReportSnapshot.Status.PENDING, ReportSnapshot.Status.RUNNING),
        "error": error,
    })
    return render(request, "reports/selection.html", context, status=400 if error else 200)


@require_GET
@login_required
def selection_detail(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """One selection snapshot: the decision, flips, gates, estimates and the rest."""
    study, role = _selection_study(request, slug)
    report = _selection_report(study, snapshot_id)
    context = _selection_context(study, role, report)
    context.update({
        "listing": False,
        "newest": report,
        "refresh": report.status in (ReportSnapshot.Status.PENDING,
                                     ReportSnapshot.Status.RUNNING),
    })
    return render(request, "reports/selection.html", context)


def _finished_selection(request: HttpRequest, slug: str, snapshot_id: int
                        ) -> tuple[Study, str, ReportSnapshot, dict[str, Any]]:
    study, role = _selection_study(request, slug)
    report = _selection_report(study, snapshot_id)
    result = _selection_result(report)
    if result is None:
        raise Http404("Selection snapshot not finished")
    return study, role, report, result


@require_GET
@login_required
def selection_forest(request: HttpRequest, slug: str, snapshot_id: int,
                     metric: int) -> HttpResponse:
    """The forest plot (SVG) of the snapshot's metric number `metric`."""
    _study, _role, _report, result = _finished_selection(request, slug, snapshot_id)
    listed = tables.metrics(result)
    if metric >= len(listed):
        raise Http404("No such metric")
    return svg_response(charts.forest_svg(result, listed[metric]["key"]))


@require_GET
@login_required
def selection_pareto(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """The quality x latency x cost chart (SVG) with the Pareto frontier."""
    _study, _role, _report, result = _finished_selection(request, slug, snapshot_id)
    return svg_response(charts.pareto_svg(result))


@require_GET
@login_required
def selection_csv(request: HttpRequest, slug: str, snapshot_id: int, table: str) -> HttpResponse:
    """One table of the snapshot as CSV (formula-like text neutralised)."""
    study, _role, report, result = _finished_selection(request, slug, snapshot_id)
    if table not in tables.TABLES:
        raise Http404("No such table")
    response = HttpResponse(tables.table_csv(result, table),
                            content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="{study.slug}-selection-{report.pk}-{table}.csv"')
    return response


@require_GET
@login_required
def selection_report_pdf(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """The snapshot as a self-contained PDF (charts and styles inline, nothing fetched)."""
    study, role, report, _result = _finished_selection(request, slug, snapshot_id)
    context = _selection_context(study, role, report, pdf=True)
    response = HttpResponse(pdf_render.pdf_bytes(context), content_type="application/pdf")
    response["Content-Disposition"] = (
        f'attachment; filename="{study.slug}-selection-{report.pk}.pdf"')
    return response


@login_required
@require_http_methods(["POST"])
def selection_next_labels(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """Turn the snapshot's "next labels" allocation into a sampling plan (leads only)."""
    study, role = _selection_study(request, slug)
    if role != Membership.Role.LEAD:
        raise Http404("No such study")
    report = _selection_report(study, snapshot_id)
    page = reverse("reports-selection-detail", kwargs={"slug": slug, "snapshot_id": report.pk})
    try:
        created = next_labels_plan_create(study=study, snapshot=report, user=request.user)
    except AppError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(page)
    except ResultFormatError as exc:  # a stored result this version cannot read
        messages.error(request, f"Snapshot #{report.pk} cannot be read: {exc}")
        return HttpResponseRedirect(page)
    # The plan can only draw the same count from every stratum: the note says how many more
    # than asked some strata get, so the lead is never misled about what was drawn.
    messages.success(request, f"Sampling plan v{created.plan.version} created from snapshot "
                              f"#{report.pk}: {created.note}.")
    return HttpResponseRedirect(page)
