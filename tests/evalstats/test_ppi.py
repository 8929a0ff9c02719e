"""evalstats.ppi against the authors' package ``ppi_py`` (a test oracle only) and brute force.

Data here are simulated (seeded). PPI++ means and intervals must equal ``ppi_py`` to 1e-9;
Neyman allocation must equal an exhaustive integer search and Cochran's formula; Bradley-Terry
strengths must equal ``ppi_py.ppi_logistic_ci`` on the equivalent design.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from ppi_py import (
    classical_mean_ci,
    ppi_logistic_ci,
    ppi_logistic_pointestimate,
    ppi_mean_ci,
    ppi_mean_pointestimate,
)
from scipy import stats
from scipy.special import expit
from scipy.stats import norm

from evalstats import ppi

TOL = 1e-9


def _f(x: float | None) -> float:
    """A field that must be present here (mypy: not None)."""
    assert x is not None
    return x

# ppi_py passes penalty=None to scikit-learn, deprecated there; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*penalty.*:FutureWarning")


def _data(seed: int, n: int = 120, big_n: int = 1500, binary: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n + big_n)
    if binary:
        y_all = (rng.random(n + big_n) < expit(1.2 * z)).astype(float)
        f_all = expit(z + 0.4 + rng.normal(0, 0.5, n + big_n))  # a biased judge probability
    else:
        y_all = z + rng.normal(0, 0.7, n + big_n)
        f_all = 0.8 * z + 0.3 + rng.normal(0, 0.5, n + big_n)
    return {
        "y": y_all[:n],
        "fl": f_all[:n],
        "fu": f_all[n:],
        "w": rng.uniform(0.5, 4.0, n),
        "wu": rng.uniform(0.5, 2.0, big_n),
    }


def _oracle(d: dict, *, lam, w: bool, wu: bool, level: float) -> tuple[float, float, float]:
    kw = {"lam": lam, "w": d["w"] if w else None, "w_unlabeled": d["wu"] if wu else None}
    value = ppi_mean_pointestimate(d["y"], d["fl"], d["fu"], **kw)
    lo, hi = ppi_mean_ci(d["y"], d["fl"], d["fu"], alpha=1 - level, **kw)
    return float(np.squeeze(value)), float(np.squeeze(lo)), float(np.squeeze(hi))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize(
    ("lam", "w", "wu"),
    [(None, False, False), (None, True, False), (None, True, True), (0.3, False, False),
     (0.7, True, True), (1.0, False, True), (0.0, True, False)],
)
def test_ppi_mean_equals_ppi_py(seed: int, binary: bool, lam, w: bool, wu: bool) -> None:
    d = _data(seed, binary=binary)
    level = 0.9 if seed % 2 else 0.95
    est = ppi.ppi_mean(
        d["y"], d["fl"], d["fu"], w=d["w"] if w else None, w_unlabelled=d["wu"] if wu else None,
        lam=lam, level=level,
    )
    value, lo, hi = _oracle(d, lam=lam, w=w, wu=wu, level=level)
    assert est.value == pytest.approx(value, abs=TOL)
    assert est.ci_low == pytest.approx(lo, abs=TOL)
    assert est.ci_high == pytest.approx(hi, abs=TOL)
    assert est.se == pytest.approx((hi - lo) / 2 / norm.ppf(1 - (1 - level) / 2), abs=TOL)
    if lam is None:
        assert 0.0 <= _f(est.lam) <= 1.0
        assert "power-tuned" in est.method
    else:
        assert est.lam == lam


def test_power_tuning_finds_a_useful_judge_and_ignores_noise() -> None:
    d = _data(3, n=400, big_n=4000)
    assert _f(ppi.ppi_mean(d["y"], d["fl"], d["fu"]).lam) > 0.5
    rng = np.random.default_rng(1003)  # not the seed of the data: independent noise
    noise = ppi.ppi_mean(d["y"], rng.normal(size=400), rng.normal(size=4000))
    assert _f(noise.lam) < 0.2


def test_lambda_is_clipped_like_ppi_py() -> None:
    # A judge anti-correlated with humans: the unclipped optimum is negative, clipped to 0.
    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    fl, fu = -y + rng.normal(0, 0.1, 200), rng.normal(size=2000)
    est = ppi.ppi_mean(y, fl, fu)
    assert est.lam == 0.0
    value, lo, hi = _oracle({"y": y, "fl": fl, "fu": fu}, lam=None, w=False, wu=False, level=0.95)
    assert (est.value, est.ci_low, est.ci_high) == pytest.approx((value, lo, hi), abs=TOL)
    assert est.value == pytest.approx(y.mean(), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_classical_and_naive_mean_equal_ppi_py_classical(seed: int) -> None:
    # Unweighted, the human-only mean is ppi_py's (the weighted case differs on purpose:
    # tests/evalstats/test_hajek.py checks it against statsmodels).
    d = _data(seed, binary=bool(seed % 2))
    est = ppi.classical_mean(d["y"], level=0.9)
    lo, hi = classical_mean_ci(d["y"], alpha=0.1)
    assert (est.ci_low, est.ci_high) == pytest.approx((lo, hi), abs=TOL)
    assert est.value == pytest.approx((lo + hi) / 2, abs=TOL)
    assert est.n_labelled == len(d["y"]) and est.lam is None
    f_all = np.concatenate([d["fl"], d["fu"]])
    naive = ppi.naive_mean(f_all)
    lo, hi = classical_mean_ci(f_all, alpha=0.05)
    assert (naive.ci_low, naive.ci_high) == pytest.approx((lo, hi), abs=TOL)
    assert "biased" in naive.method and naive.n_unlabelled == len(f_all)


@pytest.mark.parametrize("seed", range(3))
def test_t_interval_equals_scipy_t_tests(seed: int) -> None:
    # With lambda fixed, PPI++ is mean(b) + mean(a) of two independent samples b = y - lam f
    # and a = lam f~: Welch's two-sample interval for mean(b) - mean(-a).
    d = _data(seed, n=25, big_n=300)
    lam = 0.6
    est = ppi.ppi_mean(d["y"], d["fl"], d["fu"], lam=lam, level=0.9, interval="t")
    welch = stats.ttest_ind(d["y"] - lam * d["fl"], -lam * d["fu"], equal_var=False)
    ci = welch.confidence_interval(confidence_level=0.9)
    assert (est.ci_low, est.ci_high) == pytest.approx((ci.low, ci.high), abs=TOL)
    assert est.df == pytest.approx(welch.df, abs=1e-9)
    assert "Student t" in est.method and est.to_json()["df"] == est.df
    human = ppi.classical_mean(d["y"], interval="t")
    ci = stats.ttest_1samp(d["y"], 0.0).confidence_interval(confidence_level=0.95)
    assert (human.ci_low, human.ci_high) == pytest.approx((ci.low, ci.high), abs=TOL)
    assert human.df == len(d["y"]) - 1
    # Tuned lambda: the same lambda as the normal interval, a wider interval at small n.
    tuned_t = ppi.ppi_mean(d["y"], d["fl"], d["fu"], interval="t")
    tuned_z = ppi.ppi_mean(d["y"], d["fl"], d["fu"])
    assert tuned_t.lam == tuned_z.lam and tuned_t.value == tuned_z.value
    assert _f(tuned_t.ci_low) < _f(tuned_z.ci_low) and "df" not in tuned_z.to_json()
    assert ppi.PPIEstimate.from_json(tuned_t.to_json()) == tuned_t
    with pytest.raises(ValueError):
        ppi.ppi_mean(d["y"], d["fl"], d["fu"], interval="bootstrap")  # type: ignore[arg-type]


def test_stratified_t_interval_uses_welch_satterthwaite_over_strata() -> None:
    d0, d1 = _data(30, n=12, big_n=100), _data(31, n=30, big_n=400)
    y = np.concatenate([d0["y"], d1["y"]])
    fl = np.concatenate([d0["fl"], d1["fl"]])
    fu = np.concatenate([d0["fu"], d1["fu"]])
    sl = np.repeat([0, 1], [12, 30])
    su = np.repeat([0, 1], [100, 400])
    res = ppi.ppi_mean_stratified(y, fl, sl, fu, su, mix={0: 0.7, 1: 0.3}, interval="t")
    assert res.mix is not None
    parts = [(m**2 * _f(res.per_stratum[s].se) ** 2, _f(res.per_stratum[s].df))
             for s, m in ((0, 0.7), (1, 0.3))]
    df = sum(v for v, _ in parts) ** 2 / sum(v**2 / k for v, k in parts)
    assert res.mix.df == pytest.approx(df)
    half = stats.t.ppf(0.975, df) * _f(res.mix.se)
    assert _f(res.mix.ci_high) - res.mix.value == pytest.approx(half, abs=TOL)


def test_small_and_degenerate_inputs() -> None:
    one = ppi.ppi_mean([1.0], [0.8], [0.2, 0.9, 0.4])
    assert one.ci_low is None and one.se is None and one.warnings
    assert math.isfinite(one.value)
    # No unlabelled outputs: the human-only estimate.
    y = np.array([0.0, 1.0, 1.0, 1.0, 0.0])
    est = ppi.ppi_mean(y, y * 0.5, [])
    ref = ppi.classical_mean(y)
    assert (est.value, est.ci_low, est.ci_high) == pytest.approx(
        (ref.value, ref.ci_low, ref.ci_high), abs=1e-12
    )
    assert est.lam == 0.0 and est.warnings
    # A constant judge carries no information: lambda 0, the human-only interval.
    const = ppi.ppi_mean(y, np.full(5, 0.7), np.full(50, 0.7))
    assert const.lam == 0.0
    assert (const.ci_low, const.ci_high) == pytest.approx((ref.ci_low, ref.ci_high), abs=1e-12)
    with pytest.raises(ValueError):
        ppi.ppi_mean([], [], [1.0])
    with pytest.raises(ValueError):
        ppi.ppi_mean([1.0, np.nan], [1.0, 1.0], [1.0])
    with pytest.raises(ValueError):
        ppi.ppi_mean([1.0, 0.0], [1.0], [1.0])
    with pytest.raises(ValueError):
        ppi.classical_mean([1.0, 0.0], w=[1.0, -1.0])


def test_json_round_trip_and_non_finite_values() -> None:
    est = ppi.ppi_mean(*(_data(1)[k] for k in ("y", "fl", "fu")))
    back = ppi.PPIEstimate.from_json(json.loads(json.dumps(est.to_json())))
    assert back == est
    weird = ppi.PPIEstimate(
        value=math.nan, ci_low=-math.inf, ci_high=None, se=math.inf, n_labelled=0,
        n_unlabelled=3, lam=None, method="m", level=0.95, warnings=("w",),
    )
    js = weird.to_json()
    assert js["value"] is None and js["ci_low"] is None and js["se"] is None
    json.dumps(js, allow_nan=False)
    assert set(js) == {"value", "ci_low", "ci_high", "se", "n_labelled", "n_unlabelled", "lam",
                       "method", "level", "warnings"}
    assert math.isnan(ppi.PPIEstimate.from_json(js).value)


# --- stratified ---------------------------------------------------------------------------------


def test_stratified_with_one_stratum_equals_ppi_mean() -> None:
    d = _data(7)
    res = ppi.ppi_mean_stratified(
        d["y"], d["fl"], np.full(len(d["y"]), 4), d["fu"], np.full(len(d["fu"]), 4),
        mix={4: 1.0}, w=d["w"],
    )
    single = ppi.ppi_mean(d["y"], d["fl"], d["fu"], w=d["w"])
    # All strata at once from per-stratum sums: equal to ppi_mean up to summation order.
    one = res.per_stratum[4]
    assert (one.value, one.se, one.lam, one.ci_low, one.ci_high) == pytest.approx(
        (single.value, single.se, single.lam, single.ci_low, single.ci_high), abs=1e-12
    )
    assert (one.n_labelled, one.n_unlabelled, one.method, one.warnings) == (
        single.n_labelled, single.n_unlabelled, single.method, single.warnings
    )
    assert res.mix is not None and res.missing == ()
    assert (res.mix.value, res.mix.ci_low, res.mix.ci_high) == pytest.approx(
        (single.value, single.ci_low, single.ci_high), abs=1e-12
    )


def test_stratified_mix_combines_ppi_py_per_stratum_estimates() -> None:
    rng = np.random.default_rng(11)
    parts = [_data(20 + s, n=40 + 30 * s, big_n=300 + 200 * s, binary=True) for s in range(3)]
    y = np.concatenate([p["y"] for p in parts])
    fl = np.concatenate([p["fl"] for p in parts])
    fu = np.concatenate([p["fu"] for p in parts])
    sl = np.concatenate([np.full(len(p["y"]), s) for s, p in enumerate(parts)])
    su = np.concatenate([np.full(len(p["fu"]), s) for s, p in enumerate(parts)])
    order_l, order_u = rng.permutation(len(y)), rng.permutation(len(fu))  # interleave strata
    mix = {0: 0.5, 1: 0.2, 2: 0.3}
    res = ppi.ppi_mean_stratified(
        y[order_l], fl[order_l], sl[order_l], fu[order_u], su[order_u], mix=mix, level=0.9
    )
    z = norm.ppf(0.95)
    value, var = 0.0, 0.0
    for s, p in enumerate(parts):
        v, lo, hi = _oracle(p, lam=None, w=False, wu=False, level=0.9)
        assert res.per_stratum[s].value == pytest.approx(v, abs=TOL)
        assert res.per_stratum[s].ci_low == pytest.approx(lo, abs=TOL)
        value += mix[s] * v
        var += mix[s] ** 2 * ((hi - lo) / 2 / z) ** 2
    assert res.mix is not None
    assert res.mix.value == pytest.approx(value, abs=TOL)
    assert res.mix.se == pytest.approx(math.sqrt(var), abs=TOL)
    assert res.mix.ci_low == pytest.approx(value - z * math.sqrt(var), abs=TOL)
    assert res.mix.lam is None and "stratified" in res.mix.method
    # Each stratum has its own lambda.
    assert len({res.per_stratum[s].lam for s in range(3)}) == 3


def test_stratified_missing_small_and_label_free_strata() -> None:
    rng = np.random.default_rng(5)
    y = rng.random(30).round()
    fl = np.clip(y * 0.8 + rng.normal(0, 0.2, 30), 0, 1)
    sl = np.array([0] * 20 + [1] * 9 + [2])
    fu = rng.random(100)
    su = np.array([0] * 50 + [3] * 50)  # stratum 1 and 2 have no unlabelled outputs
    res = ppi.ppi_mean_stratified(y, fl, sl, fu, su, mix={0: 0.4, 1: 0.3, 2: 0.2, 3: 0.1})
    assert res.mix is None and res.missing == (3,)
    assert set(res.per_stratum) == {0, 1, 2}
    assert res.per_stratum[2].ci_low is None and res.per_stratum[2].warnings
    assert res.per_stratum[1].lam == 0.0
    assert res.per_stratum[1].value == pytest.approx(y[20:29].mean())
    # Without stratum 3 in the mix: a mix value, but no interval (stratum 2 has one label).
    res = ppi.ppi_mean_stratified(y, fl, sl, fu, su, mix={0: 0.5, 1: 0.3, 2: 0.2})
    assert res.mix is not None and res.mix.ci_low is None and res.missing == ()
    assert res.mix.value == pytest.approx(
        sum(m * res.per_stratum[s].value for s, m in {0: 0.5, 1: 0.3, 2: 0.2}.items())
    )
    with pytest.raises(ValueError, match="sum to 1"):
        ppi.ppi_mean_stratified(y, fl, sl, fu, su, mix={0: 0.5, 1: 0.3})
    js = json.dumps(res.to_json(), allow_nan=False)
    assert '"missing": []' in js


# --- paired differences ---------------------------------------------------------------------


def _paired(seed: int, n: int = 150, big_n: int = 2000):
    rng = np.random.default_rng(seed)
    m = n + big_n
    difficulty = rng.normal(size=m)  # shared by both candidates: correlated outputs
    y_a = difficulty + 0.3 + rng.normal(0, 0.4, m)
    y_b = difficulty + rng.normal(0, 0.4, m)
    f_a = y_a + rng.normal(0, 0.4, m)
    f_b = y_b + rng.normal(0, 0.4, m)
    return y_a[:n], y_b[:n], f_a[:n], f_b[:n], f_a[n:], f_b[n:]


@pytest.mark.parametrize("seed", range(3))
def test_paired_difference_is_ppi_on_differences(seed: int) -> None:
    y_a, y_b, fal, fbl, fau, fbu = _paired(seed)
    est = ppi.paired_difference(y_a, y_b, fal, fbl, fau, fbu)
    value, lo, hi = _oracle(
        {"y": y_a - y_b, "fl": fal - fbl, "fu": fau - fbu}, lam=None, w=False, wu=False,
        level=0.95,
    )
    assert (est.value, est.ci_low, est.ci_high) == pytest.approx((value, lo, hi), abs=TOL)
    assert "paired difference" in est.method
    # Items are shared, so the paired interval is narrower than combining two intervals.
    a = ppi.ppi_mean(y_a, fal, fau)
    b = ppi.ppi_mean(y_b, fbl, fbu)
    # (here about 0.62 of the combined se: the item effect cancels in the difference)
    assert _f(est.se) < 0.75 * math.sqrt(_f(a.se) ** 2 + _f(b.se) ** 2)


def test_paired_difference_stratified() -> None:
    y_a, y_b, fal, fbl, fau, fbu = _paired(4)
    one = ppi.paired_difference_stratified(
        y_a, y_b, fal, fbl, np.zeros(len(y_a)), fau, fbu, np.zeros(len(fau)), mix={0: 1.0}
    )
    ref = ppi.paired_difference(y_a, y_b, fal, fbl, fau, fbu)
    assert one.mix is not None
    assert (one.mix.value, one.mix.se) == pytest.approx((ref.value, ref.se), abs=1e-12)
    sl = np.arange(len(y_a)) % 2
    su = np.arange(len(fau)) % 2
    two = ppi.paired_difference_stratified(
        y_a, y_b, fal, fbl, sl, fau, fbu, su, mix={0: 0.25, 1: 0.75}
    )
    parts = [ppi.paired_difference(y_a[sl == s], y_b[sl == s], fal[sl == s], fbl[sl == s],
                                   fau[su == s], fbu[su == s]) for s in (0, 1)]
    assert two.mix is not None
    assert two.mix.value == pytest.approx(0.25 * parts[0].value + 0.75 * parts[1].value)
    assert two.mix.se == pytest.approx(
        math.sqrt(0.25**2 * _f(parts[0].se) ** 2 + 0.75**2 * _f(parts[1].se) ** 2)
    )


# --- Neyman allocation ------------------------------------------------------------------------


def _brute_force(sigma, n0, mix, target, cap=None, fixed=None, min_labels=2, limit=250):
    """Smallest total of extra labels reaching the target: every allocation of the first
    strata up to ``limit`` extra labels, the last stratum's least sufficient count solved."""
    strata = sorted(s for s in mix if mix[s] > 0)
    cap = cap or {}
    budget = target**2 - sum(mix[s] ** 2 * (fixed or {}).get(s, 0.0) for s in strata)
    *head, last = strata
    a2 = {s: mix[s] ** 2 * sigma[s] ** 2 for s in strata}
    ranges = [range(0, min(limit, cap.get(s, limit)) + 1) for s in head]
    best = None
    for xs in itertools.product(*ranges):
        n = [n0.get(s, 0) + x for s, x in zip(head, xs, strict=True)]
        if any(k < min_labels for k in n):
            continue
        rest = budget - sum(a2[s] / k for s, k in zip(head, n, strict=True))
        if rest <= 0:
            continue
        x_last = max(math.ceil(a2[last] / rest - n0.get(last, 0) - 1e-9), min_labels
                     - n0.get(last, 0), 0)
        while a2[last] / (n0.get(last, 0) + x_last) > rest:  # guard the rounding of ceil
            x_last += 1
        if x_last > cap.get(last, 10**9):
            continue
        if best is None or sum(xs) + x_last < best:
            best = sum(xs) + x_last
    return best


