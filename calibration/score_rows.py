"""The calibrated-score rows of a calibration snapshot, built as columns over whole criteria
(no Python loop per row): the subjects' strata cells, each criterion's served rows
(`criterion_rows`), their `ScoreBlock`, and the rubric rows that combine the output rows of the
rubric's criteria (`rubric_rows`, `rubric_aggregate`). Pure: no database; bench/calibration.py
times `ROW_STEPS`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from evalstats.costs import (
    decide,
    expected_decision_cost,
)
from studies.subjects import subject_split

from .frames import (
    RatingData,
    rubric_predictor_columns,
)
from .results import (
    CalibrationCell,
    ScoreBlock,
)
from .scoring import (
    CalibrationInputs,
    CriterionRule,
    Humans,
    JudgeScores,
    Model,
    cell_label,
)

FloatArray = npt.NDArray[np.float64]

RUBRIC_KEY = "rubric"



def with_trust(cell: CalibrationCell, trust: dict[str, Any]) -> CalibrationCell:
    from dataclasses import replace

    return replace(cell, trust=trust)


def rubric_aggregate(
    p: Sequence[float], gates: Sequence[bool], weights: Sequence[float]
) -> float:
    """P(output passes the rubric) from its criteria's P(pass), ASSUMING INDEPENDENCE.

    Hard gates must all pass: their probabilities multiply. The other criteria count by their
    rubric weights: their factor is the weighted mean P(pass), the expected weighted share of
    them passed (equivalently: the probability that a criterion drawn in proportion to its
    weight passes). The product of the gate factor and that mean treats the criteria as
    independent given the judge's scores; failures that go together (a wrong answer is often
    unhelpful too) make the true joint probability of passing every gate higher than the
    product, so the aggregate is conservative for gates. Without non-gate criteria (or with
    all their weights 0) the factor is 1.
    """
    gate = 1.0
    num = den = 0.0
    for pi, g, w in zip(p, gates, weights, strict=True):
        if g:
            gate *= pi
        else:
            num += w * pi
            den += w
    rest = num / den if den > 0 else 1.0
    return gate * rest


# --- the per-row steps (vectorised over whole criteria) -------------------------------------

# The functions that build the calibrated-score rows (bench/calibration.py times them).
ROW_STEPS = ("criterion_rows", "rubric_rows", "score_block")



@dataclass
class SubjectTable:
    """Per subject of the study (the rows of `data.subjects`): what its rows carry."""

    index: pd.Index  # subject codes
    candidate: npt.NDArray[np.int64]
    cell: npt.NDArray[np.object_]  # calibration cell label
    # The item's labels per dimension: one dict per distinct combination, shared by the rows
    # of its items (rows are read, never changed).
    labels: npt.NDArray[np.object_]


def subject_table(data: RatingData, dims: Sequence[str]) -> SubjectTable:
    items = data.items
    columns = [items[d].astype(str).tolist() for d in data.dimensions]
    combos: list[tuple[str, ...]] = (
        list(zip(*columns, strict=True)) if columns else [()] * len(items)
    )
    # A study has a handful of label combinations: one dict and one cell label each.
    code_of: dict[tuple[str, ...], int] = {}
    codes = np.array([code_of.setdefault(c, len(code_of)) for c in combos], dtype=np.intp)
    # The last slot: an item not in `items` (no labels, the whole-study cell).
    labels_of = np.empty(len(code_of) + 1, dtype=object)
    cell_of = np.empty(len(code_of) + 1, dtype=object)
    for combo, k in code_of.items():
        labels_of[k] = dict(zip(data.dimensions, combo, strict=True))
        cell_of[k] = cell_label(labels_of[k], dims)
    labels_of[-1], cell_of[-1] = {}, ""
    item_code = np.append(codes, len(code_of))
    subj = data.subjects
    # Position of each subject's item in `items`; an item not there gets the last slot
    # (no labels, the whole-study cell).
    pos = items.index.get_indexer(subj["item"].to_numpy(dtype=np.int64))
    code = item_code[np.where(pos >= 0, pos, len(items))]
    return SubjectTable(
        index=subj.index,
        candidate=subj["candidate"].to_numpy(dtype=np.int64),
        cell=cell_of[code],
        labels=labels_of[code],
    )


def _gather(values: npt.NDArray[Any], pos: npt.NDArray[np.intp], fill: Any) -> npt.NDArray[Any]:
    """values[pos] with `fill` where pos < 0."""
    out = values[np.where(pos >= 0, pos, 0)] if values.size else np.empty(pos.size, values.dtype)
    if values.dtype == object:
        out = out.astype(object)
        out[pos < 0] = fill
    else:
        out = np.where(pos >= 0, out, fill)
    return out


@dataclass
class CriterionRows:
    """The calibrated-score rows of one criterion as columns, one entry per row (rows in
    subject order); `score_block` makes them the rows' `ScoreBlock`, `rubric_rows`
    combines the output rows of the rubric's criteria."""

    cid: int
    key: str
    rule: CriterionRule
    subject: npt.NDArray[np.int64]
    candidate: npt.NDArray[np.int64]  # -1: none
    judge_version: npt.NDArray[np.int64]
    cell: npt.NDArray[np.object_]
    labels: npt.NDArray[np.object_]
    raw_codes: npt.NDArray[np.intp]  # into raw_uniques
    raw_uniques: tuple[str, ...]
    raw_confidence: FloatArray
    p_pass: FloatArray
    p_low: FloatArray  # NaN: none
    p_high: FloatArray
    decision: npt.NDArray[np.object_]
    expected_cost: FloatArray
    source: npt.NDArray[np.object_]
    n_labels: npt.NDArray[np.int64]
    evidence: pd.Series  # the newest evidence behind the row (NaT: none), by row position


