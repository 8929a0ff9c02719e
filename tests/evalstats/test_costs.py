"""Error costs and the cost-optimal decision (evalstats.costs).

Checked against brute force (the thresholds against a minimisation over a fine grid of p, the
decisions against an explicit per-row argmin), against figures worked out by hand, and by
seeded simulation with a known truth (cost-optimal decisions on calibrated p beat raw verdicts
when the judge is miscalibrated; the intervals cover the true expected cost). The calibration
in the simulation is scikit-learn's isotonic regression, not ours.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import integrate
from sklearn.isotonic import IsotonicRegression

from evalstats.costs import (
    DEFAULT_COST_MODEL,
    DEFAULT_REJECT_COST,
    DEFAULT_REVIEW_COST,
    DEFAULT_SEVERITY_COSTS,
    CostModel,
    decide,
    decision_thresholds,
    expected_decision_cost,
    false_pass_cost,
    policy_costs,
)
from evalstats.options import BootstrapOptions

# (fail_cost E, reject_cost c_r, review_cost c_h): with and without a band, and every zero.
COST_CASES = [
    (10.0, 3.0, 1.0),  # band: 1/3 .. 0.9
    (10.0, 3.0, 5.0),  # no band: review dearer than the peak E c_r / (E + c_r) = 30/13
    (10.0, 3.0, 30.0 / 13.0),  # exactly the peak: no band
    (100.0, 1.0, 0.5),
    (1.0, 100.0, 0.2),
    (0.0, 3.0, 1.0),  # a failure costs nothing: pass everything
    (10.0, 0.0, 1.0),  # rejecting is free: fail everything short of p = 1
    (10.0, 3.0, 0.0),  # reviews are free: escalate everything in (0, 1)
    (0.0, 0.0, 1.0),
    (0.0, 0.0, 0.0),
    (5.0, 5.0, 0.0),
]
# Tie order of the rule: pass, then escalate, then fail.
ACTIONS = np.array(["pass", "escalate", "fail"])


def brute_force(p: np.ndarray, e: float, c_r: float, c_h: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-p cheapest action (first in tie order) and its cost, by evaluating all three."""
    costs = np.stack([(1.0 - p) * e, np.full_like(p, c_h), p * c_r])
    return ACTIONS[np.argmin(costs, axis=0)], costs.min(axis=0)


@pytest.mark.parametrize(("e", "c_r", "c_h"), COST_CASES)
def test_closed_form_thresholds_equal_brute_force_minimisation(e, c_r, c_h):
    step = 1e-5
    grid = np.linspace(0.0, 1.0, round(1 / step) + 1)
    best, best_cost = brute_force(grid, e, c_r, c_h)
    t = decision_thresholds(fail_cost=e, reject_cost=c_r, review_cost=c_h)
    assert 0.0 <= t.fail_below <= t.pass_above <= 1.0
    passing = grid[best == "pass"]
    failing = grid[best == "fail"]
    assert passing.size, "the grid always has p = 1, where passing costs nothing"
    assert abs(passing.min() - t.pass_above) <= step + 1e-12
    if failing.size:
        assert abs(failing.max() - t.fail_below) <= step + 1e-12
    else:
        assert t.fail_below <= step
    # Away from the thresholds the rule picks exactly the brute-force action; everywhere
    # (ties included) it costs exactly the minimum.
    d = decide(grid, thresholds=t)
    near = (np.abs(grid - t.pass_above) < 1e-9) | (np.abs(grid - t.fail_below) < 1e-9)
    assert np.array_equal(d[~near], best[~near])
    cost = expected_decision_cost(grid, d, fail_cost=e, reject_cost=c_r, review_cost=c_h)
    np.testing.assert_allclose(cost, best_cost, rtol=0, atol=1e-12)


def test_without_a_band_both_thresholds_are_the_break_even_point():
    for e, c_r, c_h in [(10.0, 3.0, 5.0), (10.0, 3.0, 100.0), (4.0, 4.0, 2.0)]:
        t = decision_thresholds(fail_cost=e, reject_cost=c_r, review_cost=c_h)
        assert t.pass_above == t.fail_below == pytest.approx(e / (e + c_r), abs=1e-15)
        assert not t.has_band
    t = decision_thresholds(fail_cost=4.0, reject_cost=4.0, review_cost=1.999)
    assert t.has_band and t.fail_below < 0.5 < t.pass_above


