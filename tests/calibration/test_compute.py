"""The calibration snapshot computation (calibration/compute.py) on a seeded synthetic study
with a known truth.

The judge reports a probability q of a pass, but humans pass an output with probability q**2
(an over-confident judge: a known miscalibration). Humans label a random sample drawn with
known inclusion probabilities (English 0.6, German 0.3), a handful of French items (fewer
than min_labels), none of the "xx" items, and a set of escalated outputs whose labels all
say "pass" whatever the truth: if escalations entered the fit, the curve would be pulled up.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model

from annotations.models import Adjudication, Annotation, Assignment, QueueEntry, SamplingPlan
from calibration.compute import (
    RUBRIC_KEY,
    calibration_compute,
    calibration_fingerprint,
    calibration_inputs_load,
    rubric_aggregate,
)
from calibration.params import params_validate
from calibration.results import CalibrationResult
from judges.models import Judge, JudgeVersion, Verdict
from studies.models import Candidate, Criterion, Item, Output, RubricVersion, StratumDimension
from tests.factories import StudyFactory

SEED = 20261203
N_ITEMS = {"en": 500, "de": 400, "fr": 30, "xx": 20}
PI = {"en": 0.6, "de": 0.3}
N_FR_LABELLED = 5
N_ESCALATED = 60


def truth(q: np.ndarray) -> np.ndarray:
    return q**2


def build_study(seed: int = SEED, truth_fn: Any = truth,
                severity_fn: Any = None) -> dict[str, Any]:
    """The synthetic study (module docstring); returns its objects and the known truth."""
    rng = np.random.default_rng(seed)
    users = get_user_model()
    owner = users.objects.create(username="cal-owner")
    rater = users.objects.create(username="cal-rater")
    escalator = users.objects.create(username="cal-escalator")
    study = StudyFactory(owner=owner, slug="calibrated")
    rubric = RubricVersion.objects.create(study=study, version=1)
    correct = Criterion.objects.create(
        rubric=rubric, key="correct", name="Correct", scale="binary", is_hard_gate=True,
        position=0,
    )
    StratumDimension.objects.create(study=study, key="lang", name="Language", kind="categorical",
                                    source="metadata.lang", position=0)
    cand = Candidate.objects.create(study=study, name="m1")
    items = Item.objects.bulk_create([
        Item(study=study, external_id=f"{lang}-{i}", input="q", strata={"lang": lang})
        for lang, n in N_ITEMS.items() for i in range(n)
    ])
    outputs = Output.objects.bulk_create(
        [Output(study=study, item=it, candidate=cand, text="a") for it in items]
    )
    judge = Judge.objects.create(study=study, name="gpt", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="h" * 16)
    q = rng.uniform(0.02, 0.98, len(outputs))
    human_pass = rng.random(len(outputs)) < truth_fn(q)
    Verdict.objects.bulk_create([
        Verdict(judge_version=jv, criterion=correct, output=o,
                value="pass" if qi >= 0.5 else "fail", value_num=1.0 if qi >= 0.5 else 0.0,
                probability=float(qi))
        for o, qi in zip(outputs, q, strict=True)
    ])
    plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
    langs = np.array([it.strata["lang"] for it in items])
    drawn = np.zeros(len(outputs), dtype=bool)
    for lang, pi in PI.items():
        drawn |= (langs == lang) & (rng.random(len(outputs)) < pi)
    fr = np.flatnonzero(langs == "fr")[:N_FR_LABELLED]
    drawn[fr] = True
    pool = np.flatnonzero((langs == "en") & ~drawn)
    escalated = rng.choice(pool, N_ESCALATED, replace=False)
    entries = []
    for i in np.flatnonzero(drawn):
        lang = str(langs[i])
        entries.append(QueueEntry(plan=plan, output=outputs[i], stratum=lang, needed=1,
                                  draw_kind="random", inclusion_probability=PI.get(lang, 1.0)))
    for i in escalated:
        entries.append(QueueEntry(plan=plan, output=outputs[i], stratum="en", needed=1,
                                  draw_kind="escalation"))
    entries = QueueEntry.objects.bulk_create(entries)
    assignments = Assignment.objects.bulk_create([
        Assignment(entry=e, annotator=escalator if e.draw_kind == "escalation" else rater,
                   status="submitted")
        for e in entries
    ])
    index = {o.pk: i for i, o in enumerate(outputs)}
    anns = []
    for e, a in zip(entries, assignments, strict=True):
        i = index[e.output_id]
        # Escalated outputs: the humans say "pass" whatever the truth.
        passed = True if e.draw_kind == "escalation" else bool(human_pass[i])
        anns.append(Annotation(
            annotator=a.annotator, criterion=correct, output_id=e.output_id, assignment=a,
            plan=plan, value="pass" if passed else "fail", value_num=1.0 if passed else 0.0,
            severity=None if passed else (3 if severity_fn is None else
                                          int(severity_fn(float(q[i])))),
        ))
    Annotation.objects.bulk_create(anns)
    return {
        "study": study, "correct": correct, "jv": jv, "outputs": outputs, "q": q,
        "langs": langs, "drawn": drawn, "escalated": escalated, "human_pass": human_pass,
        "owner": owner, "rater": rater, "rubric": rubric, "cand": cand,
    }


def _compute(study: Any, **params: Any) -> CalibrationResult:
    p = params_validate({"strata": ["lang"], "n_resamples": 50, "curve_resamples": 40,
                         "seed": 3, **params})
    inputs = calibration_inputs_load(study, p, None)
    return calibration_compute(inputs, p, None, calibration_fingerprint(inputs))


@pytest.fixture
def built(db: Any) -> dict[str, Any]:
    return build_study()


@pytest.fixture
def result(built: dict[str, Any]) -> CalibrationResult:
    return _compute(built["study"])


def _rows(result: CalibrationResult, key: str = "correct") -> dict[int, dict[str, Any]]:
    return {r["output_id"]: r for r in result.scores if r["criterion_key"] == key}


def test_fitted_probability_recovers_the_known_truth(
    built: dict[str, Any], result: CalibrationResult
) -> None:
    rows = _rows(result)
    outs, q = built["outputs"], built["q"]
    judged = [i for i, o in enumerate(outs) if rows[o.pk]["source"] == "judge"
              and built["langs"][i] in ("en", "de")]
    p = np.array([rows[outs[i].pk]["p_pass"] for i in judged])
    t = truth(q[judged])
    raw_error = float(np.mean(np.abs(q[judged] - t)))
    fitted_error = float(np.mean(np.abs(p - t)))
    # The raw probabilities are off by ~0.16 on average; the calibrated ones by a few points.
    assert raw_error > 0.14
    assert fitted_error < 0.05, fitted_error
    # Intervals bracket the point.
    low = np.array([rows[outs[i].pk]["p_low"] for i in judged])
    high = np.array([rows[outs[i].pk]["p_high"] for i in judged])
    assert np.all(low <= p) and np.all(p <= high)


def _logistic_truth(q: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(-2.5 + 4.0 * q)))


def test_intervals_cover_a_truth_of_the_fitted_form() -> None:
    """Simulation: where the truth has the curve's form (logistic in the score, fitted by
    Platt), the 95 % bands of `_bands` cover it at most scores on average over seeded
    samples (about 0.89 here: the percentile bootstrap of a logistic fit on 400 labels runs a
    little short at the ends); a band that ignored the sample size would cover far less."""
    from calibration.scoring import Model as _Model
    from calibration.scoring import p_bands as _bands
    from evalstats.calibration import calibration_select

    grid = np.linspace(0.02, 0.98, 25)
    coverage, width = [], []
    for sim in range(20):
        rng = np.random.default_rng([SEED, sim])
        q = rng.uniform(0.02, 0.98, 400)
        y = (rng.random(q.size) < _logistic_truth(q)).astype(float)
        w = np.ones(q.size)
        sel = calibration_select(q, y, methods=["platt"], folds=5, rng=rng)
        model = _Model(pooled=sel, hier=None, heldout=sel.heldout)
        low, high = _bands(model, q, y, w, np.arange(q.size), grid, [""], resamples=200,
                           level=0.95, rng=rng)[""]
        t = _logistic_truth(grid)
        coverage.append(np.mean((low <= t) & (t <= high)))
        width.append(np.mean(high - low))
    assert 0.85 < float(np.mean(coverage)) <= 1.0, np.mean(coverage)
    assert float(np.mean(width)) < 0.25


def test_escalations_stay_out_of_the_fit_but_decide_their_outputs(
    built: dict[str, Any], result: CalibrationResult
) -> None:
    whole = next(c for c in result.cells if c.stratum == "")
    n_random = int(built["drawn"].sum())
    assert whole.n_labels == n_random  # the 60 escalated outputs are not among them
    rows = _rows(result)
    for i in built["escalated"]:
        row = rows[built["outputs"][i].pk]
        assert (row["decision"], row["source"], row["p_pass"]) == ("human", "human", 1.0)
        assert row["expected_cost"] == 0.0
    # Counterfactual: the same labels drawn at random instead would pull the curve up.
    QueueEntry.objects.filter(draw_kind="escalation").update(draw_kind="census")
    biased = _compute(built["study"])
    assert next(c for c in biased.cells if c.stratum == "").n_labels == n_random + N_ESCALATED
    unl = [o.pk for i, o in enumerate(built["outputs"])
           if not built["drawn"][i] and i not in set(built["escalated"].tolist())
           and built["langs"][i] == "en" and built["q"][i] < 0.5]
    before = np.mean([rows[pk]["p_pass"] for pk in unl])
    after = np.mean([_rows(biased)[pk]["p_pass"] for pk in unl])
    assert after > before + 0.03


def test_human_consensus_and_adjudication_replace_the_judge(
    built: dict[str, Any], result: CalibrationResult
) -> None:
    rows = _rows(result)
    drawn = np.flatnonzero(built["drawn"])
    for i in drawn[:50]:
        row = rows[built["outputs"][i].pk]
        assert row["decision"] == "human" and row["source"] == "human"
        assert row["p_pass"] == float(built["human_pass"][i])
    # An adjudication wins over the annotators.
    i = int(drawn[0])
    target = built["outputs"][i]
    flipped = "fail" if built["human_pass"][i] else "pass"
    Adjudication.objects.create(criterion=built["correct"], output=target, value=flipped,
                                adjudicated_by=built["owner"])
    again = _rows(_compute(built["study"]))[target.pk]
    assert again["source"] == "adjudicated"
    assert again["p_pass"] == (1.0 if flipped == "pass" else 0.0)


def test_judge_decisions_follow_the_cost_thresholds(result: CalibrationResult) -> None:
    whole = next(c for c in result.cells if c.stratum == "")
    assert whole.thresholds is not None and whole.false_pass_cost is not None
    # Every failure carries severity 3: E[cost | fail] is the default cost of level 3.
    assert whole.false_pass_cost["expected"]["value"] == pytest.approx(10.0)
    assert result.costs["is_default"] is True
    cells = {c.stratum: c for c in result.cells}
    for row in result.scores:
        if row["source"] != "judge" or row["criterion_key"] != "correct":
            continue
        thr = (cells[row["stratum"]].thresholds or whole.thresholds)
        p = row["p_pass"]
        expected = ("pass" if p >= thr["pass_above"] else "fail" if p < thr["fail_below"]
                    else "escalate")
        assert row["decision"] == expected
        cost = {"pass": (1 - p) * thr["fail_cost"], "fail": p * thr["reject_cost"],
                "escalate": thr["review_cost"]}[expected]
        assert row["expected_cost"] == pytest.approx(cost)
    pol = whole.policy_costs
    assert pol is not None
    # A miscalibrated judge: the calibrated decisions cost less than its raw verdicts.
    assert pol["calibrated"]["value"] < pol["raw"]["value"]


def test_the_false_pass_cost_follows_the_judge_score_where_severity_does(db: Any) -> None:
    # Failures the judge scores low are harmful (severity 5), the others cosmetic (1): the
    # judge passes mostly cosmetic failures, so a false pass costs far less than the mean
    # failure, and the thresholds use the score-weighted figure.
    built = build_study(severity_fn=lambda q: 5 if q < 0.4 else 1)
    whole = next(c for c in _compute(built["study"]).cells if c.stratum == "")
    fpc = whole.false_pass_cost
    assert fpc is not None and whole.thresholds is not None
    assert fpc["used"] == "score_weighted" and fpc["depends_on_score"] is True
    assert fpc["expected"] == fpc["score_weighted"]
    assert fpc["score_difference"]["ci_high"] < 0
    assert fpc["expected"]["value"] < fpc["all_failures"]["value"]
    assert whole.thresholds["fail_cost"] == pytest.approx(fpc["expected"]["value"])
    # The plain mean is numpy's weighted average over the random draws' failures (1 / pi).
    drawn = np.flatnonzero(built["drawn"])
    failed = [i for i in drawn if not built["human_pass"][i]]
    cost = [100.0 if built["q"][i] < 0.4 else 1.0 for i in failed]
    weights = [1.0 / PI.get(str(built["langs"][i]), 1.0) for i in failed]
    assert fpc["all_failures"]["value"] == pytest.approx(np.average(cost, weights=weights))


def test_diagnostics_improve_after_calibration(result: CalibrationResult) -> None:
    whole = next(c for c in result.cells if c.stratum == "")
    before, after = whole.diagnostics["before"], whole.diagnostics["after"]
    assert before is not None and after is not None
    assert after["ece"]["value"] < before["ece"]["value"]
    assert after["brier"]["value"] < before["brier"]["value"]
    assert whole.method in ("isotonic", "platt", "beta", "histogram")
    assert set(whole.cv_log_loss) == {"isotonic", "platt", "beta", "histogram"}
    assert len(whole.curve["x"]) == len(whole.curve["y"]) > 10


def test_cells_with_too_few_labels_are_flagged(
    built: dict[str, Any], result: CalibrationResult
) -> None:
    cells = {c.stratum: c for c in result.cells}
    assert set(cells) == {"", "lang=en", "lang=de", "lang=fr", "lang=xx"}
    for label, n in (("lang=fr", N_FR_LABELLED), ("lang=xx", 0)):
        c = cells[label]
        assert c.too_few_labels and c.pooled_only and c.n_labels == n
        assert c.method is None and c.curve == {"x": [], "y": []}
        assert c.diagnostics == {"before": None, "after": None} and c.thresholds is None
    for label in ("lang=en", "lang=de"):
        c = cells[label]
        assert not c.too_few_labels and c.own_weight is not None
        assert c.own_weight + (c.borrowed or 0) == pytest.approx(1.0)
    # Outputs of the unlabelled cell are scored by the whole-study curve and say so.
    rows = _rows(result)
    xx = [rows[o.pk] for i, o in enumerate(built["outputs"]) if built["langs"][i] == "xx"]
    assert xx and all(r["stratum"] == "lang=xx" and r["n_labels"] == 0 for r in xx)


def test_too_few_labels_overall_gives_no_judge_scores(built: dict[str, Any]) -> None:
    res = _compute(built["study"], min_labels=5000)
    assert all(c.too_few_labels and c.method is None for c in res.cells)
    assert all(r["source"] != "judge" for r in res.scores)
    assert any("too few labels" in w for w in res.warnings)


def test_result_round_trips_through_json(result: CalibrationResult) -> None:
    import json

    text = json.dumps(result.to_json(), allow_nan=False)
    back = CalibrationResult.from_json(json.loads(text))
    assert back.to_json() == result.to_json()
    assert back.n_scores == len(result.scores)


def test_rubric_aggregate_by_hand() -> None:
    # Gates 0.9 and 0.8 multiply (0.72); the rest weigh 1 and 3: (1*0.5 + 3*0.7) / 4 = 0.65.
    p = rubric_aggregate([0.9, 0.5, 0.8, 0.7], [True, False, True, False], [1, 1, 1, 3])
    assert p == pytest.approx(0.9 * 0.8 * 0.65)
    assert rubric_aggregate([0.9, 0.8], [True, True], [1, 1]) == pytest.approx(0.72)
    assert rubric_aggregate([0.2, 0.6], [False, False], [0, 2]) == pytest.approx(0.6)


def test_rubric_rows_combine_the_criteria(built: dict[str, Any]) -> None:
    """A second, weighted criterion (ordinal, level >= 4 passes): each output's rubric row is
    the gate's P(pass) times the weighted criterion's, and costs add."""
    helpful = Criterion.objects.create(
        rubric=built["rubric"], key="helpful", name="Helpful", scale="ordinal",
        points=[{"value": v, "label": str(v)} for v in range(1, 6)], pass_threshold=4,
        weight=2.0, position=1,
    )
    rng = np.random.default_rng(5)
    levels = rng.integers(1, 6, len(built["outputs"]))
    Verdict.objects.bulk_create([
        Verdict(judge_version=built["jv"], criterion=helpful, output=o, value=str(int(v)),
                value_num=float(v))
        for o, v in zip(built["outputs"], levels, strict=True)
    ])
    labelled = np.flatnonzero(built["drawn"])
    Annotation.objects.bulk_create([
        Annotation(annotator=built["rater"], criterion=helpful, output=built["outputs"][i],
                   value=str(int(levels[i])), value_num=float(levels[i]), source="import")
        for i in labelled
    ])
    res = _compute(built["study"])
    correct, helpful_rows = _rows(res, "correct"), _rows(res, "helpful")
    rubric = _rows(res, RUBRIC_KEY)
    assert set(rubric) == set(correct) == set(helpful_rows)
    for pk, row in list(rubric.items())[:200]:
        a, b = correct[pk], helpful_rows[pk]
        assert row["p_pass"] == pytest.approx(a["p_pass"] * b["p_pass"])
        assert row["expected_cost"] == pytest.approx(a["expected_cost"] + b["expected_cost"])
        assert row["criterion_id"] is None and row["judge_version_id"] is None
        if a["p_low"] is not None and b["p_low"] is not None:
            assert row["p_low"] == pytest.approx(a["p_low"] * b["p_low"])
        if a["decision"] == "escalate" or b["decision"] == "escalate":
            assert row["decision"] == "escalate"
        elif a["decision"] == "fail":
            assert row["decision"] == "fail"
    # The helpful judge's level is mapped to P(level >= 4 by humans): humans copy the level,
    # so levels 4-5 are near 1 and levels 1-3 near 0.
    lv = {o.pk: int(v) for o, v in zip(built["outputs"], levels, strict=True)}
    judged = [r for r in helpful_rows.values() if r["source"] == "judge"]
    assert all((r["p_pass"] > 0.8) == (lv[r["output_id"]] >= 4) for r in judged)
    assert not math.isnan(sum(r["p_pass"] for r in judged))


def _compute_with_plan(study: Any, spec: dict[str, Any], **params: Any) -> CalibrationResult:
    from studies.models import AnalysisPlan

    p = params_validate({"strata": ["lang"], "n_resamples": 50, "curve_resamples": 20,
                         "seed": 3, **params})
    inputs = calibration_inputs_load(study, p, AnalysisPlan(study=study, version=1, spec=spec))
    return calibration_compute(inputs, p, 1, calibration_fingerprint(inputs))


PLAN = {"criteria": {"correct": {"metric": "pass_rate", "threshold": 0.5}}}


def test_guaranteed_agreement_trusts_only_above_its_threshold(built: dict[str, Any]) -> None:
    alpha = 0.15
    spec = {**PLAN, "policy": {"kind": "guaranteed_agreement", "alpha": alpha, "delta": 0.1,
                               "min_count": 30, "score": "calibrated", "grid_step": None}}
    res = _compute_with_plan(built["study"], spec)
    assert res.policy["kind"] == "guaranteed_agreement" and res.policy["is_default"] is False
    whole = next(c for c in res.cells if c.stratum == "")
    assert whole.trust is not None and whole.trust["threshold"] is not None
    t = whole.trust["threshold"]
    assert whole.trust["agreement_lower"] >= 1 - alpha
    rows = _rows(res)
    q = dict(zip([o.pk for o in built["outputs"]], truth(built["q"]), strict=True))
    agree = []
    for pk, row in rows.items():
        if row["source"] != "judge":
            continue
        p = row["p_pass"]
        trusted = max(p, 1 - p) >= t
        assert row["decision"] == (("pass" if p >= 0.5 else "fail") if trusted else "escalate")
        if trusted:
            # The chance that a human agrees with the trusted decision, from the known truth.
            agree.append(q[pk] if row["decision"] == "pass" else 1 - q[pk])
    assert agree and float(np.mean(agree)) >= 1 - alpha - 0.02
    assert any(r["decision"] == "escalate" for r in rows.values())


def test_a_cascade_hands_on_what_the_cheaper_judge_does_not_trust(
    built: dict[str, Any]
) -> None:
    """A cheap, noisy judge first, the sharper one second: each output is decided by the first
    stage that trusts it."""
    rng = np.random.default_rng(9)
    judge = Judge.objects.create(study=built["study"], name="cheap", kind="llm")
    cheap = JudgeVersion.objects.create(judge=judge, version=1, content_hash="c" * 16)
    noisy = np.clip(built["q"] + rng.normal(0, 0.25, built["q"].size), 0.01, 0.99)
    Verdict.objects.bulk_create([
        Verdict(judge_version=cheap, criterion=built["correct"], output=o,
                value="pass" if v >= 0.5 else "fail", value_num=float(v >= 0.5),
                probability=float(v))
        for o, v in zip(built["outputs"], noisy, strict=True)
    ])
    spec = {**PLAN, "policy": {"kind": "guaranteed_agreement", "alpha": 0.15, "delta": 0.1,
                               "min_count": 30, "cascade": [cheap.pk, built["jv"].pk],
                               "score": "calibrated", "grid_step": None}}
    res = _compute_with_plan(built["study"], spec)
    cascade = res.cascades["correct"]
    assert res.cascade == cascade and len(cascade["stages"]) == 2
    first, second = cascade["stages"]
    by_jv = {c.judge_version: c for c in res.cells if c.stratum == ""}
    assert by_jv[cheap.pk].trust == {**first, "score": "calibrated"}
    assert by_jv[built["jv"].pk].trust == {**second, "score": "calibrated"}
    rows = [r for r in _rows(res).values() if r["source"] == "judge"]
    served = {r["judge_version_id"] for r in rows if r["decision"] != "escalate"}
    assert served <= {cheap.pk, built["jv"].pk}
    for r in rows:
        p = r["p_pass"]
        stage = first if r["judge_version_id"] == cheap.pk else second
        if r["decision"] != "escalate":
            assert stage["threshold"] is not None and max(p, 1 - p) >= stage["threshold"]
    assert 0 < cascade["coverage"] <= 1


@pytest.mark.parametrize("rule", [None, {"kind": "weighted", "pass_share": 0.5}])
def test_rubric_rows_follow_the_rubrics_rule(built: dict[str, Any], rule: Any) -> None:
    """Two criteria, neither a hard gate (correct weight 1, helpful weight 2). The default
    rule passes an output only when both pass (P = product); the weighted rule with
    pass_share 0.5 passes it when helpful passes (2/3 of the weight) whatever correct says
    (P = the weighted mean)."""
    Criterion.objects.filter(rubric=built["rubric"], key="correct").update(is_hard_gate=False)
    if rule is not None:
        RubricVersion.objects.filter(pk=built["rubric"].pk).update(aggregate=rule)
    helpful = Criterion.objects.create(
        rubric=built["rubric"], key="helpful", name="Helpful", scale="ordinal",
        points=[{"value": v, "label": str(v)} for v in range(1, 6)], pass_threshold=4,
        weight=2.0, position=1,
    )
    rng = np.random.default_rng(8)
    levels = rng.integers(1, 6, len(built["outputs"]))
    Verdict.objects.bulk_create([
        Verdict(judge_version=built["jv"], criterion=helpful, output=o, value=str(int(v)),
                value_num=float(v))
        for o, v in zip(built["outputs"], levels, strict=True)
    ])
    labelled = np.flatnonzero(built["drawn"])
    Annotation.objects.bulk_create([
        Annotation(annotator=built["rater"], criterion=helpful, output=built["outputs"][i],
                   value=str(int(levels[i])), value_num=float(levels[i]), source="import")
        for i in labelled
    ])
    res = _compute(built["study"])
    correct, helpful_rows = _rows(res, "correct"), _rows(res, "helpful")
    rubric = _rows(res, RUBRIC_KEY)
    decided = 0
    for pk, row in rubric.items():
        a, b = correct[pk], helpful_rows[pk]
        if rule is None:
            assert row["p_pass"] == pytest.approx(a["p_pass"] * b["p_pass"])
        else:
            assert row["p_pass"] == pytest.approx((a["p_pass"] + 2 * b["p_pass"]) / 3)
        if row["decision"] in ("escalate", "human") or "escalate" in (a["decision"],
                                                                       b["decision"]):
            continue
        if a["decision"] == "fail" and b["decision"] == "pass":
            decided += 1
            assert row["decision"] == ("fail" if rule is None else "pass")
    from collections import Counter
    assert decided > 0, Counter((correct[k]["decision"], helpful_rows[k]["decision"],
                                 r["decision"]) for k, r in rubric.items())
