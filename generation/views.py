"""Pages for leads: start a candidate run (with its cost estimate first) and follow one.

Server-rendered, no script: the start form is submitted once to see the estimate (requests,
tokens, cost per candidate) and once more, from that page, to start the run with the same
spec. Outputs are model text: the templates print them escaped, never marked safe.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from reviewhub.errors import AppError, ValidationFailed
from reviewhub.pages import error_rows, form_number
from studies.models import Membership, Study
from studies.pages import page_study

from . import runs, selectors
from .estimate import run_estimate
from .models import GenerationConfig, GenerationJob, PromptTemplate

RECENT_OUTPUTS = 20


def _lead_study(request: HttpRequest, slug: str) -> Study:
    # Pages answer 404 to every refusal (studies.pages.page_study), so slugs cannot be probed.
    study, _ = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


def _latest_configs(study: Study) -> list[GenerationConfig]:
    latest = (GenerationConfig.objects.filter(candidate__study=study)
              .values("candidate_id").annotate(v=Max("version")))
    wanted = {(r["candidate_id"], r["v"]) for r in latest}
    return [c for c in selectors.generation_configs_list(study=study)
            if (c.candidate_id, c.version) in wanted]


def _spec(study: Study, post: Any) -> dict[str, Any]:
    """The run spec typed into the form, resolved; ValidationFailed names the field."""
    template = PromptTemplate.objects.filter(
        study=study, pk=form_number(post, "template", int, required=True)).first()
    if template is None:
        raise ValidationFailed.at("template", "choose a prompt template of this study.")
    ids = [int(v) for v in post.getlist("configs") if str(v).isdigit()]
    configs = list(GenerationConfig.objects.select_related("candidate")
                   .filter(candidate__study=study, pk__in=ids))
    if not configs:
        raise ValidationFailed.at("configs", "choose at least one candidate.")
    n = form_number(post, "sample_n", int)
    if n is None:
        selection: dict[str, Any] = {"kind": "all"}
    else:
        selection = {"kind": "sample", "n": n, "seed": form_number(post, "seed", int) or 0,
                     "stratify_by": str(post.get("stratify_by", "")).strip()}
    return {"template": template, "configs": configs, "selection": selection,
            "concurrency": form_number(post, "concurrency", int, required=True),
            "samples": form_number(post, "samples", int) or 1,
            "max_cost": form_number(post, "max_cost", float),
            "replay": post.get("replay") == "on",
            "rate": form_number(post, "rate", float)}


@login_required
@require_http_methods(["GET", "POST"])
def runs_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _lead_study(request, slug)
    errors: list[dict[str, Any]] = []
    estimate = None
    form: dict[str, Any] = {"concurrency": "8", "samples": "1"}
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in request.POST if k != "csrfmiddlewaretoken"}
        form["configs"] = request.POST.getlist("configs")
        try:
            spec = _spec(study, request.POST)
            if request.POST.get("action") == "start":
                run = runs.generation_run_start(study=study, created_by=request.user, **spec)
                return redirect("generation-run-page", slug=study.slug,
                                generation_run_id=run.pk)
            _, item_ids = runs.selection_items(study=study, selection=spec["selection"])
            estimate = run_estimate(template=spec["template"], configs=spec["configs"],
                                    item_ids=item_ids, samples=max(1, int(spec["samples"])),
                                    replay=spec["replay"])
            estimate_items = len(item_ids)
            form["estimate_items"] = estimate_items
        except AppError as exc:
            errors = error_rows(exc)
    return render(request, "generation/runs.html", {
        "study": study, "runs": list(selectors.generation_runs_list(study=study)[:100]),
        "configs": _latest_configs(study),
        "templates": list(selectors.prompt_templates_list(study=study)[:50]),
        "dimensions": list(study.dimensions.values_list("key", flat=True)),
        "form": form, "errors": errors, "estimate": estimate,
    }, status=400 if errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def run_page(request: HttpRequest, slug: str, generation_run_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    run = selectors.generation_runs_list(study=study).filter(pk=generation_run_id).first()
    if run is None:
        raise Http404("not found")
    if request.method == "POST" and request.POST.get("action") == "cancel":
        runs.generation_run_cancel(run=run)
        return redirect("generation-run-page", slug=study.slug, generation_run_id=run.pk)
    if request.method == "POST" and request.POST.get("action") == "resume":
        runs.generation_run_resume(run=run)
        return redirect("generation-run-page", slug=study.slug, generation_run_id=run.pk)
    recent = list(GenerationJob.objects.filter(run=run).exclude(status__in=runs.ACTIVE)
                  .select_related("item", "config__candidate").order_by("-finished_at", "-id")
                  [:RECENT_OUTPUTS])
    return render(request, "generation/run_detail.html", {
        "study": study, "run": run, "progress": selectors.generation_run_progress(run=run),
        "recent": recent,
    })
