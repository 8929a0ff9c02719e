"""The access matrix: every URL pattern of the project, for every role, against an explicit table.

The patterns are read from the resolver (`get_resolver()`, recursively), so an endpoint or page
added anywhere is walked automatically; one whose URL name is not in `MATRIX` fails
`test_every_url_pattern_is_in_the_matrix` with a message saying what to add. URL parameters are
filled with the ids of real objects of one seeded study ("alpha": outputs, a judge with a
version, a judge run, a computed agreement report, a sampling plan, an annotator's assignment
and annotation, ...), so an allowed role reaches the view's real work and a denied role is
refused by the access check, not by a missing object.

Each request runs inside a savepoint that is rolled back, so writes (an empty or minimal body)
never change what the next request sees and the seeded study is built once per module.

Expected values (see `_check`):
- `OK`: the role is let in. GET must answer 200 (or the code the entry names); a write must
  answer anything but a denial (401/403/404, a redirect to a login page) or a 5xx: 400 for an
  empty body, 405, 409 ... are all fine, since the point is that validation was reached.
- `401`, `403`, `404`: that exact denial, before any validation of the body.
- `LOGIN` / `ADMIN_LOGIN`: a redirect to the site's or the admin's login page.

Roles (`ROLES`): anonymous, a signed-in user with no membership, viewer, annotator and lead of
the study, the lead of another study, staff (no model permissions) and a superuser, all by
session; and three study-scoped API tokens: the lead's token for this study (read-only and
read-write) and a token of a user who leads both studies, scoped to the other one. Tokens do not
sign anyone in to the HTML pages.

Denials follow the documentation (docs/api.md "Access"): over the API a study the caller cannot
see (no membership, another study's lead, staff, a token scoped elsewhere) is 404, never 403, and
a member whose role is too low gets 403; annotators are blind, so judge data, reports, items,
outputs, candidates, plans and members are 403 for them. Every HTML page answers 404 to anyone
who may not see it (annotators on report, run and lead pages included).
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from annotations import services as annotation_services
from annotations.models import Annotation, Assignment, Invitation, SamplingPlan
from calibration.models import CalibratedScore
from imports.generic import ratings_import, ratings_read
from judges.models import Judge, JudgeRun, JudgeVersion
from judges.runs import judge_run_start
from judges.services import judge_create, judge_version_for_config
from monitoring.models import Alert, Deployment
from reports.agreement import params_validate
from reports.services import report_compute
from snapshots.models import ReportSnapshot
from studies.models import AnalysisPlan, ApiToken, Criterion, Item, Membership, Output, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory, api_token_create

# The mark also makes pytest-django create the test database when this module runs alone: the
# module-scoped `seeded` fixture below must never write to the configured database.
pytestmark = pytest.mark.django_db

# --- expected values --------------------------------------------------------------------------

OK = "ok"
LOGIN = "login"
ADMIN_LOGIN = "admin_login"
ANY = "any"  # anything but a 5xx (admin site pages whose answer depends on the page)
DENIALS = {401, 403, 404}

ROLES = (
    "anon", "nomember", "viewer", "annotator", "lead", "other_lead", "staff", "superuser",
    "token_read", "token_write", "token_other",
)
SESSION_ROLES = ("nomember", "viewer", "annotator", "lead", "other_lead", "staff", "superuser")
TOKEN_ROLES = ("token_read", "token_write", "token_other")
# A method a function view does not list is tried with these roles (405, or the role's denial).
UNSERVED_ROLES = ("anon", "nomember", "annotator", "lead")
# The admin decides by `is_staff` / `is_superuser` alone: a caller of each kind stands for the
# others. A rule that answers every role alike (public pages, the schema) likewise.
ADMIN_ROLES = ("anon", "annotator", "lead", "staff", "superuser", "token_write")
UNIFORM_ROLES = ("anon", "lead", "token_write")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
METHODS = ("GET", *WRITE_METHODS)

Policy = dict[str, Any]


def api_rule(*, viewer: Any, annotator: Any, lead: Any = OK, superuser: Any = None,
             token_read: Any = OK, token_write: Any = None) -> Policy:
    """A study-scoped API rule. Outsiders (no membership, another study's lead, staff, a token
    scoped to another study) always get 404 and anonymous callers 401. The two tokens are the
    lead's, scoped to this study; superusers act as leads."""
    return {
        "anon": 401, "nomember": 404, "other_lead": 404, "staff": 404, "token_other": 404,
        "viewer": viewer, "annotator": annotator, "lead": lead,
        "superuser": lead if superuser is None else superuser,
        "token_read": token_read, "token_write": lead if token_write is None else token_write,
    }


