"""What to do next: the sentences of the calibration page, from hand-built snapshot results.

"Label N more" is checked against the shrinkage it inverts: an empirical-Bayes stratum weight
w(n) = n / (n + k) with k known, so the labels it asks for must bring w to one half.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from calibration.advice import calibration_advice, labels_needed, stratum_text


def _cell(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "judge_version": 1, "judge": "gpt-judge v1", "criterion": "correct", "stratum": "",
        "n_labels": 200, "too_few_labels": False, "method": "isotonic", "own_weight": 1.0,
        "borrowed": 0.0, "pooled_only": False, "cv_log_loss": {},
        "diagnostics": {"before": None, "after": None}, "curve": {"x": [], "y": []},
        "false_pass_cost": None, "false_fail_cost": 1.0, "thresholds": None,
        "policy_costs": None, "trust": None,
    }
    return {**base, **kw}


def _result(cells: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"version": 1, "kind": "calibration", "params": {"min_labels": 10},
            "costs": {"unit": "EUR", "is_default": False}, "cells": cells, **kw}


@pytest.mark.parametrize("k", [4.0, 48.0, 150.0])
@pytest.mark.parametrize("n", [3, 12, 40])
def test_labels_needed_reaches_half_own_weight(n: int, k: float) -> None:
    w = n / (n + k)
    more = labels_needed(n=n, own_weight=w, min_labels=1)
    if w >= 0.5:
        assert more == 0
        return
    after = (n + more) / (n + more + k)
    before = (n + more - 1) / (n + more - 1 + k)
    assert after >= 0.5 - 1e-12 and before < 0.5  # the smallest number that gets there


def test_the_issue_example() -> None:
    # 12 labels borrowing 80 %: k = 12 * 0.8 / 0.2 = 48, so 48 labels give half weight: 36 more.
    cell = _cell(stratum="language=de|length=long", n_labels=12, own_weight=0.2, borrowed=0.8)
    text = calibration_advice(_result([cell]))[0]
    assert text == ("gpt-judge v1 · correct · language=de, length=long: 12 human labels, curve "
                    "borrowed 80 % from the pool; label 36 more.")


def test_minimum_labels_dominate_and_too_few_gets_no_curve() -> None:
    assert labels_needed(n=3, own_weight=0.9, min_labels=10) == 7
    assert labels_needed(n=0, own_weight=None, min_labels=10) == 10
    too_few = _cell(stratum="language=fr", n_labels=4, too_few_labels=True, method=None,
                    own_weight=None, borrowed=None)
    pooled = _cell(stratum="language=it", n_labels=0, pooled_only=True, own_weight=0.0,
                   borrowed=1.0, method="platt")
    out = calibration_advice(_result([too_few, pooled], params={"min_labels": 25}))
    assert "4 human labels, fewer than the 25 a curve needs" in out[0]
    assert out[0].endswith("label 21 more.")
    assert "language=it: 0 human labels, so the pooled curve is used as is; label 25 more" in out[1]


def test_no_between_strata_variance_asks_for_nothing() -> None:
    cells = [_cell(stratum=f"language={x}", n_labels=30, own_weight=0.0, borrowed=1.0)
             for x in ("de", "en")]
    out = calibration_advice(_result(cells))
    assert all("show no difference from the pool" in line for line in out)
    assert not any("label" in line.split(";")[-1] and "more" in line for line in out)


def test_costs_trust_cascade_and_defaults() -> None:
    money = _cell(policy_costs={"raw": {"value": 310.0}, "calibrated": {"value": 120.5},
                                "human_only": {"value": 500.0}})
    worse = _cell(criterion="safe", policy_costs={"raw": {"value": 90.0},
                                                  "calibrated": {"value": 95.0},
                                                  "human_only": {"value": 40.0}})
    untrusted = _cell(criterion="tone", trust={"threshold": None, "alpha": 0.1, "delta": 0.05,
                                               "coverage": 0.0})
    shy = _cell(criterion="style", trust={"threshold": 0.97, "alpha": 0.05, "coverage": 0.2})
    miscal = _cell(criterion="facts", diagnostics={"before": None,
                                                   "after": {"ece": {"value": 0.18}}})
    out = calibration_advice(_result(
        [money, worse, untrusted, shy, miscal],
        costs={"unit": "EUR", "is_default": True},
        cascade={"coverage": 0.625, "guaranteed_level": 0.9}))
    joined = "\n".join(out)
    assert "calibrated decisions cost 120 EUR per 1,000 outputs against 310 for raw" in joined
    assert "humans alone cost less (40 EUR per 1,000 outputs)" in joined
    assert "no confidence threshold guarantees 90 % agreement" in joined
    assert "trusted on only 20 % of outputs at 95 % guaranteed agreement" in joined
    assert "still 0.18 expected calibration error" in joined
    assert "cascade decides 62 % of outputs" in joined or "cascade decides 63 %" in joined
    assert out[-1].startswith("Costs are the documented defaults")


def test_nothing_to_do_and_no_cells() -> None:
    assert calibration_advice(_result([_cell()]))[0].startswith("Every cell has enough")
    assert calibration_advice(_result([]))[0].startswith("No calibration cells yet")
    # A malformed result never raises: the page must render whatever was stored.
    assert calibration_advice({"cells": [None, 3, {"n_labels": "x"}]})


def test_stratum_text() -> None:
    assert stratum_text("") == "whole study"
    assert stratum_text("a=x|b=y") == "a=x, b=y"
    assert math.isfinite(labels_needed(n=1, own_weight=1e-9, min_labels=1))


def test_advice_imports_without_django() -> None:
    code = ("import sys, calibration.advice; "
            "assert 'django' not in sys.modules, 'django imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