def criterion_rows(
    *,
    cid: int,
    key: str,
    rule: CriterionRule,
    order: Sequence[int],
    per_judge: Mapping[int, tuple[JudgeScores, Model | None, dict[str, Any]]],
    preds: Mapping[int, Mapping[str, Any]],
    humans: Humans,
    evidence: pd.Series,
    subjects: SubjectTable,
    guaranteed: bool,
    cascade: bool,
) -> CriterionRows | None:
    """Which judge version serves each subject of one criterion, and its row (docs).

    Per subject: the first judge version in `order` with a curve that scored it; under a
    cascade, the first stage that trusts it (else the first stage that scored it,
    escalated). Subjects scored only by judge versions without a curve keep a row only when
    humans decided them. A human consensus decides its subject ("human", P(pass) 0 or 1).
    Judge rows are decided per (judge version, cell) with that cell's thresholds (else the
    whole study's), elementwise as `decide` and `expected_decision_cost` define.
    """
    if not order:
        return None
    all_s, jv_of, k_of, chosen = _serving_versions(order, per_judge, preds, cascade)

    cons = humans.consensus.reindex(all_s).to_numpy(dtype=np.float64)
    has_human = np.isfinite(cons)
    keep = has_human | chosen
    all_s, jv_of, k_of, cons = all_s[keep], jv_of[keep], k_of[keep], cons[keep]
    has_human, chosen = has_human[keep], chosen[keep]
    n = all_s.size
    if n == 0:
        return None

    side, value, prob, p, low, high, trusted, dpass = _served_columns(
        order, per_judge, preds, jv_of, k_of)
    if rule.scale == "pairwise":
        human_pass = np.where(has_human, (cons == side).astype(np.float64), np.nan)
    else:
        human_pass = cons

    spos = subjects.index.get_indexer(all_s)
    cell = _gather(subjects.cell, spos, "")
    labels = _gather(subjects.labels, spos, None)
    for i in np.flatnonzero(spos < 0).tolist():
        labels[i] = {}
    candidate = _gather(subjects.candidate, spos, -1).astype(np.int64)

    decision = np.full(n, "human", dtype=object)
    cost = np.zeros(n)
    n_labels = np.array(humans.n_labels.reindex(all_s, fill_value=0), dtype=np.int64)
    source = np.array(humans.source.reindex(all_s), dtype=object)
    source[pd.isna(source)] = "human"
    p_pass, p_low, p_high = human_pass.copy(), human_pass.copy(), human_pass.copy()
    judged = chosen & ~has_human
    _judge_decisions(order, per_judge, judged, jv_of, cell, p, trusted, dpass, guaranteed,
                     decision, cost, n_labels)
    p_pass[judged], p_low[judged], p_high[judged] = p[judged], low[judged], high[judged]
    source[judged] = "judge"

    raw_codes, raw_uniques = pd.factorize(pd.Series(value, dtype=object), use_na_sentinel=False)
    return CriterionRows(
        cid=cid, key=key, rule=rule, subject=all_s, candidate=candidate, judge_version=jv_of,
        cell=cell, labels=labels, raw_codes=np.asarray(raw_codes, dtype=np.intp),
        raw_uniques=tuple(str(v)[:64] for v in raw_uniques), raw_confidence=prob,
        p_pass=p_pass, p_low=p_low, p_high=p_high, decision=decision, expected_cost=cost,
        source=source, n_labels=n_labels, evidence=evidence.reindex(all_s).reset_index(drop=True),
    )