@pytest.mark.parametrize("seed", range(25))
def test_neyman_allocation_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 2 + seed % 2
    raw = rng.dirichlet(np.ones(k))
    mix = {s: float(v) for s, v in enumerate(raw)}
    mix[k - 1] = 1.0 - sum(v for s, v in mix.items() if s != k - 1)
    sigma = {s: float(rng.uniform(0.1, 1.0)) for s in range(k)}
    n0 = {s: int(rng.integers(0, 25)) for s in range(k)}
    cap = {0: int(rng.integers(5, 40))} if seed % 3 == 0 else None
    fixed = {1: float(rng.uniform(0, 1e-4))} if seed % 4 == 1 else None
    var_now = sum(mix[s] ** 2 * sigma[s] ** 2 / max(n0[s], 2) for s in range(k))
    target = math.sqrt(var_now) * float(rng.uniform(0.45, 0.95))
    res = ppi.neyman_allocation(
        sigma=sigma, n_labelled=n0, mix=mix, target_se=target, capacity=cap, fixed_var=fixed
    )
    best = _brute_force(sigma, n0, mix, target, cap, fixed)
    if best is None:
        assert not res.feasible
    else:
        assert res.feasible
        assert res.total == best
        assert res.se_planned <= target * (1 + 1e-9)
    assert all(v >= 0 for v in res.per_stratum.values())
    assert res.total == sum(res.per_stratum.values())


