"""The selection report's computation: from the loaded frames to a `SelectionResult`, with no
database access (docs/reports.md, "Selection report").

The statistics are `evalstats`' (ppi: the three estimates, the stratified mix, paired
differences, the allocation of extra labels; gates: rates, quantiles, means per 1,000;
ranking: Holm, Kendall's tau, the Pareto front); this module decides which outputs feed them
and turns their answers into the decision.

* Estimates per candidate x stratum x metric: human-only (`classical_mean`, weights 1 /
  inclusion probability), judge-only (`naive_mean`) and PPI++ (`ppi_mean`) on the stratum's
  outputs; the mix by `ppi_mean_stratified` (PPI) and `combine_strata` (the other two) with the
  mix in force. A candidate without outputs in a stratum has ``no_data`` there, never a zero.
* Paired differences on the primary metric: the reference candidate (the one the decision
  names, else the mix's best) minus each other, on the items both answered
  (`paired_difference_stratified`).
* A flip: a stratum whose best candidate is not the reference and beats it there with a paired
  difference whose Holm-adjusted p-value (over every stratum where the two differ) is below
  1 - level.
* Pairwise criteria: per pair of compared candidates the win rate of one over the other (a
  tie counts half a win) with the three estimates per stratum and on the mix, like the cells;
  Bradley-Terry strengths by `ppi_bradley_terry` on the mix (every comparison re-weighted to
  the mix's shares of the strata) and per stratum; the plan's win_rate thresholds against its
  baseline join the other thresholds.
* The decision: the decision table (`reports.selection.decision.decide`, docs/selection.md):
  not enough evidence, no candidate passes the gates, no candidate meets a threshold, too
  close to call (with the labels per stratum that would settle it), the leader has not shown
  it meets a threshold (with the labels that would settle it), or ship.
* Without a judge's scores on a metric, its mix estimate and paired differences are the human
  labels' alone (`_paired_human_only`), and the decision says so.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import ndtri

from evalstats.gates import gate_check, mean_per_thousand, quantile_intervals, rate_gate
from evalstats.ppi import (
    BradleyTerry,
    PPIEstimate,
    StratifiedPPI,
    classical_mean,
    combine_strata,
    naive_mean,
    neyman_allocation,
    paired_difference_stratified,
    ppi_bradley_terry,
    ppi_mean,
    ppi_mean_stratified,
)
from evalstats.ranking import holm, kendall_tau, pareto_front, rank_with_ties, two_sided_p
from evalstats.results import Estimate
from reports.results import json_safe
from reviewhub.errors import Problems

from .decision import MIN_LABELS as DECISION_MIN_LABELS
from .decision import (
    MIN_LABELS_PER_STRATUM,
    Contender,
    DecisionInputs,
    Difference,
    Threshold,
    decide,
    labels_to_settle,
)
from .load import ALL, UNKNOWN, MetricMeta, SelectionInputs, mix_problems
from .results import SELECTION_RESULT_VERSION, SelectionResult

FloatArray = npt.NDArray[np.float64]
MIX = "mix"
# Gate key -> (the output column, the statistic, the direction of the check).
GATES: dict[str, tuple[str, str, str]] = {
    "schema_valid_rate": ("schema_valid", "rate", "min"),
    "error_rate": ("error", "rate", "max"),
    "latency_p50_ms": ("latency_ms", "q50", "max"),
    "latency_p95_ms": ("latency_ms", "q95", "max"),
    "cost_per_1000": ("cost", "mean", "max"),
    "tokens_per_1000": ("tokens", "mean", "max"),
}
# Lines of "missing" at most (one per candidate x stratum could be hundreds).
MAX_MISSING = 20
MIN_LABELS = 2


def _rng(seed: int, *parts: object) -> np.random.Generator:
    return np.random.default_rng([seed] + [zlib.crc32(str(p).encode()) for p in parts])


def _est_json(e: Estimate) -> dict[str, Any]:
    return {"value": e.value, "ci_low": e.ci_low, "ci_high": e.ci_high, "n_items": e.n_items,
            "method": e.method, "level": e.level, "n_resamples": e.n_resamples,
            "p_value": e.p_value, "warnings": list(e.warnings)}


def _clip_rate_intervals(estimates: list[dict[str, Any]], metrics: Sequence[Any]) -> None:
    """Rates live in [0, 1]: their intervals are cut to it (the cut interval covers whenever
    the uncut one does). The prediction-powered and normal intervals do not know the bound
    and can read 96 % [89, 103] near a pass rate of 1. Point estimates are left as computed."""
    rates = {m.key for m in metrics if m.unit == "rate"}
    for row in estimates:
        if row["metric"] not in rates:
            continue
        for kind in ("human", "judge", "ppi"):
            est = row.get(kind)
            if not est:
                continue
            if est.get("ci_low") is not None:
                est["ci_low"] = min(max(float(est["ci_low"]), 0.0), 1.0)
            if est.get("ci_high") is not None:
                est["ci_high"] = min(max(float(est["ci_high"]), 0.0), 1.0)


def _ppi_json(e: PPIEstimate | None) -> dict[str, Any] | None:
    return None if e is None else e.to_json()


@dataclass
class _Cells:
    """The outputs sorted by (candidate, stratum), with slices per cell."""

    frame: pd.DataFrame
    cand: npt.NDArray[np.int64]  # candidate index per row
    strat: npt.NDArray[np.int64]  # stratum code per row
    bounds: dict[tuple[int, int], tuple[int, int]]
    cand_bounds: dict[int, tuple[int, int]]


def _cells(outs: pd.DataFrame, cand_ids: Sequence[int], labels: Sequence[str]) -> _Cells:
    cidx = pd.Index(list(cand_ids)).get_indexer(outs["candidate"].to_numpy())
    sidx = pd.Index(list(labels)).get_indexer(outs["stratum"].astype(str).to_numpy())
    order = np.lexsort((outs["output"].to_numpy(), sidx, cidx))
    frame = outs.iloc[order].reset_index(drop=True)
    c, s = cidx[order], sidx[order]
    key = c * (len(labels) + 1) + s
    bounds: dict[tuple[int, int], tuple[int, int]] = {}
    cand_bounds: dict[int, tuple[int, int]] = {}
    if key.size:
        edges = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate([[0], edges])
        ends = np.concatenate([edges, [key.size]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            bounds[(int(c[a]), int(s[a]))] = (a, b)
        cedges = np.flatnonzero(np.diff(c)) + 1
        for a, b in zip(np.concatenate([[0], cedges]).tolist(),
                        np.concatenate([cedges, [c.size]]).tolist(), strict=True):
            cand_bounds[int(c[a])] = (a, b)
    return _Cells(frame, c.astype(np.int64), s.astype(np.int64), bounds, cand_bounds)


def _mix_resolve(
    inputs: SelectionInputs, params: Mapping[str, Any], labels: Sequence[str],
    items_per_label: Mapping[str, int],
) -> tuple[dict[str, float], str, list[dict[str, str]]]:
    """The mix in force, where it comes from and the deviations from the locked plan."""
    plan = inputs.plan
    dim = inputs.dimension
    deviations: list[dict[str, str]] = []
    has_plan = inputs.plan_version is not None
    plan_mix = plan["mixes"].get(dim) if dim is not None else None
    if has_plan and params.get("dimension") and plan.get("mix") and \
            plan["mix"]["dimension"] != dim:
        deviations.append({"field": "dimension",
                           "message": "the plan's deployment mix is on "
                                      f"'{plan['mix']['dimension']}'; the report uses '{dim}'"})
    elif has_plan and params.get("dimension") and plan.get("strata") and \
            dim not in plan["strata"]:
        deviations.append({"field": "dimension",
                           "message": f"'{dim}' is not among the plan's strata "
                                      f"({', '.join(plan['strata'])})"})
    if dim is None:
        return {ALL: 1.0}, "observed", deviations
    if params.get("mix"):
        mix = {str(k): float(v) for k, v in params["mix"].items()}
        source = "params"
        path = "params.mix"
        if has_plan:
            if plan_mix is None:
                deviations.append({"field": "mix", "message": "the plan states no deployment "
                                                              f"mix on '{dim}'; the report uses "
                                                              "the parameters' mix"})
            elif any(abs(plan_mix.get(k, 0.0) - mix.get(k, 0.0)) > 1e-9
                     for k in set(plan_mix) | set(mix)):
                changed = sorted(k for k in set(plan_mix) | set(mix)
                                 if abs(plan_mix.get(k, 0.0) - mix.get(k, 0.0)) > 1e-9)
                deviations.append({"field": "mix", "message": "the mix differs from the locked "
                                                              "plan's on " + ", ".join(changed)})
    elif plan_mix is not None:
        mix, source, path = dict(plan_mix), "plan", f"plan.deployment_mix.{dim}"
    else:
        total = sum(items_per_label.values())
        mix = {h: items_per_label.get(h, 0) / total for h in labels} if total else {}
        source, path = "observed", ""
        if has_plan:
            deviations.append({"field": "mix", "message": f"the plan states no deployment mix "
                                                          f"on '{dim}': the observed share of "
                                                          "items per stratum is used"})
    if source != "observed":
        errors = mix_problems(shares=mix, path=path, present=items_per_label,
                              possible=inputs.possible_labels)
        problems = Problems()
        problems.extend(errors)
        problems.raise_if_any("The selection report's mix")
    return mix, source, deviations


def _oriented(m: MetricMeta, value: float) -> float:
    """A value where larger is better."""
    return value if m.higher_is_better else -value


def _fmt_diff(m: MetricMeta, e: PPIEstimate, sign: float) -> str:
    """The improvement of an estimate as text: points for rates, the metric's unit else."""
    scale, unit = (100.0, " points") if m.unit == "rate" else (1.0, "")
    v = sign * e.value * scale
    if e.ci_low is None or e.ci_high is None:
        return f"{v:.1f}{unit} (no interval)"
    lo, hi = sorted((sign * e.ci_low * scale, sign * e.ci_high * scale))
    return f"{v:.1f}{unit} [{lo:.1f}, {hi:.1f}]"


