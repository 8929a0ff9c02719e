"""Reliability diagrams of a calibration snapshot (matplotlib SVG, served as an image).

One chart per cell (judge version x criterion x stratum): the held-out reliability bins before
calibration (the judge's raw score read as a probability) and after (the calibrated P(pass)),
with the fitted curve and the diagonal. Labels inside the chart are user input (judge names,
criterion keys, stratum labels): they are drawn with mathtext off, so a "$" cannot break the
rendering, and the image is served on its own so nothing in it can run in the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from calibration.advice import stratum_text
from reports.charts import LABEL_PT, svg_bytes

plt.rcParams["svg.hashsalt"] = "reviewhub"


def reliability_bins(cell: Mapping[str, Any], which: str) -> list[Mapping[str, Any]]:
    """The bins of the cell's `which` ("before" | "after") diagnostics ([] when absent)."""
    diagnostics = cell.get("diagnostics")
    diag = diagnostics.get(which) if isinstance(diagnostics, Mapping) else None
    bins = diag.get("bins") if isinstance(diag, Mapping) else None
    return [b for b in bins if isinstance(b, Mapping)] if isinstance(bins, list) else []


def cell_title(cell: Mapping[str, Any]) -> str:
    return (f"{cell.get('judge') or cell.get('judge_version')} · {cell.get('criterion')} · "
            f"{stratum_text(str(cell.get('stratum') or ''))}")


def reliability_svg(cell: Mapping[str, Any]) -> bytes:
    """Reliability diagram of one cell: before and after calibration on held-out folds."""
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=1, label="perfect calibration")
    styles = {"before": ("tab:red", "s", "before (raw score)"),
              "after": ("tab:blue", "o", "after (calibrated)")}
    drawn = False
    for which, (color, marker, label) in styles.items():
        bins = reliability_bins(cell, which)
        xs = [b.get("mean_predicted") for b in bins]
        ys = [b.get("fraction_pass") for b in bins]
        pts = [(x, y, b.get("count") or 0) for x, y, b in zip(xs, ys, bins, strict=True)
               if isinstance(x, int | float) and isinstance(y, int | float)]
        if not pts:
            continue
        drawn = True
        top = max(int(c) for _x, _y, c in pts) or 1
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=color, alpha=0.5,
                linewidth=1)
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker,
                   s=[12 + 60 * int(p[2]) / top for p in pts], label=label, zorder=3)
    curve = cell.get("curve")
    # The map's x is the judge's own scale (an ordinal level, a continuous score): drawn only
    # when that scale is a probability, so it shares the axes with the bins.
    if (isinstance(curve, Mapping) and curve.get("x") and curve.get("y")
            and all(isinstance(x, int | float) and 0.0 <= x <= 1.0 for x in curve["x"])):
        ax.plot(curve["x"], curve["y"], "-", color="black", linewidth=1.2, label="fitted map")
        drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "No held-out bins (too few labels).", ha="center", va="center",
                transform=ax.transAxes, fontsize=11, parse_math=False)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted P(pass) (bin mean; marker size = count)", fontsize=LABEL_PT)
    ax.set_ylabel("share the humans passed", fontsize=LABEL_PT)
    ax.set_title(cell_title(cell), fontsize=LABEL_PT, parse_math=False)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=LABEL_PT, loc="upper left")
    return svg_bytes(fig)


__all__ = ["cell_title", "reliability_bins", "reliability_svg"]
