"""bootstrap_by_group equals the per-group single-statistic calls (same rng stream semantics)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

import evalstats as es

CATS = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def verdicts() -> pd.DataFrame:
    """3 judges x 2 criteria x 4 strata of paired (judge, human) 1-5 scores.

    Group sizes cover every route of the engine: grouped multinomial (large groups), per-item
    draws for n < 64 (stratum "d") and for many occupied cells relative to n (stratum "c" has
    70 items and a noisy judge). Some ratings and some group keys are missing.
    """
    rng = np.random.default_rng(42)
    sizes = {"a": 600, "b": 250, "c": 70, "d": 25}
    rows = []
    for judge in ("j1", "j2", "j3"):
        for criterion in ("helpful", "safe"):
            for stratum, n in sizes.items():
                human = rng.integers(1, 6, n)
                noise = 0.9 if stratum == "c" else 0.2
                judge_score = np.where(
                    rng.random(n) < noise, rng.integers(1, 6, n), np.clip(human + 1, 1, 5)
                )
                rows.append(
                    pd.DataFrame(
                        {
                            "judge": judge,
                            "criterion": criterion,
                            "stratum": stratum,
                            "score": judge_score.astype(float),
                            "human": human.astype(float),
                        }
                    )
                )
    df = pd.concat(rows, ignore_index=True).sample(frac=1.0, random_state=1)  # shuffled
    df.loc[df.sample(40, random_state=2).index, "score"] = np.nan
    df.loc[df.sample(30, random_state=3).index, "human"] = np.nan
    df.loc[df.sample(10, random_state=4).index, "stratum"] = None
    return df.reset_index(drop=True)


def test_equals_per_group_calls_with_spawned_children(verdicts: pd.DataFrame) -> None:
    keys = ["judge", "criterion", "stratum"]
    res = es.bootstrap_by_group(
        verdicts[keys],
        verdicts["score"],
        verdicts["human"],
        stats=es.PAIRED_STATS,
        categories=CATS,
        rng=np.random.default_rng(7),
        options=es.BootstrapOptions(n_resamples=300),
    )
    expected_keys = sorted(
        {tuple(r) for r in verdicts[keys].dropna().itertuples(index=False, name=None)}
    )
    assert list(res) == expected_keys and len(res) == 24
    children = np.random.default_rng(7).spawn(len(expected_keys))
    for key, child in zip(expected_keys, children, strict=True):
        mask = (verdicts[keys] == pd.Series(key, index=keys)).all(axis=1).to_numpy()
        single = es.bootstrap_paired(
            verdicts["score"][mask],
            verdicts["human"][mask],
            stats=es.PAIRED_STATS,
            categories=CATS,
            rng=child,
            options=es.BootstrapOptions(n_resamples=300),
        )
        assert res[key] == single, key
    # The routes really were exercised: tiny groups warn, big ones do not.
    assert any("only" in w for w in res[("j1", "helpful", "d")]["kappa"].warnings)
    assert res[("j1", "helpful", "a")]["kappa"].n_items > 500


def test_single_functions_with_the_child_generator(verdicts: pd.DataFrame) -> None:
    keys = ["judge", "criterion", "stratum"]
    stats = ["kappa_quadratic", "gwet_ac1", "kendall_tau_b", "spearman", "mae", "macro_f1"]
    res = es.bootstrap_by_group(
        verdicts[keys].to_numpy(),
        verdicts["score"].to_numpy(),
        verdicts["human"].to_numpy(),
        stats=stats,
        categories=CATS,
        rng=np.random.default_rng(3),
        options=es.BootstrapOptions(n_resamples=250, ci="percentile"),
    )
    group_keys = list(res)
    for g in (0, 5, len(group_keys) - 1):
        key = group_keys[g]
        mask = (verdicts[keys] == pd.Series(key, index=keys)).all(axis=1).to_numpy()
        j, h = verdicts["score"].to_numpy()[mask], verdicts["human"].to_numpy()[mask]

        def child(g: int = g) -> np.random.Generator:
            return np.random.default_rng(3).spawn(len(group_keys))[g]

        common: dict[str, Any] = {"options": es.BootstrapOptions(n_resamples=250, ci="percentile")}
        kq = es.bootstrap_kappa(j, h, categories=CATS, weights="quadratic", rng=child(), **common)
        assert kq == res[key]["kappa_quadratic"]
        assert (
            es.bootstrap_gwet_ac1(j, h, categories=CATS, rng=child(), **common)
            == (res[key]["gwet_ac1"])
        )
        assert (
            es.bootstrap_kendall_tau(j, h, categories=CATS, rng=child(), **common)
            == (res[key]["kendall_tau_b"])
        )
        assert (
            es.bootstrap_spearman(j, h, categories=CATS, rng=child(), **common)
            == (res[key]["spearman"])
        )
        assert (
            es.bootstrap_mean_absolute_error(j, h, categories=CATS, rng=child(), **common)
            == (res[key]["mae"])
        )
        assert (
            es.bootstrap_macro_f1(h, j, labels=CATS, rng=child(), **common)
            == (res[key]["macro_f1"])
        )
        ok = ~(np.isnan(j) | np.isnan(h))
        assert kq.value == pytest.approx(
            cohen_kappa_score(j[ok], h[ok], labels=CATS, weights="quadratic"), abs=1e-12
        )


def test_accuracy_matches_bootstrap_accuracy_in_distribution() -> None:
    """bootstrap_accuracy groups items as [1, correct], so only the distribution is shared."""
    rng = np.random.default_rng(0)
    h = rng.integers(1, 6, 3000)
    j = np.where(rng.random(3000) < 0.7, h, rng.integers(1, 6, 3000))
    groups = np.repeat(["x", "y"], 1500)
    res = es.bootstrap_by_group(
        groups,
        j,
        h,
        stats=["accuracy"],
        categories=CATS,
        rng=rng,
        options=es.BootstrapOptions(n_resamples=4000),
    )
    for key in ("x", "y"):
        m = groups == key
        ref = es.bootstrap_accuracy(
            h[m], j[m], rng=np.random.default_rng(1), options=es.BootstrapOptions(n_resamples=4000)
        )
        got = res[key]["accuracy"]
        assert got.value == ref.value
        assert got.ci_low == pytest.approx(ref.ci_low, abs=0.004)
        assert got.ci_high == pytest.approx(ref.ci_high, abs=0.004)


def test_one_dimensional_keys_missing_and_empty_groups() -> None:
    rng = np.random.default_rng(1)
    groups = np.array([3, 1, 1, 3, np.nan, 2, 2, 2, 1, 3] * 20)
    a = rng.integers(1, 4, groups.size).astype(float)
    b = rng.integers(1, 4, groups.size).astype(float)
    a[groups == 2] = np.nan  # group 2: every item lacks a judge score
    res = es.bootstrap_by_group(
        groups,
        a,
        b,
        stats=["kappa", "signed_bias"],
        rng=rng,
        options=es.BootstrapOptions(n_resamples=100),
    )
    assert list(res) == [1.0, 2.0, 3.0]
    empty = res[2.0]["kappa"]
    assert np.isnan(empty.value) and empty.n_items == 0 and "no items" in empty.warnings
    assert empty.warnings[0] == "60 items dropped because a rating was missing"
    assert res[1.0]["signed_bias"].n_items == 60
    assert res[3.0]["signed_bias"].value == pytest.approx(np.mean((a - b)[groups == 3]))


def test_pooled_categories_shared_by_every_group() -> None:
    """Without categories the pooled scale is used, so a group missing a level still counts it."""
    a = np.array([1, 2, 1, 2] * 20 + [3, 1, 2, 3] * 20)
    b = np.array([1, 2, 2, 2] * 20 + [3, 1, 3, 3] * 20)
    g = np.repeat(["p", "q"], 80)
    res = es.bootstrap_by_group(
        g,
        a,
        b,
        stats=["gwet_ac1"],
        rng=np.random.default_rng(0),
        options=es.BootstrapOptions(n_resamples=50),
    )
    assert res["p"]["gwet_ac1"].value == pytest.approx(
        es.gwet_ac1(a[:80], b[:80], categories=[1, 2, 3]).value
    )
    assert res["p"]["gwet_ac1"].value != pytest.approx(es.gwet_ac1(a[:80], b[:80]).value)


def test_bad_group_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="group_ids must have one entry"):
        es.bootstrap_by_group([1, 2], [1, 2, 3], [1, 2, 3], stats=["kappa"], rng=rng)
    with pytest.raises(ValueError, match="same length"):
        es.bootstrap_by_group([1, 2, 3], [1, 2, 3], [1, 2], stats=["kappa"], rng=rng)
    with pytest.raises(ValueError, match="unknown"):
        es.bootstrap_by_group([1, 2], [1, 2], [1, 2], stats=["tau"], rng=rng)