def selection_compute(
    inputs: SelectionInputs, params: Mapping[str, Any], plan_version: int | None,
    fingerprint: str,
) -> SelectionResult:
    """The selection report of the loaded inputs (module docstring)."""
    raw = selection_compute_raw(inputs, params)
    raw["plan_version"] = plan_version
    raw["fingerprint"] = fingerprint
    return SelectionResult.from_json(json_safe(raw))


def selection_compute_raw(inputs: SelectionInputs, params: Mapping[str, Any]) -> dict[str, Any]:
    """The result as a plain dict (before typing); see `selection_compute`."""
    plan = inputs.plan
    level = float(params.get("level") or plan.get("level") or 0.95)
    n_resamples = int(params.get("n_resamples", 1000))
    seed = int(params.get("seed", 0))
    warnings = list(inputs.warnings)
    missing: list[str] = []
    outs = inputs.outputs
    dim = inputs.dimension

    # --- strata and the mix --------------------------------------------------------------------
    items = outs.drop_duplicates("item")
    items_per_label = {str(k): int(v) for k, v in items["stratum"].value_counts().items()}
    present = sorted(items_per_label, key=lambda h: (h == UNKNOWN, h))
    mix, mix_source, deviations = _mix_resolve(inputs, params, present, items_per_label)
    if params.get("level") is not None and inputs.plan_version is not None and \
            abs(float(params["level"]) - float(plan["level"])) > 1e-12:
        deviations.append({"field": "level", "message": f"the plan's confidence level is "
                                                        f"{plan['level']:g}; the report uses "
                                                        f"{level:g}"})
    labels = present + [h for h in mix if h not in present]
    strata_out = [] if dim is None else labels
    code = {h: i for i, h in enumerate(labels)}
    mix_codes = {code[h]: float(s) for h, s in mix.items()}
    exploratory = inputs.plan_version is None or not inputs.plan_locked
    if inputs.plan_version is None and inputs.draft_plan_version is not None:
        missing.append(f"exploratory, plan not locked: the report follows the study's draft "
                       f"analysis plan (version {inputs.draft_plan_version}: its primary "
                       "metric, thresholds, gates, mix and margin), which is not "
                       "pre-registered until it is locked")
    elif inputs.plan_version is None:
        missing.append("no analysis plan: the report follows no pre-registered rule (the "
                       "rubric pass rate is the primary metric; no threshold, gate or margin)")

    cand_ids = list(inputs.candidates)
    names = [inputs.candidates[c]["name"] for c in cand_ids]
    cells = _cells(outs, cand_ids, labels)
    frame = cells.frame
    metrics = inputs.metrics
    by_key = {m.key: m for m in metrics}

    primary_source = "plan" if plan.get("primary_metric") not in (None, "", "rubric_pass_rate") \
        or (inputs.plan_spec or {}).get("primary_metric") else "default"
    primary = str(plan.get("primary_metric") or "rubric_pass_rate")
    plan_criteria = (inputs.plan_spec or {}).get("criteria") or {}
    if primary not in ("rubric_pass_rate", "expected_cost"):
        entry = plan_criteria.get(primary) or {}
        family = entry.get("metric", "pass_rate")
        primary = f"{family}:{primary}"
    if primary not in by_key:
        warnings.append(f"the primary metric '{primary}' is not estimated (not in this rubric "
                        "or left out by params.metrics): the rubric pass rate decides")
        primary = "rubric_pass_rate" if "rubric_pass_rate" in by_key else metrics[0].key
        primary_source = "default"
    pm = by_key[primary]
    margin = float(plan.get("margin") or 0.0)

    # --- estimates -------------------------------------------------------------------------------
    estimates: list[dict[str, Any]] = []
    ppi_mix: dict[tuple[int, str], PPIEstimate | None] = {}
    ppi_cell: dict[tuple[int, int, str], PPIEstimate | None] = {}
    weight_all = frame["weight"].to_numpy(dtype=np.float64)
    any_label = False
    human_only_metrics: set[str] = set()
    # Human labels on the primary metric per (candidate, stratum code).
    primary_labels: dict[tuple[int, int], int] = {}
    for m in metrics:
        f_all = frame[f"f:{m.key}"].to_numpy(dtype=np.float64)
        y_all = frame[f"y:{m.key}"].to_numpy(dtype=np.float64)
        for ci, name in enumerate(names):
            a, b = cells.cand_bounds.get(ci, (0, 0))
            f, y, w, s = f_all[a:b], y_all[a:b], weight_all[a:b], cells.strat[a:b]
            lab = np.isfinite(y)
            lab_f = lab & np.isfinite(f)
            human: dict[int, PPIEstimate] = {}
            judge: dict[int, PPIEstimate] = {}
            for h in labels:
                si = code[h]
                lo, hi = cells.bounds.get((ci, si), (0, 0))
                n_out = hi - lo
                row: dict[str, Any] = {"candidate": name, "metric": m.key, "stratum": h,
                                       "n_outputs": n_out, "n_labelled": 0, "no_data": n_out == 0,
                                       "human": None, "judge": None, "ppi": None}
                ppi_cell[(ci, si, m.key)] = None
                if n_out:
                    fy, yy, ww = f_all[lo:hi], y_all[lo:hi], weight_all[lo:hi]
                    ly = np.isfinite(yy)
                    lf = ly & np.isfinite(fy)
                    row["n_labelled"] = int(ly.sum())
                    if m.key == primary:
                        primary_labels[(ci, si)] = row["n_labelled"]
                    if ly.any():
                        any_label = True
                        human[si] = classical_mean(yy[ly], w=ww[ly], level=level)
                        row["human"] = human[si].to_json()
                    if np.isfinite(fy).any():
                        judge[si] = naive_mean(fy[np.isfinite(fy)], level=level)
                        row["judge"] = judge[si].to_json()
                    if lf.any():
                        # The judge term runs over every output of the cell (labelled ones
                        # too: the difference estimator of survey sampling), so unequal
                        # inclusion probabilities need weights on the labelled set only; the
                        # unlabelled rest alone would over-represent rarely drawn outputs.
                        # Its variance is design-based (census=True), not ppi_py's: the two
                        # sets overlap, and with every output labelled it is the human one.
                        cell_est = ppi_mean(yy[lf], fy[lf], fy[np.isfinite(fy)], w=ww[lf],
                                            level=level, census=True)
                        ppi_cell[(ci, si, m.key)] = cell_est
                        row["ppi"] = cell_est.to_json()
                    elif ly.any():
                        row["ppi"] = row["human"]
                        ppi_cell[(ci, si, m.key)] = human[si]
                    if not ly.any() and len(missing) < MAX_MISSING and m.key == primary:
                        where = "" if dim is None else f" in stratum '{h}'"
                        missing.append(f"no human label yet for {name}{where}: its estimate "
                                       "there is the judge's only (biased)")
                if dim is not None:
                    estimates.append(row)
            # The mix.
            n_out_total = b - a
            mix_row: dict[str, Any] = {"candidate": name, "metric": m.key, "stratum": MIX,
                                       "n_outputs": n_out_total, "n_labelled": int(lab.sum()),
                                       "no_data": n_out_total == 0, "human": None,
                                       "judge": None, "ppi": None}
            est_mix: PPIEstimate | None = None
            if n_out_total:
                hm, _ = combine_strata(human, mix_codes, level=level,
                                       method="mix of per-stratum human-only means")
                jm, _ = combine_strata(judge, mix_codes, level=level,
                                       method="mix of per-stratum judge-only means (biased)")
                mix_row["human"], mix_row["judge"] = _ppi_json(hm), _ppi_json(jm)
                if lab_f.any():
                    every = np.isfinite(f)
                    strat = ppi_mean_stratified(y[lab_f], f[lab_f], s[lab_f], f[every], s[every],
                                                mix=mix_codes, w=w[lab_f], level=level,
                                                census=True)
                    est_mix = strat.mix
                    if strat.missing and m.key == primary:
                        gone = ", ".join(labels[k] for k in strat.missing)
                        missing.append(f"no human label yet for {name} in {gone} (weighted in "
                                       "the mix): no prediction-powered estimate on the mix")
                elif lab.any():
                    # No judge score on this metric (no judge, or it was not run): the
                    # human labels alone decide, as the cells' own estimates do.
                    est_mix = hm
                    human_only_metrics.add(m.key)
                mix_row["ppi"] = _ppi_json(est_mix)
            ppi_mix[(ci, m.key)] = est_mix
            estimates.append(mix_row)
    if not any_label:
        missing.insert(0, "no human label yet: every figure is the judge's alone (biased); "
                          "label a random sample of outputs (a sampling plan) to get human "
                          "and prediction-powered estimates")

    # --- gates -------------------------------------------------------------------------------
    gates_plan = {k: float(v) for k, v in (plan.get("gates") or {}).items() if k in GATES}
    gate_rows: list[dict[str, Any]] = []
    gate_failures: dict[str, list[str]] = {n: [] for n in names}
    gate_mix: dict[tuple[int, str], Estimate] = {}
    n_strata = len(labels)
    group_cell = cells.cand * n_strata + cells.strat
    for gate, (column, stat, direction) in GATES.items():
        need_gate = gate in gates_plan
        if not need_gate and gate not in ("latency_p95_ms", "cost_per_1000"):
            continue
        values = frame[column].to_numpy(dtype=np.float64)
        per_cell: dict[int, Estimate] = {}
        per_cand: dict[int, Estimate] = {}
        if stat == "rate":
            for key, (lo, hi) in cells.bounds.items():
                v = values[lo:hi]
                v = v[np.isfinite(v)]
                per_cell[key[0] * n_strata + key[1]] = rate_gate(int(v.sum()), int(v.size),
                                                                 level=level)
            for ci, (lo, hi) in cells.cand_bounds.items():
                v = values[lo:hi]
                v = v[np.isfinite(v)]
                per_cand[ci] = rate_gate(int(v.sum()), int(v.size), level=level)
        elif stat in ("q50", "q95"):
            q = 0.5 if stat == "q50" else 0.95
            if values.size:
                per_cell = quantile_intervals(values, group_cell, q, level=level,
                                              n_resamples=n_resamples,
                                              rng=_rng(seed, gate, "cell"))
                per_cand = quantile_intervals(values, cells.cand, q, level=level,
                                              n_resamples=n_resamples,
                                              rng=_rng(seed, gate, "mix"))
        else:
            if values.size:
                per_cell = mean_per_thousand(values, group_cell, level=level)
                per_cand = mean_per_thousand(values, cells.cand, level=level)
        for ci, name in enumerate(names):
            if ci in per_cand:
                gate_mix[(ci, gate)] = per_cand[ci]
            if not need_gate:
                continue
            threshold = gates_plan[gate]
            gate_targets: list[tuple[str, Estimate | None]] = [(MIX, per_cand.get(ci))]
            if dim is not None:
                gate_targets += [(h, per_cell.get(ci * n_strata + code[h])) for h in labels]
            for h, gest in gate_targets:
                if gest is None:
                    gest = Estimate(value=math.nan, n_items=0, method="no outputs",
                                    level=level, warnings=("no outputs",))
                bound, passed = gate_check(gest, threshold=threshold,
                                           direction="min" if direction == "min" else "max")
                gate_rows.append({"candidate": name, "stratum": h, "gate": gate,
                                  "threshold": threshold, "estimate": _est_json(gest),
                                  "bound": bound, "passed": passed, "n": gest.n_items})
                if h == MIX and passed is False:
                    gate_failures[name].append(gate)
    if mix_source != "observed" and dim is not None and gates_plan:
        observed = {h: items_per_label.get(h, 0) / max(sum(items_per_label.values()), 1)
                    for h in labels}
        if any(abs(observed.get(h, 0.0) - s) > 0.05 for h, s in mix.items()):
            warnings.append("gates on the mix are computed over all of a candidate's outputs "
                            "(the observed mix of strata), not re-weighted to the deployment "
                            "mix; see each stratum's gates")

    # --- pairwise comparisons ------------------------------------------------------------------
    pairwise, win = _pairwise(inputs, names, cand_ids, labels, code, mix_codes, level,
                              warnings, missing)

    # --- thresholds of the plan --------------------------------------------------------------
    threshold_rows: list[dict[str, Any]] = []
    threshold_fail: dict[str, list[str]] = {n: [] for n in names}
    for key, entry in plan_criteria.items():
        family = entry.get("metric")
        mkey = f"{family}:{key}"
        if family == "win_rate":
            rows_, failed = _win_rate_thresholds(
                key, entry, pairwise, win, names, labels, mix, dim is not None, warnings)
            threshold_rows += rows_
            for name in failed:
                threshold_fail[name].append(mkey)
            continue
        if mkey not in by_key:
            continue
        threshold = float(entry["threshold"])
        direction = str(entry.get("direction", ">="))
        t_targets: list[tuple[str, int | None]] = [(MIX, None)]
        if entry.get("every_stratum", True) and dim is not None:
            t_targets += [(h, code[h]) for h in labels]
        for ci, name in enumerate(names):
            for h, tsi in t_targets:
                test = ppi_mix.get((ci, mkey)) if tsi is None else ppi_cell.get((ci, tsi, mkey))
                if tsi is not None and mix.get(h, 0.0) == 0.0 and test is None:
                    continue
                status = "uncertain"
                if test is not None and test.ci_low is not None and test.ci_high is not None:
                    lo_, hi_ = test.ci_low, test.ci_high
                    if direction == ">=":
                        status = "pass" if lo_ >= threshold else "fail" if hi_ < threshold \
                            else "uncertain"
                    else:
                        status = "pass" if hi_ <= threshold else "fail" if lo_ > threshold \
                            else "uncertain"
                threshold_rows.append({"candidate": name, "metric": mkey, "stratum": h,
                                       "threshold": threshold, "direction": direction,
                                       "status": status})
                if h == MIX and status == "fail":
                    threshold_fail[name].append(mkey)

    # --- rankings ----------------------------------------------------------------------------
    def ranking(values: dict[int, float]) -> list[int]:
        ok = [ci for ci, v in values.items() if math.isfinite(v)]
        return sorted(ok, key=lambda ci: (-_oriented(pm, values[ci]), names[ci]))

    def value_of(e: PPIEstimate | None) -> float:
        return math.nan if e is None else float(e.value)

    mix_values = {ci: value_of(ppi_mix.get((ci, pm.key))) for ci in range(len(names))}
    mix_order = ranking(mix_values)
    rankings = [{"stratum": MIX, "order": [names[c] for c in mix_order],
                 "best": names[mix_order[0]] if mix_order else None}]
    stratum_order: dict[int, list[int]] = {}
    if dim is not None:
        for h in labels:
            order = ranking({ci: value_of(ppi_cell.get((ci, code[h], pm.key)))
                             for ci in range(len(names))})
            stratum_order[code[h]] = order
            rankings.append({"stratum": h, "order": [names[c] for c in order],
                             "best": names[order[0]] if order else None})

    # --- eligibility and the reference candidate -----------------------------------------------
    eligible = [ci for ci in mix_order
                if not gate_failures[names[ci]] and not threshold_fail[names[ci]]]
    reference = eligible[0] if eligible else (mix_order[0] if mix_order else None)

    # --- paired differences (reference - each other) -------------------------------------------
    diff_rows: list[dict[str, Any]] = []
    diffs: dict[tuple[int, int], Any] = {}
    if reference is not None:
        for other in range(len(names)):
            if other == reference:
                continue
            res = _paired(cells, reference, other, pm.key, labels, code, mix_codes, level)
            if res is None:
                continue
            diffs[(reference, other)] = res
            targets2: list[tuple[str, PPIEstimate | None]] = [(MIX, res.mix)]
            if dim is not None:
                targets2 += [(h, res.per_stratum.get(code[h])) for h in labels]
            for h, dest in targets2:
                if dest is None:
                    continue
                p = two_sided_p(dest.value, dest.se)
                diff_rows.append({"metric": pm.key, "stratum": h, "a": names[reference],
                                  "b": names[other], "estimate": dest.to_json(),
                                  "p_value": p if math.isfinite(p) else None})

    # --- flips -------------------------------------------------------------------------------
    flips: list[dict[str, Any]] = []
    if reference is not None and dim is not None:
        tests: list[tuple[str, int, PPIEstimate, float]] = []
        for h in labels:
            order = stratum_order.get(code[h]) or []
            if not order or order[0] == reference or mix.get(h, 0.0) <= 0.0:
                continue
            best = order[0]
            res = diffs.get((reference, best))
            est: PPIEstimate | None = (
                res.per_stratum.get(code[h]) if res is not None else None
            )
            if est is None:
                continue
            # The stratum's best minus the reference: positive when the flip favours it.
            flipped = PPIEstimate(
                value=-est.value,
                ci_low=None if est.ci_high is None else -est.ci_high,
                ci_high=None if est.ci_low is None else -est.ci_low,
                se=est.se, n_labelled=est.n_labelled, n_unlabelled=est.n_unlabelled,
                lam=est.lam, method=est.method.replace("A - B", "B - A"), level=est.level,
                warnings=est.warnings,
            )
            tests.append((h, best, flipped, two_sided_p(est.value, est.se)))
        adjusted = holm([t[3] for t in tests]) if tests else []
        for (h, best, fest, p), p_adj in zip(tests, adjusted, strict=True):
            better = _oriented(pm, fest.value) > 0
            if math.isfinite(p_adj) and p_adj < 1.0 - level and better:
                flips.append({"stratum": h, "best": names[best], "mix_best": names[reference],
                              "difference": fest.to_json(), "p_value": p,
                              "p_adjusted": p_adj, "correction": "holm"})

    # --- frontier ----------------------------------------------------------------------------
    frontier: list[dict[str, Any]] = []
    pts = np.full((len(names), 3), np.nan)
    for ci in range(len(names)):
        lat = gate_mix.get((ci, "latency_p95_ms"))
        cost = gate_mix.get((ci, "cost_per_1000"))
        pts[ci] = [mix_values[ci],
                   lat.value if lat is not None else math.nan,
                   cost.value if cost is not None else math.nan]
    on_front = pareto_front(pts, [pm.higher_is_better, False, False]) if len(names) else \
        np.zeros(0, dtype=bool)
    for ci, name in enumerate(names):
        frontier.append({"candidate": name, "quality": pts[ci, 0], "latency_p95_ms": pts[ci, 1],
                         "cost_per_1000": pts[ci, 2], "on_frontier": bool(on_front[ci])})

    # --- public vs private -------------------------------------------------------------------
    pvp = _public_vs_private(inputs, params, names, cand_ids, mix_values, mix_order, pm,
                             reference, diff_rows, level, warnings)

    # --- the decision ------------------------------------------------------------------------
    decision, next_labels = _decision_table(
        names=names, pm=pm, margin=margin, level=level, mix_order=mix_order,
        eligible=eligible, diffs=diffs, flips=flips, gate_failures=gate_failures,
        threshold_rows=threshold_rows, ppi_mix=ppi_mix, primary_labels=primary_labels,
        labels=labels, mix_codes=mix_codes, human_only=pm.key in human_only_metrics,
        plan_spec=inputs.plan_spec or {}, has_outputs=set(cells.bounds),
    )

    if inputs.pairwise_criterion is not None and \
            all(c.scale == "pairwise" for c in inputs.criteria):
        # Nothing rates single outputs: the outputs' "no human label" lines would mislead.
        missing = [m for m in missing if not m.startswith("no human label yet")]
        decision = {**decision, "text": "no decision by the plan's rule: the rubric has only "
                                        "pairwise criteria, which the rule does not read; see "
                                        "the pairwise preferences (win rates and the "
                                        "Bradley-Terry ranking)"}
    _clip_rate_intervals(estimates, metrics)
    simulated = bool(inputs.study_simulated or inputs.annotators_simulated
                     or (inputs.judge or {}).get("simulated"))
    return {
        "version": SELECTION_RESULT_VERSION, "kind": "selection", "plan_version": None,
        "fingerprint": "", "simulated": simulated, "level": level, "dimension": dim,
        "strata": strata_out, "mix": {} if dim is None else mix, "mix_source": mix_source,
        "plan_followed": inputs.plan_version is not None and not deviations,
        "exploratory": exploratory, "draft_plan_version": inputs.draft_plan_version,
        "deviations": deviations, "primary_metric": pm.key, "primary_source": primary_source,
        "rubric_rule": dict(inputs.rubric_rule), "margin": margin,
        "judge": inputs.judge,
        "candidates": [{"id": cid, **inputs.candidates[cid]} for cid in cand_ids],
        "metrics": [{"key": m.key, "label": m.label, "unit": m.unit,
                     "higher_is_better": m.higher_is_better} for m in metrics],
        "estimates": estimates, "differences": diff_rows, "rankings": rankings,
        "flips": flips, "gates": gate_rows,
        "gate_failures": {n: v for n, v in gate_failures.items() if v},
        "thresholds": threshold_rows, "frontier": frontier, "public_vs_private": pvp,
        "decision": decision, "next_labels": next_labels, "pairwise": pairwise,
        "missing": missing, "warnings": warnings,
    }


