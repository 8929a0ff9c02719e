"""Real data (issue 24 §3): HANNA's ChatGPT ratings of Engagement under its four Eval-Prompts,
imported as four samples of one judge per story, give a "self-consistency" confidence.

Cross-checked against the CSV read here with the standard library: each story's imported
P(pass) is the share of the four prompt scores >= 3 (pass threshold 3 on the 1-5 scale), its
value the mean of the four; and the guaranteed-agreement threshold the product chooses on
those confidences (plan defaults) equals the published procedure written in
tests/evalstats/test_selective_published.py, run on confidences and human passes (mean of the
three human ratings >= 3) computed from the CSV alone."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalstats.selective import threshold_grid, trust_threshold
from imports.generic import ScaleSpec, ratings_import
from judges.models import Verdict
from studies.spec import DEFAULT_PLAN_POLICY
from tests.evalstats.test_selective_published import direct_threshold

pytestmark = pytest.mark.django_db
DATA = Path(os.environ.get("REVIEWHUB_DATA_DIR", "/nonexistent")) / "hanna"
CSV = DATA / "hanna_metric_scores_llm.csv"


@pytest.mark.skipif(not CSV.is_file(), reason="HANNA data not in REVIEWHUB_DATA_DIR")
def test_hanna_prompt_samples_give_the_share_confidence(study: Any) -> None:
    with CSV.open(encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    rows: list[tuple[int, dict[str, Any]]] = []
    expected: dict[str, tuple[float, float]] = {}
    human_pass: dict[str, bool] = {}
    line = 1
    for rec in table:
        src = rec["Model"]
        prompts = [json.loads(rec[f"ChatGPT EG {p}"]) for p in (1, 2, 3, 4)]
        humans = [json.loads(rec[f"Human {k} EG"]) for k in (1, 2, 3)]
        for i in range(len(prompts[0])):
            out = f"{src}/{i + 1:02d}"
            scores = [float(prompts[p][i]) for p in range(4)]
            expected[out] = (sum(s >= 3 for s in scores) / 4, sum(scores) / 4)
            human_pass[out] = sum(float(h[i]) for h in humans) / 3 >= 3
            for p, score in enumerate(scores):
                line += 1
                rows.append((line, {"item_id": f"prompt-{i + 1:02d}", "output_id": out,
                                    "candidate": src, "criterion": "engagement",
                                    "rater_id": "ChatGPT", "rater_kind": "judge",
                                    "judge_version": "eg", "value_type": "continuous",
                                    "value": repr(score), "sample": str(p)}))
    ratings_import(study=study, rows=rows, pass_thresholds={"engagement": 3},
                   scales={"engagement": ScaleSpec("ordinal", ("1", "2", "3", "4", "5"))})
    got = {v.output.metadata["import_output_id"]: v  # type: ignore[union-attr]
           for v in Verdict.objects.select_related("output")}
    assert len(got) == len(expected) == 1056
    for out, (share, mean) in expected.items():
        v = got[out]
        assert v.n_samples == 4
        assert v.probability == pytest.approx(share, abs=1e-12), out
        assert v.value_num == pytest.approx(mean, abs=1e-9), out
    # The policy on those confidences: the judge's decision is its mean score >= 3, its
    # confidence the share of prompts on that side.
    outs = sorted(expected)
    p = np.array([got[o].probability for o in outs])
    dec = np.array([got[o].value_num >= 3 for o in outs])
    conf = np.where(dec, p, 1 - p)
    agree = (dec == np.array([human_pass[o] for o in outs])).astype(int)
    m, step = int(DEFAULT_PLAN_POLICY["min_count"]), float(DEFAULT_PLAN_POLICY["grid_step"])
    product = trust_threshold(conf, agree, alpha=0.15, delta=0.1, min_count=m,
                              thresholds=threshold_grid(step))
    # Independently from the CSV (not from the database).
    csv_dec = [expected[o][1] >= 3 for o in outs]
    csv_conf = [expected[o][0] if d else 1 - expected[o][0] for o, d in zip(outs, csv_dec,
                                                                            strict=True)]
    csv_ok = [int(d == human_pass[o]) for o, d in zip(outs, csv_dec, strict=True)]
    assert product.threshold == direct_threshold(csv_conf, csv_ok, alpha=0.15, delta=0.1,
                                                 step=step, min_count=m)