# API, inside a study
READ_ALL = api_rule(viewer=OK, annotator=OK)  # the study, its rubric and strata
READ_BLIND = api_rule(viewer=OK, annotator=403)  # lead data viewers may read
LEAD_READ = api_rule(viewer=403, annotator=403)
LEAD_WRITE = api_rule(viewer=403, annotator=403, token_read=403)
# A POST that only reads (the judge prompt preview): read-only tokens may use it.
LEAD_READ_POST = api_rule(viewer=403, annotator=403, token_read=OK)
# Annotation work: the annotator's own queue; leads may grade too.
WORK_WRITE = api_rule(viewer=403, annotator=OK, token_read=403)
WORK_READ = api_rule(viewer=403, annotator=OK)
# The annotator's own assignment / annotation: anyone else's is a 404, the lead's included.
OWN_READ = api_rule(viewer=403, annotator=OK, lead=404, token_read=404)
OWN_WRITE = api_rule(viewer=403, annotator=OK, lead=404, token_read=403)

# API, outside any study
PUBLIC = dict.fromkeys(ROLES, OK)
SIGNED_IN_API = {**dict.fromkeys(ROLES, OK), "anon": 401}
# Creating a study: any account, but not through a study-scoped token.
STUDY_CREATE = {**SIGNED_IN_API, **dict.fromkeys(TOKEN_ROLES, 403)}
# Token management: the account's own tokens, never through a study-scoped token.
TOKENS = {**SIGNED_IN_API, **dict.fromkeys(TOKEN_ROLES, 403)}
# Answering an invitation: only the invited account (the seed's is addressed to "nomember");
# tokens need read-write access to the whole account, which the matrix's tokens lack.
INVITATION_ANSWER = {**dict.fromkeys(ROLES, 404), "anon": 401, "nomember": OK,
                     **dict.fromkeys(TOKEN_ROLES, 403)}
# One token of the lead's: everyone else's lookup is a 404 (their own tokens only).
OWN_TOKEN = {**dict.fromkeys(ROLES, 404), "anon": 401, "lead": OK,
             **dict.fromkeys(TOKEN_ROLES, 403)}

# HTML pages (session only: a token signs nobody in, so token holders are sent to log in)
_PAGE_BASE = {"anon": LOGIN, **dict.fromkeys(TOKEN_ROLES, LOGIN),
              "nomember": 404, "other_lead": 404, "staff": 404}
PAGE_MEMBER = {**_PAGE_BASE, "viewer": OK, "annotator": OK, "lead": OK, "superuser": OK}
PAGE_LEAD = {**_PAGE_BASE, "viewer": 404, "annotator": 404, "lead": OK, "superuser": OK}
# Lead data viewers may read (annotators grade blind).
PAGE_READ = {**_PAGE_BASE, "viewer": OK, "annotator": 404, "lead": OK, "superuser": OK}
PAGE_GRADE = {**_PAGE_BASE, "viewer": 404, "annotator": OK, "lead": OK, "superuser": OK}
# The annotator's own assignment or annotation, by page.
PAGE_OWN = {**_PAGE_BASE, "viewer": 404, "annotator": OK, "lead": 404, "superuser": 404}
PAGE_SIGNED_IN = {**dict.fromkeys(ROLES, OK), "anon": LOGIN, **dict.fromkeys(TOKEN_ROLES, LOGIN)}
# One of the lead's tokens, by page: anyone else's revoke is a 404.
PAGE_OWN_TOKEN = {**dict.fromkeys(ROLES, 404), "anon": LOGIN, **dict.fromkeys(TOKEN_ROLES, LOGIN),
                  "lead": OK}
PAGE_PUBLIC = dict.fromkeys(ROLES, OK)

# Django's admin: one gate (AdminSite.has_permission) for every admin URL. Staff without model
# permissions see the site but no model page; superusers everything.
ADMIN = {**dict.fromkeys(ROLES, ADMIN_LOGIN), "staff": "staff", "superuser": ANY}
# Signing in and out (the admin's and the site's): open to everyone; what follows depends on
# whether the caller is signed in already.
SIGN_IN_OUT = dict.fromkeys(ROLES, ANY)

# --- the matrix ---------------------------------------------------------------------------------
# URL name -> {method: policy}; names of the admin fall back to "admin:*". A class-based view
# must list exactly the methods it implements (checked below). For a function view the methods
# listed are the ones it serves; any other write method must answer 405 or the role's denial.
# GET for a role let in must answer 200 unless GET_STATUS names other codes.

