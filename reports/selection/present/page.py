"""What the selection page and its PDF show of a stored result: the decision, the glance
chips, each section's rows as plain text and numbers for the templates (reports/selection.html,
selection_body.html, selection_pdf.html). The same text helpers as the CSV tables
(`present.tables`), so page, PDF and CSV always say the same thing. Pure: no Django."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from .tables import (
    DASH,
    LOWER_BOUND_GATES,
    MIX,
    VERDICTS,
    correction_text,
    difference_text,
    estimate_text,
    gate_name,
    gate_value_text,
    is_simulated,
    mapping,
    margin_text,
    metric_label,
    metric_unit,
    metrics,
    n_text,
    number,
    p_text,
    passed_text,
    public_vs_private_rows,
    rank_text,
    rows_of,
    rubric_rule_text,
    strata_order,
    stratum_text,
    value_text,
)


def _estimate_cell(est: Any, unit: str) -> dict[str, Any]:
    e = mapping(est)
    has = number(e.get("value")) is not None
    return {"text": estimate_text(e, unit) if has else "no data", "n": n_text(e) if has else "",
            "no_data": not has, "warnings": [str(w) for w in e.get("warnings") or []]}


def _metric_sections(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    order = {s: i for i, s in enumerate(strata_order(result))}
    candidates = [str(c.get("name")) for c in rows_of(result.get("candidates"))]
    cand_order = {c: i for i, c in enumerate(candidates)}
    out = []
    for index, m in enumerate(metrics(result)):
        unit = str(m.get("unit") or "score")
        rows = []
        for e in rows_of(result.get("estimates")):
            if e.get("metric") != m["key"]:
                continue
            no_data = bool(e.get("no_data"))
            rows.append({
                "candidate": str(e.get("candidate")),
                "stratum": stratum_text(e.get("stratum")),
                "is_mix": e.get("stratum") == MIX,
                "n_outputs": e.get("n_outputs"),
                "n_labelled": e.get("n_labelled"),
                "no_data": no_data,
                "human": _estimate_cell(None if no_data else e.get("human"), unit),
                "judge": _estimate_cell(None if no_data else e.get("judge"), unit),
                "ppi": _estimate_cell(None if no_data else e.get("ppi"), unit),
                "cells": [_estimate_cell(None if no_data else e.get(k), unit)
                          for k in ("human", "judge", "ppi")],
                "_key": (order.get(str(e.get("stratum")), len(order)),
                         cand_order.get(str(e.get("candidate")), len(cand_order))),
            })
        rows.sort(key=lambda r: cast(tuple[int, int], r["_key"]))
        for r in rows:
            del r["_key"]
        out.append({"index": index, "key": m["key"], "label": str(m.get("label") or m["key"]),
                    "unit": unit, "higher_is_better": m.get("higher_is_better", True) is not False,
                    "rows": rows})
    return out


def _decision(result: Mapping[str, Any]) -> dict[str, Any]:
    d = mapping(result.get("decision"))
    verdict = str(d.get("verdict") or "")
    unit = metric_unit(result, result.get("primary_metric"))
    label = VERDICTS.get(verdict, verdict or "No decision")
    return {
        "verdict": verdict,
        "verdict_label": label,
        "headline": str(d.get("headline") or (
            f"Ship {d['candidate']}" if verdict == "ship" and d.get("candidate") else label)),
        "basis": str(d.get("basis") or "prediction_powered"),
        "labels_needed": d.get("labels_needed"),
        "text": str(d.get("text") or ""),
        "candidate": d.get("candidate"),
        "runner_up": d.get("runner_up"),
        "difference": difference_text(d.get("difference"), unit) if d.get("difference")
        else "",
        "difference_n": n_text(d.get("difference")) if d.get("difference") else "",
    }


def _gate_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for g in rows_of(result.get("gates")):
        key = str(g.get("gate"))
        est = mapping(g.get("estimate"))
        lo, hi = est.get("ci_low"), est.get("ci_high")
        rows.append({
            "candidate": str(g.get("candidate")),
            "stratum": stratum_text(g.get("stratum")),
            "gate": gate_name(key),
            "rule": ("lower bound ≥ " if key in LOWER_BOUND_GATES else "upper bound ≤ ")
            + gate_value_text(key, g.get("threshold")),
            "estimate": gate_value_text(key, est.get("value")) + (
                f" [{gate_value_text(key, lo)}, {gate_value_text(key, hi)}]"
                if number(lo) is not None and number(hi) is not None else ""),
            "bound": gate_value_text(key, g.get("bound")),
            "passed": g.get("passed"),
            "passed_text": passed_text(g.get("passed")),
            "n": g.get("n"),
        })
    return rows


def _flip_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    unit = metric_unit(result, result.get("primary_metric"))
    return [{"stratum": stratum_text(f.get("stratum")), "best": str(f.get("best")),
             "mix_best": str(f.get("mix_best")),
             "difference": difference_text(f.get("difference"), unit),
             "n": n_text(f.get("difference")), "p_value": p_text(f.get("p_value")),
             "p_adjusted": p_text(f.get("p_adjusted")),
             "correction": correction_text(f.get("correction"))}
            for f in rows_of(result.get("flips"))]


def _difference_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for d in rows_of(result.get("differences")):
        unit = metric_unit(result, d.get("metric"))
        est = mapping(d.get("estimate"))
        lo, hi = number(est.get("ci_low")), number(est.get("ci_high"))
        rows.append({"metric": metric_label(result, d.get("metric")),
                     "stratum": stratum_text(d.get("stratum")), "a": str(d.get("a")),
                     "b": str(d.get("b")), "difference": difference_text(est, unit),
                     "n": n_text(est) if est else "", "p_value": p_text(d.get("p_value")),
                     "excludes_zero": lo is not None and hi is not None and (lo > 0 or hi < 0)})
    return rows


def _ranking_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"stratum": stratum_text(r.get("stratum")),
             "order": [str(x) for x in r.get("order") or []] if isinstance(r.get("order"), list)
             else [], "best": r.get("best")}
            for r in rows_of(result.get("rankings"))]


def _threshold_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"candidate": str(t.get("candidate")), "metric": metric_label(result, t.get("metric")),
             "stratum": stratum_text(t.get("stratum")),
             "rule": f"{t.get('direction') or ''} "
                     f"{value_text(t.get('threshold'), metric_unit(result, t.get('metric')))}",
             "status": str(t.get("status") or "")}
            for t in rows_of(result.get("thresholds"))]


def _frontier_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    unit = metric_unit(result, result.get("primary_metric"))
    return [{"candidate": str(f.get("candidate")), "quality": value_text(f.get("quality"), unit),
             "latency": gate_value_text("latency_p95_ms", f.get("latency_p95_ms")),
             "cost": value_text(f.get("cost_per_1000"), "cost"),
             "on_frontier": bool(f.get("on_frontier"))}
            for f in rows_of(result.get("frontier"))]


def _public_private(result: Mapping[str, Any]) -> dict[str, Any] | None:
    pvp = result.get("public_vs_private")
    if not isinstance(pvp, dict):
        return None
    tau = mapping(pvp.get("kendall_tau"))
    _header, rows = public_vs_private_rows(result)
    return {
        "benchmark": str(pvp.get("benchmark") or ""),
        "rows": [{"candidate": str(r[1]), "public_score": value_text(r[2]),
                  "public_rank": rank_text(r[3]), "private_rank": rank_text(r[4]),
                  "private_value": value_text(r[5], metric_unit(result,
                                                                result.get("primary_metric"))),
                  "flag": r[6]} for r in rows],
        "tau": estimate_text(tau) if tau else "",
        "tau_n": n_text(tau) if tau else "",
        "flags": [{"candidate": str(f.get("candidate")), "message": str(f.get("message") or "")}
                  for f in rows_of(pvp.get("flags"))],
    }


def _next_labels_view(result: Mapping[str, Any]) -> dict[str, Any] | None:
    nl = result.get("next_labels")
    if not isinstance(nl, dict):
        return None
    unit = metric_unit(result, result.get("primary_metric"))
    return {"target_se": value_text(nl.get("target_se"), unit),
            "rows": [{"stratum": stratum_text(k), "count": v}
                     for k, v in mapping(nl.get("per_stratum")).items()],
            "total": nl.get("total"), "feasible": nl.get("feasible"),
            "se_current": value_text(nl.get("se_current"), unit)
            if number(nl.get("se_current")) is not None else "",
            "se_planned": value_text(nl.get("se_planned"), unit)
            if number(nl.get("se_planned")) is not None else ""}


def win_rate_text(est: Any) -> str:
    """A win rate with its interval, as a percentage ("no data" without a value)."""
    return estimate_text(est, "rate")


def _swapped(est: Any) -> dict[str, Any]:
    """The win rate of B over A from that of A over B (ties count half on both sides)."""
    e = dict(mapping(est))
    v, lo, hi = number(e.get("value")), number(e.get("ci_low")), number(e.get("ci_high"))
    e["value"] = None if v is None else 1.0 - v
    e["ci_low"] = None if hi is None else 1.0 - hi
    e["ci_high"] = None if lo is None else 1.0 - lo
    return e


def strength_text(value: Any, low: Any, high: Any) -> str:
    """A Bradley-Terry strength (log-odds against the reference) with its interval."""
    v = number(value)
    if v is None:
        return DASH
    lo, hi = number(low), number(high)
    interval = f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else ""
    return f"{v:+.2f}{interval}"


def _pairwise_view(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pairwise section: the win-rate matrix on the mix (row over column) and the
    Bradley-Terry ranking per stratum, the mix first."""
    pw = result.get("pairwise")
    if not isinstance(pw, dict):
        return None
    rates = rows_of(pw.get("win_rates"))
    bt = rows_of(pw.get("bradley_terry"))
    mix_rates = {(str(w.get("a")), str(w.get("b"))): w for w in rates if w.get("stratum") == MIX}
    seen = {n for pair in mix_rates for n in pair}
    ranked = sorted((r for r in bt if r.get("stratum") == MIX),
                    key=lambda r: number(r.get("rank")) or 0.0)
    order = [str(r.get("candidate")) for r in ranked if str(r.get("candidate")) in seen]
    listed = [str(c.get("name")) for c in rows_of(result.get("candidates"))]
    order += [n for n in listed if n in seen and n not in order]
    order += sorted(n for n in seen if n not in order)
    matrix = []
    for row in order:
        cells = []
        for col in order:
            if row == col:
                cells.append({"self": True, "text": DASH, "n": ""})
                continue
            if (row, col) in mix_rates:
                w, est = mix_rates[(row, col)], mapping(mix_rates[(row, col)].get("ppi"))
            elif (col, row) in mix_rates:
                w = mix_rates[(col, row)]
                est = _swapped(w.get("ppi")) if w.get("ppi") else {}
            else:
                cells.append({"self": False, "text": "not compared", "n": ""})
                continue
            has = number(est.get("value")) is not None
            cells.append({"self": False, "text": win_rate_text(est) if has else "no data",
                          "n": f"{w.get('n_comparisons')} comparisons, "
                               f"{w.get('n_labelled')} labelled" if has else ""})
        matrix.append({"candidate": row, "cells": cells})
    strata = strata_order(result)
    pos = {h: i for i, h in enumerate([MIX, *[h for h in strata if h != MIX]])}
    reference = pw.get("reference")
    bt_rows = sorted(bt, key=lambda r: (pos.get(str(r.get("stratum")), len(pos)),
                                        number(r.get("rank")) or 0.0))
    return {
        "criterion": str(pw.get("criterion") or ""),
        "reference": None if reference is None else str(reference),
        "columns": order,
        "matrix": matrix,
        "bradley_terry": [{
            "stratum": stratum_text(r.get("stratum")), "is_mix": r.get("stratum") == MIX,
            "rank": rank_text(r.get("rank")), "candidate": str(r.get("candidate")),
            "strength": ("0 (reference)" if str(r.get("candidate")) == reference
                         and number(r.get("ci_low")) is None
                         else strength_text(r.get("strength"), r.get("ci_low"),
                                            r.get("ci_high")))}
            for r in bt_rows],
    }


