"""The lead's calibration page: the latest (or a chosen) calibration snapshot's cells with
reliability before and after, costs, thresholds, policy costs and guaranteed agreement, what to
do next, and the two forms (build a snapshot, send its escalations to humans); one cell's
reliability diagram as SVG. Leads only: everyone else gets a 404 like a stranger."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from calibration.advice import (
    calibration_advice,
    cell_labels_wanted,
    min_labels_of,
    pooled_without_variance,
    stratum_text,
)
from calibration.escalations import escalations_plan_create
from reports import selectors, services
from reports.responses import svg_response
from reviewhub.errors import AppError, ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from studies.pages import page_study

from .charts import cell_title, reliability_bins, reliability_svg


def _lead_study(request: HttpRequest, slug: str) -> Study:
    # A 404 for every refusal, as on every other page.
    study, _role = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


CALIBRATION = "calibration"


def _calibration_snapshot(study: Study, raw: str | None) -> ReportSnapshot | None:
    """The snapshot the page shows: `?snapshot=<id>` or the latest finished one."""
    if raw:
        if not raw.isascii() or not raw.isdigit() or int(raw) > 2**63 - 1:
            raise Http404("snapshot must be an id")
        report = selectors.report_get(study=study, report_id=int(raw), kind=CALIBRATION)
        if report is None:
            raise Http404("No such calibration snapshot")
        return report
    done = (
        selectors.reports_for_study(study=study, kind=CALIBRATION)
        .filter(status=ReportSnapshot.Status.DONE)
        .values_list("id", flat=True)
        .first()
    )
    return (
        selectors.report_get(study=study, report_id=done, kind=CALIBRATION)
        if done is not None
        else None
    )


def _estimate(value: Any) -> dict[str, Any] | None:
    """An Estimate's JSON as {value, ci_low, ci_high} (None when absent)."""
    if isinstance(value, dict) and isinstance(value.get("value"), int | float):
        return {"value": value["value"], "ci_low": value.get("ci_low"),
                "ci_high": value.get("ci_high")}
    return None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _diag_figures(diag: Any) -> dict[str, Any]:
    diag = diag if isinstance(diag, dict) else {}
    return {k: _estimate(diag.get(k)) for k in ("ece", "ece_mass", "brier", "log_loss", "auroc")}


def _calibration_cells(
    result: dict[str, Any], study: Study, report: ReportSnapshot
) -> list[dict[str, Any]]:
    chart = reverse("reports-calibration-reliability",
                    kwargs={"slug": study.slug, "snapshot_id": report.pk})
    cells = []
    min_labels, tau_zero = min_labels_of(result), pooled_without_variance(result)
    for index, cell in enumerate(result.get("cells") or []):
        if not isinstance(cell, dict):
            continue
        wanted, wanted_why = cell_labels_wanted(cell, min_labels=min_labels, tau_zero=tau_zero)
        diagnostics = _mapping(cell.get("diagnostics"))
        policy = _mapping(cell.get("policy_costs"))
        fpc = _mapping(cell.get("false_pass_cost"))
        cells.append({
            "index": index,
            "title": cell_title(cell),
            "judge": cell.get("judge") or cell.get("judge_version"),
            "criterion": cell.get("criterion"),
            "stratum": cell.get("stratum") or "",
            "n_labels": cell.get("n_labels"),
            "too_few": bool(cell.get("too_few_labels")),
            "pooled_only": bool(cell.get("pooled_only")),
            "method": cell.get("method"),
            "borrowed": cell.get("borrowed"),
            "labels_wanted": wanted,
            "labels_wanted_why": wanted_why,
            "before": _diag_figures(diagnostics.get("before")),
            "after": _diag_figures(diagnostics.get("after")),
            "bins_before": reliability_bins(cell, "before"),
            "bins_after": reliability_bins(cell, "after"),
            "thresholds": cell.get("thresholds") if isinstance(cell.get("thresholds"), dict)
            else None,
            "false_pass": _estimate(fpc.get("expected")),
            # Older snapshots have no "used": their figure is the mean of every failure.
            "false_pass_by_score": fpc.get("used") == "score_weighted",
            "false_pass_all": _estimate(fpc.get("all_failures")),
            "false_fail_cost": cell.get("false_fail_cost"),
            "policy": {k: _estimate(policy.get(k)) for k in ("raw", "calibrated", "human_only")}
            if policy else None,
            "trust": cell.get("trust") if isinstance(cell.get("trust"), dict) else None,
            "chart_url": f"{chart}?cell={index}",
        })
    return cells


