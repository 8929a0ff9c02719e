"""The selection report's verdicts on the estimates: the public benchmark beside the team's
own ranking, and the decision by the decision table (`reports.selection.decision.decide`)
with, when it is too close to call, the labels per stratum that would settle it. Pure: no
database."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import ndtri

from evalstats.ppi import PPIEstimate, neyman_allocation
from evalstats.ranking import kendall_tau, rank_with_ties

from .cells import MIX, difference_text, est_json
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
from .inputs import SelectionInputs
from .results import MetricRef

MIN_LABELS = 2


def public_vs_private(
    inputs: SelectionInputs, params: Mapping[str, Any], names: Sequence[str],
    cand_ids: Sequence[int], mix_values: Mapping[int, float], mix_order: Sequence[int],
    pm: MetricRef, reference: int | None, diff_rows: Sequence[Mapping[str, Any]],
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
            "kendall_tau": est_json(tau) if tau is not None else None, "flags": flags}


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


def decision_table(
    *, names: Sequence[str], pm: MetricRef, margin: float, level: float,
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
        ths = _contender_thresholds(ci, name, threshold_rows, plan_criteria, ppi_mix, z)
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
                text=difference_text(pm, e, sign))
    unit_scale, unit = (100.0, " points") if pm.unit == "rate" else (1.0, "")
    flip_texts = tuple(
        f"{f['best']} is better than {f['mix_best']} on {f['stratum']} "
        f"({difference_text(pm, _ppi_of(f['difference']), sign)})"
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
        nxt = next_labels(res, est, margin, level, labels, mix_codes)
    return decision, nxt


def _contender_thresholds(
    ci: int, name: str, threshold_rows: Sequence[Mapping[str, Any]],
    plan_criteria: Mapping[str, Any], ppi_mix: Mapping[tuple[int, str], PPIEstimate | None],
    z: float,
) -> list[Threshold]:
    """A candidate's thresholds on the mix as the decision table reads them, with the labels
    that would settle an uncertain one."""
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
    return ths


_PPI_FIELDS = ("value", "ci_low", "ci_high", "se", "n_labelled", "n_unlabelled", "lam",
               "method", "level")


def _ppi_of(stored: Mapping[str, Any]) -> PPIEstimate:
    """An estimate back from its JSON (a flip's difference)."""
    return PPIEstimate(**{k: stored[k] for k in _PPI_FIELDS})


def next_labels(
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


__all__ = ["GATE_WORDS", "decision_table", "next_labels", "public_vs_private",
           "threshold_text"]
