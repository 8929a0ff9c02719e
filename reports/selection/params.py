"""Parameters of a selection snapshot: defaults, types and ranges (pure: no Django).

`params_validate` fills the defaults and checks every parameter on its own, raising one
`ValidationFailed` whose details list each bad parameter as ``{"path": "params.<name>",
"message"}`` (the shape every validator of the project uses). What needs the study's data (the
dimension's labels, a judge version of the study, the names of its candidates) is checked by
`reports.selection.load.selection_inputs_check` when the snapshot is created. docs/reports.md
("Selection report") describes each parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reviewhub.params import is_int, is_num, params_merged

# Shares of a mix must sum to 1 within this (the plan's own tolerance, studies.spec).
MIX_TOLERANCE = 1e-6
# The metric families a selection report estimates; a metric key is one of the two study-wide
# keys or "<family>:<criterion key>".
METRIC_KEYS = ("rubric_pass_rate", "expected_cost")
METRIC_FAMILIES = ("pass_rate", "mean_score")

DEFAULT_PARAMS: dict[str, Any] = {
    # Judge version whose verdicts are the predictor (None: the version with most verdicts).
    "judge": None,
    # Candidate names to compare (None: every candidate of the study).
    "candidates": None,
    # Strata dimension key (None: the plan's deployment-mix dimension, else its first stratum,
    # else no dimension: the mix only).
    "dimension": None,
    # {label: share} replacing the plan's mix (a deviation from the locked plan).
    "mix": None,
    # Metric keys to estimate (None: every metric the rubric supports).
    "metrics": None,
    # Confidence level (None: the plan's, else 0.95).
    "level": None,
    "n_resamples": 1000,
    "seed": 0,
    # The public score key compared with the private rank (None: a key every candidate has).
    "benchmark": None,
}


def _metric_key_ok(v: Any) -> bool:
    if not isinstance(v, str) or not v:
        return False
    if v in METRIC_KEYS:
        return True
    family, _, key = v.partition(":")
    return family in METRIC_FAMILIES and bool(key)


def params_validate(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fill defaults and check types; raise ValidationFailed naming each bad parameter."""
    p, problems, need = params_merged(raw, DEFAULT_PARAMS)

    need(p["judge"] is None or (is_int(p["judge"]) and p["judge"] > 0), "judge",
         "null or a judge version id")
    v = p["candidates"]
    need(
        v is None
        or (isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) and x for x in v)
            and len(set(v)) == len(v)),
        "candidates",
        "null or a non-empty list of distinct candidate names",
    )
    need(p["dimension"] is None or (isinstance(p["dimension"], str) and p["dimension"] != ""),
         "dimension", "null or a strata dimension key")
    mix = p["mix"]
    if mix is not None:
        if not isinstance(mix, Mapping) or not mix:
            need(False, "mix", "null or a non-empty object {label: share}")
        else:
            shares_ok = True
            for label, share in mix.items():
                if not isinstance(label, str) or not label:
                    need(False, "mix", "labels must be non-empty strings")
                    shares_ok = False
                elif not (is_num(share) and 0 <= share <= 1):
                    need(False, f"mix.{label}", "a share in [0, 1]")
                    shares_ok = False
            if shares_ok:
                total = math.fsum(float(s) for s in mix.values())
                need(abs(total - 1.0) <= MIX_TOLERANCE, "mix",
                     f"shares must sum to 1 (±{MIX_TOLERANCE:g}); they sum to {total:.9g}")
    v = p["metrics"]
    need(
        v is None
        or (isinstance(v, list) and len(v) > 0 and all(_metric_key_ok(x) for x in v)
            and len(set(v)) == len(v)),
        "metrics",
        "null or a non-empty list of distinct metric keys (rubric_pass_rate, expected_cost, "
        "pass_rate:<criterion>, mean_score:<criterion>)",
    )
    need(p["level"] is None or (is_num(p["level"]) and 0.5 <= p["level"] < 1), "level",
         "null or a number in [0.5, 1)")
    need(is_int(p["n_resamples"]) and 100 <= p["n_resamples"] <= 20000, "n_resamples",
         "an integer from 100 to 20000")
    need(is_int(p["seed"]) and 0 <= p["seed"] < 2**63, "seed", "a non-negative integer")
    need(p["benchmark"] is None or (isinstance(p["benchmark"], str) and p["benchmark"] != ""),
         "benchmark", "null or a public score key")
    problems.raise_if_any("The report parameters")
    if p["level"] is not None:
        p["level"] = float(p["level"])
    if p["mix"] is not None:
        p["mix"] = {str(k): float(s) for k, s in p["mix"].items()}
    return p


__all__ = ["DEFAULT_PARAMS", "METRIC_FAMILIES", "METRIC_KEYS", "MIX_TOLERANCE", "params_validate"]
