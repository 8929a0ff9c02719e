"""Ranking statistics (evalstats.ranking) against scipy, statsmodels and brute-force definitions.

All data here are simulated (seeded numpy generators or hypothesis); none of it is real.
"""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ztest

from evalstats.ranking import holm, kendall_tau, pareto_front, rank_with_ties, two_sided_p

# ---------------------------------------------------------------------------------------------
# kendall_tau
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [5, 8, 30, 200])
def test_kendall_tau_value_and_p_are_scipys(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, n).astype(float)  # ties on both sides: tau-b matters
    y = x + rng.integers(-2, 3, n)
    est = kendall_tau(x, y, level=0.95)
    ref = stats.kendalltau(x, y)
    assert est.value == ref.statistic
    assert est.p_value == ref.pvalue
    assert est.n_items == n


def test_kendall_tau_interval_is_fisher_z_with_fhp_variance() -> None:
    # Public benchmark score vs private estimate of 8 candidates (simulated figures).
    public = np.array([71.2, 68.0, 66.5, 64.1, 60.3, 58.8, 55.0, 52.4])
    private = np.array([0.81, 0.84, 0.78, 0.74, 0.76, 0.69, 0.70, 0.61])
    est = kendall_tau(public, private, level=0.9)
    tau = stats.kendalltau(public, private).statistic
    z, half = np.arctanh(tau), stats.norm.ppf(0.95) * np.sqrt(0.437 / (8 - 4))
    assert est.ci_low == pytest.approx(np.tanh(z - half), rel=1e-12)
    assert est.ci_high == pytest.approx(np.tanh(z + half), rel=1e-12)
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low < est.value < est.ci_high
    assert est.level == 0.9


def test_kendall_tau_small_n_missing_and_degenerate() -> None:
    est = kendall_tau([1, 2, 3, 4], [1, 3, 2, 4])
    assert est.value == stats.kendalltau([1, 2, 3, 4], [1, 3, 2, 4]).statistic
    assert not est.has_interval
    assert any("< 5" in w for w in est.warnings)
    est = kendall_tau([1, 2, np.nan, 4, 5, 6, 7], [2, 1, 3, 4, 5, 7, 6])
    assert est.n_items == 6
    assert any("1 pairs dropped" in w for w in est.warnings)
    assert est.value == stats.kendalltau([1, 2, 4, 5, 6, 7], [2, 1, 4, 5, 7, 6]).statistic
    perfect = kendall_tau(np.arange(6), np.arange(6))
    assert perfect.value == pytest.approx(1.0) and perfect.ci_low == perfect.ci_high
    assert any("degenerates" in w for w in perfect.warnings)
    tied = kendall_tau(np.ones(6), np.arange(6))
    assert math.isnan(tied.value) and not tied.has_interval


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_kendall_tau_interval_coverage_bivariate_normal(rho: float) -> None:
    # Simulated bivariate normal samples of n = 30; population tau = (2 / pi) arcsin(rho).
    runs, n = 2000, 30
    truth = 2.0 / math.pi * math.asin(rho)
    rng = np.random.default_rng(77)
    cov = np.array([[1.0, rho], [rho, 1.0]])
    data = rng.multivariate_normal([0.0, 0.0], cov, size=(runs, n))
    hits = 0
    for r in range(runs):
        est = kendall_tau(data[r, :, 0], data[r, :, 1], level=0.95)
        hits += est.ci_low <= truth <= est.ci_high  # type: ignore[operator]
    assert 0.92 <= hits / runs <= 0.98, hits / runs


# ---------------------------------------------------------------------------------------------
# holm
# ---------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(0.0, 1.0),
            st.sampled_from([0.0, 0.01, 0.05, 0.05, 1.0]),  # ties and the ends
        ),
        min_size=1,
        max_size=30,
    )
)
def test_holm_is_statsmodels(p: list[float]) -> None:
    ours = holm(p)
    # multipletests runs a full gc.collect() on every call (~50 ms in a test process); the
    # collection has no effect on its result.
    with mock.patch("gc.collect"):
        ref = multipletests(p, method="holm")[1]
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)


def test_holm_nan_stays_nan_and_is_not_counted() -> None:
    p = [0.01, float("nan"), 0.04, 0.03, float("nan")]
    ours = holm(p)
    assert math.isnan(ours[1]) and math.isnan(ours[4])
    ref = multipletests([0.01, 0.04, 0.03], method="holm")[1]  # m = 3, not 5
    np.testing.assert_allclose([ours[0], ours[2], ours[3]], ref, rtol=1e-12)
    assert holm([]) == []
    assert all(math.isnan(v) for v in holm([float("nan")] * 2))
    with pytest.raises(ValueError):
        holm([0.5, 1.5])