def _status(test: PPIEstimate | None, threshold: float, direction: str) -> str:
    """pass when the whole interval is on the right side of the threshold, fail when it is on
    the wrong side, uncertain otherwise (or without an interval)."""
    if test is None or test.ci_low is None or test.ci_high is None:
        return "uncertain"
    lo, hi = test.ci_low, test.ci_high
    if direction == ">=":
        return "pass" if lo >= threshold else "fail" if hi < threshold else "uncertain"
    return "pass" if hi <= threshold else "fail" if lo > threshold else "uncertain"


def _clip01(e: PPIEstimate | None) -> PPIEstimate | None:
    """A win rate's interval cut to [0, 1] (as the rates' intervals are)."""
    if e is None:
        return None
    return dataclasses.replace(
        e, ci_low=None if e.ci_low is None else min(max(e.ci_low, 0.0), 1.0),
        ci_high=None if e.ci_high is None else min(max(e.ci_high, 0.0), 1.0))


def _swap(e: PPIEstimate | None) -> PPIEstimate | None:
    """The win rate of B over A from that of A over B (ties count half on both sides)."""
    if e is None:
        return None
    return dataclasses.replace(
        e, value=1.0 - e.value, ci_low=None if e.ci_high is None else 1.0 - e.ci_high,
        ci_high=None if e.ci_low is None else 1.0 - e.ci_low)


