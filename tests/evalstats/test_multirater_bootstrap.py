"""Bootstraps of multi-rater coefficients (Fleiss, Gwet AC1, percent agreement) vs references.

Fleiss' kappa is checked against statsmodels on explicitly resampled reliability data; AC1 and
percent agreement (no library implementation installed) against evalstats' point functions,
which are themselves checked in test_reference_values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

import evalstats as es
from evalstats.bootstrap import (
    _agreement_multi_stats,
    _collapse,
    _fleiss_stats,
    _gwet_multi_stats,
    _MultiRaterStats,
)
from evalstats.intervals import bca_interval, percentile_interval


def ratings(n_raters: int, n_items: int, seed: int, missing: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    truth = rng.choice(4, size=n_items, p=[0.4, 0.3, 0.2, 0.1])
    data = np.where(
        rng.random((n_raters, n_items)) < 0.65, truth, rng.integers(0, 4, (n_raters, n_items))
    ).astype(float)
    data[rng.random(data.shape) < missing] = np.nan
    return data


def statsmodels_fleiss(data: np.ndarray) -> float:
    table, _ = aggregate_raters(data.T.astype(int), n_cat=4)
    return float(sm_fleiss(table, method="fleiss"))


def engine_resamples(
    st: _MultiRaterStats, n_resamples: int, seed: int
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Columns of each resample as the grouped engine draws them for ``default_rng(seed)``.

    Returns the resamples (column indices with multiplicity), one representative column per
    distinct row and the multiplicity of each row (for the weighted jackknife).
    """
    collapsed = _collapse(st.item_stats)
    assert collapsed is not None, "test data should have few distinct count vectors"
    rows, mult = collapsed
    rep = np.array([int(np.flatnonzero((st.item_stats == r).all(axis=1))[0]) for r in rows])
    n = st.item_stats.shape[0]
    draws = np.random.default_rng(seed).multinomial(n, mult / n, size=n_resamples)
    columns = [np.repeat(st.items[rep], d) for d in draws]
    return columns, st.items[rep], mult


def check_against_reference(
    public: Callable[..., es.Estimate],
    st: _MultiRaterStats,
    data: np.ndarray,
    reference: Callable[[np.ndarray], float],
    seed: int,
) -> None:
    b = 40
    columns, reps, mult = engine_resamples(st, b, seed)
    lib_boot = np.array([reference(data[:, cols]) for cols in columns])
    theta = reference(data)
    # Replicate by replicate: our kernel on the drawn multiplicities == the reference on data.
    rows, _ = _collapse(st.item_stats)  # type: ignore[misc]
    n = st.item_stats.shape[0]
    draws = np.random.default_rng(seed).multinomial(n, mult / n, size=b)
    np.testing.assert_allclose(st.fn(draws @ rows), lib_boot, rtol=0, atol=1e-12)
    pct = public(
        data,
        rng=np.random.default_rng(seed),
        options=es.BootstrapOptions(n_resamples=b, ci="percentile"),
    )
    assert pct.value == pytest.approx(theta, abs=1e-12)
    assert (pct.ci_low, pct.ci_high) == pytest.approx(
        percentile_interval(lib_boot, 0.95), abs=1e-12
    )
    keep_all = np.ones(data.shape[1], dtype=bool)
    lib_jk = []
    for col in reps:
        keep_all[col] = False
        lib_jk.append(reference(data[:, keep_all]))
        keep_all[col] = True
    lo, hi, _ = bca_interval(lib_boot, theta, np.array(lib_jk), 0.95, mult.astype(float))
    bca = public(
        data, rng=np.random.default_rng(seed), options=es.BootstrapOptions(n_resamples=b, ci="bca")
    )
    assert (bca.ci_low, bca.ci_high) == pytest.approx((lo, hi), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fleiss_replicates_equal_statsmodels(seed: int) -> None:
    data = ratings(4, 300, seed)  # constant raters: statsmodels' setting
    st = _fleiss_stats(data, [0, 1, 2, 3])

    def public(d: np.ndarray, **kw: object) -> es.Estimate:
        return es.bootstrap_fleiss_kappa(d, categories=[0, 1, 2, 3], **kw)  # type: ignore[arg-type]

    check_against_reference(public, st, data, statsmodels_fleiss, seed)
    idx = np.random.default_rng(seed).integers(0, 300, 300)  # explicit index resample too
    total = np.bincount(idx, minlength=300).astype(float) @ st.item_stats
    assert float(st.fn(total)) == pytest.approx(statsmodels_fleiss(data[:, idx]), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_fleiss_with_missing_equals_point_function(seed: int) -> None:
    data = ratings(3, 400, seed, missing=0.25)
    st = _fleiss_stats(data, [0, 1, 2, 3])

    def reference(d: np.ndarray) -> float:
        return es.fleiss_kappa(d, categories=[0, 1, 2, 3]).value

    def public(d: np.ndarray, **kw: object) -> es.Estimate:
        return es.bootstrap_fleiss_kappa(d, categories=[0, 1, 2, 3], **kw)  # type: ignore[arg-type]

    check_against_reference(public, st, data, reference, seed)
    res = es.bootstrap_fleiss_kappa(
        data, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=50)
    )
    point = es.fleiss_kappa(data)
    assert res.value == pytest.approx(point.value, abs=1e-12)
    assert (res.n_items, res.n_ratings) == (point.n_items, point.n_ratings)
    assert res.warnings[: len(point.warnings)] == point.warnings


@pytest.mark.parametrize("seed", [0, 1])
def test_gwet_multi_replicates_equal_point_function(seed: int) -> None:
    data = ratings(3, 400, seed, missing=0.3)
    st = _gwet_multi_stats(data, [0, 1, 2, 3])

    def reference(d: np.ndarray) -> float:
        return es.gwet_ac1_multi(d, categories=[0, 1, 2, 3]).value

    def public(d: np.ndarray, **kw: object) -> es.Estimate:
        return es.bootstrap_gwet_ac1_multi(d, categories=[0, 1, 2, 3], **kw)  # type: ignore[arg-type]

    check_against_reference(public, st, data, reference, seed)
    res = public(data, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=20))
    assert res.n_items == es.gwet_ac1_multi(data).n_items


