"""The codes the statistics read: pairwise sides, the reading of a stored label by the one
human-label rule, and the canonical stored text of a code."""

from __future__ import annotations

from collections.abc import Sequence

from calibration.refs import CriterionRef
from studies.criteria import number_text

# Codes used by the statistics: nominal scales get category indices; pairwise follows the
# PandaLM/evalstats convention tie = 0, A = 1, B = 2; ordinal and continuous keep the number.
PAIRWISE_CODE = {"tie": 0.0, "A": 1.0, "B": 2.0}


def label_reading(crit: CriterionRef, label: str | None) -> float:
    """The code of a stored label on the scale the one rule reads for binary and pairwise
    criteria (pass 1 / fail 0; tie 0 / A 1 / B 2); NaN when unreadable or absent."""
    if label is None:
        return float("nan")
    if crit.scale == "pairwise":
        return PAIRWISE_CODE.get(label, float("nan"))
    if crit.scale == "binary":
        return {"pass": 1.0, "fail": 0.0}.get(label, float("nan"))
    return float("nan")



def value_text(scale: str, values: Sequence[str], code: float, continuous: bool) -> str:
    """The canonical stored value of a code (used by the fingerprint and the examples page)."""
    if continuous:
        return repr(float(code))
    if scale == "interval":
        return number_text(code)
    if scale == "pairwise":
        return {0.0: "tie", 1.0: "A", 2.0: "B"}[float(code)]
    if scale == "binary":
        return "pass" if code == 1.0 else "fail"
    if scale == "ordinal":
        return str(int(code))
    return values[int(code)]

