"""Server-side SVG charts of a stored report (matplotlib, Agg backend).

Charts are served by their own views as image/svg+xml and shown with <img>, so the text inside
them (judge names, stratum labels: user input) can never run as markup in the page; every chart
has a table fallback on the audit page.
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .agreement import TOO_FEW, TRUSTWORTHY
from .results import AgreementResult

plt.rcParams["svg.hashsalt"] = "reviewhub"
_MARK = {TRUSTWORTHY: "trustworthy", "not trustworthy": "not trustworthy", TOO_FEW: "too few"}
MAX_ROWS = 80


def _svg(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


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


def heatmap_svg(result: AgreementResult, criterion: int) -> bytes:
    """Judge x stratum heat-map of the primary metric with intervals, ceiling column beside."""
    d = heatmap_data(result, criterion)
    rows, jids = d["rows"], d["judges"]
    n_rows, n_cols = max(1, len(rows)), len(jids) + 1
    fig, ax = plt.subplots(figsize=(2.0 + 1.9 * n_cols, 1.0 + 0.55 * n_rows))
    values = np.full((n_rows, n_cols), np.nan)
    texts: list[list[str]] = [["" for _ in range(n_cols)] for _ in range(n_rows)]
    for r, (dim, lab) in enumerate(rows):
        for k, jid in enumerate(jids):
            c = d["cells"].get((dim, lab, jid))
            if c is None:
                continue
            m = c.primary
            value, lo, hi = (m.value, m.ci_low, m.ci_high) if m else (None, None, None)
            if value is not None:
                values[r, k] = value
            texts[r][k] = (
                f"{_fmt(value)} [{_fmt(lo)}, {_fmt(hi)}]\n{_MARK.get(c.verdict, c.verdict)}"
                f" (n={c.n_subjects})"
            )
        ceil = d["ceilings"].get((dim, lab))
        if ceil is not None and ceil.point is not None:
            values[r, -1] = ceil.point
            texts[r][-1] = (
                f"{_fmt(ceil.point)}\nalpha {_fmt(ceil.alpha.value)} (n={ceil.n_subjects})"
            )
    ax.imshow(np.ma.masked_invalid(values), cmap="RdYlGn", vmin=-0.2, vmax=1.0, aspect="auto")
    for r in range(n_rows):
        for k in range(n_cols):
            if texts[r][k]:
                ax.text(k, r, texts[r][k], ha="center", va="center", fontsize=7)
    ax.set_xticks(
        range(n_cols), [*d["names"], "humans (ceiling)"], rotation=20, ha="right", fontsize=8
    )
    ax.set_yticks(
        range(n_rows),
        [lab if not dim else f"{dim}: {lab}" for dim, lab in rows] or [""],
        fontsize=8,
    )
    ax.axvline(n_cols - 1.5, color="black", linewidth=1.5)
    ax.set_title(
        "Primary agreement with the human consensus per stratum (interval, verdict)", fontsize=9
    )
    return _svg(fig)


def _display(judge: Any) -> str:
    return "?" if judge is None else str(judge.display)


def _key(criterion: Any) -> str:
    return "?" if criterion is None else str(criterion.key)


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
        f"{_display(judges.get(b.judge_version))} · {_key(crits.get(b.criterion))} · {b.audit}"
        for b in rows
    ]
    # One tick per label: matplotlib refuses a label list longer than the tick list, which a
    # report without bias audits (no pairwise judges, no ties) would otherwise give.
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    if not rows:
        ax.text(0.5, 0.5, "No bias audits in this report.", ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
        ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title("Bias audits: estimate with interval; black tick = no bias", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)