def _chip(text: str, passed: Any) -> dict[str, Any]:
    state = "pass" if passed is True else "fail" if passed is False else "unknown"
    return {"text": text, "state": state,
            "state_text": {"pass": "pass", "fail": "fail"}.get(state, passed_text(passed))}


def _glance(result: Mapping[str, Any]) -> dict[str, Any]:
    """The summary a lead reads first, above the detailed tables: every gate and threshold on
    the deployment mix as a pass/fail chip per candidate, how many per-stratum rows fail beyond
    those, and which metric section is the primary one (its forest plot is shown there)."""
    # One chip per candidate, naming each gate with its result: the mix's gates at a glance.
    by_candidate: dict[str, list[tuple[str, Any]]] = {}
    gate_strata_failing = 0
    for g in rows_of(result.get("gates")):
        if g.get("stratum") == MIX:
            by_candidate.setdefault(str(g.get("candidate")), []).append(
                (gate_name(g.get("gate")), g.get("passed")))
        elif g.get("passed") is False:
            gate_strata_failing += 1
    gates = []
    for name, results in by_candidate.items():
        passed = (False if any(p is False for _, p in results)
                  else True if all(p is True for _, p in results) else None)
        chip = _chip(name, passed)
        chip["gates"] = [{"gate": gate, "state_text": passed_text(p),
                          "state": "pass" if p is True else "fail" if p is False else "unknown"}
                         for gate, p in results]
        gates.append(chip)
    thresholds, threshold_strata_failing = [], 0
    for t in rows_of(result.get("thresholds")):
        status = str(t.get("status") or "")
        passed = True if status == "pass" else False if status == "fail" else None
        if t.get("stratum") == MIX:
            chip = _chip(f"{t.get('candidate')} · {metric_label(result, t.get('metric'))} "
                         f"{t.get('direction') or ''} "
                         f"{value_text(t.get('threshold'), metric_unit(result, t.get('metric')))}",
                         passed)
            if passed is None:
                chip["state_text"] = status or chip["state_text"]
            thresholds.append(chip)
        elif passed is False:
            threshold_strata_failing += 1
    keys = [m["key"] for m in metrics(result)]
    primary = result.get("primary_metric")
    return {
        "gates": gates,
        "gate_strata_failing": gate_strata_failing,
        "thresholds": thresholds,
        "threshold_strata_failing": threshold_strata_failing,
        "primary_index": keys.index(primary) if primary in keys else (0 if keys else None),
    }


