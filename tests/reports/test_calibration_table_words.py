"""The calibration table says what its numbers are: the three expected-cost columns under one
header that names the unit and what decides, and beside each cell how many more human labels
it wants and for which of the two targets (so 9 beside 1,072 is not a riddle)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from calibration.advice import cell_labels_wanted, labels_needed
from tests.calibration.scores_factory import World, snapshot_make
from tests.reports.test_calibration_page import _cell, _page, _result, lead_page, world  # noqa: F401

pytestmark = pytest.mark.django_db


def test_labels_wanted_names_its_target() -> None:
    # No curve: only the minimum a curve is fitted from.
    more, why = cell_labels_wanted({"n_labels": 1, "too_few_labels": True}, min_labels=10)
    assert more == 9 and "to reach the 10 labels a curve is fitted from" in why
    # A curve leaning on the pool: n* = k W / (1 - W) with k = n (1 - w) / w and W = 1/2.
    # 99 labels at own weight 0.078: k = 99 * 0.922 / 0.078 = 1170.2, so 1171 - 99 = 1072.
    cell = {"n_labels": 99, "own_weight": 0.078, "borrowed": 0.922}
    more, why = cell_labels_wanted(cell, min_labels=10)
    assert more == 1072 == labels_needed(n=99, own_weight=0.078, min_labels=10)
    assert "until its own labels carry half of its curve (now 8 %" in why
    assert cell_labels_wanted({"n_labels": 80, "own_weight": 0.7, "borrowed": 0.3})[0] == 0


def test_cost_headers_and_labels_wanted_on_the_page(world: World, lead_page: Client) -> None:  # noqa: F811
    result: dict[str, Any] = _result(world)
    result["cells"].append(_cell(world, n_labels=99, own_weight=0.078, borrowed=0.922))
    snapshot_make(world, result=result)
    html = lead_page.get(_page(world.study.slug)).content.decode()
    assert "Per 1,000: raw" not in html
    group = re.search(r'<th scope="colgroup" colspan="3" id="cost-per-1000">(.*?)</th>', html)
    assert group is not None
    assert "Expected cost per 1,000 outputs" in group.group(1) and "deciding by" in group.group(1)
    for header in ("the judge's raw verdicts", "the calibrated thresholds", "humans only"):
        assert re.search(rf'<th scope="col" class="num" id="cost-\w+">{header}</th>', html), header
    assert html.count('headers="cost-per-1000 cost-raw"') == 2  # the cells with a policy
    wanted = re.findall(r'<td class="labels-wanted">(.*?)</td>', html, re.S)
    assert len(wanted) == 3
    assert "label 36 more" in wanted[0] and "carry half of its curve" in wanted[0]
    assert "label 7 more" in wanted[1] and "labels a curve is fitted from" in wanted[1]
    assert "label 1072 more" in wanted[2]
    assert 'id="labels-wanted-note"' in html and "two targets" in html