def test_decide_equals_an_explicit_per_row_argmin():
    rng = np.random.default_rng(20261203)
    for _ in range(50):
        e, c_r, c_h = (float(x) for x in rng.choice([0.0, 0.3, 1.0, 3.0, 10.0, 50.0], size=3))
        p = rng.random(400)
        t = decision_thresholds(fail_cost=e, reject_cost=c_r, review_cost=c_h)
        got = decide(p, thresholds=t)
        for pi, g in zip(p, got, strict=True):
            options = {"pass": (1 - pi) * e, "escalate": c_h, "fail": pi * c_r}
            cheapest = min(options.values())
            # The rule's action is a cheapest one, and the first in tie order among them.
            first = next(a for a in ("pass", "escalate", "fail") if options[a] == cheapest)
            assert g == first, (e, c_r, c_h, pi, options, g)


def test_worked_example_by_hand():
    # E = 10, c_r = 3, c_h = 1. Pass when 10 (1 - p) <= 1, i.e. p >= 0.9; fail when 3 p < 1,
    # i.e. p < 1/3; review in between (the peak 10 * 3 / 13 = 2.31 exceeds the review cost).
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    assert t.pass_above == pytest.approx(0.9) and t.fail_below == pytest.approx(1 / 3)
    p = np.array([0.95, 0.9, 0.6, 0.34, 0.2, np.nan])
    d = decide(p, thresholds=t)
    assert d.tolist() == ["pass", "pass", "escalate", "escalate", "fail", "escalate"]
    cost = expected_decision_cost(p[:5], d[:5], fail_cost=10, reject_cost=3, review_cost=1)
    np.testing.assert_allclose(cost, [0.5, 1.0, 1.0, 1.0, 0.6])
    # With reviews at 5 there is no band: pass from 10 / 13 = 0.769 up.
    t2 = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=5)
    assert decide([0.77, 0.76], thresholds=t2).tolist() == ["pass", "fail"]


def test_false_pass_cost_by_hand():
    rng = np.random.default_rng(1)
    # Default scale 1, 3, 10, 30, 100: (1 + 1 + 3 + 100) / 4 = 26.25, one failure unrated.
    res = false_pass_cost([1, 1, 2, 5, np.nan], costs=DEFAULT_COST_MODEL, rng=rng)
    assert res.severity_counts == (2, 1, 0, 0, 1)
    assert res.missing == 1 and res.n == 5
    assert res.expected.value == pytest.approx(26.25)
    assert any("no severity" in w and "left out" in w for w in res.warnings)
    assert res.expected.ci_low <= 26.25 <= res.expected.ci_high
    # Weighted: (1 + 1 + 2 * 3 + 100) / (1 + 1 + 2 + 1) = 21.6; the unrated row's weight is moot.
    res = false_pass_cost([1, 1, 2, 5, np.nan], costs=DEFAULT_COST_MODEL,
                          weights=[1, 1, 2, 1, 9], rng=rng)
    assert res.expected.value == pytest.approx(21.6)
    # A consensus severity of 2.5 costs halfway between 3 and 10; it counts at level 3.
    custom = CostModel(severity_costs=(0, 2, 4, 8, 8), reject_cost=1, review_cost=1)
    res = false_pass_cost([2.5, 4.0], costs=custom, rng=rng)
    assert res.expected.value == pytest.approx((3.0 + 8.0) / 2)
    assert res.severity_counts == (0, 0, 1, 1, 0)
    # Nothing rated: an undefined mean that says why, never a number.
    res = false_pass_cost([np.nan, np.nan], costs=custom, rng=rng)
    assert math.isnan(res.expected.value) and res.missing == 2
    assert res.to_json()["expected"]["value"] is None
    json.dumps(res.to_json(), allow_nan=False)


