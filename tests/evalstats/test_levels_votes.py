"""Sample-level correlation and per-vote agreement, against scipy and plain loops.

Data here are simulated (seeded generators), labelled as such; the published-data checks are in
tests/reports/test_judgebench_hanna_report.py and tests/reports/test_pandalm_report.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from evalstats import BootstrapOptions, bootstrap_items, position_bias
from evalstats.levels import per_item_correlations, sample_level_correlation
from evalstats.orders import order_accuracy
from evalstats.votes import pooled_pair_agreement, vote_agreement

SCIPY = {
    "pearson": lambda a, b: stats.pearsonr(a, b).statistic,
    "spearman": lambda a, b: stats.spearmanr(a, b).statistic,
    "kendall": lambda a, b: stats.kendalltau(a, b, variant="b").statistic,
}


def _simulated_scores(seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulated: 50 items with 2-7 subjects each, 1-5 judge scores (ties), noisy human
    means, one item constant for the judge, one for the humans, NaN scores here and there."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 8, 50)
    items = np.repeat(np.arange(50) * 7 + 100, sizes)  # ids not 0..n-1, not contiguous
    rng.shuffle(items)  # subjects of an item need not be adjacent
    x = rng.integers(1, 6, items.size).astype(float)
    y = np.round(x + rng.normal(0, 1.5, items.size), 2)
    first, second = np.unique(items)[:2]
    x[items == first] = 4.0
    y[items == second] = 2.5
    miss = rng.random(items.size) < 0.05
    x[miss] = np.nan
    return x, y, items


def _loop(x: np.ndarray, y: np.ndarray, items: np.ndarray, method: str) -> dict[int, float]:
    out = {}
    for it in np.unique(items):
        m = (items == it) & ~np.isnan(x) & ~np.isnan(y)
        a, b = x[m], y[m]
        if a.size < 3:
            out[int(it)] = np.nan
        elif np.ptp(a) == 0 or np.ptp(b) == 0:
            out[int(it)] = np.inf  # constant: skipped
        else:
            out[int(it)] = float(SCIPY[method](a, b))
    return out


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_per_item_correlations_are_scipys(method: str) -> None:
    x, y, items = _simulated_scores()
    per = per_item_correlations(x, y, items, method=method)  # type: ignore[arg-type]
    ref = _loop(x, y, items, method)
    assert [int(i) for i in per.items] == sorted(ref)
    for it, value, status in zip(per.items, per.values, per.status, strict=True):
        want = ref[int(it)]
        if np.isnan(want):
            assert status == 1 and np.isnan(value)
        elif np.isinf(want):
            assert status == 2 and np.isnan(value)
        else:
            assert status == 0 and value == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_sample_level_is_the_mean_over_items_and_counts_skipped(method: str) -> None:
    x, y, items = _simulated_scores()
    ref = _loop(x, y, items, method)
    usable = [v for v in ref.values() if np.isfinite(v)]
    est = sample_level_correlation(
        x, y, items, method=method, rng=np.random.default_rng(0),  # type: ignore[arg-type]
        options=BootstrapOptions(n_resamples=500),
    )
    assert est.value == pytest.approx(float(np.mean(usable)), abs=1e-12)
    assert est.n_items == len(usable)
    assert est.n_items_constant == sum(np.isinf(v) for v in ref.values()) >= 2
    assert est.n_items_too_few == sum(np.isnan(v) for v in ref.values()) >= 1
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low <= est.value <= est.ci_high


def test_sample_level_interval_is_the_item_bootstrap_of_the_loop() -> None:
    """The vectorised interval against the generic loop bootstrap over items (percentile),
    which recomputes every item's correlation with scipy in each resample."""
    x, y, items = _simulated_scores(seed=8)
    uniq = np.unique(items)
    rows_x = [x[items == it] for it in uniq]
    rows_y = [y[items == it] for it in uniq]

    def mean_of_scipy(idx: np.ndarray) -> float:
        vals = []
        for i in idx.astype(int):
            a, b = rows_x[i], rows_y[i]
            keep = ~np.isnan(a) & ~np.isnan(b)
            a, b = a[keep], b[keep]
            if a.size >= 3 and np.ptp(a) > 0 and np.ptp(b) > 0:
                vals.append(SCIPY["kendall"](a, b))
        return float(np.mean(vals)) if vals else float("nan")

    options = BootstrapOptions(n_resamples=1000, ci="percentile")
    loop = bootstrap_items(
        mean_of_scipy, np.arange(uniq.size, dtype=float), rng=np.random.default_rng(1),
        options=options,
    )
    fast = sample_level_correlation(
        x, y, items, method="kendall", rng=np.random.default_rng(2), options=options
    )
    assert fast.value == pytest.approx(loop.value, abs=1e-12)
    assert loop.ci_low is not None and loop.ci_high is not None
    assert fast.ci_low is not None and fast.ci_high is not None
    width = loop.ci_high - loop.ci_low
    assert abs(fast.ci_low - loop.ci_low) < 0.1 * width
    assert abs(fast.ci_high - loop.ci_high) < 0.1 * width


