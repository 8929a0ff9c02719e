"""The agreement report's SVG charts: the judge x stratum heat-map of a criterion and the forest
plot of the bias audits (matplotlib through `reports.charts`). Every chart has a table fallback
on the audit page."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from reports.charts import LABEL_PT, svg_bytes

from ..results import AgreementResult
from ..verdict import NOT_TRUSTWORTHY, TOO_FEW, TRUSTWORTHY
from .summary import interval_text, stratum_words, verdict_class

_MARK = {TRUSTWORTHY: "trustworthy", NOT_TRUSTWORTHY: "not trustworthy", TOO_FEW: "too few"}
MAX_ROWS = 80


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def heatmap_data(result: AgreementResult, criterion: int) -> dict[str, Any]:
    """Rows (strata), columns (judge versions), the cells (typed) and the human ceiling per
    row."""
    judges = result.judges_by_id()
    cells = result.cells_for(criterion=criterion)
    ceilings = {(c.dimension, c.label): c for c in result.ceiling if c.criterion == criterion}
    jids = sorted({c.judge_version for c in cells}, key=lambda j: judges[j].display)
    rows: list[tuple[str, str]] = []
    for c in cells:
        key = (c.dimension, c.label)
        if key not in rows:
            rows.append(key)
    by = {(c.dimension, c.label, c.judge_version): c for c in cells}
    return {
        "rows": rows[:MAX_ROWS],
        "truncated": max(0, len(rows) - MAX_ROWS),
        "judges": jids,
        "names": [judges[j].display for j in jids],
        "cells": by,
        "ceilings": ceilings,
    }


# The heat-map colours each cell by its verdict, not by its value: a "not trustworthy" cell
# at kappa 0.77 must not look green. The value, interval and verdict stay written in the cell.
# The same colours as the audit table's cells (static/css/app.css, .verdict-*).
VERDICT_FILL = {
    TRUSTWORTHY: "#b7e1c1",
    NOT_TRUSTWORTHY: "#f4b6ae",
    TOO_FEW: "#e3e5e8",
}
UNKNOWN_FILL = "#ffffff"
CEILING_FILL = "#dbe4f0"


def heatmap_svg(result: AgreementResult, criterion: int) -> bytes:
    """Judge x stratum heat-map of the primary metric with intervals, ceiling column beside.

    Each judge cell is filled with its verdict's colour (VERDICT_FILL) and carries the SVG id
    ``cell-<row>-<column>-<verdict class>``; the ceiling column has its own neutral colour.
    """
    d = heatmap_data(result, criterion)
    rows, jids = d["rows"], d["judges"]
    n_rows, n_cols = max(1, len(rows)), len(jids) + 1
    fig, ax = plt.subplots(figsize=(2.0 + 1.9 * n_cols, 1.0 + 0.55 * n_rows))
    for r, (dim, lab) in enumerate(rows):
        for k, jid in enumerate(jids):
            c = d["cells"].get((dim, lab, jid))
            if c is None:
                continue
            ax.add_patch(Rectangle(
                (k - 0.5, r - 0.5), 1, 1, facecolor=VERDICT_FILL.get(c.verdict, UNKNOWN_FILL),
                edgecolor="white", linewidth=1.5,
                gid=f"cell-{r}-{k}-{verdict_class(c.verdict)}",
            ))
            m = c.primary
            interval = interval_text(m.ci_low, m.ci_high, 2) if m else ""
            value = _fmt(m.value if m else None)
            ax.text(k, r, f"{value} {interval}".strip()
                    + f"\n{_MARK.get(c.verdict, c.verdict)} (n={c.n_subjects})",
                    ha="center", va="center", fontsize=LABEL_PT)
        ceil = d["ceilings"].get((dim, lab))
        if ceil is not None and ceil.point is not None:
            ax.add_patch(Rectangle((n_cols - 1.5, r - 0.5), 1, 1, facecolor=CEILING_FILL,
                                   edgecolor="white", linewidth=1.5, gid=f"ceiling-{r}"))
            ax.text(n_cols - 1, r,
                    f"{_fmt(ceil.point)}\nalpha {_fmt(ceil.alpha.value)} (n={ceil.n_subjects})",
                    ha="center", va="center", fontsize=LABEL_PT)
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xticks(
        range(n_cols), [*d["names"], "humans (ceiling)"], rotation=20, ha="right", fontsize=LABEL_PT
    )
    ax.set_yticks(
        range(n_rows),
        [stratum_words(dim, lab) for dim, lab in rows] or [""],
        fontsize=LABEL_PT,
    )
    ax.axvline(n_cols - 1.5, color="black", linewidth=1.5)
    crit = result.criteria_by_id().get(criterion)
    ax.set_title(
        f"{crit.name if crit else ''}: primary agreement with the human consensus per stratum\n"
        "colour = verdict (green trustworthy, red not trustworthy, grey too few labels)",
        fontsize=11,
    )
    return svg_bytes(fig)


def _display(judge: Any) -> str:
    return "?" if judge is None else str(judge.display)


def _name(criterion: Any) -> str:
    return "?" if criterion is None else str(criterion.name or criterion.key)


_REFERENCE = {
    "position: flip rate": 0.0,
    "position: first-slot preference": 0.5,
    "length: longer preferred among human ties": 0.5,
}


def bias_svg(result: AgreementResult) -> bytes:
    """Forest plot of the bias audits: estimate, interval and the no-bias reference."""
    judges = result.judges_by_id()
    crits = result.criteria_by_id()
    rows = [b for b in result.bias if b.value is not None][:MAX_ROWS]
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.4 * max(1, len(rows))))
    for i, b in enumerate(rows):
        v, lo, hi = b.value, b.ci_low, b.ci_high
        assert v is not None  # rows without a value were left out above
        ax.plot([v], [i], "o", color="tab:blue")
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [i, i], "-", color="tab:blue")
        ref = _REFERENCE.get(b.audit, 0.0)
        ax.plot([ref], [i], "|", color="black", markersize=14)
    labels = [
        f"{_display(judges.get(b.judge_version))} · {_name(crits.get(b.criterion))} · {b.audit}"
        for b in rows
    ]
    # One tick per label: matplotlib refuses a label list longer than the tick list, which a
    # report without bias audits (no pairwise judges, no ties) would otherwise give.
    ax.set_yticks(range(len(rows)), labels, fontsize=LABEL_PT)
    if not rows:
        ax.text(0.5, 0.5, "No bias audits in this report.", ha="center", va="center",
                transform=ax.transAxes, fontsize=11)
        ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title("Bias audits: estimate with interval; black tick = no bias", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    return svg_bytes(fig)
