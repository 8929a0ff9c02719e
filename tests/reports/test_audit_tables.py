"""The audit page's tables and CSV exports of result version 2 (issue 15 §1, §3, §4):
correlation at three levels, agreement per vote beside the humans' pooled agreement, and
verdicts in both presentation orders.

The study is imported through the generic importer from a tiny hand-made data set (not
simulated: every figure below is counted by hand in the comments, or computed with scipy):

* ``pref`` (pairwise): four comparisons; three humans, one order each; a judge ``j`` in both
  orders. Items p1, p2 have the stratum label ``=cmd()`` (spreadsheet formula bait), p3, p4
  ``en``.
* ``quality`` (ordinal 1..5): three items answered by three candidates, one human and ``j``.
"""

from __future__ import annotations

import csv
import html
import io
import re
from typing import Any

import pytest
from django.urls import reverse
from scipy import stats

from imports.generic import ratings_import, ratings_read
from reports.agreement.present import tables as audit_tables
from reports.agreement.present.export import TABLES, table_csv
from reports.agreement.results import AgreementResult
from studies.models import Study

from .conftest import computed_report

pytestmark = pytest.mark.django_db

BAIT = "=cmd()"
# Per comparison: stratum, the three human votes (outputs terms; order ab) and the judge's
# verdicts in order ab and ba (outputs terms).
PAIRS = {
    "p1": (BAIT, ("A", "A", "B"), ("A", "A")),
    "p2": (BAIT, ("A", "A", "A"), ("A", "B")),
    "p3": ("en", ("B", "B", "tie"), ("B", "B")),
    "p4": ("en", ("B", "A", "B"), ("A", "B")),
}
HUMAN = {"q1": (1, 3, 5), "q2": (2, 4, 3), "q3": (3, 4, 5)}
JUDGE = {"q1": (2, 3, 4), "q2": (3, 4, 2), "q3": (3, 3, 3)}


def _csv_text() -> str:
    head = ("item_id,stratum.lang,output_id,candidate,output_a,output_b,candidate_a,"
            "candidate_b,order,pairwise_values,rater_id,rater_kind,criterion,value")
    lines = [head]
    for item, (lang, votes, (ab, ba)) in PAIRS.items():
        pair = f"{item},{lang},,,{item}-x,{item}-y,x,y"
        for k, v in enumerate(votes):
            lines.append(f"{pair},ab,outputs,h{k},human,pref,{v}")
        lines.append(f"{pair},ab,outputs,j,judge,pref,{ab}")
        lines.append(f"{pair},ba,outputs,j,judge,pref,{ba}")
    for item in HUMAN:
        for c, h, jv in zip("xyz", HUMAN[item], JUDGE[item], strict=True):
            single = f"{item},en,{item}-{c},{c},,,,,,"
            lines.append(f"{single},h0,human,quality,{h}")
            lines.append(f"{single},j,judge,quality,{jv}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def report(study: Study) -> Any:
    ratings_import(study=study, rows=ratings_read(io.StringIO(_csv_text()), fmt="csv"))
    return computed_report(study, {"n_resamples": 200, "seed": 3})


def _table(page: str, cls: str) -> str:
    m = re.search(rf'<table class="data audit-table {cls}">(.*?)</table>', page, re.S)
    assert m, cls
    return m.group(1)


def _cells(table: str) -> list[list[str]]:
    """The body rows of a table as text (a cell's interval line dropped)."""
    body = table.split("<tbody>", 1)[1]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)
        rows.append([
            " ".join(html.unescape(re.sub(r"<[^>]+>", " ", c.split("<br>")[0])).split())
            for c in cells
        ])
    return rows


