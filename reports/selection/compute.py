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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from evalstats.gates import gate_check, mean_per_thousand, quantile_intervals, rate_gate
from evalstats.ppi import (
    PPIEstimate,
    classical_mean,
    combine_strata,
    naive_mean,
    ppi_mean,
    ppi_mean_stratified,
)
from evalstats.ranking import holm, pareto_front, two_sided_p
from evalstats.results import Estimate
from reports.results import json_safe
from reviewhub.errors import Problems

from .cells import (
    MIX,
    Cells,
    cells_sort,
    clip_rate_intervals,
    est_json,
    oriented,
    paired_difference,
    ppi_json,
    rng,
)
from .inputs import ALL, UNKNOWN, SelectionInputs, mix_problems
from .outcome import decision_table, public_vs_private
from .pairwise import pairwise_section, threshold_status, win_rate_thresholds
from .results import SELECTION_RESULT_VERSION, MetricRef, SelectionResult

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


@dataclass
class Setting:
    """What every step reads: the parameters in force, the strata and the mix, the candidates
    sorted into cells, and the primary metric; `warnings` and `missing` collect the notes of
    every step in report order."""

    inputs: SelectionInputs
    params: Mapping[str, Any]
    level: float
    n_resamples: int
    seed: int
    dim: str | None
    items_per_label: dict[str, int]
    mix: dict[str, float]
    mix_source: str
    deviations: list[dict[str, str]]
    labels: list[str]
    code: dict[str, int]
    mix_codes: dict[int, float]
    cand_ids: list[int]
    names: list[str]
    cells: Cells
    metrics: list[MetricRef]
    pm: MetricRef
    primary_source: str
    margin: float
    warnings: list[str]
    missing: list[str]

    @property
    def plan_criteria(self) -> dict[str, Any]:
        return (self.inputs.plan_spec or {}).get("criteria") or {}


@dataclass
class Estimates:
    """The three estimates per candidate x stratum x metric and on the mix."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    mix: dict[tuple[int, str], PPIEstimate | None] = field(default_factory=dict)
    cell: dict[tuple[int, int, str], PPIEstimate | None] = field(default_factory=dict)
    any_label: bool = False
    human_only_metrics: set[str] = field(default_factory=set)
    # Human labels on the primary metric per (candidate, stratum code).
    primary_labels: dict[tuple[int, int], int] = field(default_factory=dict)


@dataclass
class Gates:
    rows: list[dict[str, Any]]
    failures: dict[str, list[str]]
    mix: dict[tuple[int, str], Estimate]


@dataclass
class Rankings:
    mix_values: dict[int, float]
    mix_order: list[int]
    rows: list[dict[str, Any]]
    stratum_order: dict[int, list[int]]


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
    """The result as a plain dict (before typing); see `selection_compute`. The steps run in
    report order: each reads the setting and the steps before it."""
    st = setting(inputs, params)
    est = estimates(st)
    gates = gates_check(st)
    pairwise, win = pairwise_section(
        inputs, st.names, st.cand_ids, st.labels, st.code, st.mix_codes, st.level,
        st.warnings, st.missing)
    threshold_rows, threshold_fail = plan_thresholds(st, est, pairwise, win)
    ranked = rankings(st, est)
    eligible = [ci for ci in ranked.mix_order
                if not gates.failures[st.names[ci]] and not threshold_fail[st.names[ci]]]
    reference = eligible[0] if eligible else (ranked.mix_order[0] if ranked.mix_order else None)
    diff_rows, diffs = differences(st, reference)
    flip_rows = flips(st, reference, ranked.stratum_order, diffs)
    pvp = public_vs_private(inputs, params, st.names, st.cand_ids, ranked.mix_values,
                            ranked.mix_order, st.pm, reference, diff_rows, st.level,
                            st.warnings)
    decision, next_labels = decision_table(
        names=st.names, pm=st.pm, margin=st.margin, level=st.level,
        mix_order=ranked.mix_order, eligible=eligible, diffs=diffs, flips=flip_rows,
        gate_failures=gates.failures, threshold_rows=threshold_rows, ppi_mix=est.mix,
        primary_labels=est.primary_labels, labels=st.labels, mix_codes=st.mix_codes,
        human_only=st.pm.key in est.human_only_metrics, plan_spec=inputs.plan_spec or {},
        has_outputs=set(st.cells.bounds),
    )
    if inputs.pairwise_criterion is not None and \
            all(c.scale == "pairwise" for c in inputs.criteria):
        # Nothing rates single outputs: the outputs' "no human label" lines would mislead.
        st.missing[:] = [m for m in st.missing if not m.startswith("no human label yet")]
        decision = {**decision, "text": "no decision by the plan's rule: the rubric has only "
                                        "pairwise criteria, which the rule does not read; see "
                                        "the pairwise preferences (win rates and the "
                                        "Bradley-Terry ranking)"}
    clip_rate_intervals(est.rows, st.metrics)
    return {
        **_heading(st), "estimates": est.rows, "differences": diff_rows,
        "rankings": ranked.rows, "flips": flip_rows, "gates": gates.rows,
        "gate_failures": {n: v for n, v in gates.failures.items() if v},
        "thresholds": threshold_rows, "frontier": frontier(st, gates, ranked),
        "public_vs_private": pvp, "decision": decision, "next_labels": next_labels,
        "pairwise": pairwise, "missing": st.missing, "warnings": st.warnings,
    }


def _heading(st: Setting) -> dict[str, Any]:
    """The result's fields that say what was estimated, under which rule."""
    inputs = st.inputs
    simulated = bool(inputs.study_simulated or inputs.annotators_simulated
                     or (inputs.judge or {}).get("simulated"))
    return {
        "version": SELECTION_RESULT_VERSION, "kind": "selection", "plan_version": None,
        "fingerprint": "", "simulated": simulated, "level": st.level, "dimension": st.dim,
        "strata": [] if st.dim is None else st.labels,
        "mix": {} if st.dim is None else st.mix, "mix_source": st.mix_source,
        "plan_followed": inputs.plan_version is not None and not st.deviations,
        "exploratory": inputs.plan_version is None or not inputs.plan_locked,
        "draft_plan_version": inputs.draft_plan_version,
        "deviations": st.deviations, "primary_metric": st.pm.key,
        "primary_source": st.primary_source, "rubric_rule": dict(inputs.rubric_rule),
        "margin": st.margin, "judge": inputs.judge,
        "candidates": [{"id": cid, **inputs.candidates[cid]} for cid in st.cand_ids],
        "metrics": [{"key": m.key, "label": m.label, "unit": m.unit,
                     "higher_is_better": m.higher_is_better} for m in st.metrics],
    }


