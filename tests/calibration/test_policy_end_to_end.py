"""Trust or escalate end to end (issue 24): a lead locks a plan whose guaranteed-agreement
policy cascades three judges named by judge name and version (before any of their verdicts
exist), three external judges push verdicts with probabilities through
`POST /api/studies/<slug>/verdicts/bulk`, humans label part of the outputs, and the lead asks
for a calibration snapshot through the reports API. The snapshot's per-judge and per-cascade
thresholds, coverage and stage shares are checked against the procedure as Jung, Brahman &
Choi state it ("Trust or Escalate", ICLR 2025, §3), written here without evalstats:
candidate thresholds from 1 down to 0.5 in steps of 0.001, at each the calibration rows the
judge is at least that confident on, their errors k of n, the exact binomial
P(Binom(n, alpha) <= k); accept while it is <= delta, stop at the first that is not;
candidates trusting fewer than `min_count` rows are not tested. A cascade calibrates each
judge in turn on the rows no earlier judge trusts. The agreement bound is checked against
scipy's beta quantile (the one-sided Clopper-Pearson bound).

The three judges are simulated (labelled so in their pushed config): confidences drawn off
the 0.001 grid (so a rounding of 1 - p cannot move a row across a threshold), the judge's
decision right with a known probability rising with its confidence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from scipy import stats

from annotations.models import Annotation, Assignment, QueueEntry, SamplingPlan
from calibration.models import CalibratedScore
from reports.services import report_compute
from snapshots.models import ReportSnapshot
from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study
from studies.services import plan_lock, plan_new_version

pytestmark = pytest.mark.django_db

ALPHA, DELTA, MIN_COUNT, STEP = 0.15, 0.10, 30, 0.001
N_OUTPUTS, N_LABELLED = 420, 320
# name, config hash, P(decision right | confidence c); cheapest first.
JUDGES = [
    # right only when confident: worse than a coin below c = 0.73
    ("cheap", "hash-cheap", lambda c: np.minimum(1.0, 2.2 * c - 1.1)),
    ("mid", "hash-mid", lambda c: 0.1 + 0.9 * c),
    ("strong", "hash-strong", lambda c: np.minimum(1.0, 0.2 + 0.85 * c)),
]
CASCADE = [{"judge": "cheap", "version": "hash-cheap"},  # by config hash
           {"judge": "mid", "version": 1},                # by version number
           {"judge": "strong", "version": "hash-strong"}]


def _binom_cdf(k: int, n: int, p: float) -> float:
    return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def paper_threshold(conf: list[float], right: list[bool]) -> tuple[float | None, int, int]:
    """(threshold, rows trusted, errors among them) by fixed-sequence testing."""
    chosen: tuple[float | None, int, int] = (None, 0, 0)
    for j in range(round(0.5 / STEP) + 1):
        lam = round(1.0 - j * STEP, 12)
        trusted = [c >= lam for c in conf]
        n = sum(trusted)
        if n < MIN_COUNT:
            continue
        k = sum(1 for t, ok in zip(trusted, right, strict=True) if t and not ok)
        if _binom_cdf(k, n, ALPHA) > DELTA:
            break
        chosen = (lam, n, k)
    return chosen


@pytest.fixture
def setup(study: Study, lead: Any, lead_client: Any) -> dict[str, Any]:
    rng = np.random.default_rng(2024)
    rubric = RubricVersion.objects.create(study=study, version=1)
    crit = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                    scale="binary", position=0)
    cand = Candidate.objects.create(study=study, name="m1")
    items = Item.objects.bulk_create([Item(study=study, external_id=f"it-{i}", input="q")
                                      for i in range(N_OUTPUTS)])
    outputs = Output.objects.bulk_create([Output(study=study, item=it, candidate=cand, text="a")
                                          for it in items])
    # The plan first: the cascade names judges whose verdicts do not exist yet.
    spec = {"criteria": {"correct": {"metric": "pass_rate", "threshold": 0.5}},
            "policy": {"kind": "guaranteed_agreement", "alpha": ALPHA, "delta": DELTA,
                       "min_count": MIN_COUNT, "cascade": CASCADE}}
    plan_lock(plan=plan_new_version(study=study, spec=spec, created_by=lead), user=lead)

    human_pass = rng.random(N_OUTPUTS) < 0.6
    probs: dict[str, np.ndarray] = {}
    for name, digest, accuracy in JUDGES:
        conf = (rng.integers(500, 1000, N_OUTPUTS) + 0.5) / 1000  # off the 0.001 grid
        right = rng.random(N_OUTPUTS) < accuracy(conf)
        says_pass = np.where(right, human_pass, ~human_pass)
        p = np.round(np.where(says_pass, conf, 1.0 - conf), 4)
        probs[name] = p
        rows = [{"criterion": "correct", "item": f"it-{i}", "candidate": "m1",
                 "value": "pass" if says_pass[i] else "fail", "probability": float(p[i])}
                for i in range(N_OUTPUTS)]
        r = lead_client.post(f"/api/studies/{study.slug}/verdicts/bulk", {
            "judge": {"name": name, "config_hash": digest, "external": True,
                      "config": {"simulated": True}},
            "verdicts": rows}, format="json")
        assert r.status_code == 201, r.json()

    # Humans label the first N_LABELLED outputs (random draws, one annotator each).
    users = get_user_model()
    rater = users.objects.create(username="rater-e2e")
    sampling = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
    entries = QueueEntry.objects.bulk_create([
        QueueEntry(plan=sampling, output=outputs[i], stratum="", needed=1, draw_kind="random",
                   inclusion_probability=1.0) for i in range(N_LABELLED)])
    assignments = Assignment.objects.bulk_create([
        Assignment(entry=e, annotator=rater, status="submitted") for e in entries])
    Annotation.objects.bulk_create([
        Annotation(annotator=rater, criterion=crit, output_id=e.output_id, assignment=a,
                   plan=sampling, value="pass" if human_pass[i] else "fail",
                   value_num=float(human_pass[i]), severity=None if human_pass[i] else 3)
        for i, (e, a) in enumerate(zip(entries, assignments, strict=True))])
    return {"probs": probs, "human_pass": human_pass, "outputs": outputs}


def _paper(setup: dict[str, Any]) -> dict[str, Any]:
    """Per judge alone and the cascade, on the labelled rows, from the pushed probabilities."""
    hp = setup["human_pass"][:N_LABELLED]
    per: dict[str, tuple[list[float], list[bool]]] = {}
    for name, _, _ in JUDGES:
        p = setup["probs"][name][:N_LABELLED]
        conf = [max(float(x), 1.0 - float(x)) for x in p]
        right = [bool((x >= 0.5) == h) for x, h in zip(p, hp, strict=True)]
        per[name] = (conf, right)
    alone = {name: paper_threshold(*per[name]) for name in per}
    remaining = list(range(N_LABELLED))
    stages = []
    for name, _, _ in JUDGES:
        conf, right = per[name]
        thr, n_t, k_t = paper_threshold([conf[i] for i in remaining],
                                        [right[i] for i in remaining])
        taken = [i for i in remaining if thr is not None and conf[i] >= thr]
        stages.append({"threshold": thr, "n": len(remaining), "n_trusted": len(taken),
                       "errors": sum(1 for i in taken if not right[i])})
        assert len(taken) == n_t and stages[-1]["errors"] == k_t
        remaining = [i for i in remaining if i not in set(taken)]
    return {"alone": alone, "stages": stages}


def test_snapshot_reports_what_the_published_procedure_gives(
    study: Study, lead_client: Any, setup: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    base = f"/api/studies/{study.slug}/reports/calibration/"
    trial = {"kind": "guaranteed_agreement", "alpha": ALPHA, "delta": DELTA,
             "min_count": MIN_COUNT}
    with django_capture_on_commit_callbacks(execute=True):
        r = lead_client.post(base, {"params": {"n_resamples": 50, "curve_resamples": 0,
                                               "seed": 1, "policy": trial}}, format="json")
    assert r.status_code == 202, r.json()
    snap_id = r.json()["id"]
    if ReportSnapshot.objects.get(pk=snap_id).status != ReportSnapshot.Status.DONE:
        report_compute(report_id=snap_id)  # no eager worker in this configuration
    body = lead_client.get(f"{base}{snap_id}/").json()
    assert body["status"] == "done", body
    result = body["result"]
    want = _paper(setup)

    # The locked plan's cascade, with every stage named by judge and version.
    cascade = result["cascades"]["correct"]
    assert cascade["judge_versions"] == [{"judge": n, "version": 1} for n, _, _ in JUDGES]
    stages = want["stages"]
    assert [s["threshold"] for s in cascade["stages"]] == pytest.approx(
        [s["threshold"] for s in stages])
    assert [s["n"] for s in cascade["stages"]] == [s["n"] for s in stages]
    assert [s["n_trusted"] for s in cascade["stages"]] == [s["n_trusted"] for s in stages]
    assert [s["errors_trusted"] for s in cascade["stages"]] == [s["errors"] for s in stages]
    assert cascade["shares"] == pytest.approx([s["n_trusted"] / N_LABELLED for s in stages])
    n_trusted = sum(s["n_trusted"] for s in stages)
    errors = sum(s["errors"] for s in stages)
    assert cascade["n"] == N_LABELLED
    assert cascade["coverage"] == pytest.approx(n_trusted / N_LABELLED)
    assert cascade["agreement"] == pytest.approx((n_trusted - errors) / n_trusted)
    assert cascade["guaranteed_level"] == pytest.approx(1 - ALPHA)
    # The data make every stage count: each trusts something the earlier ones did not.
    assert all(s["n_trusted"] > 0 for s in stages), stages
    assert n_trusted < N_LABELLED

    # Per judge, the whole-study cell reports its stage of the cascade.
    by_judge = {c["judge"]: c for c in result["cells"]
                if c["criterion"] == "correct" and c["stratum"] == ""}
    assert len(by_judge) == 3
    for (name, _, _), stage, want_stage in zip(JUDGES, cascade["stages"], stages, strict=True):
        cell = next(c for display, c in by_judge.items() if display.startswith(name))
        trust = cell["trust"]
        assert trust["threshold"] == pytest.approx(want_stage["threshold"])
        assert trust["n_trusted"] == want_stage["n_trusted"] == stage["n_trusted"]
        assert trust["score"] == "confidence"
        n_t, k_t = want_stage["n_trusted"], want_stage["errors"]
        # One-sided Clopper-Pearson lower bound on agreement at 1 - delta.
        assert trust["agreement_lower"] == pytest.approx(
            float(stats.beta.ppf(DELTA, n_t - k_t, k_t + 1)), abs=1e-9)

    # Each judge alone (the exploratory trial of the same policy without a cascade).
    assert result["policy_trial"]["exploratory"] is True
    alone = result["policy_trial"]["judges"]["correct"]
    for name, _, _ in JUDGES:
        got = next(v for display, v in alone.items() if display.startswith(name))
        thr, n_t, k_t = want["alone"][name]
        assert got["threshold"] == pytest.approx(thr)
        assert (got["n_trusted"], got["errors_trusted"]) == (n_t, k_t)
        assert got["coverage"] == pytest.approx(n_t / N_LABELLED)

    # Served decisions (unlabelled outputs): the first stage confident enough decides with
    # its own verdict; where none is, the output is escalated.
    thresholds = [s["threshold"] for s in stages]
    served = {
        row.output_id: row for row in CalibratedScore.objects.filter(
            snapshot_id=snap_id, criterion_key="correct", source="judge")
        .select_related("judge_version__judge")
    }
    decided: dict[str, int] = {}
    for i in range(N_LABELLED, N_OUTPUTS):
        row = served[setup["outputs"][i].pk]
        expected, by = "escalate", None
        for (name, _, _), thr in zip(JUDGES, thresholds, strict=True):
            p = float(setup["probs"][name][i])
            if thr is not None and max(p, 1 - p) >= thr:
                expected, by = ("pass" if p >= 0.5 else "fail"), name
                break
        assert row.decision == expected, (i, row.decision, expected)
        if by is not None:
            assert row.judge_version.judge.name == by
        decided[by or "escalated"] = decided.get(by or "escalated", 0) + 1
    # Later stages and escalation both serve some of them.
    assert decided.get("mid", 0) and decided.get("strong", 0) and decided.get("escalated", 0), \
        decided
