"""The computation of a monitoring window: pure, named steps over arrays (no Django).

Input: one `WindowInput` (built by `monitoring.window.load`); output: one `WindowResult`.
The input is not every row of the window: the totals of each stratum (counts, rates, means,
latency percentiles: `CellTotals`) come already aggregated (by PostgreSQL's GROUP BY, or by
`cell_totals` over the rows on SQLite), the rows themselves only where a row-level estimate
needs them: the rows drawn for the judges or humans (the pass rates), and a fixed-size random
subsample for the two-sample rank tests of the label-free signals (see `window.load`).
Steps: `stratum_window` (counts, pass rates, gate measures per stratum and for all traffic),
`mix_result`, `gate_rows`, `signal_rows`.

The pass rates, per stratum:

* judge-only: the mean of the judge's values (0/1 verdicts, or calibrated probabilities) over
  the rows drawn for the judges (`evalstats.naive_mean`);
* human-only: the mean of the human labels over the rows drawn at random for humans, weighted
  by 1 / inclusion probability (`evalstats.classical_mean`);
* prediction-powered (the headline): PPI++ (`evalstats.ppi_mean`) with the random human
  draws as the labelled set (their judge values beside them: the human sample is nested in the
  judge sample) and the other judged rows as the unlabelled set. Escalated rows (sent to
  humans by the judge policy, not drawn) are never labelled data here: they are not random.

For all traffic the per-stratum PPI estimates are combined with the window's own traffic
shares (`evalstats.ppi_mean_stratified`): the pass rate of the traffic that was served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats import (
    classical_mean,
    naive_mean,
    ppi_mean,
    ppi_mean_stratified,
    rank_sum_test,
    two_proportion_test,
)

from . import trust
from .results import (
    GateRow,
    MixResult,
    MixRow,
    SignalRow,
    StratumWindow,
    WindowResult,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

UNKNOWN = "unknown"
# Below this p-value a label-free signal reads "changed". Strict on purpose: it is a
# fixed-sample test repeated every window (docs/monitoring.md), shown, never alerted on.
SIGNAL_ALPHA = 0.001
# Gates of the plan the window measures, and which way each must hold.
GATE_DIRECTIONS = {
    "error_rate": "max",
    "schema_valid_rate": "min",
    "latency_p50_ms": "max",
    "latency_p95_ms": "max",
    "cost_per_1000": "max",
}


@dataclass(frozen=True)
class CellTotals:
    """The totals of one stratum of a window, or of all its traffic, over every row in it.

    Means and percentiles skip rows that did not report the value (None: no row did); the
    percentiles interpolate linearly between order statistics (numpy's default, PostgreSQL's
    ``percentile_cont``)."""

    n_rows: int
    n_errors: int
    n_refusals: int
    n_injections: int
    # Sent to humans by the judge policy, not drawn at random.
    n_escalated: int
    mean_output_chars: float | None
    mean_cost: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    schema_valid_rate: float | None


def cell_totals(*, error: BoolArray, refusal: BoolArray, injection: BoolArray,
                escalated_only: BoolArray, output_chars: FloatArray, cost: FloatArray,
                latency_ms: FloatArray, schema_valid: FloatArray) -> CellTotals:
    """`CellTotals` from one cell's rows as arrays (NaN: not reported) — what the database
    computes with GROUP BY, for a database that cannot (SQLite)."""
    latency = _finite(latency_ms)
    return CellTotals(
        n_rows=int(error.size),
        n_errors=int(error.sum()),
        n_refusals=int(refusal.sum()),
        n_injections=int(injection.sum()),
        n_escalated=int(escalated_only.sum()),
        mean_output_chars=_mean_or_none(output_chars),
        mean_cost=_mean_or_none(cost),
        latency_p50_ms=float(np.percentile(latency, 50)) if latency.size else None,
        latency_p95_ms=float(np.percentile(latency, 95)) if latency.size else None,
        schema_valid_rate=_mean_or_none(schema_valid),
    )


@dataclass(frozen=True)
class SelectionReference:
    """Selection-time evidence a window is compared with (module docstring). Every part is
    empty/None when the study has no such snapshot or the deployment names no judge."""

    curve_x: tuple[float, ...] = ()
    curve_y: tuple[float, ...] = ()
    snapshot_ece: float | None = None
    snapshot_brier: float | None = None
    # The snapshot's policy thresholds on P(pass): {"pass_above", "fail_below", ...}.
    thresholds: Mapping[str, float] | None = None
    # stratum label ("" = whole study) -> {"value", "ci_low", "ci_high"} of the judge's
    # accuracy against the human consensus at selection time.
    agreement: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    # stratum label -> the human ceiling (pooled agreement of two humans on a subject).
    ceiling: Mapping[str, float | None] = field(default_factory=dict)
    selection_mix: Mapping[str, int] = field(default_factory=dict)
    reference_finish: Mapping[str, int] = field(default_factory=dict)


# The gate streams' row counts, under the same names in `GateCounts` and `StratumWindow`.
STREAM_COUNTS = ("n_schema", "n_schema_valid", "n_latency", "n_slow", "n_cost")


@dataclass(frozen=True)
class GateCounts:
    """One stratum's (or all traffic's) counts for the gate streams and finish reasons."""

    finish: Mapping[str, int] = field(default_factory=dict)
    n_schema: int = 0
    n_schema_valid: int = 0
    n_latency: int = 0
    n_slow: int = 0
    n_cost: int = 0
    cost_clipped_sum: float = 0.0
    cost_clip: float | None = None

    def result_fields(self) -> dict[str, Any]:
        """The counts as a `StratumWindow` records them (`cost_clip` is the window's, not
        recorded per stratum)."""
        counts = {name: getattr(self, name) for name in STREAM_COUNTS}
        return {**counts, "cost_clipped_sum": float(self.cost_clipped_sum),
                "finish_reasons": dict(self.finish)}


@dataclass(frozen=True)
class WindowInput:
    """A window's totals per stratum, its sampled rows as arrays, and what they are compared
    with.

    ``cells``: `CellTotals` per stratum label; ``totals``: the same over all traffic.
    ``stratum`` .. ``human_value``: one entry per row drawn for the judges or for humans (the
    only rows a pass-rate estimate reads); ``judge_value`` / ``human_value``: the row's mean
    judge / human label (NaN: none yet).
    ``signal_output_chars`` / ``signal_latency_ms``: the random subsample of the window's rows
    the rank tests run on (NaN: not reported).
    """

    granularity: str
    start: str
    end: str
    cells: Mapping[str, CellTotals]
    totals: CellTotals
    stratum: npt.NDArray[np.object_]
    to_judge: BoolArray
    judge_pi: FloatArray
    judge_value: FloatArray
    to_human: BoolArray
    human_pi: FloatArray
    human_value: FloatArray
    signal_output_chars: FloatArray = field(default_factory=lambda: np.zeros(0))
    signal_latency_ms: FloatArray = field(default_factory=lambda: np.zeros(0))
    injection_rules: Mapping[str, int] = field(default_factory=dict)
    mix_dimension: str = ""
    plan_mix: Mapping[str, float] = field(default_factory=dict)
    plan_gates: Mapping[str, float] = field(default_factory=dict)
    level: float = 0.95
    reference_output_chars: FloatArray = field(default_factory=lambda: np.zeros(0))
    reference_latency_ms: FloatArray = field(default_factory=lambda: np.zeros(0))
    reference_refusals: tuple[int, int] = (0, 0)
    # Selection-time evidence and the gate streams' counts (monitoring.window.context).
    selection: SelectionReference | None = None
    gate_cells: Mapping[str, GateCounts] = field(default_factory=dict)
    gate_totals: GateCounts = field(default_factory=GateCounts)


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _finite(values: FloatArray) -> FloatArray:
    return values[np.isfinite(values)]


def _mean_or_none(values: FloatArray) -> float | None:
    v = _finite(values)
    return float(v.mean()) if v.size else None


def _judged(inp: WindowInput) -> BoolArray:
    return inp.to_judge & np.isfinite(inp.judge_value)


def _human_random(inp: WindowInput) -> BoolArray:
    # Random draws only: a row escalated by the judge policy is labelled but was not drawn.
    return inp.to_human & np.isfinite(inp.human_value)


def _pass_rates(inp: WindowInput, mask: BoolArray
                ) -> tuple[dict[str, object] | None, dict[str, object] | None,
                           dict[str, object] | None, list[str]]:
    warnings: list[str] = []
    judged = mask & _judged(inp)
    human = mask & _human_random(inp)
    judge_est = naive_mean(inp.judge_value[judged], w=1.0 / inp.judge_pi[judged],
                           level=inp.level).to_json() if judged.any() else None
    human_est = classical_mean(inp.human_value[human], w=1.0 / inp.human_pi[human],
                               level=inp.level).to_json() if human.any() else None
    labelled = human & np.isfinite(inp.judge_value)
    unlabelled = judged & ~labelled
    ppi_est = None
    if labelled.sum() >= 2 and unlabelled.sum() >= 2:
        ppi_est = ppi_mean(
            inp.human_value[labelled], inp.judge_value[labelled], inp.judge_value[unlabelled],
            w=1.0 / inp.human_pi[labelled], w_unlabelled=1.0 / inp.judge_pi[unlabelled],
            level=inp.level,
        ).to_json()
    elif mask.any():
        warnings.append("no prediction-powered estimate: fewer than 2 random human labels "
                        "or 2 judged rows without one")
    return judge_est, human_est, ppi_est, warnings


def stratum_window(inp: WindowInput, mask: BoolArray, *, totals: CellTotals, stratum: str,
                   n_total: int, plan_share: float | None) -> StratumWindow:
    """Counts and gate measures from the cell's `totals`, pass rates from its sampled rows
    (`mask`)."""
    n = totals.n_rows
    judge_est, human_est, ppi_est, warnings = _pass_rates(inp, mask)
    human = mask & _human_random(inp)
    both = human & np.isfinite(inp.judge_value)
    agreement = (float(((inp.judge_value[both] >= 0.5) == (inp.human_value[both] >= 0.5))
                       .mean()) if both.any() else None)
    judged = mask & _judged(inp)
    calibrated = trust.calibrated_values(inp.judge_value[judged], inp.selection)
    pass_calibrated = (naive_mean(calibrated, w=1.0 / inp.judge_pi[judged], level=inp.level)
                       .to_json() if calibrated is not None and calibrated.size else None)
    reading = trust.judge_trust(judge=inp.judge_value[both], human=inp.human_value[both],
                                stratum=stratum, ref=inp.selection, level=inp.level)
    gates = inp.gate_totals if stratum == "" else inp.gate_cells.get(stratum, GateCounts())
    return StratumWindow(
        stratum=stratum,
        n_rows=n,
        share=n / n_total if n_total else None,
        plan_share=plan_share,
        n_judged=int((mask & _judged(inp)).sum()),
        n_human=int(human.sum()),
        n_escalated=totals.n_escalated,
        human_pass_sum=float(inp.human_value[human].sum()),
        n_errors=totals.n_errors,
        pass_judge=judge_est,
        pass_human=human_est,
        pass_ppi=ppi_est,
        error_rate=_share(totals.n_errors, n),
        latency_p95_ms=totals.latency_p95_ms,
        cost_per_1000=None if totals.mean_cost is None else 1000.0 * totals.mean_cost,
        refusal_rate=_share(totals.n_refusals, n),
        injection_rate=_share(totals.n_injections, n),
        mean_output_chars=totals.mean_output_chars,
        judge_agreement=agreement,
        warnings=tuple(warnings),
        pass_calibrated=pass_calibrated,
        n_agree_pairs=reading["n"],
        n_agree=reading["agree"],
        judge_trust=reading,
        **gates.result_fields(),
    )


def _overall_ppi(inp: WindowInput, labels: list[str], counts: list[int]
                 ) -> tuple[dict[str, object] | None, list[str]]:
    """Per-stratum PPI++ combined with the window's traffic shares (stratified PPI)."""
    n_total = sum(counts)
    codes = {label: i for i, label in enumerate(labels)}
    s = np.array([codes[str(x)] for x in inp.stratum], dtype=np.int64)
    human = _human_random(inp) & np.isfinite(inp.judge_value)
    unlabelled = _judged(inp) & ~human
    if human.sum() < 2 or unlabelled.sum() < 2:
        return None, ["no prediction-powered estimate for all traffic: too few labels"]
    mix = {codes[label]: c / n_total for label, c in zip(labels, counts, strict=True) if c}
    result = ppi_mean_stratified(
        inp.human_value[human], inp.judge_value[human], s[human],
        inp.judge_value[unlabelled], s[unlabelled], mix=mix,
        w=1.0 / inp.human_pi[human], w_unlabelled=1.0 / inp.judge_pi[unlabelled],
        level=inp.level,
    )
    if result.mix is None:
        missing = ", ".join(labels[c] for c in result.missing)
        return None, [f"no prediction-powered estimate for all traffic: no human label in "
                      f"{missing}"]
    return result.mix.to_json(), []


