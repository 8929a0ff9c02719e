"""docs/import-ratings.md, "Worked examples": the files, commands and figures printed there are
the ones the documented path produces (issue 15, section 6).

The first test reads every example from the page (the files in its ```csv / ```json blocks,
the commands in its ```console blocks and the figures in its tables), runs the commands
through `call_command` in a scratch directory and checks each figure, so changing the code or
the page alone fails here. The second checks the page's figures against counts and
correlations computed here from the same files, with plain Python and scipy (not ReviewHub's
code), so a figure the page and the code agree on is also the right one.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from django.core.management import CommandError, call_command
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score

from studies.models import Study

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "import-ratings.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n(.*?)<!-- /example -->", re.S)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
FIGURE_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|", re.M)
PATH = re.compile(r"^(\w+)(?:\[([^\]]*)\])?((?:\.\w+)*)$")


@dataclass
class Example:
    """One example of the page: its files (name -> text) and its steps in order: ("run",
    command, expected output lines) or ("figure", path, documented value)."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    steps: list[tuple[str, Any, Any]] = field(default_factory=list)


def _examples() -> list[Example]:
    text = DOC.read_text(encoding="utf-8")
    out = []
    for name, body in EXAMPLE.findall(text):
        ex = Example(name)
        # Fences and figure rows in the order they appear.
        tokens = [(m.start(), "fence", m) for m in FENCE.finditer(body)]
        tokens += [(m.start(), "figure", m) for m in FIGURE_ROW.finditer(body)]
        for _, kind, m in sorted(tokens, key=lambda t: t[0]):
            if kind == "figure":
                ex.steps.append(("figure", m.group(1), m.group(2).strip()))
                continue
            lang, content = m.group(1), m.group(2)
            before = body[:m.start()]
            if lang in ("csv", "json"):
                # The file is the last one of its kind named before the block.
                ext = "csv" if lang == "csv" else "jsonl"
                [*_, fname] = re.findall(rf"`([\w.-]+\.{ext})`", before)
                ex.files[fname] = content
            elif lang == "console":
                for line in content.splitlines():
                    if line.startswith("$ python manage.py "):
                        ex.steps.append(("run", shlex.split(line[19:]), []))
                    elif line.strip():
                        ex.steps[-1][2].append(line)
        out.append(ex)
    return out


def _row(result: dict[str, Any], table: str, selector: str) -> dict[str, Any]:
    rows = result[table]
    for part in [p.strip() for p in selector.split(",") if p.strip()]:
        key, value = (x.strip() for x in part.split("=", 1))
        if key == "judge":
            ids = {j["id"] for j in result["judges"] if j["judge"] == value}
            rows = [r for r in rows if r.get("judge_version") in ids]
        elif key == "stratum":
            rows = [r for r in rows if r["label"] == value]
        else:
            rows = [r for r in rows if str(r.get(key)) == value]
    assert len(rows) == 1, f"{table}[{selector}] matches {len(rows)} rows"
    return rows[0]


def _figure(path: str, result: dict[str, Any] | None, summary: dict[str, Any] | None) -> Any:
    m = PATH.match(path)
    assert m, f"not a figure path: {path!r}"
    table, selector, fields = m.group(1), m.group(2), m.group(3)
    if table == "summary":
        assert summary is not None, f"{path}: no import has run yet"
        node: Any = summary
    else:
        assert result is not None, f"{path}: no report has run yet"
        node = _row(result, table, selector or "") if selector is not None else result[table]
    for name in [f for f in fields.split(".") if f]:
        node = node[name]
    if isinstance(node, dict) and "value" in node:
        node = node["value"]
    return len(node) if isinstance(node, list) else node


def _check(path: str, documented: str, got: Any) -> None:
    if re.fullmatch(r"-?\d+", documented):
        assert got == int(documented), f"{path}: the page says {documented}, the report {got}"
    else:
        assert re.fullmatch(r"-?\d+\.\d{1,4}", documented), f"{path}: {documented!r}"
        assert got is not None and round(float(got), 4) == float(documented), (
            f"{path}: the page says {documented}, the report {got}"
        )


