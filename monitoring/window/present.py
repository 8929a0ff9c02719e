"""Presentation of monitoring windows: table rows, the state per stratum in words, and the
pass-rate chart (matplotlib SVG, Agg backend). Pure: results in, text and bytes out.

Charts are served by their own view as image/svg+xml and shown with <img>, so stratum labels
(user data) inside them can never run as markup; the table beside each chart holds the same
numbers.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .results import StratumWindow, WindowResult

plt.rcParams["svg.hashsalt"] = "reviewhub"
LABEL_PT = 10
# Shown where there is no value (an en dash, as the other report pages show).
NONE = "\u2013"


def pct(x: float | None) -> str:
    return NONE if x is None else f"{100 * x:.0f} %"


def interval_text(est: Mapping[str, Any] | None) -> str:
    """ "78 % [72, 84]" (percent, the interval in points), or NONE without an estimate."""
    if not est or est.get("value") is None:
        return NONE
    lo, hi = est.get("ci_low"), est.get("ci_high")
    if lo is None or hi is None:
        return f"{pct(est['value'])} (no interval)"
    return f"{pct(est['value'])} [{100 * max(0.0, lo):.0f}, {100 * min(1.0, hi):.0f}]"


def stratum_name(label: str, dimension: str) -> str:
    return "All traffic" if label == "" else f"{dimension or 'stratum'} = {label}"


def _cell(result: WindowResult, stratum: str) -> StratumWindow | None:
    if stratum == "":
        return result.overall
    return next((s for s in result.strata if s.stratum == stratum), None)


def _headline(cell: StratumWindow) -> Mapping[str, Any] | None:
    # Prediction-powered first (the headline), then human-only, then the judge alone.
    return cell.pass_ppi or cell.pass_human or cell.pass_judge


def _which(cell: StratumWindow) -> str:
    if cell.pass_ppi:
        return "prediction-powered"
    if cell.pass_human:
        return "human labels only"
    return "judge only, uncorrected"


def stratum_states(results: Sequence[WindowResult], *, dimension: str,
                   floor: float | None) -> list[dict[str, str]]:
    """One sentence per stratum on the latest window against the first (oldest) shown, e.g.
    "lang = de: pass rate 78 % [72, 84] (prediction-powered) in the window from 2026-12-07
    10:00, was 91 % [86, 95] on 2026-12-01 00:00; the judge agrees with humans on 88 % of 42
    random draws there." ``state`` is "below" / "ok" / "unknown" against the floor."""
    if not results:
        return []
    first, last = results[0], results[-1]
    labels = ["", *sorted({s.stratum for r in results for s in r.strata})]
    out = []
    for label in labels:
        now_cell = _cell(last, label)
        then_cell = _cell(first, label)
        name = stratum_name(label, dimension)
        if now_cell is None or now_cell.n_rows == 0:
            out.append({"stratum": name, "state": "unknown",
                        "text": f"{name}: no traffic in the latest window."})
            continue
        headline = _headline(now_cell)
        text = (f"{name}: pass rate {interval_text(headline)} ({_which(now_cell)}) in the "
                f"window from {last.start[:16].replace('T', ' ')}, {now_cell.n_rows} requests")
        if then_cell is not None and first is not last and _headline(then_cell):
            text += (f"; was {interval_text(_headline(then_cell))} in the window from "
                     f"{first.start[:16].replace('T', ' ')}")
        text += "; " + trust_words(now_cell)
        state = "unknown"
        if headline and headline.get("value") is not None and floor is not None:
            high = headline.get("ci_high")
            state = "below" if high is not None and high < floor else "ok"
        out.append({"stratum": name, "state": state, "text": text})
    return out


