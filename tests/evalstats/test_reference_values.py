"""evalstats against published figures and independent implementations (not our own output)."""

from __future__ import annotations

import subprocess
import sys

import krippendorff
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, precision_recall_fscore_support
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss
from statsmodels.stats.proportion import proportion_confint

import evalstats as es

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers
# (rows) x 12 units (columns), missing values as NaN. Published: nominal 0.743, ordinal 0.815,
# interval 0.849, ratio 0.797.
KRIPPENDORFF_2011 = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
        [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
    ]
)
PUBLISHED_ALPHA = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849, "ratio": 0.797}


def test_import_has_no_django() -> None:
    code = (
        "import sys, evalstats, evalstats.results, evalstats.agreement, evalstats.pairwise, "
        "evalstats.consensus, evalstats.bootstrap, evalstats.bias, evalstats.intervals, "
        "evalstats.tables, evalstats._data, evalstats._kernels; "
        "assert 'django' not in sys.modules, 'django imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("level", list(PUBLISHED_ALPHA))
def test_krippendorff_2011_published(level: str) -> None:
    pkg = es.krippendorff_alpha(KRIPPENDORFF_2011, level=level)  # type: ignore[arg-type]
    fast = es.krippendorff_alpha_fast(KRIPPENDORFF_2011, level=level)  # type: ignore[arg-type]
    assert round(pkg.value, 3) == PUBLISHED_ALPHA[level]
    assert fast.value == pytest.approx(pkg.value, abs=1e-12)
    assert pkg.n_items == 11  # unit 12 has a single value: not pairable


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
@pytest.mark.parametrize("seed", range(6))
def test_fast_alpha_equals_package_random(level: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_raters, n_items = rng.integers(2, 7), rng.integers(5, 80)
    truth = rng.integers(1, 6, size=n_items)
    data = np.where(
        rng.random((n_raters, n_items)) < 0.6, truth, rng.integers(1, 6, size=(n_raters, n_items))
    )
    data = data.astype(float)
    data[rng.random(data.shape) < 0.3] = np.nan
    if level in ("interval", "ratio") and seed % 2:
        data = data * 1.7 + rng.normal(0, 0.01, size=data.shape).round(2)  # many distinct values
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    assert es.krippendorff_alpha_fast(data, level=level).value == pytest.approx(expected, abs=1e-10)  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_vs_sklearn(weights: str | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, 200)
    b = np.where(rng.random(200) < 0.5, a, rng.integers(0, 5, 200))
    cats = [0, 1, 2, 3, 4, 5]  # category 5 unused by both raters
    expected = cohen_kappa_score(a, b, labels=cats, weights=weights)
    got = es.cohen_kappa(a, b, categories=cats, weights=weights)  # type: ignore[arg-type]
    assert got.value == pytest.approx(expected, abs=1e-12)
    assert got.n_items == 200
    boot = es.bootstrap_kappa(
        a,
        b,
        categories=cats,
        weights=weights,  # type: ignore[arg-type]
        rng=np.random.default_rng(1),
        options=es.BootstrapOptions(n_resamples=200),
    )
    assert boot.value == pytest.approx(expected, abs=1e-12)


def test_fleiss_vs_statsmodels() -> None:
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 4, 150)
    data = np.where(rng.random((5, 150)) < 0.55, truth, rng.integers(0, 4, (5, 150)))
    table, _ = aggregate_raters(data.T)
    assert es.fleiss_kappa(data).value == pytest.approx(
        sm_fleiss(table, method="fleiss"), abs=1e-12
    )


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_correlations_vs_scipy(method: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(1, 6, 120).astype(float)
    y = x + rng.normal(0, 1.5, 120)
    ref = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[
        method
    ](x, y)
    got = es.correlation(x, y, method=method)  # type: ignore[arg-type]
    assert got.value == pytest.approx(float(ref[0]), abs=1e-12)
    assert got.p_value == pytest.approx(float(ref[1]), rel=1e-9)
    # The vectorised bootstrap's point estimate (table / rank routes) must equal scipy too.
    for xs, ys in ((x, np.round(y)), (x, y)):
        expected = {
            "pearson": stats.pearsonr,
            "spearman": stats.spearmanr,
            "kendall": stats.kendalltau,
        }[method](xs, ys)[0]
        b = es.bootstrap_correlation(
            xs,
            ys,
            method=method,  # type: ignore[arg-type]
            rng=np.random.default_rng(0),
            options=es.BootstrapOptions(n_resamples=50),
        )
        assert b.value == pytest.approx(float(expected), abs=1e-10)


def test_prf_vs_sklearn() -> None:
    rng = np.random.default_rng(5)
    t = rng.integers(0, 4, 300)
    p = np.where(rng.random(300) < 0.6, t, rng.integers(0, 3, 300))  # class 3 never predicted
    rep = es.classification_report(t, p, labels=[0, 1, 2, 3])
    pr, rc, f1, sup = precision_recall_fscore_support(t, p, labels=[0, 1, 2, 3], zero_division=0)
    np.testing.assert_allclose(rep.precision, pr)
    np.testing.assert_allclose(rep.recall, rc)
    np.testing.assert_allclose(rep.f1, f1)
    assert rep.support == tuple(sup)
    macro = precision_recall_fscore_support(
        t, p, labels=[0, 1, 2, 3], average="macro", zero_division=0
    )
    assert (rep.macro_precision, rep.macro_recall, rep.macro_f1) == pytest.approx(macro[:3])


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (517, 999), (1, 2)])
def test_wilson_vs_statsmodels(k: int, n: int) -> None:
    for level in (0.9, 0.95, 0.99):
        lo, hi = proportion_confint(k, n, alpha=1 - level, method="wilson")
        got = es.wilson_interval(k, n, level=level)
        assert (got.ci_low, got.ci_high) == pytest.approx((lo, hi), abs=1e-12)


