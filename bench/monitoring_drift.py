#!/usr/bin/env python
"""Benchmark (not a test): monitoring alerts by SIMULATION, with drift injected at a known time
(issue 28 §5; figures in docs/monitoring.md "Simulations" and docs/benchmarks.md "Monitoring").

    .venv/bin/python bench/monitoring_drift.py --runs 1000 --seed 0

Every figure printed is from simulated traffic, not from a deployment. Each scenario runs
``--runs`` seeded streams and reads them with the product's statistics, the pure functions the
window and the alerts call, never a copy of them:

* the **guaranteed** rule: `evalstats.drift_monitor` (the confidence sequences the alerts run
  over hourly windows, restarted daily, at alpha / K) for the rates (pass rate of the random
  human draws, judge-human agreement on them, a stratum's traffic share). K is that of a
  typical deployment (`K_STREAMS`: five stream kinds for all traffic and three strata, 20),
  so a simulated pass-rate or agreement stream runs at alpha / 20 as the alerts would run it,
  not at alpha; the mix shares, not alerted on, form a family of their own (alpha / 6);
  `evalstats.changes.change_monitor` (the window's two-sample tests, `rank_sum_test` and
  `two_proportion_test`, at levels spent over the looks) for the label-free behaviour signals;
* the **fixed-window** comparator, looking as often: each window's own 95 % test of the same
  hypothesis (the Wilson interval from statsmodels' `proportion_confint` wholly past the limit;
  the window's two-sample tests at p < 0.05), and, daily, the window's prediction-powered pass
  rate (`evalstats.ppi_mean`, the page's headline) with its upper end below the floor.

Scenarios (alpha = 0.05; hourly windows over two weeks, 336 looks, for the rates; daily windows
over four weeks, 28 looks, for the behaviour signals):

* no drift, each stream exactly at its limit (the hardest case for the guarantee): pass rate
  at the floor; agreement at its floor; two strata's shares at their tolerance limits; the
  behaviour of the live model equal to the reference's; and the whole deployment: all K = 20
  alert streams (pass rate, agreement, error rate, share over the p95 latency gate, clipped
  cost; all traffic and each stratum) at their limits at once, a false alarm being any
  stream's (the deployment-level guarantee);
* pass-rate drop: 0.92 -> 0.70 at hour 48 (floor 0.80);
* judge degradation: at hour 48 the judge's verdicts stop following the humans' (agreement
  0.95 -> 0.82) while the true pass rate stays 0.90 and the judge's own pass rate stays ~0.90;
  and the same degradation hiding a drop (true pass rate 0.90 -> 0.70, the judge passing 95 %);
* mix shift: at hour 48 stratum "de" grows from 30 % to 38 % of traffic, "en" shrinks from
  60 % to 52 % (tolerance +-5 points around the plan's mix);
* model swap: on day 7 the model behind the name changes: outputs 8 % shorter, latency 10 %
  higher, refusals 2 % -> 3 %.

Printed per scenario and method: the false-alarm rate over the horizon (no-drift scenarios) or
before the drift, with its 95 % Clopper-Pearson interval, beside the guarantee alpha; the share
of runs that detect the drift within the horizon and the median / p90 delay from the drift to
the first alarm.

The agreement stream is the monitor of an agreement alert (`drift_monitor` below the floor over
the random human draws with a judge verdict, 1 when judge and human agree); the mix and the
behaviour signals are not alerted on, and the simulation runs the statistic such an alert would
use (the same monitors, on the window's stratum counts and test p-values).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.stats import beta
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evalstats import drift_monitor, ppi_mean, rank_sum_test, two_proportion_test  # noqa: E402
from evalstats.changes import change_monitor  # noqa: E402

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

ALPHA = 0.05
FIXED_LEVEL = 0.95
HOURS = 336
DAYS = 28
# monitoring.alerts.RESTART_EVERY_HOURS (a test checks they agree).
RESTART_EVERY = 24
# Hourly traffic of the simulated deployment: rows, judged rows (rate 0.1), random human
# draws (rate 0.01); Poisson around these means.
ROWS_PER_HOUR = 3000
JUDGED_PER_HOUR = 300
HUMAN_PER_HOUR = 30
PASS_FLOOR = 0.80
AGREEMENT_FLOOR = 0.90
PLAN_MIX = {"en": 0.60, "de": 0.30, "fr": 0.10}
MIX_TOLERANCE = 0.05
# K, the number of streams the alerts split alpha over (monitoring.alerts.stream_states: the
# stream kinds whose limit exists, each for all traffic and every stratum of the plan's mix).
# The simulated deployment is a typical one: a pass-rate criterion, an agreement floor and
# three gates (error rate, p95 latency, cost; no schema), watched for all traffic and for the
# plan mix's three languages: K = 5 x 4 = 20, so every alert stream runs at alpha / 20 (a test
# checks the kinds and the count against monitoring.alerts on such a deployment).
STREAM_KINDS = ("pass_rate", "agreement", "error_rate", "latency_p95_ms", "cost_per_1000")
K_STREAMS = len(STREAM_KINDS) * (1 + len(PLAN_MIX))
# The gates of the simulated deployment, every one exactly at its limit in the no-drift run:
# error rate 5 %; 5 % of rows slower than the p95 gate; cost clipped at 10 x the per-row gate,
# drawn as the clip with probability 0.1 (mean exactly the gate: the widest spread a bounded
# cost can have at that mean), observed in units of the clip.
ERROR_GATE = 0.05
SLOW_SHARE = 0.05
COST_AT_CLIP = 0.1
# Behaviour signals: rows of a day's window the rank tests read, the reference sample's size.
SIGNAL_ROWS = 500
REFERENCE_ROWS = 2000
NONE = -1


@dataclass
class Outcome:
    """First-alarm looks per run (NONE: never) for each method of one scenario."""

    name: str
    unit: str  # "h" or "d"
    looks: int
    drift_at: int | None
    firsts: dict[str, IntArray]
    daily: DailyEstimates | None = None


def first_alarm(flags: npt.NDArray[np.bool_]) -> int:
    hits = np.flatnonzero(flags)
    return int(hits[0]) if hits.size else NONE


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = 1 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def fixed_flags(n: IntArray, k: IntArray, *, limit: float, direction: str) -> np.ndarray:
    """Each window's own 95 % Wilson interval (statsmodels) wholly past the limit."""
    with np.errstate(invalid="ignore", divide="ignore"):
        lo, hi = proportion_confint(k, np.maximum(n, 1), alpha=1 - FIXED_LEVEL,
                                    method="wilson")
    crossed = (np.asarray(hi) < limit) if direction == "below" else (np.asarray(lo) > limit)
    return np.asarray(crossed & (n > 0), dtype=bool)