def test_neyman_allocation_matches_cochran_without_labels() -> None:
    # Cochran (1977), Sampling Techniques, eq. 5.26-5.27 without the finite population
    # correction: n = (sum W_h S_h)^2 / V, n_h = n W_h S_h / sum W_h S_h.
    mix = {0: 0.5, 1: 0.3, 2: 0.2}
    sigma = {0: 0.3, 1: 0.5, 2: 0.45}
    target = 0.01
    res = ppi.neyman_allocation(sigma=sigma, n_labelled={}, mix=mix, target_se=target)
    ws = {s: mix[s] * sigma[s] for s in mix}
    n_total = sum(ws.values()) ** 2 / target**2
    assert res.feasible
    assert math.ceil(n_total) <= res.total <= n_total + len(mix)
    for s in mix:
        assert abs(res.per_stratum[s] - n_total * ws[s] / sum(ws.values())) <= 1.0


def test_neyman_allocation_keeps_strata_above_their_share() -> None:
    # Stratum 0 already has far more than its Neyman share: it gets nothing.
    res = ppi.neyman_allocation(
        sigma={0: 0.5, 1: 0.5}, n_labelled={0: 5000, 1: 10}, mix={0: 0.5, 1: 0.5},
        target_se=0.02,
    )
    assert res.per_stratum[0] == 0 and res.per_stratum[1] > 0 and res.feasible
    # Nothing needed when the target is met already.
    done = ppi.neyman_allocation(
        sigma={0: 0.5}, n_labelled={0: 10000}, mix={0: 1.0}, target_se=0.05
    )
    assert done.total == 0 and done.feasible and done.se_planned == done.se_current


