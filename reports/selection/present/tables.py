"""The tables of a selection report and the text of its figures, read from its stored result
JSON (SelectionResult v2; version 1 results are read too).

One definition per table serves the page, the PDF and the CSV exports, so the three always say
the same thing. Everything here reads a plain dict defensively (a key may be missing or null in
a partial result) and imports no Django: the result's strings are user input (candidate names,
stratum labels) and are escaped where they are written (the templates' autoescaping, the SVG
writer, `csv_cell` for spreadsheets).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

MIX = "mix"
DASH = "\u2013"  # an en dash: the figure is missing
VERDICTS = {
    "ship": "Ship",
    "leads_unproven": "Leads, but has not shown it meets a threshold",
    "no_candidate_meets_threshold": "No candidate meets the thresholds",
    "no_candidate_passes_gates": "No candidate passes the gates",
    "too_close": "Too close to call",
    "not_enough_evidence": "Not enough evidence",
    # Version 1 results.
    "no_candidate_passes": "No candidate passes",
    "insufficient_data": "Insufficient data",
}
GATE_NAMES = {
    "schema_valid_rate": "schema-valid rate",
    "error_rate": "error rate",
    "latency_p95_ms": "p95 latency (ms)",
    "latency_p50_ms": "p50 latency (ms)",
    "cost_per_1000": "cost per 1,000 outputs",
    "tokens_per_1000": "tokens per 1,000 outputs",
}
# Gates whose bound must stay at or above the threshold (a rate of good outputs); every other
# gate is a budget the bound must stay at or below.
LOWER_BOUND_GATES = frozenset({"schema_valid_rate"})


# --- reading ------------------------------------------------------------------------------------


def mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a dict, else {} (a partial result may hold null anywhere)."""
    return value if isinstance(value, dict) else {}


def rows_of(value: Any) -> list[dict[str, Any]]:
    """The dict entries of a list (anything else dropped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def number(value: Any) -> float | None:
    """A finite number, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def is_simulated(result: Mapping[str, Any]) -> bool:
    """Whether any evidence of the report is simulated (the result's flag or its judge's)."""
    return bool(result.get("simulated")) or bool(mapping(result.get("judge")).get("simulated"))


