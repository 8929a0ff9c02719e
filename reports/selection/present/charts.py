"""Charts of a selection report (matplotlib SVG, Agg backend), drawn from the stored result JSON.

Two charts: a forest plot per metric (every candidate x stratum and the deployment mix, the
prediction-powered estimate with its interval and n, the human-only and judge-only estimates
as lighter marks) and the quality x latency x cost view with the Pareto frontier.

Every SVG carries a <title> and a <desc> (the figures in words) for screen readers, and the page
and the PDF show a table with the same figures beside it. Text is written as SVG <text>
(svg.fonttype "none") so a reader can find it; candidate names and stratum labels are user
input, escaped by matplotlib's XML writer and, in <title>/<desc>, by `_accessible`. Mathtext is
off, so a "$" in a name is drawn as a dollar sign. The output is deterministic: a fixed hash
salt for the ids and no date.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from xml.sax.saxutils import escape

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reports.charts import LABEL_PT

from .tables import (
    MIX,
    estimate_text,
    is_simulated,
    mapping,
    metrics,
    n_text,
    number,
    rows_of,
    strata_order,
    stratum_text,
    value_text,
)

MAX_ROWS = 120
PPI_COLOUR = "#1f5fbf"
HUMAN_COLOUR = "#8c8c8c"
JUDGE_COLOUR = "#e0a15a"
FRONTIER_COLOUR = "#1b7f3b"
OTHER_COLOUR = "#9aa3ad"
_RC: dict[str, Any] = {"svg.fonttype": "none", "svg.hashsalt": "reviewhub-selection",
                       "text.parse_math": False, "font.size": LABEL_PT}
_SVG_OPEN = re.compile(rb"<svg\b[^>]*>")


@contextmanager
def _style() -> Iterator[None]:
    with plt.rc_context(_RC):  # type: ignore[arg-type]
        yield


def _svg_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _accessible(svg: bytes, *, chart_id: str, title: str, desc: str) -> bytes:
    """The SVG with role="img", a <title> and a <desc> (escaped), named by aria-labelledby."""
    match = _SVG_OPEN.search(svg)
    if match is None:  # pragma: no cover - matplotlib always writes the root element
        return svg
    tid, did = f"{chart_id}-title", f"{chart_id}-desc"
    head = match.group(0)[:-1] + f' role="img" aria-labelledby="{tid} {did}">'.encode()
    inner = (f'<title id="{tid}">{escape(title)}</title>'
             f'<desc id="{did}">{escape(desc)}</desc>').encode()
    return svg[: match.start()] + head + inner + svg[match.end():]


def _short(text: str, limit: int = 28) -> str:
    """A label short enough for a chart (the tables and the <desc> keep the whole name)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _suffix(result: Mapping[str, Any]) -> str:
    return " (simulated data)" if is_simulated(result) else ""


def _level_text(result: Mapping[str, Any]) -> str:
    level = number(result.get("level"))
    return f"{100 * level:g} % intervals" if level is not None else "intervals"


def _point(est: Any) -> tuple[float, float | None, float | None] | None:
    e = mapping(est)
    v = number(e.get("value"))
    if v is None:
        return None
    return v, number(e.get("ci_low")), number(e.get("ci_high"))


def forest_rows(result: Mapping[str, Any], metric: str) -> list[dict[str, Any]]:
    """The forest plot's rows for one metric: strata in order (the mix last), candidates in
    the result's order within each; at most MAX_ROWS."""
    order = {s: i for i, s in enumerate(strata_order(result))}
    names = [str(c.get("name")) for c in rows_of(result.get("candidates"))]
    rank = {n: i for i, n in enumerate(names)}
    rows = [e for e in rows_of(result.get("estimates")) if e.get("metric") == metric]
    rows.sort(key=lambda e: (order.get(str(e.get("stratum")), len(order)),
                             rank.get(str(e.get("candidate")), len(rank))))
    return rows[:MAX_ROWS]