# --- the setting: strata, the mix, the candidates' cells, the primary metric ------------------


def setting(inputs: SelectionInputs, params: Mapping[str, Any]) -> Setting:
    """The parameters in force, the strata and the mix, the cells and the primary metric."""
    plan = inputs.plan
    level = float(params.get("level") or plan.get("level") or 0.95)
    warnings = list(inputs.warnings)
    outs = inputs.outputs
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
    code = {h: i for i, h in enumerate(labels)}
    cand_ids = list(inputs.candidates)
    missing = _plan_notes(inputs)
    pm, primary_source = _primary_metric(inputs, warnings)
    return Setting(
        inputs=inputs, params=params, level=level,
        n_resamples=int(params.get("n_resamples", 1000)), seed=int(params.get("seed", 0)),
        dim=inputs.dimension, items_per_label=items_per_label, mix=mix,
        mix_source=mix_source, deviations=deviations, labels=labels, code=code,
        mix_codes={code[h]: float(s) for h, s in mix.items()}, cand_ids=cand_ids,
        names=[inputs.candidates[c]["name"] for c in cand_ids],
        cells=cells_sort(outs, cand_ids, labels), metrics=inputs.metrics, pm=pm,
        primary_source=primary_source, margin=float(plan.get("margin") or 0.0),
        warnings=warnings, missing=missing,
    )


def _plan_notes(inputs: SelectionInputs) -> list[str]:
    """The first "missing" lines: the report follows a draft plan, or none."""
    if inputs.plan_version is None and inputs.draft_plan_version is not None:
        return [f"exploratory, plan not locked: the report follows the study's draft "
                f"analysis plan (version {inputs.draft_plan_version}: its primary "
                "metric, thresholds, gates, mix and margin), which is not "
                "pre-registered until it is locked"]
    if inputs.plan_version is None:
        return ["no analysis plan: the report follows no pre-registered rule (the "
                "rubric pass rate is the primary metric; no threshold, gate or margin)"]
    return []