def _win_rate_cells(
    y: FloatArray, f: FloatArray, w: FloatArray, s: npt.NDArray[np.int64],
    strata: Sequence[int], mix_codes: Mapping[int, float], level: float,
) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """Human-only, judge-only and PPI win rates of one oriented pair per stratum code and on
    the mix, computed like the outputs' cells (module docstring of compute)."""
    per: dict[int, dict[str, Any]] = {}
    human: dict[int, PPIEstimate] = {}
    judge: dict[int, PPIEstimate] = {}
    for si in strata:
        at = s == si
        n_c = int(at.sum())
        if not n_c:
            continue
        yy, ff, ww = y[at], f[at], w[at]
        ly = np.isfinite(yy)
        jf = np.isfinite(ff)
        lf = ly & jf
        cell: dict[str, Any] = {"n": n_c, "n_labelled": int(ly.sum()), "human": None,
                                "judge": None, "ppi": None}
        if ly.any():
            human[si] = classical_mean(yy[ly], w=ww[ly], level=level)
            cell["human"] = human[si]
        if jf.any():
            judge[si] = naive_mean(ff[jf], level=level)
            cell["judge"] = judge[si]
        if lf.any():
            # The judge term over every comparison of the pair in the stratum, labelled ones
            # too (the difference estimator; see the outputs' cells).
            cell["ppi"] = ppi_mean(yy[lf], ff[lf], ff[jf], w=ww[lf], level=level, census=True)
        elif ly.any():
            cell["ppi"] = human[si]
        per[si] = cell
    hm, _ = combine_strata(human, mix_codes, level=level,
                           method="mix of per-stratum human-only win rates")
    jm, _ = combine_strata(judge, mix_codes, level=level,
                           method="mix of per-stratum judge-only win rates (biased)")
    lab_f = np.isfinite(y) & np.isfinite(f)
    every = np.isfinite(f)
    pm: PPIEstimate | None = None
    if lab_f.any():
        pm = ppi_mean_stratified(y[lab_f], f[lab_f], s[lab_f], f[every], s[every],
                                 mix=mix_codes, w=w[lab_f], level=level, census=True).mix
    elif np.isfinite(y).any():
        pm = hm
    mix_cell = {"n": int(y.size), "n_labelled": int(np.isfinite(y).sum()), "human": hm,
                "judge": jm, "ppi": pm}
    return per, mix_cell