def test_no_usable_item_gives_nan_with_the_counts() -> None:
    x = np.array([1.0, 1.0, 1.0, 2.0, 3.0])
    y = np.array([1.0, 2.0, 3.0, 1.0, 2.0])
    est = sample_level_correlation(
        x, y, np.array([1, 1, 1, 2, 2]), method="spearman", rng=np.random.default_rng(0)
    )
    assert np.isnan(est.value) and est.ci_low is None
    assert (est.n_items, est.n_items_constant, est.n_items_too_few) == (0, 1, 1)


# --- per vote and pooled pairs: pairwise codes tie 0, A 1, B 2 --------------------------------

NAN = np.nan
# Hand example: 4 comparisons (humans x subjects), items 0, 0, 1, 2.
VOTES = np.array(
    [
        [1, 2, 0, 1],
        [1, 1, NAN, 2],
        [0, 2, 0, NAN],
    ]
)
JUDGE = np.array([1.0, 2.0, 1.0, NAN])
ITEMS = np.array([0, 0, 1, 2])


def test_vote_agreement_by_hand() -> None:
    rng = np.random.default_rng(0)
    # With ties: subject 0 votes 1, 1, 0 vs judge 1 (2 of 3); subject 1 votes 2, 1, 2 vs 2 (2 of
    # 3); subject 2 votes 0, 0 vs 1 (0 of 2); subject 3 has no verdict. 4 of 8.
    keep = vote_agreement(JUDGE, VOTES, ITEMS, rng=rng)
    assert keep.value == pytest.approx(4 / 8) and keep.n_items == 8
    # Without ties: subject 0 keeps votes 1, 1 (2 of 2), subject 1 all three (2 of 3), subject 2
    # only tie votes. 4 of 5.
    drop = vote_agreement(JUDGE, VOTES, ITEMS, ties="drop", tie_category=0.0, rng=rng)
    assert drop.value == pytest.approx(4 / 5) and drop.n_items == 5
    with pytest.raises(ValueError, match="tie_category"):
        vote_agreement(JUDGE, VOTES, ITEMS, ties="drop", rng=rng)


def test_pooled_pair_agreement_by_hand() -> None:
    rng = np.random.default_rng(0)
    # Pairs per subject: 3 (1 agreeing: 1-1), 3 (1: 2-2), 1 (1: 0-0), 1 (0: 1-2). 3 of 8.
    keep = pooled_pair_agreement(VOTES, ITEMS, rng=rng)
    assert keep.value == pytest.approx(3 / 8) and keep.n_items == 8
    # Without ties: 1 pair (1-1, agrees), 3 pairs (1 agrees), none, 1 pair (no). 2 of 5.
    drop = pooled_pair_agreement(VOTES, ITEMS, ties="drop", tie_category=0.0, rng=rng)
    assert drop.value == pytest.approx(2 / 5) and drop.n_items == 5


