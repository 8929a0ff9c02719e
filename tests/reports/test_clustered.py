"""The report's glue formulas against evalstats, sklearn and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, f1_score

import evalstats as es
from reports import clustered as cl


@pytest.fixture
def pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, 300).astype(float)
    b = np.where(rng.random(300) < 0.6, a, rng.integers(0, 3, 300)).astype(float)
    return a, b


def _conf(a: np.ndarray, b: np.ndarray, c: int = 3) -> np.ndarray:
    return np.bincount((a * c + b).astype(int), minlength=c * c).astype(float)


def test_confusion_formulas_match_libraries(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    s = _conf(a, b)
    assert cl.ac1_fn(3)(s) == pytest.approx(es.gwet_ac1(a, b, categories=[0.0, 1.0, 2.0]).value)
    assert cl.macro_f1_fn(3)(s) == pytest.approx(f1_score(a, b, average="macro"))
    assert cl.kappa_fn(3, "quadratic")(s) == pytest.approx(
        cohen_kappa_score(a, b, weights="quadratic")
    )
    assert cl.agreement_without_ties_fn(3, 0)(s) == pytest.approx(
        es.pairwise_agreement(b, a, ties="drop", tie_label=0.0).value
    )


def test_item_sums_and_singleton_clusters_equal_evalstats(
    pair: tuple[np.ndarray, np.ndarray],
) -> None:
    a, b = pair
    items = np.arange(a.size)
    per_item = cl.one_hot_cells((a * 3 + b).astype(np.int64), 9, items)
    mine = cl.bootstrap(
        per_item,
        cl.kappa_fn(3, None),
        rng=np.random.default_rng(5),
        n_resamples=500,
        ci="bca",
        level=0.95,
        min_items=30,
        method="k",
        n_subjects=a.size,
    )
    ref = es.bootstrap_kappa(
        a, b, categories=[0.0, 1.0, 2.0], n_resamples=500, rng=np.random.default_rng(5)
    )
    assert (mine.value, mine.ci_low, mine.ci_high) == pytest.approx(
        (ref.value, ref.ci_low, ref.ci_high)
    )
    grouped = cl.item_sums(np.ones((6, 2)), np.array([3, 3, 1, 9, 9, 9]))
    assert grouped.tolist() == [[1, 1], [2, 2], [3, 3]]


def test_mean_pairwise_kappa_and_row_correlations() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, (4, 80)).astype(float)
    codes[0, :10] = np.nan
    pairs: list[tuple[int, int, float, int]] = []
    mean, n = cl.mean_pairwise_kappa(codes, 3, None, 10, pairs_out=pairs)
    expected = []
    for i in range(4):
        for k in range(i + 1, 4):
            ok = ~np.isnan(codes[i]) & ~np.isnan(codes[k])
            expected.append(cohen_kappa_score(codes[i, ok], codes[k, ok]))
    assert n == 6 and mean == pytest.approx(np.mean(expected))
    x, y = rng.random((5, 10)), rng.random((5, 10))
    tau = cl.rank_corr_rows(x, y, "kendall")
    rho = cl.rank_corr_rows(x, y, "spearman")
    for r in range(5):
        assert tau[r] == pytest.approx(stats.kendalltau(x[r], y[r])[0])
        assert rho[r] == pytest.approx(stats.spearmanr(x[r], y[r])[0])


def test_clustered_alpha_interval_contains_package_point() -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(1, 6, (3, 120)).astype(float)
    items = np.repeat(np.arange(40), 3)
    est = cl.alpha_clustered(
        data,
        items,
        level_of_measurement="ordinal",
        value_domain=[1.0, 2.0, 3.0, 4.0, 5.0],
        rng=rng,
        n_resamples=300,
        ci="percentile",
        level=0.95,
        min_items=30,
    )
    point = es.krippendorff_alpha(data, level="ordinal", value_domain=[1, 2, 3, 4, 5]).value
    assert est is not None and est.value == pytest.approx(point)
    assert est.n_items == 40 and "clustered by item" in est.method
