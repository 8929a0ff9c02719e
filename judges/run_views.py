"""Pages for leads: the judge runs of a study and one run's live progress."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from reviewhub.api.errors import Forbidden, NotFound
from studies.access import study_get_for_actor
from studies.models import Membership, Study

from . import selectors


def _lead_study(request: HttpRequest, slug: str) -> Study:
    try:
        study, _ = study_get_for_actor(user=request.user, slug=slug,
                                       min_role=Membership.Role.LEAD)
    except (NotFound, Forbidden):
        # Pages answer 404 for both, like the API, so that slugs cannot be probed.
        raise Http404("not found") from None
    return study


@login_required
def run_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = _lead_study(request, slug)
    runs = list(selectors.judge_run_list(study=study)[:100])
    counts = selectors.judge_run_job_counts(run_ids=[r.pk for r in runs])
    rows = [(r, counts.get(r.pk, {})) for r in runs]
    return render(request, "judges/run_list.html", {"study": study, "rows": rows})


@login_required
def run_detail_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    study = _lead_study(request, slug)
    try:
        run = selectors.judge_run_get(study=study, run_id=run_id)
    except NotFound:
        raise Http404("not found") from None
    progress = selectors.judge_run_progress(run=run)
    return render(request, "judges/run_detail.html",
                  {"study": study, "run": run, "progress": progress,
                   "criteria": [c.key for c in run.criteria.all()]})