def _simulated_votes(seed: int = 11) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulated: 8 humans, 300 comparisons on 120 items, 1-4 votes each (sparse)."""
    rng = np.random.default_rng(seed)
    n = 300
    truth = rng.integers(0, 3, n)
    votes = np.full((8, n), np.nan)
    for s in range(n):
        for h in rng.choice(8, rng.integers(1, 5), replace=False):
            votes[h, s] = truth[s] if rng.random() < 0.7 else rng.integers(0, 3)
    judge = np.where(rng.random(n) < 0.75, truth, rng.integers(0, 3, n)).astype(float)
    judge[rng.random(n) < 0.05] = np.nan
    return judge, votes, rng.integers(0, 120, n)


@pytest.mark.parametrize("ties", ["keep", "drop"])
def test_vote_and_pair_agreement_against_loops(ties: str) -> None:
    judge, votes, items = _simulated_votes()
    agree = total = 0
    pair_agree = pair_total = 0
    for s in range(votes.shape[1]):
        vs = [v for v in votes[:, s] if not np.isnan(v) and not (ties == "drop" and v == 0)]
        if not np.isnan(judge[s]) and not (ties == "drop" and judge[s] == 0):
            agree += sum(v == judge[s] for v in vs)
            total += len(vs)
        for a, b in itertools.combinations(vs, 2):
            pair_agree += a == b
            pair_total += 1
    rng = np.random.default_rng(0)
    tie = 0.0 if ties == "drop" else None
    est = vote_agreement(judge, votes, items, ties=ties, tie_category=tie, rng=rng)  # type: ignore[arg-type]
    assert est.value == pytest.approx(agree / total) and est.n_items == total
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low < est.value < est.ci_high and "clustered by item" in est.method
    pooled = pooled_pair_agreement(votes, items, ties=ties, tie_category=tie, rng=rng)  # type: ignore[arg-type]
    assert pooled.value == pytest.approx(pair_agree / pair_total)
    assert pooled.n_items == pair_total


# --- both presentation orders ------------------------------------------------------------------

# Hand example: canonical verdicts in each order (NaN unparseable), the reference, the items.
AB = np.array([1, 2, NAN, 0, 1, 2])
BA = np.array([1, 1, 1, 0, NAN, 2])
REF = np.array([1, 2, 1, 0, 1, 1])
ORDER_ITEMS = np.array([0, 0, 1, 1, 2, 3])


@pytest.mark.parametrize(
    ("unparseable", "expected"),
    [
        # ab right on pairs 0, 1, 3, 4; ba right on 0, 2, 3; both right on 0, 3; the same label
        # in both orders on 0, 3, 5. A miss counts every pair (6).
        ("miss", {"ab": (4, 6), "ba": (3, 6), "both": (2, 6), "same": (3, 6)}),
        # Read as a tie: pair 2's ab and pair 4's ba become 0 (both wrong, both different).
        ("tie", {"ab": (4, 6), "ba": (3, 6), "both": (2, 6), "same": (3, 6)}),
        # Parseable only: ab on 5 pairs (4 right), ba on 5 (3 right), both on 4 (0, 1, 3, 5).
        ("drop", {"ab": (4, 5), "ba": (3, 5), "both": (2, 4), "same": (3, 4)}),
    ],
)
def test_order_accuracy_by_hand(unparseable: str, expected: dict[str, tuple[int, int]]) -> None:
    res = order_accuracy(
        AB, BA, REF, ORDER_ITEMS, unparseable=unparseable,  # type: ignore[arg-type]
        rng=np.random.default_rng(0),
    )
    ab, ba = expected["ab"][0] / expected["ab"][1], expected["ba"][0] / expected["ba"][1]
    assert (res.accuracy_ab.value, res.accuracy_ab.n_items) == (pytest.approx(ab),
                                                                expected["ab"][1])
    assert res.accuracy_ba.value == pytest.approx(ba)
    assert res.accuracy_mean.value == pytest.approx((ab + ba) / 2)
    both, same = expected["both"], expected["same"]
    assert res.accuracy_consistent.value == pytest.approx(both[0] / both[1])
    assert res.accuracy_consistent.n_items == both[1]
    assert res.positional_agreement.value == pytest.approx(same[0] / same[1])
    assert (res.n_unparseable_ab, res.n_unparseable_ba) == (1, 1)


def test_a_tie_reference_rewards_an_unparseable_read_as_tie() -> None:
    ref = REF.copy()
    ref[2] = 0.0  # pair 2 (ab unparseable) is a human tie
    miss = order_accuracy(AB, BA, ref, ORDER_ITEMS, rng=np.random.default_rng(0))
    tie = order_accuracy(AB, BA, ref, ORDER_ITEMS, unparseable="tie",
                         rng=np.random.default_rng(0))
    assert miss.accuracy_ab.value == pytest.approx(4 / 6)
    assert tie.accuracy_ab.value == pytest.approx(5 / 6)


def test_positional_agreement_is_one_minus_the_flip_rate() -> None:
    """Against evalstats.position_bias on complete simulated verdicts (no unparseable)."""
    rng = np.random.default_rng(5)
    ab = rng.integers(0, 3, 200).astype(float)
    ba = np.where(rng.random(200) < 0.7, ab, rng.integers(0, 3, 200)).astype(float)
    res = order_accuracy(ab, ba, rng.integers(0, 3, 200).astype(float), np.arange(200) // 2,
                         rng=np.random.default_rng(0))
    flip = position_bias(ab, ba)
    assert res.positional_agreement.value == pytest.approx(1 - flip.value)