def forest_svg(result: Mapping[str, Any], metric: str) -> bytes:
    """Forest plot of one metric: PPI estimate with interval and n per candidate x stratum
    (and the mix), human-only and judge-only as lighter marks; "no data" written where a
    candidate has no outputs."""
    meta = next((m for m in metrics(result) if m["key"] == metric), None)
    label = str(meta.get("label") or metric) if meta else metric
    unit = str(meta.get("unit") or "score") if meta else "score"
    scale = 100.0 if unit == "rate" else 1.0
    rows = forest_rows(result, metric)
    described: list[str] = []
    with _style():
        fig, ax = plt.subplots(figsize=(6.0, 1.3 + 0.32 * max(1, len(rows))))
        labels: list[str] = []
        ticks: list[str] = []
        previous = None
        for i, e in enumerate(rows):
            stratum = str(e.get("stratum"))
            name = str(e.get("candidate"))
            labels.append(f"{name} · {stratum_text(stratum)}")
            ticks.append(f"{_short(name)} · {_short(stratum_text(stratum), 20)}")
            if previous is not None and stratum != previous:
                ax.axhline(i - 0.5, color="#d0d4d9", linewidth=0.8)
            previous = stratum
            ppi = None if e.get("no_data") else _point(e.get("ppi"))
            marks = (("human", 0.22, HUMAN_COLOUR, "s"), ("judge", -0.22, JUDGE_COLOUR, "^"))
            for key, dy, colour, marker in marks:
                p = None if e.get("no_data") else _point(e.get(key))
                if p is None:
                    continue
                v, lo, hi = p
                if lo is not None and hi is not None:
                    ax.plot([lo * scale, hi * scale], [i + dy, i + dy], "-", color=colour,
                            linewidth=1, alpha=0.8)
                ax.plot([v * scale], [i + dy], marker, color=colour, markersize=4,
                        markerfacecolor="white", alpha=0.9)
            if ppi is None:
                ax.text(0.01, i, "no data", transform=ax.get_yaxis_transform(), va="center",
                        fontsize=LABEL_PT, color="#7a1f1f")
                described.append(f"{labels[-1]}: no data")
                continue
            v, lo, hi = ppi
            if lo is not None and hi is not None:
                ax.plot([lo * scale, hi * scale], [i, i], "-", color=PPI_COLOUR, linewidth=2)
            ax.plot([v * scale], [i], "o", color=PPI_COLOUR, markersize=5,
                    markeredgecolor="white" if stratum != MIX else "black")
            n = n_text(e.get("ppi"))
            ax.text(1.01, i, n.replace("n = ", "n=").replace("labelled", "lab."),
                    transform=ax.get_yaxis_transform(),
                    va="center", fontsize=LABEL_PT, color="#444444")
            described.append(
                f"{labels[-1]}: prediction-powered {estimate_text(e.get('ppi'), unit)}, {n}; "
                f"human-only {estimate_text(e.get('human'), unit)}; "
                f"judge-only {estimate_text(e.get('judge'), unit)}")
        ax.set_yticks(range(len(rows)), ticks, fontsize=LABEL_PT)
        ax.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)
        if not rows:
            ax.text(0.5, 0.5, "No estimates for this metric.", ha="center", va="center",
                    transform=ax.transAxes, fontsize=11)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel(f"{label}{' (%)' if unit == 'rate' else ''}", fontsize=LABEL_PT)
        handles = [
            plt.Line2D([], [], color=PPI_COLOUR, marker="o", linewidth=2,
                       label="prediction-powered (PPI)"),
            plt.Line2D([], [], color=HUMAN_COLOUR, marker="s", markerfacecolor="white",
                       linewidth=1, label="human-only"),
            plt.Line2D([], [], color=JUDGE_COLOUR, marker="^", markerfacecolor="white",
                       linewidth=1, label="judge-only (biased)"),
        ]
        ax.legend(handles=handles, fontsize=LABEL_PT, loc="lower center", ncol=3,
                  bbox_to_anchor=(0.5, 1.0), frameon=False)
        title = f"{label}: estimate per candidate and stratum, {_level_text(result)}"
        ax.set_title(title + _suffix(result), fontsize=11, pad=22)
        svg = _svg_bytes(fig)
    desc = ("Forest plot. One row per candidate and stratum, the deployment mix last. "
            + (" ".join(f"{d}." for d in described) or "No estimates."))
    return _accessible(svg, chart_id=f"forest-{_safe_id(metric)}", title=title + _suffix(result),
                       desc=desc)


def _safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:40] or "metric"


