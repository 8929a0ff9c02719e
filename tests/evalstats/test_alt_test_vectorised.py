"""evalstats.alt_test (alignments for all annotators at once, one array of t-tests) against a
plain per-annotator, per-item transcription of the procedure that calls scipy.stats.ttest_1samp
once per annotator and statsmodels' Benjamini-Yekutieli correction.

Values are integers or halves, so every alignment is exact in both computations and the win
indicators W^f, W^h (comparisons of alignments) cannot differ by rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

import evalstats as es


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def _reference(
    judge: np.ndarray,
    data: np.ndarray,
    *,
    epsilon: float,
    alignment: str,
    q: float,
    min_items: int,
) -> dict[str, Any]:
    def align(x: Any, others: list[Any]) -> float:
        if alignment == "accuracy":
            return float(np.mean([x == o for o in others]))
        diffs = [float(o) - float(x) for o in others]
        if alignment == "neg_abs":
            return -float(np.mean(np.abs(diffs)))
        return -float(np.sqrt(np.mean(np.square(diffs))))

    tested, skipped = [], []
    for a in range(data.shape[0]):
        w_f, w_h = [], []
        for i in range(data.shape[1]):
            others = [
                data[k, i] for k in range(data.shape[0]) if k != a and not _missing(data[k, i])
            ]
            if _missing(data[a, i]) or _missing(judge[i]) or not others:
                continue
            s_f, s_h = align(judge[i], others), align(data[a, i], others)
            w_f.append(float(s_f >= s_h))
            w_h.append(float(s_h >= s_f))
        if len(w_f) < min_items:
            skipped.append(a)
            continue
        d = np.array(w_f) - np.array(w_h)
        if d.std() == 0:  # documented convention for a sample without variance
            gap = d.mean() + epsilon
            t = float(np.sign(gap) * np.inf) if gap != 0 else 0.0
            p = 0.0 if gap > 0 else 1.0
        else:
            res = stats.ttest_1samp(d, -epsilon, alternative="greater")
            t, p = float(res.statistic), float(res.pvalue)
        tested.append({"a": a, "n": len(d), "rf": np.mean(w_f), "rh": np.mean(w_h), "t": t, "p": p})
    out: dict[str, Any] = {"tested": tested, "skipped": skipped}
    if tested:
        rejected, p_adj, _, _ = multipletests([r["p"] for r in tested], alpha=q, method="fdr_by")
        out["rejected"], out["p_adj"] = list(rejected), list(p_adj)
    return out


def _case(seed: int, kind: str) -> tuple[np.ndarray, np.ndarray, str]:
    rng = np.random.default_rng(seed)
    r, n = int(rng.integers(2, 9)), int(rng.integers(20, 160))
    if kind == "labels":
        labels = np.array(["fail", "pass", "unsure"], dtype=object)
        data = labels[rng.integers(0, 3, (r, n))]
        judge = labels[rng.integers(0, 3, n)]
        data[rng.random((r, n)) < rng.uniform(0, 0.6)] = None
        judge[rng.random(n) < 0.1] = None
        return judge, data, "accuracy"
    data = rng.integers(1, 6, (r, n)).astype(np.float64)
    judge = rng.integers(2, 11, n) / 2.0  # halves: 1.0, 1.5, ..., 5.0
    if kind == "codes":
        judge = np.round(judge)
    data[rng.random((r, n)) < rng.uniform(0, 0.6)] = np.nan
    judge[rng.random(n) < 0.1] = np.nan
    alignment = {"codes": "accuracy", "scores": "neg_abs", "rmse": "neg_rmse"}[kind]
    return judge, data, alignment


@pytest.mark.parametrize("kind", ["labels", "codes", "scores", "rmse"])
@pytest.mark.parametrize("seed", range(12))
def test_alt_test_matches_per_annotator_scipy_reference(kind: str, seed: int) -> None:
    judge, data, alignment = _case(seed, kind)
    eps = [0.1, 0.15, 0.2, 0.0][seed % 4]
    min_items = [5, 10, 30][seed % 3]
    res = es.alt_test(judge, data, epsilon=eps, alignment=alignment, min_items=min_items)  # type: ignore[arg-type]
    ref = _reference(judge, data, epsilon=eps, alignment=alignment, q=0.05, min_items=min_items)
    assert list(res.skipped_annotators) == ref["skipped"]
    assert [a.annotator for a in res.annotators] == [r["a"] for r in ref["tested"]]
    if not ref["tested"]:
        assert np.isnan(res.value) and not res.passed
        return
    assert [a.n_items for a in res.annotators] == [r["n"] for r in ref["tested"]]
    assert [a.rho_judge for a in res.annotators] == [r["rf"] for r in ref["tested"]]
    assert [a.rho_human for a in res.annotators] == [r["rh"] for r in ref["tested"]]
    np.testing.assert_allclose(
        [a.t for a in res.annotators], [r["t"] for r in ref["tested"]], rtol=1e-12
    )
    np.testing.assert_allclose(
        [a.p_value for a in res.annotators], [r["p"] for r in ref["tested"]], rtol=1e-12
    )
    np.testing.assert_allclose([a.p_adjusted for a in res.annotators], ref["p_adj"], rtol=1e-12)
    assert [a.rejected for a in res.annotators] == ref["rejected"]
    assert res.value == pytest.approx(np.mean(ref["rejected"]))
    assert res.passed == (np.mean(ref["rejected"]) >= 0.5)


def test_constant_differences_follow_the_documented_convention() -> None:
    # Annotator 0 always agrees with the others and the judge never does: d_i = -1 for
    # annotator 0 (H0 kept, p = 1); for annotators 1 and 2 the judge ties or wins everywhere.
    humans = np.array([[1.0] * 40, [1.0] * 40, [1.0] * 40])
    judge = np.array([0.0] * 40)
    res = es.alt_test(judge, humans, epsilon=0.2, min_items=30)
    assert [a.p_value for a in res.annotators] == [1.0, 1.0, 1.0]
    assert [a.t for a in res.annotators] == [-np.inf, -np.inf, -np.inf]
    agree = es.alt_test(np.array([1.0] * 40), humans, epsilon=0.2, min_items=30)
    # Judge and annotator tie on every item: d_i = 0 > -epsilon, so H0 is rejected (p = 0).
    assert [a.p_value for a in agree.annotators] == [0.0, 0.0, 0.0]
    assert agree.passed and agree.value == 1.0


def test_many_annotators_are_processed_in_blocks() -> None:
    # 120 raters x 300 items is more than one (block x raters x items) array of the
    # alignment step, so several blocks are stitched together.
    rng = np.random.default_rng(5)
    data = rng.integers(0, 3, (120, 300)).astype(np.float64)
    data[rng.random(data.shape) < 0.9] = np.nan
    judge = rng.integers(0, 3, 300).astype(np.float64)
    res = es.alt_test(judge, data, epsilon=0.1, min_items=5)
    ref = _reference(judge, data, epsilon=0.1, alignment="accuracy", q=0.05, min_items=5)
    assert [a.annotator for a in res.annotators] == [r["a"] for r in ref["tested"]]
    np.testing.assert_allclose(
        [a.p_value for a in res.annotators], [r["p"] for r in ref["tested"]], rtol=1e-12
    )
    assert [a.rejected for a in res.annotators] == ref["rejected"]
