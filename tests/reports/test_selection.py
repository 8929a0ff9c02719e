"""The selection report kind end to end on PostgreSQL: a SIMULATED study built with a known
truth (a flip and a gate failure the report must find), the REST API, the offline command,
bad input refused with a 400 naming the field, no-data cells, a study without human labels,
deviations from the locked plan, the next-labels sampling plan and the load's query bound.

The simulated study (every name says "simulated"): items in three strata of "length"
(short, long, and items without a length label, which fall in "unknown"). Humans pass an
output of candidate X in stratum s with probability TRUTH[X][s]. The judge agrees with the
human label 85 % of the time and records P(pass). A random 40 % of the items are labelled by
one simulated annotator on every candidate's output, drawn with inclusion probability 0.4.
"borealis" is best on short (and on the mix), "atlas" on long: a flip. "cirrus" errors on 10 %
of its outputs: it fails the plan's error-rate gate, though it leads the public benchmark.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotations.models import (
    Adjudication,
    Annotation,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)
from judges.models import Judge, JudgeVersion, Verdict
from reports.selection.load import (
    LOAD_MAX_QUERIES,
    LOAD_PAIRWISE_QUERIES,
    selection_inputs_load,
)
from reports.selection.results import SelectionResult
from reports.services import report_compute, report_snapshot_create
from reviewhub.errors import ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import (
    AnalysisPlan,
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

N_ITEMS = {"short": 600, "long": 300, "unknown": 100}
TRUTH = {
    "borealis (simulated)": {"short": 0.95, "long": 0.55, "unknown": 0.75},
    "atlas (simulated)": {"short": 0.60, "long": 0.85, "unknown": 0.75},
    "cirrus (simulated)": {"short": 0.50, "long": 0.50, "unknown": 0.50},
}
ERROR_RATE = {"borealis (simulated)": 0.0, "atlas (simulated)": 0.0, "cirrus (simulated)": 0.10}
PUBLIC = {"borealis (simulated)": 70.0, "atlas (simulated)": 75.0, "cirrus (simulated)": 90.0}
MIX = {"short": 0.6, "long": 0.3, "unknown": 0.1}
PI = 0.4
FAST = {"n_resamples": 200, "seed": 7}
PLAN_SPEC = {
    "criteria": {"correct": {"metric": "pass_rate", "threshold": 0.5}},
    "strata": ["length"],
    "deployment_mix": {"length": MIX},
    "confidence_level": 0.95,
    "primary_metric": "rubric_pass_rate",
    "gates": {"error_rate": 0.02, "latency_p95_ms": 4000},
}


def build_selection_study(
    *, seed: int = 12, truth: dict[str, dict[str, float]] | None = None, labelled: bool = True,
    slug: str = "sel-sim", plan_spec: dict[str, Any] | None = None,
    extra_candidate: bool = False,
) -> dict[str, Any]:
    """The simulated study of the module docstring; returns its objects and the truth."""
    truth = truth or TRUTH
    rng = np.random.default_rng(seed)
    users = get_user_model()
    owner = UserFactory(username=f"{slug}-lead")
    annotator = users.objects.create(username=f"sim-annotator-{slug}")
    study = StudyFactory(owner=owner, slug=slug, name="Selection (simulated)", is_simulated=False)
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    rubric = RubricVersion.objects.create(study=study, version=1)
    correct = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                       scale="binary", is_hard_gate=True, position=0)
    helpful = Criterion.objects.create(
        rubric=rubric, key="helpful", name="Helpful", scale="ordinal", position=1,
        points=[{"value": v, "label": str(v)} for v in range(1, 6)])
    StratumDimension.objects.create(study=study, key="length", name="Length",
                                    kind="categorical", source="metadata.length", position=0)
    items = Item.objects.bulk_create([
        Item(study=study, external_id=f"{h}-{i}", input="q",
             strata={} if h == "unknown" else {"length": h})
        for h, n in N_ITEMS.items() for i in range(n)
    ])
    strata = np.array([it.strata.get("length", "unknown") for it in items])
    names = list(truth)
    if extra_candidate:
        names.append("dune (simulated)")
    cands = {n: Candidate.objects.create(study=study, name=n, model_family="simulated",
                                         public_scores={"mmlu": PUBLIC.get(n, 60.0)})
             for n in names}
    judge = Judge.objects.create(study=study, name="sim-judge (simulated)", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="s" * 16,
                                    simulated=True)
    labelled_items = rng.random(len(items)) < PI
    outputs: list[Output] = []
    human: list[bool] = []
    for name in names:
        p_by = truth.get(name, truth[names[0]])
        for it, h in zip(items, strata, strict=True):
            if name == "dune (simulated)" and h != "short":
                continue  # a candidate without outputs outside "short": no data there
            err = rng.random() < ERROR_RATE.get(name, 0.0)
            outputs.append(Output(
                study=study, item=it, candidate=cands[name], text="a",
                latency_ms=float(rng.lognormal(6.5, 0.4)), tokens_in=100, tokens_out=50,
                cost=0.001 if name != "cirrus (simulated)" else 0.003,
                error="simulated 503" if err else "", schema_valid=True))
            human.append(bool(rng.random() < p_by[str(h)]))
    outputs = Output.objects.bulk_create(outputs, batch_size=2000)
    item_pos = {it.pk: i for i, it in enumerate(items)}
    verdicts = []
    for o, passed in zip(outputs, human, strict=True):
        agree = rng.random() < 0.85
        says = passed if agree else not passed
        verdicts.append(Verdict(judge_version=jv, criterion=correct, output=o,
                                value="pass" if says else "fail",
                                value_num=1.0 if says else 0.0,
                                probability=0.8 if says else 0.2))
        level = int(np.clip(round(3 + (1 if passed else -1) + rng.normal(0, 0.7)), 1, 5))
        verdicts.append(Verdict(judge_version=jv, criterion=helpful, output=o, value=str(level),
                                value_num=float(level)))
    Verdict.objects.bulk_create(verdicts, batch_size=5000)
    if labelled:
        plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
        chosen = [(o, passed) for o, passed in zip(outputs, human, strict=True)
                  if labelled_items[item_pos[o.item_id]]]
        entries = QueueEntry.objects.bulk_create([
            QueueEntry(plan=plan, output=o, stratum=str(strata[item_pos[o.item_id]]), needed=1,
                       draw_kind="random", inclusion_probability=PI)
            for o, _ in chosen])
        assignments = Assignment.objects.bulk_create([
            Assignment(entry=e, annotator=annotator, status="submitted") for e in entries])
        anns = []
        for (o, passed), a in zip(chosen, assignments, strict=True):
            anns.append(Annotation(annotator=annotator, criterion=correct, output=o,
                                   assignment=a, plan=plan, value="pass" if passed else "fail",
                                   value_num=1.0 if passed else 0.0,
                                   severity=None if passed else 3))
            level = 4 if passed else 2
            anns.append(Annotation(annotator=annotator, criterion=helpful, output=o,
                                   assignment=a, plan=plan, value=str(level),
                                   value_num=float(level)))
        Annotation.objects.bulk_create(anns, batch_size=5000)
    AnalysisPlan.objects.create(study=study, version=1, locked_at=timezone.now(),
                                spec=plan_spec if plan_spec is not None else PLAN_SPEC)
    return {"study": study, "owner": owner, "outputs": outputs, "human": human, "jv": jv,
            "strata": strata, "labelled_items": labelled_items, "cands": cands}


def _build_report(study: Study, params: dict[str, Any] | None = None) -> SelectionResult:
    snap = report_snapshot_create(study=study, kind="selection", params={**FAST, **(params or {})},
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done", done.error
    return SelectionResult.from_json(done.result)


def _errors(exc: pytest.ExceptionInfo[ValidationFailed]) -> list[str]:
    return [e["path"] for e in exc.value.details["errors"]]


@pytest.fixture
def built() -> dict[str, Any]:
    return build_selection_study()


def test_the_report_finds_the_flip_and_the_gate_failure(built: dict[str, Any]) -> None:
    import jsonschema

    snap = report_snapshot_create(study=built["study"], kind="selection", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done", done.error
    jsonschema.validate(done.result, SelectionResult.json_schema())
    r = SelectionResult.from_json(done.result)
    assert r.to_json() == done.result
    assert (r.plan_version, r.plan_followed, r.mix_source, r.dimension) == (1, True, "plan",
                                                                            "length")
    assert r.simulated is True and r.judge is not None and r.judge.simulated
    assert set(r.strata) == {"short", "long", "unknown"} and r.mix == MIX
    b, a, c = "borealis (simulated)", "atlas (simulated)", "cirrus (simulated)"
    # The gate failure: cirrus's 10 % errors against a 2 % ceiling (Wilson upper bound).
    assert r.gate_failures == {c: ("error_rate",)}
    row = next(g for g in r.gates if g.candidate == c and g.stratum == "mix"
               and g.gate == "error_rate")
    assert row.passed is False and row.bound is not None and row.bound > 0.02
    # The decision: borealis on the mix over atlas, with the flip on long.
    assert r.decision.verdict == "ship" and r.decision.candidate == b
    assert r.decision.runner_up == a
    assert r.decision.text.startswith("Ship borealis (simulated): it passes every gate")
    assert "cirrus (simulated) fails the gate error rate." in r.decision.text
    assert ("Ranking flip: atlas (simulated) is better than borealis (simulated) on long"
            in r.decision.text)
    assert "long" in [f.stratum for f in r.flips] and "short" not in [f.stratum for f in r.flips]
    flip = next(f for f in r.flips if f.stratum == "long")
    assert (flip.best, flip.mix_best, flip.correction) == (a, b, "holm")
    assert flip.p_adjusted < 0.05 and flip.difference.value is not None
    assert flip.difference.value > 0
    # The mix estimate is near the truth re-weighted to the mix (PPI interval covers it).
    for name in (a, b):
        est = r.estimate(name, "rubric_pass_rate", "mix")
        assert est is not None and est.ppi is not None
        want = sum(MIX[h] * TRUTH[name][h] for h in MIX)
        assert est.ppi.ci_low is not None and est.ppi.ci_high is not None
        assert est.ppi.ci_low - 0.03 <= want <= est.ppi.ci_high + 0.03
        # PPI with a good judge is narrower than human-only.
        assert est.human is not None and est.human.ci_low is not None
        assert (est.ppi.ci_high - est.ppi.ci_low) < (est.human.ci_high - est.human.ci_low)
    # The public leader sits low privately: flagged, with the evidence.
    assert r.public_vs_private is not None and r.public_vs_private.benchmark == "mmlu"
    assert [f.candidate for f in r.public_vs_private.flags] == [c]
    assert "contamination" in r.public_vs_private.flags[0].message
    assert {m.key for m in r.metrics} == {"rubric_pass_rate", "expected_cost",
                                          "pass_rate:correct", "mean_score:helpful"}
    assert r.next_labels is None and r.missing == ()


def test_the_command_builds_it_offline(built: dict[str, Any], tmp_path: Any) -> None:
    import json

    out = tmp_path / "sel.json"
    call_command("report", "selection", "--study", built["study"].slug,
                 "--params", json.dumps(FAST), "--out", str(out))
    data = json.loads(out.read_text())
    assert data["kind"] == "selection" and data["status"] == "done"
    assert SelectionResult.from_json(data["result"]).decision.verdict == "ship"


def test_api_build_list_detail_and_roles(
    built: dict[str, Any], client_for: Any, django_capture_on_commit_callbacks: Any
) -> None:
    study = built["study"]
    lead = client_for(built["owner"])
    base = f"/api/studies/{study.slug}/reports/selection/"
    with django_capture_on_commit_callbacks(execute=True):
        resp = lead.post(base, {"params": FAST}, format="json")
    assert resp.status_code == 202, resp.content
    sid = resp.json()["id"]
    assert resp.json()["url"] == f"{base}{sid}/"
    listed = lead.get(base)
    assert listed.status_code == 200 and [r["id"] for r in listed.json()["results"]] == [sid]
    detail = lead.get(f"{base}{sid}/")
    assert detail.status_code == 200 and detail.json()["status"] == "done"
    assert detail.json()["result"]["decision"]["verdict"] == "ship"
    # Another kind's URL does not find it.
    assert lead.get(f"/api/studies/{study.slug}/reports/calibration/{sid}/").status_code == 404
    viewer = UserFactory(username="sel-viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    assert client_for(viewer).get(f"{base}{sid}/").status_code == 200
    assert client_for(viewer).post(base, {"params": FAST}, format="json").status_code == 403
    grader = UserFactory(username="sel-annotator")
    MembershipFactory(study=study, user=grader, role=Membership.Role.ANNOTATOR)
    assert client_for(grader).get(f"{base}{sid}/").status_code == 403


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"mix": {"short": 0.5, "long": 0.3, "unknown": 0.1}}, "params.mix"),
        ({"mix": {"short": 0.6, "long": 0.3, "medium": 0.1}}, "params.mix.medium"),
        ({"mix": {"short": 0.7, "long": 0.3}}, "params.mix.unknown"),
        ({"mix": {"short": 1.5}}, "params.mix.short"),
        ({"dimension": "colour"}, "params.dimension"),
        ({"judge": 999999}, "params.judge"),
        ({"candidates": ["nobody"]}, "params.candidates"),
        ({"n_resamples": 5}, "params.n_resamples"),
        ({"bogus": 1}, "params.bogus"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    built: dict[str, Any], client_for: Any, params: dict[str, Any], path: str
) -> None:
    study = built["study"]
    resp = client_for(built["owner"]).post(f"/api/studies/{study.slug}/reports/selection/",
                                           {"params": params}, format="json")
    assert resp.status_code == 400, resp.content
    paths = [e["path"] for e in resp.json()["error"]["details"]["errors"]]
    assert path in paths
    assert not ReportSnapshot.objects.filter(study=study, kind="selection").exists()


def test_a_plan_mix_omitting_unknown_is_refused() -> None:
    spec = {**PLAN_SPEC, "deployment_mix": {"length": {"short": 0.7, "long": 0.3}}}
    data = build_selection_study(plan_spec=spec, slug="sel-nounknown")
    with pytest.raises(ValidationFailed) as exc:
        report_snapshot_create(study=data["study"], kind="selection", params=FAST,
                               created_by=None)
    assert "plan.deployment_mix.length.unknown" in _errors(exc)


def test_no_data_is_never_a_zero() -> None:
    data = build_selection_study(extra_candidate=True, slug="sel-nodata")
    r = _build_report(data["study"])
    d = "dune (simulated)"
    for h in ("long", "unknown"):
        row = r.estimate(d, "rubric_pass_rate", h)
        assert row is not None and row.no_data is True and row.n_outputs == 0
        assert row.human is None and row.judge is None and row.ppi is None
    short = r.estimate(d, "rubric_pass_rate", "short")
    assert short is not None and not short.no_data and short.ppi is not None
    # Its mix needs the strata it has no outputs in: no mix estimate, and no rank there.
    mix = r.estimate(d, "rubric_pass_rate", "mix")
    assert mix is not None and mix.ppi is None
    assert d not in next(k for k in r.rankings if k.stratum == "mix").order
    # No label can ever be had where it has no outputs: it is left out of the decision,
    # which is made on the others (not "not enough evidence").
    assert r.decision.verdict == "ship" and r.decision.candidate == "borealis (simulated)"
    assert d not in r.decision.text


def test_without_human_labels_the_report_says_what_is_missing() -> None:
    data = build_selection_study(labelled=False, slug="sel-nolabels")
    r = _build_report(data["study"])
    assert r.decision.verdict == "not_enough_evidence"
    assert r.decision.headline == "Not enough evidence"
    # Three candidates x three strata, two labels each at least: 18 missing.
    assert r.decision.labels_needed == 18
    assert "about 18 more human labels on Rubric pass rate are needed" in r.decision.text
    assert r.missing[0].startswith("no human label yet")
    row = r.estimate("atlas (simulated)", "rubric_pass_rate", "short")
    assert row is not None and row.human is None and row.ppi is None and row.judge is not None
    assert row.n_labelled == 0


def test_a_changed_mix_is_a_deviation(built: dict[str, Any]) -> None:
    mix = {"short": 0.2, "long": 0.7, "unknown": 0.1}
    r = _build_report(built["study"], {"mix": mix})
    assert r.mix_source == "params" and r.mix == mix and r.plan_followed is False
    assert [d.field for d in r.deviations] == ["mix"]
    assert "long" in r.deviations[0].message and "short" in r.deviations[0].message
    # With long weighing 70 %, atlas wins the mix: the flip is now on short.
    assert r.decision.candidate == "atlas (simulated)"


def test_too_close_gives_next_labels_and_the_plan_action(client_for: Any) -> None:
    even = {"borealis (simulated)": {"short": 0.7, "long": 0.7, "unknown": 0.7},
            "atlas (simulated)": {"short": 0.7, "long": 0.7, "unknown": 0.7}}
    data = build_selection_study(truth=even, slug="sel-close")
    study = data["study"]
    r = _build_report(study)
    assert r.decision.verdict == "too_close" and "Too close to call" in r.decision.text
    assert r.next_labels is not None and r.next_labels.total > 0
    assert set(r.next_labels.per_stratum) <= {"short", "long", "unknown"}
    snap = ReportSnapshot.objects.filter(study=study, kind="selection").latest("id")
    url = f"/api/studies/{study.slug}/reports/selection/{snap.pk}/next-labels/"
    viewer = UserFactory(username="sel-close-viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    assert client_for(viewer).post(url).status_code == 403
    resp = client_for(data["owner"]).post(url)
    assert resp.status_code == 201, resp.content
    body = resp.json()
    plan = SamplingPlan.objects.get(pk=body["plan_id"])
    assert plan.is_active and plan.spec["mode"] == "per_stratum"
    assert plan.spec["dimension"] == "length"
    assert body["requested"] == {k: v for k, v in r.next_labels.per_stratum.items() if v > 0}
    # Each stratum draws its own request times the two candidates, not the largest everywhere.
    assert body["drawn"] == {k: 2 * v for k, v in body["requested"].items()}
    assert plan.spec["counts"] == body["drawn"] and plan.spec.get("n") is None
    assert body["drawn_per_stratum"] == max(body["drawn"].values()) and body["entries"] > 0
    design = plan.summary["designs"]
    for label, n in body["drawn"].items():
        assert design[label]["drawn"] == min(n, design[label]["population"])


def test_next_labels_refused_when_the_report_asks_for_none(
    built: dict[str, Any], client_for: Any
) -> None:
    study = built["study"]
    _build_report(study)
    snap = ReportSnapshot.objects.filter(study=study, kind="selection").latest("id")
    resp = client_for(built["owner"]).post(
        f"/api/studies/{study.slug}/reports/selection/{snap.pk}/next-labels/")
    assert resp.status_code == 409


def test_the_load_is_a_bounded_number_of_queries(built: dict[str, Any]) -> None:
    plan = AnalysisPlan.objects.get(study=built["study"])
    from reports.selection.params import params_validate

    params = params_validate(FAST)
    with CaptureQueriesContext(connection) as ctx:
        inputs = selection_inputs_load(built["study"], params, plan)
    # No pairwise criterion: none of the comparisons' queries.
    assert len(ctx.captured_queries) <= LOAD_MAX_QUERIES - LOAD_PAIRWISE_QUERIES, [
        q["sql"][:80] for q in ctx.captured_queries]
    # What it read: one row per output, labels on the drawn items only, weights 1 / pi.
    outs = inputs.outputs
    assert len(outs) == len(built["outputs"])
    y = outs["y:pass_rate:correct"].to_numpy()
    labelled = np.isfinite(y)
    assert labelled.sum() == sum(built["labelled_items"]) * 3
    assert np.allclose(outs["weight"].to_numpy()[labelled], 1 / PI)
    by_id = {o.pk: h for o, h in zip(built["outputs"], built["human"], strict=True)}
    got = dict(zip(outs["output"].to_numpy()[labelled].tolist(), y[labelled].tolist(),
                   strict=True))
    assert all(got[k] == float(by_id[k]) for k in got)
    assert set(outs["stratum"]) == {"short", "long", "unknown"}


# --- a SIMULATED pairwise study: win rates and Bradley-Terry strengths -------------------------

# Bradley-Terry strengths (log-odds) of the simulated candidates per stratum: borealis leads on
# short, atlas on long; cirrus trails everywhere.
PAIR_STRENGTH = {
    "borealis (simulated)": {"short": 1.0, "long": 0.0, "unknown": 0.5},
    "atlas (simulated)": {"short": 0.0, "long": 1.0, "unknown": 0.5},
    "cirrus (simulated)": {"short": -1.0, "long": -1.0, "unknown": -1.0},
}
PAIR_ITEMS = {"short": 120, "long": 80, "unknown": 20}
PAIR_PLAN = {
    "criteria": {"preferred": {"metric": "win_rate", "threshold": 0.5,
                               "baseline": "cirrus (simulated)"}},
    "strata": ["length"],
    "deployment_mix": {"length": MIX},
    "confidence_level": 0.95,
}


def build_pairwise_study(*, seed: int = 4, slug: str = "sel-pair",
                         with_outputs_criterion: bool = False) -> dict[str, Any]:
    """A pairwise-only study (SIMULATED): every item compares each pair of the three
    candidates once, stored in a random A/B order; humans prefer A with the Bradley-Terry
    probability of `PAIR_STRENGTH` (ties when it is nearly even); the judge agrees with the
    humans 80 % of the time. A random 40 % of the comparisons are labelled by one annotator
    (inclusion probability 0.4); a second annotator says "tie" on the first three of them; the
    fourth has an adjudication ("B"), one more comparison only a gold label ("A") and one only
    an escalation. `with_outputs_criterion`: a binary criterion on the outputs too, judged on
    every output and labelled on the first 30 (a study mixing both kinds of criteria)."""
    rng = np.random.default_rng(seed)
    users = get_user_model()
    owner: Any = UserFactory(username=f"{slug}-lead")
    ann1 = users.objects.create(username=f"sim-annotator-{slug}-1")
    ann2 = users.objects.create(username=f"sim-annotator-{slug}-2")
    study: Any = StudyFactory(owner=owner, slug=slug, name="Pairwise (simulated)")
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    rubric = RubricVersion.objects.create(study=study, version=1)
    pref = Criterion.objects.create(rubric=rubric, key="preferred", name="Preferred",
                                    scale="pairwise", position=0)
    StratumDimension.objects.create(study=study, key="length", name="Length",
                                    kind="categorical", source="metadata.length", position=0)
    items = Item.objects.bulk_create([
        Item(study=study, external_id=f"{h}-{i}", input="q",
             strata={} if h == "unknown" else {"length": h})
        for h, n in PAIR_ITEMS.items() for i in range(n)])
    names = list(PAIR_STRENGTH)
    cands = {n: Candidate.objects.create(study=study, name=n, model_family="simulated")
             for n in names}
    outs = Output.objects.bulk_create([
        Output(study=study, item=it, candidate=cands[n], text="a", latency_ms=900.0,
               tokens_in=10, tokens_out=10, cost=0.001)
        for it in items for n in names])
    by = {(o.item_id, o.candidate_id): o for o in outs}
    judge = Judge.objects.create(study=study, name="sim-judge (simulated)", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="p" * 16,
                                    simulated=True)
    cmps: list[Comparison] = []
    truth: list[str] = []
    for it in items:
        h = it.strata.get("length", "unknown")
        for i in range(3):
            for j in range(i + 1, 3):
                first, second = (names[i], names[j]) if rng.random() < 0.5 else \
                    (names[j], names[i])
                p_a = 1 / (1 + np.exp(-(PAIR_STRENGTH[first][h] - PAIR_STRENGTH[second][h])))
                u = rng.random()
                truth.append("tie" if abs(u - p_a) < 0.05 else ("A" if u < p_a else "B"))
                cmps.append(Comparison(study=study, item=it,
                                       output_a=by[(it.pk, cands[first].pk)],
                                       output_b=by[(it.pk, cands[second].pk)]))
    cmps = Comparison.objects.bulk_create(cmps)
    score = {"A": 1.0, "B": 0.0, "tie": 0.5}
    says = [t if rng.random() < 0.8 else str(rng.choice(["A", "B", "tie"])) for t in truth]
    Verdict.objects.bulk_create([
        Verdict(judge_version=jv, criterion=pref, comparison=c, value=v, value_num=score[v])
        for c, v in zip(cmps, says, strict=True)])
    labelled = np.flatnonzero(rng.random(len(cmps)) < PI)
    plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
    entries = QueueEntry.objects.bulk_create([
        QueueEntry(plan=plan, comparison=cmps[k], needed=1, draw_kind="random",
                   inclusion_probability=PI) for k in labelled])
    assigned = Assignment.objects.bulk_create([
        Assignment(entry=e, annotator=ann1, status="submitted") for e in entries])
    Annotation.objects.bulk_create([
        Annotation(annotator=ann1, criterion=pref, comparison=cmps[k], assignment=a,
                   plan=plan, value=truth[k], value_num=score[truth[k]])
        for k, a in zip(labelled, assigned, strict=True)])
    Annotation.objects.bulk_create([
        Annotation(annotator=ann2, criterion=pref, comparison=cmps[k], plan=plan, value="tie",
                   value_num=0.5) for k in labelled[:3]])
    Adjudication.objects.create(criterion=pref, comparison=cmps[labelled[3]], value="B",
                                adjudicated_by=owner)
    rest = [k for k in range(len(cmps)) if k not in set(labelled.tolist())]
    GoldLabel.objects.create(criterion=pref, comparison=cmps[rest[0]], value="A")
    esc = QueueEntry.objects.create(plan=plan, comparison=cmps[rest[1]], needed=1,
                                    draw_kind="escalation")
    Annotation.objects.create(
        annotator=ann1, criterion=pref, comparison=cmps[rest[1]], plan=plan, value="A",
        value_num=1.0,
        assignment=Assignment.objects.create(entry=esc, annotator=ann1, status="submitted"))
    if with_outputs_criterion:
        correct = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                           scale="binary", position=1)
        Verdict.objects.bulk_create([
            Verdict(judge_version=jv, criterion=correct, output=o, value="pass", value_num=1.0)
            for o in outs])
        Annotation.objects.bulk_create([
            Annotation(annotator=ann1, criterion=correct, output=o, value="pass", value_num=1.0)
            for o in outs[:30]])
    AnalysisPlan.objects.create(study=study, version=1, locked_at=timezone.now(),
                                spec=PAIR_PLAN)
    return {"study": study, "comparisons": cmps, "truth": truth, "says": says,
            "labelled": labelled, "gold": rest[0], "escalated": rest[1]}


def test_a_pairwise_study_loads_its_comparisons_in_bounded_queries() -> None:
    from reports.selection.params import params_validate

    data = build_pairwise_study(slug="sel-pair-load", with_outputs_criterion=True)
    plan = AnalysisPlan.objects.get(study=data["study"])
    with CaptureQueriesContext(connection) as ctx:
        inputs = selection_inputs_load(data["study"], params_validate(FAST), plan)
    # Comparisons, their verdicts, annotations, gold labels and adjudications on top of the
    # outputs' queries.
    assert len(ctx.captured_queries) <= LOAD_MAX_QUERIES, [q["sql"][:80] for q in
                                                          ctx.captured_queries]
    assert sum("comparison" in q["sql"] for q in ctx.captured_queries) == LOAD_PAIRWISE_QUERIES
    y_out = inputs.outputs["y:pass_rate:correct"].to_numpy()
    assert int(np.isfinite(y_out).sum()) == 30
    assert inputs.pairwise_criterion is not None
    assert inputs.pairwise_criterion.key == "preferred"
    assert inputs.judge is not None  # found through its verdicts on comparisons
    c = inputs.comparisons.set_index("comparison")
    cmps, truth, lab = data["comparisons"], data["truth"], data["labelled"]
    assert len(c) == len(cmps)
    score = {"A": 1.0, "B": 0.0, "tie": 0.5}
    assert [c.loc[x.pk, "f"] for x in cmps] == [score[v] for v in data["says"]]
    # The one rule (calibration.frames.human_labels on sides): the side most annotators chose;
    # one saying A or B and a second saying "tie" is a tie for the most frequent: no label ...
    split = [k for k in lab[:3] if truth[k] != "tie"]
    for k in lab[:3]:
        got = c.loc[cmps[k].pk, "y"]
        assert np.isnan(got) if k in split else got == 0.5, (k, truth[k], got)
    # ... unless adjudicated; a gold label counts (weight 1); an escalation does not.
    assert c.loc[cmps[lab[3]].pk, "y"] == 0.0
    for k in lab[4:]:
        assert c.loc[cmps[k].pk, "y"] == score[truth[k]]
        assert c.loc[cmps[k].pk, "weight"] == pytest.approx(1 / PI)
    assert c.loc[cmps[data["gold"]].pk, "y"] == 1.0
    assert c.loc[cmps[data["gold"]].pk, "weight"] == 1.0
    assert np.isnan(c.loc[cmps[data["escalated"]].pk, "y"])
    assert split and int(np.isfinite(c["y"]).sum()) == len(lab) + 1 - len(split)
    assert any("escalations" in w for w in inputs.warnings)
    assert set(c["stratum"]) == {"short", "long", "unknown"}
    assert inputs.judge["simulated"] and not inputs.annotators_simulated  # by the flags


def test_a_pairwise_study_gets_win_rates_and_a_bradley_terry_ranking() -> None:
    import jsonschema

    data = build_pairwise_study()
    snap = report_snapshot_create(study=data["study"], kind="selection", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done" and done.result is not None, done.error
    jsonschema.validate(done.result, SelectionResult.json_schema())
    r = SelectionResult.from_json(done.result)
    assert r.to_json() == done.result
    pw = r.pairwise
    assert pw is not None and pw.criterion == "preferred"
    assert pw.reference == "cirrus (simulated)"  # the plan's baseline
    b, a, c = PAIR_STRENGTH
    mix_rates = {(w.a, w.b): w for w in pw.win_rates if w.stratum == "mix"}
    assert len(mix_rates) == 3
    assert all(w.n_comparisons == sum(PAIR_ITEMS.values()) for w in mix_rates.values())
    # The simulated truth re-weighted to the mix, inside the PPI interval (with a little
    # slack for the ties, which the truth counts as "nearly even" only).
    for (x, y_), w in mix_rates.items():
        want = sum(MIX[h] / (1 + np.exp(-(PAIR_STRENGTH[x][h] - PAIR_STRENGTH[y_][h])))
                   for h in MIX)
        assert w.ppi is not None and w.ppi.ci_low is not None and w.ppi.ci_high is not None
        assert w.ppi.ci_low - 0.03 <= want <= w.ppi.ci_high + 0.03, (x, y_)
        assert w.human is not None and w.judge is not None
    # Bradley-Terry: cirrus (the reference) last on the mix, borealis first on short.
    mix_bt = {row.candidate: row for row in pw.bradley_terry if row.stratum == "mix"}
    assert mix_bt[c].strength == 0.0 and mix_bt[c].ci_low is None and mix_bt[c].rank == 3
    low = mix_bt[b].ci_low
    assert low is not None and low > 0
    short = {row.candidate: row.rank for row in pw.bradley_terry if row.stratum == "short"}
    assert short[b] == 1
    # The plan's win_rate threshold against the baseline: both beat cirrus on the mix.
    rows = {(t.candidate, t.stratum): t.status for t in r.thresholds
            if t.metric == "win_rate:preferred"}
    assert rows[(b, "mix")] == "pass" and rows[(a, "mix")] == "pass"
    assert (c, "mix") not in rows
    assert not any("not checked" in w for w in r.warnings)
    assert r.simulated


def test_pandalm_real_pairwise_data_through_the_selection_report() -> None:
    """PandaLM's 999 comparisons of five 7B models (real data, three annotators per item,
    imported judges): the report's human-only win rate of each pair on the whole study is the
    mean over that pair's items of the score of the side most annotators chose (the one
    human-label rule; 1 -> 1, 2 -> 0, tie 0 -> 0.5; three different answers give no label),
    computed here straight from the published file."""
    import json
    from collections import Counter

    from .conftest import imported_study, shared_data_dir

    data_dir = shared_data_dir()
    study = imported_study("sel-pandalm", ["pandalm"], data_dir)
    rows = json.loads((data_dir / "pandalm" / "testset-v1.json").read_text())
    score = {1: 1.0, 2: 0.0, 0: 0.5}
    want: dict[tuple[str, str], list[float]] = {}
    n_items: Counter[tuple[str, str]] = Counter()
    for r in rows:
        a, b = r["cmp_key"].split("_", 1)
        n_items[(a, b)] += 1
        (side, n), *rest = Counter(int(r[f"annotator{k}"]) for k in (1, 2, 3)).most_common()
        if not rest or rest[0][1] < n:
            want.setdefault((a, b), []).append(score[side])
    r = _build_report(study)
    pw = r.pairwise
    assert pw is not None
    mix = {(w.a, w.b): w for w in pw.win_rates if w.stratum == "mix"}
    assert len(mix) == len(want) == 10
    for (a, b), scores in want.items():
        w = mix.get((a, b))
        flip = w is None
        w = w if w is not None else mix[(b, a)]
        assert w.n_comparisons == n_items[(a, b)] and w.n_labelled == len(scores)
        assert w.human is not None
        got = 1.0 - w.human.value if flip and w.human.value is not None else w.human.value
        assert got == pytest.approx(sum(scores) / len(scores), abs=1e-9), (a, b)
        assert w.ppi is not None and w.judge is not None
    bt = [x for x in pw.bradley_terry if x.stratum == "mix"]
    assert sorted(x.rank for x in bt) == [1, 2, 3, 4, 5]
    assert pw.reference is not None
    assert not r.simulated
