"""Issue 15, sections 2 and 5: the ratings importer reads each convention a published file uses,
and refuses (or warns) where a guess could silently invert or re-type the data.

Every figure here is computed by hand from the tiny data sets below or by an independent
library (scikit-learn's Cohen's kappa, a binomial tail from `math.comb`), and every import goes
through the documented command (`import_ratings`, and `report agreement` where a figure is
read back).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from sklearn.metrics import cohen_kappa_score

from annotations.models import Annotation
from imports.pairwise_check import PairwiseVote, order_consistency
from judges.models import Judge, Verdict
from studies.imports_service import importer_username
from studies.models import Candidate, Comparison, Criterion, Item, Membership, Output, Study
from tests.imports.cli import agreement_report, import_error, run_import

pytestmark = pytest.mark.django_db

SWAP = {"A": "B", "B": "A", "tie": "tie"}


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    header: list[str] = []
    for r in rows:
        header += [k for k in r if k not in header]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    return path


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path





def _nothing_written(slug: str) -> None:
    assert not Item.objects.filter(study__slug=slug).exists()
    assert not Criterion.objects.filter(rubric__study__slug=slug).exists()
    assert not Annotation.objects.filter(criterion__rubric__study__slug=slug).exists()
    assert not get_user_model().objects.filter(username__startswith=f"{slug}:").exists()


# --- Section 2: which way a pairwise value points ----------------------------------------------

# Ten comparisons of output x (output_a) and output y (output_b). In terms of the outputs
# (A = x is better): the truth T, three humans (h1 and h3 saw x first, h2 saw y first), each
# dissenting once at most so that the majority is T; and a judge that rated every comparison in
# both orders, consistently, and differs from the majority on items 3 and 9.
TRUTH = ["A", "A", "B", "A", "B", "B", "A", "B", "A", "tie"]
HUMANS = {
    "h1": ("ab", [("A" if i == 2 else t) for i, t in enumerate(TRUTH)]),
    "h2": ("ba", list(TRUTH)),
    "h3": ("ab", [("A" if i == 5 else t) for i, t in enumerate(TRUTH)]),
}
JUDGE = ["A", "A", "B", "B", "B", "B", "A", "B", "A", "A"]


def _pairwise_rows(convention: str, *, column: bool = True) -> list[dict[str, Any]]:
    """The ratings above, written in `convention` (values relative to the outputs, or to what
    the rater saw first: on a "ba" row the first shown is output_b, so A and B trade places);
    `column`: the rows say so in a pairwise_values column."""
    rows: list[dict[str, Any]] = []

    def value(v: str, order: str) -> str:
        return SWAP[v] if convention == "presented" and order == "ba" else v

    for i in range(10):
        base: dict[str, Any] = {
            "item_id": f"p{i}", "output_a": f"p{i}-x", "output_b": f"p{i}-y",
            "candidate_a": "x", "candidate_b": "y", "criterion": "pref",
        }
        if column:
            base["pairwise_values"] = convention
        for rater, (order, votes) in HUMANS.items():
            rows.append({**base, "order": order, "rater_id": rater, "rater_kind": "human",
                         "value": value(votes[i], order)})
        for order in ("ab", "ba"):
            rows.append({**base, "order": order, "rater_id": "j", "rater_kind": "judge",
                         "judge_version": "v1", "value": value(JUDGE[i], order)})
    return rows


def _stored(slug: str) -> dict[str, Any]:
    """Per item: the canonical values stored (A = output x of candidate x is better)."""
    out: dict[str, Any] = {}
    for c in Comparison.objects.filter(study__slug=slug).select_related(
        "item", "output_a__candidate"
    ):
        x_is_a = c.output_a.candidate.name == "x"
        flip = (lambda v: v) if x_is_a else (lambda v: SWAP[v])
        humans = {
            a.annotator.username.split(":", 1)[1]: flip(a.value)
            for a in Annotation.objects.filter(comparison=c).select_related("annotator")
        }
        [verdict] = Verdict.objects.filter(comparison=c)
        out[c.item.external_id] = (humans, flip(verdict.value))
    return out


def test_a_pairwise_file_must_say_what_its_values_refer_to(study: Study, tmp_path: Path) -> None:
    path = _csv(tmp_path / "p.csv", _pairwise_rows("outputs", column=False))
    error = import_error(path, "--study", study.slug)
    assert "line 2: pairwise_values: required for a pairwise rating" in error
    assert "'outputs' if A means output_a is better" in error
    assert "(and 49 more problems)" in error  # every one of the 50 pairwise rows
    _nothing_written(study.slug)
    bad = _csv(tmp_path / "bad.csv", [{**r, "pairwise_values": "first"}
                                      for r in _pairwise_rows("outputs", column=False)])
    assert "pairwise_values: must be 'outputs'" in import_error(bad, "--study", study.slug)
    stated = _csv(tmp_path / "s.csv", _pairwise_rows("outputs"))
    error = import_error(stated, "--study", study.slug, "--pairwise-values", "presented")
    assert "the row says 'outputs' but --pairwise-values says 'presented'" in error
    _nothing_written(study.slug)


@pytest.mark.parametrize("how", ["column", "option"])
def test_both_conventions_store_the_same_ratings_and_figures(
    lead: Any, tmp_path: Path, how: str
) -> None:
    results = {}
    for convention in ("outputs", "presented"):
        slug = f"conv-{convention}"
        rows = _pairwise_rows(convention, column=how == "column")
        extra = [] if how == "column" else ["--pairwise-values", convention]
        summary, _, err = run_import(
            _csv(tmp_path / f"{slug}.csv", rows), "--study", slug, "--owner", lead.username,
            *extra,
        )
        assert summary["warnings"] == [] and err == ""
        assert summary["created"]["comparison"] == 10 and summary["created"]["verdict"] == 10
        stored = _stored(slug)
        for i in range(10):
            humans, judge = stored[f"p{i}"]
            assert humans == {r: votes[i] for r, (_, votes) in HUMANS.items()}
            assert judge == JUDGE[i]
        results[convention] = agreement_report(slug, tmp_path)
    for result in results.values():
        [jv] = [j["id"] for j in result["judges"] if j["judge"] == "j"]
        cell = next(c for c in result["cells"] if c["judge_version"] == jv
                    and c["label"] == "overall")
        m = cell["metrics"]
        # By hand: the judge matches the human majority (= TRUTH) on 8 of 10 comparisons.
        assert m["accuracy"]["value"] == pytest.approx(0.8)
        assert m["kappa"]["value"] == pytest.approx(cohen_kappa_score(TRUTH, JUDGE))

    def figures(result: dict[str, Any]) -> list[Any]:
        return [(c["label"], {k: v["value"] for k, v in c["metrics"].items()})
                for c in result["cells"]]

    assert figures(results["outputs"]) == figures(results["presented"])


def test_a_wrong_declaration_is_flagged_by_the_order_check(lead: Any, tmp_path: Path) -> None:
    # The file is in terms of the outputs but says "presented": every swapped-order rating is
    # read inverted. The judge's two orders then name opposite winners on all 10 comparisons
    # (one-sided binomial tail 2**-10), the humans' on the 7 decided by both orders (2**-7).
    rows = [{**r, "pairwise_values": "presented"} for r in _pairwise_rows("outputs")]
    summary, _, err = run_import(
        _csv(tmp_path / "w.csv", rows), "--study", "wrong", "--owner", lead.username
    )
    assert len(summary["warnings"]) == 2
    judge_w, human_w = summary["warnings"]
    assert "judge 'j' version 'v1'" in judge_w
    assert "of 10 comparisons decided in both presentation orders" in judge_w
    assert "opposite winners in 10 (100%" in judge_w and f"p = {2**-10:.2g}" in judge_w
    assert "pairwise_values=presented" in judge_w
    assert "human raters" in human_w and "of 7 comparisons" in human_w
    assert f"p = {2**-7:.2g}" in human_w
    assert err.count("warning: ") == 2
    # Read that way, the judge is position-inconsistent everywhere (stored as ties).
    assert set(Verdict.objects.filter(criterion__key="pref").values_list("value", flat=True)) == {
        "tie"
    }


def test_the_order_check_is_a_one_sided_binomial_test_at_one_percent() -> None:
    def votes(n_same: int, n_opposite: int, n_tie: int) -> list[PairwiseVote]:
        out = []
        pairs = ["A"] * n_same + ["B"] * n_opposite + ["tie"] * n_tie
        for i, second in enumerate(pairs):
            for order, value in (("ab", "A"), ("ba", second)):
                out.append(PairwiseVote(kind="judge", rater="j", version="v", criterion="c",
                                        pair=i, order=order, value=value,
                                        convention="outputs"))
        return out

    def tail(k: int, n: int) -> float:
        return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n

    [c] = order_consistency(votes(3, 9, 4))  # ties in either order are not decided
    assert (c.n, c.opposite) == (12, 9)
    assert c.p_value == pytest.approx(tail(9, 12))  # 0.073: not suspicious
    assert not c.suspicious
    [c] = order_consistency(votes(2, 13, 0))
    assert c.p_value == pytest.approx(tail(13, 15)) and c.p_value < 0.01 and c.suspicious
    # A judge with a fair share of position flips is not flagged.
    [c] = order_consistency(votes(10, 5, 0))
    assert c.p_value == pytest.approx(tail(5, 15)) and not c.suspicious


# --- Section 5: the file format a user actually has --------------------------------------------


def _single(values: list[Any], criterion: str = "quality") -> list[dict[str, Any]]:
    return [
        {"item_id": f"q{i}", "output_id": f"o{i}", "rater_id": f"r{k}", "rater_kind": "human",
         "criterion": criterion, "value": v}
        for i, per_item in enumerate(values)
        for k, v in enumerate(per_item if isinstance(per_item, list) else [per_item])
    ]


def test_continuous_human_scores_are_never_inferred_the_refusal_names_the_interval_scale(
    study: Study, tmp_path: Path
) -> None:
    # Means over raters on a 1-5 scale (as many releases give them): 2.2 is no point of an
    # ordinal scale, and as categorical labels "3" and "3.0" would be two labels. Inference
    # re-types neither way: the message names the interval scale to state, with the range seen.
    path = _csv(tmp_path / "m.csv", _single([2.2, 3, 3.0, 4.6667, 1.0]))
    error = import_error(path, "--study", study.slug)
    assert "line 2: criterion: the values of 'quality' are non-integer numbers from 1 to " in error
    assert "continuous scores (such as a mean over raters) import under an interval" in error
    assert "--scale quality=interval:1-4.6667" in error
    assert "no criterion kind yet" not in error
    _nothing_written(study.slug)
    # On an existing ordinal criterion the value is refused, pointing to an interval criterion.
    run_import(_csv(tmp_path / "ok.csv", _single([1, 5])), "--study", study.slug)
    error = import_error(path, "--study", study.slug)
    assert "'2.2' is not a value of the ordinal criterion 'quality'" in error
    assert "continuous human scores (such as a mean over raters) import under an interval" in (
        error)


def test_numbers_need_a_stated_scale_unless_they_are_an_ordinal_1_to_k(
    study: Study, tmp_path: Path
) -> None:
    zero_based = _csv(tmp_path / "z.csv", _single([0, 1, 2, 2, 0]))
    error = import_error(zero_based, "--study", study.slug)
    assert "the values of 'quality' are integers from 0 to 2" in error
    assert "--scale quality=categorical:0,1,2" in error
    _nothing_written(study.slug)
    summary, notes, _ = run_import(
        zero_based, "--study", study.slug, "--scale", "quality=categorical:0,1,2"
    )
    assert summary["criteria"]["quality"]["how"] == "stated (--scale)"
    assert "criterion 'quality': categorical (0, 1, 2) (stated (--scale))" in notes
    inferred = _csv(tmp_path / "i.csv", _single([1, 5, "4.0", 2], criterion="tone"))
    summary, notes, _ = run_import(inferred, "--study", study.slug)
    assert summary["criteria"]["tone"] == {
        "scale": "ordinal 1..5", "how": "inferred: every value is an integer from 1 to 5",
        "rubric": "v1",
    }
    assert (
        "criterion 'tone': ordinal 1..5 (inferred: every value is an integer from 1 to 5)" in notes
    )
    tone = Criterion.objects.get(rubric__study=study, key="tone")
    assert tone.scale == "ordinal" and [p["value"] for p in tone.points] == [1, 2, 3, 4, 5]
    assert sorted(Annotation.objects.filter(criterion=tone).values_list("value", flat=True)) == [
        "1", "2", "4", "5"]


def test_dry_run_shows_the_inferred_kinds_and_writes_nothing(lead: Any, tmp_path: Path) -> None:
    rows = _single([[4, 5], [2, 1], [3, 3]]) + _single(["pass", "fail", "pass"], "correct")
    path = _csv(tmp_path / "d.csv", rows)
    summary, notes, _ = run_import(path, "--study", "dry", "--owner", lead.username, "--dry-run")
    assert notes.startswith("dry run: nothing was written")
    assert "criterion 'quality': ordinal 1..5 (inferred" in notes
    assert "criterion 'correct': binary (inferred: every value is pass or fail)" in notes
    assert summary["dry_run"] is True
    assert summary["created"]["annotation"] == 9 and summary["created"]["user"] == 2
    assert not Study.objects.filter(slug="dry").exists()
    _nothing_written("dry")
    summary, _, _ = run_import(path, "--study", "dry", "--owner", lead.username)
    assert summary["dry_run"] is False and summary["created"]["annotation"] == 9
    assert Annotation.objects.filter(criterion__rubric__study__slug="dry").count() == 9


def test_a_failed_import_leaves_nothing_behind(lead: Any, tmp_path: Path) -> None:
    # Validation fails: the study that --owner would create is not created either.
    robot = {"item_id": "q9", "output_id": "o9", "rater_id": "r1", "rater_kind": "robot",
             "criterion": "quality", "value": 3}
    bad = _csv(tmp_path / "bad.csv", [*_single([4, 5]), robot])
    assert "line 4: rater_kind" in import_error(bad, "--study", "atomic", "--owner",
                                                 lead.username)
    assert not Study.objects.filter(slug="atomic").exists()
    _nothing_written("atomic")
    # Writing fails half-way (items, outputs and annotators are written before judges): the
    # judge name belongs to a runnable judge. Nothing of the import stays.
    study = Study.objects.create(slug="atomic", name="atomic", owner=lead, status="open")
    Judge.objects.create(study=study, name="gpt", kind=Judge.Kind.LLM)
    gpt = {"item_id": "q0", "output_id": "o0", "rater_id": "gpt", "rater_kind": "judge",
           "criterion": "quality", "value": 4}
    clash = _csv(tmp_path / "clash.csv", [*_single([4, 5]), gpt])
    assert "'gpt' is an existing llm judge" in import_error(clash, "--study", "atomic")
    _nothing_written("atomic")
    assert not Output.objects.filter(study=study).exists()


def test_pairwise_candidates_are_optional_positions_stand_in(
    study: Study, tmp_path: Path
) -> None:
    rows = [
        {"item_id": "p1", "output_a": "p1-1", "output_b": "p1-2", "rater_id": "h1",
         "rater_kind": "human", "criterion": "pref", "value": "A", "order": "ab"},
        # The same pair listed the other way round, values in terms of the outputs: "B" here
        # names p1-1 again, so both humans prefer p1-1.
        {"item_id": "p1", "output_a": "p1-2", "output_b": "p1-1", "rater_id": "h2",
         "rater_kind": "human", "criterion": "pref", "value": "B", "order": "ab"},
    ]
    summary, notes, _ = run_import(_csv(tmp_path / "c.csv", rows), "--study", study.slug,
                                "--pairwise-values", "outputs")
    assert "2 pairwise rows have no candidate_a/candidate_b" in notes
    assert sorted(Candidate.objects.filter(study=study).values_list("name", flat=True)) == [
        "position-a", "position-b"]
    [comp] = Comparison.objects.filter(study=study).select_related("output_a")
    assert comp.output_a.metadata["import_output_id"] == "p1-1"
    assert sorted(Annotation.objects.filter(comparison=comp).values_list("value", flat=True)) == [
        "A", "A"]
    assert summary["created"]["comparison"] == 1
    half = [{**rows[0], "candidate_a": "x"}]
    error = import_error(_csv(tmp_path / "h.csv", half), "--study", study.slug,
                          "--pairwise-values", "outputs")
    assert "line 2: candidate_b: give both candidate columns or neither" in error


def test_extra_columns_are_ignored_with_a_warning_misspellings_refused(
    study: Study, tmp_path: Path
) -> None:
    rows = [{**r, "annotator_notes": "fine", "colour": "red"} for r in _single([4, 5])]
    summary, _, err = run_import(_csv(tmp_path / "x.csv", rows), "--study", study.slug)
    assert summary["created"]["annotation"] == 2
    assert [w.split(" (")[0] for w in summary["warnings"]] == [
        "column 'annotator_notes'", "column 'colour'"]
    assert "name it meta.colour to keep it as item metadata" in err
    typo = [{**r, "judge_verison": "v2"} for r in _single([4])]
    error = import_error(_csv(tmp_path / "t.csv", typo), "--study", study.slug)
    assert "line 2: judge_verison: unknown column; did you mean 'judge_version'?" in error


def test_rater_attributes_are_kept_on_the_membership(study: Study, tmp_path: Path) -> None:
    rows = [
        {**r, "rater.group": "expert" if r["rater_id"] == "r0" else "crowd"}
        for r in _single([[4, 5], [2, 1]])
    ] + [{"item_id": "q0", "output_id": "o0", "rater_id": "gpt", "rater_kind": "judge",
          "criterion": "quality", "value": 4, "rater.group": "judge"}]
    summary, _, err = run_import(_csv(tmp_path / "g.csv", rows), "--study", study.slug)
    groups = {
        m.user.username: m.metadata
        for m in Membership.objects.filter(study=study, role="annotator").select_related("user")
    }
    assert groups == {importer_username(study, "r0"): {"group": "expert"},
                      importer_username(study, "r1"): {"group": "crowd"}}
    assert summary["updated"]["rater_attributes"] == 2
    assert "rater.group (first on line 6) on judge rows was ignored" in err
    # JSON Lines may give them as an object; a rater is one thing on every row.
    clash = [{**r, "rater": {"group": "expert" if i < 2 else "author"}}
             for i, r in enumerate(_single([[4, 5], [2, 1]]))]
    error = import_error(_jsonl(tmp_path / "g.jsonl", clash), "--study", study.slug)
    assert "line 3: rater.group: rater 'r0' is 'expert' on line 1 but 'author' here" in error


def test_strata_that_vary_per_row_say_what_to_use_instead(study: Study, tmp_path: Path) -> None:
    # The system that produced each output given as a "stratum" (one item, two outputs).
    per_output = [
        {"item_id": "125", "output_id": f"125-{s}", "stratum.system": s, "rater_id": r,
         "rater_kind": "human", "criterion": "quality", "value": 3}
        for s in ("fusion", "s2s") for r in ("a", "b")
    ]
    error = import_error(_csv(tmp_path / "s.csv", per_output), "--study", study.slug)
    assert "line 4: stratum.system: item '125' is 'fusion' on line 2 but 's2s' here" in error
    assert "it describes the output, not the item" in error and "candidate column" in error
    # The annotator's group given as a "stratum": constant per rater.
    per_rater = [
        {"item_id": f"q{i}", "output_id": f"o{i}", "stratum.group": g, "rater_id": r,
         "rater_kind": "human", "criterion": "quality", "value": 3}
        for i in range(2) for r, g in (("a", "expert"), ("b", "crowd"))
    ]
    error = import_error(_csv(tmp_path / "r.csv", per_rater), "--study", study.slug)
    assert "item 'q0' is 'expert' on line 2 but 'crowd' here" in error
    assert "make it the rater attribute column rater.group" in error
    _nothing_written(study.slug)


def test_texts_come_from_a_second_json_lines_file(study: Study, tmp_path: Path) -> None:
    ratings = _csv(tmp_path / "r.csv", _single([4, 5]))
    texts = _jsonl(tmp_path / "t.jsonl", [
        {"item_id": "q0", "input": "What is 2+2?"},
        {"item_id": "q1", "input": "Capital of France?", "output_id": "o1", "text": "Paris"},
        {"output_id": "o0", "text": "4"},
        {"output_id": "o-unrated", "text": "not in the ratings"},
    ])
    summary, _, err = run_import(ratings, "--study", study.slug, "--texts", str(texts))
    assert dict(Item.objects.filter(study=study).values_list("external_id", "input")) == {
        "q0": "What is 2+2?", "q1": "Capital of France?"}
    assert dict(Output.objects.filter(study=study).values_list("item__external_id", "text")) == {
        "q0": "4", "q1": "Paris"}
    assert "1 texts of the texts file name an item or output that is not in the ratings" in err
    clash = _csv(tmp_path / "c.csv", [{**r, "output_text": "five"} for r in _single([4, 5])])
    other = _jsonl(tmp_path / "o.jsonl", [{"output_id": "o0", "text": "4"}])
    error = import_error(clash, "--study", "other", "--owner", "lead", "--texts", str(other))
    assert "texts line 1: output_id: output 'o0' has a different text in the ratings file" in error
    assert not Study.objects.filter(slug="other").exists()
    twice = _jsonl(tmp_path / "w.jsonl", [{"output_id": "o0", "text": "4"},
                                          {"output_id": "o0", "text": "four"}])
    error = import_error(ratings, "--study", "other", "--owner", "lead", "--texts", str(twice))
    assert "texts line 2: output_id: output 'o0' has another text on texts line 1" in error
    assert summary["created"]["item"] == 2


@pytest.mark.parametrize("convention", ["outputs", "presented"])
def test_a_later_file_listing_the_pair_the_other_way_round(
    study: Study, tmp_path: Path, convention: str
) -> None:
    first = {"item_id": "p1", "output_a": "p1-x", "output_b": "p1-y", "candidate_a": "x",
             "candidate_b": "y", "criterion": "pref", "pairwise_values": convention}
    run_import(_csv(tmp_path / "1.csv", [
        {**first, "order": "ab", "rater_id": "h1", "rater_kind": "human", "value": "A"}]),
        "--study", study.slug)
    # The second file lists y first. h2 prefers x, shown second ("ba" in the file's own terms
    # means output_b = x was shown first; here order "ab": y was shown first). A judge rated
    # both orders and preferred x both times.
    other = {**first, "output_a": "p1-y", "output_b": "p1-x", "candidate_a": "y",
             "candidate_b": "x"}

    def value(x_better: bool, order: str) -> str:
        if convention == "outputs":
            return "B" if x_better else "A"  # A = this row's output_a = y
        shown_first_is_x = order == "ba"
        return "A" if x_better == shown_first_is_x else "B"

    rows = [{**other, "order": "ab", "rater_id": "h2", "rater_kind": "human",
             "value": value(True, "ab")}]
    rows += [{**other, "order": o, "rater_id": "j", "rater_kind": "judge",
              "value": value(True, o)} for o in ("ab", "ba")]
    summary, _, _ = run_import(_csv(tmp_path / "2.csv", rows), "--study", study.slug)
    assert summary["warnings"] == [] and summary.get("created", {}).get("comparison", 0) == 0
    [comp] = Comparison.objects.filter(study=study).select_related("output_a__candidate")
    assert comp.output_a.candidate.name == "x"
    assert sorted(Annotation.objects.filter(comparison=comp).values_list("value", flat=True)) == [
        "A", "A"]
    [verdict] = Verdict.objects.filter(comparison=comp)
    assert verdict.value == "A" and verdict.details["position_inconsistent"] is False


def test_a_plain_rater_column_is_refused_not_ignored(study: Study, tmp_path: Path) -> None:
    rows = [{**r, "rater": "alice"} for r in _single([4])]
    error = import_error(_csv(tmp_path / "r.csv", rows), "--study", study.slug)
    assert "line 2: rater: must be a JSON object of rater.<key> values" in error