def test_neyman_allocation_infeasible_and_degenerate() -> None:
    zero = ppi.neyman_allocation(
        sigma={0: 0.0, 1: 0.0}, n_labelled={0: 0, 1: 7}, mix={0: 0.5, 1: 0.5}, target_se=0.01
    )
    # No variance to remove: only the labels an interval needs.
    assert zero.feasible and zero.per_stratum == {0: 2, 1: 0}
    target0 = ppi.neyman_allocation(
        sigma={0: 0.3}, n_labelled={0: 10}, mix={0: 1.0}, target_se=0.0
    )
    assert not target0.feasible
    capped = ppi.neyman_allocation(
        sigma={0: 0.5}, n_labelled={0: 10}, mix={0: 1.0}, target_se=0.01, capacity={0: 100}
    )
    assert not capped.feasible and capped.per_stratum == {0: 100}
    floor = ppi.neyman_allocation(
        sigma={0: 0.5}, n_labelled={0: 10}, mix={0: 1.0}, target_se=0.01, fixed_var={0: 2e-4}
    )
    assert not floor.feasible
    huge = ppi.neyman_allocation(
        sigma={0: 0.5}, n_labelled={0: 10}, mix={0: 1.0}, target_se=1e-9
    )
    assert not huge.feasible and huge.total == 0
    with pytest.raises(ValueError):
        ppi.neyman_allocation(sigma={}, n_labelled={}, mix={0: 1.0}, target_se=0.1)
    js = json.dumps(capped.to_json(), allow_nan=False)
    assert '"feasible": false' in js


