"""Judge pages for leads: the judges page (create judges and versions, start runs) and the
prompt preview page (pick an output, or a comparison and an order, and a criterion, and see
the exact request a judge version would send; nothing is sent)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from reviewhub.api.strictjson import loads as strict_loads
from reviewhub.errors import AppError, NotFound, ValidationFailed
from reviewhub.pages import error_rows, form_number, strict_csp
from studies.models import Comparison, Membership, Output
from studies.pages import page_study
from studies.selectors import rubric_current

from . import runs, selectors, services
from .config import PROVIDERS, JudgeNetworkPolicy
from .connection_test import judge_connection_test
from .models import Judge
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
    # Nothing picked yet: preview with the study's first output (else its first comparison)
    # rather than show an empty page; the form says which one it is.
    defaulted = False
    if not (output_id or comparison_id) and version.judge.kind == Judge.Kind.LLM:
        first_output = (Output.objects.filter(study=study).order_by("id")
                        .values_list("id", flat=True).first())
        if first_output is not None:
            output_id, defaulted = first_output, True
        else:
            comparison_id = (Comparison.objects.filter(study=study).order_by("id")
                             .values_list("id", flat=True).first())
            defaulted = comparison_id is not None
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
        "defaulted": defaulted,
    }
    return render(request, "judges/preview.html", context)


# --- The judges page: configs, versions, starting runs ------------------------------------------

# The structured fields of the "new judge" form; everything else goes in the JSON box.
_LLM_FIELDS = ("provider", "base_url", "model", "api_key_env", "user_prompt")


def _json_object(text: str, path: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = strict_loads(text)
    except ValueError as exc:
        raise ValidationFailed.at(path, f"{path} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValidationFailed.at(path, f"{path} must be a JSON object")
    return value


def _new_judge_config(post: Any) -> dict[str, Any]:
    """The config typed into the form: the structured fields, then the JSON box over them."""
    config: dict[str, Any] = {}
    if post.get("kind", "llm") == Judge.Kind.LLM:
        for name in _LLM_FIELDS:
            value = str(post.get(name, "")).strip()
            if value:
                config[name] = value
    config.update(_json_object(str(post.get("config_json", "")), "config_json"))
    return config


def _split_config(config: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """A version's config as the edit form shows it: the structured fields (those that hold
    text) and every other key, which the form keeps in its JSON box so that nothing the
    fields cannot express is lost."""
    fields = {name: config[name] for name in _LLM_FIELDS if isinstance(config.get(name), str)}
    rest = {k: v for k, v in config.items() if k not in fields}
    return fields, rest


def _edited_config(post: Any) -> dict[str, Any]:
    """The config of the structured edit form: the other keys from its JSON box, then the
    filled-in fields over them. An empty field sets nothing: a key that was a field's text is
    gone (an emptied prompt: the default template), one the JSON box holds (a prompt stored
    per scale) stays."""
    config = _json_object(str(post.get("config_json", "")), "config_json")
    for name in _LLM_FIELDS:
        value = str(post.get(name, "")).strip()
        if value:
            config[name] = value
    return config


def _run_form(post: Any) -> dict[str, Any]:
    def number(name: str, cast: Any) -> Any:
        # Budgets and sample sizes: a cost may be 0, counts start at 1.
        return form_number(post, name, cast, minimum=1 if cast is int else 0)

    kind = str(post.get("selection_kind", "all"))
    selection: dict[str, Any] = {"kind": kind}
    if kind == "candidate":
        selection["candidate"] = str(post.get("candidate", ""))
    elif kind == "sample":
        selection["n"] = number("sample_n", int)
    return {"criteria": [str(c) for c in post.getlist("criteria")], "selection": selection,
            "max_cost": number("max_cost", float), "max_calls": number("max_calls", int)}


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def judge_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    """A study's judges with their versions; a lead creates judges and versions and starts
    runs here, through the same services as the API (judges.services, judges.runs)."""
    study, _role = page_study(request, slug, min_role=Membership.Role.LEAD)
    errors: list[dict[str, str]] = []
    form: dict[str, Any] = {"kind": "llm", "provider": "openai"}
    status = 200
    # The form a connection test or a refused run start came from: it is shown again, open,
    # with what was typed and the outcome beside it.
    test: dict[str, Any] | None = None
    run_form: dict[str, Any] | None = None
    if request.method == "POST" and request.POST.get("test"):
        test = _connection_test_form(request, study)
    elif request.method == "POST":
        action = request.POST.get("action", "")
        form = {key: request.POST.get(key, "") for key in request.POST
                if key != "csrfmiddlewaretoken"}
        if action == "run":
            run_form = {"judge_id": _int(request.POST.get("judge_id")), "errors": [],
                        "criteria": request.POST.getlist("criteria"), "values": form}
        try:
            return _judge_list_action(request, study, action)
        except AppError as exc:
            status = 404 if isinstance(exc, NotFound) else 400
            if run_form is not None and not isinstance(exc, NotFound):
                run_form["errors"] = error_rows(exc)
            else:
                errors = error_rows(exc)
    if test is not None:
        form = test["form"] if test["target"] == "create" else form
    judges = list(selectors.judges_list(study=study).prefetch_related("versions"))
    rubric = rubric_current(study)
    policy = JudgeNetworkPolicy.from_settings()
    rows = [_judge_row(j, test) for j in judges]
    context = {
        "study": study,
        "judges": rows,
        "criteria": list(rubric.criteria.all()) if rubric else [],
        "candidates": list(study.candidates.order_by("name")),
        "allowed_base_urls": policy.allowed_base_urls,
        "key_env_allowed": policy.key_env_allowed,
        "providers": PROVIDERS,
        "kinds": [(k, label) for k, label in Judge.Kind.choices if k != Judge.Kind.IMPORTED],
        "form": form,
        "errors": errors,
        "test": test,
        "run_form": run_form,
        "selection_kinds": (("all", "All outputs"), ("candidate", "One candidate's outputs"),
                            ("sample", "A random sample")),
    }
    return render(request, "judges/judge_list.html", context, status=status)



def _judge_list_action(request: HttpRequest, study: Any, action: str) -> HttpResponse:
    """A lead's form on the judges page: create a judge, add a version, or start a run; the
    redirect to what it made (AppError: the page shows the form again with the errors)."""
    if action == "create":
        judge, version = services.judge_create_with_config(
            study=study, name=request.POST.get("name", ""),
            kind=request.POST.get("kind", "llm"),
            description=request.POST.get("description", ""),
            config=_new_judge_config(request.POST), created_by=request.user,
        )
        messages.success(request, f"Judge \u201c{judge.name}\u201d created"
                         + (f" with version {version.version}." if version else "."))
        return HttpResponseRedirect(reverse("judge-list-page", args=[study.slug]))
    if action == "version":
        judge = selectors.judge_get(study=study,
                                    judge_id=_int(request.POST.get("judge_id")) or 0)
        # The structured edit form, or the whole config as JSON.
        config = (_edited_config(request.POST) if request.POST.get("mode") == "fields"
                  else _json_object(request.POST.get("config_json", ""), "config_json"))
        outcome = services.judge_version_get_or_create(judge=judge, config=config)
        number = outcome.version.version
        messages.success(request, (
            f"{judge.name}: version {number} created." if outcome.created
            else f"{judge.name}: that config is version {number} already."))
        return HttpResponseRedirect(reverse("judge-list-page", args=[study.slug]))
    if action == "run":
        judge = selectors.judge_get(study=study,
                                    judge_id=_int(request.POST.get("judge_id")) or 0)
        version = selectors.judge_version_get(
            judge=judge, version_id=_int(request.POST.get("version_id")) or 0)
        data = _run_form(request.POST)
        run = runs.judge_run_start(
            study=study, judge_version=version,
            criteria=selectors.criteria_for_refs(study=study, refs=data["criteria"]),
            selection=data["selection"], max_cost=data["max_cost"],
            max_calls=data["max_calls"], created_by=request.user,
        )
        return HttpResponseRedirect(
            reverse("judge-run-detail-page", args=[study.slug, run.pk]))
    raise ValidationFailed.at("action", "unknown action")


def _judge_row(j: Judge, test: dict[str, Any] | None) -> dict[str, Any]:
    """One judge of the page: its versions, newest first, and the edit form filled from the
    latest config (or, after a connection test of it, as it was typed)."""
    versions = sorted(j.versions.all(), key=lambda v: -v.version)
    latest = versions[0].config if versions else {}
    fields, rest = _split_config(latest if isinstance(latest, dict) else {})
    row = {
        "judge": j, "versions": versions,
        "config_text": json.dumps(latest, indent=2, ensure_ascii=False) if versions else "",
        "fields": fields,
        "rest_text": json.dumps(rest, indent=2, ensure_ascii=False) if rest else "",
    }
    if test is not None and test["judge_id"] == j.pk:
        # The edit form as it was typed, not the stored version.
        typed = test["form"]
        if test["target"] == "edit":
            row["fields"] = {n: typed.get(n, "") for n in _LLM_FIELDS}
            row["rest_text"] = typed.get("config_json", "")
        else:
            row["config_text"] = typed.get("config_json", "")
    return row


def _connection_test_form(request: HttpRequest, study: Any) -> dict[str, Any]:
    """Run the connection test of the config typed into the new-judge form or one of the
    edit forms (`judges.connection_test`); nothing is saved."""
    post = request.POST
    action = post.get("action", "")
    judge_id = _int(post.get("judge_id"))
    typed = {key: post.get(key, "") for key in post if key != "csrfmiddlewaretoken"}
    target = ("create" if action == "create" else
              "edit" if post.get("mode") == "fields" else "json")
    test: dict[str, Any] = {"target": target, "judge_id": judge_id, "form": typed,
                            "result": None, "errors": []}
    try:
        if action == "create":
            if post.get("kind", "llm") != Judge.Kind.LLM:
                raise ValidationFailed.at(
                    "kind", "Only an LLM judge calls a provider: a programmatic check has no "
                            "connection to test.")
            config = _new_judge_config(post)
        else:
            judge = selectors.judge_get(study=study, judge_id=judge_id or 0)
            if judge.kind != Judge.Kind.LLM:
                raise ValidationFailed.at("judge_id", "Only an LLM judge calls a provider.")
            config = (_edited_config(post) if post.get("mode") == "fields"
                      else _json_object(post.get("config_json", ""), "config_json"))
        test["result"] = judge_connection_test(study=study, config=config)
    except AppError as exc:
        test["errors"] = error_rows(exc)
    return test