@pytest.mark.parametrize("mode", ["pairwise", "all"])
def test_percent_agreement_multi_replicates(mode: str) -> None:
    data = ratings(4, 300, 5, missing=0.2)
    st = _agreement_multi_stats(data, mode)

    def reference(d: np.ndarray) -> float:
        return es.percent_agreement_multi(d, mode=mode).value  # type: ignore[arg-type]

    def public(d: np.ndarray, **kw: object) -> es.Estimate:
        return es.bootstrap_percent_agreement_multi(d, mode=mode, **kw)  # type: ignore[arg-type]

    check_against_reference(public, st, data, reference, 3)
    res = public(data, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=20))
    point = es.percent_agreement_multi(data, mode=mode)  # type: ignore[arg-type]
    assert (res.n_items, res.n_pairs, res.n_ratings) == (
        point.n_items,
        point.n_pairs,
        point.n_ratings,
    )


def test_fleiss_agrees_with_slow_loop_over_statsmodels() -> None:
    data = ratings(4, 120, 9)
    fast = es.bootstrap_fleiss_kappa(
        data, rng=np.random.default_rng(1), options=es.BootstrapOptions(n_resamples=2000)
    )
    slow = es.bootstrap_items(
        lambda items: statsmodels_fleiss(items.T),
        data.T,
        rng=np.random.default_rng(2),
        options=es.BootstrapOptions(n_resamples=2000),
    )
    width = slow.ci_high - slow.ci_low  # type: ignore[operator]
    assert fast.value == pytest.approx(slow.value, abs=1e-12)
    assert fast.ci_low == pytest.approx(slow.ci_low, abs=0.08 * width)
    assert fast.ci_high == pytest.approx(slow.ci_high, abs=0.08 * width)


def test_perfect_agreement_and_bad_mode() -> None:
    data = np.tile(np.array([0, 1, 2, 3] * 20, dtype=float), (3, 1))
    rng = np.random.default_rng(0)
    for fn in (es.bootstrap_fleiss_kappa, es.bootstrap_gwet_ac1_multi):
        res = fn(data, rng=rng, options=es.BootstrapOptions(n_resamples=100))
        assert res.value == pytest.approx(1.0)
        assert res.ci_low == pytest.approx(1.0) and res.ci_high == pytest.approx(1.0)
    assert (
        es.bootstrap_percent_agreement_multi(
            data, rng=rng, options=es.BootstrapOptions(n_resamples=50)
        ).value
        == 1.0
    )
    with pytest.raises(ValueError, match="mode must be"):
        es.bootstrap_percent_agreement_multi(data, mode="most", rng=rng)  # type: ignore[arg-type]
