"""PandaLM (Wang et al., ICLR 2024) figures recomputed from the raw test set.

Published in the PandaLM README / data/compute_metrics.py; data in $REVIEWHUB_DATA_DIR/pandalm.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

import evalstats as es

DATA_DIR = os.environ.get("REVIEWHUB_DATA_DIR")
pytestmark = pytest.mark.skipif(
    not DATA_DIR, reason="REVIEWHUB_DATA_DIR is not set (public PandaLM data)"
)


def _judge_label(raw: object) -> int:
    # Published convention: "1"/"2" are wins; "Tie" and unparseable answers count as 0 (tie).
    s = str(raw).strip()
    return int(s) if s in ("1", "2") else 0


@pytest.fixture(scope="module")
def pandalm() -> dict[str, np.ndarray]:
    base = Path(DATA_DIR or "") / "pandalm"
    items = json.loads((base / "testset-v1.json").read_text())
    gpt = {
        r["idx"]: r["gpt_result"]
        for r in json.loads((base / "gpt-3.5-turbo-testset-v1.json").read_text())
    }
    pan = {
        r["idx"]: r["pandalm_result"]
        for r in json.loads((base / "pandalm-7b-testset-v1.json").read_text())
    }
    humans = np.array([[r[f"annotator{k}"] for r in items] for k in (1, 2, 3)], dtype=float)
    return {
        "humans": humans,
        "gpt": np.array([_judge_label(gpt[r["idx"]]) for r in items]),
        "pandalm": np.array([_judge_label(pan[r["idx"]]) for r in items]),
        "app": np.array([r["motivation_app"] for r in items], dtype=object),
    }


def test_annotator_kappas(pandalm: dict[str, np.ndarray]) -> None:
    h = pandalm["humans"]
    got = [es.cohen_kappa(h[i], h[j]).value for i, j in ((0, 1), (0, 2), (1, 2))]
    assert [round(v, 4) for v in got] == [0.8520, 0.8789, 0.8617]


def test_gold_counts_and_judges(pandalm: dict[str, np.ndarray]) -> None:
    gold = es.majority_vote(pandalm["humans"], tie_break="first").labels
    assert [int(np.sum(gold == k)) for k in (0, 1, 2)] == [105, 422, 472]
    for judge, expected in (
        ("gpt", (0.7107, 0.5879, 0.5736, 0.5755)),
        ("pandalm", (0.6677, 0.5738, 0.5750, 0.5743)),
    ):
        rep = es.classification_report(gold, pandalm[judge], labels=[0, 1, 2])
        got = (rep.accuracy, rep.macro_precision, rep.macro_recall, rep.macro_f1)
        assert tuple(round(v, 4) for v in got) == expected, judge
        assert rep.n_items == 999


def test_fleiss_equals_alpha_nominal(pandalm: dict[str, np.ndarray]) -> None:
    h = pandalm["humans"]
    assert round(es.fleiss_kappa(h).value, 4) == 0.8642
    assert round(es.krippendorff_alpha(h, level="nominal").value, 4) == 0.8642
    assert round(es.krippendorff_alpha_fast(h, level="nominal").value, 4) == 0.8642
    assert round(es.percent_agreement_multi(h, mode="all").value, 3) == 0.880


def test_stratum_accuracy_range(pandalm: dict[str, np.ndarray]) -> None:
    gold = es.majority_vote(pandalm["humans"]).labels
    acc = {
        app: es.accuracy(gold[pandalm["app"] == app], pandalm["gpt"][pandalm["app"] == app])
        for app in set(pandalm["app"])
    }
    # The README's range is over strata with at least 30 items (smaller ones reach 1.0 by chance).
    acc = {app: e for app, e in acc.items() if e.n_items >= 30}
    lo = min(acc.values(), key=lambda e: e.value)
    hi = max(acc.values(), key=lambda e: e.value)
    assert (round(lo.value, 3), lo.n_items, round(hi.value, 3), hi.n_items) == (
        0.371,
        35,
        0.967,
        30,
    )


def _alt_test_reference(
    llm: np.ndarray, humans: np.ndarray, eps: float, q: float
) -> tuple[list[float], float]:
    """Plain loop transcription of the authors' procedure (nitaytech/AltTest README + paper):
    accuracy alignment, d = W^h - W^f, ttest_1samp(d, eps, alternative="less"), BY at q."""
    pvals, rho = [], []
    for j in range(humans.shape[0]):
        wf, wh = [], []
        for i in range(humans.shape[1]):
            rest = [humans[k, i] for k in range(humans.shape[0]) if k != j]
            s_f = np.mean([llm[i] == r for r in rest])
            s_h = np.mean([humans[j, i] == r for r in rest])
            wf.append(int(s_f >= s_h))
            wh.append(int(s_h >= s_f))
        d = np.array(wh) - np.array(wf)
        pvals.append(float(stats.ttest_1samp(d, eps, alternative="less").pvalue))
        rho.append(float(np.mean(wf)))
    return pvals, float(np.mean(rho))


@pytest.mark.parametrize("eps", [0.1, 0.15, 0.2])
def test_alt_test_matches_reference_procedure(pandalm: dict[str, np.ndarray], eps: float) -> None:
    h = pandalm["humans"]
    for judge in ("gpt", "pandalm"):
        res = es.alt_test(pandalm[judge], h, epsilon=eps)
        pvals, rho = _alt_test_reference(pandalm[judge], h, eps, 0.05)
        np.testing.assert_allclose([a.p_value for a in res.annotators], pvals, rtol=1e-10)
        rejected, _, _, _ = multipletests(pvals, alpha=0.05, method="fdr_by")
        assert [a.rejected for a in res.annotators] == list(rejected)
        assert res.advantage_probability == pytest.approx(rho)
        assert res.value == pytest.approx(np.mean(rejected))
        assert res.passed == (np.mean(rejected) >= 0.5)
        assert all(a.n_items == 999 for a in res.annotators)


def test_leave_one_out_runs(pandalm: dict[str, np.ndarray]) -> None:
    res = es.leave_one_annotator_out(pandalm["gpt"], pandalm["humans"], metric="accuracy")
    assert len(res.annotators) == 3
    # Humans agree with each other far better (kappa ~0.86) than gpt-3.5 does with them (acc 0.71).
    assert all(a.human_score > a.judge_score for a in res.annotators)
    assert res.value == 0.0