def stream_firsts(streams: list[tuple[IntArray, FloatArray, float, str]], *, k_streams: int
                  ) -> tuple[int, int]:
    """First alarm of one run over ``streams`` (each ``(counts, sums, limit, direction)`` per
    hourly window): the guaranteed monitors at alpha / ``k_streams`` (the K of the family they
    belong to, which may hold more streams than are simulated here), and the fixed-window
    Wilson test of every stream."""
    seq = np.zeros(streams[0][0].size, dtype=bool)
    fixed = np.zeros_like(seq)
    for counts, sums, limit, direction in streams:
        seq |= drift_monitor(counts, sums, limit=limit, direction=direction,
                             alpha=ALPHA / k_streams, restart_every=RESTART_EVERY).alarm
        fixed |= fixed_flags(counts, sums.astype(np.int64), limit=limit, direction=direction)
    return first_alarm(seq), first_alarm(fixed)


def step(before: float, after: float, drift_at: int | None, looks: int) -> FloatArray:
    at = looks if drift_at is None else drift_at
    return np.where(np.arange(looks) >= at, after, before).astype(float)


@dataclass(frozen=True)
class JudgeWorld:
    """One scenario of labels: the true pass rate, and the judge's P(pass | human pass) and
    P(pass | human fail), before and after ``drift_at`` (hours)."""

    pass_before: float
    pass_after: float
    judge_before: tuple[float, float]
    judge_after: tuple[float, float]
    drift_at: int | None


@dataclass
class LabelRun:
    """One run's hourly labels: random human draws (human and judge verdicts per row, by
    hour) and the other judged rows (count and judge passes per hour)."""

    hour: IntArray
    human: npt.NDArray[np.bool_]
    judge: npt.NDArray[np.bool_]
    n_unlabelled: IntArray
    k_unlabelled: IntArray

    def per_hour(self, values: npt.NDArray[np.bool_]) -> tuple[IntArray, FloatArray]:
        n = np.bincount(self.hour, minlength=HOURS).astype(np.int64)
        return n, np.bincount(self.hour, weights=values.astype(float),
                              minlength=HOURS).astype(float)


