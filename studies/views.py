"""Server-rendered pages: the home page (the user's studies), a study's overview and the
account's API tokens.

The helpers every app's pages share are `page_study` (`studies/pages.py`) and `strict_csp`
(`reviewhub/pages.py`).
"""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from reviewhub.capabilities import Capability, capabilities, counts_as_lead, may_start_study
from reviewhub.errors import AppError, ValidationFailed
from reviewhub.pages import error_rows, strict_csp

from . import ingest, services
from .criteria import (
    criterion_allowed_values,
    criterion_has_pass_reading,
    criterion_is_pass,
    criterion_value_labels,
    interval_bounds,
    number_text,
)
from .models import ApiToken, Membership, Output, Study
from .pages import page_study
from .selectors import candidate_outputs_page
from .spec import study_file_validate
from .studyfile import MAX_STUDY_FILE_BYTES, study_file_parse
from .studyform import StudyForm, field_errors, form_doc, form_layout, form_read


def _optional_url(name: str, slug: str) -> str | None:
    # Pages owned by other areas are linked only once their URL name exists.
    try:
        return reverse(name, kwargs={"slug": slug})
    except NoReverseMatch:
        return None


@require_GET
@login_required
@strict_csp
def home(request: HttpRequest) -> HttpResponse:
    """The studies the user belongs to, with their role in each."""
    user = request.user
    if not isinstance(user, AbstractBaseUser):  # login_required makes this unreachable
        raise Http404("Sign in first.")
    rows: list[dict[str, Any]]
    if counts_as_lead(is_superuser=bool(getattr(user, "is_superuser", False))):
        rows = [
            {"study": s, "role": Membership.Role.LEAD, "role_label": "Lead (admin)"}
            for s in Study.objects.order_by("name")
        ]
    else:
        memberships = (
            Membership.objects.filter(user__pk=user.pk).select_related("study")
            .order_by("study__name")
        )
        rows = [
            {"study": m.study, "role": m.role, "role_label": m.get_role_display()}
            for m in memberships
        ]
    may_start = may_start_study([str(r["role"]) for r in rows],
                                is_superuser=bool(getattr(user, "is_superuser", False)))
    return render(request, "studies/home.html", {"rows": rows, "may_start_study": may_start})


def _criterion_scale(criterion: Any) -> dict[str, Any]:
    """A criterion's scale points with whether each counts as a pass, and the rule in words,
    for the rubric overview (what the grading page will ask a severity for)."""
    labels = criterion_value_labels(criterion)
    points = []
    for value in criterion_allowed_values(criterion):
        label = labels.get(value, value)
        # Ordinal points are numbers a grader presses: show both; otherwise the label.
        shown = f"{value} · {label}" if criterion.scale == "ordinal" and label != value else label
        points.append({"value": value, "shown": shown,
                       "passes": criterion_is_pass(criterion, value)})
    if criterion.scale == "interval":
        lo, hi = interval_bounds(criterion)
        rule = f"A score from {number_text(lo)} to {number_text(hi)}"
        if criterion.pass_threshold is not None:
            rule += (f"; below {number_text(criterion.pass_threshold)} counts as a failure "
                     "(asks how bad it would be).")
        else:
            rule += "; no pass or fail reading."
    elif criterion.scale == "pairwise":
        rule = "Pick the better of two outputs, or a tie; no pass or fail."
    elif not criterion_has_pass_reading(criterion):
        rule = "No pass or fail reading: every label is recorded as it is."
    else:
        failing = [str(p["shown"]) for p in points if p["passes"] is False]
        rule = ("Counts as a failure (asks how bad it would be): " + ", ".join(failing) + "."
                if failing else "Every point counts as a pass.")
    return {"criterion": criterion, "points": points, "rule": rule}