MATRIX: dict[str, dict[str, Policy]] = {
    "healthz": {"GET": PUBLIC},
    "api-schema": {"GET": PUBLIC},
    "api-docs": {"GET": PUBLIC},
    # accounts (django.contrib.auth.urls)
    "login": {"GET": PAGE_PUBLIC, "POST": PAGE_PUBLIC, "PUT": PAGE_PUBLIC},
    "logout": {"POST": SIGN_IN_OUT},
    "password_change": {"GET": PAGE_SIGNED_IN, "POST": PAGE_SIGNED_IN, "PUT": PAGE_SIGNED_IN},
    "password_change_done": {"GET": PAGE_SIGNED_IN},
    "password_reset": {"GET": PAGE_PUBLIC, "POST": PAGE_PUBLIC, "PUT": PAGE_PUBLIC},
    "password_reset_done": {"GET": PAGE_PUBLIC},
    "password_reset_confirm": {"GET": PAGE_PUBLIC, "POST": PAGE_PUBLIC, "PUT": PAGE_PUBLIC},
    "password_reset_complete": {"GET": PAGE_PUBLIC},
    "admin:*": {"GET": ADMIN, "POST": ADMIN},
    "admin:login": {"GET": SIGN_IN_OUT, "POST": SIGN_IN_OUT},
    "admin:logout": {"GET": SIGN_IN_OUT, "POST": SIGN_IN_OUT},
    # studies API
    "api-studies": {"GET": SIGNED_IN_API, "POST": STUDY_CREATE},
    "api-study": {"GET": READ_ALL, "PATCH": LEAD_WRITE},
    "api-members": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "api-member": {"GET": READ_BLIND, "PATCH": LEAD_WRITE, "DELETE": LEAD_WRITE},
    "api-rubric": {"GET": READ_ALL, "PUT": LEAD_WRITE},
    "api-rubric-versions": {"GET": READ_ALL},
    "api-rubric-version": {"GET": READ_ALL},
    "api-strata": {"GET": READ_ALL, "PUT": LEAD_WRITE},
    "api-items": {"GET": READ_BLIND},
    "api-item": {"GET": READ_BLIND},
    "api-candidates": {"GET": READ_BLIND},
    "api-candidate": {"GET": READ_BLIND},
    "api-outputs": {"GET": READ_BLIND},
    "api-output": {"GET": READ_BLIND},
    "api-plans": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "api-plan": {"GET": READ_BLIND, "PATCH": LEAD_WRITE},
    "api-plan-lock": {"POST": LEAD_WRITE},
    "api-plan-new-version": {"POST": LEAD_WRITE},
    "api-tokens": {"GET": TOKENS, "POST": TOKENS},
    "api-token": {"GET": OWN_TOKEN, "DELETE": OWN_TOKEN},
    "api-items-bulk": {"POST": LEAD_WRITE},
    "api-candidates-bulk": {"POST": LEAD_WRITE},
    "api-outputs-bulk": {"POST": LEAD_WRITE},
    # imports API
    "api-peer-import": {"POST": LEAD_WRITE},
    "api-ratings-import": {"POST": LEAD_WRITE},
    # judges API
    "api-judges": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "api-judge": {"GET": READ_BLIND},
    "api-judge-versions": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "api-judge-version": {"GET": READ_BLIND},
    "api-judge-version-preview": {"POST": LEAD_READ_POST},
    # One real call to the provider: a lead with a write token (it costs money).
    "api-judge-connection-test": {"POST": LEAD_WRITE},
    "judge-run-list": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "judge-run-detail": {"GET": LEAD_READ},
    "judge-run-cancel": {"POST": LEAD_WRITE},
    "judge-run-resume": {"POST": LEAD_WRITE},
    "judge-run-rerun": {"POST": LEAD_WRITE},
    "verdict-list": {"GET": LEAD_READ},
    # Verdicts of judges run elsewhere: a lead with a write token, as for the judges it creates.
    "verdict-bulk-push": {"POST": LEAD_WRITE},
    # candidate runs API (configs name endpoints and key variables: leads only)
    "api-generation-configs": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "api-prompt-templates": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "api-prompt-template-preview": {"POST": LEAD_READ_POST},
    "api-generation-runs": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "api-generation-run-estimate": {"POST": LEAD_READ_POST},
    "api-generation-run": {"GET": LEAD_READ},
    "api-generation-run-cancel": {"POST": LEAD_WRITE},
    "api-generation-run-resume": {"POST": LEAD_WRITE},
    # annotations API
    "annotations-api-next": {"POST": WORK_WRITE},
    "annotations-api-assignment": {"GET": OWN_READ},
    "annotations-api-heartbeat": {"POST": OWN_WRITE},
    "annotations-api-submit": {"POST": OWN_WRITE},
    "annotations-api-skip": {"POST": OWN_WRITE},
    "annotations-api-mine": {"GET": WORK_READ},
    "annotations-api-mine-detail": {"PATCH": OWN_WRITE},
    "annotations-api-plans": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "annotations-api-plan": {"GET": LEAD_READ, "DELETE": LEAD_WRITE},
    "annotations-api-progress": {"GET": LEAD_READ},
    "annotations-api-disagreements": {"GET": LEAD_READ},
    "annotations-api-adjudications": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "annotations-api-gold": {"GET": LEAD_READ, "POST": LEAD_WRITE},
    "annotations-api-invite": {"POST": LEAD_WRITE},
    "annotations-api-reset-password": {"POST": LEAD_WRITE},
    # the signed-in account's own invitations
    "annotations-api-invitations": {"GET": SIGNED_IN_API},
    "annotations-api-invitation-accept": {"POST": INVITATION_ANSWER},
    "annotations-api-invitation-decline": {"POST": INVITATION_ANSWER},
    "annotations-api-export": {"GET": LEAD_READ},
    # reports API
    "reports-api-list": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "reports-api-detail": {"GET": READ_BLIND},
    "reports-api-export": {"GET": READ_BLIND},
    "reports-api-calibration-list": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "reports-api-calibration-detail": {"GET": READ_BLIND},
    "reports-api-selection-list": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "reports-api-selection-detail": {"GET": READ_BLIND},
    "reports-api-selection-next-labels": {"POST": LEAD_WRITE},
    # calibration API: judge-derived scores, so annotators are blind to them
    "calibration-api-scores": {"GET": READ_BLIND},
    "calibration-api-export": {"GET": READ_BLIND},
    "calibration-api-escalations": {"POST": LEAD_WRITE},
    # monitoring API: live traffic judged and graded is judge data (annotators are blind);
    # every write is a lead's with a credential that may write
    "monitoring-api-deployments": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "monitoring-api-deployment": {"GET": READ_BLIND},
    "monitoring-api-traffic": {"POST": LEAD_WRITE},
    "monitoring-api-labels": {"POST": LEAD_WRITE},
    "monitoring-api-windows": {"GET": READ_BLIND, "POST": LEAD_WRITE},
    "monitoring-api-windows-export": {"GET": READ_BLIND},
    "monitoring-api-alerts": {"GET": READ_BLIND},
    "monitoring-api-alert-acknowledge": {"POST": LEAD_WRITE},
    "monitoring-api-alert-resolve": {"POST": LEAD_WRITE},
    "monitoring-api-reopen": {"POST": LEAD_WRITE},
    # a deployment's Langfuse source names the host and key variables: leads only
    "monitoring-api-langfuse": {"GET": LEAD_READ, "POST": LEAD_WRITE, "PATCH": LEAD_WRITE,
                                "DELETE": LEAD_WRITE},
    "monitoring-api-langfuse-pull": {"POST": LEAD_WRITE},
    # pages
    "home": {"GET": PAGE_SIGNED_IN},
    "study-overview": {"GET": PAGE_MEMBER},
    "study-data": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "study-candidate-outputs": {"GET": PAGE_LEAD},
    "account-tokens": {"GET": PAGE_SIGNED_IN, "POST": PAGE_SIGNED_IN},
    "study-new": {"GET": PAGE_SIGNED_IN, "POST": PAGE_SIGNED_IN},
    "study-plan": {"GET": PAGE_LEAD},
    "study-plan-edit": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "study-plan-lock": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "docs-page": {"GET": PAGE_SIGNED_IN},
    "docs-file": {"GET": PAGE_SIGNED_IN},
    "account-token-revoke": {"POST": PAGE_OWN_TOKEN},
    "judge-list-page": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "judge-version-preview-page": {"GET": PAGE_LEAD},
    "judge-run-list-page": {"GET": PAGE_LEAD},
    "judge-run-detail-page": {"GET": PAGE_LEAD},
    "generation-runs-page": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "generation-run-page": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "annotations-grade": {"GET": PAGE_GRADE},
    "annotations-grade-submit": {"POST": PAGE_OWN},
    "annotations-grade-skip": {"POST": PAGE_OWN},
    "annotations-grade-heartbeat": {"POST": PAGE_OWN},
    "annotations-revise": {"GET": PAGE_OWN, "POST": PAGE_OWN},
    "annotations-lead-queue": {"GET": PAGE_LEAD},
    "annotations-my-invitations": {"GET": PAGE_SIGNED_IN, "POST": PAGE_SIGNED_IN},
    "annotations-lead-plans": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "annotations-lead-disagreements": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "annotations-lead-members": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "reports-list": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "reports-audit": {"GET": PAGE_LEAD},
    "reports-heatmap": {"GET": PAGE_LEAD},
    "reports-bias": {"GET": PAGE_LEAD},
    "reports-disagreements": {"GET": PAGE_LEAD},
    "reports-calibration": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "reports-calibration-reliability": {"GET": PAGE_LEAD},
    # monitoring pages: lead pages like the reports (acknowledge / resolve post to the page)
    "monitoring-list": {"GET": PAGE_LEAD},
    "monitoring-page": {"GET": PAGE_LEAD, "POST": PAGE_LEAD},
    "monitoring-chart": {"GET": PAGE_LEAD},
    # the selection report: viewers read it too (a committee's document); leads act
    "reports-selection": {"GET": PAGE_READ, "POST": PAGE_LEAD},
    "reports-selection-detail": {"GET": PAGE_READ},
    "reports-selection-forest": {"GET": PAGE_READ},
    "reports-selection-pareto": {"GET": PAGE_READ},
    "reports-selection-csv": {"GET": PAGE_READ},
    "reports-selection-pdf": {"GET": PAGE_READ},
    "reports-selection-next-labels": {"POST": PAGE_LEAD},
}

