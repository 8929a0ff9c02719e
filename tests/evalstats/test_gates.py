"""Gate statistics (evalstats.gates) against statsmodels, scipy, numpy and exact enumeration.

All data here are simulated (seeded numpy generators); none of it is real traffic.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from evalstats.gates import (
    _quantile_replicates,
    gate_check,
    mean_per_thousand,
    quantile_intervals,
    rate_gate,
)
from evalstats.results import Estimate

# ---------------------------------------------------------------------------------------------
# rate_gate
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (980, 1000), (1000, 1000), (1, 1)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_rate_gate_is_the_statsmodels_wilson_interval(k: int, n: int, level: float) -> None:
    est = rate_gate(k, n, level=level)
    lo, hi = proportion_confint(k, n, alpha=1 - level, method="wilson")
    assert est.value == k / n
    assert est.ci_low == pytest.approx(lo, abs=1e-12)
    assert est.ci_high == pytest.approx(hi, abs=1e-12)
    assert est.n_items == n
    assert est.level == level


def test_rate_gate_without_outputs_is_no_data_not_zero() -> None:
    est = rate_gate(0, 0, level=0.95)
    assert math.isnan(est.value)
    assert not est.has_interval
    assert est.warnings == ("no outputs",)
    assert gate_check(est, threshold=0.98, direction="min") == (None, None)


# ---------------------------------------------------------------------------------------------
# quantile_intervals: point values, missing values, groups
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0.0, 0.05, 0.3, 0.5, 0.95, 0.99, 1.0])
@pytest.mark.parametrize(
    "sizes",
    [
        {7: 1, 2: 2, 0: 17, 3: 200, 11: 1001},  # dense non-negative codes (bincount path)
        {7: 1, -2: 2, 0: 17, 3: 200, 10**9: 1001},  # sparse or negative codes (np.unique)
    ],
)
def test_quantile_point_is_numpy_linear_quantile_per_group(q: float, sizes: dict[int, int]) -> None:
    rng = np.random.default_rng(3)
    groups = np.concatenate([np.full(s, g) for g, s in sizes.items()])
    values = rng.lognormal(6.0, 0.8, groups.size).round(0)  # integer ms: ties
    perm = rng.permutation(groups.size)
    groups, values = groups[perm], values[perm]
    out = quantile_intervals(values, groups, q, n_resamples=200, rng=rng)
    assert set(out) == set(sizes)
    for g, s in sizes.items():
        x = values[groups == g]
        est = out[g]
        assert est.value == np.quantile(x, q, method="linear")
        assert est.n_items == s
        assert est.n_resamples == 200
        assert est.ci_low is not None and est.ci_high is not None
        # Every replicate lies within the data, and so does the interval.
        assert x.min() <= est.ci_low <= est.ci_high <= x.max()


def test_quantile_drops_and_counts_missing_values() -> None:
    rng = np.random.default_rng(4)
    values = rng.lognormal(7.0, 0.5, 300)
    groups = np.repeat([0, 1, 2], 100)
    values[[1, 5, 9]] = np.nan  # group 0: three missing latencies
    values[200:] = np.nan  # group 2: no latency at all
    out = quantile_intervals(values, groups, 0.95, n_resamples=100, rng=rng)
    assert out[0].value == np.quantile(values[:100][~np.isnan(values[:100])], 0.95)
    assert out[0].n_items == 97
    assert "3 missing (NaN) values dropped" in out[0].warnings
    assert out[1].warnings == ()
    assert math.isnan(out[2].value) and not out[2].has_interval
    assert "no values" in out[2].warnings
    assert "100 missing (NaN) values dropped" in out[2].warnings


def test_quantile_warns_when_few_values_lie_beyond_it() -> None:
    rng = np.random.default_rng(5)
    out = quantile_intervals(rng.random(60), np.zeros(60, int), 0.95, n_resamples=50, rng=rng)
    assert any("beyond the 0.95 quantile" in w for w in out[0].warnings)  # 0.05 * 60 = 3 < 5
    out = quantile_intervals(rng.random(200), np.zeros(200, int), 0.95, n_resamples=50, rng=rng)
    assert out[0].warnings == ()


def test_quantile_empty_input_and_bad_arguments() -> None:
    rng = np.random.default_rng(0)
    assert quantile_intervals(np.array([]), np.array([], int), 0.5, rng=rng) == {}
    with pytest.raises(ValueError):
        quantile_intervals(np.ones(3), np.zeros(2, int), 0.5, rng=rng)
    with pytest.raises(ValueError):
        quantile_intervals(np.ones(3), np.zeros(3, int), 1.5, rng=rng)
    with pytest.raises(ValueError):
        quantile_intervals(np.ones(3), np.array(["a", "b", "c"]), 0.5, rng=rng)


# ---------------------------------------------------------------------------------------------
# quantile_intervals: the bootstrap distribution
# ---------------------------------------------------------------------------------------------


def _chi_square_p(draws: np.ndarray, support: np.ndarray, probs: np.ndarray) -> float:
    """Goodness of fit of draws to a discrete law (cells with expected count < 5 merged)."""
    observed = np.array([(draws == s).sum() for s in support], dtype=float)
    assert observed.sum() == draws.size  # every draw is a possible bootstrap value
    expected = probs * draws.size
    obs_cells, exp_cells, o_acc, e_acc = [], [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= 5:
            obs_cells.append(o_acc)
            exp_cells.append(e_acc)
            o_acc = e_acc = 0.0
    obs_cells[-1] += o_acc
    exp_cells[-1] += e_acc
    return float(stats.chisquare(obs_cells, exp_cells).pvalue)


@pytest.mark.parametrize("q", [0.3, 0.5, 0.75, 0.95])
def test_quantile_replicates_follow_the_enumerated_bootstrap_distribution(q: float) -> None:
    # Every one of the n^n equally likely resamples of n = 6 values, quantile by numpy: the
    # exact bootstrap law of the quantile, computed without our code.
    x = np.array([0.3, 1.1, 1.1, 2.0, 4.5, 9.0])  # a tie included
    n = x.size
    resamples = np.array(list(itertools.product(range(n), repeat=n)))
    exact = np.quantile(x[resamples], q, axis=1, method="linear")
    support, counts = np.unique(exact.round(12), return_counts=True)
    rng = np.random.default_rng(11)
    draws = _quantile_replicates(x, np.array([0]), np.array([n]), q, 40_000, rng)[0].round(12)
    assert _chi_square_p(draws, support, counts / counts.sum()) > 1e-3


def test_order_statistic_law_matches_the_binomial_formula() -> None:
    # For distinct sorted values, P(k-th order statistic of a resample <= x_(i)) =
    # P(Binomial(n, (i+1)/n) >= k+1): a closed form for the median of n = 41 (h = 20 exactly).
    rng = np.random.default_rng(12)
    x = np.sort(rng.normal(size=41))
    n, k = x.size, 20
    cdf = stats.binom.sf(k, n, (np.arange(n) + 1) / n)
    probs = np.diff(np.r_[0.0, cdf])
    draws = _quantile_replicates(x, np.array([0]), np.array([n]), 0.5, 50_000, rng)[0]
    assert _chi_square_p(draws, x, probs) > 1e-3


@pytest.mark.parametrize(("q", "n", "seed"), [(0.5, 25, 1), (0.9, 60, 2), (0.95, 200, 3)])
def test_quantile_interval_agrees_with_scipy_bootstrap_percentile(
    q: float, n: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 1.0, n)
    b = 20_000
    ours = quantile_intervals(x, np.zeros(n, int), q, n_resamples=b, rng=rng)[0]
    ref = stats.bootstrap(
        (x,),
        lambda a, axis: np.quantile(a, q, axis=axis),
        method="percentile",
        n_resamples=b,
        vectorized=True,
        rng=np.random.default_rng(seed + 100),
    )
    assert ours.value == np.quantile(x, q)
    # Monte-Carlo tolerance: our endpoint must be a quantile of scipy's own bootstrap
    # distribution within 5 standard errors of the tail probability (two independent runs).
    boot = ref.bootstrap_distribution
    for alpha, mine in [(0.025, ours.ci_low), (0.975, ours.ci_high)]:
        d = 5.0 * math.sqrt(2.0 * alpha * (1 - alpha) / b)
        band = np.quantile(boot, [max(alpha - d, 0.0), min(alpha + d, 1.0)])
        assert band[0] <= mine <= band[1], (alpha, mine, band)
    lo_ref, hi_ref = ref.confidence_interval
    assert ours.ci_low == pytest.approx(lo_ref, rel=0.1)
    assert ours.ci_high == pytest.approx(hi_ref, rel=0.1)


@pytest.mark.slow
def test_median_interval_coverage_lognormal() -> None:
    # 2,000 simulated samples of n = 80 from a lognormal(0, 1) (true median 1), each its own
    # group so that one call bootstraps them all.
    runs, n = 2000, 80
    rng = np.random.default_rng(2026)
    values = rng.lognormal(0.0, 1.0, (runs, n)).ravel()
    groups = np.repeat(np.arange(runs), n)
    out = quantile_intervals(values, groups, 0.5, n_resamples=1000, rng=rng)
    hits = sum(e.ci_low <= 1.0 <= e.ci_high for e in out.values())  # type: ignore[operator]
    assert 0.92 <= hits / runs <= 0.98, hits / runs


@pytest.mark.slow
def test_quantile_intervals_500k_outputs_is_fast() -> None:
    # The selection benchmark's shape: 5 candidates x 11 strata cells, 500k outputs, B = 1000.
    # A loop over resamples takes minutes here; the exact draws take a fraction of a second.
    rng = np.random.default_rng(9)
    n = 500_000
    values = rng.lognormal(7.0, 0.6, n)
    values[rng.random(n) < 0.01] = np.nan
    groups = rng.integers(0, 55, n)
    start = time.perf_counter()
    out = quantile_intervals(values, groups, 0.95, n_resamples=1000, rng=rng)
    elapsed = time.perf_counter() - start
    assert len(out) == 55
    assert elapsed < 3.0, elapsed


# ---------------------------------------------------------------------------------------------
# mean_per_thousand
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_mean_per_thousand_is_the_scipy_t_interval(level: float) -> None:
    rng = np.random.default_rng(21)
    sizes = {0: 2, 1: 15, 4: 400, 9: 5000}
    groups = np.concatenate([np.full(s, g) for g, s in sizes.items()])
    # Per-output costs in dollars: small, skewed, with a large common part.
    values = 0.0021 + rng.gamma(0.5, 0.0004, groups.size)
    values[rng.random(groups.size) < 0.02] = np.nan
    out = mean_per_thousand(values, groups, level=level)
    for g in sizes:
        x = values[groups == g]
        x = x[~np.isnan(x)]
        ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence_level=level)
        est = out[g]
        assert est.value == pytest.approx(1000 * x.mean(), rel=1e-12)
        assert est.ci_low == pytest.approx(1000 * ci.low, rel=1e-10)
        assert est.ci_high == pytest.approx(1000 * ci.high, rel=1e-10)
        assert est.n_items == x.size


def test_mean_per_thousand_small_and_empty_groups() -> None:
    values = np.array([0.5, np.nan, np.nan, 2.0, 4.0])
    groups = np.array([0, 1, 1, 2, 2])
    out = mean_per_thousand(values, groups, level=0.95)
    assert out[0].value == 500.0 and not out[0].has_interval
    assert math.isnan(out[1].value) and "no values" in out[1].warnings
    assert "2 missing (NaN) values dropped" in out[1].warnings
    assert out[2].value == 3000.0 and out[2].has_interval
    assert any("only 2 values" in w for w in out[2].warnings)


# ---------------------------------------------------------------------------------------------
# gate_check
# ---------------------------------------------------------------------------------------------


def test_gate_check_uses_the_conservative_bound() -> None:
    est = Estimate(value=0.985, ci_low=0.975, ci_high=0.992, n_items=1000)
    # A schema-valid rate whose point passes 0.98 but whose lower bound does not: fails.
    assert gate_check(est, threshold=0.98, direction="min") == (0.975, False)
    assert gate_check(est, threshold=0.97, direction="min") == (0.975, True)
    assert gate_check(est, threshold=0.975, direction="min") == (0.975, True)  # >= passes
    # An error-rate style gate: the upper bound is checked.
    assert gate_check(est, threshold=0.99, direction="max") == (0.992, False)
    assert gate_check(est, threshold=0.992, direction="max") == (0.992, True)  # <= passes


def test_gate_check_with_real_intervals() -> None:
    # 20 errors in 1,000 outputs: point 2 % but the Wilson upper bound exceeds a 2 % budget.
    bound, passed = gate_check(rate_gate(20, 1000), threshold=0.02, direction="max")
    assert bound == pytest.approx(proportion_confint(20, 1000, method="wilson")[1])
    assert passed is False


def test_gate_check_without_interval_is_unknown() -> None:
    assert gate_check(Estimate(value=0.5), threshold=0.4, direction="min") == (None, None)
    nan = Estimate(value=float("nan"), ci_low=float("nan"), ci_high=float("nan"))
    assert gate_check(nan, threshold=0.4, direction="max") == (None, None)
    with pytest.raises(ValueError):
        gate_check(Estimate(value=0.5), threshold=0.4, direction="above")  # type: ignore[arg-type]