def _run(args: list[str]) -> tuple[str, str, str | None]:
    """(stdout, stderr, the CommandError's text or None)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), str(exc)
    return out.getvalue(), err.getvalue(), None


EXAMPLES = _examples()


def test_the_page_has_an_example_for_every_convention() -> None:
    assert [e.name for e in EXAMPLES] == [
        "both-orders", "pairwise-values", "per-vote", "levels", "file-format"]
    for ex in EXAMPLES:
        assert ex.files and any(s[0] == "run" for s in ex.steps), ex.name
        assert sum(s[0] == "figure" for s in ex.steps) >= 3, ex.name


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_doc_example_figures_are_what_the_importer_and_report_print(
    example: Example, lead: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An example may run a file of an earlier one (the page is read in order).
    for earlier in EXAMPLES[: EXAMPLES.index(example) + 1]:
        for name, content in earlier.files.items():
            (tmp_path / name).write_text(content, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    checked = 0
    for kind, what, expected in example.steps:
        if kind == "figure":
            _check(what, expected, _figure(what, result, summary))
            checked += 1
            continue
        out, err, error = _run(what)
        errors = [line for line in expected if line.startswith("CommandError: ")]
        if errors:
            assert expected[0] == errors[0]
            assert error == "\n".join([expected[0].removeprefix("CommandError: "), *expected[1:]])
            slug = what[what.index("--study") + 1]
            assert not Study.objects.filter(slug=slug).exists()  # nothing left behind
            continue
        assert error is None, f"{what}: {error}"
        for line in expected:
            assert line.startswith("warning: ") and line in err.splitlines(), line
        if what[0] == "import_ratings":
            summary = json.loads(out[out.index("{\n"):])
            assert summary["dry_run"] is False
            if not expected:
                assert summary["warnings"] == [] and err == ""
        elif what[0] == "report":
            result = json.loads((tmp_path / what[what.index("--out") + 1]).read_text())["result"]
    assert checked >= 3


# --- the page's figures against an independent count ----------------------------------------


def _doc_figures(name: str) -> dict[str, float]:
    """The documented figures of one example, by path (the last table wins for a path)."""
    [ex] = [e for e in EXAMPLES if e.name == name]
    return {path: float(value) for kind, path, value in ex.steps if kind == "figure"}


def _rows(name: str, fname: str) -> list[dict[str, str]]:
    [ex] = [e for e in EXAMPLES if e.name == name]
    return list(csv.DictReader(io.StringIO(ex.files[fname])))


def _majority(votes: list[str]) -> str:
    top = max(votes.count(v) for v in set(votes))
    winners = {v for v in set(votes) if votes.count(v) == top}
    return winners.pop() if len(winners) == 1 else "tie"


def test_doc_figures_match_an_independent_count() -> None:
    swap = {"A": "B", "B": "A", "tie": "tie"}
    # §1: per-order accuracy, its mean, both orders right, the same winner in both orders.
    rows = _rows("both-orders", "orders.csv")
    human = {r["item_id"]: r["value"] for r in rows if r["rater_kind"] == "human"}
    judge = {(r["item_id"], r["order"]): r["value"] for r in rows if r["rater_kind"] == "judge"}

    def order_figures(read: dict[tuple[str, str], str]) -> dict[str, float]:
        ab = [read[i, "ab"] == h for i, h in human.items()]
        ba = [read[i, "ba"] == h for i, h in human.items()]
        collapsed = [read[i, "ab"] if read[i, "ab"] == read[i, "ba"] else "tie" for i in human]
        return {
            "accuracy_ab": statistics.mean(ab),
            "accuracy_ba": statistics.mean(ba),
            "accuracy_mean": (statistics.mean(ab) + statistics.mean(ba)) / 2,
            "accuracy_consistent": statistics.mean(a and b for a, b in zip(ab, ba, strict=True)),
            "positional_agreement": statistics.mean(read[i, "ab"] == read[i, "ba"] for i in human),
            "accuracy": statistics.mean(
                c == h for c, h in zip(collapsed, human.values(), strict=True)
            ),
        }

    def compare(name: str, figures: dict[str, float]) -> None:
        doc = _doc_figures(name)
        for path, value in doc.items():
            key = path.rsplit(".", 1)[-1]
            if key in figures:
                assert value == pytest.approx(figures[key], abs=5e-5), path

    compare("both-orders", order_figures(judge))
    wrong = {(i, o): swap[v] if o == "ba" else v for (i, o), v in judge.items()}
    [ex] = [e for e in EXAMPLES if e.name == "pairwise-values"]
    cut = next(k for k, s in enumerate(ex.steps) if s[0] == "run" and "wrong" in s[1])
    right_doc = {p: float(v) for kind, p, v in ex.steps[:cut] if kind == "figure"}
    wrong_doc = {p: float(v) for kind, p, v in ex.steps[cut:] if kind == "figure"}
    for doc, figures in ((right_doc, order_figures(judge)), (wrong_doc, order_figures(wrong))):
        for path, value in doc.items():
            key = path.rsplit(".", 1)[-1]
            if key in figures:
                assert value == pytest.approx(figures[key], abs=5e-5), path
    # The presented file is the outputs file with every swapped-order value named the other way.
    presented = _rows("pairwise-values", "orders-presented.csv")
    assert [swap[r["value"]] if r["order"] == "ba" else r["value"] for r in presented] == [
        r["value"] for r in rows
    ]

    # §3: judge vs majority, vs every vote, and pairs of humans (with and without ties).
    rows = _rows("per-vote", "votes.csv")
    votes: dict[str, list[str]] = {}
    for r in rows:
        if r["rater_kind"] == "human":
            votes.setdefault(r["item_id"], []).append(r["value"])
    jv = {r["item_id"]: r["value"] for r in rows if r["rater_kind"] == "judge"}
    maj = {i: _majority(v) for i, v in votes.items()}
    decided = [i for i in votes if maj[i] != "tie" and jv[i] != "tie"]
    pairs = [(v[a], v[b]) for v in votes.values() for a in range(len(v))
             for b in range(a + 1, len(v))]
    untied = [(x, y) for x, y in pairs if "tie" not in (x, y)]
    vote_pairs = [(jv[i], x) for i, v in votes.items() for x in v]
    vote_untied = [(j, x) for j, x in vote_pairs if "tie" not in (j, x)]
    compare("per-vote", {
        "accuracy": statistics.mean(jv[i] == maj[i] for i in votes),
        "agreement_without_ties": statistics.mean(jv[i] == maj[i] for i in decided),
        "agreement_per_vote": statistics.mean(j == x for j, x in vote_pairs),
        "agreement_per_vote_without_ties": statistics.mean(j == x for j, x in vote_untied),
        "pooled_agreement": statistics.mean(x == y for x, y in pairs),
        "pooled_agreement_without_ties": statistics.mean(x == y for x, y in untied),
    })

    # §4: scipy at each level (Kendall's tau-b is scipy's default).
    rows = _rows("levels", "levels.csv")
    score = {(r["rater_kind"], r["item_id"], r["candidate"]): float(r["value"]) for r in rows}
    keys = sorted({(i, c) for _, i, c in score})
    h = [score["human", i, c] for i, c in keys]
    j = [score["judge", i, c] for i, c in keys]
    fns = {"spearman": stats.spearmanr, "pearson": stats.pearsonr, "kendall": stats.kendalltau}
    doc = _doc_figures("levels")
    base = "correlation_levels[judge=j, stratum=overall]"
    for method, fn in fns.items():
        assert doc[f"{base}.dataset.{method}"] == pytest.approx(fn(j, h)[0], abs=5e-5)
        per_item = []
        for item in sorted({i for i, _ in keys}):
            hi = [score["human", i, c] for i, c in keys if i == item]
            ji = [score["judge", i, c] for i, c in keys if i == item]
            if len(set(hi)) > 1 and len(set(ji)) > 1:  # a constant item has no correlation
                per_item.append(fn(ji, hi)[0])
        assert doc[f"{base}.sample.{method}"] == pytest.approx(
            statistics.mean(per_item), abs=5e-5)
        cands = sorted({c for _, c in keys})
        mj = [statistics.mean(score["judge", i, c] for i, cc in keys if cc == c) for c in cands]
        mh = [statistics.mean(score["human", i, c] for i, cc in keys if cc == c) for c in cands]
        assert doc[f"{base}.system.{method}"] == pytest.approx(fn(mj, mh)[0], abs=5e-5)
    assert doc[f"{base}.sample.n_items"] == len(per_item)

    # §5: human means under an interval criterion against a judge's scores (krippendorff's
    # interval alpha, scipy's correlations).
    means = {r["item_id"]: float(r["value"]) for r in _rows("file-format", "means.csv")}
    scored = {r["item_id"]: float(r["value"]) for r in _rows("file-format", "means-j.csv")}
    hs = [means[i] for i in sorted(means)]
    js = [scored[i] for i in sorted(means)]
    doc = _doc_figures("file-format")
    cell = "cells[judge=j, stratum=overall].metrics"
    assert doc[f"{cell}.alpha_interval"] == pytest.approx(
        krippendorff.alpha(reliability_data=[js, hs], level_of_measurement="interval"), abs=5e-5)
    for method, fn in fns.items():
        assert doc[f"{cell}.{method}"] == pytest.approx(fn(js, hs)[0], abs=5e-5)
    assert doc[f"{cell}.mae"] == pytest.approx(
        statistics.mean(abs(a - b) for a, b in zip(js, hs, strict=True)), abs=5e-5)
    assert doc[f"{cell}.signed_bias"] == pytest.approx(
        statistics.mean(a - b for a, b in zip(js, hs, strict=True)), abs=5e-5)

    # §5: the continuous judge scores against the rater's own.
    rows = _rows("file-format", "means-judge.csv")
    hs = [float(r["value"]) for r in rows if r["rater_kind"] == "human"]
    js = [float(r["value"]) for r in rows if r["rater_kind"] == "judge"]
    doc = _doc_figures("file-format")
    cell = "cells[judge=mean, stratum=overall].metrics"
    assert doc[f"{cell}.pearson"] == pytest.approx(stats.pearsonr(js, hs)[0], abs=5e-5)
    assert doc[f"{cell}.spearman"] == pytest.approx(stats.spearmanr(js, hs)[0], abs=5e-5)
    mae = statistics.mean(abs(a - b) for a, b in zip(js, hs, strict=True))
    assert doc[f"{cell}.mae"] == pytest.approx(mae, abs=5e-5)

    # §5, rater groups: the experts' majority, the crowd rater and the judge, with
    # scikit-learn; the experts among themselves with `krippendorff` and a count of pairs.
    rows = _rows("file-format", "groups.csv")
    items = sorted({r["item_id"] for r in rows})
    by = {(r["rater_id"], r["item_id"]): int(r["value"] == "pass") for r in rows}
    experts = ["e1", "e2", "e3"]
    expert = [int(sum(by[e, i] for e in experts) >= 2) for i in items]
    crowd = [by["c1", i] for i in items]
    judge = [by["j", i] for i in items]
    doc = _doc_figures("file-format")
    vs = "rater_groups[kind=judge_vs_group, judge=j, group={}].metrics.{}"
    assert doc[vs.format("expert", "accuracy")] == pytest.approx(accuracy_score(expert, judge))
    assert doc[vs.format("expert", "kappa")] == pytest.approx(cohen_kappa_score(judge, expert))
    assert doc[vs.format("crowd", "accuracy")] == pytest.approx(accuracy_score(crowd, judge))
    expert_votes = [by[e, i] == by["j", i] for e in experts for i in items]
    assert doc[vs.format("expert", "agreement_per_vote")] == pytest.approx(
        statistics.mean(expert_votes), abs=5e-5)
    every_vote = [by[r, i] == by["j", i] for r in ["c1", "u1", *experts] for i in items]
    assert doc["cells[judge=j, stratum=overall].metrics.agreement_per_vote"] == pytest.approx(
        statistics.mean(every_vote), abs=5e-5)
    pair = "rater_groups[kind=group_vs_group, group=crowd].metrics.{}"
    assert doc[pair.format("accuracy")] == pytest.approx(accuracy_score(expert, crowd))
    assert doc[pair.format("kappa")] == pytest.approx(cohen_kappa_score(crowd, expert))
    matrix = np.array([[by[e, i] for i in items] for e in experts], dtype=float)
    within = "rater_groups[kind=within_group, group=expert]"
    assert doc[f"{within}.metrics.krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal",
                           value_domain=[0.0, 1.0]), abs=5e-5)
    pairs = [(col[a], col[b]) for col in matrix.T for a, b in ((0, 1), (0, 2), (1, 2))]
    assert doc[f"{within}.n_pairs"] == len(pairs)
    assert doc[f"{within}.metrics.pooled_agreement"] == pytest.approx(
        statistics.mean(float(x == y) for x, y in pairs), abs=5e-5)