# GET answers other than 200 for a role that is let in.
GET_STATUS: dict[str, set[int]] = {}

# --- walking the resolver -----------------------------------------------------------------------

PARAM_RE = re.compile(r"<(?:(?P<conv>[^>:]+):)?(?P<name>[^>]+)>")
REGEX_GROUP_RE = re.compile(r"\(\?P<(?P<name>\w+)>[^)]*\)")
ADMIN_MODEL_PAGE = re.compile(r"^admin:[a-z]+_[a-z0-9]+_(changelist|add|change|delete|history)$")


@dataclass(frozen=True)
class Route:
    route: str  # the full pattern, e.g. "api/studies/<slug:slug>/items"
    name: str  # the namespaced URL name, or the route when the pattern has none
    callback: Any

    @property
    def view_class(self) -> Any:
        return getattr(self.callback, "cls", None) or getattr(self.callback, "view_class", None)

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/") and self.name not in ("api-schema", "api-docs")

    @property
    def is_admin(self) -> bool:
        return self.route.startswith("admin/")


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            route = prefix + str(p.pattern)
            yield Route(route, f"{namespace}{p.name}" if p.name else route, p.callback)


def all_routes() -> list[Route]:
    return list(_walk(get_resolver().url_patterns))


def matrix_entry(route: Route) -> dict[str, Policy] | None:
    if route.name in MATRIX:
        return MATRIX[route.name]
    if route.is_admin:
        return MATRIX["admin:*"]
    return None