def pareto_points(result: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The frontier rows that can be drawn (quality and p95 latency known) and the names of
    those that cannot."""
    drawn, missing = [], []
    for f in rows_of(result.get("frontier")):
        if number(f.get("quality")) is None or number(f.get("latency_p95_ms")) is None:
            missing.append(str(f.get("candidate")))
        else:
            drawn.append(f)
    return drawn, missing


def pareto_svg(result: Mapping[str, Any]) -> bytes:
    """Quality of the primary metric on the mix against p95 latency (left) and cost per 1,000
    outputs (right); candidates on the Pareto frontier filled and joined, the others hollow;
    marker size on the left grows with the cost."""
    primary = str(result.get("primary_metric") or "")
    meta = next((m for m in metrics(result) if m["key"] == primary), None)
    label = str(meta.get("label") or primary) if meta else (primary or "quality")
    unit = str(meta.get("unit") or "score") if meta else "score"
    scale = 100.0 if unit == "rate" else 1.0
    points, missing = pareto_points(result)
    costs = [c for c in (number(p.get("cost_per_1000")) for p in points) if c is not None]
    top = max(costs) if costs else 0.0
    with _style():
        fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 4.0), sharey=True,
                                          gridspec_kw={"wspace": 0.45})
        for p in points:
            q = (number(p.get("quality")) or 0.0) * scale
            lat = number(p.get("latency_p95_ms")) or 0.0
            cost = number(p.get("cost_per_1000"))
            on = bool(p.get("on_frontier"))
            colour = FRONTIER_COLOUR if on else OTHER_COLOUR
            size = 30 + (170 * cost / top if cost is not None and top > 0 else 0)
            face = colour if on else "white"
            left.scatter([lat], [q], s=size, color=face, edgecolors=colour, linewidths=1.5,
                         zorder=3)
            left.annotate(_short(str(p.get("candidate")), 20), (lat, q),
                          textcoords="offset points", xytext=(6, 4), fontsize=LABEL_PT,
                          annotation_clip=False)
            if cost is not None:
                right.scatter([cost], [q], s=40, color=face, edgecolors=colour, linewidths=1.5,
                              zorder=3)
                right.annotate(_short(str(p.get("candidate")), 20), (cost, q),
                               textcoords="offset points", xytext=(6, 4), fontsize=LABEL_PT,
                               annotation_clip=False)
        front = sorted((p for p in points if p.get("on_frontier")),
                       key=lambda p: number(p.get("latency_p95_ms")) or 0.0)
        if len(front) > 1:
            left.plot([number(p.get("latency_p95_ms")) for p in front],
                      [(number(p.get("quality")) or 0.0) * scale for p in front], "-",
                      color=FRONTIER_COLOUR, linewidth=1, alpha=0.7, zorder=2)
        if not points:
            left.text(0.5, 0.5, "No candidate has both quality and latency.", ha="center",
                      va="center", transform=left.transAxes, fontsize=LABEL_PT)
        left.set_xlabel("p95 latency (ms); marker size = cost per 1,000", fontsize=LABEL_PT)
        right.set_xlabel("cost per 1,000 outputs", fontsize=LABEL_PT)
        left.set_ylabel(f"{label} on the deployment mix{' (%)' if unit == 'rate' else ''}",
                        fontsize=LABEL_PT)
        for ax in (left, right):
            ax.grid(alpha=0.3)
            ax.margins(0.15)
        title = f"Quality, latency and cost: Pareto frontier in green (filled){_suffix(result)}"
        fig.suptitle(title, fontsize=11)
        svg = _svg_bytes(fig)
    words = [
        f"{p.get('candidate')}: {label} {value_text(p.get('quality'), unit)}, p95 latency "
        f"{number(p.get('latency_p95_ms')) or 0:,.0f} ms, cost per 1,000 "
        f"{value_text(p.get('cost_per_1000'), 'cost')}, "
        f"{'on' if p.get('on_frontier') else 'not on'} the frontier."
        for p in points
    ]
    if missing:
        words.append("Not drawn (quality or latency unknown): " + ", ".join(missing) + ".")
    return _accessible(svg, chart_id="pareto", title=title,
                       desc="Scatter plots. " + (" ".join(words) or "No candidates."))


__all__ = ["forest_rows", "forest_svg", "pareto_points", "pareto_svg"]