def trust_words(cell: StratumWindow) -> str:
    """The judge-trust clause of a stratum's sentence (monitoring.window.trust states)."""
    reading = cell.judge_trust or {}
    agreement = (reading.get("agreement") or {}).get("value", cell.judge_agreement)
    if agreement is None:
        return "no random human label yet, so the judge's agreement is unknown."
    n = reading.get("n", cell.n_human)
    selection = (reading.get("selection") or {}).get("value")
    ceiling = reading.get("ceiling")
    then = "" if selection is None else f", {pct(selection)} at selection"
    then += "" if ceiling is None else f", humans agree with each other on {pct(ceiling)}"
    state = reading.get("state")
    if state == "no_longer":
        return (f"the judge no longer agrees with humans there: {pct(agreement)} of {n} "
                f"random draws{then}.")
    if state == "agrees":
        return (f"the judge still agrees with humans there: {pct(agreement)} of {n} random "
                f"draws{then}.")
    return (f"the judge agrees with humans on {pct(agreement)} of {n} random draws there "
            f"(no selection-time agreement to compare with).")


def series_rows(results: Sequence[WindowResult], stratum: str) -> list[dict[str, Any]]:
    """The table beside the chart: one row per window for one stratum."""
    rows = []
    for r in results:
        cell = _cell(r, stratum)
        if cell is None:
            continue
        # The headline: prediction-powered, or human-only where every judged row also has a
        # human label (no unlabelled rows for PPI), or the judge alone before any label.
        head = _headline(cell) or {}
        rows.append({
            "start": r.start, "n_rows": cell.n_rows, "n_human": cell.n_human,
            "ppi": interval_text(head or None) if cell.n_rows else NONE,
            "which": _which(cell) if head else "",
            "judge": pct((cell.pass_judge or {}).get("value")),
            "calibrated": interval_text(cell.pass_calibrated),
            "value": head.get("value"), "low": head.get("ci_low"), "high": head.get("ci_high"),
            "judge_value": (cell.pass_judge or {}).get("value"),
            "error_rate": pct(cell.error_rate),
            "latency_p95_ms": NONE if cell.latency_p95_ms is None
            else f"{cell.latency_p95_ms:.0f}",
            "cost_per_1000": NONE if cell.cost_per_1000 is None else f"{cell.cost_per_1000:.2f}",
            "refusal_rate": pct(cell.refusal_rate), "injection_rate": pct(cell.injection_rate),
        })
    return rows


def pass_rate_svg(rows: Sequence[Mapping[str, Any]], *, floor: float | None,
                  title: str) -> bytes:
    """The headline pass rate per window (prediction-powered where it exists, see
    `series_rows`) with its interval as a band, the judge-only rate as a dashed line, and the
    plan's floor."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    xs = list(range(len(rows)))
    pts = [(x, r) for x, r in zip(xs, rows, strict=True) if r.get("value") is not None]
    if pts:
        ax.fill_between([x for x, _ in pts], [r["low"] if r["low"] is not None else r["value"]
                                              for _, r in pts],
                        [r["high"] if r["high"] is not None else r["value"] for _, r in pts],
                        alpha=0.25, color="#2b6cb0", label="interval")
        which = sorted({str(r.get("which")) for _, r in pts if r.get("which")})
        ax.plot([x for x, _ in pts], [r["value"] for _, r in pts], color="#2b6cb0",
                marker="o", markersize=3, label="pass rate: " + " / ".join(which))
    judged = [(x, r["judge_value"]) for x, r in zip(xs, rows, strict=True)
              if r.get("judge_value") is not None]
    if judged:
        ax.plot([x for x, _ in judged], [v for _, v in judged], color="#718096",
                linestyle="--", label="judge only")
    if floor is not None:
        ax.axhline(floor, color="#c53030", linewidth=1, label=f"floor {pct(floor)}")
    ax.set_ylim(0, 1)
    ax.set_ylabel("pass rate", fontsize=LABEL_PT)
    ax.set_title(title, fontsize=LABEL_PT + 1)
    step = max(1, len(rows) // 8)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels([str(r["start"])[5:16].replace("T", " ") for r in rows][::step],
                       fontsize=LABEL_PT)
    ax.tick_params(axis="y", labelsize=LABEL_PT)
    if pts or judged or floor is not None:
        ax.legend(fontsize=LABEL_PT, loc="lower left")
    if not rows:
        ax.text(0.5, 0.5, "no window yet", ha="center", va="center", transform=ax.transAxes,
                fontsize=LABEL_PT)
    buf = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()
