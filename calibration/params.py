"""Parameters of a calibration snapshot: defaults, types and ranges (pure: no Django).

`params_validate` fills the defaults and checks every parameter, raising one
`ValidationFailed` whose details list each bad parameter as ``{"path": "params.<name>",
"message"}`` (the shape every validator of the project uses). docs/calibration.md lists the
parameters and what they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reviewhub.params import is_int, is_num, params_merged
from studies.spec import plan_policy, plan_policy_section_problems

# The calibration methods evalstats.calibration offers (tests/calibration/test_params.py
# asserts this equals evalstats.calibration.METHODS; kept here so that validating a request
# does not import the statistics).
METHODS = ("isotonic", "platt", "beta", "histogram")

DEFAULT_PARAMS: dict[str, Any] = {
    "seed": 0,
    # Bootstrap resamples of the diagnostics' and costs' intervals.
    "n_resamples": 200,
    # Bootstrap resamples of each curve, for the P(pass) interval of every score (0: none).
    "curve_resamples": 100,
    "level": 0.95,
    "folds": 5,
    # A calibration cell with fewer human labels than this has no curve of its own.
    "min_labels": 10,
    "n_bins": 10,
    "criteria": None,
    "judges": None,
    # Dimension keys whose label combinations make the calibration cells (None: the plan's
    # strata, else none: the whole study only).
    "strata": None,
    "methods": None,  # None: every method in METHODS
    # A decision policy to try beside the plan's (a plan `policy` section, e.g.
    # {"kind": "guaranteed_agreement", "alpha": 0.15, "min_count": 30}): reported as
    # exploratory; only the locked plan's policy decides the served scores.
    "policy": None,
}


def params_validate(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fill defaults and check types; raise ValidationFailed naming each bad parameter."""
    p, problems, need = params_merged(raw, DEFAULT_PARAMS)

    need(is_int(p["seed"]) and 0 <= p["seed"] < 2**63, "seed", "a non-negative integer")
    need(
        is_int(p["n_resamples"]) and 20 <= p["n_resamples"] <= 20000,
        "n_resamples",
        "an integer from 20 to 20000",
    )
    need(
        is_int(p["curve_resamples"]) and (p["curve_resamples"] == 0
                                           or 20 <= p["curve_resamples"] <= 2000),
        "curve_resamples",
        "0 (no interval) or an integer from 20 to 2000",
    )
    need(is_num(p["level"]) and 0.5 <= p["level"] < 1, "level", "a number in [0.5, 1)")
    need(is_int(p["folds"]) and 2 <= p["folds"] <= 20, "folds", "an integer from 2 to 20")
    need(
        is_int(p["min_labels"]) and 2 <= p["min_labels"] <= 100000,
        "min_labels",
        "an integer from 2 to 100000",
    )
    need(is_int(p["n_bins"]) and 2 <= p["n_bins"] <= 100, "n_bins", "an integer from 2 to 100")
    for key in ("criteria", "strata"):
        v = p[key]
        ok = v is None or (
            isinstance(v, list)
            and all(isinstance(x, str) and x for x in v)
            and len(set(v)) == len(v)
        )
        need(ok, key, "null or a list of distinct non-empty strings")
    v = p["judges"]
    need(
        v is None
        or (isinstance(v, list) and all(is_int(x) and x > 0 for x in v) and len(set(v)) == len(v)),
        "judges",
        "null or a list of distinct judge version ids",
    )
    v = p["methods"]
    need(
        v is None
        or (
            isinstance(v, list)
            and len(v) > 0
            and all(isinstance(x, str) and x in METHODS for x in v)
            and len(set(v)) == len(v)
        ),
        "methods",
        "null or a non-empty list of distinct methods from: " + ", ".join(METHODS),
    )
    if p["policy"] is not None:
        for path, message in plan_policy_section_problems(p["policy"]):
            problems.add(path.replace("spec.policy", "params.policy", 1), message)
    problems.raise_if_any("The report parameters")
    if p["policy"] is not None:
        p["policy"] = plan_policy({"policy": p["policy"]})[0]
    p["level"] = float(p["level"])
    if p["methods"] is None:
        p["methods"] = list(METHODS)
    return p


__all__ = ["DEFAULT_PARAMS", "METHODS", "params_validate"]