@require_GET
@login_required
@strict_csp
def study_overview(request: HttpRequest, slug: str) -> HttpResponse:
    """A study's front page: annotators get "Start grading", leads get counts and links."""
    study, role = page_study(request, slug)
    caps = capabilities(role)  # `role` is the acting role: a superuser's is "lead"
    context: dict[str, Any] = {
        "study": study,
        "study_role": role,
        "can_grade": Capability.GRADE in caps,
        "can_lead": Capability.LEAD in caps,
        "grade_url": _optional_url("annotations-grade", slug),
        "rubric": study.rubric_versions.order_by("-version").prefetch_related("criteria").first(),
    }
    if context["rubric"] is not None:
        context["criteria"] = [_criterion_scale(c) for c in context["rubric"].criteria.all()]
    if context["can_lead"]:
        counts = Study.objects.filter(pk=study.pk).aggregate(
            n_items=Count("items", distinct=True),
            n_candidates=Count("candidates", distinct=True),
        )
        context.update(
            n_items=counts["n_items"],
            n_candidates=counts["n_candidates"],
            # Counted apart: a third join would multiply the rows the other two count.
            n_outputs=study.outputs.count(),
            n_errored=study.outputs.exclude(error="").count(),
            n_members=study.memberships.count(),
            lead_links=[
                (label, url)
                for label, url in (
                    ("Analysis plan", _optional_url("study-plan", slug)),
                    ("Queue status", _optional_url("annotations-lead-queue", slug)),
                    ("Disagreements", _optional_url("annotations-lead-disagreements", slug)),
                    ("Members", _optional_url("annotations-lead-members", slug)),
                )
                if url
            ],
        )
    return render(request, "studies/overview.html", context)


# --- API tokens -------------------------------------------------------------------------------

def _token_studies(user: Any) -> list[Study]:
    """The studies a token may be scoped to: those the user belongs to (all, for a superuser)."""
    if counts_as_lead(is_superuser=bool(getattr(user, "is_superuser", False))):
        return list(Study.objects.order_by("name"))
    return list(Study.objects.filter(memberships__user__pk=user.pk).order_by("name").distinct())


def _account(request: HttpRequest) -> Any:
    user = request.user
    if not isinstance(user, AbstractBaseUser) or user.pk is None:  # login_required: unreachable
        raise Http404("Sign in first.")
    return user