def _serving_versions(
    order: Sequence[int],
    per_judge: Mapping[int, tuple[JudgeScores, Model | None, dict[str, Any]]],
    preds: Mapping[int, Mapping[str, Any]], cascade: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
           npt.NDArray[np.bool_]]:
    """Every scored subject, the judge version that serves it and its position in that
    version's scores, and whether a version with a curve scored it (`criterion_rows`)."""
    all_s = np.unique(np.concatenate([per_judge[jv][0].subjects for jv in order]))
    n = all_s.size
    jv_of = np.full(n, -1, dtype=np.int64)
    k_of = np.full(n, -1, dtype=np.int64)
    chosen = np.zeros(n, dtype=bool)  # a judge version with a curve scored it
    final = np.zeros(n, dtype=bool)  # ... and serves it (no later stage may take it)
    positions: dict[int, npt.NDArray[np.intp]] = {}
    for jv in order:
        js = per_judge[jv][0]
        pos = pd.Index(js.subjects).get_indexer(all_s)
        positions[jv] = pos
        pr = preds.get(jv)
        if pr is None:
            continue
        has = pos >= 0
        first = has & ~chosen
        jv_of[first], k_of[first] = jv, pos[first]
        chosen |= first
        take = has & ~final
        if cascade:
            take &= _gather(np.asarray(pr["trusted"], dtype=bool), pos, False)
        jv_of[take], k_of[take] = jv, pos[take]
        final |= take
    # No curve scored it: the first judge version in `order` that did (for a human row).
    for jv in order:
        pos = positions[jv]
        m = (jv_of < 0) & (pos >= 0)
        jv_of[m], k_of[m] = jv, pos[m]
    return all_s, jv_of, k_of, chosen


def _judge_decisions(
    order: Sequence[int],
    per_judge: Mapping[int, tuple[JudgeScores, Model | None, dict[str, Any]]],
    judged: npt.NDArray[np.bool_], jv_of: npt.NDArray[np.int64], cell: npt.NDArray[Any],
    p: FloatArray, trusted: npt.NDArray[np.bool_], dpass: FloatArray, guaranteed: bool,
    decision: npt.NDArray[np.object_], cost: FloatArray, n_labels: npt.NDArray[np.int64],
) -> None:
    """The judge rows' decisions, expected costs and label counts, per (judge version, cell)
    with that cell's thresholds (else the whole study's), written in place."""
    for jv in order:
        mj = judged & (jv_of == jv)
        if not mj.any():
            continue
        info = per_judge[jv][2]
        for label in pd.unique(cell[mj]):
            m = mj & (cell == label)
            thr = info["thresholds"].get(label) or info["thresholds"][""]
            pm = p[m]
            if guaranteed:
                dec = np.where(trusted[m], np.where(dpass[m] == 1.0, "pass", "fail"),
                               "escalate")
            else:
                dec = decide(pm, thresholds=thr)
            decision[m] = dec.astype(object)
            cost[m] = expected_decision_cost(
                pm, dec, fail_cost=thr.fail_cost, reject_cost=thr.reject_cost,
                review_cost=thr.review_cost,
            )
            n_labels[m] = int(info["n_by_cell"].get(label, 0))


