"""Guaranteed agreement, "trust or escalate" (evalstats.selective).

The threshold search is checked against a plain loop over the candidates written here with
scipy's binomial CDF, and against a hand-built sequence that fails once and would pass again
further down; the reported bound against statsmodels' and scipy's Clopper-Pearson intervals.
The guarantee itself is checked by seeded simulation with a known truth, as the issue asks:
over 1,000 calibration/test splits the realised agreement on trusted test outputs (and the
exact population agreement above the chosen threshold) is >= 1 - alpha in at least 1 - delta
of the splits, up to a binomial tolerance, and the coverage is no lower than that of a
baseline meeting the same guarantee.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from evalstats.selective import (
    DEFAULT_MIN_COUNT,
    trust_cascade,
    trust_threshold,
)

ALPHA = DELTA = 0.1


def reference_threshold(
    conf: np.ndarray, agree: np.ndarray, alpha: float, delta: float, min_count: int
) -> tuple[float | None, int]:
    """Fixed-sequence testing, one candidate at a time (the definition, not fast)."""
    chosen, tested = None, 0
    for lam in sorted(set(conf.tolist()), reverse=True):
        trusted = agree[conf >= lam]
        n, k = int(trusted.size), int((trusted == 0).sum())
        if n < min_count:
            continue
        tested += 1
        if stats.binom.cdf(k, n, alpha) <= delta:
            chosen = lam
        else:
            break
    return chosen, tested


def test_threshold_equals_the_plain_loop():
    rng = np.random.default_rng(11)
    for case in range(200):
        n = int(rng.integers(0, 300))
        conf = rng.uniform(0.5, 1.0, n)
        if case % 2:
            conf = np.round(conf, 2)  # ties
        agree = (rng.random(n) < conf ** rng.choice([0.5, 1.0, 3.0])).astype(int)
        alpha = float(rng.choice([0.05, 0.1, 0.2]))
        delta = float(rng.choice([0.05, 0.1, 0.3]))
        min_count = int(rng.choice([1, 10, 30]))
        got = trust_threshold(conf, agree, alpha=alpha, delta=delta, min_count=min_count)
        want, tested = reference_threshold(conf, agree, alpha, delta, min_count)
        assert got.threshold == want, case
        assert got.tested == tested, case
        if want is not None:
            trusted = conf >= want
            assert got.n_trusted == int(trusted.sum())
            assert got.errors_trusted == int((agree[trusted] == 0).sum())
            assert got.coverage == pytest.approx(trusted.mean())
        else:
            assert got.coverage == 0.0 and got.agreement is None


def test_the_sequence_stops_at_the_first_failure():
    # 30 agreeing rows on top: P(Binom(30, 0.1) <= 0) = 0.9 ** 30 = 0.042 <= 0.1, accepted.
    # Row 31 disagrees: P(Binom(31, 0.1) <= 1) = 0.9 ** 31 + 31 * 0.1 * 0.9 ** 30 = 0.169 > 0.1,
    # the sequence stops. 100 more agreeing rows would pass again (k = 1 of 131), but a
    # threshold after a failure is never accepted: that is what keeps the error at delta.
    assert 0.9**30 <= 0.1 < 0.9**31 + 31 * 0.1 * 0.9**30
    conf = np.linspace(1.0, 0.5, 131)
    agree = np.ones(131, dtype=int)
    agree[30] = 0
    res = trust_threshold(conf, agree, alpha=0.1, delta=0.1, min_count=30)
    assert res.threshold == conf[29]
    assert res.tested == 2 and res.n_trusted == 30 and res.errors_trusted == 0
    assert res.coverage == pytest.approx(30 / 131)
    assert stats.binom.cdf(1, 131, 0.1) <= 0.1  # the lower threshold alone would pass


def test_agreement_lower_is_the_one_sided_clopper_pearson_bound():
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(40):
        conf = rng.uniform(0.5, 1.0, 2000)
        agree = (rng.random(2000) < conf).astype(int)
        delta = float(rng.choice([0.05, 0.1, 0.2]))
        res = trust_threshold(conf, agree, alpha=0.1, delta=delta)
        if res.threshold is None:  # the first test failed: nothing to bound
            assert res.tested == 1 and res.agreement_lower is None
            continue
        checked += 1
        good = res.n_trusted - res.errors_trusted
        # One-sided at 1 - delta = the lower end of the two-sided interval at 1 - 2 delta.
        sm_low = proportion_confint(good, res.n_trusted, alpha=2 * delta, method="beta")[0]
        sp_low = stats.binomtest(good, res.n_trusted, alternative="greater").proportion_ci(
            confidence_level=1 - delta, method="exact").low
        assert res.agreement_lower == pytest.approx(sm_low, rel=1e-9)
        assert res.agreement_lower == pytest.approx(sp_low, rel=1e-9)
        # Accepting (p <= delta) is the same as the bound clearing 1 - alpha.
        assert res.agreement_lower >= 1 - 0.1 - 1e-12
        assert res.agreement == pytest.approx(good / res.n_trusted)
    assert checked >= 20


def test_too_few_rows_trust_nothing():
    res = trust_threshold([0.99] * 29, [1] * 29, alpha=0.1, delta=0.1, min_count=30)
    assert res.threshold is None and res.tested == 0 and res.coverage == 0.0
    assert res.trusted([0.999, 0.5]).tolist() == [False, False]
    res = trust_threshold([], [], alpha=0.1, delta=0.1)
    assert res.threshold is None and res.n == 0
    json.dumps(res.to_json(), allow_nan=False)


# --- the guarantee, by simulation --------------------------------------------------------------

# Known truths: confidence c ~ U(0.5, 1); P(agree | c) = c (a calibrated judge) or c ** 2 (an
# over-confident one). Above lambda the population agreement and the share trusted are exact.
SCENARIOS: dict[str, tuple[float, Callable[[float], float]]] = {
    "calibrated": (1.0, lambda lam: (1 + lam) / 2),
    "overconfident": (2.0, lambda lam: (1 + lam + lam * lam) / 3),
}


def _share(lam: float | None) -> float:
    return 0.0 if lam is None else 2.0 * (1.0 - lam)


def _bonferroni_thresholds(conf: np.ndarray, agree: np.ndarray, min_count: int) -> list:
    """Baseline meeting the same guarantee without a sequence: every candidate threshold is
    tested with the same exact binomial bound at level delta / m (m = candidates tested, a
    union bound over all of them), and the lowest one that passes is used. Vectorised over
    splits (continuous confidences: every row is a candidate)."""
    order = np.argsort(-conf, axis=1, kind="stable")
    sorted_conf = np.take_along_axis(conf, order, axis=1)
    errors = np.cumsum(np.take_along_axis(agree == 0, order, axis=1), axis=1)
    n = np.arange(1, conf.shape[1] + 1)
    testable = n >= min_count
    m = int(testable.sum())
    passes = (stats.binom.cdf(errors, n, ALPHA) <= DELTA / m) & testable
    out = []
    for s in range(conf.shape[0]):
        idx = np.flatnonzero(passes[s])
        out.append(float(sorted_conf[s, idx[-1]]) if idx.size else None)
    return out


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_guarantee_holds_over_seeded_splits(scenario):
    power, population_agreement = SCENARIOS[scenario]
    splits, n_cal, n_test = 1000, 1000, 4000
    rng = np.random.default_rng(20250124 + int(power))
    conf = rng.uniform(0.5, 1.0, size=(splits, n_cal + n_test))
    agree = (rng.random(conf.shape) < conf**power).astype(np.int8)
    cal_c, cal_a = conf[:, :n_cal], agree[:, :n_cal]
    test_c, test_a = conf[:, n_cal:], agree[:, n_cal:]

    lam = [trust_threshold(cal_c[s], cal_a[s], alpha=ALPHA, delta=DELTA,
                           min_count=DEFAULT_MIN_COUNT).threshold for s in range(splits)]
    thr = np.array([np.inf if x is None else x for x in lam])
    trusted = test_c >= thr[:, None]
    n_trusted = trusted.sum(axis=1)
    agreeing = (trusted & (test_a == 1)).sum(axis=1)
    # A split that trusts nothing cannot break the guarantee.
    realised_bad = (n_trusted > 0) & (agreeing < (1 - ALPHA) * n_trusted)
    population_bad = np.array([x is not None and population_agreement(x) < 1 - ALPHA
                               for x in lam])
    # Violations are at most Binom(splits, delta); allow for simulation error at 1 in 10,000.
    tolerance = stats.binom.ppf(1 - 1e-4, splits, DELTA)
    assert realised_bad.sum() <= tolerance, realised_bad.sum()
    assert population_bad.sum() <= tolerance, population_bad.sum()
    coverage = float(np.mean([_share(x) for x in lam]))
    assert (n_trusted > 0).mean() > 0.5  # the guarantee is not met by trusting nothing

    # Baseline: the same bound at every threshold with a union bound instead of the sequence.
    # It is the fixed-threshold rule that needs no more knowledge than the method itself; a
    # single threshold fixed in advance is as good only when it happens to sit near the best
    # one, which takes knowing the truth (with the over-confident judge, 0.95 fixed in
    # advance covers about as much as the sequence; 0.9 or 0.99 far less).
    base = _bonferroni_thresholds(cal_c, cal_a, DEFAULT_MIN_COUNT)
    base_bad = np.array([x is not None and population_agreement(x) < 1 - ALPHA for x in base])
    assert base_bad.sum() <= tolerance  # it meets the guarantee too, so the comparison is fair
    base_coverage = float(np.mean([_share(x) for x in base]))
    assert coverage >= base_coverage, (coverage, base_coverage)
    # The realised test coverage agrees with the exact share trusted.
    assert trusted.mean() == pytest.approx(coverage, abs=0.01)


def test_cascade_calibrates_each_stage_on_what_the_earlier_left():
    rng = np.random.default_rng(8)
    n = 3000
    c1, c2 = rng.uniform(0.5, 1.0, n), rng.uniform(0.5, 1.0, n)
    # Each judge is always right above a confidence (0.9, resp. 0.7) and a coin below it, so
    # both stages certainly find a threshold.
    a1 = np.where(c1 >= 0.9, 1, rng.random(n) < 0.5).astype(int)
    a2 = np.where(c2 >= 0.7, 1, rng.random(n) < 0.5).astype(int)
    res = trust_cascade([c1, c2], [a1, a2], alpha=ALPHA, delta=DELTA)
    s1 = trust_threshold(c1, a1, alpha=ALPHA, delta=DELTA)
    left = c1 < s1.threshold
    s2 = trust_threshold(c2[left], a2[left], alpha=ALPHA, delta=DELTA)
    assert res.stages == (s1, s2)
    assert s1.threshold is not None and s2.threshold is not None
    taken2 = left & (c2 >= s2.threshold)
    assert res.n_trusted == s1.n_trusted + int(taken2.sum())
    assert res.coverage == pytest.approx((s1.n_trusted + taken2.sum()) / n)
    assert res.errors_trusted == s1.errors_trusted + int((a2[taken2] == 0).sum())
    assert res.guaranteed_level == pytest.approx(1 - ALPHA)
    assert res.confidence == pytest.approx(1 - 2 * DELTA)
    json.dumps(res.to_json(), allow_nan=False)


def test_cascade_guarantee_over_seeded_splits():
    # Two independent judges; population agreement of the cascade's trusted set is exact:
    # stage 1 takes c1 >= l1 (share P1, agreement A1), stage 2 takes c1 < l1 and c2 >= l2.
    splits, n_cal = 1000, 1000
    rng = np.random.default_rng(99)
    c1 = rng.uniform(0.5, 1.0, (splits, n_cal))
    c2 = rng.uniform(0.5, 1.0, (splits, n_cal))
    a1 = (rng.random(c1.shape) < c1**2).astype(int)
    a2 = (rng.random(c2.shape) < c2).astype(int)
    bad = 0
    coverage, first_only = [], []
    for s in range(splits):
        res = trust_cascade([c1[s], c2[s]], [a1[s], a2[s]], alpha=ALPHA, delta=DELTA)
        l1, l2 = (st.threshold for st in res.stages)
        p1 = _share(l1)
        p2 = (1 - p1) * _share(l2)
        agree_mass = (p1 * SCENARIOS["overconfident"][1](l1) if l1 is not None else 0.0) + (
            p2 * SCENARIOS["calibrated"][1](l2) if l2 is not None else 0.0)
        if p1 + p2 > 0:
            bad += agree_mass / (p1 + p2) < 1 - ALPHA
        coverage.append(p1 + p2)
        first_only.append(p1)
    # The union bound promises at most 2 delta; the simulation must stay within it.
    assert bad <= stats.binom.ppf(1 - 1e-4, splits, 2 * DELTA), bad
    # The second, better-calibrated judge decides much of what the first left.
    assert np.mean(coverage) > 2 * np.mean(first_only), (np.mean(coverage), np.mean(first_only))


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": 0.0}, {"alpha": 1.0}, {"delta": -0.1}, {"delta": 1.5}, {"alpha": float("nan")},
     {"min_count": 0}, {"min_count": 2.5}, {"alpha": True}],
)
def test_bad_parameters_are_refused(kwargs):
    args = {"alpha": 0.1, "delta": 0.1, **kwargs}
    with pytest.raises(ValueError):
        trust_threshold([0.9, 0.8], [1, 0], **args)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="0/1"):
        trust_threshold([0.9, 0.8], [1, 2], alpha=0.1, delta=0.1)
    with pytest.raises(ValueError, match="one entry per row"):
        trust_threshold([0.9, 0.8], [1], alpha=0.1, delta=0.1)
    with pytest.raises(ValueError, match="same rows"):
        trust_cascade([[0.9, 0.8], [0.9]], [[1, 1], [1]], alpha=0.1, delta=0.1)