def bradley_terry_fit(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], y: FloatArray, f: FloatArray,
    w: FloatArray, *, scale: FloatArray | None = None, reference: int, level: float,
) -> BradleyTerry:
    """`evalstats.ppi.ppi_bradley_terry` on comparisons (candidate codes ``a`` and ``b``,
    human score ``y`` of A, judge score ``f`` of A, inclusion weight ``w`` of the human
    labels, ``scale`` a population weight of each comparison, 1 by default): the labelled set
    is the comparisons with both a human and a judge score, weighted ``w * scale``; the judge
    term runs over the judged comparisons WITHOUT a human label, weighted ``scale``: ppi_py's
    design of two independent samples, whose variance the fit uses (the win rates' difference
    estimator has its own, design-based variance; a logistic fit has no such form here).
    Without any judge score it is the human-only fit (lambda 0). Raises ValueError when the
    comparisons do not identify the strengths."""
    sc = np.ones(a.size) if scale is None else scale
    every = np.isfinite(f)
    cands = sorted(set(np.concatenate([a, b]).tolist()))
    if not every.any():
        lab = np.isfinite(y)
        return ppi_bradley_terry(y[lab], a[lab], b[lab], np.zeros(int(lab.sum())),
                                 a[:0], b[:0], np.zeros(0), candidates=cands,
                                 reference=reference, w=(w * sc)[lab], lam=0.0, level=level)
    lab = np.isfinite(y) & every
    rest = every & ~np.isfinite(y)
    return ppi_bradley_terry(y[lab], a[lab], b[lab], f[lab], a[rest], b[rest], f[rest],
                             candidates=cands, reference=reference, w=(w * sc)[lab],
                             w_unlabelled=sc[rest], level=level)


