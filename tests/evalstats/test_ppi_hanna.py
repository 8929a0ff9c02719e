"""PPI on real data: HANNA stories with human and LLM ratings ($REVIEWHUB_DATA_DIR/hanna).

HANNA (Chhun et al., COLING 2022; LLM ratings TACL 2024) has 96 stories from each of 11
sources (10 generation systems and the human-written stories), each rated 1-5 on six criteria
by three humans and by five LLMs with four prompts. Choices:

* human score of a story: the mean of its six criteria columns (each the mean of the three
  human ratings);
* judge score: the mean of all twenty ``<LLM> AVG <prompt>`` columns (every LLM and prompt,
  each already averaged over the six criteria), so no judge is picked by its results;
* per source, 1,000 random subsamples label 10 % of its stories (10 of 96) and leave the
  other 86 judge-only; the target is the source's full-data mean human score.

With 10 labels the normal interval of ``ppi_py`` undercovers (measured with this test's seed:
0.885-0.910 for PPI and 0.899-0.923 for human-only across the sources), so the Student t
interval (``interval="t"``, Welch-Satterthwaite degrees of freedom) is what is checked here.
Measured: PPI coverage 0.939-0.955 per source (human-only t: 0.946-0.967); the PPI interval
is 0.909 of the human-only width on average (9 % narrower; 0.85-0.95 per source). Per story
the LLM ensemble agrees with humans only moderately (Pearson 0.14-0.50 within a source), so
the gain is modest, and power tuning keeps a weak judge from doing harm.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalstats import ppi

DATA_DIR = os.environ.get("REVIEWHUB_DATA_DIR")
pytestmark = [
    pytest.mark.skipif(not DATA_DIR, reason="REVIEWHUB_DATA_DIR is not set (public HANNA data)"),
    pytest.mark.slow,
]

CRITERIA = ("Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity")
LLMS = ("Beluga-13B", "Llama-13B", "Mistral-7B", "ChatGPT", "OrcaPlatypus")
SUBSAMPLES = 1000
FRACTION = 0.10


def _load() -> tuple[list[str], np.ndarray, np.ndarray]:
    path = Path(str(DATA_DIR)) / "hanna" / "hanna_metric_scores_llm.csv"
    table = pd.read_csv(path)

    def column(name: str) -> np.ndarray:
        return np.array([json.loads(cell) for cell in table[name]], dtype=float)

    human = np.mean([column(c) for c in CRITERIA], axis=0)  # sources x stories
    judge = np.mean([column(f"{m} AVG {p}") for m in LLMS for p in (1, 2, 3, 4)], axis=0)
    return list(table["Model"]), human, judge


def test_hanna_ppi_covers_each_sources_full_data_mean_with_10_percent_labelled() -> None:
    sources, human, judge = _load()
    assert human.shape == judge.shape == (11, 96)
    assert np.isfinite(human).all() and np.isfinite(judge).all()
    rng = np.random.default_rng(14)
    n_stories = human.shape[1]
    k = round(FRACTION * n_stories)
    coverage, ratios = {}, {}
    for i, source in enumerate(sources):
        y, f = human[i], judge[i]
        truth = float(y.mean())
        hits, widths = 0, []
        for _ in range(SUBSAMPLES):
            perm = rng.permutation(n_stories)
            lab, unl = perm[:k], perm[k:]
            est = ppi.ppi_mean(y[lab], f[lab], f[unl], interval="t")
            only = ppi.classical_mean(y[lab], interval="t")
            assert est.ci_low is not None and est.ci_high is not None
            assert only.ci_low is not None and only.ci_high is not None
            hits += est.ci_low <= truth <= est.ci_high
            widths.append((est.ci_high - est.ci_low) / (only.ci_high - only.ci_low))
        coverage[source] = hits / SUBSAMPLES
        ratios[source] = float(np.mean(widths))
    low = {s: c for s, c in coverage.items() if c < 0.93}
    assert not low, low
    assert float(np.mean(list(ratios.values()))) < 0.95, ratios
    assert all(r < 1.0 for r in ratios.values()), ratios
