"""The analysis plan pages, for a study's leads: review every version, edit one as a form (or
as JSON/YAML, the advanced path), and lock (pre-register) a version after a confirmation that
shows exactly what will be frozen and how it differs from the version before.

Thin views: every write goes through the plan services the API and `import_study` use
(`plan_create`, `plan_update`, `plan_new_version`, `plan_lock`), so the rules are the API's —
a locked version is never changed, only superseded by a new version (409 otherwise).
Viewers and annotators get the 404 every lead page gives them (`page_study`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from reviewhub.errors import AppError, Conflict, Problems, ValidationFailed
from reviewhub.pages import error_rows, strict_csp

from . import services
from .models import AnalysisPlan, Membership, Study
from .pages import page_study
from .planform import form_fields, form_initial, form_spec, form_values, plan_diff, plan_summary
from .selectors import dimensions_current, rubric_current
from .studyfile import study_file_parse


def _plan_url(slug: str, version: int | None = None) -> str:
    url = reverse("study-plan", args=[slug])
    return f"{url}?version={version}" if version is not None else url


def _fingerprint(plan: AnalysisPlan) -> str:
    """What the lead confirmed: the spec and notes as they were shown (a lock is refused if the
    plan changed in between)."""
    blob = json.dumps({"spec": plan.spec, "notes": plan.notes}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _version_param(request: HttpRequest, name: str) -> int | None:
    text = request.GET.get(name, "")
    if not text:
        return None
    if not text.isdigit():
        raise Http404("No such plan version.")
    return int(text)


def _plan_or_404(study: Study, version: int) -> AnalysisPlan:
    plan = AnalysisPlan.objects.filter(study=study, version=version).select_related(
        "created_by", "locked_by").first()
    if plan is None:
        raise Http404("No such plan version.")
    return plan


def _previous(plan: AnalysisPlan) -> AnalysisPlan | None:
    return (AnalysisPlan.objects.filter(study_id=plan.study_id, version__lt=plan.version)
            .order_by("-version").first())


@require_GET
@login_required
@strict_csp
def plan_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Every plan version, and one (the newest unless `?version=`) in words."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    versions = list(AnalysisPlan.objects.filter(study=study).select_related(
        "created_by", "locked_by").order_by("-version"))
    wanted = _version_param(request, "version")
    plan = next((p for p in versions if p.version == wanted), None) if wanted is not None \
        else (versions[0] if versions else None)
    if wanted is not None and plan is None:
        raise Http404("No such plan version.")
    locked = [p for p in versions if p.is_locked]
    context: dict[str, Any] = {
        "study": study, "study_role": role, "versions": versions, "plan": plan,
        "latest": versions[0] if versions else None,
        "in_force": locked[0] if locked else None,
    }
    if plan is not None:
        previous = _previous(plan)
        context.update(summary=plan_summary(plan.spec), previous=previous,
                       diff=plan_diff(previous.spec if previous else None, plan.spec))
    return render(request, "studies/plan.html", context)


def _edit_context(study: Study, base: AnalysisPlan | None, values: dict[str, Any],
                  errors: dict[str, str], criteria: list[Any],
                  dimensions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "study": study, "base": base,
        "fields": form_fields(values, criteria=criteria, dimensions=dimensions, errors=errors),
        "next_version": (AnalysisPlan.objects.filter(study=study).order_by("-version")
                         .values_list("version", flat=True).first() or 0) + 1,
    }


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def plan_edit(request: HttpRequest, slug: str) -> HttpResponse:
    """The plan as a form, from a version (`?from=`, default the newest; a study without a plan
    starts empty). Saving edits that version in place while it is unlocked ("update", the
    API's PATCH) or saves a new version ("new_version"); a locked version is refused (409)."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    rubric = rubric_current(study=study)
    criteria = list(rubric.criteria.all()) if rubric else []
    dimensions = dimensions_current(study=study)
    source = request.POST if request.method == "POST" else request.GET
    base_text = str(source.get("from", "") or source.get("base", ""))
    if base_text and not base_text.isdigit():
        raise Http404("No such plan version.")
    base = _plan_or_404(study, int(base_text)) if base_text else (
        AnalysisPlan.objects.filter(study=study).order_by("-version").first())
    base_spec = base.spec if base is not None else None
    status = 200
    errors: dict[str, str] = {}
    error_list: list[dict[str, Any]] = []
    error_message = ""
    notes = base.notes if base is not None else ""
    spec_text = json.dumps(base_spec or {"criteria": {}}, indent=2, sort_keys=True)
    if request.method == "POST":
        # The text path leaves the form's fields as the base version had them.
        values = (form_values(request.POST, criteria=criteria, dimensions=dimensions)
                  if request.POST.get("mode") != "text"
                  else form_initial(base_spec, criteria=criteria, dimensions=dimensions))
        notes = str(request.POST.get("notes", ""))
        action = request.POST.get("action", "")
        try:
            if request.POST.get("mode") == "text":
                spec_text = str(request.POST.get("spec_text", ""))
                doc = study_file_parse(spec_text, name="plan.yaml")
                spec: Any = doc
            else:
                spec, problems = form_spec(values, base_spec=base_spec, criteria=criteria,
                                           dimensions=dimensions)
                problems.raise_if_any("The analysis plan")
            if action == "update":
                if base is None:
                    raise ValidationFailed.at("action", "there is no plan version to update; "
                                                        "save a new version")
                plan = services.plan_update(plan=base, spec=spec, notes=notes)
                messages.success(request, f"Plan v{plan.version} saved (not locked).")
            elif action == "new_version":
                if base is None:
                    plan = services.plan_create(study=study, spec=spec, notes=notes,
                                                created_by=request.user)  # type: ignore[arg-type]
                else:
                    plan = services.plan_new_version(study=study, spec=spec, notes=notes,
                                                     created_by=request.user)  # type: ignore[arg-type]
                messages.success(request, f"Plan v{plan.version} saved as a new version "
                                          "(not locked).")
            else:
                raise ValidationFailed.at("action", "choose update or new_version")
            return HttpResponseRedirect(_plan_url(study.slug, plan.version))
        except AppError as exc:
            status = 409 if isinstance(exc, Conflict) else 400
            error_list = error_rows(exc)
            error_message = exc.message
            errors = {}
            for row in error_list:
                if row["path"]:
                    errors.setdefault(row["path"], row["message"])
    else:
        values = form_initial(base_spec, criteria=criteria, dimensions=dimensions)
    context = _edit_context(study, base, values, errors, criteria, dimensions)
    context.update(study_role=role, errors=error_list, error_message=error_message,
                   notes=notes, spec_text=spec_text, rubric=rubric,
                   text_mode=request.POST.get("mode") == "text")
    return render(request, "studies/plan_edit.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def plan_lock_confirm(request: HttpRequest, slug: str, version: int) -> HttpResponse:
    """GET: what locking this version freezes (the whole plan, in words and as stored) and its
    difference from the version before. POST: lock it, if it is still what was shown."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    plan = _plan_or_404(study, version)
    status = 200
    error_list: list[dict[str, Any]] = []
    error_message = ""
    if request.method == "POST":
        try:
            if request.POST.get("fingerprint", "") != _fingerprint(plan):
                if plan.is_locked:
                    raise Conflict(f"Plan v{plan.version} is already locked.")
                problems = Problems()
                problems.add("fingerprint", "the plan changed after this page was shown; "
                                            "review it again")
                raise Conflict("The plan changed since you reviewed it: nothing was locked.",
                               details=problems.details())
            services.plan_lock(plan=plan, user=request.user)  # type: ignore[arg-type]
            messages.success(request, f"Plan v{plan.version} locked: it can no longer change; "
                                      "a change is a new version.")
            return HttpResponseRedirect(_plan_url(study.slug, plan.version))
        except AppError as exc:
            status = 409 if isinstance(exc, Conflict) else 400
            error_list = error_rows(exc)
            error_message = exc.message
            plan = _plan_or_404(study, version)
    previous = _previous(plan)
    return render(request, "studies/plan_lock.html", {
        "study": study, "study_role": role, "plan": plan, "previous": previous,
        "summary": plan_summary(plan.spec),
        "diff": plan_diff(previous.spec if previous else None, plan.spec),
        "notes_changed": previous is not None and previous.notes != plan.notes,
        "fingerprint": _fingerprint(plan), "errors": error_list,
        "error_message": error_message,
    }, status=status)