def test_policy_costs_by_hand():
    # E = 10, c_r = 3, c_h = 1 (thresholds 1/3 and 0.9). Six labelled outputs:
    #   human  raw  p     raw cost          calibrated decision / cost
    #   pass   1    0.95  0                 pass / 0
    #   fail   1    0.95  10 (false pass)   pass / 10
    #   pass   0    0.5   3 (false fail)    escalate / 1
    #   fail   1    0.5   10                escalate / 1
    #   fail   0    0.1   0                 fail / 0
    #   pass   0    0.1   3                 fail / 3
    # raw: 26 / 6 per output; calibrated: 15 / 6; humans: 1 per output.
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    passed = [1, 0, 1, 0, 0, 1]
    raw = [1, 1, 0, 1, 0, 0]
    p = [0.95, 0.95, 0.5, 0.5, 0.1, 0.1]
    res = policy_costs(passed, raw, p, thresholds=t, rng=np.random.default_rng(2))
    assert res.raw.value == pytest.approx(1000 * 26 / 6)
    assert res.calibrated.value == pytest.approx(1000 * 15 / 6)
    assert res.human_only.value == res.human_only.ci_low == res.human_only.ci_high == 1000.0
    assert res.n == 6
    # Weights count a row that many times.
    w = [1, 2, 1, 1, 1, 1]
    res = policy_costs(passed, raw, p, thresholds=t, weights=w, rng=np.random.default_rng(2))
    assert res.raw.value == pytest.approx(1000 * 36 / 7)
    assert res.calibrated.value == pytest.approx(1000 * 25 / 7)
    json.dumps(res.to_json(), allow_nan=False)


def _draw(rng: np.random.Generator, n: int, power: float) -> tuple[np.ndarray, np.ndarray]:
    score = rng.random(n)
    passed = (rng.random(n) < score**power).astype(np.int64)
    return score, passed


@pytest.mark.parametrize("power", [3.0, 1 / 3])
def test_calibrated_decisions_beat_raw_verdicts_when_the_judge_is_miscalibrated(power):
    # The judge reports a score it means as P(pass) and passes at 0.5, but the truth is
    # P(pass) = score ** power. Calibration (scikit-learn's isotonic regression on a separate
    # labelled sample) plus the cost-optimal rule must cost less than the raw verdicts on
    # fresh outputs, in every seeded draw, with intervals that do not overlap.
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    opts = BootstrapOptions(n_resamples=400, ci="percentile")
    for seed in range(10):
        rng = np.random.default_rng([int(power * 1000), seed])
        s_cal, y_cal = _draw(rng, 2000, power)
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(s_cal, y_cal)
        s, y = _draw(rng, 5000, power)
        res = policy_costs(y, (s >= 0.5).astype(int), iso.predict(s), thresholds=t, rng=rng,
                           options=opts)
        assert res.calibrated.value < res.raw.value, (seed, res)
        assert res.calibrated.ci_high < res.raw.ci_low, (seed, res)


def _true_policy_costs(power: float, t) -> tuple[float, float]:
    """Expected cost per output of raw (score >= 0.5) and of decide(score ** power) exactly."""
    e, c_r, c_h = t.fail_cost, t.reject_cost, t.review_cost

    def raw(s: float) -> float:
        q = s**power
        return (1 - q) * e if s >= 0.5 else q * c_r

    def cal(s: float) -> float:
        q = s**power
        d = decide([q], thresholds=t)[0]
        return {"pass": (1 - q) * e, "fail": q * c_r, "escalate": c_h}[d]

    # Integrands are piecewise smooth; split at the decision points.
    cuts = sorted({0.0, 0.5, 1.0, t.fail_below ** (1 / power), t.pass_above ** (1 / power)})
    raw_e = sum(integrate.quad(raw, a, b)[0] for a, b in itertools.pairwise(cuts))
    cal_e = sum(integrate.quad(cal, a, b)[0] for a, b in itertools.pairwise(cuts))
    return raw_e, cal_e


def test_policy_cost_intervals_cover_the_true_expected_cost():
    # Known truth P(pass) = score ** 3 given as the calibrated p; outputs in clusters of 1-3 per
    # item. Nominal 95 %: the realised coverage over 500 seeded samples must be in
    # [0.88, 0.99] (binomial sd at 95 % over 500 runs is 1 point).
    power = 3.0
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    raw_true, cal_true = (1000 * v for v in _true_policy_costs(power, t))
    opts = BootstrapOptions(n_resamples=300, ci="percentile")
    rng = np.random.default_rng(77)
    hits_raw = hits_cal = 0
    reps = 500
    for _ in range(reps):
        n_items = 150
        sizes = rng.integers(1, 4, size=n_items)
        items = np.repeat(np.arange(n_items), sizes)
        s, y = _draw(rng, items.size, power)
        res = policy_costs(y, (s >= 0.5).astype(int), s**power, thresholds=t, clusters=items,
                           rng=rng, options=opts)
        assert res.raw.n_items == n_items
        hits_raw += res.raw.ci_low <= raw_true <= res.raw.ci_high
        hits_cal += res.calibrated.ci_low <= cal_true <= res.calibrated.ci_high
    assert 0.88 <= hits_raw / reps <= 0.99, hits_raw
    assert 0.88 <= hits_cal / reps <= 0.99, hits_cal


