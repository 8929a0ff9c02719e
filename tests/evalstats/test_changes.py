"""The two-sample change tests against scipy.stats and statsmodels (computed independently)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportions_ztest

from evalstats import rank_sum_test, two_proportion_test


@pytest.mark.parametrize("seed", range(6))
def test_rank_sum_matches_scipy_mannwhitneyu(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Lengths are integers: ties are common, which the tie correction must handle.
    x = rng.poisson(120, size=int(rng.integers(20, 300))).astype(float)
    y = rng.poisson(120 + 4 * seed, size=int(rng.integers(20, 300))).astype(float)
    ours = rank_sum_test(x, y)
    ref = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic",
                             use_continuity=True)
    assert ours.statistic == pytest.approx(float(ref.statistic))
    assert ours.p_value == pytest.approx(float(ref.pvalue), rel=1e-9, abs=1e-15)
    assert ours.shift == pytest.approx(float(np.median(x) - np.median(y)))


def test_rank_sum_detects_a_shift_and_not_its_absence() -> None:
    rng = np.random.default_rng(7)
    base = rng.lognormal(5, 0.4, 500)
    assert rank_sum_test(rng.lognormal(5, 0.4, 500), base).p_value > 0.01
    assert rank_sum_test(rng.lognormal(5.3, 0.4, 500), base).p_value < 1e-6


def test_rank_sum_degenerate_inputs() -> None:
    assert rank_sum_test([], [1.0]).p_value is None
    assert rank_sum_test([2.0, 2.0], [2.0]).p_value is None
    with pytest.raises(ValueError):
        rank_sum_test([float("nan")], [1.0])


@pytest.mark.parametrize(("k1", "n1", "k2", "n2"),
                         [(12, 400, 30, 410), (5, 50, 5, 60), (0, 100, 3, 100)])
def test_two_proportions_match_statsmodels(k1: int, n1: int, k2: int, n2: int) -> None:
    ours = two_proportion_test(k1, n1, k2, n2)
    z, p = proportions_ztest([k1, k2], [n1, n2])
    assert ours.z == pytest.approx(float(z))
    assert ours.p_value == pytest.approx(float(p))


def test_two_proportions_degenerate() -> None:
    assert two_proportion_test(0, 0, 1, 2).p_value is None
    assert two_proportion_test(0, 10, 0, 10).p_value is None
    with pytest.raises(ValueError):
        two_proportion_test(3, 2, 1, 2)