def _fit_p(observed: Mapping[str, int], shares: Mapping[str, float]) -> float | None:
    """Chi-square goodness of fit of the counts on the labels `shares` names (share > 0) to
    those shares renormalised (None with fewer than two such labels or no rows on them)."""
    named = [label for label in sorted(shares) if shares[label] > 0]
    n_named = sum(observed.get(label, 0) for label in named)
    if len(named) < 2 or n_named == 0:
        return None
    total_share = sum(shares[label] for label in named)
    expected = [n_named * shares[label] / total_share for label in named]
    return float(stats.chisquare([observed.get(label, 0) for label in named], expected).pvalue)


def mix_result(inp: WindowInput, labels: list[str], counts: list[int]) -> MixResult | None:
    """The traffic mix of the watched dimension against the plan's deployment mix."""
    if not inp.mix_dimension:
        return None
    n_total = sum(counts)
    observed = dict(zip(labels, counts, strict=True))
    plan = {str(k): float(v) for k, v in inp.plan_mix.items()}
    every = sorted(set(observed) | set(plan))
    selection = dict(inp.selection.selection_mix) if inp.selection is not None else {}
    n_selection = sum(selection.values())
    rows = tuple(
        MixRow(label=label, n=observed.get(label, 0),
               share=observed.get(label, 0) / n_total if n_total else 0.0,
               plan_share=plan.get(label),
               selection_share=selection.get(label, 0) / n_selection if n_selection else None)
        for label in sorted(set(every) | set(selection))
    )
    new = tuple(label for label in sorted(observed) if plan and label not in plan
                and label != UNKNOWN)
    return MixResult(dimension=inp.mix_dimension, rows=rows, unknown=observed.get(UNKNOWN, 0),
                     new_labels=new, chi2_p=_fit_p(observed, plan),
                     selection_chi2_p=_fit_p(observed, {k: float(v)
                                                        for k, v in selection.items()}),
                     unseen_in_selection=tuple(label for label in sorted(observed)
                                               if selection and label not in selection))