def _tokens_page(request: HttpRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    user = _account(request)
    tokens = (
        ApiToken.objects.filter(user__pk=user.pk, revoked_at__isnull=True)
        .select_related("study").order_by("-created_at", "-id")
    )
    context: dict[str, Any] = {
        "tokens": tokens,
        "studies": _token_studies(user),
        "form": {"name": "", "study": "", "can_write": False},
        "errors": [],
        **extra,
    }
    response = render(request, "studies/tokens.html", context, status=status)
    # The page can hold a secret shown once: no cache may keep a copy.
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def tokens(request: HttpRequest) -> HttpResponse:
    """The account's live API tokens; POST creates one and shows its secret, once.

    The same service as `POST /api/tokens` (studies.services.api_token_create); a token scoped
    to a study acts only inside it, a read-only one cannot write.
    """
    if request.method == "GET":
        return _tokens_page(request)
    name = request.POST.get("name", "")
    slug = request.POST.get("study", "")
    can_write = request.POST.get("can_write") == "on"
    form = {"name": name, "study": slug, "can_write": can_write}
    study = None
    if slug:
        study = next((s for s in _token_studies(_account(request)) if s.slug == slug), None)
        if study is None:
            return _tokens_page(request, status=400, form=form, errors=[
                {"path": "study", "message": "not one of your studies"}])
    try:
        token, secret = services.api_token_create(
            user=_account(request), name=name, study=study, can_write=can_write,
        )
    except ValidationFailed as exc:
        return _tokens_page(request, status=400, form=form, errors=error_rows(exc))
    return _tokens_page(request, status=201, new_token=token, new_secret=secret)


@require_POST
@login_required
@strict_csp
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the account's tokens (another account's token is a 404)."""
    token = ApiToken.objects.filter(
        pk=token_id, user__pk=_account(request).pk, revoked_at__isnull=True
    ).first()
    if token is None:
        raise Http404("No such token.")
    services.api_token_revoke(token=token)
    messages.success(request, f"Token \u201c{token.name}\u201d ({token.prefix}\u2026) revoked.")
    return HttpResponseRedirect(reverse("account-tokens"))


# --- New study from a study file ----------------------------------------------------------------

def _study_file_text(request: HttpRequest) -> tuple[str, str]:
    """(text, file name) from the upload or, after a preview, the text sent back."""
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size is not None and upload.size > MAX_STUDY_FILE_BYTES:
            raise ValidationFailed("The file is larger than 1 MiB.", details={
                "errors": [{"path": "file", "message": "larger than 1 MiB"}]})
        try:
            return upload.read().decode("utf-8"), str(upload.name or "")
        except UnicodeDecodeError:
            raise ValidationFailed("The file is not UTF-8 text.", details={
                "errors": [{"path": "file", "message": "not UTF-8 text"}]}) from None
    text = request.POST.get("text", "")
    if not text.strip():
        raise ValidationFailed("Choose a study file (YAML or JSON).", details={
            "errors": [{"path": "file", "message": "no file chosen"}]})
    return text, request.POST.get("file_name", "")


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def study_new(request: HttpRequest) -> HttpResponse:
    """Create a study from a study file (docs/study-spec.md): upload, preview what it holds,
    then create it with the signed-in user as owner and lead, through `study_import` (the
    service of the `import_study` command). An existing slug is refused, never updated."""
    user = _account(request)
    context: dict[str, Any] = {"errors": [], "preview": None, "text": "", "file_name": "",
                               "form": form_layout(StudyForm.empty(), {}), "from_form": False}
    status = 200
    if request.method == "POST" and str(request.POST.get("action", "")).startswith("form"):
        return _study_new_form(request, context)
    if request.method == "POST":
        try:
            text, name = _study_file_text(request)
            context.update(text=text, file_name=name)
            doc = study_file_parse(text, name=name)
            if request.POST.get("action") == "create":
                report = services.study_import(doc=doc, owner_username=user.get_username(),
                                               new_only=True)
                messages.success(request, f"Study \u201c{report.study.name}\u201d created: "
                                 + "; ".join(f"{section} {outcome}" for section, outcome, _
                                             in report.lines) + ".")
                return HttpResponseRedirect(reverse("study-overview", args=[report.study.slug]))
            spec_file = study_file_validate(doc)
            taken = Study.objects.filter(slug=spec_file.study.get("slug")).exists()
            context["preview"] = {"file": spec_file, "slug_taken": taken}
        except AppError as exc:
            status = 409 if exc.status_code == 409 else 400
            context["errors"] = error_rows(exc)
            context["error_message"] = exc.message
    return render(request, "studies/new.html", context, status=status)


def _study_new_form(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """The form path of "New study": the form becomes a study file (`studies.studyform`),
    checked by the same validator as an upload, and previewed the same way; its Create button
    sends that file's text through the upload path's `study_import`."""
    form = form_read(request.POST)
    context.update(form=form_layout(form, {}), from_form=True)
    if request.POST.get("action") != "form-preview":  # a row was added: show the form again
        return render(request, "studies/new.html", context)
    doc, problems = form_doc(form)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    try:
        problems.raise_if_any("The form")
        spec_file = study_file_validate(study_file_parse(text, name="study.yaml"))
    except AppError as exc:
        rows = error_rows(exc)
        context.update(errors=rows, error_message=exc.message,
                       form=form_layout(form, field_errors(rows, form, doc)))
        return render(request, "studies/new.html", context, status=400)
    taken = Study.objects.filter(slug=spec_file.study.get("slug")).exists()
    context.update(text=text, file_name="study.yaml",
                   preview={"file": spec_file, "slug_taken": taken})
    return render(request, "studies/new.html", context)


# --- Items, candidates and outputs -------------------------------------------------------------

_INGEST_KINDS = (("items", "Items (inputs)"), ("candidates", "Candidates (models)"),
                 ("outputs", "Outputs"))
# Outputs shown per candidate on the page; the API lists every one.
OUTPUTS_SHOWN = 20


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def study_data(request: HttpRequest, slug: str) -> HttpResponse:
    """A study's items, candidates and outputs for its lead, with uploads.

    The upload form's script sends the file as the body of the REST bulk endpoint (the same
    view and service as any client: `studies.ingest.ingest_run`), which shows upload progress
    and takes files up to REVIEWHUB_MAX_UPLOAD_BYTES. Without the script the form posts here
    and the same service runs on the uploaded file, within the request body limit.
    """
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    context: dict[str, Any] = {"study": study, "study_role": role, "kinds": _INGEST_KINDS,
                               "errors": [], "result": None}
    status = 200
    if request.method == "POST":
        kind = request.POST.get("kind", "")
        upload = request.FILES.get("file")
        context["kind"] = kind
        try:
            if kind not in dict(_INGEST_KINDS):
                raise ValidationFailed("Choose what the file holds.", details={
                    "errors": [{"path": "kind", "message": "items, candidates or outputs"}]})
            if upload is None:
                raise ValidationFailed("Choose a file.", details={
                    "errors": [{"path": "file", "message": "no file chosen"}]})
            fmt = ingest.format_for_path(str(upload.name or ""))
            if fmt is None:
                raise ValidationFailed("The file name must end in .json, .jsonl or .csv.",
                                       details={"errors": [{"path": "file",
                                                            "message": "unknown file type"}]})
            stream = upload.file
            if stream is None:  # Django always gives an uploaded file its file object
                raise ValidationFailed("Choose a file.", details={
                    "errors": [{"path": "file", "message": "no file chosen"}]})
            result = ingest.ingest_run(study=study, kind=kind,  # type: ignore[arg-type]
                                       stream=stream, fmt=fmt)
            context["result"] = {"kind": kind, **result.as_dict()}
        except AppError as exc:
            status = 400
            context["errors"] = error_rows(exc)
            context["error_message"] = exc.message
    candidates = list(study.candidates.order_by("name").annotate(n_outputs=Count("outputs")))
    # Each candidate's first outputs in one query (a window per candidate), not one per
    # candidate.
    shown: dict[int, list[Output]] = {c.pk: [] for c in candidates}
    first = (
        Output.objects.filter(study=study).select_related("item")
        .annotate(rank=Window(RowNumber(), partition_by=[F("candidate_id")],
                              order_by=F("id").asc()))
        .filter(rank__lte=OUTPUTS_SHOWN).order_by("candidate_id", "id")
    )
    for output in first:
        shown[output.candidate_id].append(output)
    context.update(
        n_items=study.items.count(),
        candidates=[{"candidate": c, "outputs": shown[c.pk]} for c in candidates],
        outputs_shown=OUTPUTS_SHOWN,
        bulk_urls={kind: reverse(f"api-{kind}-bulk", args=[study.slug])
                   for kind, _ in _INGEST_KINDS},
    )
    return render(request, "studies/data.html", context, status=status)


# Outputs per page on a candidate's outputs page.
OUTPUTS_PAGE_SIZE = 50


@require_GET
@login_required
@strict_csp
def candidate_outputs(request: HttpRequest, slug: str, candidate_id: int) -> HttpResponse:
    """Every output of one candidate, for its study's lead: pages of OUTPUTS_PAGE_SIZE in id
    order (`?after=<last id of the previous page>`, so a deep page costs what the first does),
    and `?item=<prefix>` keeps the outputs of items whose external id starts with it."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    candidate = study.candidates.filter(pk=candidate_id).annotate(
        n_outputs=Count("outputs")).first()
    if candidate is None:
        raise Http404("No such candidate in this study.")
    item_prefix = request.GET.get("item", "").strip()[:200]
    raw_after = request.GET.get("after", "")
    if raw_after and not (raw_after.isascii() and raw_after.isdigit()):
        return render(request, "studies/outputs.html", {
            "study": study, "study_role": role, "candidate": candidate, "outputs": [],
            "item_prefix": item_prefix, "bad_after": raw_after[:40]}, status=400)
    after = int(raw_after or 0)
    outputs, more = candidate_outputs_page(candidate=candidate, item_prefix=item_prefix,
                                           after_id=after, size=OUTPUTS_PAGE_SIZE)
    return render(request, "studies/outputs.html", {
        "study": study, "study_role": role, "candidate": candidate, "outputs": outputs,
        "item_prefix": item_prefix, "after": after,
        "next_after": outputs[-1].pk if more and outputs else None,
        "page_size": OUTPUTS_PAGE_SIZE,
    })
