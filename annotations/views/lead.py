"""The lead's pages of a study's annotation work: queue status, disagreements and their
adjudication, members and invitations, sampling plans."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from reviewhub.errors import AppError, ValidationFailed
from reviewhub.pages import error_rows, form_number, strict_csp
from studies.models import Comparison, Criterion, Membership, Output, Study
from studies.pages import page_study

from .. import selectors, services
from ._common import _actor, _no_store, _required_int, _value_label

DISAGREEMENT_PAGE = 50
# The disagreements page's "show" filter: value -> label ("" shows every pair).
DISAGREEMENT_STATUSES = {"": "All pairs", "unresolved": "Unresolved only",
                         "adjudicated": "Adjudicated only"}


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
    items = _disagreement_items(shown, {c.pk: c for c in criteria})
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



def _disagreement_items(
    shown: list[selectors.DisagreementRow], by_id: dict[int, Criterion]
) -> list[dict[str, Any]]:
    """The rows of one page as the template shows them: values under their labels, the
    subject's texts, and the choices of the adjudication form (two queries)."""
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
    return items


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