def test_false_pass_cost_interval_covers_under_clustering():
    # Items differ in how bad their failures are (a per-item shift), so failures of one item
    # are dependent; the true mean cost is exact: half the items draw severities from P0,
    # half from P1, independently of how many failures an item has.
    p0 = np.array([0.4, 0.3, 0.2, 0.08, 0.02])
    p1 = np.array([0.05, 0.15, 0.3, 0.3, 0.2])
    cost = np.asarray(DEFAULT_SEVERITY_COSTS)
    truth = 0.5 * (p0 @ cost) + 0.5 * (p1 @ cost)
    opts = BootstrapOptions(n_resamples=400)
    rng = np.random.default_rng(5)
    hits = 0
    reps = 300
    for _ in range(reps):
        n_items = 80
        bad = rng.random(n_items) < 0.5
        sizes = rng.integers(1, 5, size=n_items)
        items = np.repeat(np.arange(n_items), sizes)
        probs = np.where(bad[items, None], p1, p0)
        sev = 1 + (rng.random(items.size)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
        sev = sev.astype(np.float64)
        sev[rng.random(sev.size) < 0.05] = np.nan  # a few unrated failures
        res = false_pass_cost(sev, costs=DEFAULT_COST_MODEL, clusters=items, rng=rng,
                              options=opts)
        hits += res.expected.ci_low <= truth <= res.expected.ci_high
    assert 0.88 <= hits / reps <= 0.99, hits


def test_defaults_and_json_shape():
    m = DEFAULT_COST_MODEL
    assert m.is_default and m.unit == "points"
    assert m.severity_costs == DEFAULT_SEVERITY_COSTS
    assert (m.reject_cost, m.review_cost) == (DEFAULT_REJECT_COST, DEFAULT_REVIEW_COST)
    d = m.to_json()
    assert d == {"unit": "points", "severity": {"1": 1.0, "2": 3.0, "3": 10.0, "4": 30.0,
                                                 "5": 100.0},
                 "false_fail": 3.0, "review": 1.0, "is_default": True}
    assert CostModel.from_json(d) == m
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    json.dumps(t.to_json(), allow_nan=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"severity_costs": (1, 3, 2, 30, 100)},  # decreasing
        {"severity_costs": (1, 3, 10, 30)},  # four levels
        {"severity_costs": (-1, 3, 10, 30, 100)},
        {"severity_costs": (1, 3, 10, 30, float("inf"))},
        {"reject_cost": -0.5},
        {"review_cost": float("nan")},
        {"review_cost": True},
    ],
)
def test_bad_cost_models_are_refused(kwargs):
    with pytest.raises(ValueError):
        CostModel(**kwargs)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="fail_cost"):
        decision_thresholds(fail_cost=-1, reject_cost=1, review_cost=1)
    t = decision_thresholds(fail_cost=10, reject_cost=3, review_cost=1)
    with pytest.raises(ValueError, match="unknown decisions"):
        expected_decision_cost([0.5], ["human"], fail_cost=1, reject_cost=1, review_cost=1)
    with pytest.raises(ValueError, match="0/1"):
        policy_costs([1, 2], [1, 0], [0.5, 0.5], thresholds=t, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="probabilities"):
        policy_costs([1, 0], [1, 0], [0.5, 1.5], thresholds=t, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\[1, 5\]"):
        false_pass_cost([0, 3], costs=DEFAULT_COST_MODEL, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="weights"):
        false_pass_cost([1, 3], costs=DEFAULT_COST_MODEL, weights=[1, -1],
                        rng=np.random.default_rng(0))


def test_false_pass_cost_weighted_by_the_judge_score_by_hand():
    # The score-weighted mean is numpy's weighted average with weights w * P(pass); the mean
    # over all failures is numpy's with w alone (an independent computation of both).
    sev = np.array([1, 1, 2, 5, 5, 3, np.nan])
    w = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 1.0, 4.0])
    p = np.array([0.9, 0.8, 0.7, 0.05, 0.1, 0.5, 0.9])
    cost = np.asarray(DEFAULT_SEVERITY_COSTS)[sev[:6].astype(int) - 1]
    res = false_pass_cost(sev, costs=DEFAULT_COST_MODEL, weights=w, scores=p,
                          rng=np.random.default_rng(2))
    assert res.all_failures is not None and res.score_weighted is not None
    assert res.all_failures.value == pytest.approx(np.average(cost, weights=w[:6]))
    assert res.score_weighted.value == pytest.approx(np.average(cost, weights=w[:6] * p[:6]))
    assert res.score_difference is not None
    assert res.score_difference.value == pytest.approx(
        res.score_weighted.value - res.all_failures.value)
    assert res.expected == (res.score_weighted if res.depends_on_score else res.all_failures)
    body = res.to_json()
    assert body["used"] in ("all", "score_weighted") and body["score_weighted"]["value"]
    json.dumps(body, allow_nan=False)
    # Without scores nothing changes: the same figures and interval as before.
    plain = false_pass_cost(sev, costs=DEFAULT_COST_MODEL, weights=w,
                            rng=np.random.default_rng(2))
    assert plain.expected == res.all_failures and plain.used == "all"
    assert plain.score_weighted is None and plain.to_json()["score_weighted"] is None
    # A judge that gives no failure a chance to pass leaves the mean of every failure.
    none = false_pass_cost([2, 5], costs=DEFAULT_COST_MODEL, scores=[0, 0],
                           rng=np.random.default_rng(2))
    assert none.used == "all" and none.expected.value == pytest.approx(51.5)
    for bad in ([0.5], [0.5, 1.5], [0.5, np.nan]):
        with pytest.raises(ValueError, match="scores"):
            false_pass_cost([2, 5], costs=DEFAULT_COST_MODEL, scores=bad,
                            rng=np.random.default_rng(2))


