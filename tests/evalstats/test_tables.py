"""Table-based bootstraps of paired ratings (evalstats.tables) against independent libraries.

The replicate checks take the exact resampled tables the engine draws for a seed, rebuild the
resampled (judge, human) data from each table, run sklearn / scipy / krippendorff on it, and
require (1) the same value for every replicate and (2) the public function's percentile and
BCa intervals to be the intervals of those library values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import krippendorff
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    f1_score,
    mean_absolute_error,
)

import evalstats as es
from evalstats import _kernels as K
from evalstats.bootstrap import _cell_replicates, _one_hot
from evalstats.intervals import bca_interval, percentile_interval
from evalstats.tables import _table_fns

CATS = np.array([1, 2, 3, 4, 5])
Lib = Callable[[np.ndarray, np.ndarray], float]


def _alpha(level: str) -> Lib:
    def fn(j: np.ndarray, h: np.ndarray) -> float:
        return float(
            krippendorff.alpha(
                reliability_data=np.vstack([j, h]).astype(float),
                level_of_measurement=level,  # type: ignore[arg-type]
                value_domain=CATS,
            )
        )

    return fn


# Independent implementation of each statistic on explicit data (j = judge, h = human).
LIBRARY: dict[str, Lib] = {
    "percent_agreement": lambda j, h: accuracy_score(h, j),
    "accuracy": lambda j, h: accuracy_score(h, j),
    "kappa": lambda j, h: cohen_kappa_score(j, h, labels=CATS),
    "kappa_linear": lambda j, h: cohen_kappa_score(j, h, labels=CATS, weights="linear"),
    "kappa_quadratic": lambda j, h: cohen_kappa_score(j, h, labels=CATS, weights="quadratic"),
    # No library implements AC1 here: evalstats' point function (hand-checked in
    # test_reference_values) is the reference for the bootstrap's table kernel.
    "gwet_ac1": lambda j, h: es.gwet_ac1(j, h, categories=CATS).value,
    "spearman": lambda j, h: float(stats.spearmanr(j, h).statistic),
    "kendall_tau_b": lambda j, h: float(stats.kendalltau(j, h, variant="b").statistic),
    "pearson": lambda j, h: float(stats.pearsonr(j, h).statistic),
    "mae": lambda j, h: mean_absolute_error(h, j),
    "signed_bias": lambda j, h: float(np.mean(j - h)),
    "macro_f1": lambda j, h: f1_score(h, j, labels=CATS, average="macro", zero_division=0),
    "alpha_nominal": _alpha("nominal"),
    "alpha_ordinal": _alpha("ordinal"),
    "alpha_interval": _alpha("interval"),
    "alpha_ratio": _alpha("ratio"),
}
assert set(LIBRARY) == set(es.PAIRED_STATS)


def likert_pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Human 1-5 scores and a judge that is mostly within one point, slightly lenient."""
    rng = np.random.default_rng(seed)
    human = rng.choice(CATS, size=n, p=[0.1, 0.2, 0.3, 0.25, 0.15])
    judge = np.clip(human + rng.choice([-1, 0, 0, 1, 1], size=n), 1, 5)
    noise = rng.random(n) < 0.1
    judge[noise] = rng.choice(CATS, size=int(noise.sum()))
    return judge, human


