"""The study's reports page (leads only): every kind's snapshots, each linked to the page that
reads it, and the form that builds an agreement report. Each kind's own pages are its package's
(reports/agreement/views.py, reports/calibration/views.py, reports/selection/views.py)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from reviewhub.errors import AppError
from snapshots.models import ReportSnapshot

from . import selectors, services
from .agreement import DEFAULT_PARAMS
from .agreement.views import agreement_form_params, lead_study


@login_required
@require_http_methods(["GET", "POST"])
def reports_list(request: HttpRequest, slug: str) -> HttpResponse:
    study = lead_study(request, slug)
    error = None
    if request.method == "POST":
        try:
            report = services.report_build(
                study=study, params=agreement_form_params(request.POST), created_by=request.user
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
