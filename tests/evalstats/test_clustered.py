"""Item-clustered bootstrap (evalstats.clustered) against sklearn, scipy, krippendorff and the
unclustered evalstats functions.

The clustering itself is checked by a property with an exact answer: an item made of k identical
copies of one subject carries the information of that one subject, so for statistics that do not
change when every observation is duplicated (kappa, accuracy, Pearson, Spearman, MAE) the
clustered interval over copies equals the ordinary item bootstrap of a single copy.
"""

from __future__ import annotations

import dataclasses

import krippendorff
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
)

import evalstats as es
from evalstats import clustered as cl


@pytest.fixture
def pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, 300).astype(float)
    b = np.where(rng.random(300) < 0.6, a, rng.integers(0, 3, 300)).astype(float)
    return a, b


def _conf(a: np.ndarray, b: np.ndarray, c: int = 3) -> np.ndarray:
    return np.bincount((a * c + b).astype(int), minlength=c * c).astype(float)


def _copies(k: int, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each array with every entry repeated k times, and the item of each copy."""
    n = arrays[0].size
    return (*(np.repeat(a, k) for a in arrays), np.repeat(np.arange(n), k))


def _bounds(e: es.Estimate | None) -> tuple[float, float | None, float | None]:
    assert e is not None
    return e.value, e.ci_low, e.ci_high


def test_confusion_formulas_match_libraries(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    s = _conf(a, b)
    assert cl.gwet_ac1_fn(3)(s) == pytest.approx(es.gwet_ac1(a, b, categories=[0.0, 1, 2]).value)
    assert cl.macro_f1_fn(3)(s) == pytest.approx(f1_score(a, b, average="macro"))
    assert cl.kappa_fn(3, "quadratic")(s) == pytest.approx(
        cohen_kappa_score(a, b, weights="quadratic")
    )
    assert cl.accuracy_fn(3)(s) == pytest.approx(accuracy_score(a, b))
    assert cl.agreement_without_ties_fn(3, 0)(s) == pytest.approx(
        es.pairwise_agreement(b, a, ties="drop", tie_label=0.0).value
    )
    assert cl.ratio_fn(np.array([4.0, 3.0])) == pytest.approx(0.75)
    assert cl.diff_of_means_fn(np.array([2.0, 3.0, 4.0, 2.0])) == pytest.approx(1.5 - 0.5)


def test_item_sums_and_cell_counts() -> None:
    grouped = es.item_sums(np.ones((6, 2)), np.array([3, 3, 1, 9, 9, 9]))
    assert grouped.tolist() == [[1, 1], [2, 2], [3, 3]]
    cells = np.array([0, 2, 2, 1, 0])
    items = np.array([5, 5, 7, 7, 7])
    dense = np.eye(3)[cells]
    np.testing.assert_array_equal(es.item_cell_counts(cells, 3, items), es.item_sums(dense, items))


def test_singleton_clusters_equal_the_item_bootstrap(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    opts = es.BootstrapOptions(n_resamples=500)
    per_item = es.item_cell_counts((a * 3 + b).astype(np.int64), 9, np.arange(a.size))
    mine = es.bootstrap_clustered(
        per_item,
        cl.kappa_fn(3, None),
        n_subjects=a.size,
        rng=np.random.default_rng(5),
        options=opts,
        method="k",
    )
    ref = es.bootstrap_kappa(
        a, b, categories=[0.0, 1.0, 2.0], rng=np.random.default_rng(5), options=opts
    )
    assert _bounds(mine) == pytest.approx(_bounds(ref), abs=1e-12)
    assert mine.n_items == a.size and mine.n_ratings == a.size
    assert "clustered by item" in mine.method and "B=500" in mine.method


@pytest.mark.parametrize("ci", ["bca", "percentile"])
def test_copies_of_a_subject_are_one_cluster(ci: str) -> None:
    rng = np.random.default_rng(2)
    n = 200
    h = rng.integers(0, 3, n).astype(float)
    j = np.where(rng.random(n) < 0.7, h, rng.integers(0, 3, n)).astype(float)
    opts = es.BootstrapOptions(n_resamples=400, ci=ci)  # type: ignore[arg-type]
    jj, hh, items = _copies(3, j, h)
    nominal = es.nominal_agreement(
        jj, hh, items, n_categories=3, rng=np.random.default_rng(9), options=opts
    )
    # nominal_agreement draws accuracy first, then kappa: replay that order.
    ref_rng = np.random.default_rng(9)
    cells = es.item_cell_counts((h * 3 + j).astype(np.int64), 9, np.arange(n))
    ref_acc = es.bootstrap_clustered(
        cells, cl.accuracy_fn(3), n_subjects=n, rng=ref_rng, options=opts
    )
    ref_kappa = es.bootstrap_kappa(h, j, categories=[0.0, 1.0, 2.0], rng=ref_rng, options=opts)
    assert (nominal.accuracy.ci_low, nominal.accuracy.ci_high) == pytest.approx(
        (ref_acc.ci_low, ref_acc.ci_high), abs=1e-12
    )
    assert _bounds(nominal.kappa) == pytest.approx(_bounds(ref_kappa), abs=1e-12)
    # Continuous scores: Pearson (moments) and Spearman (tables) are unchanged by duplication.
    x = rng.integers(1, 6, n).astype(float)
    y = np.clip(x + rng.integers(-1, 2, n), 1, 5)
    xx, yy, items = _copies(2, x, y)
    for method in ("pearson", "spearman"):
        got = es.correlation_clustered(
            xx, yy, items, method=method, rng=np.random.default_rng(4), options=opts
        )
        ref = es.bootstrap_correlation(
            x, y, method=method, rng=np.random.default_rng(4), options=opts
        )
        assert _bounds(got) == pytest.approx(_bounds(ref), abs=1e-10), method
    d = np.abs(xx - yy)
    mae = es.bootstrap_clustered(
        es.item_sums(np.column_stack([np.ones_like(d), d]), items),
        cl.ratio_fn,
        n_subjects=d.size,
        rng=np.random.default_rng(6),
        options=opts,
    )
    ref_mae = es.bootstrap_mean(np.abs(x - y), rng=np.random.default_rng(6), options=opts)
    assert _bounds(mae) == pytest.approx(_bounds(ref_mae), abs=1e-12)


def test_ignoring_the_clusters_would_understate_the_uncertainty() -> None:
    rng = np.random.default_rng(3)
    n = 150
    h = rng.integers(0, 2, n).astype(float)
    j = np.where(rng.random(n) < 0.8, h, 1 - h)
    jj, hh, items = _copies(4, j, h)
    opts = es.BootstrapOptions(n_resamples=2000, ci="percentile")
    clustered = es.nominal_agreement(
        jj, hh, items, n_categories=2, rng=np.random.default_rng(1), options=opts
    ).kappa
    naive = es.bootstrap_kappa(hh, jj, categories=[0.0, 1.0], rng=rng, options=opts)
    width = clustered.ci_high - clustered.ci_low  # type: ignore[operator]
    naive_width = naive.ci_high - naive.ci_low  # type: ignore[operator]
    # Four copies per item: the naive interval is about half as wide (1 / sqrt(4)).
    assert naive_width == pytest.approx(width / 2, rel=0.15)


def test_nominal_agreement_points_match_sklearn() -> None:
    rng = np.random.default_rng(4)
    n = 240
    h = rng.choice(3, n, p=[0.3, 0.5, 0.2]).astype(float)
    j = np.where(rng.random(n) < 0.65, h, rng.integers(0, 3, n)).astype(float)
    items = rng.integers(0, 80, n)
    res = es.nominal_agreement(
        j,
        h,
        items,
        n_categories=3,
        tie_category=0,
        rng=np.random.default_rng(0),
        options=es.BootstrapOptions(n_resamples=200),
    )
    assert res.accuracy.value == pytest.approx(accuracy_score(h, j))
    assert res.kappa.value == pytest.approx(cohen_kappa_score(h, j))
    assert (res.value, res.ci_low, res.ci_high) == _bounds(res.kappa)
    assert res.gwet_ac1.value == pytest.approx(es.gwet_ac1(h, j, categories=[0, 1, 2]).value)
    assert res.macro_f1.value == pytest.approx(f1_score(h, j, average="macro"))
    assert res.macro_precision.value == pytest.approx(precision_score(h, j, average="macro"))
    assert res.macro_recall.value == pytest.approx(recall_score(h, j, average="macro"))
    np.testing.assert_array_equal(res.classification.confusion.matrix, confusion_matrix(h, j))
    decisive = (h != 0) & (j != 0)
    assert res.agreement_without_ties is not None
    assert res.agreement_without_ties.value == pytest.approx(np.mean(h[decisive] == j[decisive]))
    for e in (res.accuracy, res.kappa, res.gwet_ac1, res.macro_f1, res.agreement_without_ties):
        assert e.ci_low is not None and e.ci_low <= e.value <= e.ci_high  # type: ignore[operator]
        assert "interval: " in e.method and "clustered by item" in e.method
    assert res.macro_precision.ci_low is None  # a point only
    assert (
        es.nominal_agreement(
            j, h, items, n_categories=3, rng=np.random.default_rng(0)
        ).agreement_without_ties
        is None
    )


def test_one_subject_gives_points_without_intervals() -> None:
    res = es.nominal_agreement(
        np.array([1.0]), np.array([1.0]), np.array([0]), n_categories=2, rng=np.random.default_rng()
    )
    assert res.accuracy.value == 1.0 and "interval" not in res.accuracy.method
    assert res.kappa.ci_low is None


def test_ordinal_agreement_points_match_libraries() -> None:
    rng = np.random.default_rng(5)
    n = 300
    scale = [1.0, 2.0, 3.0, 4.0, 5.0]
    h_mean = np.round(rng.uniform(1, 5, n) * 3) / 3
    h_round = np.floor(h_mean + 0.5)
    j = np.clip(h_round + rng.integers(-1, 2, n), 1, 5)
    items = np.repeat(np.arange(100), 3)
    res = es.ordinal_agreement(
        j,
        h_mean,
        h_round,
        items,
        categories=scale,
        rng=np.random.default_rng(1),
        options=es.BootstrapOptions(n_resamples=200),
    )
    assert res.primary == "qwk" and res.qwk is not None and res.alpha_ordinal is not None
    assert res.qwk.value == pytest.approx(cohen_kappa_score(h_round, j, weights="quadratic"))
    assert res.alpha_ordinal.value == pytest.approx(
        krippendorff.alpha(
            reliability_data=np.vstack([j, h_round]),
            level_of_measurement="ordinal",
            value_domain=scale,
        )
    )
    assert res.alpha_ordinal.n_items == n
    assert res.spearman.value == pytest.approx(stats.spearmanr(j, h_mean)[0])
    assert res.kendall.value == pytest.approx(stats.kendalltau(j, h_mean)[0])
    assert res.pearson.value == pytest.approx(stats.pearsonr(j, h_mean)[0])
    assert res.mae.value == pytest.approx(np.mean(np.abs(j - h_mean)))
    assert res.signed_bias.value == pytest.approx(np.mean(j - h_mean))
    for e in (res.qwk, res.alpha_ordinal, res.spearman, res.kendall, res.pearson, res.mae):
        assert e.ci_low is not None and e.ci_low <= e.value <= e.ci_high  # type: ignore[operator]
    cont = es.ordinal_agreement(
        j + rng.normal(0, 0.3, n),
        h_mean,
        h_round,
        items,
        categories=scale,
        judge_continuous=True,
        rng=np.random.default_rng(1),
        options=es.BootstrapOptions(n_resamples=200, ci="percentile"),
    )
    assert cont.qwk is None and cont.alpha_ordinal is None and cont.primary == "spearman"
    assert cont.value == cont.spearman.value


def test_continuous_correlation_pads_items_and_uses_percentile() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, 80)
    y = x + rng.normal(0, 1, 80)
    opts = es.BootstrapOptions(n_resamples=300)  # BCa asked; the loop route uses percentile
    got = es.correlation_clustered(
        x, y, np.arange(80), method="kendall", rng=np.random.default_rng(2), options=opts
    )
    ref = es.bootstrap_items(
        lambda a, b: stats.kendalltau(a, b)[0],
        x,
        y,
        rng=np.random.default_rng(2),
        options=dataclasses.replace(opts, ci="percentile"),
    )
    assert got is not None and "bootstrap-percentile" in got.method
    assert _bounds(got) == pytest.approx(_bounds(ref), abs=1e-12)
    # Subjects of one item stay together, in any input order.
    items = rng.integers(0, 30, 80)
    shuffled = rng.permutation(80)
    a = es.correlation_clustered(
        x, y, items, method="spearman", rng=np.random.default_rng(3), options=opts
    )
    b = es.correlation_clustered(
        x[shuffled],
        y[shuffled],
        items[shuffled],
        method="spearman",
        rng=np.random.default_rng(3),
        options=opts,
    )
    assert a is not None and b is not None and a.n_items == b.n_items == np.unique(items).size
    assert a.value == pytest.approx(stats.spearmanr(x, y)[0])
    assert es.correlation_clustered(x[:2], y[:2], items[:2], method="pearson", rng=rng) is None


def test_mean_pairwise_kappa_and_row_correlations() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, (4, 80)).astype(float)
    codes[0, :10] = np.nan
    res = es.mean_pairwise_kappa(codes, 3, min_shared=10)
    expected = []
    for i in range(4):
        for k in range(i + 1, 4):
            ok = ~np.isnan(codes[i]) & ~np.isnan(codes[k])
            expected.append(cohen_kappa_score(codes[i, ok], codes[k, ok]))
    assert res.n_pairs == 6 and res.value == pytest.approx(np.mean(expected))
    assert [(p.a, p.b) for p in res.pairs] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert res.pairs[0].n_shared == 70 and res.pairs[3].n_shared == 80
    assert es.mean_pairwise_kappa(codes, 3, min_shared=75).n_pairs == 3  # rater 0 excluded
    none = es.mean_pairwise_kappa(codes[:1], 3)
    assert np.isnan(none.value) and none.n_pairs == 0 and none.warnings
    x, y = rng.random((5, 10)), rng.random((5, 10))
    tau = cl.rank_corr_rows(x, y, "kendall")
    rho = cl.rank_corr_rows(x, y, "spearman")
    r = cl.rank_corr_rows(x, y, "pearson")
    for row in range(5):
        assert tau[row] == pytest.approx(stats.kendalltau(x[row], y[row])[0])
        assert rho[row] == pytest.approx(stats.spearmanr(x[row], y[row])[0])
        assert r[row] == pytest.approx(stats.pearsonr(x[row], y[row])[0])


def test_clustered_alpha_interval_contains_package_point() -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(1, 6, (3, 120)).astype(float)
    items = np.repeat(np.arange(40), 3)
    est = es.alpha_clustered(
        data,
        items,
        level_of_measurement="ordinal",
        value_domain=[1.0, 2.0, 3.0, 4.0, 5.0],
        rng=rng,
        options=es.BootstrapOptions(n_resamples=300, ci="percentile"),
    )
    point = es.krippendorff_alpha(data, level="ordinal", value_domain=[1, 2, 3, 4, 5]).value
    assert est is not None and est.value == pytest.approx(point)
    assert est.n_items == 40 and est.n_ratings == 120 and "clustered by item" in est.method
    one = np.full((3, 5), np.nan)
    one[:, 0] = 1.0
    assert (
        es.alpha_clustered(
            one, np.arange(5), level_of_measurement="nominal", value_domain=None, rng=rng
        )
        is None
    )


def test_group_difference_and_with_interval() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(0, 1, 200)
    group = rng.random(200) < 0.4
    values[group] += 0.5
    items = np.repeat(np.arange(100), 2)
    est = es.group_difference_clustered(
        values, group, items, rng=rng, options=es.BootstrapOptions(n_resamples=500)
    )
    assert est.value == pytest.approx(values[group].mean() - values[~group].mean())
    assert est.ci_low is not None and est.ci_low > 0 and est.n_items == 100
    point = es.Estimate(value=0.3, n_items=200, method="p", warnings=("b", "a"), p_value=0.01)
    merged = es.with_interval(point, est)
    assert (merged.value, merged.n_items, merged.p_value) == (0.3, 200, 0.01)
    assert (merged.ci_low, merged.ci_high) == (est.ci_low, est.ci_high)
    assert merged.method == f"p; interval: {est.method}"
    assert list(merged.warnings) == sorted({"a", "b", *est.warnings})
    assert es.with_interval(point, None) is point


def test_coarsen_and_finite_percentile() -> None:
    x = np.arange(2000, dtype=float)
    other = np.arange(100, dtype=float)
    binned, did = cl.coarsen(x, other)
    assert did and np.unique(binned).size == 10  # 1024 // 100 bins
    assert (np.diff(binned) >= 0).all()  # ranking kept
    same, did = cl.coarsen(x[:10], other)
    assert not did and same is not None
    assert cl.finite_percentile_interval(np.array([np.nan, 1.0]), 0.9) == (None, None)
    lo, hi = cl.finite_percentile_interval(np.array([np.nan, *range(101)]), 0.9)
    assert (lo, hi) == pytest.approx((5.0, 95.0))


def test_bootstrap_options_are_validated_and_frozen() -> None:
    spelled_out = es.BootstrapOptions(n_resamples=1000, ci="bca", level=0.95, min_items=30)
    assert spelled_out == es.DEFAULT_OPTIONS
    assert es.BootstrapOptions(n_resamples=np.int64(50)).n_resamples == 50
    for bad, match in (
        ({"n_resamples": 0}, "n_resamples must be at least 1"),
        ({"n_resamples": 10.0}, "n_resamples must be an integer"),
        ({"n_resamples": True}, "n_resamples must be an integer"),
        ({"ci": "normal"}, "ci must be"),
        ({"level": 1.0}, "level must be in"),
        ({"level": float("nan")}, "level must be in"),
        ({"min_items": -1}, "min_items must be non-negative"),
    ):
        with pytest.raises(ValueError, match=match):
            es.BootstrapOptions(**bad)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        es.DEFAULT_OPTIONS.n_resamples = 5  # type: ignore[misc]
    small = es.bootstrap_kappa(
        [0, 1, 1, 0], [0, 1, 0, 0], rng=np.random.default_rng(0),
        options=es.BootstrapOptions(n_resamples=50, min_items=3),
    )  # fmt: skip
    assert small.n_resamples == 50 and not any("only" in w for w in small.warnings)