def test_audit_page_shows_the_three_tables_with_captions(
    report: Any, study: Study, lead: Any, client: Any
) -> None:
    client.force_login(lead)
    page = client.get(
        reverse("reports-audit", kwargs={"slug": study.slug, "report_id": report.pk})
    ).content.decode()
    result = AgreementResult.from_json(report.result)
    names = {c.key: c.name for c in result.criteria}
    orders = _table(page, "audit-orders")
    assert f"<caption>{names['pref']}: judge verdicts in both presentation orders" in orders
    assert "both presentation orders" in orders and 'scope="colgroup"' in orders
    # No verdict is unparseable: one group of figures, no "parseable only" group.
    assert "Parseable verdicts only" not in orders
    rows = {(r[0], r[1]): r[2:] for r in _cells(orders)}
    # Whole study, against the majorities A, A, B, B: A first right on p1 p2 p3 (p4: A), B
    # first right on p1 p3 p4 (p2: B); both right p1, p3; the same winner p1, p3.
    assert rows["j imported", "whole study"] == [
        "4", "0 / 0", "0.750", "0.750", "0.750", "0.500", "0.500"]
    # lang = =cmd() (p1, p2): A first 2/2, B first 1/2, mean 0.75, both 1/2, same 1/2.
    assert rows["j imported", f"lang={BAIT}"] == [
        "2", "0 / 0", "1.000", "0.500", "0.750", "0.500", "0.500"]

    votes = _table(page, "audit-votes")
    assert f"<caption>{names['pref']}: judge agreement per human majority" in votes
    assert "per human vote" in votes and "without ties" in votes
    rows = {(r[0], r[1]): r[2:] for r in _cells(votes)}
    # The stored verdict is a tie where the orders disagree (p2, p4): verdicts A, tie, B, tie
    # against majorities A, A, B, B: 2 of 4; without ties 2 of 2. Per vote: p1 2/3, p2 0/3,
    # p3 2/3, p4 0/3 = 4/12; without ties (p2, p4 dropped with the judge's ties, p3's tie
    # vote dropped): (2 + 2) / (3 + 2). Humans: agreeing pairs 1 + 3 + 1 + 1 of 12; without
    # ties 1 + 3 + 1 + 1 of 3 + 3 + 1 + 3.
    assert rows["j imported", "whole study"] == [
        "0.500", "1.000", "0.333", "0.800", "0.500", "0.600", "4", "12"]

    levels = _table(page, "audit-levels")
    assert f"<caption>{names['quality']}: correlation" in levels
    assert "three levels" in levels and "Sample level" in levels and "System level" in levels
    rows = {(r[0], r[1]): r[2:] for r in _cells(levels)}
    whole = rows["j imported", "whole study"]
    # Sample level: q1 (1, 1, 1) and q2 (0.5, 0.5, 1/3); q3 is constant for the judge.
    assert whole[:4] == [
        "0.750", "0.750", "0.667", "2 (1 constant, 0 with fewer than 3 candidates)"]
    h = [v for item in HUMAN for v in HUMAN[item]]
    j = [v for item in JUDGE for v in JUDGE[item]]
    assert whole[4:7] == [
        f"{stats.spearmanr(j, h)[0]:.3f}", f"{stats.pearsonr(j, h)[0]:.3f}",
        f"{stats.kendalltau(j, h)[0]:.3f}"]
    mh = [sum(HUMAN[i][c] for i in HUMAN) / 3 for c in range(3)]
    mj = [sum(JUDGE[i][c] for i in JUDGE) / 3 for c in range(3)]
    assert whole[7:] == [
        f"{stats.spearmanr(mj, mh)[0]:.3f}", f"{stats.pearsonr(mj, mh)[0]:.3f}",
        f"{stats.kendalltau(mj, mh)[0]:.3f}"]


def test_tables_are_left_out_where_the_report_has_none(report: Any) -> None:
    result = AgreementResult.from_json(report.result)
    crits = {c.key: c for c in result.criteria}
    assert audit_tables.orders_table(result, crits["quality"].id) is None
    assert audit_tables.correlation_levels_table(result, crits["pref"].id) is None
    assert audit_tables.votes_table(result, crits["quality"].id) is None
    # A version 1 result has none of the new tables.
    old = dict(report.result, version=1)
    for name in ("correlation_levels", "orders"):
        old.pop(name)
    v1 = AgreementResult.from_json(old)
    assert audit_tables.orders_table(v1, crits["pref"].id) is None
    assert audit_tables.correlation_levels_table(v1, crits["quality"].id) is None


def test_long_tables_point_to_the_export(report: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    result = AgreementResult.from_json(report.result)
    pref = next(c for c in result.criteria if c.key == "pref")
    monkeypatch.setattr(audit_tables, "MAX_ROWS", 1)
    table = audit_tables.orders_table(result, pref.id)
    assert table is not None and len(table["rows"]) == 1
    assert table["more"] == len([r for r in result.orders if r.criterion == pref.id]) - 1 > 0


def _export(client: Any, study: Study, report: Any, table: str) -> list[dict[str, str]]:
    url = reverse("reports-api-export", kwargs={"slug": study.slug, "report_id": report.pk})
    r = client.get(url, {"table": table})
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(r.content.decode())))


def test_csv_export_of_the_new_tables(report: Any, study: Study, lead_client: Any) -> None:
    assert {"votes", "correlation_levels", "orders"} <= set(TABLES)
    orders = _export(lead_client, study, report, "orders")
    whole = {(r["basis"], r["figure"]): r for r in orders if r["stratum"] == "overall"}
    assert float(whole["unparseable as miss", "accuracy_mean"]["value"]) == pytest.approx(0.75)
    assert float(whole["parseable only", "accuracy_consistent"]["value"]) == pytest.approx(0.5)
    assert whole["unparseable as miss", "accuracy_ab"]["n_pairs"] == "4"
    # A label that starts like a formula is neutralised in every table it appears in.
    assert {r["stratum"] for r in orders} == {"overall", "'" + BAIT, "en"}
    votes = _export(lead_client, study, report, "votes")
    figures = {r["figure"]: float(r["value"]) for r in votes if r["stratum"] == "overall"}
    assert figures == pytest.approx({
        "majority": 0.5, "majority_without_ties": 1.0, "per_vote": 4 / 12,
        "per_vote_without_ties": 0.8, "human_pooled": 0.5, "human_pooled_without_ties": 0.6})
    assert "'" + BAIT in {r["stratum"] for r in votes}
    levels = _export(lead_client, study, report, "correlation_levels")
    got = {(r["level"], r["method"]): r for r in levels if r["stratum"] == "overall"}
    assert len(got) == 9
    assert float(got["sample", "kendall"]["value"]) == pytest.approx((1 + 1 / 3) / 2)
    assert got["sample", "kendall"]["n_items_constant"] == "1"
    assert got["system", "spearman"]["n_candidates"] == "3"
    typed = AgreementResult.from_json(report.result)
    assert table_csv(typed, "orders").count("\n") == len(orders) + 1
