"""The confidence sequence: its boundary is the authors' formula, and its guarantee holds.

* The boundary and the choice of rho are checked against a transcription of the authors'
  package (`confseq` 0.0.11, src/confseq/uniform_boundaries.h:
  ``TwoSidedNormalMixture::bound = sqrt((v + rho) * (log(1 + v / rho) + 2 * log_threshold))``
  with ``log_threshold = log(1 / alpha)`` and ``best_rho(v, alpha) = v / (2 log(1/alpha) +
  log(1 + 2 log(1/alpha)))``), and against the mixture supermartingale itself: at the
  boundary, ``log M = log(1/alpha)`` exactly (Ville's threshold).
* Time-uniform coverage by simulation: 2,000 seeded Bernoulli streams of 3,000 observations,
  looked at after *every* observation; the share of streams whose CS ever misses the mean
  stays within alpha (plus Monte Carlo error). The same streams looked at with a pointwise
  95 % Wilson interval miss far more often, which is the failure the CS prevents (and shows
  that this test can fail).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtri

from evalstats import mean_confidence_sequence, normal_mixture_radius, normal_mixture_rho


def _confseq_bound(v: float, alpha: float, rho: float) -> float:
    return math.sqrt((v + rho) * (math.log(1 + v / rho) + 2 * math.log(1 / alpha)))


def _confseq_best_rho(v: float, alpha: float) -> float:
    return v / (2 * math.log(1 / alpha) + math.log(1 + 2 * math.log(1 / alpha)))


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.2])
@pytest.mark.parametrize("v_opt", [10.0, 250.0])
def test_boundary_is_the_authors_formula(alpha: float, v_opt: float) -> None:
    rho = normal_mixture_rho(v_opt, alpha)
    assert rho == pytest.approx(_confseq_best_rho(v_opt, alpha), rel=1e-12)
    v = np.array([0.0, 1.0, 12.5, 400.0, 1e6])
    got = normal_mixture_radius(v, alpha=alpha, rho=rho)
    want = [_confseq_bound(float(x), alpha, rho) for x in v]
    assert got == pytest.approx(want, rel=1e-12)
    # Ville: the two-sided normal-mixture supermartingale equals 1/alpha on the boundary.
    for vi, s in zip(v, got, strict=True):
        log_m = 0.5 * math.log(rho / (vi + rho)) + s * s / (2 * (vi + rho))
        assert log_m == pytest.approx(math.log(1 / alpha), abs=1e-9)


def test_a_hand_computed_interval() -> None:
    # 100 observations, 80 passes, alpha 0.05, tightest at n = 100, sigma = 1/2:
    # v = 25, rho = 25 / (2 ln 20 + ln(1 + 2 ln 20)) = 3.150, radius 0.1518
    cs = mean_confidence_sequence([100], [80.0], alpha=0.05, n_opt=100)
    rho = 25 / (2 * math.log(20) + math.log(1 + 2 * math.log(20)))
    radius = math.sqrt((25 + rho) * (math.log(1 + 25 / rho) + 2 * math.log(20))) / 100
    assert cs.lower[0] == pytest.approx(0.8 - radius)
    assert cs.upper[0] == pytest.approx(min(1.0, 0.8 + radius))
    assert radius == pytest.approx(0.1518, abs=1e-4)
    # Wider than the fixed 95 % interval (1.96 * 0.04 = 0.078): the price of looking at will.


def test_no_data_is_the_whole_range_and_bad_input_is_refused() -> None:
    cs = mean_confidence_sequence([0, 0], [0.0, 0.0])
    assert list(cs.lower) == [0.0, 0.0] and list(cs.upper) == [1.0, 1.0]
    with pytest.raises(ValueError):
        mean_confidence_sequence([2, 1], [1.0, 1.0])
    with pytest.raises(ValueError):
        mean_confidence_sequence([2], [3.0])


@pytest.mark.parametrize("p", [0.5, 0.9, 0.02])
def test_time_uniform_coverage_by_simulation(p: float) -> None:
    alpha, runs, horizon = 0.05, 2000, 3000
    rng = np.random.default_rng(20261207)
    x = rng.random((runs, horizon)) < p
    sums = np.cumsum(x, axis=1)
    counts = np.arange(1, horizon + 1)
    missed = np.zeros(runs, dtype=bool)
    for r in range(runs):
        cs = mean_confidence_sequence(counts, sums[r].astype(float), alpha=alpha)
        missed[r] = bool(np.any((cs.lower > p) | (cs.upper < p)))
    rate = missed.mean()
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs), rate

    # The pointwise 95 % Wilson interval, looked at as often, misses far more (at p = 0.5).
    if p == 0.5:
        z = float(ndtri(0.975))
        phat = sums / counts
        centre = (phat + z * z / (2 * counts)) / (1 + z * z / counts)
        half = z * np.sqrt(phat * (1 - phat) / counts + z * z / (4 * counts**2)) / (
            1 + z * z / counts)
        wilson_missed = np.any((centre - half > p) | (centre + half < p), axis=1).mean()
        assert wilson_missed > 4 * alpha, wilson_missed


def test_restart_shares_sum_to_alpha() -> None:
    from evalstats import restart_alpha
    assert sum(restart_alpha(0.05, d) for d in range(100_000)) == pytest.approx(0.05, rel=1e-4)


def test_drift_monitor_is_the_union_of_its_restarted_sequences() -> None:
    from evalstats import drift_monitor, restart_alpha
    rng = np.random.default_rng(5)
    n = rng.poisson(40, 100)
    p = np.where(np.arange(100) < 60, 0.9, 0.6)
    k = rng.binomial(n, p).astype(float)
    monitor = drift_monitor(n, k, limit=0.8, direction="below", alpha=0.05, restart_every=20)
    expected = np.zeros(100, dtype=bool)
    for d, start in enumerate(range(0, 100, 20)):
        cs = mean_confidence_sequence(np.cumsum(n[start:]), np.cumsum(k[start:]),
                                      alpha=restart_alpha(0.05, d))
        expected[start:] |= cs.upper < 0.8
    assert (monitor.alarm == expected).all()
    assert monitor.first_alarm is not None and monitor.first_alarm >= 60
    # The evidence at the last look comes from a sequence started after the drift.
    assert monitor.start >= 60 and monitor.upper < 0.8
    quiet = drift_monitor(n[:60], k[:60], limit=0.8, direction="below")
    assert quiet.first_alarm is None and not quiet.alarm.any()
    with pytest.raises(ValueError):
        drift_monitor(n, k, limit=0.8, direction="sideways")