def _pairwise(
    inputs: SelectionInputs, names: Sequence[str], cand_ids: Sequence[int],
    labels: Sequence[str], code: Mapping[str, int], mix_codes: Mapping[int, float],
    level: float, warnings: list[str], missing: list[str],
) -> tuple[dict[str, Any] | None, dict[tuple[int, int, str], PPIEstimate | None]]:
    """The pairwise section (docs/reports.md): win rates per pair of candidates, per stratum
    and on the mix, and Bradley-Terry strengths; and the oriented win rates by (candidate,
    opponent, stratum) for the plan's win_rate thresholds."""
    crit = inputs.pairwise_criterion
    win: dict[tuple[int, int, str], PPIEstimate | None] = {}
    if crit is None:
        return None, win
    cmp = inputs.comparisons
    by_id = pd.Index(list(cand_ids))
    a = by_id.get_indexer(cmp["a"].to_numpy()).astype(np.int64)
    b = by_id.get_indexer(cmp["b"].to_numpy()).astype(np.int64)
    s = pd.Index(list(labels)).get_indexer(cmp["stratum"].astype(str).to_numpy()).astype(
        np.int64)
    keep = (a >= 0) & (b >= 0) & (a != b) & (s >= 0)
    a, b, s = a[keep], b[keep], s[keep]
    y = cmp["y"].to_numpy(dtype=np.float64)[keep]
    f = cmp["f"].to_numpy(dtype=np.float64)[keep]
    w = cmp["weight"].to_numpy(dtype=np.float64)[keep]
    section: dict[str, Any] = {"criterion": crit.key, "win_rates": [], "bradley_terry": [],
                               "reference": None}
    if not a.size:
        missing.append(f"no comparison of two candidates on the pairwise criterion "
                       f"'{crit.key}' yet: no win rate or Bradley-Terry ranking")
        return section, win
    if not np.isfinite(y).any():
        missing.append(f"no human label on a comparison of '{crit.key}' yet: its win rates "
                       "are the judge's only (biased) and there is no Bradley-Terry ranking")
    dim = inputs.dimension
    # Each pair in candidate order (lower index first): a comparison stored the other way
    # round scores 1 - its score for A.
    lo_, hi_ = np.minimum(a, b), np.maximum(a, b)
    flip = a > b
    y_o = np.where(flip, 1.0 - y, y)
    f_o = np.where(flip, 1.0 - f, f)
    strata = [code[h] for h in labels]
    for i, j in sorted(set(zip(lo_.tolist(), hi_.tolist(), strict=True))):
        at = (lo_ == i) & (hi_ == j)
        per, mix_cell = _win_rate_cells(y_o[at], f_o[at], w[at], s[at], strata, mix_codes,
                                        level)
        targets: list[tuple[str, dict[str, Any] | None]] = []
        if dim is not None:
            targets += [(h, per.get(code[h])) for h in labels]
        targets.append((MIX, mix_cell))
        for h, cell in targets:
            if cell is None:
                win[(i, j, h)] = win[(j, i, h)] = None
                continue
            est = {k: _clip01(cell[k]) for k in ("human", "judge", "ppi")}
            win[(i, j, h)] = est["ppi"]
            win[(j, i, h)] = _swap(est["ppi"])
            section["win_rates"].append({
                "a": names[i], "b": names[j], "stratum": h, "n_comparisons": cell["n"],
                "n_labelled": cell["n_labelled"],
                **{k: _ppi_json(v) for k, v in est.items()}})

    # --- Bradley-Terry ---------------------------------------------------------------------
    if not np.isfinite(y).any():
        return section, win
    ref = _bt_reference(inputs, names, a, b)
    section["reference"] = names[ref]
    bt_targets: list[tuple[str, npt.NDArray[np.bool_], FloatArray]] = []
    every = np.ones(a.size, dtype=bool)
    if dim is None:
        bt_targets.append((MIX, every, w))
    else:
        # The mix: every comparison, re-weighted from its stratum's share of the comparisons
        # to the stratum's share of the deployment mix.
        counts = np.bincount(s, minlength=len(labels)).astype(np.float64)
        share = counts / counts.sum()
        absent = [labels[k] for k, v in mix_codes.items() if v > 0 and counts[k] == 0]
        if absent:
            warnings.append("no Bradley-Terry ranking on the mix: no comparison in "
                            f"{', '.join(absent)} (weighted in the mix)")
        else:
            ratio = np.array([mix_codes.get(k, 0.0) / share[k] if share[k] > 0 else 0.0
                              for k in range(len(labels))])
            bt_targets.append((MIX, ratio[s] > 0, ratio[s]))
        for h in labels:
            bt_targets.append((h, s == code[h], np.ones(a.size)))
    skipped: list[str] = []
    for h, sel, scale in bt_targets:
        aa, bb = a[sel], b[sel]
        if ref not in set(aa.tolist()) | set(bb.tolist()):
            if h == MIX:
                warnings.append(f"no Bradley-Terry ranking on the mix: {names[ref]} (the "
                                "reference) has no comparison")
            else:
                skipped.append(h)
            continue
        try:
            fit = bradley_terry_fit(aa, bb, y[sel], f[sel], w[sel], scale=scale[sel],
                                    reference=ref, level=level)
        except ValueError as exc:
            if h == MIX:
                warnings.append(f"no Bradley-Terry ranking on the mix: {exc}")
            else:
                skipped.append(h)
            continue
        warnings.extend(f"Bradley-Terry ({stratum_name(h)}): {x}" for x in fit.warnings)
        for rank, c in enumerate(fit.order, start=1):
            e = fit.strengths[c]
            section["bradley_terry"].append({
                "stratum": h, "candidate": names[c], "strength": e.value,
                "ci_low": e.ci_low, "ci_high": e.ci_high, "rank": rank})
    if skipped:
        warnings.append("no Bradley-Terry ranking in " + ", ".join(skipped) + " (too few "
                        "labelled comparisons there to connect the candidates, or none of "
                        "the reference)")
    return section, win


def stratum_name(h: str) -> str:
    return "deployment mix" if h == MIX else f"stratum {h}"


def _bt_reference(inputs: SelectionInputs, names: Sequence[str], a: npt.NDArray[np.int64],
                  b: npt.NDArray[np.int64]) -> int:
    """The candidate whose strength is fixed at 0: the plan's win_rate baseline when it was
    compared, else the first compared candidate."""
    seen = set(a.tolist()) | set(b.tolist())
    crit = inputs.pairwise_criterion
    entry = ((inputs.plan_spec or {}).get("criteria") or {}).get(crit.key if crit else "")
    baseline = entry.get("baseline") if isinstance(entry, Mapping) else None
    if isinstance(baseline, str) and baseline in names and names.index(baseline) in seen:
        return names.index(baseline)
    return min(seen)