def _failures(rng: np.random.Generator, n: int, dependent: bool) -> tuple[np.ndarray, ...]:
    """n failures with a judge score in {0.1, 0.5, 0.9}; severities depend on the score (the
    judge catches the harmful failures and passes the cosmetic ones) or not."""
    levels = np.array([0.1, 0.5, 0.9])
    probs = np.array([[0.05, 0.05, 0.1, 0.2, 0.6],
                      [0.2, 0.3, 0.3, 0.1, 0.1],
                      [0.6, 0.3, 0.1, 0.0, 0.0]])
    k = rng.integers(0, 3, size=n)
    rows = probs[k] if dependent else np.broadcast_to(probs[1], (n, 5))
    sev = 1 + (rng.random(n)[:, None] > np.cumsum(rows, axis=1)).sum(axis=1)
    return sev.astype(np.float64), levels[k]


def test_false_pass_cost_of_what_the_judge_passes_by_simulation():
    cost = np.asarray(DEFAULT_SEVERITY_COSTS)
    levels = np.array([0.1, 0.5, 0.9])
    by_level = np.array([[0.05, 0.05, 0.1, 0.2, 0.6],
                         [0.2, 0.3, 0.3, 0.1, 0.1],
                         [0.6, 0.3, 0.1, 0.0, 0.0]]) @ cost  # 67.2, 17.1, 2.5
    # Exact: the failures the judge passes, each with probability equal to its score.
    truth_passed = float(levels @ by_level / levels.sum())  # 11.68
    truth_all = float(by_level.mean())  # 28.93
    opts = BootstrapOptions(n_resamples=300)
    rng = np.random.default_rng(11)
    reps, used, hits, all_hits = 200, 0, 0, 0
    for _ in range(reps):
        sev, p = _failures(rng, 300, dependent=True)
        res = false_pass_cost(sev, costs=DEFAULT_COST_MODEL, scores=p, rng=rng, options=opts)
        used += res.used == "score_weighted"
        assert res.score_weighted is not None and res.all_failures is not None
        hits += res.score_weighted.ci_low <= truth_passed <= res.score_weighted.ci_high
        all_hits += res.all_failures.ci_low <= truth_passed <= res.all_failures.ci_high
    assert used / reps >= 0.95, used
    assert 0.88 <= hits / reps <= 0.99, hits
    assert all_hits == 0 and truth_all > 2 * truth_passed  # the plain mean is far off
    # Severity independent of the score: the difference is noise, and the more precise mean
    # of every failure is used, but for about the test's 5 % false alarms.
    used = 0
    for _ in range(reps):
        sev, p = _failures(rng, 300, dependent=False)
        res = false_pass_cost(sev, costs=DEFAULT_COST_MODEL, scores=p, rng=rng, options=opts)
        used += res.used == "score_weighted"
    assert used / reps <= 0.10, used