def _served_columns(
    order: Sequence[int],
    per_judge: Mapping[int, tuple[JudgeScores, Model | None, dict[str, Any]]],
    preds: Mapping[int, Mapping[str, Any]], jv_of: npt.NDArray[np.int64],
    k_of: npt.NDArray[np.int64],
) -> tuple[FloatArray, npt.NDArray[np.object_], FloatArray, FloatArray, FloatArray, FloatArray,
           npt.NDArray[np.bool_], FloatArray]:
    """Per served subject: the serving version's side, raw value, probability, P(pass) and its
    band, whether it is trusted, and the decision it would serve."""
    n = jv_of.size
    side = np.full(n, np.nan)
    value = np.empty(n, dtype=object)
    prob = np.full(n, np.nan)
    p = np.full(n, np.nan)
    low = np.full(n, np.nan)
    high = np.full(n, np.nan)
    trusted = np.zeros(n, dtype=bool)
    dpass = np.full(n, np.nan)
    for jv in order:
        m = jv_of == jv
        if not m.any():
            continue
        js = per_judge[jv][0]
        k = k_of[m]
        side[m], value[m], prob[m] = js.side[k], js.value[k], js.probability[k]
        pr = preds.get(jv)
        if pr is not None:
            p[m], low[m], high[m] = pr["p"][k], pr["low"][k], pr["high"][k]
            trusted[m] = pr["trusted"][k]
            dpass[m] = pr["dpass"][k]
    return side, value, prob, p, low, high, trusted, dpass


def _utc_us(values: pd.Series) -> npt.NDArray[np.datetime64]:
    """A timestamp column as datetime64[us] in UTC (naive), NaT kept."""
    index = pd.DatetimeIndex(values)
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    return index.as_unit("us").to_numpy()


def score_block(
    part: CriterionRows, *, study_id: int, judge_hashes: Mapping[int, str],
    plan_version: int | None,
) -> ScoreBlock:
    """The rows (`ScoreBlock`) of one criterion's columns."""
    return ScoreBlock(
        study_id=study_id, subject=part.subject, candidate=part.candidate,
        criterion_id=part.cid, criterion_key=part.key, judge_version=part.judge_version,
        judge_hashes=judge_hashes, stratum=part.cell, strata=part.labels,
        raw_codes=part.raw_codes, raw_uniques=part.raw_uniques,
        raw_confidence=part.raw_confidence, p_pass=part.p_pass, p_low=part.p_low,
        p_high=part.p_high, decision=part.decision, expected_cost=part.expected_cost,
        source=part.source, plan_version=plan_version, n_labels=part.n_labels,
        evidence_at=_utc_us(part.evidence),
    )