def test_gwet_two_rater_matches_multi_and_hand_value() -> None:
    # Hand computation: 2 raters, 10 items, categories {a, b}; they agree on 6 items, pa = 0.6,
    # pi_a = (6/10 + 6/10)/2 = 0.6, pe = 2 * 0.6 * 0.4 / 1 = 0.48, AC1 = (0.6 - 0.48)/0.52.
    a = np.array(list("aaaaaabbbb"), dtype=object)
    b = np.array(list("aaaabbaabb"), dtype=object)
    assert es.gwet_ac1(a, b).value == pytest.approx((0.6 - 0.48) / 0.52)
    assert es.gwet_ac1_multi(np.vstack([a, b])).value == pytest.approx((0.6 - 0.48) / 0.52)


def test_bias_and_mae() -> None:
    j = np.array([3, 4, 5, 2, np.nan])
    h = np.array([3, 3, 4, 4, 1])
    assert es.mean_absolute_error(j, h).value == pytest.approx(1.0)
    bias = es.signed_bias(j, h)
    assert bias.value == pytest.approx(0.0)
    ref = stats.ttest_1samp(j[:4] - h[:4], 0).confidence_interval(0.95)
    assert (bias.ci_low, bias.ci_high) == pytest.approx((ref.low, ref.high))
    assert bias.n_items == 4 and bias.warnings


def test_majority_vote_pandalm_rule() -> None:
    data = np.array([[1, 0, 2, 1, np.nan], [2, 2, 2, 1, np.nan], [0, 2, 1, 0, np.nan]])
    res = es.majority_vote(data, tie_break="first")
    np.testing.assert_array_equal(res.labels[:4], [1, 2, 2, 1])
    assert np.isnan(res.labels[4]) and res.n_ties == 1
    none = es.majority_vote(data, tie_break="none")
    assert np.isnan(none.labels[0]) and none.labels[1] == 2
    rnd = es.majority_vote(data, tie_break="random", rng=np.random.default_rng(0))
    assert rnd.labels[0] in (0, 1, 2)


def test_pairwise_helpers() -> None:
    judge = np.array([1, 2, 0, 1, 2, 0])
    human = np.array([1, 1, 0, 0, 2, 2])
    assert es.pairwise_agreement(judge, human).value == pytest.approx(3 / 6)
    dropped = es.pairwise_agreement(judge, human, ties="drop")
    assert dropped.n_pairs == 3 and dropped.value == pytest.approx(2 / 3)
    ba_raw = np.array([2, 2, 0, 1, 1, 0])  # verdicts with outputs swapped, slot labels
    ba = es.swap_labels(ba_raw)
    np.testing.assert_array_equal(ba, [1, 1, 0, 2, 2, 0])
    assert es.position_consistency(judge, ba).value == pytest.approx(4 / 6)
    comb = es.combine_orders(judge, ba)
    np.testing.assert_array_equal(comb.labels, [1, 0, 0, 0, 2, 0])
    assert comb.n_inconsistent == 2
    pb = es.position_bias(judge, ba)
    # Decisive: AB {1,2,1,2} picks the first slot (label 1) twice;
    # BA {1,1,2,2} picks the first slot (label 2) twice.
    assert pb.value == pytest.approx(2 / 6) and pb.first_slot.value == pytest.approx(0.5)
    assert pb.strict_flip_rate == pytest.approx(2 / 6)
