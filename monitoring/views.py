"""Monitoring pages for leads: a study's deployments, and one deployment's windows, state per
stratum in words, pass-rate chart, gates, signals and alerts (acknowledge / resolve).

Pages answer 404 to every refusal (studies.pages.page_study). Text from traffic and strata
labels is user data: autoescaped in the template, and the chart is an <img> served as
image/svg+xml with its own no-script policy.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from reviewhub.errors import AppError, NotFound
from reviewhub.pages import error_rows, strict_csp
from studies.models import Membership, Study
from studies.pages import page_study

from . import alerts, reopen, selectors
from .models import Deployment, Window
from .window import present
from .window.results import WindowResult

SHOWN_WINDOWS = {"hour": 48, "day": 30}


def _lead_study(request: HttpRequest, slug: str) -> Study:
    study, _ = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


def _deployment(study: Study, deployment_id: int) -> Deployment:
    deployment = (Deployment.objects.select_related("plan", "candidate")
                  .filter(study=study, pk=deployment_id).first())
    if deployment is None:
        raise Http404("not found")
    return deployment


def _granularity(request: HttpRequest, deployment: Deployment) -> str:
    value = request.GET.get("granularity")
    if value in SHOWN_WINDOWS:
        return str(value)
    has_days = Window.objects.filter(deployment=deployment, granularity="day").exists()
    return "day" if has_days else "hour"


def _results(deployment: Deployment, granularity: str) -> list[WindowResult]:
    windows = list(Window.objects.filter(deployment=deployment, granularity=granularity)
                   .order_by("-start")[:SHOWN_WINDOWS[granularity]])
    return [WindowResult.from_json(w.result) for w in reversed(windows)]


@login_required
@require_GET
@strict_csp
def deployment_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _lead_study(request, slug)
    return render(request, "monitoring/list.html", {
        "study": study, "deployments": selectors.deployments_list(study=study)})


@login_required
@require_http_methods(["GET", "POST"])
@strict_csp
def deployment_page(request: HttpRequest, slug: str, deployment_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    deployment = _deployment(study, deployment_id)
    errors: list[dict[str, Any]] = []
    if request.method == "POST":
        try:
            if request.POST.get("action") == "reopen":
                new = reopen.selection_reopen(deployment=deployment, user=request.user)
                return HttpResponseRedirect(reverse("study-overview", args=[new.slug]))
            _act(request, deployment)
            return HttpResponseRedirect(reverse("monitoring-page", args=[slug, deployment.pk]))
        except AppError as exc:
            errors = error_rows(exc)
    granularity = _granularity(request, deployment)
    results = _results(deployment, granularity)
    floor = alerts.pass_rate_floor(deployment)
    latest = results[-1] if results else None
    strata = ["", *sorted({s.stratum for r in results for s in r.strata})]
    return render(request, "monitoring/deployment.html", {
        "study": study, "deployment": deployment, "granularity": granularity,
        "errors": errors, "floor": floor,
        "states": present.stratum_states(results, dimension=deployment.watch_dimension,
                                         floor=floor),
        "charts": [{"stratum": s, "name": present.stratum_name(s, deployment.watch_dimension),
                    "rows": present.series_rows(results, s)} for s in strata],
        "latest": latest,
        "alerts": list(selectors.alerts_list(deployment=deployment)[:50]),
        "streams": alerts.stream_states(deployment),
    })


def _act(request: HttpRequest, deployment: Deployment) -> None:
    action = request.POST.get("action")
    now = timezone.now()
    if action in ("acknowledge", "resolve"):
        try:
            alert_id = int(request.POST.get("alert", ""))
        except ValueError:
            raise NotFound("No such alert.") from None
        alert = selectors.alert_get(deployment=deployment, alert_id=alert_id)
        if action == "acknowledge":
            alerts.alert_acknowledge(alert=alert, user=request.user, now=now)
        else:
            alerts.alert_resolve(alert=alert, user=request.user, now=now)
        return
    raise NotFound("Unknown action.")


@login_required
@require_GET
def deployment_chart(request: HttpRequest, slug: str, deployment_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    deployment = _deployment(study, deployment_id)
    granularity = _granularity(request, deployment)
    stratum = request.GET.get("stratum", "")
    rows = present.series_rows(_results(deployment, granularity), stratum)
    svg = present.pass_rate_svg(rows, floor=alerts.pass_rate_floor(deployment),
                                title=present.stratum_name(stratum, deployment.watch_dimension))
    response = HttpResponse(svg, content_type="image/svg+xml")
    # The SVG is an image: no scripts, no external loads, even if opened on its own.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return response
