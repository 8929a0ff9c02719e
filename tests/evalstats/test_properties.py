"""Property-based and cross-implementation checks of the estimators and the bootstrap engine."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import evalstats as es
from evalstats.agreement import alpha_item_stats

LEVELS = ["nominal", "ordinal", "interval", "ratio"]


@st.composite
def reliability(draw: st.DrawFn, min_items: int = 5) -> np.ndarray:
    n_raters = draw(st.integers(2, 5))
    n_items = draw(st.integers(min_items, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 5, n_items)
    data = np.where(
        rng.random((n_raters, n_items)) < 0.7, truth, rng.integers(1, 5, (n_raters, n_items))
    )
    data = data.astype(float)
    data[rng.random(data.shape) < draw(st.floats(0, 0.4))] = np.nan
    # Keep at least two values of two distinct categories so that alpha is defined.
    data[0, 0], data[1, 0], data[0, 1], data[1, 1] = 1, 1, 4, 4
    return data


@settings(max_examples=40, deadline=None)
@given(reliability(), st.sampled_from(LEVELS), st.integers(0, 2**32 - 1))
def test_alpha_invariant_to_rater_and_item_order(data: np.ndarray, level: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = es.krippendorff_alpha_fast(data, level=level).value  # type: ignore[arg-type]
    shuffled = data[rng.permutation(data.shape[0])][:, rng.permutation(data.shape[1])]
    assert es.krippendorff_alpha_fast(shuffled, level=level).value == pytest.approx(base, abs=1e-12)  # type: ignore[arg-type]
    assert base == pytest.approx(
        krippendorff.alpha(reliability_data=data, level_of_measurement=level), abs=1e-10
    )
    for fn in (es.fleiss_kappa, es.gwet_ac1_multi):
        assert fn(shuffled).value == pytest.approx(fn(data).value, abs=1e-12, nan_ok=True)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=3, max_size=60).filter(lambda v: len(set(v)) > 1),
    st.integers(2, 5),
    st.sampled_from(LEVELS),
)
def test_perfect_agreement_is_one(labels: list[int], n_raters: int, level: str) -> None:
    a = np.array(labels, dtype=float) + 1.0  # ratio level needs positive values
    data = np.tile(a, (n_raters, 1))
    assert es.krippendorff_alpha_fast(data, level=level).value == pytest.approx(1.0)  # type: ignore[arg-type]
    assert es.fleiss_kappa(data).value == pytest.approx(1.0)
    assert es.gwet_ac1_multi(data).value == pytest.approx(1.0)
    for weights in (None, "linear", "quadratic"):
        assert es.cohen_kappa(a, a, weights=weights).value == pytest.approx(1.0)  # type: ignore[arg-type]
    assert es.percent_agreement(a, a).value == 1.0


@settings(max_examples=25, deadline=None)
@given(
    st.integers(50, 300),
    st.floats(0.3, 0.9),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["bca", "percentile"]),
)
def test_bootstrap_interval_contains_estimate(n: int, p_agree: float, seed: int, ci: str) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < p_agree, a, rng.integers(0, 3, n))
    opts = es.BootstrapOptions(n_resamples=400, ci=ci)  # type: ignore[arg-type]
    for res in (
        es.bootstrap_kappa(a, b, categories=[0, 1, 2], rng=rng, options=opts),
        es.bootstrap_accuracy(a, b, rng=rng, options=opts),
        es.bootstrap_alpha(np.vstack([a, b]).astype(float), rng=rng, options=opts),
    ):
        assert res.ci_low is not None and res.ci_high is not None
        assert res.ci_low <= res.value <= res.ci_high
        assert res.n_items == n and res.n_resamples == 400


def test_vectorised_alpha_replicates_equal_package_on_resamples() -> None:
    rng = np.random.default_rng(11)
    truth = rng.integers(1, 6, 60)
    data = np.where(rng.random((3, 60)) < 0.6, truth, rng.integers(1, 6, (3, 60))).astype(float)
    data[rng.random(data.shape) < 0.2] = np.nan
    pairable = np.sum(~np.isnan(data), axis=0) >= 2
    data = data[:, pairable]
    counts = es.resample_counts(data.shape[1], 20, rng)
    for level in LEVELS:
        item_stats, fn = alpha_item_stats(data, level)
        fast = fn(counts.astype(float) @ item_stats)  # type: ignore[operator]
        for b in range(20):
            resampled = data[:, np.repeat(np.arange(data.shape[1]), counts[b])]
            ref = krippendorff.alpha(reliability_data=resampled, level_of_measurement=level)
            assert fast[b] == pytest.approx(ref, abs=1e-10)


def test_resample_counts_rows_sum_to_n() -> None:
    c = es.resample_counts(37, 500, np.random.default_rng(0))
    assert c.shape == (500, 37) and (c.sum(axis=1) == 37).all()
    # Each item is drawn once per resample on average.
    assert c.mean() == pytest.approx(1.0, abs=0.02)


def test_bca_close_to_scipy_bootstrap() -> None:
    """Our BCa (vectorised mean) vs scipy.stats.bootstrap BCa on a skewed sample."""
    rng = np.random.default_rng(2)
    x = rng.lognormal(0, 1, 80)
    ours = es.bootstrap_mean(
        x, rng=np.random.default_rng(3), options=es.BootstrapOptions(n_resamples=40_000)
    )
    ref = stats.bootstrap(
        (x,), np.mean, n_resamples=40_000, method="BCa", rng=np.random.default_rng(4)
    )
    sd = x.std() / np.sqrt(x.size)
    assert ours.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.05 * sd)
    assert ours.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.05 * sd)
    # BCa is skewed to the right for a right-skewed mean; percentile less so.
    pct = es.bootstrap_mean(
        x,
        rng=np.random.default_rng(3),
        options=es.BootstrapOptions(n_resamples=40_000, ci="percentile"),
    )
    assert ours.ci_high > pct.ci_high  # type: ignore[operator]


def test_bca_and_percentile_agree_for_symmetric_statistic() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, 2000)
    bca = es.bootstrap_mean(
        x, rng=np.random.default_rng(1), options=es.BootstrapOptions(n_resamples=20_000)
    )
    pct = es.bootstrap_mean(
        x,
        rng=np.random.default_rng(1),
        options=es.BootstrapOptions(n_resamples=20_000, ci="percentile"),
    )
    assert bca.ci_low == pytest.approx(pct.ci_low, abs=0.003)
    assert bca.ci_high == pytest.approx(pct.ci_high, abs=0.003)


def test_generic_loop_bootstrap_agrees_with_vectorised() -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 3, 150)
    b = np.where(rng.random(150) < 0.7, a, rng.integers(0, 3, 150))
    opts = es.BootstrapOptions(n_resamples=4000, ci="percentile")
    fast = es.bootstrap_kappa(a, b, rng=np.random.default_rng(0), options=opts)
    slow = es.bootstrap_items(
        lambda x, y: es.cohen_kappa(x, y, categories=[0, 1, 2]).value,
        a,
        b,
        rng=np.random.default_rng(1),
        options=opts,
    )
    assert fast.value == slow.value
    assert fast.ci_low == pytest.approx(slow.ci_low, abs=0.015)
    assert fast.ci_high == pytest.approx(slow.ci_high, abs=0.015)


def test_small_n_warns() -> None:
    rng = np.random.default_rng(0)
    res = es.bootstrap_kappa(
        [0, 1, 1, 0, 1], [0, 1, 0, 0, 1], rng=rng, options=es.BootstrapOptions(n_resamples=100)
    )
    assert res.n_items == 5 and any("only 5 items" in w for w in res.warnings)


def test_self_preference_and_length_bias() -> None:
    rng = np.random.default_rng(9)
    n = 400
    human = rng.choice([0, 1, 2], n, p=[0.2, 0.4, 0.4])
    fam = rng.choice([1, 2], n)
    # The judge copies humans but flips 20% of the losses of its own family into wins.
    judge = np.where((human != fam) & (rng.random(n) < 0.2), fam, human)
    res = es.self_preference(judge, human, fam, rng=rng)
    win_j = np.mean(np.where(judge == fam, 1, np.where(judge == 0, 0.5, 0)))
    win_h = np.mean(np.where(human == fam, 1, np.where(human == 0, 0.5, 0)))
    assert res.value == pytest.approx(win_j - win_h)
    assert res.ci_low is not None and res.ci_low > 0
    length_diff = rng.normal(0, 100, n)
    score_h = rng.normal(0, 1, n)
    score_j = score_h + 0.005 * length_diff + rng.normal(0, 0.5, n)
    lb = es.length_bias(
        length_diff, score_j, score_h, rng=rng, options=es.BootstrapOptions(n_resamples=500)
    )
    assert lb.value == pytest.approx(stats.spearmanr(length_diff, score_j - score_h)[0])
    assert lb.ci_low is not None and lb.ci_low > 0.4
    ties = es.longer_preference_among_ties([1, 2, 1, 0], [0, 0, 0, 0], [10, 5, 3, 1], [5, 10, 9, 2])
    assert ties.value == pytest.approx(2 / 3) and ties.n_items == 3