def _primary_metric(inputs: SelectionInputs, warnings: list[str]) -> tuple[MetricRef, str]:
    """The metric that decides and where it comes from ("plan" or "default")."""
    plan = inputs.plan
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
    return by_key[primary], primary_source


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



# --- estimates ---------------------------------------------------------------------------------


def estimates(st: Setting) -> Estimates:
    """Human-only, judge-only and prediction-powered estimates per candidate x stratum x
    metric (rows per stratum only with a dimension) and on the mix."""
    out = Estimates()
    frame = st.cells.frame
    weight_all = frame["weight"].to_numpy(dtype=np.float64)
    for m in st.metrics:
        f_all = frame[f"f:{m.key}"].to_numpy(dtype=np.float64)
        y_all = frame[f"y:{m.key}"].to_numpy(dtype=np.float64)
        for ci in range(len(st.names)):
            human: dict[int, PPIEstimate] = {}
            judge: dict[int, PPIEstimate] = {}
            for h in st.labels:
                row = _cell_estimates(st, out, m, ci, h, (f_all, y_all, weight_all),
                                      human, judge)
                if st.dim is not None:
                    out.rows.append(row)
            out.rows.append(_mix_estimates(st, out, m, ci, (f_all, y_all, weight_all),
                                           human, judge))
    if not out.any_label:
        st.missing.insert(0, "no human label yet: every figure is the judge's alone (biased); "
                             "label a random sample of outputs (a sampling plan) to get human "
                             "and prediction-powered estimates")
    return out


FloatArray = npt.NDArray[np.float64]
Columns = tuple[FloatArray, FloatArray, FloatArray]


def _cell_estimates(
    st: Setting, out: Estimates, m: MetricRef, ci: int, h: str, columns: Columns,
    human: dict[int, PPIEstimate], judge: dict[int, PPIEstimate],
) -> dict[str, Any]:
    """The row of one candidate x stratum x metric; fills `human` and `judge` per stratum
    code for the mix."""
    f_all, y_all, weight_all = columns
    name = st.names[ci]
    si = st.code[h]
    lo, hi = st.cells.bounds.get((ci, si), (0, 0))
    n_out = hi - lo
    row: dict[str, Any] = {"candidate": name, "metric": m.key, "stratum": h,
                           "n_outputs": n_out, "n_labelled": 0, "no_data": n_out == 0,
                           "human": None, "judge": None, "ppi": None}
    out.cell[(ci, si, m.key)] = None
    if not n_out:
        return row
    fy, yy, ww = f_all[lo:hi], y_all[lo:hi], weight_all[lo:hi]
    ly = np.isfinite(yy)
    lf = ly & np.isfinite(fy)
    row["n_labelled"] = int(ly.sum())
    if m.key == st.pm.key:
        out.primary_labels[(ci, si)] = row["n_labelled"]
    if ly.any():
        out.any_label = True
        human[si] = classical_mean(yy[ly], w=ww[ly], level=st.level)
        row["human"] = human[si].to_json()
    if np.isfinite(fy).any():
        judge[si] = naive_mean(fy[np.isfinite(fy)], level=st.level)
        row["judge"] = judge[si].to_json()
    if lf.any():
        # The judge term runs over every output of the cell (labelled ones too: the
        # difference estimator of survey sampling), so unequal inclusion probabilities need
        # weights on the labelled set only; the unlabelled rest alone would over-represent
        # rarely drawn outputs. Its variance is design-based (census=True), not ppi_py's:
        # the two sets overlap, and with every output labelled it is the human one.
        cell_est = ppi_mean(yy[lf], fy[lf], fy[np.isfinite(fy)], w=ww[lf],
                            level=st.level, census=True)
        out.cell[(ci, si, m.key)] = cell_est
        row["ppi"] = cell_est.to_json()
    elif ly.any():
        row["ppi"] = row["human"]
        out.cell[(ci, si, m.key)] = human[si]
    if not ly.any() and len(st.missing) < MAX_MISSING and m.key == st.pm.key:
        where = "" if st.dim is None else f" in stratum '{h}'"
        st.missing.append(f"no human label yet for {name}{where}: its estimate "
                          "there is the judge's only (biased)")
    return row


