"""Coverage of the bootstrap intervals when the true value is known (slow, but < 60 s)."""

from __future__ import annotations

import numpy as np
import pytest

import evalstats as es
from evalstats import _kernels as K

REPS = 1000


@pytest.mark.slow
@pytest.mark.parametrize("ci", ["bca", "percentile"])
def test_kappa_interval_coverage(ci: str) -> None:
    # Population: a fixed 3x3 joint distribution of (judge, human); its kappa is the truth.
    joint = np.array([[0.30, 0.05, 0.02], [0.06, 0.25, 0.04], [0.02, 0.06, 0.20]])
    joint /= joint.sum()
    truth = float(K.kappa_from_confusion(joint, K.weight_matrix(3, "quadratic")))
    rng = np.random.default_rng(2024)
    hits = 0
    for _ in range(REPS):
        cells = rng.choice(9, size=150, p=joint.ravel())
        res = es.bootstrap_kappa(
            cells // 3,
            cells % 3,
            categories=[0, 1, 2],
            weights="quadratic",
            rng=rng,
            options=es.BootstrapOptions(n_resamples=500, ci=ci),  # type: ignore[arg-type]
        )
        hits += res.ci_low <= truth <= res.ci_high  # type: ignore[operator]
    assert 0.93 <= hits / REPS <= 0.97, hits / REPS


@pytest.mark.slow
def test_alpha_interval_coverage() -> None:
    # Population: true label from prior pi, each of 3 raters correct w.p. 0.7 else uniform over 4
    # labels, 20% of ratings missing at random. Pairs of ratings of a unit are i.i.d. draws from
    # J[c, k] = sum_t pi_t p(c|t) p(k|t), so the expected coincidence matrix is proportional to J
    # and the population nominal alpha is 1 - sum(J * d) / sum(n_c n_k d) with n_c = J.sum(1).
    pi = np.array([0.4, 0.3, 0.2, 0.1])
    cond = 0.7 * np.eye(4) + 0.3 / 4
    joint = np.einsum("t,ct,kt->ck", pi, cond.T, cond.T)
    d = 1.0 - np.eye(4)
    marg = joint.sum(axis=1)
    truth = 1.0 - (joint * d).sum() / (marg @ d @ marg)
    rng = np.random.default_rng(7)
    hits = 0
    n_items = 120
    for _ in range(REPS):
        t = rng.choice(4, size=n_items, p=pi)
        correct = rng.random((3, n_items)) < 0.7
        data = np.where(correct, t, rng.integers(0, 4, (3, n_items))).astype(float)
        data[rng.random(data.shape) < 0.2] = np.nan
        res = es.bootstrap_alpha(
            data,
            level_of_measurement="nominal",
            value_domain=[0, 1, 2, 3],
            rng=rng,
            options=es.BootstrapOptions(n_resamples=500, ci="bca"),
        )
        hits += res.ci_low <= truth <= res.ci_high  # type: ignore[operator]
    assert 0.93 <= hits / REPS <= 0.97, hits / REPS
