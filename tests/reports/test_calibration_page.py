"""The lead's calibration page: renders a snapshot's figures, escapes hostile labels, draws the
reliability diagrams, builds snapshots and sends escalations; hidden from everyone else."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import QueueEntry, SamplingPlan
from snapshots.models import ReportSnapshot
from studies.models import Membership, Study
from tests.calibration.scores_factory import World, snapshot_make, world_make
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def _diag(shift: float) -> dict[str, Any]:
    bins = [{"lower": i / 5, "upper": (i + 1) / 5, "count": 10 + i, "weight": 10.0 + i,
             "mean_predicted": i / 5 + 0.1, "fraction_pass": min(1.0, i / 5 + 0.1 + shift)}
            for i in range(5)]
    est = {"value": 0.04 + shift, "ci_low": 0.02, "ci_high": 0.09}
    return {"bins": bins, "ece": est, "ece_mass": est, "brier": {"value": 0.2},
            "log_loss": {"value": 0.6}, "auroc": {"value": 0.8}, "n": 60}


def _cell(world: World, **kw: Any) -> dict[str, Any]:
    cell = {
        "judge_version": world.judges[0].pk, "judge": f"judge {HOSTILE} $x$", "criterion":
        "correct", "stratum": f"language={HOSTILE}", "n_labels": 12, "too_few_labels": False,
        "method": "isotonic", "own_weight": 0.2, "borrowed": 0.8, "pooled_only": False,
        "cv_log_loss": {"isotonic": 0.5, "platt": 0.55},
        "diagnostics": {"before": _diag(0.15), "after": _diag(0.0)},
        "curve": {"x": [0.0, 0.5, 1.0], "y": [0.1, 0.5, 0.9]},
        "false_pass_cost": {"expected": {"value": 7.25, "ci_low": 5.5, "ci_high": 9.0}},
        "false_fail_cost": 1.0,
        "thresholds": {"pass_above": 0.875, "fail_below": 0.125, "fail_cost": 7.25,
                       "reject_cost": 1.0, "review_cost": 0.5},
        "policy_costs": {"raw": {"value": 812.0}, "calibrated": {"value": 301.0},
                         "human_only": {"value": 500.0}, "n": 60},
        "trust": {"threshold": 0.91, "alpha": 0.1, "delta": 0.05, "coverage": 0.73,
                  "n_trusted": 44, "errors_trusted": 2, "agreement": 0.95,
                  "agreement_lower": 0.917, "tested": 5, "min_count": 30},
    }
    return {**cell, **kw}


def _result(world: World) -> dict[str, Any]:
    return {
        "version": 1, "kind": "calibration", "plan_version": None, "fingerprint": "f" * 64,
        "params": {"min_labels": 10},
        "costs": {"unit": f"EUR{HOSTILE}", "severity": {str(i): float(i * i) for i in
                                                         range(1, 6)},
                  "false_fail": 1.0, "review": 0.5, "is_default": True},
        "policy": {"kind": "guaranteed_agreement", "alpha": 0.1, "delta": 0.05,
                   "min_count": 30, "is_default": False},
        "cells": [_cell(world), _cell(world, criterion=HOSTILE, stratum="", n_labels=3,
                                      too_few_labels=True, method=None, diagnostics={
                                          "before": None, "after": None},
                                      curve={"x": [], "y": []}, policy_costs=None,
                                      trust=None, thresholds=None)],
        "cascade": {"stages": [], "coverage": 0.64, "guaranteed_level": 0.9},
        "n_scores": 30, "warnings": [f"warning {HOSTILE}"],
    }


@pytest.fixture
def world(study: Study) -> World:
    return world_make(study)


@pytest.fixture
def lead_page(lead: Any) -> Client:
    client = Client()
    client.force_login(lead)
    return client


def _page(slug: str) -> str:
    return reverse("reports-calibration", kwargs={"slug": slug})


def test_renders_figures_and_escapes_hostile_text(world: World, lead_page: Client) -> None:
    snap = snapshot_make(world, result=_result(world))
    r = lead_page.get(_page(world.study.slug))
    assert r.status_code == 200
    html = r.content.decode()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert f"snapshot #{snap.pk}" in html
    # costs, thresholds, policy costs per 1,000, guaranteed agreement, cascade
    for text in ("Passing a failure of severity 5", "25.0", "fail below 0.125, pass from 0.875",
                 "7.25 [5.50, 9.00]", "812", "301", "coverage 0.73, agreement 0.950, ≥ 0.917",
                 "0.640 of outputs decided without humans", "too few labels", "80 % borrowed"):
        assert text in html, text
    # the advice, from calibration.advice (12 labels borrowing 80 %: 36 more)
    assert "12 human labels, curve borrowed 80 % from the pool; label 36 more." in html
    # table fallback of the bins and one chart per cell
    assert html.count("<caption>Before calibration (raw score)</caption>") == 2
    chart = reverse("reports-calibration-reliability",
                    kwargs={"slug": world.study.slug, "snapshot_id": snap.pk})
    assert f"{chart}?cell=0" in html and f"{chart}?cell=1" in html
    # The study navigation links the page.
    assert f'href="{_page(world.study.slug)}" aria-current="page">Calibration' in html
    # The plain mean of every failure is used here: no score note.
    assert "of the failures the judge passes" not in html


def test_says_when_the_false_pass_cost_follows_the_judge_score(
        world: World, lead_page: Client) -> None:
    result = _result(world)
    result["cells"][0]["false_pass_cost"] = {
        "expected": {"value": 4.5, "ci_low": 3.0, "ci_high": 6.0},
        "all_failures": {"value": 12.25, "ci_low": 10.0, "ci_high": 14.5},
        "used": "score_weighted", "depends_on_score": True,
    }
    snapshot_make(world, result=result)
    html = lead_page.get(_page(world.study.slug)).content.decode()
    assert "4.50 [3.00, 6.00]" in html
    assert ("of the failures the judge passes (severity depends on its score); all failures "
            "12.25") in html


def test_reliability_svg(world: World, lead_page: Client) -> None:
    snap = snapshot_make(world, result=_result(world))
    url = reverse("reports-calibration-reliability",
                  kwargs={"slug": world.study.slug, "snapshot_id": snap.pk})
    for cell in (0, 1):
        r = lead_page.get(url, {"cell": cell})
        assert r.status_code == 200 and r["Content-Type"] == "image/svg+xml"
        assert r["Content-Security-Policy"].startswith("default-src 'none'")
        svg = r.content.decode()
        assert "<script>" not in svg and svg.lstrip().startswith("<?xml")
    for bad in ("2", "-1", "x", ""):
        assert lead_page.get(url, {"cell": bad}).status_code == 404
    agreement = ReportSnapshot.objects.create(study=world.study, kind="agreement")
    other = reverse("reports-calibration-reliability",
                    kwargs={"slug": world.study.slug, "snapshot_id": agreement.pk})
    assert lead_page.get(other, {"cell": 0}).status_code == 404


def test_older_snapshot_by_id_and_empty_state(world: World, lead_page: Client) -> None:
    r = lead_page.get(_page(world.study.slug))
    assert r.status_code == 200 and b"No calibration snapshot yet" in r.content
    first = snapshot_make(world, result=_result(world))
    snapshot_make(world)
    r = lead_page.get(_page(world.study.slug), {"snapshot": first.pk})
    assert r.status_code == 200 and f"snapshot #{first.pk}".encode() in r.content
    for bad in ("x", "999999", "99999999999999999999999"):
        assert lead_page.get(_page(world.study.slug), {"snapshot": bad}).status_code == 404


def test_pending_snapshot_refreshes(world: World, lead_page: Client) -> None:
    snapshot_make(world, result=_result(world))
    pending = ReportSnapshot.objects.create(study=world.study, kind="calibration")
    r = lead_page.get(_page(world.study.slug))
    assert f"Snapshot #{pending.pk} is pending".encode() in r.content
    assert b'http-equiv="refresh"' in r.content


def test_build_and_escalate_forms(world: World, lead_page: Client,
                                  django_capture_on_commit_callbacks: Any) -> None:
    snap = snapshot_make(world, result=_result(world))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        r = lead_page.post(_page(world.study.slug), {"action": "build", "seed": "3"})
    assert r.status_code == 302 and r["Location"] == _page(world.study.slug)
    built = ReportSnapshot.objects.filter(study=world.study, kind="calibration").order_by("-id")[0]
    assert built.pk != snap.pk and built.status == "pending" and built.params["seed"] == 3
    assert len(callbacks) == 1  # the computation is enqueued once committed
    r = lead_page.post(_page(world.study.slug), {"action": "build", "seed": "x"})
    assert r.status_code == 400 and b"message-error" in r.content

    r = lead_page.post(_page(world.study.slug),
                       {"action": "escalate", "snapshot": str(snap.pk), "limit": "2"})
    assert r.status_code == 302
    plan = SamplingPlan.objects.get(study=world.study)
    assert QueueEntry.objects.filter(plan=plan, draw_kind="escalation").count() == 2
    page = lead_page.get(_page(world.study.slug)).content.decode()
    assert f"Sent: 2 outputs of snapshot #{snap.pk} are sampling plan v1" in page
    lead_page.post(_page(world.study.slug), {"action": "escalate", "snapshot": str(snap.pk)})
    assert SamplingPlan.objects.filter(study=world.study).count() == 1
    assert "Already sent" in lead_page.get(_page(world.study.slug)).content.decode()
    r = lead_page.post(_page(world.study.slug), {"action": "escalate", "limit": "0"})
    assert r.status_code == 400
    r = lead_page.post(_page(world.study.slug), {"action": "nope"})
    assert r.status_code == 400


def test_only_leads_see_it(world: World) -> None:
    snap = snapshot_make(world, result=_result(world))
    chart = reverse("reports-calibration-reliability",
                    kwargs={"slug": world.study.slug, "snapshot_id": snap.pk})
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR, None):
        user = UserFactory(username=f"u-{role}")
        if role is not None:
            MembershipFactory(study=world.study, user=user, role=role)
        client = Client()
        client.force_login(user)
        assert client.get(_page(world.study.slug)).status_code == 404
        assert client.get(chart, {"cell": 0}).status_code == 404
        assert client.post(_page(world.study.slug), {"action": "build"}).status_code == 404
    r = Client().get(_page(world.study.slug))
    assert r.status_code == 302 and "login" in r["Location"]