def _mix_estimates(
    st: Setting, out: Estimates, m: MetricRef, ci: int, columns: Columns,
    human: dict[int, PPIEstimate], judge: dict[int, PPIEstimate],
) -> dict[str, Any]:
    """The mix row of one candidate x metric: the strata's human-only and judge-only means
    combined with the mix, and the stratified prediction-powered estimate."""
    f_all, y_all, weight_all = columns
    name = st.names[ci]
    a, b = st.cells.cand_bounds.get(ci, (0, 0))
    f, y, w, s = f_all[a:b], y_all[a:b], weight_all[a:b], st.cells.strat[a:b]
    lab = np.isfinite(y)
    lab_f = lab & np.isfinite(f)
    n_out_total = b - a
    mix_row: dict[str, Any] = {"candidate": name, "metric": m.key, "stratum": MIX,
                               "n_outputs": n_out_total, "n_labelled": int(lab.sum()),
                               "no_data": n_out_total == 0, "human": None,
                               "judge": None, "ppi": None}
    est_mix: PPIEstimate | None = None
    if n_out_total:
        hm, _ = combine_strata(human, st.mix_codes, level=st.level,
                               method="mix of per-stratum human-only means")
        jm, _ = combine_strata(judge, st.mix_codes, level=st.level,
                               method="mix of per-stratum judge-only means (biased)")
        mix_row["human"], mix_row["judge"] = ppi_json(hm), ppi_json(jm)
        if lab_f.any():
            every = np.isfinite(f)
            strat = ppi_mean_stratified(y[lab_f], f[lab_f], s[lab_f], f[every], s[every],
                                        mix=st.mix_codes, w=w[lab_f], level=st.level,
                                        census=True)
            est_mix = strat.mix
            if strat.missing and m.key == st.pm.key:
                gone = ", ".join(st.labels[k] for k in strat.missing)
                st.missing.append(f"no human label yet for {name} in {gone} (weighted in "
                                  "the mix): no prediction-powered estimate on the mix")
        elif lab.any():
            # No judge score on this metric (no judge, or it was not run): the human labels
            # alone decide, as the cells' own estimates do.
            est_mix = hm
            out.human_only_metrics.add(m.key)
        mix_row["ppi"] = ppi_json(est_mix)
    out.mix[(ci, m.key)] = est_mix
    return mix_row


# --- gates ---------------------------------------------------------------------------------------


def gates_check(st: Setting) -> Gates:
    """The plan's gates per candidate on the mix and per stratum (the p95 latency and the cost
    per 1,000 are computed for the frontier even when the plan has no gate on them)."""
    plan_gates = {k: float(v) for k, v in (st.inputs.plan.get("gates") or {}).items()
                  if k in GATES}
    out = Gates(rows=[], failures={n: [] for n in st.names}, mix={})
    for gate, (column, stat, direction) in GATES.items():
        need_gate = gate in plan_gates
        if not need_gate and gate not in ("latency_p95_ms", "cost_per_1000"):
            continue
        per_cell, per_cand = _gate_statistics(st, gate, column, stat)
        for ci in range(len(st.names)):
            if ci in per_cand:
                out.mix[(ci, gate)] = per_cand[ci]
            if need_gate:
                _gate_rows(st, out, gate, plan_gates[gate], direction, ci, per_cell,
                           per_cand)
    if st.mix_source != "observed" and st.dim is not None and plan_gates:
        total = max(sum(st.items_per_label.values()), 1)
        observed = {h: st.items_per_label.get(h, 0) / total for h in st.labels}
        if any(abs(observed.get(h, 0.0) - s) > 0.05 for h, s in st.mix.items()):
            st.warnings.append("gates on the mix are computed over all of a candidate's "
                               "outputs (the observed mix of strata), not re-weighted to the "
                               "deployment mix; see each stratum's gates")
    return out


