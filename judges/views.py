"""The prompt preview page for leads: pick an output (or a comparison and an order) and a
criterion, see the exact request a judge version would send. Nothing is sent."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from reviewhub.errors import AppError, NotFound
from reviewhub.pages import page_study, strict_csp
from studies.models import Comparison, Membership, Output
from studies.selectors import rubric_current

from . import selectors
from .preview import judge_version_preview

# The form lists this many outputs/comparisons; any other id can still be typed in.
FORM_CHOICES = 200


def _int(value: str | None) -> int | None:
    if value is None or value.strip() == "":
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number > 0 else None


@require_GET
@login_required
@strict_csp
def preview_page(request: HttpRequest, slug: str, judge_id: int, version_id: int
                 ) -> HttpResponse:
    study, _role = page_study(request, slug, min_role=Membership.Role.LEAD)
    try:
        judge = selectors.judge_get(study=study, judge_id=judge_id)
        version = selectors.judge_version_get(judge=judge, version_id=version_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    rubric = rubric_current(study)
    criteria = list(rubric.criteria.all()) if rubric else []
    output_id = _int(request.GET.get("output_id"))
    comparison_id = _int(request.GET.get("comparison_id"))
    order = request.GET.get("order", "ab") if request.GET.get("order") in ("ab", "ba") else "ab"
    criterion_key = request.GET.get("criterion_key", "")
    preview: dict[str, Any] | None = None
    error = ""
    if output_id or comparison_id:
        try:
            subject = selectors.preview_subject_get(
                study=study, output_id=output_id, comparison_id=None if output_id else
                comparison_id)
            pairwise = isinstance(subject, Comparison)
            criterion = selectors.preview_criterion_get(
                study=study, criterion_key=criterion_key or None, pairwise=pairwise)
            preview = judge_version_preview(version=version, criterion=criterion,
                                            subject=subject, order=order if pairwise else "")
        except AppError as exc:
            error = exc.message
    context = {
        "study": study,
        "judge": judge,
        "version": version,
        "criteria": criteria,
        "outputs": Output.objects.filter(study=study).select_related("candidate", "item")
        .order_by("id")[:FORM_CHOICES],
        "comparisons": Comparison.objects.filter(study=study).select_related("item")
        .order_by("id")[:FORM_CHOICES],
        "selected": {"output_id": output_id, "comparison_id": comparison_id, "order": order,
                     "criterion_key": criterion_key},
        "preview": preview,
        "headers_text": json.dumps(preview["headers"], indent=2) if preview else "",
        "body_pretty": json.dumps(preview["body"], indent=2, ensure_ascii=False)
        if preview else "",
        "error": error,
    }
    return render(request, "judges/preview.html", context)
