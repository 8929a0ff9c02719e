"""Pages of human annotation: the grading page (annotators) and the lead pages.

Thin, like the API views: resolve the study through `page_study` (404 for anyone without the
role), call a service or selector, render. The grading page is built ONLY from
`selectors.grading_context`, whose allow-list keeps the candidate, judge verdicts and other
annotators' labels out of the page; the JSON the page fetches (submit, heartbeat) carries no
subject data at all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from reviewhub.errors import AppError, ValidationFailed, error_body
from reviewhub.pages import error_rows, form_number, page_study, strict_csp
from studies.criteria import number_text
from studies.models import Comparison, Criterion, Membership, Output, Study

from . import selectors, services
from .constants import FLAG_KEYS, FLAG_LABELS, SEVERITY_LABELS, SEVERITY_QUESTION, SEVERITY_SCALE
from .models import Annotation, Assignment

# Inputs longer than this start collapsed. A context longer than CONTEXT_OPEN_CHARS starts
# collapsed too (about ten lines of the subject column: a short one costs nothing to show, a
# long one pushes the output out of sight), unless a criterion being graded needs it.
INPUT_OPEN_CHARS = 6000
CONTEXT_OPEN_CHARS = 600
DISAGREEMENT_PAGE = 50
# The disagreements page's "show" filter: value -> label ("" shows every pair).
DISAGREEMENT_STATUSES = {"": "All pairs", "unresolved": "Unresolved only",
                         "adjudicated": "Adjudicated only"}
EXCERPT_CHARS = 90

# --- view models ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    value: str
    label: str
    fails: bool
    shortcut: str  # the digit that picks it ("0" is 10)
    key_hint: str  # what the page shows beside it
    letter: str = ""  # pairwise: a / b / t


def _choices(c: selectors.CriterionView) -> list[Choice]:
    failing = set(c.failing_values)
    if c.scale == Criterion.Scale.BINARY:
        return [Choice("pass", "Pass", False, "1", "1"), Choice("fail", "Fail", True, "2", "2")]
    if c.scale == Criterion.Scale.PAIRWISE:
        # Values are AS PRESENTED: "A" is the left text; the service maps it back.
        return [
            Choice("A", "A (left) is better", False, "1", "A", "a"),
            Choice("B", "B (right) is better", False, "2", "B", "b"),
            Choice("tie", "Tie", False, "3", "T", "t"),
        ]
    out = []
    for position, p in enumerate(c.points, start=1):
        value = str(p.get("value"))
        label = str(p.get("label") or "")
        if c.scale == Criterion.Scale.ORDINAL:
            # Ordinal digits are the points themselves, so "4" always means 4.
            digit = value if value.isdigit() and 1 <= int(value) <= 10 else ""
            shown = f"{value} · {label}" if label else value
        else:
            digit = str(position) if position <= 10 else ""
            shown = label or value
        shortcut = "0" if digit == "10" else digit
        out.append(Choice(value, shown, value in failing, shortcut, digit if digit else ""))
    return out


def _criterion_vm(
    c: selectors.CriterionView,
    *,
    selected: str | None = None,
    severity: int | None = None,
    severity_note: str = "",
) -> dict[str, Any]:
    if c.scale == Criterion.Scale.INTERVAL:
        return _interval_vm(c, selected=selected, severity=severity, severity_note=severity_note)
    choices = _choices(c)
    has_pass_reading = bool(c.failing_values) or (
        c.scale == Criterion.Scale.ORDINAL and c.pass_threshold is not None
    )
    return {
        "key": c.key,
        "name": c.name,
        "guidance": c.guidance,
        "scale": c.scale,
        "choices": choices,
        "vertical": c.scale == Criterion.Scale.CATEGORICAL
        or (c.scale == Criterion.Scale.ORDINAL and any(len(ch.label) > 14 for ch in choices)),
        "has_pass_reading": has_pass_reading,
        # Shown under the choices: which of them fail (and so ask for a severity), so that
        # "3 · Acceptable" does not ask for one without warning.
        "fail_labels": [ch.label for ch in choices if ch.fails],
        "asks_severity": bool(c.failing_values),
        "selected": selected,
        "selected_fails": selected is not None and selected in c.failing_values,
        "selected_severity": severity,
        "selected_severity_note": severity_note,
    }


def _interval_vm(
    c: selectors.CriterionView, *, selected: str | None, severity: int | None,
    severity_note: str,
) -> dict[str, Any]:
    """An interval criterion: one number input (min, max, step any); a score below the
    pass_threshold, when there is one, is a failure and asks the severity question."""
    threshold = c.pass_threshold
    fails = False
    if selected is not None and threshold is not None:
        try:
            fails = float(selected) < float(threshold)
        except ValueError:
            fails = False
    return {
        "key": c.key,
        "name": c.name,
        "guidance": c.guidance,
        "scale": c.scale,
        "choices": [],
        "number": {
            "min": number_text(c.min if c.min is not None else 0.0),
            "max": number_text(c.max if c.max is not None else 0.0),
            "threshold": number_text(threshold) if threshold is not None else "",
        },
        "vertical": False,
        "has_pass_reading": threshold is not None,
        "fail_labels": [f"below {number_text(threshold)}"] if threshold is not None else [],
        "asks_severity": threshold is not None,
        "selected": selected,
        "selected_fails": fails,
        "selected_severity": severity,
        "selected_severity_note": severity_note,
    }


def _subject_vm(
    ctx: selectors.GradingContext, criteria: list[selectors.CriterionView]
) -> dict[str, Any]:
    """The subject column; `criteria` are those graded on this page (the context starts open
    when any of them needs it, otherwise when it is short)."""
    needed_by = [c.name for c in criteria if c.needs_context]
    context_is_long = len(ctx.item_context) > CONTEXT_OPEN_CHARS
    return {
        "input": ctx.item_input,
        "input_is_long": len(ctx.item_input) > INPUT_OPEN_CHARS,
        "context": ctx.item_context,
        "context_is_long": context_is_long,
        "context_open": bool(needed_by) or not context_is_long,
        "context_needed_by": needed_by,
        "show_reference": ctx.item_reference is not None,
        "reference": ctx.item_reference or "",
        "is_pairwise": ctx.kind == "pairwise",
        "output_text": ctx.output_text or "",
        "output_error": ctx.output_failed,
        "left_text": ctx.left_text or "",
        "right_text": ctx.right_text or "",
    }


def _severity_context() -> dict[str, Any]:
    return {
        "severity_question": SEVERITY_QUESTION,
        "severity_scale": [p._asdict() for p in SEVERITY_SCALE],
    }


def _presented(value: str, scale: str, swapped: bool) -> str:
    """A stored (canonical) pairwise value as the annotator saw it."""
    if scale == Criterion.Scale.PAIRWISE and swapped:
        return {"A": "B", "B": "A"}.get(value, value)
    return value


def _value_label(criterion: Criterion, presented: str) -> str:
    if criterion.scale == Criterion.Scale.BINARY:
        return presented.capitalize()
    if criterion.scale == Criterion.Scale.PAIRWISE:
        return {"A": "A (left)", "B": "B (right)", "tie": "Tie"}.get(presented, presented)
    for p in criterion.points:
        if isinstance(p, dict) and str(p.get("value")) == presented:
            label = str(p.get("label") or "")
            if criterion.scale == Criterion.Scale.ORDINAL:
                return f"{presented} · {label}" if label else presented
            return label or presented
    return presented


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def _recent(study: Study, user: Any) -> list[dict[str, Any]]:
    """Every annotation of the annotator still inside the revision window, newest first, with
    its item's id (the window bounds the list: what can be revised is what is listed)."""
    rows = list(selectors.my_annotations(study=study, annotator=user, revisable_only=True))
    # Only text columns are read for the excerpts: the candidate is never loaded.
    output_texts: dict[int, tuple[str, str]] = {
        pk: (text, item)
        for pk, text, item in Output.objects.filter(
            pk__in={a.output_id for a in rows if a.output_id}
        ).values_list("id", "text", "item__external_id")
    }
    comparison_inputs: dict[int, tuple[str, str]] = {
        pk: (text, item)
        for pk, text, item in Comparison.objects.filter(
            pk__in={a.comparison_id for a in rows if a.comparison_id}
        ).values_list("id", "item__input", "item__external_id")
    }
    out = []
    for a in rows:
        swapped = bool(a.assignment and a.assignment.swapped)
        presented = _presented(a.value, a.criterion.scale, swapped)
        if a.output_id:
            text, item = output_texts.get(a.output_id, ("", ""))
            excerpt = _excerpt(text)
        else:
            text, item = comparison_inputs.get(a.comparison_id or 0, ("", ""))
            excerpt = "Comparison: " + _excerpt(text)
        out.append(
            {
                "id": a.pk,
                "criterion_name": a.criterion.name,
                "value_label": _value_label(a.criterion, presented),
                "fails": services.is_failure(a.criterion, a.value),
                "has_pass_reading": a.criterion.scale != Criterion.Scale.PAIRWISE,
                "severity": a.severity,
                "severity_label": SEVERITY_LABELS.get(a.severity or 0, ""),
                "revised": a.revised_at is not None,
                "created_at": a.created_at,
                "excerpt": excerpt,
                "item": item,
                "revise_url": reverse(
                    "annotations-revise", kwargs={"slug": study.slug, "annotation_id": a.pk}
                ),
            }
        )
    return out


