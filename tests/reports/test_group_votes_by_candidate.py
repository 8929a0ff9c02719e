"""Agreement with one rater group's votes, and every cell metric per candidate (issue 25, §2).

Two studies are imported through `import_ratings` and reported through `report agreement`
(the CLI), and every figure is recomputed here from the rows written to the file, with plain
counting, scikit-learn and scipy:

- a multi-turn pairwise study in the shape of MT-Bench's human judgements: each item compares
  one of three model pairs, rated by experts and authors (`rater.group`), some votes ties, and
  a judge. The paper's figure is the judge against each *expert vote*, with ties and without
  (its setups S1 and S2), per turn and over both: the `judge_vs_group` rows' per-vote metrics;
- a story study (three systems per prompt, two humans, a 1..5 judge): the per-system
  correlation table, one row per candidate of the `by_candidate` table.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score

from reports.agreement.present.export import table_csv
from reports.agreement.results import AgreementResult

pytestmark = pytest.mark.django_db

N = 24
PAIRS = [("gpt-4", "claude-v1"), ("gpt-4", "vicuna-13b"), ("claude-v1", "vicuna-13b")]
GROUPS = {"e1": "expert", "e2": "expert", "a1": "author", "a2": "author", "a3": "author"}
CODES = {"tie": 0, "A": 1, "B": 2}


def _pairwise_votes() -> tuple[dict[str, dict[int, str]], dict[int, str]]:
    """Votes per rater (item -> A / B / tie; a rater skips some items) and the judge's."""
    rng = np.random.default_rng(25)
    truth = rng.choice(["A", "B", "tie"], N, p=[0.45, 0.4, 0.15])
    votes: dict[str, dict[int, str]] = {}
    for rater in GROUPS:
        noise = 0.2 if rater.startswith("e") else 0.35
        votes[rater] = {
            i: (str(rng.choice(["A", "B", "tie"])) if rng.random() < noise else str(truth[i]))
            for i in range(N)
            if rater.startswith("e") or rng.random() < 0.8
        }
    judge = {
        i: (str(rng.choice(["A", "B", "tie"])) if rng.random() < 0.3 else str(truth[i]))
        for i in range(N)
    }
    return votes, judge


VOTES, JUDGE = _pairwise_votes()


def _turn(i: int) -> str:
    return "1" if i < N // 2 else "2"


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    header: list[str] = []
    for r in rows:
        header += [k for k in r if k not in header]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def _run(tmp_path: Path, slug: str, rows: list[dict[str, Any]], lead: Any,
         params: dict[str, Any], *extra: str) -> dict[str, Any]:
    path = tmp_path / f"{slug}.csv"
    _write(path, rows)
    call_command("import_ratings", str(path), "--study", slug, "--owner", lead.username, *extra,
                 stdout=io.StringIO(), stderr=io.StringIO())
    out = tmp_path / f"{slug}.json"
    call_command("report", "agreement", "--study", slug, "--params", json.dumps(params),
                 "--out", str(out), stdout=io.StringIO())
    result: dict[str, Any] = json.loads(out.read_text())["result"]
    return result


@pytest.fixture
def pairwise(lead: Any, tmp_path: Path) -> dict[str, Any]:
    rows = []
    for i in range(N):
        a, b = PAIRS[i % 3]
        base = {"item_id": f"q{i}", "stratum.turn": _turn(i), "output_a": f"q{i}-{a}",
                "output_b": f"q{i}-{b}", "candidate_a": a, "candidate_b": b,
                "criterion": "pref", "pairwise_values": "outputs"}
        for rater, mine in VOTES.items():
            if i in mine:
                rows.append({**base, "rater_id": rater, "rater_kind": "human",
                             "rater.group": GROUPS[rater], "value": mine[i]})
        rows.append({**base, "rater_id": "gpt4-judge", "rater_kind": "judge", "rater.group": "",
                     "value": JUDGE[i]})
    params = {"seed": 1, "n_resamples": 200, "min_items": 4, "rater_groups": "group",
              "by_candidate": True}
    return _run(tmp_path, "mtb", rows, lead, params)