def label_run(world: JudgeWorld, rng: np.random.Generator) -> LabelRun:
    p = step(world.pass_before, world.pass_after, world.drift_at, HOURS)
    tpr = step(world.judge_before[0], world.judge_after[0], world.drift_at, HOURS)
    fpr = step(world.judge_before[1], world.judge_after[1], world.drift_at, HOURS)
    n_h = rng.poisson(HUMAN_PER_HOUR, HOURS)
    hour = np.repeat(np.arange(HOURS), n_h)
    human = rng.random(hour.size) < p[hour]
    judge = rng.random(hour.size) < np.where(human, tpr[hour], fpr[hour])
    n_u = np.maximum(rng.poisson(JUDGED_PER_HOUR, HOURS) - n_h, 0)
    q = p * tpr + (1 - p) * fpr  # the judge's pass rate on the unlabelled rows
    return LabelRun(hour, human, judge, n_u.astype(np.int64),
                    rng.binomial(n_u, q).astype(np.int64))


def ppi_daily(run: LabelRun, days: range) -> list[tuple[float, float, float, float]]:
    """Per day: the window's prediction-powered estimate and interval (evalstats.ppi_mean,
    as the window computes it: random human draws with their judge values as the labelled
    set, the other judged rows unlabelled, weights 1 / inclusion probability) and the
    judge-only mean."""
    out = []
    for d in days:
        sel = (run.hour >= 24 * d) & (run.hour < 24 * (d + 1))
        n_u = int(run.n_unlabelled[24 * d:24 * (d + 1)].sum())
        k_u = int(run.k_unlabelled[24 * d:24 * (d + 1)].sum())
        unl = np.zeros(n_u)
        unl[:k_u] = 1.0
        y, f = run.human[sel].astype(float), run.judge[sel].astype(float)
        est = ppi_mean(y, f, unl, w=np.full(y.size, 100.0), w_unlabelled=np.full(n_u, 10.0),
                       level=FIXED_LEVEL)
        judge_only = (f.sum() + k_u) / max(f.size + n_u, 1)
        lo = np.nan if est.ci_low is None else float(est.ci_low)
        hi = np.nan if est.ci_high is None else float(est.ci_high)
        out.append((float(est.value), lo, hi, float(judge_only)))
    return out