def metrics(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The result's metrics; metrics that only appear in the estimates are listed after."""
    listed = [m for m in rows_of(result.get("metrics")) if isinstance(m.get("key"), str)]
    keys = {m["key"] for m in listed}
    for e in rows_of(result.get("estimates")):
        key = e.get("metric")
        if isinstance(key, str) and key not in keys:
            keys.add(key)
            listed.append({"key": key, "label": key, "unit": "score", "higher_is_better": True})
    return listed


def metric_unit(result: Mapping[str, Any], key: Any) -> str:
    for m in metrics(result):
        if m["key"] == key:
            return str(m.get("unit") or "score")
    return "score"


def metric_label(result: Mapping[str, Any], key: Any) -> str:
    for m in metrics(result):
        if m["key"] == key:
            return str(m.get("label") or key)
    return str(key)


def strata_order(result: Mapping[str, Any]) -> list[str]:
    """The strata in the result's order, then "mix" (the deployment mix) last."""
    out = [str(s) for s in result.get("strata") or [] if isinstance(s, str | int)]
    for e in rows_of(result.get("estimates")):
        s = e.get("stratum")
        if isinstance(s, str) and s != MIX and s not in out:
            out.append(s)
    return [*out, MIX]


def stratum_text(label: Any) -> str:
    return "deployment mix" if label == MIX else str(label)


# --- formatting ---------------------------------------------------------------------------------


def value_text(value: Any, unit: str = "score") -> str:
    """A figure in its unit: rates as percentages, costs with two decimals, scores with three."""
    v = number(value)
    if v is None:
        return DASH
    if unit == "rate":
        return f"{100 * v:.1f} %"
    if unit == "cost":
        return f"{v:.2f}"
    return f"{v:.3f}"


def _bare(value: float, unit: str) -> str:
    if unit == "rate":
        return f"{100 * value:.1f}"
    if unit == "cost":
        return f"{value:.2f}"
    return f"{value:.3f}"


def interval_text(low: Any, high: Any, unit: str = "score") -> str:
    lo, hi = number(low), number(high)
    if lo is None or hi is None:
        return ""
    return f"[{_bare(lo, unit)}, {_bare(hi, unit)}]"


def estimate_text(est: Any, unit: str = "score") -> str:
    """"value [low, high]" of an estimate's JSON (PPIEstimate or Estimate), "no data" when
    it has no value."""
    e = mapping(est)
    if number(e.get("value")) is None:
        return "no data"
    interval = interval_text(e.get("ci_low"), e.get("ci_high"), unit)
    return f"{value_text(e.get('value'), unit)} {interval}".strip()


def difference_text(est: Any, unit: str = "score") -> str:
    """A difference with its sign; rate differences in percentage points."""
    e = mapping(est)
    v = number(e.get("value"))
    if v is None:
        return "no data"
    scale = 100.0 if unit == "rate" else 1.0
    digits = 1 if unit == "rate" else (2 if unit == "cost" else 3)
    suffix = " points" if unit == "rate" else ""
    lo, hi = number(e.get("ci_low")), number(e.get("ci_high"))
    interval = (f" [{lo * scale:+.{digits}f}, {hi * scale:+.{digits}f}]"
                if lo is not None and hi is not None else "")
    return f"{v * scale:+.{digits}f}{suffix}{interval}"


def n_text(est: Any) -> str:
    """How many outputs an estimate rests on: "n = labelled + unlabelled" or one count."""
    e = mapping(est)
    lab, unl = e.get("n_labelled"), e.get("n_unlabelled")
    lab = lab if isinstance(lab, int) else 0
    unl = unl if isinstance(unl, int) else 0
    if isinstance(e.get("n_items"), int):
        return f"n = {e['n_items']}"
    if lab and unl:
        return f"n = {lab} labelled + {unl} judged"
    if lab:
        return f"n = {lab}"
    if unl:
        return f"n = {unl} judged"
    return "n = 0"


def margin_text(value: Any, unit: str) -> str:
    """The plan's margin in the unit differences are written in (rates: points)."""
    v = number(value)
    if v is None:
        return DASH
    return f"{100 * v:.1f} points" if unit == "rate" else value_text(v, unit)


def rank_text(value: Any) -> str:
    """A rank (a mid-rank of a tie is fractional: 1.5)."""
    v = number(value)
    if v is None:
        return DASH
    return f"{v:.0f}" if v == int(v) else f"{v:g}"


CORRECTIONS = {"holm": "Holm", "bonferroni": "Bonferroni", "none": "no"}


def correction_text(value: Any) -> str:
    return CORRECTIONS.get(str(value or "").lower(), str(value or "multiplicity"))


def p_text(value: Any) -> str:
    v = number(value)
    if v is None:
        return DASH
    return "< 0.001" if v < 0.001 else f"{v:.3f}"


def gate_name(key: Any) -> str:
    return GATE_NAMES.get(str(key), str(key))


def gate_value_text(gate: str, value: Any) -> str:
    v = number(value)
    if v is None:
        return DASH
    if gate in ("schema_valid_rate", "error_rate"):
        return f"{100 * v:.1f} %"
    if gate.startswith("latency"):
        return f"{v:,.0f}"
    if gate == "cost_per_1000":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def passed_text(value: Any) -> str:
    return {True: "pass", False: "fail"}.get(value, "not enough data")


# --- the tables (header + rows of plain values, shared by CSV, page and PDF) --------------------

Row = list[Any]
TableRows = tuple[list[str], list[Row]]


def _est_columns(prefix: str, est: Any) -> Row:
    e = mapping(est)
    return [number(e.get("value")), number(e.get("ci_low")), number(e.get("ci_high")),
            e.get("n_labelled"), e.get("n_unlabelled")] if e else [None] * 5


def _est_header(prefix: str) -> list[str]:
    return [f"{prefix}_{k}" for k in ("value", "ci_low", "ci_high", "n_labelled",
                                      "n_unlabelled")]


def _estimates(result: Mapping[str, Any]) -> TableRows:
    header = ["candidate", "metric", "stratum", "n_outputs", "n_labelled", "no_data",
              *_est_header("human"), *_est_header("judge"), *_est_header("ppi"), "ppi_lambda",
              "ppi_method", "note"]
    rule = rubric_rule_text(result)
    rows = []
    for e in rows_of(result.get("estimates")):
        ppi = mapping(e.get("ppi"))
        rows.append([e.get("candidate"), e.get("metric"), e.get("stratum"), e.get("n_outputs"),
                     e.get("n_labelled"), bool(e.get("no_data")),
                     *_est_columns("human", e.get("human")),
                     *_est_columns("judge", e.get("judge")),
                     *_est_columns("ppi", e.get("ppi")), number(ppi.get("lam")),
                     ppi.get("method"),
                     # The rubric's rule in force beside every rubric pass rate.
                     f"rubric rule: {rule}" if e.get("metric") == "rubric_pass_rate" else ""])
    return header, rows


def rubric_rule_text(result: Mapping[str, Any]) -> str:
    """The rubric's rule the snapshot was computed with (docs/selection.md)."""
    rule = mapping(result.get("rubric_rule"))
    return str(rule.get("text") or "an output passes the rubric when it passes every "
               "hard-gate criterion and at least half (by weight) of the other criteria (the "
               "rule of reports computed before the rubric stated its rule)")


def _differences(result: Mapping[str, Any]) -> TableRows:
    header = ["metric", "stratum", "a", "b", "difference", "ci_low", "ci_high", "se",
              "n_labelled", "n_unlabelled", "p_value", "method"]
    rows = []
    for d in rows_of(result.get("differences")):
        e = mapping(d.get("estimate"))
        rows.append([d.get("metric"), d.get("stratum"), d.get("a"), d.get("b"),
                     number(e.get("value")), number(e.get("ci_low")), number(e.get("ci_high")),
                     number(e.get("se")), e.get("n_labelled"), e.get("n_unlabelled"),
                     number(d.get("p_value")), e.get("method")])
    return header, rows


def _flips(result: Mapping[str, Any]) -> TableRows:
    header = ["stratum", "best", "mix_best", "difference", "ci_low", "ci_high", "p_value",
              "p_adjusted", "correction"]
    rows = []
    for f in rows_of(result.get("flips")):
        e = mapping(f.get("difference"))
        rows.append([f.get("stratum"), f.get("best"), f.get("mix_best"), number(e.get("value")),
                     number(e.get("ci_low")), number(e.get("ci_high")), number(f.get("p_value")),
                     number(f.get("p_adjusted")), f.get("correction")])
    return header, rows


def _gates(result: Mapping[str, Any]) -> TableRows:
    header = ["candidate", "stratum", "gate", "threshold", "value", "ci_low", "ci_high", "bound",
              "passed", "n", "method"]
    rows = []
    for g in rows_of(result.get("gates")):
        e = mapping(g.get("estimate"))
        rows.append([g.get("candidate"), g.get("stratum"), g.get("gate"),
                     number(g.get("threshold")), number(e.get("value")), number(e.get("ci_low")),
                     number(e.get("ci_high")), number(g.get("bound")), g.get("passed"),
                     g.get("n"), e.get("method")])
    return header, rows


def _thresholds(result: Mapping[str, Any]) -> TableRows:
    header = ["candidate", "metric", "stratum", "threshold", "direction", "status"]
    rows = [[t.get("candidate"), t.get("metric"), t.get("stratum"), number(t.get("threshold")),
             t.get("direction"), t.get("status")] for t in rows_of(result.get("thresholds"))]
    return header, rows


def _frontier(result: Mapping[str, Any]) -> TableRows:
    header = ["candidate", "quality", "latency_p95_ms", "cost_per_1000", "on_frontier"]
    rows = [[f.get("candidate"), number(f.get("quality")), number(f.get("latency_p95_ms")),
             number(f.get("cost_per_1000")), bool(f.get("on_frontier"))]
            for f in rows_of(result.get("frontier"))]
    return header, rows


def public_vs_private_rows(result: Mapping[str, Any]) -> TableRows:
    header = ["benchmark", "candidate", "public_score", "public_rank", "private_rank",
              "private_value", "flag"]
    pvp = mapping(result.get("public_vs_private"))
    flags: dict[str, list[str]] = {}
    for f in rows_of(pvp.get("flags")):
        flags.setdefault(str(f.get("candidate")), []).append(str(f.get("message") or ""))
    rows = [[pvp.get("benchmark"), r.get("candidate"), number(r.get("public_score")),
             r.get("public_rank"), r.get("private_rank"), number(r.get("private_value")),
             "; ".join(flags.get(str(r.get("candidate")), []))]
            for r in rows_of(pvp.get("rows"))]
    return header, rows


def _next_labels(result: Mapping[str, Any]) -> TableRows:
    header = ["stratum", "extra_labels", "target_se", "se_current", "se_planned", "feasible"]
    nl = mapping(result.get("next_labels"))
    per = mapping(nl.get("per_stratum"))
    rows = [[label, count, number(nl.get("target_se")), number(nl.get("se_current")),
             number(nl.get("se_planned")), nl.get("feasible")]
            for label, count in per.items()]
    return header, rows


def _rankings(result: Mapping[str, Any]) -> TableRows:
    header = ["stratum", "rank", "candidate", "best"]
    rows = []
    for r in rows_of(result.get("rankings")):
        order = r.get("order")
        for i, name in enumerate(order if isinstance(order, list) else [], start=1):
            rows.append([r.get("stratum"), i, name, name == r.get("best")])
    return header, rows


def _win_rates(result: Mapping[str, Any]) -> TableRows:
    header = ["criterion", "a", "b", "stratum", "n_comparisons", "n_labelled",
              *_est_header("human"), *_est_header("judge"), *_est_header("ppi"), "ppi_lambda",
              "ppi_method"]
    pw = mapping(result.get("pairwise"))
    rows = []
    for w in rows_of(pw.get("win_rates")):
        ppi = mapping(w.get("ppi"))
        rows.append([pw.get("criterion"), w.get("a"), w.get("b"), w.get("stratum"),
                     w.get("n_comparisons"), w.get("n_labelled"),
                     *_est_columns("human", w.get("human")),
                     *_est_columns("judge", w.get("judge")),
                     *_est_columns("ppi", w.get("ppi")), number(ppi.get("lam")),
                     ppi.get("method")])
    return header, rows


def _bradley_terry(result: Mapping[str, Any]) -> TableRows:
    header = ["criterion", "stratum", "rank", "candidate", "strength", "ci_low", "ci_high",
              "reference"]
    pw = mapping(result.get("pairwise"))
    rows = [[pw.get("criterion"), r.get("stratum"), r.get("rank"), r.get("candidate"),
             number(r.get("strength")), number(r.get("ci_low")), number(r.get("ci_high")),
             pw.get("reference")]
            for r in rows_of(pw.get("bradley_terry"))]
    return header, rows


def _deviations(result: Mapping[str, Any]) -> TableRows:
    header = ["field", "message"]
    return header, [[d.get("field"), d.get("message")] for d in rows_of(result.get("deviations"))]


TABLES: dict[str, Callable[[Mapping[str, Any]], TableRows]] = {
    "estimates": _estimates,
    "differences": _differences,
    "flips": _flips,
    "gates": _gates,
    "thresholds": _thresholds,
    "frontier": _frontier,
    "public_vs_private": public_vs_private_rows,
    "next_labels": _next_labels,
    "rankings": _rankings,
    "pairwise": _win_rates,
    "bradley_terry": _bradley_terry,
    "deviations": _deviations,
}


def table_rows(result: Mapping[str, Any], table: str) -> TableRows:
    """Header and rows of one table (a key of `TABLES`) of a stored selection result."""
    if table not in TABLES:
        raise KeyError(table)
    return TABLES[table](result)


# Free text that a spreadsheet would read as a formula gets a leading apostrophe (OWASP's
# CSV-injection advice), as in every other export; a number written as text ("-0.5") is kept.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER_RE = re.compile(r"^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$")


def csv_cell(value: Any) -> str:
    """One CSV cell: empty for null, repr for floats (round-trips), text neutralised."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER_RE.match(text):
        return "'" + text
    return text


def table_csv(result: Mapping[str, Any], table: str) -> str:
    """One table of a stored selection result as CSV text."""
    header, rows = table_rows(result, table)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return buf.getvalue()


# --- what the page and the PDF show -------------------------------------------------------------


__all__ = ["DASH", "MIX", "TABLES", "csv_cell", "estimate_text", "is_simulated", "metrics",
           "public_vs_private_rows", "table_csv", "table_rows"]