# --- Bradley-Terry --------------------------------------------------------------------------

# ppi_py fits with L-BFGS-B and stops where the gradient of its loss is ~1e-9..1e-10, so its
# estimates carry ~1e-8 of optimiser error; ours (Newton) reaches a gradient ~1e-16. Agreement
# is therefore checked to 1e-7 and the optimality of both fits separately.
BT_TOL = 1e-7
BETA = np.array([0.0, 0.6, -0.4, 1.1])
TIGHT = {"ftol": 1e-300, "gtol": 1e-300, "maxiter": 100000, "maxls": 100}


def _pairs(rng: np.random.Generator, m: int, judge_sd: float):
    k = len(BETA)
    a = rng.integers(0, k, m)
    b = (a + rng.integers(1, k, m)) % k
    p = expit(BETA[a] - BETA[b])
    y = (rng.random(m) < p).astype(float)
    f = np.clip(p + rng.normal(0, judge_sd, m), 0, 1)
    return a, b, y, f


def _design(a: np.ndarray, b: np.ndarray, reference: int = 0) -> np.ndarray:
    cols = [c for c in range(len(BETA)) if c != reference]
    return np.stack([(a == c).astype(float) - (b == c).astype(float) for c in cols], axis=1)


def _rectified_grad(theta, lam, x, y, f, xu, fu):
    n, big_n = len(y), len(fu)
    return (lam / big_n * xu.T @ (expit(xu @ theta) - fu) - lam / n * x.T @ (expit(x @ theta) - f)
            + x.T @ (expit(x @ theta) - y) / n)