# --- helpers ----------------------------------------------------------------------------------


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _json_error(exc: AppError) -> JsonResponse:
    return JsonResponse(error_body(exc.code, exc.message, exc.details), status=exc.status_code)


def _no_store(response: HttpResponse) -> HttpResponse:
    # Pages with a lease or a one-time password must not come back from the cache (Back).
    add_never_cache_headers(response)
    return response


def _own_assignment(request: HttpRequest, study: Study, assignment_id: int) -> Assignment:
    assignment = selectors.assignment_for_annotator(
        study=study, annotator=_actor(request), assignment_id=assignment_id
    )
    if assignment is None:
        raise Http404("Assignment not found.")
    return assignment


def _int_field(data: Any, name: str) -> int | None:
    raw = (data.get(name) or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ValidationFailed.at(name, f"{name} must be an integer.") from exc


def _required_int(data: Any, name: str) -> int:
    value = _int_field(data, name)
    if value is None:
        raise ValidationFailed.at(name, f"{name} is required.")
    return value


def _actor(request: HttpRequest) -> User:
    """The signed-in user (every page view here is behind login_required)."""
    user = request.user
    if not isinstance(user, User):
        raise Http404("Sign in first.")
    return user


def labels_from_form(data: Any) -> dict[str, services.LabelInput]:
    """The grading form's fields (label-<key>, severity-<key>, severity_note-<key>) as the
    service's labels mapping. Validation of the values themselves is the service's job."""
    labels: dict[str, services.LabelInput] = {}
    for name in data:
        if not name.startswith("label-"):
            continue
        key = name[len("label-"):]
        labels[key] = {
            "value": data.get(name, ""),
            "severity": _int_field(data, f"severity-{key}"),
            "severity_note": data.get(f"severity_note-{key}", ""),
        }
    return labels


def _grade_url(study: Study) -> str:
    return reverse("annotations-grade", kwargs={"slug": study.slug})


# --- grading ----------------------------------------------------------------------------------


@require_GET
@login_required
@strict_csp
def grade(request: HttpRequest, slug: str) -> HttpResponse:
    """The next subject for this annotator (a reload returns the same lease)."""
    study, role = page_study(request, slug, min_role=Membership.Role.ANNOTATOR)
    assignment = services.assignment_next(study=study, annotator=_actor(request))
    g: dict[str, Any] | None = None
    if assignment is not None:
        ctx = selectors.grading_context(assignment=assignment)
        kwargs = {"slug": study.slug, "assignment_id": assignment.pk}
        g = {
            "assignment_id": assignment.pk,
            "subject": _subject_vm(ctx, ctx.criteria),
            "criteria": [_criterion_vm(c) for c in ctx.criteria],
            "flags": [{"key": k, "label": FLAG_LABELS[k]} for k in FLAG_KEYS],
            "submit_url": reverse("annotations-grade-submit", kwargs=kwargs),
            "skip_url": reverse("annotations-grade-skip", kwargs=kwargs),
            "heartbeat_url": reverse("annotations-grade-heartbeat", kwargs=kwargs),
            # Used only without JavaScript; the page script keeps its own id per assignment.
            "fallback_submission_id": str(uuid.uuid4()),
        }
    context = {
        "study": study,
        "study_role": role,
        "g": g,
        "progress": selectors.annotator_progress(study=study, annotator=_actor(request)),
        "recent": _recent(study, _actor(request)),
        "revision_window_minutes": settings.REVIEWHUB_REVISION_WINDOW_MINUTES,
        **_severity_context(),
    }
    return _no_store(render(request, "annotations/grade.html", context))


@require_POST
@login_required
def grade_submit(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Submit the grading form (fetch from the page, or a plain POST without JavaScript)."""
    study, _role = page_study(request, slug, min_role=Membership.Role.ANNOTATOR)
    assignment = _own_assignment(request, study, assignment_id)
    data = request.POST
    try:
        raw_id = (data.get("submission_id") or "").strip()
        try:
            submission_id = uuid.UUID(raw_id)
        except ValueError as exc:
            raise ValidationFailed.at("submission_id", "submission_id must be a UUID.") from exc
        created = services.annotation_submit(
            assignment=assignment,
            annotator=_actor(request),
            submission_id=submission_id,
            labels=labels_from_form(data),
            rationale=data.get("rationale", ""),
            flags={k: f"flag-{k}" in data for k in FLAG_KEYS},
            time_on_task_ms=_int_field(data, "time_on_task_ms"),
            source=Annotation.Source.UI,
        )
    except AppError as exc:
        if _wants_json(request):
            return _json_error(exc)
        messages.error(request, f"Not saved: {exc.message}")
        return HttpResponseRedirect(_grade_url(study))
    messages.success(request, "Saved. Here is the next one.")
    next_url = _grade_url(study)
    if _wants_json(request):
        return JsonResponse({"ok": True, "saved": len(created), "next_url": next_url})
    return HttpResponseRedirect(next_url)


@require_POST
@login_required
def grade_skip(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    study, _role = page_study(request, slug, min_role=Membership.Role.ANNOTATOR)
    assignment = _own_assignment(request, study, assignment_id)
    try:
        services.assignment_skip(assignment=assignment, annotator=_actor(request))
    except AppError as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, "Skipped. You will not be shown that output again.")
    return HttpResponseRedirect(_grade_url(study))


@require_POST
@login_required
def grade_heartbeat(request: HttpRequest, slug: str, assignment_id: int) -> JsonResponse:
    """Extend the lease while the page is open (called every minute by the page)."""
    study, _role = page_study(request, slug, min_role=Membership.Role.ANNOTATOR)
    assignment = _own_assignment(request, study, assignment_id)
    try:
        assignment = services.assignment_heartbeat(assignment=assignment, annotator=_actor(request))
    except AppError as exc:
        return _json_error(exc)
    expires = assignment.lease_expires_at
    return JsonResponse({"lease_expires_at": expires.isoformat() if expires else None})


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def annotation_revise_page(request: HttpRequest, slug: str, annotation_id: int) -> HttpResponse:
    """Revise one of one's own annotations inside the revision window."""
    study, role = page_study(request, slug, min_role=Membership.Role.ANNOTATOR)
    annotation = (
        selectors.my_annotations(study=study, annotator=_actor(request))
        .filter(pk=annotation_id)
        .first()
    )
    if annotation is None or annotation.assignment is None:
        raise Http404("Annotation not found.")
    ctx = selectors.grading_context(assignment=annotation.assignment)
    view = next((c for c in ctx.criteria if c.key == annotation.criterion.key), None)
    if view is None:
        raise Http404("Annotation not found.")
    swapped = annotation.assignment.swapped
    error = ""
    selected = _presented(annotation.value, annotation.criterion.scale, swapped)
    severity, note = annotation.severity, annotation.severity_note
    rationale = annotation.rationale
    flags = dict(annotation.flags or {})
    deadline = services.revision_deadline(annotation)
    if request.method == "POST":
        data = request.POST
        field = f"label-{annotation.criterion.key}"
        selected = data.get(field, "")
        note = data.get(f"severity_note-{annotation.criterion.key}", "")
        rationale = data.get("rationale", "")
        flags = {k: f"flag-{k}" in data for k in FLAG_KEYS}
        try:
            severity = _int_field(data, f"severity-{annotation.criterion.key}")
            services.annotation_revise(
                annotation_id=annotation.pk,
                annotator=_actor(request),
                value=selected,
                severity=severity,
                severity_note=note,
                rationale=rationale,
                flags=flags,
            )
        except AppError as exc:
            error = exc.message
        else:
            messages.success(request, f"Revised “{annotation.criterion.name}”.")
            return HttpResponseRedirect(_grade_url(study))
    context = {
        "study": study,
        "study_role": role,
        "annotation": annotation,
        "subject": _subject_vm(ctx, [view]),
        "c": _criterion_vm(view, selected=selected, severity=severity, severity_note=note),
        "flags": [
            {"key": k, "label": FLAG_LABELS[k], "checked": bool(flags.get(k))} for k in FLAG_KEYS
        ],
        "rationale": rationale,
        "deadline": deadline,
        "window_open": timezone.now() <= deadline,
        "error": error,
        "revision_count": annotation.revisions.count(),
        **_severity_context(),
    }
    status = 400 if error else 200
    return _no_store(render(request, "annotations/revise.html", context, status=status))


# --- lead pages -------------------------------------------------------------------------------


@require_GET
@login_required
@strict_csp
def lead_queue(request: HttpRequest, slug: str) -> HttpResponse:
    """Queue status per stratum and per-annotator throughput, time on task, gold accuracy."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    plan = services.active_plan(study)
    rows = selectors.queue_status(study=study, plan=plan)
    totals = {
        "entries": sum(r.entries for r in rows),
        "complete": sum(r.complete for r in rows),
        "needed": sum(r.needed for r in rows),
        "leased": sum(r.leased for r in rows),
        "done": sum(r.done for r in rows),
        "gold_entries": sum(r.gold_entries for r in rows),
    }
    context = {
        "study": study,
        "study_role": role,
        "plan": plan,
        "rows": rows,
        "totals": totals,
        "stats": selectors.annotator_stats(study=study),
    }
    return render(request, "annotations/lead_queue.html", context)


def _adjudication_choices(criterion: Criterion) -> list[tuple[str, str]]:
    if criterion.scale == Criterion.Scale.BINARY:
        return [("pass", "Pass"), ("fail", "Fail")]
    if criterion.scale == Criterion.Scale.PAIRWISE:
        return [("A", "A (output A)"), ("B", "B (output B)"), ("tie", "Tie")]
    return [(str(p.get("value")), _value_label(criterion, str(p.get("value"))))
            for p in criterion.points if isinstance(p, dict)]


def _adjudicate(request: HttpRequest, study: Study) -> None:
    data = request.POST
    criterion_id = _required_int(data, "criterion_id")
    subject_id = _required_int(data, "subject_id")
    kind = data.get("subject", "")
    criterion = Criterion.objects.filter(pk=criterion_id, rubric__study=study).first()
    if criterion is None:
        raise ValidationFailed.at("criterion_id", "criterion_id is not a criterion of this study.")
    output = comparison = None
    if kind == "output":
        output = Output.objects.filter(pk=subject_id, study=study).first()
        if output is None:
            raise ValidationFailed.at("subject_id", "subject_id is not an output of this study.")
    elif kind == "comparison":
        comparison = Comparison.objects.filter(pk=subject_id, study=study).first()
        if comparison is None:
            raise ValidationFailed.at("subject_id", "subject_id is not a comparison of this study.")
    else:
        raise ValidationFailed.at("subject", "subject must be 'output' or 'comparison'.")
    services.adjudication_record(
        study=study, criterion=criterion, output=output, comparison=comparison,
        value=data.get("value", ""), note=data.get("note", ""), user=_actor(request),
    )


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def lead_disagreements(request: HttpRequest, slug: str) -> HttpResponse:
    """Subjects where annotators disagree (or judges differ from them), with adjudication."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    if request.method == "POST":
        try:
            _adjudicate(request, study)
        except AppError as exc:
            messages.error(request, f"Not recorded: {exc.message}")
        else:
            messages.success(request, "Adjudication recorded.")
        return HttpResponseRedirect(request.get_full_path())
    criteria = list(
        Criterion.objects.filter(rubric__study=study).order_by("rubric__version", "position", "id")
    )
    chosen_key = request.GET.get("criterion", "")
    chosen = next((c for c in reversed(criteria) if c.key == chosen_key), None)
    only_humans = request.GET.get("judges") == "0"
    status = request.GET.get("status", "")
    if status not in DISAGREEMENT_STATUSES:
        status = ""
    found = selectors.disagreements(study=study, criterion=chosen, include_judges=not only_humans)
    n_adjudicated = sum(1 for r in found if r.adjudicated_value is not None)
    if status == "unresolved":
        found = [r for r in found if r.adjudicated_value is None]
    elif status == "adjudicated":
        found = [r for r in found if r.adjudicated_value is not None]
    rows = sorted(found, key=selectors.disagreement_need)  # stable: the selector's order within
    page = Paginator(rows, DISAGREEMENT_PAGE).get_page(request.GET.get("page"))
    shown = list(page.object_list)
    by_id = {c.pk: c for c in criteria}
    out_ids = [r.subject_id for r in shown if r.subject == "output"]
    outputs: dict[int, dict[str, Any]] = {
        o["id"]: dict(o)
        for o in Output.objects.filter(pk__in=out_ids).values("id", "text", "item__input")
    }
    cmp_ids = [r.subject_id for r in shown if r.subject == "comparison"]
    comparisons: dict[int, dict[str, Any]] = {
        c["id"]: dict(c)
        for c in Comparison.objects.filter(pk__in=cmp_ids).values(
            "id", "item__input", "output_a__text", "output_b__text"
        )
    }
    items = []
    for r in shown:
        criterion = by_id.get(r.criterion_id)
        if criterion is None:
            continue
        labels = dict(_adjudication_choices(criterion))
        texts: dict[str, Any] = (
            outputs.get(r.subject_id, {}) if r.subject == "output"
            else comparisons.get(r.subject_id, {})
        )
        items.append({
            "row": r,
            "criterion": criterion,
            "human": sorted(((labels.get(v, v), n) for v, n in r.human_values.items()),
                            key=lambda t: -t[1]),
            "judge": sorted(((labels.get(v, v), n) for v, n in r.judge_values.items()),
                            key=lambda t: -t[1]),
            "majority_label": labels.get(r.human_majority or "", r.human_majority or ""),
            "adjudicated_label": labels.get(r.adjudicated_value or "", r.adjudicated_value),
            "choices": list(labels.items()),
            "input": texts.get("item__input", ""),
            "text": texts.get("text", ""),
            "text_a": texts.get("output_a__text", ""),
            "text_b": texts.get("output_b__text", ""),
        })
    context = {
        "study": study,
        "study_role": role,
        "criteria": criteria,
        "chosen_key": chosen.key if chosen else "",
        "only_humans": only_humans,
        "items": items,
        "total": len(rows),
        "n_adjudicated": n_adjudicated,
        "status": status,
        "statuses": DISAGREEMENT_STATUSES.items(),
        "page": page,
        "first_number": page.start_index(),
        "page_links": _page_links(request, page),
    }
    return render(request, "annotations/lead_disagreements.html", context)


def _member_of(study: Study, post: Any) -> Any:
    user_id = _required_int(post, "user_id")
    member = get_user_model().objects.filter(pk=user_id, memberships__study=study).first()
    if member is None:
        raise ValidationFailed.at("user_id", "user_id is not a member of this study.")
    return member


def _page_links(request: HttpRequest, page: Page[Any]) -> list[dict[str, Any]]:
    """Links to every page of a paginated list (elided around the current one), keeping the
    query's other parameters (the filters)."""
    links: list[dict[str, Any]] = []
    for number in page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1):
        if number == page.paginator.ELLIPSIS:
            links.append({"ellipsis": True})
            continue
        query = request.GET.copy()
        query["page"] = str(number)
        links.append({"number": number, "url": "?" + query.urlencode(),
                      "current": number == page.number})
    return links


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def lead_members(request: HttpRequest, slug: str) -> HttpResponse:
    """Invite people, change roles, remove members, reset the passwords of accounts this study
    created; a new one-time password is shown once."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    one_time: dict[str, str] | None = None
    error = ""
    form = {"username": "", "email": "", "role": Membership.Role.ANNOTATOR}
    actor = _actor(request)
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "invite":
                form = {
                    "username": request.POST.get("username", ""),
                    "email": request.POST.get("email", ""),
                    "role": request.POST.get("role", Membership.Role.ANNOTATOR),
                }
                result = services.annotator_invite(
                    study=study, username=form["username"], email=form["email"],
                    role=form["role"], invited_by=actor,
                )
                if result.one_time_password:
                    one_time = {"username": result.username,
                                "password": result.one_time_password,
                                "what": "New account created"}
                elif result.status == "invited":
                    # The same words whether or not the name exists.
                    messages.success(request, (
                        f"Invitation recorded for {result.username} ({result.role}). If an "
                        "account of that name exists, it joins when it accepts the invitation "
                        "after signing in."))
                else:
                    messages.success(request, f"{result.username} is now a member "
                                              f"({result.role}).")
                form = {"username": "", "email": "", "role": Membership.Role.ANNOTATOR}
            elif action == "reset":
                member = _member_of(study, request.POST)
                password = services.annotator_password_reset(study=study, user=member,
                                                              by=actor)
                one_time = {"username": member.username, "password": password,
                            "what": "Password reset"}
            elif action == "role":
                member = _member_of(study, request.POST)
                new_role = request.POST.get("role", "")
                services.member_role_change(study=study, user=member, role=new_role, by=actor)
                messages.success(request, f"{member.username} is now {new_role}.")
            elif action == "remove":
                member = _member_of(study, request.POST)
                services.member_remove(study=study, user=member, by=actor)
                messages.success(request, f"{member.username} is no longer a member.")
            elif action == "revoke":
                services.invitation_revoke(study=study, by=actor,
                                           invitation_id=_required_int(request.POST,
                                                                       "invitation_id"))
                messages.success(request, "Invitation withdrawn.")
            else:
                raise ValidationFailed.at(
                    "action", "action must be 'invite', 'reset', 'role', 'remove' or 'revoke'.")
        except AppError as exc:
            error = exc.message
    members = list(
        Membership.objects.filter(study=study).select_related("user")
        .order_by("role", "user__username")
    )
    rows = [{"m": m, "can_reset": services.password_reset_allowed(
        study=study, account=m.user, membership=m, by=actor)} for m in members]
    context = {
        "study": study,
        "study_role": role,
        "members": rows,
        "invitations": services.invitations_pending_in(study=study),
        "roles": Membership.Role.choices,
        "form": form,
        "one_time": one_time,
        "error": error,
    }
    status = 400 if error else 200
    return _no_store(render(request, "annotations/lead_members.html", context, status=status))


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def my_invitations(request: HttpRequest) -> HttpResponse:
    """The signed-in account's invitations to studies, to accept or decline."""
    actor = _actor(request)
    error = ""
    if request.method == "POST":
        try:
            invitation_id = _required_int(request.POST, "invitation_id")
            decision = request.POST.get("decision")
            if decision == "accept":
                membership = services.invitation_accept(invitation_id=invitation_id,
                                                        user=actor)
                messages.success(request, f"You joined {membership.study.name} "
                                          f"({membership.get_role_display()}).")
            elif decision == "decline":
                services.invitation_decline(invitation_id=invitation_id, user=actor)
                messages.success(request, "Invitation declined.")
            else:
                raise ValidationFailed.at("decision", "decision must be 'accept' or 'decline'.")
        except AppError as exc:
            error = exc.message
        if not error:
            return redirect("annotations-my-invitations")
    context = {"invitations": services.invitations_pending_for(user=actor), "error": error}
    return _no_store(render(request, "annotations/my_invitations.html", context,
                            status=400 if error else 200))


# --- Sampling plans (lead) ----------------------------------------------------------------------

_PLAN_MODES = (
    ("all", "Every output"),
    ("per_stratum", "The same number from every stratum"),
    ("proportional", "A total, split in proportion to the strata"),
)


def _plan_form_values(post: Any) -> tuple[dict[str, Any], int, float]:
    """The plan form as the service's arguments; a bad number is a 400 naming its field."""

    def number(name: str, cast: Any, *, required: bool = False) -> Any:
        # Ranges are the service's to check (sampling.spec_parse), with its own messages.
        return form_number(post, name, cast, required=required)

    spec: dict[str, Any] = {"mode": post.get("mode", "all"),
                            "subject": post.get("subject", "output")}
    if post.get("dimension"):
        spec["dimension"] = str(post["dimension"])
    for name, key in (("n", "n"), ("total", "total"), ("min_per_stratum", "min_per_stratum"),
                      ("seed", "seed")):
        value = number(name, int)
        if value is not None:
            spec[key] = value
    weight = number("disagreement_weight", float)
    if weight is not None:
        spec["disagreement_weight"] = weight
    if post.get("include_errors") == "on":
        spec["include_errors"] = True
    k = number("k", int, required=True)
    gold_rate = number("gold_rate", float)
    return spec, k, 0.0 if gold_rate is None else gold_rate


@require_http_methods(["GET", "POST"])
@login_required
@strict_csp
def lead_plans(request: HttpRequest, slug: str) -> HttpResponse:
    """Sampling plans: the versions so far and a form that previews a draw (how many outputs
    each stratum gets, nothing written) and creates it, through the same services as the API."""
    study, role = page_study(request, slug, min_role=Membership.Role.LEAD)
    user = _actor(request)
    errors: list[dict[str, str]] = []
    preview: dict[str, Any] | None = None
    form: dict[str, Any] = {"mode": "all", "subject": "output", "k": "3", "gold_rate": "0"}
    status = 200
    if request.method == "POST":
        form = {key: request.POST.get(key, "") for key in request.POST
                if key != "csrfmiddlewaretoken"}
        try:
            spec, k, gold_rate = _plan_form_values(request.POST)
            if request.POST.get("action") == "create":
                plan = services.sampling_plan_create(study=study, spec=spec, k=k,
                                                     gold_rate=gold_rate, created_by=user)
                messages.success(request, f"Sampling plan v{plan.version} created: "
                                          f"{plan.summary.get('entries', 0)} entries.")
                return HttpResponseRedirect(reverse("annotations-lead-queue", args=[study.slug]))
            preview = services.sampling_plan_preview(study=study, spec=spec, k=k,
                                                     gold_rate=gold_rate, user=user)
            # The preview's seed goes into the form, so "Create" draws exactly what was shown.
            form["seed"] = str(preview["seed"])
        except AppError as exc:
            status = 400
            errors = error_rows(exc)
    context = {
        "study": study,
        "study_role": role,
        "plans": list(selectors.sampling_plans_list(study=study)),
        "dimensions": list(study.dimensions.order_by("key")),
        "modes": _PLAN_MODES,
        "form": form,
        "preview": preview,
        "preview_rows": [
            {"stratum": h, "population": n, "allocated": (preview["allocation"] or {}).get(h, 0)}
            for h, n in sorted((preview["population"] or {}).items())
        ] if preview else [],
        "errors": errors,
    }
    return render(request, "annotations/lead_plans.html", context, status=status)