# ---------------------------------------------------------------------------------------------
# two_sided_p
# ---------------------------------------------------------------------------------------------


def test_two_sided_p_matches_statsmodels_ztest() -> None:
    rng = np.random.default_rng(8)
    for shift in (0.0, 0.1, 0.3, -0.5):
        x = rng.normal(shift, 1.0, 120)
        se = x.std(ddof=1) / math.sqrt(x.size)
        assert two_sided_p(float(x.mean()), se) == pytest.approx(ztest(x, value=0.0)[1], rel=1e-9)


def test_two_sided_p_reference_values_and_undefined() -> None:
    # 1.959964 standard errors: the two-sided 5 % point of the normal.
    assert two_sided_p(1.959964, 1.0) == pytest.approx(0.05, abs=1e-6)
    assert two_sided_p(-2.575829, 1.0) == pytest.approx(0.01, abs=1e-6)
    assert two_sided_p(0.0, 0.3) == 1.0
    assert two_sided_p(30.0, 1.0) > 0.0  # no cancellation to zero in the far tail
    for se in (0.0, None, float("nan"), -1.0):
        assert math.isnan(two_sided_p(1.0, se))
    assert math.isnan(two_sided_p(float("nan"), 1.0))


# ---------------------------------------------------------------------------------------------
# pareto_front
# ---------------------------------------------------------------------------------------------


def _brute_front(points: np.ndarray, maximise: list[bool]) -> np.ndarray:
    """The definition, pair by pair: i is on the front unless some j dominates it."""
    sign = np.where(maximise, 1.0, -1.0)
    out = []
    for i in range(points.shape[0]):
        if np.isnan(points[i]).any():
            out.append(False)
            continue
        dominated = False
        for j in range(points.shape[0]):
            if j == i or np.isnan(points[j]).any():
                continue
            a, b = points[j] * sign, points[i] * sign
            if all(a >= b) and any(a > b):
                dominated = True
                break
        out.append(not dominated)
    return np.array(out, dtype=bool)


def test_pareto_front_hand_example() -> None:
    # quality (max), p95 latency ms (min), cost per 1,000 (min)
    points = np.array(
        [
            [0.82, 2100.0, 1.8],  # A: on the front (best quality)
            [0.78, 1200.0, 0.9],  # B: on the front (fast and cheap)
            [0.78, 1500.0, 1.2],  # C: dominated by B
            [0.70, 1100.0, 2.5],  # D: on the front (fastest)
            [0.82, 2100.0, 1.8],  # E: identical to A: both stay
            [np.nan, 900.0, 0.1],  # F: no quality estimate: never on the front
            [0.60, 3000.0, 3.0],  # G: dominated by everything complete
        ]
    )
    mask = pareto_front(points, [True, False, False])
    assert mask.tolist() == [True, True, False, True, True, False, False]
    assert mask.dtype == bool


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 25),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
    st.floats(0.0, 0.3),
)
def test_pareto_front_matches_brute_force(n: int, k: int, seed: int, nan_share: float) -> None:
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 5, (n, k)).astype(float)  # a small grid: many ties
    points[rng.random((n, k)) < nan_share] = np.nan
    maximise = [bool(b) for b in rng.integers(0, 2, k)]
    np.testing.assert_array_equal(pareto_front(points, maximise), _brute_front(points, maximise))


def test_pareto_front_bad_input() -> None:
    with pytest.raises(ValueError):
        pareto_front(np.ones((3, 2)), [True])
    with pytest.raises(ValueError):
        pareto_front(np.ones(3), [True])
    assert pareto_front(np.empty((0, 2)), [True, False]).shape == (0,)


# ---------------------------------------------------------------------------------------------
# rank_with_ties
# ---------------------------------------------------------------------------------------------


def test_rank_with_ties_hand_example() -> None:
    values = [0.71, 0.80, 0.71, float("nan"), 0.65]
    np.testing.assert_array_equal(rank_with_ties(values), [2.5, 1.0, 2.5, np.nan, 4.0])
    np.testing.assert_array_equal(
        rank_with_ties(values, higher_is_better=False), [2.5, 4.0, 2.5, np.nan, 1.0]
    )
    rng = np.random.default_rng(1)
    v = rng.integers(0, 4, 20).astype(float)
    np.testing.assert_array_equal(rank_with_ties(v), stats.rankdata(-v))