def _win_rate_thresholds(
    key: str, entry: Mapping[str, Any], pairwise: Mapping[str, Any] | None,
    win: Mapping[tuple[int, int, str], PPIEstimate | None], names: Sequence[str],
    labels: Sequence[str], mix: Mapping[str, float], has_dim: bool, warnings: list[str],
) -> tuple[list[dict[str, Any]], list[str]]:
    """The plan's win_rate threshold on `key`: every candidate's PPI win rate over the
    plan's baseline, on the mix and (every_stratum) per stratum; the names failing it on the
    mix."""
    if pairwise is None or pairwise.get("criterion") != key:
        warnings.append(f"the plan's win_rate threshold on '{key}' is not checked: the report "
                        "has no win rates on that criterion")
        return [], []
    baseline = entry.get("baseline")
    if not isinstance(baseline, str) or baseline not in names:
        warnings.append(f"the plan's win_rate threshold on '{key}' is not checked: "
                        + ("it names no baseline candidate" if not isinstance(baseline, str)
                           else f"its baseline '{baseline}' is not among the candidates"))
        return [], []
    base = names.index(baseline)
    threshold = float(entry["threshold"])
    direction = str(entry.get("direction", ">="))
    targets = [MIX] + (list(labels) if entry.get("every_stratum", True) and has_dim else [])
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for ci, name in enumerate(names):
        if ci == base:
            continue
        for h in targets:
            test = win.get((ci, base, h))
            if h != MIX and mix.get(h, 0.0) == 0.0 and test is None:
                continue
            status = _status(test, threshold, direction)
            rows.append({"candidate": name, "metric": f"win_rate:{key}", "stratum": h,
                         "threshold": threshold, "direction": direction, "status": status})
            if h == MIX and status == "fail":
                failed.append(name)
    return rows, failed


def _paired(
    cells: _Cells, a: int, b: int, key: str, labels: Sequence[str], code: Mapping[str, int],
    mix_codes: Mapping[int, float], level: float,
) -> Any:
    """Stratified paired difference a - b on the items both candidates answered (None when
    they share no labelled item)."""
    frame = cells.frame
    cols = ["item", f"f:{key}", f"y:{key}", "weight"]
    la, ha = cells.cand_bounds.get(a, (0, 0))
    lb, hb = cells.cand_bounds.get(b, (0, 0))
    fa = frame.iloc[la:ha][cols].assign(s=cells.strat[la:ha]).drop_duplicates("item")
    fb = frame.iloc[lb:hb][cols].drop_duplicates("item")
    j = fa.merge(fb, on="item", suffixes=("_a", "_b"))
    if not len(j):
        return None
    ya, yb = j[f"y:{key}_a"].to_numpy(np.float64), j[f"y:{key}_b"].to_numpy(np.float64)
    f_a, f_b = j[f"f:{key}_a"].to_numpy(np.float64), j[f"f:{key}_b"].to_numpy(np.float64)
    s = j["s"].to_numpy(np.int64)
    both_f = np.isfinite(f_a) & np.isfinite(f_b)
    both_y = np.isfinite(ya) & np.isfinite(yb)
    if not both_f.any() and both_y.any():
        # No judge score on the metric: the human labels alone decide.
        wy = (j["weight_a"].to_numpy(np.float64) * j["weight_b"].to_numpy(np.float64))[both_y]
        return _paired_human_only(ya[both_y] - yb[both_y], s[both_y], wy, mix_codes, level)
    lab = both_y & both_f
    if not lab.any():
        return None
    # Both outputs of a labelled pair were drawn; their weights multiply (independent draws of
    # outputs; within a stratum the weights are constant for a stratified plan anyway).
    w = (j["weight_a"].to_numpy(np.float64) * j["weight_b"].to_numpy(np.float64))[lab]
    # As for the cells: the judge term over every item both candidates answered.
    return paired_difference_stratified(
        ya[lab], yb[lab], f_a[lab], f_b[lab], s[lab], f_a[both_f], f_b[both_f], s[both_f],
        mix=mix_codes, w=w, level=level, census=True,
    )


def _paired_human_only(
    d: FloatArray, s: npt.NDArray[np.int64], w: FloatArray, mix_codes: Mapping[int, float],
    level: float,
) -> StratifiedPPI:
    """The paired difference from human labels alone: per stratum the weighted mean of the
    items' own differences (`classical_mean`), combined with the mix (`combine_strata`)."""
    per: dict[int, PPIEstimate] = {}
    for si in np.unique(s).tolist():
        at = s == si
        per[int(si)] = classical_mean(d[at], w=w[at], level=level)
    mixed, gone = combine_strata(per, mix_codes, level=level,
                                 method="mix of per-stratum human-only paired differences")
    return StratifiedPPI(per_stratum=per, mix=mixed, missing=tuple(gone),
                         weights=dict(mix_codes))


def _public_vs_private(
    inputs: SelectionInputs, params: Mapping[str, Any], names: Sequence[str],
    cand_ids: Sequence[int], mix_values: Mapping[int, float], mix_order: Sequence[int],
    pm: MetricMeta, reference: int | None, diff_rows: Sequence[Mapping[str, Any]],
    level: float, warnings: list[str],
) -> dict[str, Any] | None:
    scores = [inputs.candidates[c]["public_scores"] for c in cand_ids]
    bench = params.get("benchmark")
    if bench is None:
        common = set.intersection(*[{k for k, v in s.items() if isinstance(v, (int, float))
                                     and not isinstance(v, bool)} for s in scores]) \
            if scores else set()
        if not common:
            return None
        bench = sorted(common)[0]
    public = np.array([float(s[bench]) if isinstance(s.get(bench), (int, float))
                       and not isinstance(s.get(bench), bool) else math.nan for s in scores])
    if not np.isfinite(public).any():
        warnings.append(f"no candidate has the public score '{bench}'")
        return None
    private = np.array([mix_values[ci] for ci in range(len(names))])
    pub_rank = rank_with_ties(public, higher_is_better=True)
    priv_rank = rank_with_ties(private, higher_is_better=pm.higher_is_better)
    ok = np.isfinite(public) & np.isfinite(private)
    tau = kendall_tau(public[ok], private[ok] if pm.higher_is_better else -private[ok],
                      level=level) if ok.sum() >= 2 else None
    rows = [{"candidate": names[i], "public_score": public[i], "public_rank": pub_rank[i],
             "private_rank": priv_rank[i], "private_value": private[i]}
            for i in range(len(names))]
    flags = []
    n_ranked = int(np.isfinite(priv_rank).sum())
    for i in range(len(names)):
        if pub_rank[i] == 1.0 and np.isfinite(priv_rank[i]) and n_ranked >= 2 and \
                priv_rank[i] > n_ranked / 2:
            evidence = ""
            best = mix_order[0] if mix_order else None
            for row in diff_rows:
                if row["stratum"] == MIX and row["b"] == names[i]:
                    e = row["estimate"]
                    lo, hi = e.get("ci_low"), e.get("ci_high")
                    interval = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None \
                        else ""
                    evidence = (f"; {row['a']} - {names[i]} on the mix = {e['value']:.3f}"
                                f"{interval}")
            if not evidence and best is not None:
                evidence = f"; the private best is {names[best]}"
            flags.append({"candidate": names[i],
                          "message": f"first on the public benchmark '{bench}' but ranked "
                                     f"{priv_rank[i]:g} of {n_ranked} on the team's own items "
                                     f"(a contamination or overfitting signal){evidence}"})
    return {"benchmark": bench, "rows": rows,
            "kendall_tau": _est_json(tau) if tau is not None else None, "flags": flags}


GATE_WORDS = {"schema_valid_rate": "schema-valid rate", "error_rate": "error rate",
              "latency_p50_ms": "p50 latency", "latency_p95_ms": "p95 latency",
              "cost_per_1000": "cost per 1,000", "tokens_per_1000": "tokens per 1,000"}