def _gate_statistics(
    st: Setting, gate: str, column: str, stat: str,
) -> tuple[dict[int, Estimate], dict[int, Estimate]]:
    """One gate's statistic per cell (keyed candidate x strata + stratum) and per candidate."""
    cells = st.cells
    n_strata = len(st.labels)
    group_cell = cells.cand * n_strata + cells.strat
    values = cells.frame[column].to_numpy(dtype=np.float64)
    per_cell: dict[int, Estimate] = {}
    per_cand: dict[int, Estimate] = {}
    if stat == "rate":
        for key, (lo, hi) in cells.bounds.items():
            v = values[lo:hi]
            v = v[np.isfinite(v)]
            per_cell[key[0] * n_strata + key[1]] = rate_gate(int(v.sum()), int(v.size),
                                                             level=st.level)
        for ci, (lo, hi) in cells.cand_bounds.items():
            v = values[lo:hi]
            v = v[np.isfinite(v)]
            per_cand[ci] = rate_gate(int(v.sum()), int(v.size), level=st.level)
    elif stat in ("q50", "q95"):
        q = 0.5 if stat == "q50" else 0.95
        if values.size:
            per_cell = quantile_intervals(values, group_cell, q, level=st.level,
                                          n_resamples=st.n_resamples,
                                          rng=rng(st.seed, gate, "cell"))
            per_cand = quantile_intervals(values, cells.cand, q, level=st.level,
                                          n_resamples=st.n_resamples,
                                          rng=rng(st.seed, gate, "mix"))
    elif values.size:
        per_cell = mean_per_thousand(values, group_cell, level=st.level)
        per_cand = mean_per_thousand(values, cells.cand, level=st.level)
    return per_cell, per_cand


def _gate_rows(
    st: Setting, out: Gates, gate: str, threshold: float, direction: str, ci: int,
    per_cell: Mapping[int, Estimate], per_cand: Mapping[int, Estimate],
) -> None:
    """One candidate's checks of one gate, on the mix and per stratum."""
    name = st.names[ci]
    n_strata = len(st.labels)
    targets: list[tuple[str, Estimate | None]] = [(MIX, per_cand.get(ci))]
    if st.dim is not None:
        targets += [(h, per_cell.get(ci * n_strata + st.code[h])) for h in st.labels]
    for h, gest in targets:
        if gest is None:
            gest = Estimate(value=math.nan, n_items=0, method="no outputs",
                            level=st.level, warnings=("no outputs",))
        bound, passed = gate_check(gest, threshold=threshold,
                                   direction="min" if direction == "min" else "max")
        out.rows.append({"candidate": name, "stratum": h, "gate": gate,
                         "threshold": threshold, "estimate": est_json(gest),
                         "bound": bound, "passed": passed, "n": gest.n_items})
        if h == MIX and passed is False:
            out.failures[name].append(gate)


# --- thresholds, rankings, differences, flips, frontier ------------------------------------------


