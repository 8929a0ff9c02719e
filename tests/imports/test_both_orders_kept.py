"""Issue 25 §2: in a pair rated in both orders where one order's answer could not be parsed,
the import keeps the order that did parse as the verdict (docs/import-ratings.md,
"Unparseable verdicts"), so cells, calibration, selection and PPI count it. With every
comparison labelled by a human, the PPI estimate then equals the human estimate exactly (the
judge terms cancel: ppi = mean(f over all) + mean(y - f over the labelled) = mean(y)), and the
human estimate is the share of wins counted by hand below (a tie half a win)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from judges.models import Verdict
from reports.selection.results import SelectionResult
from reports.services import report_compute, report_snapshot_create
from studies.models import Study

from .cli import run_import

pytestmark = pytest.mark.django_db

# Twelve comparisons of x (output_a) and y; the human's label per pair, and the judge's answer
# in each order ("" = unparseable). Pairs 1-4 have one unparseable order: their human labels
# (B, B, B, tie) differ from the rest's, so leaving them out moves the estimate.
HUMAN = ["B", "B", "B", "tie", "A", "A", "A", "B", "A", "tie", "A", "A"]
JUDGE_AB = ["B", "", "A", "", "A", "A", "B", "B", "A", "A", "A", "tie"]
JUDGE_BA = ["", "B", "", "tie", "A", "B", "B", "B", "A", "A", "tie", "A"]


def _file(path: Path) -> Path:
    rows = []
    for i in range(12):
        base = {"item_id": f"p{i + 1}", "output_a": f"p{i + 1}-x", "output_b": f"p{i + 1}-y",
                "candidate_a": "x", "candidate_b": "y", "criterion": "pref"}
        rows.append({**base, "order": "ab", "rater_id": "h1", "rater_kind": "human",
                     "judge_version": "", "value": HUMAN[i]})
        for order, value in (("ab", JUDGE_AB[i]), ("ba", JUDGE_BA[i])):
            rows.append({**base, "order": order, "rater_id": "j", "rater_kind": "judge",
                         "judge_version": "v1", "value": value})
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_parsed_order_is_the_verdict(lead: Any, tmp_path: Path) -> None:
    run_import(_file(tmp_path / "o.csv"), "--study", "both", "--owner", "lead",
               "--pairwise-values", "outputs")
    verdicts = {v.comparison.item.external_id: v for v in Verdict.objects.filter(
        criterion__key="pref").select_related("comparison__item")}
    assert len(verdicts) == 12 and all(v.is_scored for v in verdicts.values())
    # The order that parsed, in canonical terms (a "ba" answer is already stated in terms of
    # the outputs with --pairwise-values outputs).
    assert {k: verdicts[k].value for k in ("p1", "p2", "p3", "p4")} == {
        "p1": "B", "p2": "B", "p3": "A", "p4": "tie"}
    assert verdicts["p2"].value_num == 0.0 and verdicts["p4"].value_num == 0.5
    assert verdicts["p1"].details["orders"] == {"ab": "B", "ba": None}
    assert verdicts["p1"].details["unparseable"] is True
    assert "position_inconsistent" not in verdicts["p1"].details
    # Both orders parsed: the label when they agree, else a tie (unchanged rule).
    assert verdicts["p6"].value == "tie" and verdicts["p6"].details["position_inconsistent"]
    assert verdicts["p5"].value == "A"


def test_with_every_comparison_labelled_ppi_equals_the_human_estimate(
        lead: Any, tmp_path: Path) -> None:
    run_import(_file(tmp_path / "o.csv"), "--study", "both", "--owner", "lead",
               "--pairwise-values", "outputs")
    study = Study.objects.get(slug="both")
    snap = report_snapshot_create(study=study, kind="selection",
                                  params={"n_resamples": 200, "seed": 1}, created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done" and done.result is not None, done.error
    pw = SelectionResult.from_json(done.result).pairwise
    assert pw is not None
    [mix] = [w for w in pw.win_rates if w.stratum == "mix"]
    assert mix.n_comparisons == 12 and mix.n_labelled == 12
    # The win rate of x over y counted by hand: 6 A, 2 ties, 4 B -> (6 + 1) / 12.
    wins = sum({"A": 1.0, "tie": 0.5, "B": 0.0}[h] for h in HUMAN) / 12
    assert wins == pytest.approx(7 / 12)
    assert mix.human is not None and mix.ppi is not None
    assert mix.human.value == pytest.approx(wins, abs=1e-12)
    assert mix.ppi.value == pytest.approx(mix.human.value, abs=1e-12)
