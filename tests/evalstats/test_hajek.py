"""The human-only mean with unequal weights: the ratio (Hajek) estimator and its linearised
variance (docs/statistics.md), checked against statsmodels, a worked example and a seeded
simulation of coverage."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.stats import norm

from evalstats import ppi


def test_constant_labels_with_unequal_weights_have_no_spread() -> None:
    # The worked example: every label is 1, so every weighted mean is 1 and the
    # standard error is 0 whatever the weights (the spread-of-w*y form said [0.510, 1.490]).
    est = ppi.classical_mean([1, 1, 1, 1], w=[1, 1, 3, 3])
    assert est.value == pytest.approx(1.0)
    assert est.se == pytest.approx(0.0, abs=1e-12)
    assert (est.ci_low, est.ci_high) == pytest.approx((1.0, 1.0), abs=1e-12)


def test_hand_computed_textbook_example() -> None:
    # y = [1, 0, 1, 0], w = [1, 1, 3, 3]: mean = (1 + 3) / 8 = 0.5; linearised residuals
    # w (y - 0.5) / 8 = [1, -1, 3, -3] / 16; variance = 20 / 256, se = sqrt(20) / 16.
    est = ppi.classical_mean([1, 0, 1, 0], w=[1, 1, 3, 3])
    assert est.value == pytest.approx(0.5)
    assert est.se == pytest.approx(np.sqrt(20) / 16)


@pytest.mark.parametrize("seed", range(5))
def test_equals_statsmodels_hc0_sandwich_of_weighted_intercept(seed: int) -> None:
    # The ratio mean is the weighted least-squares intercept; its HC0 sandwich standard error
    # is the Taylor-linearised variance (and HC1 the n / (n - 1) "t" variant).
    rng = np.random.default_rng(seed)
    n = 40 + 10 * seed
    y = (rng.random(n) < 0.6).astype(float) if seed % 2 else rng.normal(2.0, 1.0, n)
    w = rng.uniform(0.5, 5.0, n)
    ones = np.ones((n, 1))
    fit0 = sm.WLS(y, ones, weights=w).fit(cov_type="HC0")
    # statsmodels' WLS sandwich squares the weights inside (X'WX)^-1 X'W e e' W X (X'WX)^-1.
    est = ppi.classical_mean(y, w=w, level=0.9)
    assert est.value == pytest.approx(float(fit0.params[0]), rel=1e-12)
    assert est.se == pytest.approx(float(fit0.bse[0]), rel=1e-10)
    fit1 = sm.WLS(y, ones, weights=w).fit(cov_type="HC1")
    est_t = ppi.classical_mean(y, w=w, interval="t")
    assert est_t.se == pytest.approx(float(fit1.bse[0]), rel=1e-10)
    # Equal weights: the unweighted standard error std(y) / sqrt(n).
    flat = ppi.classical_mean(y, w=np.full(n, 2.5))
    assert flat.se == pytest.approx(float(y.std() / np.sqrt(n)), rel=1e-12)


@pytest.mark.parametrize("unequal", [False, True])
def test_coverage_under_equal_and_unequal_inclusion_probabilities(unequal: bool) -> None:
    # A finite population of 5,000 outputs whose pass probability rises with a size measure;
    # 1,000 samples of 120 drawn with probability proportional to size (unequal) or uniformly
    # (equal), each weighted 1 / probability. The 95% interval must cover the population's
    # pass rate 93-97% of the time.
    rng = np.random.default_rng(20261207 + int(unequal))
    big_n, n, runs = 5000, 120, 1000
    size = rng.gamma(2.0, 1.0, big_n)
    y_pop = (rng.random(big_n) < 0.2 + 0.6 * size / size.max()).astype(float)
    truth = float(y_pop.mean())
    p = size / size.sum() if unequal else np.full(big_n, 1.0 / big_n)
    draws = rng.choice(big_n, size=(runs, n), p=p)
    z = norm.ppf(0.975)
    covered = 0
    widths = []
    for r in range(runs):
        at = draws[r]
        est = ppi.classical_mean(y_pop[at], w=1.0 / p[at])
        assert est.ci_low is not None and est.ci_high is not None
        covered += est.ci_low <= truth <= est.ci_high
        widths.append(est.ci_high - est.ci_low)
        assert est.ci_high - est.ci_low == pytest.approx(2 * z * est.se)
    assert 0.93 <= covered / runs <= 0.97
    assert np.mean(widths) > 0