def _positive_int(raw: str, name: str) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 2**63 - 1:
        raise ValidationFailed(f"{name} must be a positive integer.",
                               details={"errors": [{"path": name, "message": "invalid"}]})
    return int(raw)


def _calibration_form_params(post: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key in ("seed", "n_resamples", "folds", "min_labels"):
        if post.get(key, "").strip():
            try:
                params[key] = int(post[key])
            except ValueError:
                params[key] = post[key]  # the kind's validation names it
    return params


def _calibration_post(request: HttpRequest, study: Study) -> HttpResponse:
    """The page's two forms: build a new snapshot, or send a snapshot's escalations to humans."""
    page = reverse("reports-calibration", kwargs={"slug": study.slug})
    action = request.POST.get("action", "")
    if action == "build":
        report = services.report_build(study=study, kind=CALIBRATION,
                                       params=_calibration_form_params(request.POST),
                                       created_by=request.user)
        messages.success(request, f"Calibration snapshot #{report.pk} is being computed.")
        return HttpResponseRedirect(page)
    if action == "escalate":
        result = escalations_plan_create(
            study=study,
            snapshot_id=_positive_int(request.POST.get("snapshot", ""), "snapshot"),
            limit=_positive_int(request.POST.get("limit", ""), "limit"),
            created_by=request.user,
            # An unticked checkbox is absent from the form.
            keep_sampling=request.POST.get("keep_sampling", "") == "1",
        )
        verb = "Sent" if result.created else "Already sent"
        carried = (f", beside {result.carried_over} unfinished entries of the plan before it"
                   if result.carried_over else "")
        messages.success(request, f"{verb}: {result.escalated} {result.subject}s of snapshot "
                                  f"#{result.snapshot_id} are sampling plan "
                                  f"v{result.plan.version} for humans{carried}.")
        return HttpResponseRedirect(page)
    raise ValidationFailed("action must be 'build' or 'escalate'.",
                           details={"errors": [{"path": "action", "message": "unknown"}]})


@login_required
@require_http_methods(["GET", "POST"])
def calibration_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The latest calibration snapshot: reliability before/after, costs, thresholds, policy
    costs, guaranteed agreement, and what to do next."""
    study = _lead_study(request, slug)
    error = None
    if request.method == "POST":
        try:
            return _calibration_post(request, study)
        except AppError as exc:
            error = exc.message
    report = _calibration_snapshot(study, request.GET.get("snapshot"))
    newest = selectors.reports_for_study(study=study, kind=CALIBRATION).first()
    result = report.result if report is not None and isinstance(report.result, dict) else None
    cells = _calibration_cells(result, study, report) if result and report else []
    for c in cells:
        c["stratum_text"] = stratum_text(c["stratum"])
    costs = result.get("costs") if result and isinstance(result.get("costs"), dict) else None
    severity = costs.get("severity") if costs and isinstance(costs.get("severity"), dict) else {}
    return render(
        request,
        "reports/calibration.html",
        {
            "study": study,
            "study_role": "lead",
            "report": report,
            "newest": newest,
            "refresh": newest is not None and newest.status in (
                ReportSnapshot.Status.PENDING, ReportSnapshot.Status.RUNNING),
            "result": result,
            "cells": cells,
            "costs": costs,
            "severity": sorted(severity.items()),
            "policy": result.get("policy") if result else None,
            "cascade": result.get("cascade") if result else None,
            "advice": calibration_advice(result) if result else [],
            "warnings": [str(w) for w in (result.get("warnings") or [])] if result else [],
            "params_json": json.dumps(report.params, indent=1, sort_keys=True) if report else "",
            "error": error,
        },
        status=400 if error else 200,
    )


@require_GET
@login_required
def calibration_reliability(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """One cell's reliability diagram (SVG): `?cell=<index>` into the snapshot's cells."""
    study = _lead_study(request, slug)
    report = selectors.report_get(study=study, report_id=snapshot_id, kind=CALIBRATION)
    if report is None or not isinstance(report.result, dict):
        raise Http404("No such finished calibration snapshot")
    raw = request.GET.get("cell", "")
    cells = report.result.get("cells") or []
    if not raw.isascii() or not raw.isdigit() or int(raw) >= len(cells):
        raise Http404("No such cell")
    cell = cells[int(raw)]
    if not isinstance(cell, dict):
        raise Http404("No such cell")
    return svg_response(reliability_svg(cell))