def _output_ids(codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The output ids among subject codes (comparisons left out), in their order."""
    is_comparison, ids = subject_split(codes)
    return ids[~is_comparison]


def _rubric_decision(
    cols: Sequence[tuple[CriterionRows, npt.NDArray[np.intp]]], p: Sequence[FloatArray],
    gates: Sequence[bool], weights: Sequence[float], rule: Mapping[str, Any], n: int,
) -> npt.NDArray[Any]:
    """The rubric row's decision from its criteria's: escalate when any escalates, human when
    humans decided every one, else pass or fail by the rubric's rule (each criterion's
    outcome: its human consensus, else its served decision)."""
    decisions = [part.decision[k] for part, k in cols]
    is_human = [d == "human" for d in decisions]
    outcome = [np.where(h, pi >= 0.5, d == "pass")
               for h, pi, d in zip(is_human, p, decisions, strict=True)]
    escalate = np.logical_or.reduce([d == "escalate" for d in decisions])
    all_human = np.logical_and.reduce(is_human)
    gate_failed = np.zeros(n, dtype=bool)
    share_num = np.zeros(n)
    share_den = 0.0
    for g, w, ok in zip(gates, weights, outcome, strict=True):
        if g:
            gate_failed |= ~ok
        else:
            share_num = share_num + np.where(ok, w, 0.0)
            share_den += w
    share = share_num / share_den if share_den > 0 else np.ones(n)
    # The rubric's rule (calibration.frames.rubric_rule): every criterion must pass, or
    # the gates and the stated share of the others by weight.
    if rule.get("kind") == "weighted":
        passed = ~gate_failed & (share >= float(rule["pass_share"]) - 1e-12)
    else:
        passed = np.logical_and.reduce(outcome)
    decision = np.where(
        escalate, "escalate",
        np.where(all_human, "human", np.where(passed, "pass", "fail")),
    )
    return decision


def rubric_rows(
    parts: Mapping[int, CriterionRows],
    inputs: CalibrationInputs,
    data: RatingData,
    plan_version: int | None,
    warnings: list[str],
) -> ScoreBlock | None:
    """One "rubric" row per output that has a calibrated row for every pass/fail criterion of
    the study's latest rubric version (docs/calibration.md); none when the snapshot leaves one
    of those criteria out (``params.criteria``) or calibrated none of them."""
    needed = list(inputs.rubric_criteria)
    output_ids = {cid: _output_ids(part.subject) for cid, part in parts.items()}
    every = (np.unique(np.concatenate(list(output_ids.values()))) if output_ids
             else np.empty(0, dtype=np.int64))
    if not needed or every.size == 0:
        return None
    left_out = [cid for cid in needed if cid not in data.criteria]
    if left_out:
        warnings.append(
            "the snapshot does not cover every pass/fail criterion of the rubric: no rubric rows"
        )
        return None
    # Row of each output in each needed criterion's columns (-1: none).
    at: dict[int, npt.NDArray[np.intp]] = {}
    for cid in needed:
        if cid not in parts:
            at[cid] = np.full(every.size, -1, dtype=np.intp)
            continue
        rows_of = np.flatnonzero(~subject_split(parts[cid].subject)[0])
        pos = pd.Index(output_ids[cid]).get_indexer(every)
        at[cid] = np.where(pos >= 0, rows_of[np.where(pos >= 0, pos, 0)], -1)
    complete = np.logical_and.reduce([at[cid] >= 0 for cid in needed])
    missing = int((~complete).sum())
    outs = every[complete]
    out: ScoreBlock | None = None
    if outs.size:
        cols = [(parts[cid], at[cid][complete]) for cid in needed]
        gates = [part.rule.is_hard_gate for part, _ in cols]
        weights = [part.rule.weight for part, _ in cols]
        p = [part.p_pass[k] for part, k in cols]
        lows = [part.p_low[k] for part, k in cols]
        highs = [part.p_high[k] for part, k in cols]
        rule = inputs.rubric_rule
        agg = rubric_predictor_columns(p, gates, weights, rule)
        # The aggregate increases in every P(pass): the ends at the criteria's ends bound it.
        agg_low = rubric_predictor_columns(lows, gates, weights, rule)
        agg_high = rubric_predictor_columns(highs, gates, weights, rule)
        agg_low[~np.logical_and.reduce([np.isfinite(v) for v in lows])] = np.nan
        agg_high[~np.logical_and.reduce([np.isfinite(v) for v in highs])] = np.nan
        decision = _rubric_decision(cols, p, gates, weights, rule, outs.size)
        sources = [part.source[k] for part, k in cols]
        any_judge = np.logical_or.reduce([s == "judge" for s in sources])
        any_adjudicated = np.logical_or.reduce([s == "adjudicated" for s in sources])
        source = np.where(any_judge, "judge", np.where(any_adjudicated, "adjudicated", "human"))
        cost = np.zeros(outs.size)
        for part, k in cols:
            cost = cost + part.expected_cost[k]
        n_labels = np.minimum.reduce([part.n_labels[k] for part, k in cols])
        stamps = pd.concat(
            [part.evidence.iloc[k].reset_index(drop=True) for part, k in cols], axis=1
        ).max(axis=1)
        first, k0 = cols[0]
        n = outs.size
        out = ScoreBlock(
            study_id=inputs.study_id, subject=(outs * 2).astype(np.int64),
            candidate=first.candidate[k0], criterion_id=None, criterion_key=RUBRIC_KEY,
            judge_version=np.full(n, -1, dtype=np.int64), judge_hashes={},
            stratum=first.cell[k0], strata=first.labels[k0],
            raw_codes=np.zeros(n, dtype=np.intp), raw_uniques=("",),
            raw_confidence=np.full(n, np.nan), p_pass=np.minimum(1.0, np.maximum(0.0, agg)),
            p_low=agg_low, p_high=agg_high, decision=decision.astype(object),
            expected_cost=cost, source=source.astype(object), plan_version=plan_version,
            n_labels=n_labels.astype(np.int64), evidence_at=_utc_us(stamps),
        )
    if missing:
        warnings.append(
            f"{missing} output(s) lack a calibrated score for some rubric criterion: no rubric "
            "row for them"
        )
    return out
