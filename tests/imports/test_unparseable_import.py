"""Issue 15 §1, unparseable verdicts: an empty judge value imports as an unscored verdict, and the
report's orders table counts it (as a miss, or a tie by option) beside the figures on parseable
verdicts only, with the count; a run's verdict whose answer in one order could not be parsed
counts the same way, one whose provider call failed does not count at all.

Every expected figure is counted by hand from the tiny data set below."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from judges.models import Verdict

pytestmark = pytest.mark.django_db

# Ten comparisons, one human who prefers the first output (A) on all of them. The judge saw
# each pair in both orders: "ab" right on p1..p8, "ba" right on p1..p6, unparseable (empty)
# on p7 and p8, and B on p9, p10 in both orders.
AB = ["A"] * 8 + ["B", "B"]
BA = ["A"] * 6 + ["", ""] + ["B", "B"]


def _file(path: Path) -> Path:
    rows = []
    for i in range(10):
        base = {"item_id": f"p{i + 1}", "output_a": f"p{i + 1}-x", "output_b": f"p{i + 1}-y",
                "candidate_a": "x", "candidate_b": "y", "criterion": "pref"}
        rows.append({**base, "order": "ab", "rater_id": "h1", "rater_kind": "human",
                     "judge_version": "", "value": "A"})
        for order, value in (("ab", AB[i]), ("ba", BA[i])):
            rows.append({**base, "order": order, "rater_id": "j", "rater_kind": "judge",
                         "judge_version": "v1", "value": value})
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _import(path: Path) -> dict[str, Any]:
    out = io.StringIO()
    call_command("import_ratings", str(path), "--study", "unp", "--owner", "lead",
                 "--pairwise-values", "outputs", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    return json.loads(text[text.index("{\n"):])


def _orders(tmp_path: Path, **params: Any) -> dict[str, Any]:
    out = tmp_path / "r.json"
    call_command("report", "agreement", "--study", "unp", "--params",
                 json.dumps({"n_resamples": 200, "seed": 1, **params}), "--out", str(out),
                 stdout=io.StringIO())
    rows = json.loads(out.read_text())["result"]["orders"]
    [row] = [r for r in rows if r["dimension"] is None or r.get("label") in (None, "overall")] \
        or rows[:1]
    return row


def _values(figures: dict[str, Any]) -> dict[str, float]:
    return {k: round(v["value"], 4) for k, v in figures.items()}


def test_empty_judge_values_import_as_unparseable_and_count_both_ways(
        lead: Any, tmp_path: Path) -> None:
    summary = _import(_file(tmp_path / "unp.csv"))
    assert any("2 judge ratings with an empty value" in n for n in summary["notes"])
    # The order that parsed is the verdict (issue 25 §2); the empty one stays None in orders.
    partial = Verdict.objects.filter(criterion__key="pref", details__unparseable=True)
    assert partial.count() == 2 and all(v.is_scored and v.value == "A" for v in partial)
    assert {v.details["orders"]["ba"] for v in partial} == {None}
    assert {v.details["orders"]["ab"] for v in partial} == {"A"}
    row = _orders(tmp_path)
    assert row["n_pairs"] == 10 and row["n_unparseable_ab"] == 0
    assert row["n_unparseable_ba"] == 2 and row["unparseable_as"] == "miss"
    # Unparseable counted as a miss: ab right on 8/10, ba on 6/10; both right on p1..p6;
    # the same winner in both orders on p1..p6, p9, p10.
    assert _values(row["counted"]) == {
        "accuracy_ab": 0.8, "accuracy_ba": 0.6, "accuracy_mean": 0.7,
        "accuracy_consistent": 0.6, "positional_agreement": 0.8}
    # Parseable verdicts only: ba right on 6 of its 8; the pairs parseable in both orders are
    # p1..p6, p9, p10: both right on 6 of 8, the same winner on 8 of 8.
    parse = _values(row["parseable"])
    assert parse["accuracy_ab"] == 0.8 and parse["accuracy_ba"] == 0.75
    assert parse["accuracy_consistent"] == 0.75 and parse["positional_agreement"] == 1.0
    # As a tie: the human never said tie, so a tie is as wrong as a miss for accuracy, and a
    # tie in one order never agrees with an A in the other.
    tie = _values(_orders(tmp_path, unparseable_as="tie")["counted"])
    assert tie["accuracy_ba"] == 0.6 and tie["positional_agreement"] == 0.8
    # Importing the same file again changes nothing.
    again = _import(tmp_path / "unp.csv")
    assert again["unchanged"].get("verdict") == 10  # one verdict per pair, both orders in it


def test_a_failed_provider_call_is_not_an_unparseable_answer(lead: Any, tmp_path: Path) -> None:
    _import(_file(tmp_path / "unp.csv"))
    # A run's verdict records each sample; mark p7's missing order as a failed provider call.
    v = Verdict.objects.filter(details__unparseable=True).order_by("id").first()
    assert v is not None
    v.details = {**v.details, "samples": [
        {"order": "ab", "status": "done", "value": "A"},
        {"order": "ba", "status": "failed", "value": None}]}
    v.save(update_fields=["details"])
    row = _orders(tmp_path)
    assert row["n_pairs"] == 9 and row["n_unparseable_ba"] == 1
    # ...whereas an unparseable sample keeps the pair in, counted as a miss.
    v.details = {**v.details, "samples": [
        {"order": "ab", "status": "done", "value": "A"},
        {"order": "ba", "status": "unparseable", "value": None}]}
    v.save(update_fields=["details"])
    assert _orders(tmp_path)["n_pairs"] == 10


def test_humans_still_need_a_value(lead: Any, tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("item_id,output_id,candidate,rater_id,rater_kind,criterion,value\n"
                    "i1,o1,m,h1,human,ok,\n", encoding="utf-8")
    from django.core.management import CommandError
    with pytest.raises(CommandError, match="line 2: value: required"):
        call_command("import_ratings", str(path), "--study", "unp", "--owner", "lead",
                     stdout=io.StringIO(), stderr=io.StringIO())
