"""What every kind's server-side SVG charts share (matplotlib, Agg backend): the backend, the
hash salt that keeps the SVG ids the same run to run, the smallest text size, and the figure
written as SVG text.

Charts are served by their own views as image/svg+xml and shown with <img>, so the text inside
them (judge names, stratum labels: user input) can never run as markup in the page; every chart
has a table fallback on its page. Each kind draws its own (`reports/agreement/present/charts.py`,
`reports/calibration/charts.py`, `reports/selection/present/charts.py`).
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.rcParams["svg.hashsalt"] = "reviewhub"
# The smallest text in a chart, in points (1 pt = 4/3 px at the SVG's natural size). Charts are
# shown at their natural size or a little smaller at 1280 px, so 10 pt keeps every label at 11 px
# or more on the page (tests/browser/test_page_layout.py measures it).
LABEL_PT = 10


def svg_bytes(fig: Any) -> bytes:
    """A matplotlib figure as SVG text (closed after), with no date in it."""
    buf = io.BytesIO()
    # Text stays text (not glyph outlines): searchable, and its size measurable on the page.
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


__all__ = ["LABEL_PT", "svg_bytes"]