# ppi_py compiles its logistic statistics with numba on first use (~30 s): marked slow.
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("lam", [None, 0.4, 1.0, 0.0])
def test_bradley_terry_equals_ppi_py_logistic(seed: int, lam) -> None:
    rng = np.random.default_rng(seed)
    a, b, y, f = _pairs(rng, 250, 0.15)
    au, bu, _, fu = _pairs(rng, 2500, 0.15)
    x, xu = _design(a, b), _design(au, bu)
    bt = ppi.ppi_bradley_terry(y, a, b, f, au, bu, fu, lam=lam, level=0.9)
    lo, hi = ppi_logistic_ci(x, y, f, xu, fu, alpha=0.1, lam=lam, optimizer_options=dict(TIGHT))
    ours = np.array([bt.strengths[c].value for c in (1, 2, 3)])
    np.testing.assert_allclose([_f(bt.strengths[c].ci_low) for c in (1, 2, 3)], lo, atol=BT_TOL)
    np.testing.assert_allclose([_f(bt.strengths[c].ci_high) for c in (1, 2, 3)], hi, atol=BT_TOL)
    np.testing.assert_allclose(ours, (lo + hi) / 2, atol=BT_TOL)
    assert np.max(np.abs(_rectified_grad(ours, bt.lam, x, y, f, xu, fu))) < 1e-13
    if lam is not None:
        point = ppi_logistic_pointestimate(x, y, f, xu, fu, lam=lam,
                                           optimizer_options=dict(TIGHT))
        np.testing.assert_allclose(ours, point, atol=BT_TOL)
        assert bt.lam == lam
    assert bt.strengths[0].value == 0.0 and bt.strengths[0].ci_low is None


