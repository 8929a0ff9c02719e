"""The agreement report's correlation levels and per-vote agreement, against scipy and loops.

Simulated data (seeded), built as rating frames: an ordinal criterion on four candidates'
outputs per item (three annotators, a label judge and a continuous judge) and a pairwise
criterion on one comparison per item (sparse human votes, a judge). Every figure is recomputed
here from the raw rows with scipy or plain loops, not with the report's code.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.frames import CriterionRef, JudgeRef, RatingData
from reports.agreement import compute_report, input_fingerprint, params_validate
from reports.agreement.results import AgreementResult, CorrelationLevelsRow, json_safe

N_ITEMS = 60
N_CAND = 4
CANDIDATES = {c: (f"cand-{c}", f"fam-{c}") for c in range(1, N_CAND + 1)}
SCIPY = {
    "pearson": lambda a, b: stats.pearsonr(a, b).statistic,
    "spearman": lambda a, b: stats.spearmanr(a, b).statistic,
    "kendall": lambda a, b: stats.kendalltau(a, b, variant="b").statistic,
}


def _simulated() -> RatingData:
    """Simulated ratings (see the module docstring); items 0 and 1 get one judge score for
    every candidate (constant), item 2 only two judged outputs (too few)."""
    rng = np.random.default_rng(21)
    crits = {
        1: CriterionRef(1, "quality", "Quality", "ordinal", ("1", "2", "3", "4", "5"), 1),
        2: CriterionRef(2, "pref", "Preference", "pairwise", ("A", "B", "tie"), 1),
    }
    judges = {
        10: JudgeRef.of(10, "judge", 1, "", "", "label", "llm"),
        11: JudgeRef.of(11, "metric", 1, "", "", "continuous", "imported"),
    }
    rows: list[tuple[int, int, int, float, bool, bool]] = []
    n_out = N_ITEMS * N_CAND
    out_item = np.arange(n_out) // N_CAND
    truth = rng.integers(1, 6, n_out)
    for o in range(n_out):
        subject = 2 * o
        for h in range(3):
            if rng.random() < 0.9:
                v = int(np.clip(truth[o] + rng.integers(-1, 2), 1, 5))
                rows.append((subject, 1, 100 + h, float(v), False, False))
        judged = np.clip(truth[o] + rng.integers(-1, 2), 1, 5)
        if out_item[o] in (0, 1):
            judged = 3
        if not (out_item[o] == 2 and o % N_CAND >= 2):
            rows.append((subject, 1, 10, float(judged), True, False))
        rows.append((subject, 1, 11, float(truth[o] + rng.normal(0, 1.2)), True, True))
    pref_truth = rng.integers(0, 3, N_ITEMS)
    orders: list[tuple[int, int, int, float, float]] = []
    for i in range(N_ITEMS):
        subject = 2 * i + 1
        for h in rng.choice(6, rng.integers(1, 5), replace=False):
            vote = float(pref_truth[i] if rng.random() < 0.7 else rng.integers(0, 3))
            rows.append((subject, 2, 200 + int(h), vote, False, False))
        jv = pref_truth[i] if rng.random() < 0.75 else rng.integers(0, 3)
        rows.append((subject, 2, 10, float(jv), True, False))
        # Both presentation orders (canonical codes): the second order flips now and then,
        # and either may be unparseable (NaN).
        ab = float(jv) if rng.random() > 0.08 else np.nan
        ba = float(jv) if rng.random() < 0.7 else float(rng.integers(0, 3))
        orders.append((subject, 2, 10, ab, ba if rng.random() > 0.08 else np.nan))
    ratings = pd.DataFrame(
        rows, columns=["subject", "criterion", "rater", "num", "is_judge", "continuous"]
    )
    outputs = pd.DataFrame(
        {
            "item": out_item,
            "candidate": np.arange(n_out) % N_CAND + 1,
            "candidate_b": -1,
            "length": rng.integers(20, 900, n_out).astype(float),
            "length_b": np.nan,
        },
        index=pd.Index(np.arange(n_out) * 2, name="subject"),
    )
    comparisons = pd.DataFrame(
        {
            "item": np.arange(N_ITEMS),
            "candidate": 1,
            "candidate_b": 2,
            "length": rng.integers(20, 900, N_ITEMS).astype(float),
            "length_b": rng.integers(20, 900, N_ITEMS).astype(float),
        },
        index=pd.Index(np.arange(N_ITEMS) * 2 + 1, name="subject"),
    )
    items = pd.DataFrame(
        {
            "external_id": [f"i{i}" for i in range(N_ITEMS)],
            "lang": np.where(np.arange(N_ITEMS) % 3 == 0, "de", "en"),
        },
        index=pd.Index(np.arange(N_ITEMS), name="item"),
    )
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates=CANDIDATES,
        ratings=ratings,
        subjects=pd.concat([outputs, comparisons]).sort_index(),
        items=items,
        dimensions=["lang"],
        orders=pd.DataFrame(orders, columns=["subject", "criterion", "rater", "ab", "ba"]),
    )


@pytest.fixture(scope="module")
def data() -> RatingData:
    return _simulated()


@pytest.fixture(scope="module")
def result(data: RatingData) -> dict[str, Any]:
    params = params_validate({"n_resamples": 300, "seed": 4, "min_items": 10,
                              "system_level": True})
    raw = compute_report(data, params)
    return json_safe({**raw, "plan_version": None, "fingerprint": input_fingerprint(data)})


def _scores(data: RatingData, judge: int, lang: str | None = None) -> pd.DataFrame:
    """Per output: item, candidate, judge score and human mean, from the raw rows."""
    r = data.ratings[data.ratings["criterion"] == 1]
    human = r[~r["is_judge"]].groupby("subject")["num"].mean().rename("human")
    j = r[r["is_judge"] & (r["rater"] == judge)].set_index("subject")["num"].rename("judge")
    df = pd.concat([j, human], axis=1, join="inner").join(data.subjects[["item", "candidate"]])
    if lang is not None:
        df = df[df["item"].map(data.items["lang"]) == lang]
    return df


def _row(result: dict[str, Any], judge: int, label: str = "overall") -> CorrelationLevelsRow:
    typed = AgreementResult.from_json(result)
    return next(
        r for r in typed.correlation_levels
        if r.judge_version == judge and r.criterion == 1 and r.label == label
    )


@pytest.mark.parametrize(("judge", "lang"), [(10, None), (11, None), (10, "de")])
def test_three_levels_against_scipy(
    result: dict[str, Any], data: RatingData, judge: int, lang: str | None
) -> None:
    df = _scores(data, judge, lang)
    row = _row(result, judge, lang or "overall")
    for method, fn in SCIPY.items():
        per_item, constant, few = [], 0, 0
        for _, g in df.groupby("item"):
            if len(g) < 3:
                few += 1
            elif g["judge"].nunique() == 1 or g["human"].nunique() == 1:
                constant += 1
            else:
                per_item.append(fn(g["judge"], g["human"]))
        sample = getattr(row.sample, method)
        assert sample.value == pytest.approx(np.mean(per_item), abs=1e-10)
        assert (row.sample.n_items, row.sample.n_items_constant, row.sample.n_items_too_few) == (
            len(per_item), constant, few,
        )
        assert sample.ci_low is not None and sample.ci_high is not None
        assert sample.ci_low <= sample.value <= sample.ci_high
        dataset = getattr(row.dataset, method)
        assert dataset.value == pytest.approx(fn(df["judge"], df["human"]), abs=1e-10)
        means = df.groupby("candidate")[["judge", "human"]].mean()
        assert row.system is not None and row.system.n_candidates == N_CAND
        system = getattr(row.system, method)
        assert system.value == pytest.approx(fn(means["judge"], means["human"]), abs=1e-10)
    if judge == 10 and lang is None:
        assert row.sample.n_items_constant >= 2 and row.sample.n_items_too_few == 1


def test_overall_system_level_is_the_system_table(result: dict[str, Any]) -> None:
    typed = AgreementResult.from_json(result)
    for sysrow in typed.system:
        row = _row(result, sysrow.judge_version)
        assert row.system is not None
        assert row.system.kendall == sysrow.kendall and row.system.pearson == sysrow.pearson


def _pref_votes(data: RatingData) -> tuple[dict[int, list[float]], dict[int, float]]:
    r = data.ratings[data.ratings["criterion"] == 2]
    votes: dict[int, list[float]] = {}
    for s, v in r[~r["is_judge"]][["subject", "num"]].itertuples(index=False):
        votes.setdefault(int(s), []).append(float(v))
    judge = {int(s): float(v) for s, v in
             r[r["is_judge"]][["subject", "num"]].itertuples(index=False)}
    return votes, judge


def test_per_vote_and_per_majority_agreement(result: dict[str, Any], data: RatingData) -> None:
    votes, judge = _pref_votes(data)
    typed = AgreementResult.from_json(result)
    cell = next(c for c in typed.cells if c.criterion == 2 and c.label == "overall")
    with_ties = [v == judge[s] for s, vs in votes.items() for v in vs]
    without = [v == judge[s] for s, vs in votes.items() for v in vs if v != 0 and judge[s] != 0]
    per_vote = cell.metrics["agreement_per_vote"]
    assert per_vote.value == pytest.approx(np.mean(with_ties)) and per_vote.n == len(with_ties)
    no_ties = cell.metrics["agreement_per_vote_without_ties"]
    assert no_ties.value == pytest.approx(np.mean(without)) and no_ties.n == len(without)
    assert per_vote.value is not None
    assert per_vote.ci_low is not None and per_vote.ci_high is not None
    assert per_vote.ci_low < per_vote.value < per_vote.ci_high
    # Per majority is the accuracy against the human label of the one rule: the side most
    # annotators chose, a tie for the most frequent giving none (the subject is left out).
    majority = _majority(data)
    assert cell.metrics["accuracy"].value == pytest.approx(
        np.mean([majority[s] == judge[s] for s in majority])
    )


def test_pooled_human_pair_agreement(result: dict[str, Any], data: RatingData) -> None:
    votes, _ = _pref_votes(data)
    typed = AgreementResult.from_json(result)
    ceiling = next(c for c in typed.ceiling if c.criterion == 2 and c.label == "overall")
    for ties, name in (("keep", "pooled_agreement"), ("drop", "pooled_agreement_without_ties")):
        pairs = [
            a == b
            for vs in votes.values()
            for a, b in itertools.combinations([v for v in vs if ties == "keep" or v != 0], 2)
        ]
        est = getattr(ceiling, name)
        assert est is not None and est.value == pytest.approx(np.mean(pairs))
        assert est.n == len(pairs)
    # Beside Krippendorff's alpha, as before.
    assert ceiling.alpha.value is not None


def _majority(data: RatingData) -> dict[int, float]:
    """The human label per comparison by the one rule (calibration.frames.human_labels): the
    side most annotators chose; a tie for the most frequent gives none (left out)."""
    out = {}
    r = data.ratings[(data.ratings["criterion"] == 2) & ~data.ratings["is_judge"]]
    for s, g in r.groupby("subject"):
        counts = g["num"].value_counts()
        if (counts == counts.max()).sum() == 1:
            out[int(s)] = float(counts.idxmax())
    return out


@pytest.mark.parametrize("lang", [None, "en"])
def test_presentation_order_figures(
    result: dict[str, Any], data: RatingData, lang: str | None
) -> None:
    majority = _majority(data)
    o = data.orders
    o = o[o["subject"].isin(list(majority))]  # comparisons with a human label
    if lang is not None:
        item = data.subjects.loc[o["subject"], "item"].to_numpy()
        o = o[data.items.loc[item, "lang"].to_numpy() == lang]
    typed = AgreementResult.from_json(result)
    row = next(r for r in typed.orders if r.criterion == 2 and r.label == (lang or "overall"))
    assert row.unparseable_as == "miss" and row.n_pairs == len(o)
    assert row.n_unparseable_ab == int(o["ab"].isna().sum()) > 0
    assert row.n_unparseable_ba == int(o["ba"].isna().sum()) > 0
    ref = [majority[int(s)] for s in o["subject"]]
    ab, ba = list(o["ab"]), list(o["ba"])

    def share(hits: list[bool]) -> float:
        return sum(hits) / len(hits)

    # Unparseable counted as a miss: never right, never the same in both orders.
    acc_ab = share([a == m for a, m in zip(ab, ref, strict=True)])
    acc_ba = share([b == m for b, m in zip(ba, ref, strict=True)])
    assert row.counted.accuracy_ab.value == pytest.approx(acc_ab)
    assert row.counted.accuracy_ba.value == pytest.approx(acc_ba)
    assert row.counted.accuracy_mean.value == pytest.approx((acc_ab + acc_ba) / 2)
    assert row.counted.accuracy_consistent.value == pytest.approx(
        share([a == b == m for a, b, m in zip(ab, ba, ref, strict=True)])
    )
    assert row.counted.positional_agreement.value == pytest.approx(
        share([a == b for a, b in zip(ab, ba, strict=True)])
    )
    # Parseable only: each figure on the pairs whose verdicts it reads.
    ok = [(a, b, m) for a, b, m in zip(ab, ba, ref, strict=True) if a == a and b == b]
    p_ab = share([a == m for a, m in zip(ab, ref, strict=True) if a == a])
    assert row.parseable.accuracy_ab.value == pytest.approx(p_ab)
    assert row.parseable.accuracy_ab.n == sum(a == a for a in ab)
    assert row.parseable.positional_agreement.value == pytest.approx(
        share([a == b for a, b, _ in ok])
    )
    assert row.parseable.accuracy_consistent.n == len(ok)
    est = row.counted.accuracy_mean
    assert est.value is not None and est.ci_low is not None and est.ci_high is not None
    assert est.ci_low <= est.value <= est.ci_high


def test_unparseable_as_tie(data: RatingData) -> None:
    params = params_validate({"n_resamples": 200, "seed": 4, "min_items": 10,
                              "unparseable_as": "tie", "strata": []})
    typed = AgreementResult.from_json(json_safe({
        **compute_report(data, params), "plan_version": None, "fingerprint": "",
    }))
    (row,) = [r for r in typed.orders if r.label == "overall"]
    majority = _majority(data)
    o = data.orders
    o = o[o["subject"].isin(list(majority))]  # comparisons with a human label
    ref = [majority[int(s)] for s in o["subject"]]
    ab = [0.0 if a != a else a for a in o["ab"]]
    assert row.unparseable_as == "tie"
    assert row.counted.accuracy_ab.value == pytest.approx(
        sum(a == m for a, m in zip(ab, ref, strict=True)) / len(ab)
    )


def test_a_version_1_result_is_still_read(result: dict[str, Any]) -> None:
    """What version 1 stored: no correlation_levels, no per-vote or pooled keys."""
    old = {k: v for k, v in result.items() if k not in ("correlation_levels", "orders")}
    old["version"] = 1
    new_metrics = {"agreement_per_vote", "agreement_per_vote_without_ties"}

    def strip(ceiling: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in ceiling.items() if not k.startswith("pooled_")}

    old["cells"] = [
        {
            **c,
            "metrics": {k: v for k, v in c["metrics"].items() if k not in new_metrics},
            "ceiling": strip(c["ceiling"]),
        }
        for c in result["cells"]
    ]
    old["ceiling"] = [strip(c) for c in result["ceiling"]]
    typed = AgreementResult.from_json(old)
    assert typed.version == 1 and typed.correlation_levels == () and typed.orders == ()
    assert all(c.pooled_agreement is None for c in typed.ceiling)
    assert typed.to_json() == old
    assert AgreementResult.from_json(result).to_json() == result
