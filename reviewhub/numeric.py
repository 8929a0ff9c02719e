"""Reading a number out of untyped input (a file's cell, a judge's reply), shared by every app
that takes such input, so that they agree on what counts as a number."""

from __future__ import annotations

import math
from typing import Any


def finite_float(raw: Any) -> float | None:
    """`raw` as a float, or None when it is no number or not a finite one (NaN, infinities and
    1e400 cannot be stored in JSON or compared)."""
    try:
        num = float(raw)
    except (TypeError, ValueError):
        return None
    return num if math.isfinite(num) else None