def judge_scenario(name: str, world: JudgeWorld, runs: int, rng: np.random.Generator,
                   *, with_ppi: bool, drifting: tuple[str, ...] = ("pass", "agreement",
                                                                    "judge_only")
                   ) -> list[Outcome]:
    """Pass rate (random human draws), agreement and a judge-only pass rate, each as its own
    stream; the window's PPI estimate daily. ``drifting``: the streams whose limit the drift
    crosses (an alarm on another is a false alarm wherever it falls)."""
    keys = ("pass", "agreement", "judge_only")
    firsts = {f"{k}_{m}": np.full(runs, NONE, dtype=np.int64) for k in keys
              for m in ("seq", "fixed")}
    ppi_first = np.full(runs, NONE, dtype=np.int64)
    after_days = range(0 if world.drift_at is None else -(-world.drift_at // 24), HOURS // 24)
    est_after: list[tuple[float, float, float, float]] = []
    for r in range(runs):
        run = label_run(world, rng)
        n, k = run.per_hour(run.human)
        _, agree = run.per_hour(run.human == run.judge)
        nj, kj = run.per_hour(run.judge)
        nj, kj = nj + run.n_unlabelled, kj + run.k_unlabelled
        for key, counts, sums, limit in (("pass", n, k, PASS_FLOOR),
                                         ("agreement", n, agree, AGREEMENT_FLOOR),
                                         ("judge_only", nj, kj, PASS_FLOOR)):
            # Each stream at alpha / K, as the alerts run it on the simulated deployment.
            seq, fixed = stream_firsts([(counts, sums, limit, "below")], k_streams=K_STREAMS)
            firsts[f"{key}_seq"][r], firsts[f"{key}_fixed"][r] = seq, fixed
        if with_ppi:
            daily = ppi_daily(run, range(HOURS // 24))
            ppi_first[r] = next((24 * d + 23 for d, e in enumerate(daily)
                                 if e[2] < PASS_FLOOR), NONE)
            est_after += [daily[d] for d in after_days]
    outcomes = [Outcome(f"{name}: {label}", "h", HOURS,
                        world.drift_at if key in drifting else None,
                        {"guaranteed": firsts[f"{key}_seq"],
                         "fixed window": firsts[f"{key}_fixed"]})
                for key, label in (("pass", "pass rate (random human draws)"),
                                   ("agreement", "judge-human agreement"),
                                   ("judge_only", "judge-only pass rate (no product alert)"))]
    if with_ppi:
        outcomes[0].firsts["fixed daily PPI"] = ppi_first
        outcomes[0].daily = daily_estimates(est_after, world)
    return outcomes


@dataclass(frozen=True)
class DailyEstimates:
    """The daily windows' pass-rate estimates after the drift (all days without one), pooled
    over runs: the true rate, the judge-only mean, the PPI mean and how often the PPI 95 %
    interval covers the truth."""

    truth: float
    judge_only_mean: float
    ppi_mean: float
    ppi_coverage: float
    windows: int

    def text(self) -> str:
        return (f"daily windows (after the drift, if any): true pass rate {self.truth:.2f}; "
                f"judge-only estimate {self.judge_only_mean:.3f} on average; "
                f"prediction-powered {self.ppi_mean:.3f}, its 95 % interval covering the truth "
                f"in {self.ppi_coverage:.1%} of {self.windows} windows")


def daily_estimates(est: list[tuple[float, float, float, float]], world: JudgeWorld
                    ) -> DailyEstimates:
    arr = np.array(est)
    truth = world.pass_after if world.drift_at is not None else world.pass_before
    cover = float(np.mean((arr[:, 1] <= truth) & (truth <= arr[:, 2])))
    return DailyEstimates(truth, float(arr[:, 3].mean()), float(arr[:, 0].mean()), cover,
                          len(arr))


def mix_scenario(name: str, after: dict[str, float], drift_at: int | None, runs: int,
                 rng: np.random.Generator, before: dict[str, float] | None = None) -> Outcome:
    """Six streams per deployment: each stratum's share above plan + tolerance and below
    plan - tolerance (every row counted)."""
    labels = sorted(PLAN_MIX)
    start = before or after
    probs = np.array([[start[lab] for lab in labels]] * HOURS)
    if drift_at is not None:
        probs[drift_at:] = [after[lab] for lab in labels]
    seq_first = np.full(runs, NONE, dtype=np.int64)
    fixed_first = np.full(runs, NONE, dtype=np.int64)
    for r in range(runs):
        n = rng.poisson(ROWS_PER_HOUR, HOURS)
        counts = rng.multinomial(n, probs)
        streams = []
        for j, lab in enumerate(labels):
            share_sum = counts[:, j].astype(float)
            streams.append((n, share_sum, min(PLAN_MIX[lab] + MIX_TOLERANCE, 1.0), "above"))
            streams.append((n, share_sum, max(PLAN_MIX[lab] - MIX_TOLERANCE, 0.0), "below"))
        # Not an alert: the six shares as a family of their own, at alpha / 6.
        seq_first[r], fixed_first[r] = stream_firsts(streams, k_streams=len(streams))
    return Outcome(name, "h", HOURS, drift_at, {"guaranteed": seq_first,
                                                "fixed window": fixed_first})


def deployment_scenario(name: str, runs: int, rng: np.random.Generator) -> Outcome:
    """No drift, every one of the simulated deployment's K alert streams exactly at its limit
    at once: pass rate and agreement of the random human draws at their floors, error rate at
    its gate, 5 % of rows over the p95 latency gate, mean clipped cost at the per-row gate;
    each for all traffic and per stratum of the plan's mix (rows and human draws split by the
    mix). A false alarm is any stream's alarm: the guarantee is alpha for the deployment."""
    labels = sorted(PLAN_MIX)
    shares = np.array([PLAN_MIX[lab] for lab in labels])
    # kind -> (which rows it counts, share of them that are 1, limit, direction)
    kinds = {"pass_rate": ("human", PASS_FLOOR, PASS_FLOOR, "below"),
             "agreement": ("human", AGREEMENT_FLOOR, AGREEMENT_FLOOR, "below"),
             "error_rate": ("rows", ERROR_GATE, ERROR_GATE, "above"),
             "latency_p95_ms": ("rows", SLOW_SHARE, SLOW_SHARE, "above"),
             "cost_per_1000": ("rows", COST_AT_CLIP, COST_AT_CLIP, "above")}
    assert tuple(kinds) == STREAM_KINDS
    seq_first = np.full(runs, NONE, dtype=np.int64)
    fixed_first = np.full(runs, NONE, dtype=np.int64)
    for r in range(runs):
        per_stratum = {"rows": rng.multinomial(rng.poisson(ROWS_PER_HOUR, HOURS), shares),
                       "human": rng.multinomial(rng.poisson(HUMAN_PER_HOUR, HOURS), shares)}
        streams = []
        for base, p, limit, direction in kinds.values():
            n = per_stratum[base]
            ones = rng.binomial(n, p)
            streams.append((n.sum(axis=1), ones.sum(axis=1).astype(float), limit, direction))
            for j in range(len(labels)):
                streams.append((n[:, j], ones[:, j].astype(float), limit, direction))
        assert len(streams) == K_STREAMS
        seq_first[r], fixed_first[r] = stream_firsts(streams, k_streams=K_STREAMS)
    return Outcome(name, "h", HOURS, None, {"guaranteed": seq_first,
                                            "fixed window": fixed_first})


@dataclass(frozen=True)
class Behaviour:
    """Output length (lognormal, chars), latency (gamma, ms), refusal rate of one model."""

    length_median: float = 600.0
    latency_mean: float = 900.0
    refusal: float = 0.02

    def draw(self, n: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        length = np.round(self.length_median * np.exp(rng.normal(0.0, 0.5, n)))
        latency = rng.gamma(4.0, self.latency_mean / 4.0, n)
        return length, latency


def swap_scenario(name: str, after: Behaviour, drift_day: int | None, runs: int,
                  rng: np.random.Generator) -> Outcome:
    """Daily windows: output length and latency (rank tests on the window's random subsample
    against the reference), refusal rate (every row of the day against the reference)."""
    before = Behaviour()
    seq_first = np.full(runs, NONE, dtype=np.int64)
    fixed_first = np.full(runs, NONE, dtype=np.int64)
    rows_per_day = 24 * ROWS_PER_HOUR
    for r in range(runs):
        ref_len, ref_lat = before.draw(REFERENCE_ROWS, rng)
        ref_ref = int(rng.binomial(REFERENCE_ROWS, before.refusal))
        p = np.full((DAYS, 3), np.nan)
        for d in range(DAYS):
            model = after if drift_day is not None and d >= drift_day else before
            length, latency = model.draw(SIGNAL_ROWS, rng)
            refusals = int(rng.binomial(rows_per_day, model.refusal))
            p[d] = [rank_sum_test(length, ref_len).p_value,
                    rank_sum_test(latency, ref_lat).p_value,
                    two_proportion_test(refusals, rows_per_day, ref_ref, REFERENCE_ROWS).p_value]
        first = change_monitor(p, alpha=ALPHA).first_alarm
        seq_first[r] = NONE if first is None else first
        fixed_first[r] = first_alarm(np.nan_to_num(p, nan=1.0).min(axis=1) < 1 - FIXED_LEVEL)
    return Outcome(name, "d", DAYS, drift_day, {"guaranteed": seq_first,
                                                 "fixed window": fixed_first})


@dataclass(frozen=True)
class Row:
    scenario: str
    method: str
    false_alarms: int
    runs: int
    detected: int | None
    median_delay: float | None
    p90_delay: float | None
    unit: str

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.runs


def summarise(outcome: Outcome) -> list[Row]:
    rows = []
    for method, firsts in outcome.firsts.items():
        runs = firsts.size
        if outcome.drift_at is None:
            rows.append(Row(outcome.name, method, int((firsts != NONE).sum()), runs, None, None,
                            None, outcome.unit))
            continue
        early = (firsts != NONE) & (firsts < outcome.drift_at)
        late = firsts[(firsts != NONE) & (firsts >= outcome.drift_at)] - outcome.drift_at
        rows.append(Row(outcome.name, method, int(early.sum()), runs, int(late.size),
                        float(np.median(late)) if late.size else None,
                        float(np.percentile(late, 90)) if late.size else None, outcome.unit))
    return rows


def format_row(row: Row) -> str:
    lo, hi = clopper_pearson(row.false_alarms, row.runs)
    fa = (f"{row.false_alarm_rate:6.1%} [{lo:.1%}, {hi:.1%}]")
    text = f"  {row.method:<16} false alarms {fa:<22}"
    if row.detected is not None:
        med = "-" if row.median_delay is None else f"{row.median_delay:g} {row.unit}"
        p90 = "-" if row.p90_delay is None else f"{row.p90_delay:g} {row.unit}"
        text += (f" detected {row.detected / row.runs:6.1%}   delay median {med:>6}, "
                 f"p90 {p90:>6}")
    return text


SCENARIOS: dict[str, Callable[[int, np.random.Generator], list[Outcome]]] = {
    "no drift: pass rate and agreement at their floors": lambda runs, rng: judge_scenario(
        "no drift", JudgeWorld(0.80, 0.80, (0.95, 0.30), (0.95, 0.30), None), runs, rng,
        with_ppi=True)[:2],
    "no drift: two strata's shares at their tolerance limits": lambda runs, rng: [mix_scenario(
        "no drift: mix (de at 35 %, en at 55 %)", {"en": 0.55, "de": 0.35, "fr": 0.10}, None,
        runs, rng)],
    "no drift: the model unchanged": lambda runs, rng: [swap_scenario(
        "no drift: behaviour signals", Behaviour(), None, runs, rng)],
    "pass-rate drop": lambda runs, rng: judge_scenario(
        "pass rate 0.92 -> 0.70 at hour 48", JudgeWorld(0.92, 0.70, (0.97, 0.2), (0.97, 0.2),
                                                         48), runs, rng, with_ppi=True)[:1],
    "judge degradation": lambda runs, rng: judge_scenario(
        "judge degrades at hour 48, true pass rate stays 0.90",
        JudgeWorld(0.90, 0.90, (0.97, 0.20), (0.90, 0.90), 48), runs, rng, with_ppi=True,
        drifting=("agreement",)),
    "judge degradation hiding a drop": lambda runs, rng: judge_scenario(
        "judge turns lenient at hour 48 as the pass rate falls 0.90 -> 0.70",
        JudgeWorld(0.90, 0.70, (0.97, 0.20), (0.95, 0.95), 48), runs, rng, with_ppi=True),
    "mix shift": lambda runs, rng: [mix_scenario(
        "de 30 % -> 38 %, en 60 % -> 52 % at hour 48", {"en": 0.52, "de": 0.38, "fr": 0.10},
        48, runs, rng, before=PLAN_MIX)],
    "model swap": lambda runs, rng: [swap_scenario(
        "model swap on day 7 (8 % shorter, 10 % slower, refusals 2 % -> 3 %)",
        Behaviour(length_median=552.0, latency_mean=990.0, refusal=0.03), 7, runs, rng)],
    # Last, so that the scenarios above keep their seeds (`run`: one stream per position).
    "no drift: the deployment's K streams at their limits": lambda runs, rng: [
        deployment_scenario(f"no drift: all {K_STREAMS} alert streams at their limits", runs,
                            rng)],
}


def run(names: list[str], runs: int, seed: int) -> list[tuple[Outcome, list[Row], float]]:
    out = []
    for i, name in enumerate(names):
        rng = np.random.default_rng([seed, i])
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        for outcome in SCENARIOS[name](runs, rng):
            out.append((outcome, summarise(outcome), time.process_time() - t_cpu))
        print(f"# {name}: {time.perf_counter() - t_wall:.1f} s wall, "
              f"{time.process_time() - t_cpu:.1f} s CPU", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only these (repeatable); default: all")
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.runs)
    print(f"SIMULATED traffic: {args.runs} seeded runs per scenario (seed {args.seed}); "
          f"guarantee: false alarms <= alpha = {ALPHA:.0%} over the horizon "
          f"(checked as <= alpha + 3 SE = {ALPHA + 3 * se:.1%}); rates: {HOURS} hourly looks, "
          f"behaviour signals: {DAYS} daily looks")
    for outcome, rows, _cpu in run(names, args.runs, args.seed):
        drift = ("no drift" if outcome.drift_at is None
                 else f"drift at {outcome.unit} {outcome.drift_at}")
        print(f"\n{outcome.name} ({drift}; false alarms "
              f"{'over the horizon' if outcome.drift_at is None else 'before the drift'})")
        for row in rows:
            print(format_row(row))
        if outcome.daily is not None:
            print(f"  {outcome.daily.text()}")


if __name__ == "__main__":
    main()