def declared_methods(route: Route) -> list[str] | None:
    """The methods a class-based view implements (None for function views)."""
    cls = route.view_class
    if cls is None or route.is_admin:
        return None
    return [m for m in METHODS
            if hasattr(cls, m.lower()) and m.lower() in cls.http_method_names]


# --- the seeded study ---------------------------------------------------------------------------


@dataclass
class Seeded:
    study: Study
    users: dict[str, Any]
    tokens: dict[str, str]
    values: dict[str, Any]
    queries: dict[str, dict[str, Any]] = field(default_factory=dict)


def _ratings_csv(n_items: int = 24) -> str:
    """Two humans and an imported judge on `n_items` outputs; the judge flips the first four."""
    lines = ["item_id,stratum.language,output_id,candidate,output_text,rater_id,rater_kind,"
             "judge_version,criterion,value,severity"]
    for i in range(n_items):
        lang = "en" if i % 2 else "de"
        truth = "pass" if i % 3 else "fail"
        sev = "2" if truth == "fail" else ""
        for rater in ("hum1", "hum2"):
            lines.append(f"q{i},{lang},o{i},m1,answer {i},{rater},human,,correct,{truth},{sev}")
        judged = truth if i >= 4 else ("fail" if truth == "pass" else "pass")
        lines.append(f"q{i},{lang},o{i},m1,answer {i},imp-judge,judge,v1,correct,{judged},")
    return "\n".join(lines) + "\n"


def _calibration_seed(*, study: Study, output: Output | None, criterion: Criterion
                      ) -> ReportSnapshot:
    """A finished calibration snapshot with one cell and one escalated calibrated score (the
    calibration report's own computation is tested in tests/calibration)."""
    assert output is not None
    snapshot = ReportSnapshot.objects.create(
        study=study, kind="calibration", status=ReportSnapshot.Status.DONE, result_version=1,
        result={"version": 1, "kind": "calibration", "cells": [{
            "judge_version": 0, "judge": "mx-judge", "criterion": criterion.key, "stratum": "",
            "n_labels": 0, "too_few_labels": True, "pooled_only": True,
            "diagnostics": {"before": None, "after": None}}]})
    CalibratedScore.objects.create(
        study=study, snapshot_id=snapshot.pk, output=output, criterion=criterion,
        criterion_key=criterion.key, p_pass=0.5, decision=CalibratedScore.Decision.ESCALATE,
        expected_cost=1.0, source=CalibratedScore.Source.JUDGE)
    return snapshot


def _selection_seed(*, study: Study) -> ReportSnapshot:
    """A finished selection snapshot with a minimal result (the selection report's own
    computation is tested in tests/reports)."""
    return ReportSnapshot.objects.create(
        study=study, kind="selection", status=ReportSnapshot.Status.DONE, result_version=1,
        result={"version": 1, "kind": "selection", "plan_version": None, "fingerprint": "",
                "simulated": False, "level": 0.95, "dimension": None, "strata": [], "mix": {},
                "mix_source": "observed", "plan_followed": True, "deviations": [],
                "primary_metric": "rubric_pass_rate", "margin": 0.0, "judge": None,
                "candidates": [], "metrics": [{"key": "rubric_pass_rate",
                                               "label": "Rubric pass rate", "unit": "rate",
                                               "higher_is_better": True}],
                "estimates": [], "differences": [], "rankings": [], "flips": [], "gates": [],
                "gate_failures": {}, "thresholds": [], "public_vs_private": None,
                "frontier": [{"candidate": "m1", "quality": 0.5, "latency_p95_ms": 100.0,
                              "cost_per_1000": 1.0, "on_frontier": True}],
                "decision": {"verdict": "insufficient_data", "candidate": None,
                             "runner_up": None, "difference": None, "text": "no labels"},
                "next_labels": None, "pairwise": None, "missing": ["no human label yet"],
                "warnings": []})