def page_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the page and the PDF show, as plain text and numbers for the templates."""
    judge = mapping(result.get("judge"))
    gate_failures = {str(k): [gate_name(g) for g in v] for k, v in
                     mapping(result.get("gate_failures")).items() if isinstance(v, list) and v}
    return {
        "simulated": is_simulated(result),
        "decision": _decision(result),
        "glance": _glance(result),
        "flips": _flip_rows(result),
        "gate_failures": sorted(gate_failures.items()),
        "gates": _gate_rows(result),
        "metric_sections": _metric_sections(result),
        "differences": _difference_rows(result),
        "rankings": _ranking_rows(result),
        "thresholds": _threshold_rows(result),
        "frontier": _frontier_rows(result),
        "public_private": _public_private(result),
        "next_labels": _next_labels_view(result),
        "pairwise": _pairwise_view(result),
        "deviations": [{"field": str(d.get("field") or ""), "message": str(d.get("message") or "")}
                       for d in rows_of(result.get("deviations"))],
        "plan_followed": result.get("plan_followed") is True,
        "plan_version": result.get("plan_version"),
        "exploratory": bool(result.get("exploratory")),
        "draft_plan_version": result.get("draft_plan_version"),
        "primary_source": str(result.get("primary_source") or "plan"),
        "rubric_rule": rubric_rule_text(result),
        "primary_metric": metric_label(result, result.get("primary_metric")),
        "margin": margin_text(result.get("margin"),
                              metric_unit(result, result.get("primary_metric"))),
        "level": number(result.get("level")),
        "dimension": result.get("dimension"),
        "mix": [{"stratum": str(k), "share": value_text(v, "rate")}
                for k, v in mapping(result.get("mix")).items()],
        "mix_source": str(result.get("mix_source") or ""),
        "judge": {"display": str(judge.get("display") or ""),
                  "simulated": bool(judge.get("simulated"))} if judge else None,
        "candidates": [str(c.get("name")) for c in rows_of(result.get("candidates"))],
        "missing": [str(m) for m in result.get("missing") or []],
        "warnings": [str(w) for w in result.get("warnings") or []],
    }


__all__ = ["page_view"]
