"""Seeded simulations with a known truth for evalstats.calibration.

* Curves are recovered, with an error that shrinks as the number of labels grows.
* Shrinkage toward the pooled curve beats per-stratum fits on small strata and stays within a
  small margin of them on large strata.
* Calibrating a miscalibrated judge improves held-out log loss.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss

from evalstats import calibration as cal

GRID = np.linspace(-1.5, 1.5, 61)


def _truth(s: np.ndarray, shift: float | np.ndarray = 0.0) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(2.0 * s - 1.0 + shift)))


def _draw(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.uniform(-2, 2, n)
    return s, (rng.random(n) < _truth(s)).astype(float)


@pytest.mark.parametrize(
    ("method", "bound_small", "bound_large"),
    [("platt", 0.07, 0.03), ("isotonic", 0.25, 0.12), ("histogram", 0.25, 0.12)],
)
def test_known_curve_is_recovered_with_error_shrinking_in_n(
    method: cal.CalibrationMethod, bound_small: float, bound_large: float
) -> None:
    err = {}
    for n in (500, 5000):
        err[n] = np.mean(
            [
                np.abs(
                    cal.calibration_fit(*_draw(n, seed), method=method).predict(GRID) - _truth(GRID)
                ).max()
                for seed in range(8)
            ]
        )
    assert err[500] < bound_small
    assert err[5000] < bound_large
    assert err[5000] < 0.7 * err[500]


def test_beta_recovers_a_curve_of_its_family() -> None:
    def truth(q: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(0.2 + 1.2 * np.log(q) + 0.8 * -np.log(1 - q))))

    grid = np.linspace(0.05, 0.95, 37)
    err = {}
    for n in (500, 5000):
        runs = []
        for seed in range(8):
            rng = np.random.default_rng(seed)
            q = rng.uniform(0.01, 0.99, n)
            y = (rng.random(n) < truth(q)).astype(float)
            curve = cal.calibration_fit(q, y, method="beta")
            runs.append(np.abs(curve.predict(grid) - truth(grid)).max())
        err[n] = np.mean(runs)
    assert err[500] < 0.08 and err[5000] < 0.03 and err[5000] < 0.6 * err[500]


def test_selected_curve_recovers_the_truth() -> None:
    err = {}
    for n in (500, 5000):
        runs = []
        for seed in range(4):
            s, y = _draw(n, seed)
            sel = cal.calibration_select(s, y, rng=np.random.default_rng(seed))
            runs.append(np.abs(sel.curve.predict(GRID) - _truth(GRID)).max())
        err[n] = np.mean(runs)
    assert err[500] < 0.1 and err[5000] < 0.05 and err[5000] < err[500]


def _strata_mse(n_per: int, n_strata: int, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-repetition MSE (vs the true curves, on a grid) of shrunk and per-stratum curves."""
    shrunk, own = [], []
    for r in range(reps):
        rng = np.random.default_rng(1000 + r)
        delta = rng.normal(0, 0.4, n_strata)
        labels = np.repeat([f"s{i}" for i in range(n_strata)], n_per)
        s = rng.uniform(-2, 2, labels.size)
        y = (rng.random(labels.size) < _truth(s, np.repeat(delta, n_per))).astype(float)
        h = cal.calibration_hierarchical(s, y, labels, min_labels=10, rng=rng)
        e_h = e_o = 0.0
        for i in range(n_strata):
            true = _truth(GRID, delta[i])
            rows = labels == f"s{i}"
            alone = cal.calibration_select(s[rows], y[rows], rng=rng).curve
            e_h += float(np.mean((h.strata[f"s{i}"].predict(GRID) - true) ** 2))
            e_o += float(np.mean((alone.predict(GRID) - true) ** 2))
        shrunk.append(e_h / n_strata)
        own.append(e_o / n_strata)
    return np.array(shrunk), np.array(own)


def test_shrinkage_beats_per_stratum_fits_on_small_strata() -> None:
    shrunk, own = _strata_mse(n_per=20, n_strata=10, reps=8)
    assert shrunk.mean() < 0.5 * own.mean()
    assert (shrunk < own).mean() >= 0.75


def test_shrinkage_matches_per_stratum_fits_on_large_strata() -> None:
    shrunk, own = _strata_mse(n_per=1000, n_strata=4, reps=4)
    # Within 20 % of the per-stratum MSE (about 3e-4 here): large strata keep their own offset.
    assert shrunk.mean() < 1.2 * own.mean()


def test_hierarchical_heldout_beats_the_pooled_curve_when_strata_differ() -> None:
    rng = np.random.default_rng(7)
    labels = np.repeat(["a", "b", "c"], 400)
    shift = np.repeat([1.5, -1.5, 0.0], 400)
    s = rng.uniform(-2, 2, labels.size)
    y = (rng.random(labels.size) < _truth(s, shift)).astype(float)
    h = cal.calibration_hierarchical(s, y, labels, rng=rng)
    assert log_loss(y, h.heldout()) < log_loss(y, h.pooled.heldout) - 0.02


def test_calibration_improves_heldout_log_loss_of_a_miscalibrated_judge() -> None:
    rng = np.random.default_rng(8)
    n = 2000
    s = rng.uniform(-2, 2, n)
    y = (rng.random(n) < _truth(s)).astype(float)
    # An overconfident judge that also leans towards "pass".
    judge_p = 1 / (1 + np.exp(-(3 * (2 * s - 1) + 1.5)))
    sel = cal.calibration_select(judge_p, y, rng=rng)
    raw = log_loss(y, judge_p)
    calibrated = log_loss(y, sel.heldout)
    assert calibrated < raw - 0.1
    # ... and comes close to the loss of the true probabilities.
    assert calibrated < log_loss(y, _truth(s)) + 0.02