def _per_vote(group: str, items: list[int], ties: bool) -> tuple[float, int]:
    """The judge against each vote of the group's raters on `items`, counted here."""
    pairs = [(VOTES[r][i], JUDGE[i]) for r in GROUPS if GROUPS[r] == group
             for i in items if i in VOTES[r]]
    if not ties:
        pairs = [(v, j) for v, j in pairs if v != "tie" and j != "tie"]
    return sum(v == j for v, j in pairs) / len(pairs), len(pairs)


def _row(result: dict[str, Any], table: str, **match: Any) -> dict[str, Any]:
    rows = [r for r in result[table] if all(r.get(k) == v for k, v in match.items())]
    assert len(rows) == 1, (table, match, len(rows))
    return rows[0]


def test_the_judge_against_each_vote_of_one_group_per_turn_and_overall(
    pairwise: dict[str, Any]
) -> None:
    result = pairwise
    assert result["version"] == 4
    strata = {"overall": list(range(N)), "1": list(range(N // 2)), "2": list(range(N // 2, N))}
    for group in ("expert", "author"):
        for label, items in strata.items():
            row = _row(result, "rater_groups", kind="judge_vs_group", group=group, label=label)
            with_ties, n_with = _per_vote(group, items, ties=True)
            without, n_without = _per_vote(group, items, ties=False)
            got = row["metrics"]
            assert got["agreement_per_vote"]["value"] == pytest.approx(with_ties, abs=1e-12)
            assert got["agreement_per_vote"]["n"] == n_with
            assert got["agreement_per_vote_without_ties"]["value"] == pytest.approx(
                without, abs=1e-12)
            assert got["agreement_per_vote_without_ties"]["n"] == n_without
            low, high = got["agreement_per_vote"]["ci_low"], got["agreement_per_vote"]["ci_high"]
            assert low <= with_ties <= high
    # Not the all-votes figure of the main table (experts and authors mixed) ...
    cell = _row(result, "cells", label="overall")
    everyone = [(VOTES[r][i], JUDGE[i]) for r in GROUPS for i in range(N) if i in VOTES[r]]
    assert cell["metrics"]["agreement_per_vote"]["value"] == pytest.approx(
        sum(v == j for v, j in everyone) / len(everyone), abs=1e-12)
    expert = _row(result, "rater_groups", kind="judge_vs_group", group="expert", label="overall")
    assert expert["metrics"]["agreement_per_vote"]["value"] != pytest.approx(
        cell["metrics"]["agreement_per_vote"]["value"])
    # ... nor the expert majority (accuracy of the same row).
    assert expert["metrics"]["agreement_per_vote"]["value"] != pytest.approx(
        expert["metrics"]["accuracy"]["value"])
    # The CSV export has the figure by name.
    typed = AgreementResult.from_json(result)
    text = table_csv(typed, "rater_groups")
    [line] = [r for r in csv.DictReader(io.StringIO(text))
              if r["comparison"].endswith("vs expert") and r["stratum"] == "overall"
              and r["metric"] == "agreement_per_vote_without_ties"]
    assert float(line["value"]) == pytest.approx(_per_vote("expert", strata["overall"], False)[0])


def _label(votes: list[str]) -> str | None:
    """The main table's human label of a comparison: the majority; an exact tie, none."""
    counts = {v: votes.count(v) for v in set(votes)}
    top = max(counts.values())
    winners = [v for v, c in counts.items() if c == top]
    return winners[0] if len(winners) == 1 else None


def test_every_pairwise_cell_metric_per_candidate(pairwise: dict[str, Any]) -> None:
    result = pairwise
    rows = [r for r in result["by_candidate"] if r["label"] == "overall"]
    assert [r["candidate"] for r in rows] == ["claude-v1", "gpt-4", "vicuna-13b"]
    for row in rows:
        # A comparison counts for both of its candidates.
        items = [i for i in range(N) if row["candidate"] in PAIRS[i % 3]]
        labelled = [(i, lab) for i in items
                    if (lab := _label([VOTES[r][i] for r in GROUPS if i in VOTES[r]]))]
        human = [CODES[lab] for _, lab in labelled]
        judge = [CODES[JUDGE[i]] for i, _ in labelled]
        m = row["metrics"]
        assert row["n_subjects"] == len(labelled) and row["primary_metric"] == "kappa"
        assert m["accuracy"]["value"] == pytest.approx(accuracy_score(human, judge), abs=1e-12)
        assert m["kappa"]["value"] == pytest.approx(
            cohen_kappa_score(human, judge, labels=[0, 1, 2]), abs=1e-12)
        votes = [(VOTES[r][i], JUDGE[i]) for r in GROUPS for i in items if i in VOTES[r]]
        assert m["agreement_per_vote"]["value"] == pytest.approx(
            sum(v == j for v, j in votes) / len(votes), abs=1e-12)
    # Per stratum too: turn 2 of gpt-4.
    row = _row(result, "by_candidate", candidate="gpt-4", label="2")
    items = [i for i in range(N // 2, N) if "gpt-4" in PAIRS[i % 3]]
    votes = [(VOTES[r][i], JUDGE[i]) for r in GROUPS for i in items if i in VOTES[r]]
    assert row["metrics"]["agreement_per_vote"]["value"] == pytest.approx(
        sum(v == j for v, j in votes) / len(votes), abs=1e-12)


SYSTEMS = ["gpt2", "fusion", "human"]


def test_a_per_system_correlation_table_in_one_report(lead: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 12
    quality = {s: rng.integers(1, 6, n) for s in SYSTEMS}
    humans = {(h, s): np.clip(quality[s] + rng.integers(-1, 2, n), 1, 5)
              for h in ("h1", "h2") for s in SYSTEMS}
    judge = {s: np.clip(quality[s] + rng.integers(-2, 2, n), 1, 5) for s in SYSTEMS}
    rows = []
    for s in SYSTEMS:
        for i in range(n):
            base = {"item_id": f"p{i}", "output_id": f"p{i}-{s}", "candidate": s,
                    "criterion": "coherence"}
            for h in ("h1", "h2"):
                rows.append({**base, "rater_id": h, "rater_kind": "human",
                             "value": int(humans[h, s][i])})
            rows.append({**base, "rater_id": "llm", "rater_kind": "judge",
                         "value": int(judge[s][i])})
    params = {"seed": 1, "n_resamples": 200, "min_items": 4, "by_candidate": True}
    result = _run(tmp_path, "stories", rows, lead, params, "--scale", "coherence=ordinal:1-5")
    by = {r["candidate"]: r for r in result["by_candidate"]}
    assert sorted(by) == sorted(SYSTEMS)
    for s in SYSTEMS:
        mean = (humans["h1", s] + humans["h2", s]) / 2
        m = by[s]["metrics"]
        assert by[s]["n_subjects"] == n and by[s]["primary_metric"] == "qwk"
        assert m["spearman"]["value"] == pytest.approx(
            stats.spearmanr(judge[s], mean)[0], abs=1e-12)
        assert m["kendall"]["value"] == pytest.approx(
            stats.kendalltau(judge[s], mean)[0], abs=1e-12)
        assert m["pearson"]["value"] == pytest.approx(
            stats.pearsonr(judge[s], mean)[0], abs=1e-12)
        assert m["qwk"]["value"] == pytest.approx(
            cohen_kappa_score(judge[s], np.floor(mean + 0.5), weights="quadratic",
                              labels=[1, 2, 3, 4, 5]), abs=1e-12)
    typed = AgreementResult.from_json(result)
    assert typed.by_candidate is not None and {r.candidate for r in typed.by_candidate} == set(
        SYSTEMS)
    lines = list(csv.DictReader(io.StringIO(table_csv(typed, "by_candidate"))))
    [fusion] = [r for r in lines if r["candidate"] == "fusion" and r["metric"] == "spearman"]
    assert fusion["primary"] == "False" and float(fusion["value"]) == pytest.approx(
        by["fusion"]["metrics"]["spearman"]["value"])


def test_the_table_is_absent_without_the_parameter(lead: Any, tmp_path: Path) -> None:
    rows = [{"item_id": "q0", "output_id": "o0", "rater_id": r, "rater_kind": k,
             "criterion": "ok", "value": "pass"} for r, k in (("h", "human"), ("j", "judge"))]
    result = _run(tmp_path, "plain", rows, lead, {"n_resamples": 100})
    assert result["params"]["by_candidate"] is False and "by_candidate" not in result
    typed = AgreementResult.from_json(result)
    assert typed.by_candidate is None
    assert table_csv(typed, "by_candidate").count("\n") == 1  # the header only
