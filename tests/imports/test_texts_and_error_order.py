"""Issue 25, section 1: ratings files as users have them.

The candidate of an output may come from the texts file (`--texts`); a conflict between the two
files names both lines; the errors are ordered so that the first one names the fix (a column
the file lacks first, then a collision saying which column would separate the outputs).
Every import goes through the documented command (`import_ratings`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from judges.models import Verdict
from studies.models import Comparison, Item, Output, Study
from tests.imports.cli import import_error, run_import

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "import-ratings.md"


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


# A multi-turn pairwise set as published: each question has several model pairs and two turns;
# the ratings name only the outputs, the texts file gives each output's model.
MODELS = ("gpt-4", "claude-v1", "vicuna-13b")
PAIRS = (("gpt-4", "claude-v1"), ("gpt-4", "vicuna-13b"), ("claude-v1", "vicuna-13b"))


def _multiturn(tmp_path: Path) -> tuple[Path, Path, dict[str, tuple[str, str]]]:
    ratings: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    expected: dict[str, tuple[str, str]] = {}  # output id -> (item, model)
    for q in range(3):
        for turn in (1, 2):
            item = f"q{q}-t{turn}"
            texts.append({"item_id": item, "input": f"question {q}, turn {turn}"})
            for model in MODELS:
                out = f"{item}-{model}"
                texts.append({"item_id": item, "output_id": out, "text": f"answer {out}",
                              "candidate": model})
                expected[out] = (item, model)
            for i, (a, b) in enumerate(PAIRS):
                ratings.append({
                    "item_id": item, "output_a": f"{item}-{a}", "output_b": f"{item}-{b}",
                    "rater_id": f"expert{i}", "rater_kind": "human", "criterion": "overall",
                    "value": "A" if (q + turn + i) % 2 else "B", "pairwise_values": "outputs",
                })
                ratings.append({
                    "item_id": item, "output_a": f"{item}-{a}", "output_b": f"{item}-{b}",
                    "rater_id": "gpt4-pair", "rater_kind": "judge", "criterion": "overall",
                    "value": "A", "pairwise_values": "outputs",
                })
    return (_jsonl(tmp_path / "ratings.jsonl", ratings), _jsonl(tmp_path / "texts.jsonl", texts),
            expected)


def test_candidates_of_a_multiturn_pairwise_file_come_from_the_texts_file(
    study: Study, tmp_path: Path
) -> None:
    ratings, texts, expected = _multiturn(tmp_path)
    summary, out, err = run_import(ratings, "--study", study.slug, "--texts", str(texts))
    assert "was ignored" not in err
    assert "position" not in out  # no position stand-ins: the candidates are known
    # Each output (its text names its id) is of the model the texts file gives.
    outputs = {
        (o.item.external_id, o.candidate.name, o.text)
        for o in Output.objects.filter(item__study=study).select_related("item", "candidate")
    }
    assert outputs == {(item, model, f"answer {out}") for out, (item, model) in expected.items()}
    # Three comparisons per item (one per model pair), each with its two models.
    assert Item.objects.filter(study=study).count() == 6
    pairs = {
        (c.item.external_id, frozenset((c.output_a.candidate.name, c.output_b.candidate.name)))
        for c in Comparison.objects.filter(item__study=study).select_related(
            "item", "output_a__candidate", "output_b__candidate")
    }
    assert len(pairs) == 18
    assert {p for _, p in pairs} == {frozenset(p) for p in PAIRS}
    assert Verdict.objects.filter(comparison__item__study=study).count() == 18
    assert summary["rows"] == 36


def test_a_candidate_for_a_single_output_comes_from_the_texts_file(
    study: Study, tmp_path: Path
) -> None:
    ratings = _csv(tmp_path / "r.csv", [
        {"item_id": "s1", "output_id": f"s1-{m}", "rater_id": "ann", "rater_kind": "human",
         "criterion": "coherence", "value": str(v)}
        for v, m in enumerate(MODELS, start=1)
    ])
    texts = _jsonl(tmp_path / "t.jsonl", [
        {"output_id": f"s1-{m}", "candidate": m} for m in MODELS
    ])
    run_import(ratings, "--study", study.slug, "--texts", str(texts),
               "--scale", "coherence=ordinal:1-5")
    # The file's values 1, 2, 3 follow MODELS: each output is of the right model.
    outputs = Output.objects.filter(item__study=study).select_related("candidate")
    assert {o.candidate.name: o.annotations.get().value for o in outputs} \
        == {m: str(v) for v, m in enumerate(MODELS, start=1)}


def test_a_candidate_conflict_between_the_files_names_both_lines(
    study: Study, tmp_path: Path
) -> None:
    ratings = _csv(tmp_path / "r.csv", [
        {"item_id": "s1", "output_id": "o1", "candidate": "gpt-4", "rater_id": "ann",
         "rater_kind": "human", "criterion": "ok", "value": "pass"},
        {"item_id": "s1", "output_id": "o2", "candidate": "claude-v1", "rater_id": "ann",
         "rater_kind": "human", "criterion": "ok", "value": "fail"},
    ])
    texts = _jsonl(tmp_path / "t.jsonl", [
        {"output_id": "o1", "text": "x", "candidate": "gpt-4"},
        {"output_id": "o2", "text": "y", "candidate": "vicuna-13b"},
    ])
    error = import_error(ratings, "--study", study.slug, "--texts", str(texts))
    assert ("line 3: candidate: output 'o2' is candidate 'claude-v1' on line 3 of the ratings "
            "file but 'vicuna-13b' on line 2 of the texts file") in error
    assert "o1" not in error.split("\n", 1)[1]  # the agreeing output is no problem
    assert not Item.objects.filter(study=study).exists()
    # Pairs: candidate_a against the texts file's candidate of output_a.
    pair = _csv(tmp_path / "p.csv", [
        {"item_id": "s1", "output_a": "o1", "output_b": "o2", "candidate_a": "claude-v1",
         "candidate_b": "vicuna-13b", "rater_id": "ann", "rater_kind": "human",
         "criterion": "pref", "value": "A", "pairwise_values": "outputs"},
    ])
    error = import_error(pair, "--study", study.slug, "--texts", str(texts))
    assert ("line 2: candidate_a: output 'o1' is candidate 'claude-v1' on line 2 of the ratings "
            "file but 'gpt-4' on line 1 of the texts file") in error
    # Within the texts file, one output named as two candidates.
    twice = _jsonl(tmp_path / "t2.jsonl", [
        {"output_id": "o1", "candidate": "gpt-4"},
        {"output_id": "o1", "candidate": "claude-v1"},
    ])
    error = import_error(ratings, "--study", study.slug, "--texts", str(twice))
    assert ("texts line 2: candidate: output 'o1' is candidate 'claude-v1' on line 2 of the "
            "texts file but 'gpt-4' on line 1 of the texts file") in error


def _first_problem(error: str) -> str:
    return error.splitlines()[1].strip()


def test_a_story_file_without_a_candidate_column_gets_the_hint_first(
    study: Study, tmp_path: Path
) -> None:
    # 4,000 lines: 200 prompts x 5 systems x 4 annotators, no candidate column; the system is
    # in a column the format does not know.
    systems = ("gpt2", "bart", "hint", "fusion", "human")
    rows = [
        {"item_id": f"p{p}", "output_id": f"p{p}-{s}", "model": s, "rater_id": f"a{r}",
         "rater_kind": "human", "criterion": "coherence", "value": str(1 + (p + r) % 5)}
        for p in range(200) for s in systems for r in range(4)
    ]
    assert len(rows) == 4000
    error = import_error(_csv(tmp_path / "stories.csv", rows), "--study", study.slug,
                         "--scale", "coherence=ordinal:1-5")
    first = _first_problem(error)
    assert first.startswith("line 6: output_id: item 'p0' already has output 'p0-gpt2' of "
                            "candidate 'imported'")
    assert "add a candidate column" in first
    assert "column 'model' differs between line 2 and this line" in first
    assert "add a candidate column" in error.splitlines()[0]  # the summary is that problem
    assert first in DOC.read_text(encoding="utf-8")  # the message docs/import-ratings.md shows
    assert not Item.objects.filter(study=study).exists()


def test_pairs_colliding_on_positions_name_the_candidate_columns(
    study: Study, tmp_path: Path
) -> None:
    rows = [
        {"item_id": "q1", "output_a": f"q1-{a}", "output_b": f"q1-{b}", "model_a": a,
         "model_b": b, "rater_id": "e1", "rater_kind": "human", "criterion": "pref",
         "value": "A", "pairwise_values": "outputs"}
        for a, b in PAIRS
    ]
    error = import_error(_csv(tmp_path / "p.csv", rows), "--study", study.slug)
    first = _first_problem(error)
    assert "candidate 'position-a'" in first or "candidate 'position-b'" in first
    assert "add candidate_a and candidate_b columns" in first
    assert "'model_a'" in first or "'model_b'" in first


def test_a_missing_column_is_listed_before_bad_rows(study: Study, tmp_path: Path) -> None:
    rows = [
        {"item_id": f"i{i}", "output_id": f"o{i}", "rater_id": "ann", "rater_kind": "human",
         "value": "pass"}
        for i in range(300)
    ]
    for i in range(0, 300, 3):
        rows[i]["rater_kind"] = "person"  # a bad row
    error = import_error(_csv(tmp_path / "m.csv", rows), "--study", study.slug)
    lines = error.splitlines()
    assert "\n".join(lines[:3]) in DOC.read_text(encoding="utf-8")  # as the docs show it
    assert lines[1].strip() == "line 1: criterion: the file has no 'criterion' column (every " \
                               "row needs one)"
    assert "line 2: rater_kind: must be 'human' or 'judge'" in lines[2]
    # One problem for the column, not one per row.
    assert sum("criterion" in line for line in lines) == 2  # the summary and the problem
    assert "(and 100 more problems)" in lines[0]


def test_a_stratum_that_describes_the_rater_comes_before_row_problems(
    study: Study, tmp_path: Path
) -> None:
    rows = [
        {"item_id": f"i{i}", "output_id": f"o{i}", "rater_id": r,
         "rater_kind": "person" if (i, r) == (5, "a") else "human", "criterion": "ok",
         "value": "pass",
         "stratum.group": "expert" if r == "e" else "author"}
        for i in range(8) for r in ("e", "a")
    ]
    error = import_error(_csv(tmp_path / "g.csv", rows), "--study", study.slug,
                         "--scale", "ok=binary")
    first = _first_problem(error)
    assert first.startswith("line 3: stratum.group: item 'i0' is 'expert' on line 2")
    assert "rater.group" in first
    assert "line 13: rater_kind: must be 'human' or 'judge'" in error  # listed after it


def test_a_texts_line_describing_a_pair_gives_both_candidates(
    study: Study, tmp_path: Path
) -> None:
    ratings = _csv(tmp_path / "r.csv", [
        {"item_id": "q1", "output_a": f"q1-{a}", "output_b": f"q1-{b}", "rater_id": "e1",
         "rater_kind": "human", "criterion": "pref", "value": "A", "pairwise_values": "outputs"}
        for a, b in PAIRS
    ])
    texts = _jsonl(tmp_path / "t.jsonl", [
        {"output_a": f"q1-{a}", "output_b": f"q1-{b}", "candidate_a": a, "candidate_b": b}
        for a, b in PAIRS
    ])
    _, out, err = run_import(ratings, "--study", study.slug, "--texts", str(texts))
    assert "was ignored" not in err and "position" not in out
    comparisons = Comparison.objects.filter(item__study=study).select_related(
        "output_a__candidate", "output_b__candidate")
    assert {(c.output_a.candidate.name, c.output_b.candidate.name) for c in comparisons} \
        == set(PAIRS)