@pytest.mark.slow
def test_bradley_terry_with_weights_and_another_reference() -> None:
    rng = np.random.default_rng(9)
    a, b, y, f = _pairs(rng, 300, 0.1)
    au, bu, _, fu = _pairs(rng, 1500, 0.1)
    w, wu = rng.uniform(0.5, 3, 300), rng.uniform(0.5, 2, 1500)
    bt = ppi.ppi_bradley_terry(y, a, b, f, au, bu, fu, reference=2, w=w, w_unlabelled=wu,
                               lam=0.6)
    lo, hi = ppi_logistic_ci(_design(a, b, 2), y, f, _design(au, bu, 2), fu, alpha=0.05,
                             lam=0.6, w=w, w_unlabeled=wu, optimizer_options=dict(TIGHT))
    np.testing.assert_allclose([_f(bt.strengths[c].ci_low) for c in (0, 1, 3)], lo, atol=BT_TOL)
    np.testing.assert_allclose([_f(bt.strengths[c].ci_high) for c in (0, 1, 3)], hi, atol=BT_TOL)
    diff = bt.difference(3, 1)
    assert diff.value == pytest.approx(bt.strengths[3].value - bt.strengths[1].value)
    i, j = bt.free.index(3), bt.free.index(1)
    c = np.asarray(bt.cov)
    assert diff.se == pytest.approx(math.sqrt(c[i, i] + c[j, j] - 2 * c[i, j]))
    json.dumps(bt.to_json(), allow_nan=False)


def test_bradley_terry_recovers_the_order_and_refuses_disconnected_designs() -> None:
    rng = np.random.default_rng(2)
    a, b, y, f = _pairs(rng, 2000, 0.05)
    au, bu, _, fu = _pairs(rng, 20000, 0.05)
    bt = ppi.ppi_bradley_terry(y, a, b, f, au, bu, fu)
    assert bt.order == tuple(int(i) for i in np.argsort(-BETA))
    for c in (1, 2, 3):
        s = bt.strengths[c]
        assert s.ci_low < BETA[c] < s.ci_high
    with pytest.raises(ValueError, match="connect"):
        ppi.ppi_bradley_terry([1.0, 0.0, 1.0], [0, 0, 2], [1, 1, 3], [0.9, 0.2, 0.6],
                              [], [], [])


def test_bradley_terry_accepts_ties_as_half_wins() -> None:
    rng = np.random.default_rng(12)
    a, b, y, f = _pairs(rng, 200, 0.1)
    y[rng.random(200) < 0.2] = 0.5
    au, bu, _, fu = _pairs(rng, 800, 0.1)
    bt = ppi.ppi_bradley_terry(y, a, b, f, au, bu, fu, lam=0.5)
    ours = np.array([bt.strengths[c].value for c in (1, 2, 3)])
    grad = _rectified_grad(ours, 0.5, _design(a, b), y, f, _design(au, bu), fu)
    assert np.max(np.abs(grad)) < 1e-13
    assert all(bt.strengths[c].ci_low is not None for c in (1, 2, 3))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("lam", [None, 0.4])