def gate_rows(inp: WindowInput, overall: StratumWindow) -> tuple[GateRow, ...]:
    """The plan's gates against the window's measures (the point values of this window; the
    sequential check of the error rate is the alerts')."""
    totals = inp.totals
    measured: dict[str, float | None] = {
        "error_rate": overall.error_rate,
        "schema_valid_rate": totals.schema_valid_rate,
        "latency_p50_ms": totals.latency_p50_ms,
        "latency_p95_ms": overall.latency_p95_ms,
        "cost_per_1000": overall.cost_per_1000,
    }
    rows = []
    for metric, limit in sorted(inp.plan_gates.items()):
        direction = GATE_DIRECTIONS.get(metric)
        if direction is None:
            continue
        value = measured[metric]
        passed = None if value is None else (
            value <= limit if direction == "max" else value >= limit)
        rows.append(GateRow(metric=metric, value=value, limit=float(limit),
                            direction=direction, passed=passed))
    return tuple(rows)


def signal_rows(inp: WindowInput) -> tuple[SignalRow, ...]:
    """Output length, latency and refusal rate against the reference sample (the rank tests
    on the window's random subsample, the refusal rate on all its rows)."""
    rows = []
    for name, window, reference in (
        ("output_chars", _finite(inp.signal_output_chars), _finite(inp.reference_output_chars)),
        ("latency_ms", _finite(inp.signal_latency_ms), _finite(inp.reference_latency_ms)),
    ):
        test = rank_sum_test(window, reference)
        rows.append(SignalRow(
            signal=name,
            window_value=float(np.median(window)) if window.size else None,
            reference_value=float(np.median(reference)) if reference.size else None,
            n_window=int(window.size), n_reference=int(reference.size),
            p_value=test.p_value,
            changed=None if test.p_value is None else test.p_value < SIGNAL_ALPHA,
            test=test.method,
        ))
    k_ref, n_ref = inp.reference_refusals
    k_win, n_win = inp.totals.n_refusals, inp.totals.n_rows
    prop = two_proportion_test(k_win, n_win, k_ref, n_ref)
    rows.append(SignalRow(
        signal="refusal_rate",
        window_value=k_win / n_win if n_win else None,
        reference_value=k_ref / n_ref if n_ref else None,
        n_window=n_win, n_reference=n_ref, p_value=prop.p_value,
        changed=None if prop.p_value is None else prop.p_value < SIGNAL_ALPHA,
        test=prop.method,
    ))
    ref_finish = inp.selection.reference_finish if inp.selection is not None else {}
    finish = trust.finish_signal(inp.gate_totals.finish, ref_finish)
    if finish is not None:
        rows.append(SignalRow(
            signal=f"finish_reason = {finish['reason']}",
            window_value=finish["window_share"], reference_value=finish["reference_share"],
            n_window=finish["n_window"], n_reference=finish["n_reference"],
            p_value=finish["p_value"], changed=finish["p_value"] < SIGNAL_ALPHA,
            test="chi-square test of homogeneity of the finish reasons",
        ))
    return tuple(rows)


