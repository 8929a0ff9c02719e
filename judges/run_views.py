"""Pages for leads: the judge runs of a study and one run's live progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from reviewhub.errors import NotFound
from studies.models import Membership, Study
from studies.pages import page_study

from . import runs, selectors
from .models import JudgeRun


def _lead_study(request: HttpRequest, slug: str) -> Study:
    # Pages answer 404 to every refusal (studies.pages.page_study), so slugs cannot be probed.
    study, _ = page_study(request, slug, min_role=Membership.Role.LEAD)
    return study


@login_required
def run_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _lead_study(request, slug)
    runs = list(selectors.judge_run_list(study=study)[:100])
    rows = selectors.judge_run_page_outcomes(runs=runs)
    return render(request, "judges/run_list.html", {"study": study, "rows": rows})


@login_required
def run_detail_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    try:
        run = selectors.judge_run_get(study=study, run_id=run_id)
    except NotFound:
        raise Http404("not found") from None
    progress = selectors.judge_run_progress(run=run)
    outcome = selectors.judge_run_outcome_for(run=run)
    stall = next_retry_at = None
    if run.status == JudgeRun.Status.RUNNING:
        stall = runs.run_stall(run_id=run.pk)
        if stall is None:
            wake = runs.run_wake(run_id=run.pk)
            next_retry_at = wake.due_at if wake is not None and not wake.running else None
    return render(request, "judges/run_detail.html", {
        "study": study, "run": run, "progress": progress, "outcome": outcome,
        "criteria": [c.key for c in run.criteria.all()],
        "selection": selection_items(run.selection),
        "stall": stall, "next_retry_at": next_retry_at,
        "stall_grace_s": round(runs.run_stall_grace_s()),
    })


def selection_items(selection: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A run's stored selection as (key, value) pairs to show, in the order the API documents
    them (PostgreSQL's jsonb keeps no key order); the candidate's id, stored beside its name
    for the queries, is left out."""
    keys = sorted((k for k in selection if k != "candidate_id"),
                  key=lambda k: (SELECTION_KEY_ORDER.index(k) if k in SELECTION_KEY_ORDER
                                 else len(SELECTION_KEY_ORDER), k))
    return [(k, str(selection[k])) for k in keys] or [("kind", "all")]


SELECTION_KEY_ORDER = ("kind", "dimension", "label", "candidate", "n", "seed")
