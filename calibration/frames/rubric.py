"""THE rubric rule: which outputs pass a rubric from their criteria's labels, and the judge's
probability of that under the same rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


def rubric_rule(aggregate: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rubric's rule in force (the rubric version's ``aggregate``, studies.spec) with the
    sentence every page, PDF, CSV and API response prints beside the rubric pass rate."""
    raw = dict(aggregate or {})
    if raw.get("kind") == "weighted" and raw.get("pass_share") is not None:
        share = float(raw["pass_share"])
        return {"kind": "weighted", "pass_share": share,
                "text": "an output passes the rubric when it passes every hard-gate criterion "
                        f"and at least {share * 100:g} % (by weight) of the other criteria"}
    return {"kind": "all", "pass_share": None,
            "text": "an output passes the rubric when every criterion with a pass/fail "
                    "reading passes"}


def rubric_pass_columns(
    y: Sequence[npt.NDArray[np.float64]], gates: Sequence[bool], weights: Sequence[float],
    rule: Mapping[str, Any],
) -> npt.NDArray[np.float64]:
    """Human rubric pass (1/0) per output from its criteria's 1/0 labels under `rule`; NaN
    unless every criterion has a label."""
    complete = np.logical_and.reduce([np.isfinite(v) for v in y])
    if rule.get("kind") == "weighted":
        gate_failed = np.zeros(y[0].size, dtype=bool)
        share = np.zeros(y[0].size)
        den = 0.0
        for v, g, w in zip(y, gates, weights, strict=True):
            ok = v == 1.0
            if g:
                gate_failed |= ~ok
            else:
                share = share + np.where(ok, w, 0.0)
                den += w
        share = share / den if den > 0 else np.ones(y[0].size)
        passed = (~gate_failed) & (share >= float(rule["pass_share"]) - 1e-12)
    else:
        passed = np.logical_and.reduce([v == 1.0 for v in y])
    return np.where(complete, passed.astype(np.float64), np.nan)


def rubric_predictor_columns(
    p: Sequence[npt.NDArray[np.float64]], gates: Sequence[bool], weights: Sequence[float],
    rule: Mapping[str, Any],
) -> npt.NDArray[np.float64]:
    """The judge's P(output passes the rubric) from its criteria's P(pass) under `rule`,
    assuming independence: the product of every criterion's P(pass) for "all"; the product
    of the gates' times the weighted mean of the others' for "weighted" (its expected share
    passed, the predictor calibration used before the rule was stated)."""
    if rule.get("kind") != "weighted":
        out = np.ones(p[0].size)
        for pi in p:
            out = out * pi
        return np.asarray(out, dtype=np.float64)
    gate = np.ones(p[0].size)
    num = np.zeros(p[0].size)
    den = 0.0
    for pi, g, w in zip(p, gates, weights, strict=True):
        if g:
            gate = gate * pi
        else:
            num = num + w * pi
            den += w
    rest = num / den if den > 0 else np.ones(p[0].size)
    return np.asarray(gate * rest, dtype=np.float64)