def window_compute(inp: WindowInput) -> WindowResult:
    """The window's result (see the module docstring for each step)."""
    labels = sorted(inp.cells)
    strata_arr = inp.stratum.astype(str) if inp.stratum.size else np.zeros(0, dtype=str)
    counts = [inp.cells[label].n_rows for label in labels]
    n_total = inp.totals.n_rows
    plan = {str(k): float(v) for k, v in inp.plan_mix.items()}
    strata = tuple(
        stratum_window(inp, strata_arr == label, totals=inp.cells[label], stratum=label,
                       n_total=n_total, plan_share=plan.get(label))
        for label in labels
    )
    overall = stratum_window(inp, np.ones(strata_arr.size, dtype=bool), totals=inp.totals,
                             stratum="",
                             n_total=n_total, plan_share=None)
    if len(labels) > 1:
        # All traffic: strata combined with their traffic shares, not one pooled PPI.
        ppi, warnings = _overall_ppi(inp, labels, counts)
        overall = StratumWindow(**{**overall.__dict__, "pass_ppi": ppi,
                                   "warnings": tuple(warnings)})
    return WindowResult(
        granularity=inp.granularity,
        start=inp.start,
        end=inp.end,
        level=inp.level,
        signal_alpha=SIGNAL_ALPHA,
        n_rows=n_total,
        overall=overall,
        strata=strata,
        mix=mix_result(inp, labels, counts),
        gates=gate_rows(inp, overall),
        signals=signal_rows(inp),
        injection_rules=dict(inp.injection_rules),
        calibration_drift=_drift(inp),
    )


def _drift(inp: WindowInput) -> dict[str, object] | None:
    both = _human_random(inp) & np.isfinite(inp.judge_value)
    return trust.calibration_drift(judge=inp.judge_value[both], human=inp.human_value[both],
                                   ref=inp.selection)