def _generation_seed(*, study: Any, lead: Any) -> Any:
    """A candidate run of a candidate of its own (the imported ones have outputs already)."""
    from generation.runs import generation_run_start
    from generation.services import generation_config_create, prompt_template_create
    from studies.models import Candidate

    candidate = Candidate.objects.create(study=study, name="mx-generated")
    config, _ = generation_config_create(candidate=candidate, config={
        "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "mx-model"})
    template, _ = prompt_template_create(study=study, template={"user": "{input}"})
    return generation_run_start(study=study, template=template, configs=[config],
                                concurrency=2, created_by=lead, enqueue=lambda r, c: None)


def _monitoring_seed(*, study: Study) -> tuple[Deployment, Alert]:
    """A deployment of the study's first candidate with one open alert (the monitoring
    services are tested in tests/monitoring)."""
    plan = AnalysisPlan.objects.get(study=study, version=1)
    output = Output.objects.filter(study=study).order_by("id").first()
    assert output is not None
    deployment = Deployment.objects.create(
        study=study, name="mx-prod", candidate_id=output.candidate_id, plan=plan,
        sampling={"judge": {"default": 0.5}, "human": {"default": 0.1}})
    now = timezone.now()
    alert = Alert.objects.create(deployment=deployment, kind="error_rate", dedup_key="error_rate|",
                                 message="error rate above the gate", opened_at=now,
                                 last_seen_at=now)
    return deployment, alert


def _seed() -> Seeded:
    User = get_user_model()
    lead = UserFactory(username="mx-lead")
    study = StudyFactory(owner=lead, slug="mx-alpha", name="Matrix study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    ratings_import(study=study, rows=ratings_read(io.StringIO(_ratings_csv()), fmt="csv"))

    viewer = UserFactory(username="mx-viewer")
    annotator = UserFactory(username="mx-annotator")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    MembershipFactory(study=study, user=annotator, role=Membership.Role.ANNOTATOR)
    # An annotator account this study created (the lead may reset its password).
    member = annotation_services.annotator_invite(
        study=study, username="", email="mx-invited@example.test",
        role=Membership.Role.ANNOTATOR, invited_by=lead).user
    nomember = UserFactory(username="mx-nomember")
    # An invitation waiting for the non-member's answer (only that account may answer it).
    annotation_services.annotator_invite(
        study=study, username="mx-nomember", email="", role=Membership.Role.ANNOTATOR,
        invited_by=lead)
    invitation = Invitation.objects.get(study=study, username="mx-nomember")
    staff = UserFactory(username="mx-staff", is_staff=True)
    superuser = UserFactory(username="mx-root", is_staff=True, is_superuser=True)
    other_lead = UserFactory(username="mx-other-lead")
    other = StudyFactory(owner=other_lead, slug="mx-beta", name="Other study")
    MembershipFactory(study=other, user=other_lead, role=Membership.Role.LEAD)
    dual = UserFactory(username="mx-dual")
    MembershipFactory(study=study, user=dual, role=Membership.Role.LEAD)
    MembershipFactory(study=other, user=dual, role=Membership.Role.LEAD)

    criterion = Criterion.objects.get(rubric__study=study, key="correct")
    AnalysisPlan.objects.create(study=study, version=1, spec={
        "criteria": {"correct": {"metric": "pass_rate", "threshold": 0.9}}})
    plan = annotation_services.sampling_plan_create(
        study=study, spec={"mode": "all", "dimension": "language", "seed": 3}, k=3,
        gold_rate=0, created_by=lead)
    done = annotation_services.assignment_next(study=study, annotator=annotator)
    assert done is not None
    annotation_services.annotation_submit(
        assignment=done, annotator=annotator, submission_id=uuid.uuid4(),
        labels={"correct": {"value": "pass"}})
    leased = annotation_services.assignment_next(study=study, annotator=annotator)
    assert leased is not None and leased.pk != done.pk
    annotation = Annotation.objects.filter(annotator=annotator).order_by("id").first()
    assert annotation is not None

    check = judge_create(study=study, name="mx-length", kind=Judge.Kind.PROGRAMMATIC)
    version = judge_version_for_config(judge=check, config={"check": "length", "max": 1000})
    run = judge_run_start(study=study, judge_version=version, criteria=[criterion],
                          created_by=lead, enqueue=lambda run_id, n: None)
    generation_run = _generation_seed(study=study, lead=lead)
    report = ReportSnapshot.objects.create(
        study=study, params=params_validate({"n_resamples": 100, "min_items": 5}),
        created_by=lead)
    report = report_compute(report_id=report.pk)
    assert report.status == ReportSnapshot.Status.DONE, report.error
    result = report.result or {}
    crit_id = result["criteria"][0]["id"]
    disagreeing = result["disagreements"][0]
    calibration = _calibration_seed(study=study, output=Output.objects.filter(
        study=study).order_by("id").first(), criterion=criterion)
    selection = _selection_seed(study=study)
    deployment, alert = _monitoring_seed(study=study)
    spare_token = ApiToken.objects.create(user=lead, name="spare", prefix="rh_spare0",
                                          key_hash=uuid.uuid4().hex * 2)

    output = Output.objects.filter(study=study).order_by("id").first()
    item = Item.objects.filter(study=study).order_by("id").first()
    assert output is not None and item is not None
    values: dict[str, Any] = {
        "slug": study.slug, "item_id": item.pk, "candidate_id": output.candidate_id,
        "output_id": output.pk, "user_id": member.pk, "version": 1,
        "judge_id": check.pk, "version_id": version.pk, "run_id": run.pk,
        "generation_run_id": generation_run.pk, "template_id": generation_run.template_id,
        "report_id": report.pk, "assignment_id": leased.pk, "annotation_id": annotation.pk,
        "token_id": spare_token.pk, "snapshot_id": calibration.pk,
        "invitation_id": invitation.pk,
        "deployment_id": deployment.pk, "alert_id": alert.pk,
        # selection URLs take a selection snapshot's id (see `_request`)
        "selection_snapshot_id": selection.pk, "metric": 0, "table": "estimates",
        # django.contrib.auth and the admin
        "uidb64": "MQ", "token": "set-password", "id": member.pk, "app_label": "studies",
        "content_type_id": "1", "url": "no-such-admin-page/",
        # the served docs: a page and an example file
        "page": "study-spec", "folder": "examples", "filename": "study.yaml",
        # the importers of other tools' exports
        "tool": "promptfoo",
    }
    queries = {
        "reports-heatmap": {"criterion": crit_id},
        "reports-disagreements": {"judge": disagreeing["judge_version"],
                                  "criterion": disagreeing["criterion"]},
        "reports-api-export": {"table": "cells"},
        "annotations-api-export": {"format": "csv"},
        "reports-calibration-reliability": {"cell": 0},
    }
    users = {"nomember": nomember, "viewer": viewer, "annotator": annotator, "lead": lead,
             "other_lead": other_lead, "staff": staff, "superuser": superuser}
    tokens = {
        "token_read": api_token_create(user=lead, study=study, can_write=False),
        "token_write": api_token_create(user=lead, study=study, can_write=True),
        "token_other": api_token_create(user=dual, study=other, can_write=True),
    }
    assert SamplingPlan.objects.filter(pk=plan.pk, version=1).exists()
    assert Assignment.objects.filter(pk=leased.pk, status=Assignment.Status.LEASED).exists()
    assert JudgeRun.objects.filter(pk=run.pk).exists() and JudgeVersion.objects.filter(
        pk=version.pk).exists()
    assert User.objects.filter(pk=member.pk).exists()
    return Seeded(study=study, users=users, tokens=tokens, values=values, queries=queries)


@pytest.fixture(scope="module")
def seeded(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Seeded]:
    """The seeded study, built once for the module inside a transaction rolled back at the end."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            world = _seed()
            sessions = {}
            for role, user in world.users.items():
                c = Client()
                c.force_login(user)
                sessions[role] = c.cookies[settings.SESSION_COOKIE_NAME].value
            world.values["_sessions"] = sessions
            yield world
        finally:
            _CLIENTS.clear()
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


# --- making the requests ------------------------------------------------------------------------


def _url(route: Route, values: dict[str, Any]) -> str:
    """The route with its parameters filled (`<int:run_id>` and regex groups alike)."""

    def value(m: re.Match[str]) -> str:
        return str(values[m.group("name")])

    path = REGEX_GROUP_RE.sub(value, PARAM_RE.sub(value, route.route))
    return "/" + path.replace("^", "").replace("$", "")


def _admin_values(route: Route, world: Seeded) -> dict[str, Any]:
    """`object_id` for an admin model URL: the first object of that model."""
    values = dict(world.values)
    if route.route.startswith("admin/r/"):  # view_on_site: a real content type and object
        from django.contrib.contenttypes.models import ContentType

        values["content_type_id"] = ContentType.objects.get_for_model(Study).pk
        values["object_id"] = world.study.pk
        return values
    match = re.match(r"admin/(?P<app>\w+)/(?P<model>\w+)/", route.route)
    if match:
        from django.apps import apps

        try:
            model = apps.get_model(match["app"], match["model"])
        except LookupError:  # a site page such as password_change/done/
            return values
        obj = model._default_manager.order_by("pk").first()
        values["object_id"] = obj.pk if obj is not None else 1
    return values


_CLIENTS: dict[str, Client] = {}


def _client(role: str, world: Seeded) -> Client:
    """The role's client, with only its own credentials (a response's cookies, a sign-out
    included, never carry over to the next request). One client per role: a new client loads
    the whole middleware stack again, which cost four fifths of each request."""
    client = _CLIENTS.get(role)
    if client is None:
        client = _CLIENTS[role] = Client()
        if role in TOKEN_ROLES:
            client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[role]}"
    client.cookies = SimpleCookie()
    if role in SESSION_ROLES:
        client.cookies[settings.SESSION_COOKIE_NAME] = world.values["_sessions"][role]
    return client


def _request(role: str, method: str, route: Route, world: Seeded) -> Any:
    values = _admin_values(route, world) if route.is_admin else world.values
    if "selection" in route.name:  # a calibration snapshot's id is not found there
        values = {**values, "snapshot_id": values["selection_snapshot_id"]}
    url = _url(route, values)
    client = _client(role, world)
    query = world.queries.get(route.name, {})
    with transaction.atomic():
        if method == "GET":
            response = client.get(url, query)
        elif route.is_api:
            response = client.generic(method, url + _query_string(query), "{}",
                                      content_type="application/json")
        else:
            response = client.generic(method, url + _query_string(query), "",
                                      content_type="application/x-www-form-urlencoded")
        transaction.set_rollback(True)
    return response


def _query_string(query: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    return f"?{urlencode(query)}" if query else ""


def _is_login_redirect(response: Any, login_url: str) -> bool:
    return response.status_code == 302 and response["Location"].startswith(login_url)


def _check(route: Route, method: str, role: str, expected: Any, response: Any,
           method_served: bool) -> str | None:
    """None when the response matches `expected`, else a line for the failure report."""
    status = response.status_code
    where = f"{method} {route.name} as {role}: "
    if status >= 500:
        return where + f"{status} (server error)"
    if not method_served:
        # A method the view does not list: 405, or the denial the role gets anyway; a role let in
        # may get whatever the view answers (a function view without a method restriction).
        if expected in DENIALS:
            return None if status in {405, expected} else where + (
                f"{status}, expected {expected} or 405 ({method} is not in the matrix)")
        if expected in (LOGIN, ADMIN_LOGIN):
            login_url = settings.LOGIN_URL if expected == LOGIN else "/admin/login/"
            return None if status == 405 or _is_login_redirect(response, login_url) else (
                where + f"{status}, expected a redirect to {login_url} or 405")
        return None
    if expected == OK:
        if status in DENIALS or _is_login_redirect(response, settings.LOGIN_URL):
            return where + f"{status}, expected to be let in"
        if method == "GET" and status not in GET_STATUS.get(route.name, {200}):
            return where + f"{status}, expected {GET_STATUS.get(route.name, {200})}"
        return None
    if expected == ANY:
        return None
    if expected == "staff":
        # No model permissions: a model page is refused (403), or redirects when the object
        # does not exist; never shown.
        if ADMIN_MODEL_PAGE.search(route.name) and status == 200:
            return where + "200, expected no access (staff without model permissions)"
        return None
    if expected == LOGIN:
        return None if _is_login_redirect(response, settings.LOGIN_URL) else (
            where + f"{status}, expected a redirect to {settings.LOGIN_URL}")
    if expected == ADMIN_LOGIN:
        return None if _is_login_redirect(response, "/admin/login/") else (
            where + f"{status}, expected a redirect to /admin/login/")
    if status != expected:
        return where + f"{status}, expected {expected}"
    return None


# --- the tests ----------------------------------------------------------------------------------

ROUTES = all_routes()


def test_every_url_pattern_is_in_the_matrix() -> None:
    missing = sorted({r.name for r in ROUTES if matrix_entry(r) is None})
    assert not missing, (
        "URL patterns missing from the access matrix: " + ", ".join(missing)
        + ". Add each to MATRIX in tests/test_access_matrix.py with the policy of every method "
          "it serves (who may call it), so that its access is checked for every role."
    )
    names = {r.name for r in ROUTES}
    stale = sorted(k for k in MATRIX if k not in names and k != "admin:*")
    assert not stale, f"MATRIX names URL patterns that no longer exist: {stale}"


def test_class_based_views_serve_exactly_the_methods_listed() -> None:
    wrong = []
    for route in ROUTES:
        entry, served = matrix_entry(route), declared_methods(route)
        if entry is None or served is None:
            continue
        if sorted(entry) != sorted(served):
            wrong.append(f"{route.name}: the view serves {served}, the matrix lists "
                         f"{sorted(entry)}")
    assert not wrong, "Update MATRIX:\n" + "\n".join(wrong)


@pytest.mark.parametrize("route", [r for r in ROUTES if matrix_entry(r) is not None],
                         ids=lambda r: r.name)
def test_access(route: Route, seeded: Seeded, django_db_blocker: Any) -> None:
    entry = matrix_entry(route)
    assert entry is not None
    served = declared_methods(route)
    problems: list[str] = []
    with django_db_blocker.unblock():
        for method in METHODS:
            listed = method in entry
            if not listed and (route.is_admin or served is not None):
                # The framework answers 405 to a method a class-based view lacks (and the list
                # is checked above); admin views render their form for any method.
                continue
            policy = entry[method] if listed else entry.get("GET") or next(iter(entry.values()))
            roles: tuple[str, ...] = ROLES if listed else UNSERVED_ROLES
            if route.is_admin:
                roles = ADMIN_ROLES
            elif len({repr(v) for v in policy.values()}) == 1:
                roles = UNIFORM_ROLES
            for role in roles:
                response = _request(role, method, route, seeded)
                problem = _check(route, method, role, policy[role], response, listed)
                if problem:
                    body = getattr(response, "content", b"")[:200]
                    problems.append(f"{problem} [{body!r}]")
    assert not problems, "\n".join(problems)