def drawn_tables(
    judge: np.ndarray, human: np.ndarray, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The resampled and leave-one-out tables the engine uses for ``default_rng(seed)``."""
    c = CATS.size
    cells = (np.searchsorted(CATS, judge) * c + np.searchsorted(CATS, human)).astype(np.int64)
    boot, jk, jk_w = _cell_replicates(
        cells, c * c, [lambda t: t], n_resamples, np.random.default_rng(seed), True
    )
    assert jk is not None
    return boot[0], jk[0], jk_w


def data_of(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = CATS.size
    cells = np.repeat(np.arange(c * c), np.rint(table).astype(int))
    return CATS[cells // c], CATS[cells % c]


@pytest.mark.parametrize("n", [400, 45])  # grouped multinomial draw / per-item draw (n < 64)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replicates_equal_libraries_on_resampled_data(n: int, seed: int) -> None:
    judge, human = likert_pairs(n, seed)
    b = 30
    boot, jk, jk_w = drawn_tables(judge, human, b, seed + 100)
    assert (boot.sum(axis=1) == n).all()
    names = list(es.PAIRED_STATS)
    kernels = dict(
        zip(names, (fn for _, fn in _table_fns(names, CATS.size, CATS * 1.0)), strict=True)
    )
    pct = es.bootstrap_paired(
        judge, human, stats=names, categories=CATS, rng=np.random.default_rng(seed + 100),
        options=es.BootstrapOptions(n_resamples=b, ci="percentile"),
    )  # fmt: skip
    bca = es.bootstrap_paired(
        judge, human, stats=names, categories=CATS, rng=np.random.default_rng(seed + 100),
        options=es.BootstrapOptions(n_resamples=b, ci="bca"),
    )  # fmt: skip
    for name in names:
        lib = LIBRARY[name]
        theta = lib(judge, human)
        lib_boot = np.array([lib(*data_of(t)) for t in boot])
        np.testing.assert_allclose(kernels[name](boot), lib_boot, rtol=0, atol=1e-12)
        assert pct[name].value == pytest.approx(theta, abs=1e-12)
        expected = percentile_interval(lib_boot, 0.95)
        assert (pct[name].ci_low, pct[name].ci_high) == pytest.approx(expected, abs=1e-12), name
        lib_jk = np.array([lib(*data_of(t)) for t in jk])
        np.testing.assert_allclose(kernels[name](jk), lib_jk, rtol=0, atol=1e-12)
        lo, hi, _ = bca_interval(lib_boot, theta, lib_jk, 0.95, jk_w)
        assert (bca[name].ci_low, bca[name].ci_high) == pytest.approx((lo, hi), abs=1e-12), name
        assert bca[name].n_items == n and bca[name].n_ratings == 2 * n


def test_kernels_on_explicit_index_resamples() -> None:
    """Resample items by index (rng.integers), count the table, compare with the libraries."""
    judge, human = likert_pairs(300, 7)
    rng = np.random.default_rng(8)
    names = list(es.PAIRED_STATS)
    kernels = _table_fns(names, CATS.size, CATS * 1.0)
    c = CATS.size
    for _ in range(5):
        idx = rng.integers(0, judge.size, judge.size)
        j, h = judge[idx], human[idx]
        table = np.bincount(
            np.searchsorted(CATS, j) * c + np.searchsorted(CATS, h), minlength=c * c
        ).astype(float)
        for name, (_, fn) in zip(names, kernels, strict=True):
            assert float(fn(table[None, :])[0]) == pytest.approx(LIBRARY[name](j, h), abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(40, 3), (120, 6), (5000, 5), (300, 10)])
@pytest.mark.parametrize("ci", ["bca", "percentile"])
def test_cell_engine_is_the_generic_engine(
    n: int, c: int, ci: Literal["bca", "percentile"]
) -> None:
    """bootstrap_kappa (now on the cell engine) == bootstrap_from_item_stats on one-hot cells."""
    rng = np.random.default_rng(n)
    a = rng.integers(0, c, n)
    b = np.where(rng.random(n) < 0.6, a, rng.integers(0, c, n))
    weights: Literal["quadratic"] | None
    opts = es.BootstrapOptions(n_resamples=300, ci=ci)
    for weights in (None, "quadratic"):
        w = K.weight_matrix(c, weights)
        fast = es.bootstrap_kappa(
            a, b, categories=list(range(c)), weights=weights, rng=np.random.default_rng(3),
            options=opts,
        )  # fmt: skip

        def kernel(s: np.ndarray, w: np.ndarray = w) -> np.ndarray:
            return K.kappa_from_confusion(s.reshape(*s.shape[:-1], c, c), w)

        generic = es.bootstrap_from_item_stats(
            _one_hot(a * c + b, c * c),
            kernel,
            rng=np.random.default_rng(3),
            options=opts,
            method="cohen_kappa" + (f"[{weights}]" if weights else ""),
            n_ratings=2 * n,
        )
        assert fast == generic


def test_single_stat_functions_share_the_draw_with_bootstrap_paired() -> None:
    judge, human = likert_pairs(600, 3)
    judge = judge.astype(float)
    judge[:7] = np.nan
    opts = es.BootstrapOptions(n_resamples=400)
    common: dict[str, Any] = {"categories": CATS, "options": opts}
    multi = es.bootstrap_paired(
        judge, human, stats=es.PAIRED_STATS, rng=np.random.default_rng(5), **common
    )
    singles = {
        "kappa_quadratic": es.bootstrap_kappa(
            judge, human, weights="quadratic", rng=np.random.default_rng(5), **common
        ),
        "kappa": es.bootstrap_kappa(judge, human, rng=np.random.default_rng(5), **common),
        "gwet_ac1": es.bootstrap_gwet_ac1(judge, human, rng=np.random.default_rng(5), **common),
        "spearman": es.bootstrap_spearman(judge, human, rng=np.random.default_rng(5), **common),
        "kendall_tau_b": es.bootstrap_kendall_tau(
            judge, human, rng=np.random.default_rng(5), **common
        ),
        "mae": es.bootstrap_mean_absolute_error(
            judge, human, rng=np.random.default_rng(5), **common
        ),
        "signed_bias": es.bootstrap_signed_bias(
            judge, human, rng=np.random.default_rng(5), **common
        ),
        "macro_f1": es.bootstrap_macro_f1(
            human, judge, labels=CATS, rng=np.random.default_rng(5), options=opts
        ),
    }
    for name, single in singles.items():
        assert single == multi[name], name
        assert single.warnings[0] == "7 items dropped because a rating was missing"
    assert multi["signed_bias"].value == pytest.approx(np.nanmean(judge - human))


@pytest.mark.parametrize("ci", ["percentile", "bca"])
def test_agrees_with_slow_loop_bootstrap(ci: Literal["bca", "percentile"]) -> None:
    """Same bootstrap distribution as bootstrap_items looping over scipy / sklearn."""
    judge, human = likert_pairs(150, 11)
    names = ["kendall_tau_b", "spearman", "mae"]
    if ci == "percentile":  # the loop is slow: the other statistics once
        names += ["gwet_ac1", "macro_f1"]
    opts = es.BootstrapOptions(n_resamples=2000, ci=ci)
    fast = es.bootstrap_paired(
        judge, human, stats=names, categories=CATS, rng=np.random.default_rng(1), options=opts
    )
    for name, est in fast.items():
        slow = es.bootstrap_items(
            LIBRARY[name], judge, human, rng=np.random.default_rng(2), options=opts
        )
        assert est.value == pytest.approx(slow.value, abs=1e-12)
        width = slow.ci_high - slow.ci_low  # type: ignore[operator]
        assert est.ci_low == pytest.approx(slow.ci_low, abs=0.08 * width), name
        assert est.ci_high == pytest.approx(slow.ci_high, abs=0.08 * width), name


def test_ordinal_string_labels_rank_by_category_order() -> None:
    scale = ["poor", "fair", "good", "great"]
    rng = np.random.default_rng(4)
    h = rng.integers(0, 4, 200)
    j = np.clip(h + rng.integers(-1, 2, 200), 0, 3)
    labels = np.array(scale, dtype=object)
    for fn, ref in (
        (es.bootstrap_spearman, stats.spearmanr),
        (es.bootstrap_kendall_tau, stats.kendalltau),
    ):
        res = fn(
            labels[j],
            labels[h],
            categories=scale,
            rng=rng,
            options=es.BootstrapOptions(n_resamples=200),
        )
        assert res.value == pytest.approx(float(ref(j, h).statistic), abs=1e-12)
        # Alphabetical order (fair < good < great < poor) would give another value.
        alpha_order = fn(
            labels[j], labels[h], rng=rng, options=es.BootstrapOptions(n_resamples=50)
        ).value
        assert alpha_order != pytest.approx(res.value)


def test_continuous_scores_fall_back_to_item_routes() -> None:
    rng = np.random.default_rng(6)
    h = rng.normal(0, 1, 400)
    j = h + rng.normal(0.2, 0.5, 400)
    sp = es.bootstrap_spearman(
        j, h, rng=rng, options=es.BootstrapOptions(n_resamples=200, ci="percentile")
    )
    assert sp.value == pytest.approx(float(stats.spearmanr(j, h).statistic), abs=1e-12)
    assert sp.has_interval
    mae = es.bootstrap_mean_absolute_error(
        j, h, rng=rng, options=es.BootstrapOptions(n_resamples=200)
    )
    assert mae.value == pytest.approx(mean_absolute_error(h, j), abs=1e-12)
    bias = es.bootstrap_signed_bias(
        j, h, rng=rng, options=es.BootstrapOptions(n_resamples=2000, ci="percentile")
    )
    t_ci = stats.ttest_1samp(j - h, 0).confidence_interval(0.95)
    assert bias.ci_low == pytest.approx(t_ci.low, abs=0.01)
    assert bias.ci_high == pytest.approx(t_ci.high, abs=0.01)
    with pytest.raises(ValueError, match="discrete scale"):
        es.bootstrap_paired(
            j, h, stats=["mae"], rng=rng, options=es.BootstrapOptions(n_resamples=10)
        )


def test_bad_input_is_named() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown \\['kapa'\\]"):
        es.bootstrap_paired([1, 2], [1, 2], stats=["kapa"], rng=rng)
    with pytest.raises(ValueError, match="need numeric categories"):
        es.bootstrap_paired(["a", "b"], ["a", "a"], stats=["kappa", "mae"], rng=rng)
    with pytest.raises(ValueError, match="values not in categories"):
        es.bootstrap_paired([1, 7], [1, 2], stats=["kappa"], categories=[1, 2, 3], rng=rng)
    with pytest.raises(ValueError, match="same length"):
        es.bootstrap_paired([1, 2, 3], [1, 2], stats=["kappa"], rng=rng)
    with pytest.raises(ValueError, match="ci must be"):
        es.BootstrapOptions(ci="normal")  # type: ignore[arg-type]


def test_degenerate_inputs_warn_not_raise() -> None:
    rng = np.random.default_rng(0)
    empty = es.bootstrap_paired([np.nan], [1.0], stats=["kappa", "mae"], rng=rng)
    assert np.isnan(empty["kappa"].value) and "no items" in empty["kappa"].warnings
    same = es.bootstrap_paired([2] * 80, [2] * 80, stats=["kappa", "spearman"], rng=rng)
    assert np.isnan(same["kappa"].value) and same["kappa"].ci_low is None
    assert any("interval not computed" in w for w in same["spearman"].warnings)
    tiny = es.bootstrap_gwet_ac1(
        [1, 2, 1, 2, 2], [1, 2, 2, 2, 1], rng=rng, options=es.BootstrapOptions(n_resamples=50)
    )
    assert any("only 5 items" in w for w in tiny.warnings)
