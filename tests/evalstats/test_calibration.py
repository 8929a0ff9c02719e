"""Calibration maps and diagnostics (evalstats.calibration) against scikit-learn, statsmodels
and worked examples computed here from the definitions."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.stats import rankdata
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

import evalstats as es
from evalstats import calibration as cal

EPS = cal.EPS


def _lr(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> LogisticRegression:
    """Unpenalised logistic regression, solved to high precision."""
    return LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(
        x, y, sample_weight=w
    )


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(2.0 * s - 1.0)))).astype(float)
    w = rng.uniform(0.5, 3.0, n)
    return s, y, w


def _beta_x(level: list[float]) -> np.ndarray:
    t = 0.01 + 0.98 * (np.asarray(level, dtype=float) - 1) / 4
    return np.column_stack([np.log(t), -np.log(1 - t)])


# --- the four maps ---------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("decimals", [None, 1])
def test_isotonic_equals_sklearn_clip(weighted: bool, decimals: int | None) -> None:
    s, y, w = _data(500, 1)
    if decimals is not None:  # many tied scores
        s = np.round(s, decimals)
    weights = w if weighted else None
    curve = cal.calibration_fit(s, y, method="isotonic", weights=weights)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=weights)
    grid = np.concatenate([np.linspace(-5, 5, 2001), s])  # beyond the fitted range too
    np.testing.assert_allclose(
        curve.predict(grid), np.clip(ref.predict(grid), EPS, 1 - EPS), atol=1e-12
    )
    assert curve.n == 500


@pytest.mark.parametrize("weighted", [False, True])
def test_platt_equals_unpenalised_sklearn_logistic(weighted: bool) -> None:
    s, y, w = _data(800, 2)
    s = 3.0 * s + 10.0  # an uncentred score scale
    weights = w if weighted else None
    curve = cal.calibration_fit(s, y, method="platt", weights=weights)
    ref = _lr(s[:, None], y, weights)
    c0, c1 = curve.params["coef"]
    assert c0 == pytest.approx(ref.intercept_[0], abs=1e-6)
    assert c1 == pytest.approx(ref.coef_[0, 0], abs=1e-6)
    grid = np.linspace(s.min() - 3, s.max() + 3, 500)
    np.testing.assert_allclose(
        curve.predict(grid),
        np.clip(ref.predict_proba(grid[:, None])[:, 1], EPS, 1 - EPS),
        atol=1e-6,
    )


def test_beta_on_probabilities_equals_sklearn_on_the_two_features() -> None:
    rng = np.random.default_rng(3)
    n = 1000
    q = rng.beta(2, 2, n)
    # Truth with a, b > 0: the beta-calibration family itself.
    true = 1 / (1 + np.exp(-(-0.3 + 1.5 * np.log(q) + 0.7 * -np.log(1 - q))))
    y = (rng.random(n) < true).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    curve = cal.calibration_fit(q, y, method="beta", weights=w)
    x = np.column_stack([np.log(q), -np.log(1 - q)])
    ref = _lr(x, y, w)
    assert ref.coef_.min() > 0  # the constraint is not active here
    c, a, b = curve.params["coef"]
    np.testing.assert_allclose([c, a, b], [ref.intercept_[0], *ref.coef_[0]], atol=1e-6)
    np.testing.assert_allclose(
        curve.predict(q), np.clip(ref.predict_proba(x)[:, 1], EPS, 1 - EPS), atol=1e-6
    )


def test_beta_rescales_ordinal_scores_min_max_with_margin() -> None:
    rng = np.random.default_rng(4)
    level = rng.integers(1, 6, 600).astype(float)
    y = (rng.random(600) < (level - 0.5) / 5).astype(float)
    curve = cal.calibration_fit(level, y, method="beta")
    assert curve.params["scale"] == (1.0, 5.0, 0.01)
    t = 0.01 + 0.98 * (level - 1) / 4  # the documented rescaling
    x = np.column_stack([np.log(t), -np.log(1 - t)])
    ref = _lr(x, y)
    assert ref.coef_.min() > 0  # the constraint is not active here
    c, a, b = curve.params["coef"]
    np.testing.assert_allclose([c, a, b], [ref.intercept_[0], *ref.coef_[0]], atol=1e-6)
    np.testing.assert_allclose(
        curve.predict([1.0, 3.0, 5.0, 0.0, 9.0]),  # outside the fitted range: clipped to it
        np.clip(ref.predict_proba(_beta_x([1, 3, 5, 1, 5]))[:, 1], EPS, 1 - EPS),
        atol=1e-6,
    )


@pytest.mark.parametrize("mirror", [False, True])
def test_beta_constraint_drops_a_negative_coefficient_and_refits(mirror: bool) -> None:
    # Many passes at very low scores, then an increasing curve: a free fit gives a < 0.
    rng = np.random.default_rng(0)
    n = 2000
    q = rng.uniform(0.005, 0.995, n)
    true = np.where(q < 0.05, 0.7, 1 / (1 + np.exp(-4 * (q - 0.5))))
    y = (rng.random(n) < true).astype(float)
    if mirror:  # q -> 1 - q, y -> 1 - y swaps the roles of a and b: the b < 0 branch
        q, y = 1 - q, 1 - y
    x = np.column_stack([np.log(q), -np.log(1 - q)])
    free = _lr(x, y).coef_[0]
    negative, kept = (1, 0) if mirror else (0, 1)
    assert free[negative] < 0 < free[kept]
    c, a, b = cal.calibration_fit(q, y, method="beta").params["coef"]
    one = _lr(x[:, [kept]], y)  # betacal: refit on the other feature alone
    assert one.coef_[0, 0] > 0
    assert (a, b)[negative] == 0.0
    assert (a, b)[kept] == pytest.approx(one.coef_[0, 0], abs=1e-6)
    assert c == pytest.approx(one.intercept_[0], abs=1e-6)


def test_beta_with_no_admissible_feature_is_intercept_only() -> None:
    # A U-shaped truth: a < 0 when fitted freely and b < 0 when refitted alone.
    rng = np.random.default_rng(5)
    n = 2000
    q = rng.uniform(0.01, 0.99, n)
    y = (rng.random(n) < 0.15 + 0.7 * (q < 0.2) + 0.1 * q).astype(float)
    x = np.column_stack([np.log(q), -np.log(1 - q)])
    assert _lr(x, y).coef_[0, 0] < 0 and _lr(x[:, [1]], y).coef_[0, 0] < 0
    c, a, b = cal.calibration_fit(q, y, method="beta").params["coef"]
    assert a == 0.0 and b == 0.0
    assert c == pytest.approx(np.log(y.mean() / (1 - y.mean())), abs=1e-6)


def test_histogram_binning_from_first_principles() -> None:
    rng = np.random.default_rng(6)
    n = 1000  # -> round(1000 ** (1/3)) = 10 equal-mass bins of 100 rows (distinct scores)
    s = rng.permutation(np.arange(n, dtype=float))
    y = (rng.random(n) < s / n).astype(float)
    w = rng.uniform(0.5, 1.5, n)
    curve = cal.calibration_fit(s, y, method="histogram", weights=w)
    wn = w * n / w.sum()  # weights rescaled to mean 1: the prior is one observation
    pbar = (wn * y).sum() / wn.sum()
    # Bins (e_{k-1}, e_k] with e_k the 100k-th smallest score: scores 0..99, 100..199, ...
    expected = []
    for k in range(10):
        rows = (s >= 100 * k) & (s < 100 * (k + 1))
        expected.append(((wn * y)[rows].sum() + pbar) / (wn[rows].sum() + 1))
    np.testing.assert_allclose(curve.params["values"], expected, atol=1e-12)
    np.testing.assert_allclose(curve.params["edges"], [100 * k - 1 for k in range(1, 10)])
    grid = np.arange(n, dtype=float)
    np.testing.assert_allclose(curve.predict(grid), np.repeat(expected, 100), atol=1e-12)
    # Ordinal scores: one bin per level when levels are coarser than the bins.
    level = rng.integers(1, 4, 600).astype(float)
    yl = (rng.random(600) < level / 4).astype(float)
    by_level = cal.calibration_fit(level, yl, method="histogram")
    assert by_level.params["edges"] == (1.0, 2.0)
    for v in (1.0, 2.0, 3.0):
        rows = level == v
        assert by_level.predict([v])[0] == pytest.approx(
            (yl[rows].sum() + yl.mean()) / (rows.sum() + 1)
        )


@pytest.mark.parametrize("method", cal.METHODS)
def test_one_class_no_labels_and_separation_never_raise(method: cal.CalibrationMethod) -> None:
    s = np.array([0.1, 0.4, 0.8, 0.9])
    ones = cal.calibration_fit(s, np.ones(4), method=method)
    np.testing.assert_allclose(ones.predict([0.0, 0.5, 1.0]), (4 + 0.5) / (4 + 1))
    empty = cal.calibration_fit([np.nan], [1.0], method=method)
    assert empty.n == 0
    np.testing.assert_allclose(empty.predict([0.3]), 0.5)
    # Perfect separation: a finite, steep, increasing curve.
    sep = cal.calibration_fit(np.arange(20.0), (np.arange(20) >= 10).astype(float), method=method)
    p = sep.predict(np.arange(20.0))
    assert np.isfinite(p).all() and p[0] < 0.2 and p[-1] > 0.8
    assert np.isnan(sep.predict([np.nan])[0])


def test_bad_labels_and_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="0/1"):
        cal.calibration_fit([0.1, 0.2], [0.0, 2.0], method="platt")
    with pytest.raises(ValueError, match="weights"):
        cal.calibration_fit([0.1, 0.2], [0.0, 1.0], method="platt", weights=[1.0, -1.0])


@pytest.mark.parametrize("method", cal.METHODS)
def test_curve_json_round_trip(method: cal.CalibrationMethod) -> None:
    s, y, w = _data(300, 7)
    curve = cal.calibration_fit(s, y, method=method, weights=w)
    text = json.dumps(curve.to_json(), allow_nan=False)
    back = cal.CalibrationCurve.from_json(json.loads(text))
    assert back == curve
    with pytest.raises(dataclasses.FrozenInstanceError):
        curve.n = 3  # type: ignore[misc]


# --- selection -------------------------------------------------------------------------------


def test_select_matches_a_manual_cross_validation_with_groups_kept_together() -> None:
    s, y, w = _data(400, 8)
    groups = np.repeat(np.arange(100), 4)  # four outputs per item
    s[::7] = np.nan  # missing scores are left out
    sel = cal.calibration_select(s, y, weights=w, groups=groups, rng=np.random.default_rng(9))
    keep = np.isfinite(s)
    # Recompute: the same group shuffle, every method fitted without its fold.
    codes = np.unique(groups[keep], return_inverse=True)[1]
    fold = cal._fold_of_rows(codes, 5, np.random.default_rng(9))
    for g in np.unique(codes):
        assert np.unique(fold[codes == g]).size == 1
    sk, yk, wk = s[keep], y[keep], w[keep]
    for method in cal.METHODS:
        pred = np.empty(sk.size)
        for f in range(5):
            t = fold == f
            pred[t] = cal.calibration_fit(sk[~t], yk[~t], method=method, weights=wk[~t]).predict(
                sk[t]
            )
        assert sel.cv_log_loss[method] == pytest.approx(
            log_loss(yk, np.clip(pred, EPS, 1 - EPS), sample_weight=wk), rel=1e-10
        )
        if method == sel.method:
            np.testing.assert_allclose(sel.heldout[keep], pred)
    assert sel.method == min(sel.cv_log_loss, key=lambda m: sel.cv_log_loss[m])
    assert np.isnan(sel.heldout[~keep]).all()
    assert sel.curve == cal.calibration_fit(s, y, method=sel.method, weights=w)
    assert sel.folds == 5 and sel.n == int(keep.sum()) and sel.warnings == ()
    back = cal.CalibrationSelection.from_json(
        json.loads(json.dumps(sel.to_json(include_heldout=True), allow_nan=False))
    )
    assert back.curve == sel.curve and back.cv_log_loss == sel.cv_log_loss
    np.testing.assert_array_equal(np.isnan(back.heldout), np.isnan(sel.heldout))


@pytest.mark.parametrize(
    ("score", "passed", "why"),
    [
        ([0.1, 0.5, 0.9], [0.0, 1.0, 1.0], "too few labelled rows"),
        (np.linspace(0, 1, 30), np.ones(30), "one class"),
        ([], [], "too few labelled rows"),
    ],
)
def test_select_on_small_or_one_class_data_is_a_flagged_constant(
    score: list[float], passed: list[float], why: str
) -> None:
    sel = cal.calibration_select(score, passed, rng=np.random.default_rng(0))
    assert sel.folds == 0 and sel.cv_log_loss == {}
    assert any(why in w for w in sel.warnings)
    y = np.asarray(passed)
    expected = (y.sum() + 0.5) / (y.size + 1)
    np.testing.assert_allclose(sel.curve.predict([0.0, 1.0]), expected)
    # Held out: the constant of the other rows.
    np.testing.assert_allclose(sel.heldout, (y.sum() - y + 0.5) / (y.size - 1 + 1))


# --- hierarchical ----------------------------------------------------------------------------


def _strata_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
    rng = np.random.default_rng(seed)
    sizes = {"big_up": 600, "big_down": 600, "mid": 150, "small": 12, "tiny": 4}
    shift = {"big_up": 1.0, "big_down": -1.0, "mid": 0.3, "small": 0.5, "tiny": 0.0}
    labels = np.concatenate([[k] * v for k, v in sizes.items()])
    s = rng.normal(size=labels.size)
    off = np.array([shift[x] for x in labels])
    y = (rng.random(labels.size) < 1 / (1 + np.exp(-(2 * s - 1 + off)))).astype(float)
    return s, y, labels, shift


def test_hierarchical_structure_flags_and_offsets_against_statsmodels() -> None:
    s, y, labels, _ = _strata_data(10)
    h = cal.calibration_hierarchical(
        s, y, labels, min_labels=10, rng=np.random.default_rng(1), all_strata=["empty"]
    )
    assert set(h.strata) == {"big_up", "big_down", "mid", "small", "tiny", "empty"}
    for name in ("tiny", "empty"):
        st = h.strata[name]
        assert st.pooled_only and st.own_weight == 0.0 and st.borrowed == 1.0
        np.testing.assert_allclose(st.predict(s[:50]), h.pooled.curve.predict(s[:50]))
    assert h.strata["empty"].n == 0 and h.strata["tiny"].n == 4
    raw = {}
    for name in ("big_up", "big_down", "mid", "small"):
        st = h.strata[name]
        assert not st.pooled_only and 0.0 <= st.own_weight <= 1.0
        assert st.borrowed == pytest.approx(1.0 - st.own_weight)
        # The stratum's own offset: a logistic GLM with the pooled out-of-fold logit as offset.
        rows = labels == name
        z = np.log(h.pooled.heldout[rows] / (1 - h.pooled.heldout[rows]))
        glm = sm.GLM(y[rows], np.ones((rows.sum(), 1)), family=sm.families.Binomial(), offset=z)
        a_ref = glm.fit().params[0]
        a, v = st.params["stratum_raw_offset"][0], st.params["stratum_raw_variance"][0]
        assert a == pytest.approx(a_ref, abs=0.02 + 0.05 * abs(a_ref))  # weak prior only
        raw[name] = (a, v)
        assert st.params["stratum_offset"][0] == pytest.approx(st.own_weight * a)
        assert st.own_weight == pytest.approx(h.tau2 / (h.tau2 + v))
    offsets = np.array([x[0] for x in raw.values()])
    prec = 1 / np.array([x[1] for x in raw.values()])
    moments = ((prec * offsets**2).sum() - offsets.size) / prec.sum()
    assert h.tau2 == pytest.approx(max(0.0, moments))
    assert h.tau2 > 0.2  # offsets of +-1 are real
    # Large strata keep most of their own estimate, the small one borrows more.
    assert h.strata["big_up"].own_weight > 0.8
    assert h.strata["small"].own_weight < h.strata["mid"].own_weight < h.strata["big_up"].own_weight
    # The up-shifted stratum is predicted higher than the down-shifted one at every score.
    grid = np.linspace(-2, 2, 9)
    assert (h.strata["big_up"].predict(grid) > h.strata["big_down"].predict(grid)).all()
    pred = h.predict(s, labels)
    for name, st in h.strata.items():
        rows = labels == name
        if rows.any():
            np.testing.assert_allclose(pred[rows], st.predict(s[rows]))
    np.testing.assert_allclose(h.predict(grid, ["unknown"] * 9), h.pooled.curve.predict(grid))
    ho = h.heldout()
    assert ho.shape == s.shape and np.isfinite(ho).all()
    assert not np.allclose(ho, pred)  # cross-fitted, not in-sample
    back = cal.HierarchicalCalibration.from_json(
        json.loads(json.dumps(h.to_json(), allow_nan=False))
    )
    np.testing.assert_allclose(back.predict(s, labels), pred)
    assert back.strata == h.strata and back.tau2 == h.tau2
    with pytest.raises(ValueError, match="not stored"):
        back.heldout()


def test_hierarchical_on_tiny_data_is_pooled_only_with_a_warning() -> None:
    h = cal.calibration_hierarchical(
        [0.2, 0.7, 0.9], [0.0, 1.0, 1.0], ["a", "a", "b"], rng=np.random.default_rng(0)
    )
    assert all(st.pooled_only for st in h.strata.values())
    assert any("too few" in w for w in h.warnings)
    assert np.isfinite(h.heldout()).all()


# --- diagnostics -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [5, 10, 13])
def test_reliability_bins_equal_sklearn_calibration_curve(strategy: str, n_bins: int) -> None:
    rng = np.random.default_rng(11)
    p = rng.beta(2, 3, 700)
    p[:20] = 0.3  # values on a bin edge
    p[20:30] = 0.0
    y = (rng.random(700) < p).astype(float)
    bins = cal.reliability_bins(y, p, n_bins=n_bins, strategy=strategy)  # type: ignore[arg-type]
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    np.testing.assert_allclose([b.fraction_pass for b in bins], prob_true, atol=1e-12)
    np.testing.assert_allclose([b.mean_predicted for b in bins], prob_pred, atol=1e-12)
    assert sum(b.count for b in bins) == 700


def test_ece_worked_example() -> None:
    # Eight predictions, two equal-width bins ([0, .5], (.5, 1]) and two equal-mass bins.
    p = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    y = np.array([0, 0, 1, 0, 1, 1, 0, 1], dtype=float)
    d = cal.calibration_diagnostics(
        y, p, n_bins=2, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=50)
    )
    # Low bin: mean p 0.25, pass share 1/4; high bin: mean p 0.75, pass share 3/4 -> ECE 0.
    assert d.ece.value == pytest.approx(0.0, abs=1e-12)
    assert d.ece_mass.value == pytest.approx(0.0, abs=1e-12)
    # Weighted: the row (0.3, pass) twice as heavy -> low bin mean p = 1.3/5 = 0.26, share 2/5;
    # ECE = (5/9) * |0.4 - 0.26| + (4/9) * 0 = 0.07777...
    w = np.array([1, 1, 2, 1, 1, 1, 1, 1], dtype=float)
    d = cal.calibration_diagnostics(
        y,
        p,
        weights=w,
        n_bins=2,
        rng=np.random.default_rng(0),
        options=es.BootstrapOptions(n_resamples=50),
    )
    assert d.ece.value == pytest.approx(5 / 9 * 0.14)
    # Ten equal-width bins: every row alone -> ECE = mean |y - p| (weighted).
    d = cal.calibration_diagnostics(
        y, p, weights=w, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=50)
    )
    assert d.ece.value == pytest.approx((w * np.abs(y - p)).sum() / w.sum())
    # Equal mass, four bins of two rows: |(0+0) - .3| + |(1+0)... per bin, unweighted.
    d = cal.calibration_diagnostics(
        y, p, n_bins=4, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=50)
    )
    per_bin = [abs(0 - 0.3), abs(1 - 0.7), abs(2 - 1.3), abs(1 - 1.7)]
    assert d.ece_mass.value == pytest.approx(sum(per_bin) / 8)


@pytest.mark.parametrize("weighted", [False, True])
def test_brier_log_loss_auroc_equal_sklearn(weighted: bool) -> None:
    rng = np.random.default_rng(12)
    p = rng.beta(2, 2, 600)
    p[:100] = np.round(p[:100], 1)  # ties
    y = (rng.random(600) < p).astype(float)
    w = rng.uniform(0.2, 5, 600) if weighted else None
    d = cal.calibration_diagnostics(
        y, p, weights=w, rng=np.random.default_rng(1), options=es.BootstrapOptions(n_resamples=200)
    )
    assert d.brier.value == pytest.approx(brier_score_loss(y, p, sample_weight=w), rel=1e-12)
    assert d.log_loss.value == pytest.approx(log_loss(y, p, sample_weight=w), rel=1e-12)
    assert d.auroc is not None
    assert d.auroc.value == pytest.approx(roc_auc_score(y, p, sample_weight=w), rel=1e-12)
    for e in (d.brier, d.log_loss, d.auroc, d.ece_mass):
        assert e.ci_low is not None and e.ci_high is not None
        assert e.ci_low <= e.value <= e.ci_high
    assert d.n == 600
    json.dumps(d.to_json(), allow_nan=False)


def test_murphy_decomposition_is_exact_at_distinct_values() -> None:
    rng = np.random.default_rng(13)
    p = rng.choice([0.1, 0.35, 0.5, 0.8, 0.95], 500)
    y = (rng.random(500) < np.clip(p + 0.1, 0, 1)).astype(float)
    w = rng.uniform(0.5, 2, 500)
    d = cal.calibration_diagnostics(
        y, p, weights=w, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=20)
    )
    brier = brier_score_loss(y, p, sample_weight=w)
    assert d.brier_reliability - d.brier_resolution + d.brier_uncertainty == pytest.approx(
        brier, abs=1e-12
    )
    obar = np.average(y, weights=w)
    assert d.brier_uncertainty == pytest.approx(obar * (1 - obar))
    rel = (
        sum(
            w[p == v].sum() * (v - np.average(y[p == v], weights=w[p == v])) ** 2
            for v in np.unique(p)
        )
        / w.sum()
    )
    assert d.brier_reliability == pytest.approx(rel)


def test_murphy_decomposition_on_equal_width_bins_for_continuous_predictions() -> None:
    rng = np.random.default_rng(14)
    p = rng.uniform(size=400)
    y = (rng.random(400) < p).astype(float)
    d = cal.calibration_diagnostics(
        y, p, rng=np.random.default_rng(0), options=es.BootstrapOptions(n_resamples=20)
    )
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10)
    counts = np.array([b.count for b in d.bins])
    assert d.brier_reliability == pytest.approx((counts * (prob_pred - prob_true) ** 2).sum() / 400)
    assert d.brier_resolution == pytest.approx((counts * (prob_true - y.mean()) ** 2).sum() / 400)


def test_clustered_intervals_of_identical_copies_equal_the_single_copy_bootstrap() -> None:
    rng = np.random.default_rng(15)
    p = rng.beta(2, 2, 150)
    y = (rng.random(150) < p).astype(float)
    opts = es.BootstrapOptions(n_resamples=300)
    single = cal.calibration_diagnostics(y, p, rng=np.random.default_rng(3), options=opts)
    k = 3
    copies = cal.calibration_diagnostics(
        np.repeat(y, k),
        np.repeat(p, k),
        clusters=np.repeat(np.arange(150), k),
        rng=np.random.default_rng(3),
        options=opts,
    )
    for name in ("ece", "ece_mass", "brier", "log_loss", "auroc"):
        a, b = getattr(single, name), getattr(copies, name)
        assert (a.value, a.ci_low, a.ci_high) == pytest.approx((b.value, b.ci_low, b.ci_high))
    # Ignoring the clustering of the copies narrows the interval (about 1 / sqrt(3)).
    naive = cal.calibration_diagnostics(
        np.repeat(y, k), np.repeat(p, k), rng=np.random.default_rng(3), options=opts
    )
    width = single.brier.ci_high - single.brier.ci_low  # type: ignore[operator]
    naive_width = naive.brier.ci_high - naive.brier.ci_low  # type: ignore[operator]
    assert naive_width < 0.75 * width


def test_brier_interval_matches_the_loop_bootstrap_over_sklearn() -> None:
    rng = np.random.default_rng(16)
    p = rng.beta(2, 2, 300)
    y = (rng.random(300) < p).astype(float)
    opts = es.BootstrapOptions(n_resamples=4000, ci="percentile")
    d = cal.calibration_diagnostics(y, p, rng=np.random.default_rng(4), options=opts)
    loop = es.bootstrap_items(
        lambda yy, pp: float(np.mean((pp - yy) ** 2)),
        y,
        p,
        rng=np.random.default_rng(5),
        options=opts,
    )
    width = loop.ci_high - loop.ci_low  # type: ignore[operator]
    assert d.brier.ci_low == pytest.approx(loop.ci_low, abs=0.08 * width)
    assert d.brier.ci_high == pytest.approx(loop.ci_high, abs=0.08 * width)


def test_auroc_interval_with_many_distinct_predictions_is_close_to_the_loop() -> None:
    rng = np.random.default_rng(17)
    p = rng.beta(2, 2, 400)  # 400 distinct values -> 100 quantile levels for the interval
    y = (rng.random(400) < p).astype(float)
    opts = es.BootstrapOptions(n_resamples=3000, ci="percentile")
    d = cal.calibration_diagnostics(y, p, rng=np.random.default_rng(4), options=opts)
    assert d.auroc is not None and "quantile levels" in d.auroc.method

    def mann_whitney_auc(yy: np.ndarray, pp: np.ndarray) -> float:
        r = rankdata(pp)
        n1 = yy.sum()
        return float((r[yy == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * (yy.size - n1)))

    assert mann_whitney_auc(y, p) == pytest.approx(roc_auc_score(y, p))
    loop = es.bootstrap_items(mann_whitney_auc, y, p, rng=np.random.default_rng(5), options=opts)
    width = loop.ci_high - loop.ci_low  # type: ignore[operator]
    assert d.auroc.ci_low == pytest.approx(loop.ci_low, abs=0.1 * width)
    assert d.auroc.ci_high == pytest.approx(loop.ci_high, abs=0.1 * width)


def test_diagnostics_small_and_one_class_inputs_warn_not_raise() -> None:
    opts = es.BootstrapOptions(n_resamples=50)
    one = cal.calibration_diagnostics(
        [1.0, 1.0, 1.0], [0.2, 0.9, 0.5], rng=np.random.default_rng(0), options=opts
    )
    assert one.auroc is None and any("one class" in w for w in one.warnings)
    assert one.brier.value == pytest.approx(brier_score_loss([1, 1, 1], [0.2, 0.9, 0.5]))
    empty = cal.calibration_diagnostics([], [], rng=np.random.default_rng(0), options=opts)
    assert empty.n == 0 and empty.bins == ()
    out = empty.to_json()
    assert out["brier"]["value"] is None
    json.dumps(out, allow_nan=False)
    single = cal.calibration_diagnostics([1.0], [0.7], rng=np.random.default_rng(0), options=opts)
    assert single.n == 1
    with pytest.raises(ValueError, match="\\[0, 1\\]"):
        cal.calibration_diagnostics([1.0], [1.7], rng=np.random.default_rng(0))


@pytest.mark.parametrize("method", ["isotonic", "platt", "beta"])
def test_integer_weights_equal_duplicated_rows(method: cal.CalibrationMethod) -> None:
    s, y, _ = _data(300, 18)
    k = np.random.default_rng(19).integers(1, 4, 300)
    weighted = cal.calibration_fit(s, y, method=method, weights=k.astype(float))
    duplicated = cal.calibration_fit(np.repeat(s, k), np.repeat(y, k), method=method)
    grid = np.linspace(-3, 3, 121)
    np.testing.assert_allclose(weighted.predict(grid), duplicated.predict(grid), atol=1e-8)
    opts = es.BootstrapOptions(n_resamples=20)
    p = weighted.predict(s)
    dw = cal.calibration_diagnostics(
        y, p, weights=k.astype(float), rng=np.random.default_rng(0), options=opts
    )
    dd = cal.calibration_diagnostics(
        np.repeat(y, k), np.repeat(p, k), rng=np.random.default_rng(0), options=opts
    )
    for name in ("ece", "brier", "log_loss", "auroc"):
        assert getattr(dw, name).value == pytest.approx(getattr(dd, name).value, rel=1e-10)
    assert dw.brier_reliability == pytest.approx(dd.brier_reliability)


def test_ece_intervals_are_percentile_and_hold_the_point_estimate() -> None:
    # With BCa the upward bias of ECE moved the whole interval below the value (e.g. 0.026 in
    # [0.022, 0.024]); the percentile interval of the same resamples brackets it.
    rng = np.random.default_rng(11)
    p = rng.uniform(0.05, 0.95, 3000)
    y = (rng.uniform(size=p.size) < p).astype(float)
    diag = cal.calibration_diagnostics(y, p, rng=np.random.default_rng(1),
                                       options=es.BootstrapOptions(n_resamples=400))
    for est in (diag.ece, diag.ece_mass):
        assert "bootstrap-percentile" in est.method
        assert est.ci_low is not None and est.ci_high is not None
        assert est.ci_low <= est.value <= est.ci_high
    assert "bootstrap-bca" in diag.brier.method
