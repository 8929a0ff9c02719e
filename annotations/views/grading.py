"""The annotator's pages: grading the next subject, submitting, skipping, the lease heartbeat
and revising an annotation. Built ONLY from `selectors.grading_context` (see the package
docstring)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from reviewhub.errors import AppError, ValidationFailed, error_body
from reviewhub.pages import strict_csp
from studies.criteria import number_text
from studies.models import Comparison, Criterion, Membership, Output, Study
from studies.pages import page_study

from .. import selectors, services
from ..assignment_lookup import own_assignment
from ..constants import FLAG_KEYS, FLAG_LABELS, SEVERITY_LABELS, SEVERITY_QUESTION, SEVERITY_SCALE
from ..models import Annotation
from ._common import _actor, _int_field, _no_store, _value_label

# Inputs longer than this start collapsed. A context longer than CONTEXT_OPEN_CHARS starts
# collapsed too (about ten lines of the subject column: a short one costs nothing to show, a
# long one pushes the output out of sight), unless a criterion being graded needs it.
INPUT_OPEN_CHARS = 6000
CONTEXT_OPEN_CHARS = 600
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


def label_from_form(data: Any, key: str) -> services.LabelInput:
    """One criterion's fields of the grading form (label-<key>, severity-<key>,
    severity_note-<key>) as the service's label; a severity that is no integer is a
    ValidationFailed naming its field. Validation of the values themselves is the service's
    job."""
    return {
        "value": data.get(f"label-{key}", ""),
        "severity": _int_field(data, f"severity-{key}"),
        "severity_note": data.get(f"severity_note-{key}", ""),
    }


def labels_from_form(data: Any) -> dict[str, services.LabelInput]:
    """Every criterion's fields of the grading form as the service's labels mapping."""
    return {name[len("label-"):]: label_from_form(data, name[len("label-"):])
            for name in data if name.startswith("label-")}


def flags_from_form(data: Any) -> dict[str, bool]:
    """The grading form's flag checkboxes: a flag is set when its box was sent."""
    return {k: f"flag-{k}" in data for k in FLAG_KEYS}


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
    assignment = own_assignment(study, _actor(request), assignment_id, missing=Http404)
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
            flags=flags_from_form(data),
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
    assignment = own_assignment(study, _actor(request), assignment_id, missing=Http404)
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
    assignment = own_assignment(study, _actor(request), assignment_id, missing=Http404)
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
        key = annotation.criterion.key
        # The posted label and note stay on the form even when the severity is refused.
        selected = data.get(f"label-{key}", "")
        note = data.get(f"severity_note-{key}", "")
        rationale = data.get("rationale", "")
        flags = flags_from_form(data)
        try:
            label = label_from_form(data, key)
            severity = label["severity"]
            services.annotation_revise(
                annotation_id=annotation.pk,
                annotator=_actor(request),
                rationale=rationale,
                flags=flags,
                **label,
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