def plan_thresholds(
    st: Setting, est: Estimates, pairwise: Mapping[str, Any] | None,
    win: Mapping[tuple[int, int, str], PPIEstimate | None],
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Every threshold of the plan checked per candidate on the mix (and per stratum unless the
    plan says otherwise); the metrics each candidate fails on the mix."""
    rows: list[dict[str, Any]] = []
    fail: dict[str, list[str]] = {n: [] for n in st.names}
    by_key = {m.key for m in st.metrics}
    for key, entry in st.plan_criteria.items():
        family = entry.get("metric")
        mkey = f"{family}:{key}"
        if family == "win_rate":
            rows_, failed = win_rate_thresholds(
                key, entry, pairwise, win, st.names, st.labels, st.mix, st.dim is not None,
                st.warnings)
            rows += rows_
            for name in failed:
                fail[name].append(mkey)
            continue
        if mkey not in by_key:
            continue
        threshold = float(entry["threshold"])
        direction = str(entry.get("direction", ">="))
        targets: list[tuple[str, int | None]] = [(MIX, None)]
        if entry.get("every_stratum", True) and st.dim is not None:
            targets += [(h, st.code[h]) for h in st.labels]
        for ci, name in enumerate(st.names):
            for h, tsi in targets:
                test = est.mix.get((ci, mkey)) if tsi is None else est.cell.get((ci, tsi, mkey))
                if tsi is not None and st.mix.get(h, 0.0) == 0.0 and test is None:
                    continue
                status = threshold_status(test, threshold, direction)
                rows.append({"candidate": name, "metric": mkey, "stratum": h,
                             "threshold": threshold, "direction": direction,
                             "status": status})
                if h == MIX and status == "fail":
                    fail[name].append(mkey)
    return rows, fail


def rankings(st: Setting, est: Estimates) -> Rankings:
    """The candidates ranked on the primary metric, on the mix and per stratum."""
    pm, names = st.pm, st.names

    def ranking(values: dict[int, float]) -> list[int]:
        ok = [ci for ci, v in values.items() if math.isfinite(v)]
        return sorted(ok, key=lambda ci: (-oriented(pm, values[ci]), names[ci]))

    def value_of(e: PPIEstimate | None) -> float:
        return math.nan if e is None else float(e.value)

    mix_values = {ci: value_of(est.mix.get((ci, pm.key))) for ci in range(len(names))}
    mix_order = ranking(mix_values)
    rows = [{"stratum": MIX, "order": [names[c] for c in mix_order],
             "best": names[mix_order[0]] if mix_order else None}]
    stratum_order: dict[int, list[int]] = {}
    if st.dim is not None:
        for h in st.labels:
            order = ranking({ci: value_of(est.cell.get((ci, st.code[h], pm.key)))
                             for ci in range(len(names))})
            stratum_order[st.code[h]] = order
            rows.append({"stratum": h, "order": [names[c] for c in order],
                         "best": names[order[0]] if order else None})
    return Rankings(mix_values, mix_order, rows, stratum_order)


def differences(
    st: Setting, reference: int | None,
) -> tuple[list[dict[str, Any]], dict[tuple[int, int], Any]]:
    """Paired differences on the primary metric: the reference minus each other candidate."""
    rows: list[dict[str, Any]] = []
    diffs: dict[tuple[int, int], Any] = {}
    if reference is None:
        return rows, diffs
    names = st.names
    for other in range(len(names)):
        if other == reference:
            continue
        res = paired_difference(st.cells, reference, other, st.pm.key, st.labels, st.code,
                                st.mix_codes, st.level)
        if res is None:
            continue
        diffs[(reference, other)] = res
        targets: list[tuple[str, PPIEstimate | None]] = [(MIX, res.mix)]
        if st.dim is not None:
            targets += [(h, res.per_stratum.get(st.code[h])) for h in st.labels]
        for h, dest in targets:
            if dest is None:
                continue
            p = two_sided_p(dest.value, dest.se)
            rows.append({"metric": st.pm.key, "stratum": h, "a": names[reference],
                         "b": names[other], "estimate": dest.to_json(),
                         "p_value": p if math.isfinite(p) else None})
    return rows, diffs


def flips(
    st: Setting, reference: int | None, stratum_order: Mapping[int, list[int]],
    diffs: Mapping[tuple[int, int], Any],
) -> list[dict[str, Any]]:
    """Strata whose best candidate beats the reference there, Holm-adjusted over the strata."""
    out: list[dict[str, Any]] = []
    if reference is None or st.dim is None:
        return out
    tests: list[tuple[str, int, PPIEstimate, float]] = []
    for h in st.labels:
        order = stratum_order.get(st.code[h]) or []
        if not order or order[0] == reference or st.mix.get(h, 0.0) <= 0.0:
            continue
        best = order[0]
        res = diffs.get((reference, best))
        est: PPIEstimate | None = res.per_stratum.get(st.code[h]) if res is not None else None
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
        better = oriented(st.pm, fest.value) > 0
        if math.isfinite(p_adj) and p_adj < 1.0 - st.level and better:
            out.append({"stratum": h, "best": st.names[best],
                        "mix_best": st.names[reference], "difference": fest.to_json(),
                        "p_value": p, "p_adjusted": p_adj, "correction": "holm"})
    return out


def frontier(st: Setting, gates: Gates, ranked: Rankings) -> list[dict[str, Any]]:
    """Quality on the mix, p95 latency and cost per 1,000, and who is on the Pareto front."""
    names = st.names
    pts = np.full((len(names), 3), np.nan)
    for ci in range(len(names)):
        lat = gates.mix.get((ci, "latency_p95_ms"))
        cost = gates.mix.get((ci, "cost_per_1000"))
        pts[ci] = [ranked.mix_values[ci],
                   lat.value if lat is not None else math.nan,
                   cost.value if cost is not None else math.nan]
    on_front = pareto_front(pts, [st.pm.higher_is_better, False, False]) if len(names) else \
        np.zeros(0, dtype=bool)
    return [{"candidate": name, "quality": pts[ci, 0], "latency_p95_ms": pts[ci, 1],
             "cost_per_1000": pts[ci, 2], "on_frontier": bool(on_front[ci])}
            for ci, name in enumerate(names)]


__all__ = ["GATES", "MIX", "Setting", "selection_compute", "selection_compute_raw"]