def test_stratified_sums_equal_ppi_mean_per_stratum(weighted: bool, lam: float | None) -> None:
    """The all-strata path equals ppi_mean on each stratum's own outputs (interleaved strata,
    one without unlabelled outputs, one with a single label, a common offset of 1e3 in the
    judge scores that a naive sum of squares would cancel badly)."""
    rng = np.random.default_rng(5)
    n, big_n = 300, 5000
    sl = rng.integers(0, 5, n)
    su = rng.integers(0, 4, big_n)  # stratum 4 has no unlabelled output
    sl[0] = 6  # stratum 6: a single label, no unlabelled output
    fl = 1e3 + rng.random(n)
    y = fl + rng.normal(0, 0.3, n)
    fu = 1e3 + rng.random(big_n)
    w = rng.uniform(0.5, 3.0, n) if weighted else None
    wu = rng.uniform(0.5, 3.0, big_n) if weighted else None
    res = ppi.ppi_mean_stratified(y, fl, sl, fu, su, mix={0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2,
                                                          4: 0.1, 6: 0.1}, w=w,
                                  w_unlabelled=wu, lam=lam)
    for s in (0, 1, 2, 3, 4, 6):
        li, ui = sl == s, su == s
        want = ppi.ppi_mean(y[li], fl[li], fu[ui], w=None if w is None else w[li],
                            w_unlabelled=None if wu is None else wu[ui], lam=lam)
        got = res.per_stratum[s]
        assert got.value == pytest.approx(want.value, rel=1e-12, abs=1e-9)
        assert got.lam == pytest.approx(want.lam, abs=1e-9)
        if want.se is None:
            assert got.se is None
        else:
            assert got.se == pytest.approx(want.se, rel=1e-8)
        assert (got.method, got.warnings) == (want.method, want.warnings)


# --- census: the judge term over every output (the survey difference estimator) -------------


def test_census_with_every_output_labelled_is_the_human_only_estimate() -> None:
    rng = np.random.default_rng(2)
    y = (rng.random(300) < 0.6).astype(float)
    f = np.clip(y * 0.5 + rng.normal(0.25, 0.1, 300), 0, 1)
    got = ppi.ppi_mean(y, f, f, census=True)
    human = ppi.classical_mean(y)
    assert got.value == pytest.approx(human.value, abs=1e-12)
    assert got.se == pytest.approx(human.se, rel=1e-12)
    # ppi_py's two-sample variance would be narrower than the human-only one here: wrong.
    assert ppi.ppi_mean(y, f, f).se < human.se  # type: ignore[operator]


def test_census_variance_by_hand_and_stratified_path() -> None:
    rng = np.random.default_rng(4)
    n_all = 2000
    f = rng.random(n_all)
    y = (rng.random(n_all) < f).astype(float)
    s = rng.integers(0, 3, n_all)
    lab = rng.random(n_all) < 0.2
    est = ppi.ppi_mean(y[lab], f[lab], f, census=True)
    n, lam = int(lab.sum()), est.lam
    assert lam is not None
    r = y[lab] - lam * f[lab]
    var = np.var(y[lab]) / n_all + (1 / n - 1 / n_all) * np.var(r)
    assert est.se == pytest.approx(math.sqrt(var), rel=1e-12)
    w = rng.uniform(1, 3, n_all)
    strat = ppi.ppi_mean_stratified(y[lab], f[lab], s[lab], f, s, mix={0: 0.3, 1: 0.3, 2: 0.4},
                                    w=w[lab], census=True)
    for k in range(3):
        m = s == k
        one = ppi.ppi_mean(y[lab & m], f[lab & m], f[m], w=w[lab & m], census=True)
        got = strat.per_stratum[k]
        assert (got.value, got.se) == pytest.approx((one.value, one.se), abs=1e-12)
    with pytest.raises(ValueError, match="every output"):
        ppi.ppi_mean(y[lab], f[lab], f[:3], census=True)


@pytest.mark.slow
@pytest.mark.parametrize(("fraction", "unequal"), [(0.1, False), (0.6, False), (1.0, False),
                                                    (0.1, True), (0.5, True)])
def test_census_intervals_cover(fraction: float, unequal: bool) -> None:
    """SIMULATED populations of 2,000 outputs (y ~ Bernoulli(sigmoid(x)), a biased judge),
    humans labelling a Poisson sample with equal or score-dependent probabilities: the 95 %
    interval covers the population mean 0.5 in 93-97 % of 1,000 runs, also when most outputs
    are labelled (where ppi_py's two-sample variance would be too small)."""
    rng = np.random.default_rng(int(fraction * 100) + unequal)
    runs, hits = 1000, 0
    for _ in range(runs):
        x = rng.normal(size=2000)
        y = (rng.random(2000) < 1 / (1 + np.exp(-x))).astype(float)
        f = np.clip(1 / (1 + np.exp(-(x + 0.3))) + rng.normal(0, 0.1, 2000), 0, 1)
        pi = np.clip(fraction * (0.4 + 1.2 * f), 0.01, 1) if unequal else np.full(2000, fraction)
        lab = rng.random(2000) < pi
        e = ppi.ppi_mean(y[lab], f[lab], f, w=1 / pi[lab], census=True)
        assert e.ci_low is not None and e.ci_high is not None
        hits += e.ci_low <= 0.5 <= e.ci_high
    assert 0.93 <= hits / runs <= 0.97