def threshold_text(metric: str, threshold: float, direction: str,
                   baseline: str | None = None) -> str:
    """A pre-registered threshold as the decision says it: "correct ≥ 80 %"."""
    family, _, key = metric.partition(":")
    sym = "≥" if direction == ">=" else "≤"
    if family in ("pass_rate", "win_rate") or metric == "rubric_pass_rate":
        value = f"{threshold * 100:g} %"
    else:
        value = f"{threshold:g}"
    name = key or metric.replace("_", " ")
    if family == "mean_score":
        name = f"mean {key}"
    elif family == "win_rate":
        name = f"win rate on {key}" + (f" over {baseline}" if baseline else "")
    return f"{name} {sym} {value}"


def _decision_table(
    *, names: Sequence[str], pm: MetricMeta, margin: float, level: float,
    mix_order: Sequence[int], eligible: Sequence[int],
    diffs: Mapping[tuple[int, int], Any], flips: Sequence[Mapping[str, Any]],
    gate_failures: Mapping[str, Sequence[str]], threshold_rows: Sequence[Mapping[str, Any]],
    ppi_mix: Mapping[tuple[int, str], PPIEstimate | None],
    primary_labels: Mapping[tuple[int, int], int], labels: Sequence[str],
    mix_codes: Mapping[int, float], human_only: bool, plan_spec: Mapping[str, Any],
    has_outputs: set[tuple[int, int]],
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The decision by the decision table (`reports.selection.decision`) and, when too
    close, the labels that would settle it."""
    z = float(ndtri(0.5 + level / 2.0))
    sign = 1.0 if pm.higher_is_better else -1.0
    plan_criteria = plan_spec.get("criteria") or {}
    order = list(mix_order) + [ci for ci in range(len(names)) if ci not in mix_order]
    contenders: list[Contender] = []
    weighted = [si for si, share in mix_codes.items() if share > 0]
    for ci in order:
        name = names[ci]
        if any((ci, si) not in has_outputs for si in weighted):
            # No outputs in a stratum the mix weighs: no label can ever be had there, so the
            # candidate cannot be estimated on the mix and is not compared ("missing" says so).
            continue
        n_total = sum(n for (c, _), n in primary_labels.items() if c == ci)
        short_strata = sum(
            max(0, MIN_LABELS_PER_STRATUM - primary_labels.get((ci, si), 0))
            for si in weighted)
        short = max(DECISION_MIN_LABELS - n_total, short_strata, 0)
        if ci not in mix_order and short == 0:
            short = MIN_LABELS_PER_STRATUM  # no estimate on the mix at all
        ths: list[Threshold] = []
        for row in threshold_rows:
            if row["candidate"] != name or row["stratum"] != MIX:
                continue
            metric = str(row["metric"])
            entry = plan_criteria.get(metric.partition(":")[2]) or {}
            baseline = entry.get("baseline") if isinstance(entry, Mapping) else None
            text = threshold_text(metric, float(row["threshold"]), str(row["direction"]),
                                  baseline if isinstance(baseline, str) else None)
            settle = None
            th_est = ppi_mix.get((ci, metric))
            if row["status"] == "uncertain" and th_est is not None:
                settle = labels_to_settle(float(th_est.value), th_est.se,
                                          int(th_est.n_labelled), float(row["threshold"]), z)
            ths.append(Threshold(metric=metric, text=text, status=str(row["status"]),
                                 labels_to_settle=settle))
        contenders.append(Contender(
            name=name, n_labels=n_total, labels_short=short,
            gate_failures=tuple(GATE_WORDS.get(g, g) for g in gate_failures.get(name, [])),
            thresholds=tuple(ths)))
    leader = eligible[0] if eligible else None
    differences: dict[str, Difference] = {}
    if leader is not None:
        for other in eligible[1:]:
            res = diffs.get((leader, other))
            e = res.mix if res is not None else None
            if e is None:
                continue
            lo = None if e.ci_low is None else sign * e.ci_low
            hi = None if e.ci_high is None else sign * e.ci_high
            if lo is not None and hi is not None:
                lo, hi = min(lo, hi), max(lo, hi)
            differences[names[other]] = Difference(
                rival=names[other], value=sign * e.value, ci_low=lo, ci_high=hi,
                text=_fmt_diff(pm, e, sign))
    unit_scale, unit = (100.0, " points") if pm.unit == "rate" else (1.0, "")
    flip_texts = tuple(
        f"{f['best']} is better than {f['mix_best']} on {f['stratum']} "
        f"({_fmt_diff(pm, PPIEstimate(**{k: f['difference'][k] for k in _PPI_FIELDS}), sign)})"
        for f in flips)
    out = decide(DecisionInputs(
        metric=pm.label, margin=margin, margin_text=f"{margin * unit_scale:g}{unit}",
        level=level, contenders=tuple(contenders), differences=differences, flips=flip_texts,
        basis="decided from the human labels alone" if human_only
        else "prediction-powered estimates"))
    runner = names.index(out.runner_up) if out.runner_up in names else None
    res = diffs.get((leader, runner)) if leader is not None and runner is not None else None
    est: PPIEstimate | None = res.mix if res is not None else None
    decision = {"verdict": out.state, "headline": out.headline, "candidate": out.candidate,
                "runner_up": out.runner_up,
                "difference": None if est is None else est.to_json(), "text": out.text,
                "labels_needed": out.labels_needed, "threshold": out.threshold,
                "basis": "human_only" if human_only else "prediction_powered"}
    nxt = None
    if out.state == "too_close" and res is not None:
        nxt = _next_labels(res, est, margin, level, labels, mix_codes)
    return decision, nxt


_PPI_FIELDS = ("value", "ci_low", "ci_high", "se", "n_labelled", "n_unlabelled", "lam",
               "method", "level")


def _next_labels(
    res: Any, est: PPIEstimate | None, margin: float, level: float, labels: Sequence[str],
    mix_codes: Mapping[int, float],
) -> dict[str, Any] | None:
    """Extra paired labels per stratum (Neyman allocation on the PPI variances) so that the
    interval of the decisive difference would clear the margin if the estimate stayed put."""
    z = float(ndtri(0.5 + level / 2.0))
    gap = abs(est.value) - margin if est is not None else math.nan
    sigma: dict[int, float] = {}
    n_lab: dict[int, int] = {}
    pooled = [float(e.se) * math.sqrt(e.n_labelled) for e in res.per_stratum.values()
              if e.se is not None and e.n_labelled >= MIN_LABELS]
    prior = float(np.median(pooled)) if pooled else 0.5
    for s, share in mix_codes.items():
        if share <= 0:
            continue
        e = res.per_stratum.get(s)
        if e is not None and e.se is not None and e.n_labelled >= MIN_LABELS:
            sigma[s] = float(e.se) * math.sqrt(e.n_labelled)
        else:
            sigma[s] = prior
        n_lab[s] = int(e.n_labelled) if e is not None else 0
    feasible_gap = math.isfinite(gap) and gap > 0
    target = gap / z if feasible_gap else (float(est.se) / 2 if est and est.se else 0.0)
    alloc = neyman_allocation(sigma=sigma, n_labelled=n_lab, mix=mix_codes, target_se=target)
    out = alloc.to_json()
    out["per_stratum"] = {labels[int(k)]: v for k, v in out["per_stratum"].items()}
    out["feasible"] = bool(alloc.feasible and feasible_gap)
    return out


__all__ = ["GATES", "MIX", "selection_compute", "selection_compute_raw"]
