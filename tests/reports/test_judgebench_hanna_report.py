"""JUDGE-BENCH and HANNA through the importers and the agreement report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from statistics import median
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from reports.agreement import TOO_FEW
from snapshots.models import ReportSnapshot

from .conftest import computed_report, module_study, shared_data_dir

pytestmark = pytest.mark.django_db

# results_regular/*.json of JUDGE-BENCH (Bavaresco et al., ACL 2025): human Krippendorff alpha.
PUBLISHED_ALPHA = {
    ("newsroom", "informativeness"): 0.2849,
    ("newsroom", "relevance"): 0.1151,
    ("newsroom", "fluency"): -0.0158,
    ("newsroom", "coherence"): 0.0650,
    ("dices-350-crowdsourced", "safety"): 0.1609,
    ("dices-990", "safety"): 0.1432,
    ("recipes", "grammar"): 0.4151,
    ("recipes", "fluency"): 0.4324,
    ("recipes", "verbosity"): 0.3991,
    ("recipes", "structure"): 0.3986,
    ("recipes", "success"): 0.3627,
    ("recipes", "overall"): 0.4351,
}


@pytest.fixture(scope="module")
def judge_bench(
    request: pytest.FixtureRequest, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[dict[str, ReportSnapshot]]:
    studies = {}
    gens = []
    for name in ("newsroom", "dices-350-crowdsourced", "dices-990", "recipes"):
        gen = module_study(request, django_db_blocker, f"jb-{name}", [f"judge-bench:{name}"])
        studies[name] = next(gen)
        gens.append(gen)
    with django_db_blocker.unblock():
        reports = {name: computed_report(s, {"n_resamples": 200}) for name, s in studies.items()}
    yield reports
    for gen in gens:
        next(gen, None)


def test_all_twelve_published_human_alphas(judge_bench: dict[str, ReportSnapshot]) -> None:
    got = {}
    for name, report in judge_bench.items():
        assert report.status == ReportSnapshot.Status.DONE, report.error
        keys = {c["id"]: c["key"] for c in report.result["criteria"]}
        for row in report.result["ceiling"]:
            if row["label"] == "overall":
                got[(name, keys[row["criterion"]])] = round(row["alpha"]["value"], 4)
                level = "nominal" if name.startswith("dices") else "ordinal"
                assert row["level"] == level
                assert row["alpha"]["ci_low"] <= row["alpha"]["value"] <= row["alpha"]["ci_high"]
    assert got == PUBLISHED_ALPHA


def test_rating_positions_are_raters(judge_bench: dict[str, ReportSnapshot]) -> None:
    rows = {
        r["criterion"]: r
        for r in judge_bench["dices-990"].result["ceiling"]
        if r["label"] == "overall"
    }
    (row,) = rows.values()
    assert row["n_humans"] == 76 and row["n_subjects"] == 990
    assert row["n_ratings"] == 72103


HANNA_SYSTEMS = [
    "BertGeneration",
    "CTRL",
    "GPT",
    "GPT-2 (tag)",
    "GPT-2",
    "RoBERTa",
    "XLNet",
    "Fusion",
    "HINT",
    "TD-VAE",
]


@pytest.fixture(scope="module")
def hanna(
    request: pytest.FixtureRequest, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[ReportSnapshot]:
    for study in module_study(request, django_db_blocker, "hanna-test", ["hanna"]):
        with django_db_blocker.unblock():
            report = computed_report(
                study,
                {"n_resamples": 200, "system_level": True, "candidates": HANNA_SYSTEMS, "seed": 3},
            )
        yield report


def _judges(report: ReportSnapshot) -> dict[int, dict[str, Any]]:
    return {j["id"]: j for j in report.result["judges"]}


def test_bleu_vs_human_relevance(hanna: ReportSnapshot) -> None:
    assert hanna.status == ReportSnapshot.Status.DONE, hanna.error
    judges = _judges(hanna)
    crits = {c["key"]: c["id"] for c in hanna.result["criteria"]}
    bleu = next(
        c
        for c in hanna.result["cells"]
        if judges[c["judge_version"]]["judge"] == "BLEU" and c["label"] == "overall"
    )
    assert bleu["criterion"] == crits["relevance"]
    assert (bleu["n_subjects"], bleu["n_items"]) == (960, 96)
    m = bleu["metrics"]
    assert round(m["pearson"]["value"], 7) == 0.1124278
    assert round(m["spearman"]["value"], 7) == 0.1040944
    assert round(m["kendall"]["value"], 7) == 0.0737787
    # A continuous metric has no kappa; the interval is still clustered by story prompt.
    assert "qwk" not in m and "clustered by item" in m["spearman"]["method"]


def test_system_level_high_while_per_story_low(hanna: ReportSnapshot) -> None:
    judges = _judges(hanna)
    llm = [s for s in hanna.result["system"] if judges[s["judge_version"]]["judge"] != "BLEU"]
    assert len(llm) == 5 * 4 * 6
    system = [s["kendall"]["value"] for s in llm]
    per_story = [s["per_subject_kendall"]["value"] for s in llm]
    assert all(s["n_candidates"] == 10 for s in llm)
    assert 0.85 <= max(system) <= 0.87
    assert max(per_story) <= 0.33 and min(per_story) >= -0.05
    assert median(system) > median(per_story) + 0.2
    best = max(llm, key=lambda s: s["kendall"]["value"])
    assert best["kendall"]["ci_low"] <= best["kendall"]["value"] <= best["kendall"]["ci_high"]


def test_hanna_verdicts_use_the_alt_test(hanna: ReportSnapshot) -> None:
    overall = [c for c in hanna.result["cells"] if c["label"] == "overall"]
    assert overall and all(c["verdict_basis"] == "alt_test" for c in overall)
    assert all(c["verdict"] != TOO_FEW for c in overall)
    ceilings = [c["ceiling"]["alpha"]["value"] for c in overall]
    # Human-human agreement on HANNA is very low (the data README: about -0.05 to 0.27).
    assert max(ceilings) < 0.35 and np.isfinite(ceilings).all()


# The HANNA authors' rankings/system.csv (dig-team/hanna-benchmark-asg, commit 248dc8e1):
# BLEU against the human Relevance mean over the 10 systems' means.
PUBLISHED_BLEU_SYSTEM_RELEVANCE = {
    "pearson": 0.7988772,
    "spearman": 0.7212121,
    "kendall": 0.5555556,
}
SCIPY = {
    "pearson": lambda a, b: stats.pearsonr(a, b).statistic,
    "spearman": lambda a, b: stats.spearmanr(a, b).statistic,
    "kendall": lambda a, b: stats.kendalltau(a, b, variant="b").statistic,
}


def _bleu_relevance_levels(hanna: ReportSnapshot) -> dict[str, Any]:
    judges = _judges(hanna)
    crits = {c["key"]: c["id"] for c in hanna.result["criteria"]}
    return next(
        r
        for r in hanna.result["correlation_levels"]
        if judges[r["judge_version"]]["judge"] == "BLEU"
        and r["criterion"] == crits["relevance"]
        and r["label"] == "overall"
    )


def test_bleu_relevance_at_three_levels(hanna: ReportSnapshot) -> None:
    """Sample level against scipy per story prompt on the raw file (not published by the
    authors); dataset level against the README's published figures; system level against the
    authors' rankings/system.csv."""
    frame = pd.read_csv(shared_data_dir() / "hanna" / "hanna_metric_scores_llm.csv")
    frame = frame.set_index("Model").loc[HANNA_SYSTEMS]
    bleu = np.array([json.loads(v) for v in frame["BLEU \u039e\u00a7"]])  # systems x prompts
    human = np.array([json.loads(v) for v in frame["Relevance"]])
    row = _bleu_relevance_levels(hanna)
    assert row["sample"]["n_items"] + row["sample"]["n_items_constant"] == bleu.shape[1] == 96
    for method, fn in SCIPY.items():
        per_prompt = [
            fn(bleu[:, i], human[:, i])
            for i in range(bleu.shape[1])
            if np.ptp(bleu[:, i]) > 0 and np.ptp(human[:, i]) > 0
        ]
        got = row["sample"][method]
        assert got["value"] == pytest.approx(np.mean(per_prompt), abs=1e-9)
        assert got["ci_low"] <= got["value"] <= got["ci_high"]
        assert row["sample"]["n_items"] == len(per_prompt)
        system = row["system"][method]
        assert round(system["value"], 7) == PUBLISHED_BLEU_SYSTEM_RELEVANCE[method]
    assert round(row["dataset"]["pearson"]["value"], 7) == 0.1124278
    assert round(row["dataset"]["spearman"]["value"], 7) == 0.1040944
    assert round(row["dataset"]["kendall"]["value"], 7) == 0.0737787
    assert row["system"]["n_candidates"] == 10 and row["dataset"]["n_subjects"] == 960


def test_llm_judges_have_all_three_levels(hanna: ReportSnapshot) -> None:
    judges = _judges(hanna)
    rows = [
        r for r in hanna.result["correlation_levels"]
        if judges[r["judge_version"]]["judge"] != "BLEU" and r["label"] == "overall"
    ]
    assert len(rows) == 5 * 4 * 6
    # Per story prompt, ten stories of 1-5 ratings: some prompts get one rating throughout.
    assert all(r["sample"]["n_items"] + r["sample"]["n_items_constant"]
               + r["sample"]["n_items_too_few"] == 96 for r in rows)
    system = [r["system"]["kendall"]["value"] for r in rows]
    sample = [r["sample"]["kendall"]["value"] for r in rows]
    assert median(system) > median(sample)
