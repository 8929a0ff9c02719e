"""The agreement report's parameters: defaults and validation.

Pure module: no Django, no DRF, no numpy (a test imports it without settings), so the
parameters can be checked before any database work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reviewhub.params import Need, is_int, is_num, params_merged
from studies.spec import plan_strata_defaults

if TYPE_CHECKING:
    from studies.models import AnalysisPlan

# Calderon, Reichart & Dror (2025), as documented in evalstats.alt_test.
EPSILON_BY_ANNOTATOR_TYPE = {"expert": 0.2, "skilled": 0.15, "crowd": 0.1}

DEFAULT_PARAMS: dict[str, Any] = {
    "seed": 0,
    "n_resamples": 1000,
    "ci": "bca",
    "level": 0.95,
    "min_items": 30,
    "annotator_type": "skilled",
    "epsilon": None,  # None: EPSILON_BY_ANNOTATOR_TYPE[annotator_type]
    "q": 0.05,
    "margin": 0.05,
    "min_alt_annotators": 2,
    "min_pair_items": 10,
    "crosses": [],
    "strata": None,  # None: every dimension
    "criteria": None,
    "judges": None,
    "candidates": None,
    "system_level": False,
    # Sample-, dataset- and system-level correlation per stratum of ordinal criteria.
    "correlation_levels": True,
    # An unparseable verdict in one presentation order: "miss" (wrong) or "tie".
    "unparseable_as": "miss",
    "disagreement_gap": 1.0,
    "max_examples": 200,
    # A rater attribute key (e.g. "group", from an import's rater.group column): the report
    # adds judge vs group, group vs group and within-group figures. None: no groups.
    "rater_groups": None,
    # Every cell metric per candidate as well (the `by_candidate` table): a paper's
    # per-system table in one report.
    "by_candidate": False,
}


def _check_bootstrap(p: Mapping[str, Any], need: Need) -> None:
    """The generator's seed and the bootstrap's settings."""
    need(is_int(p["seed"]) and 0 <= p["seed"] < 2**63, "seed", "a non-negative integer")
    need(
        is_int(p["n_resamples"]) and 100 <= p["n_resamples"] <= 20000,
        "n_resamples",
        "an integer from 100 to 20000",
    )
    need(p["ci"] in ("bca", "percentile"), "ci", "'bca' or 'percentile'")
    need(is_num(p["level"]) and 0.5 <= p["level"] < 1, "level", "a number in [0.5, 1)")
    need(is_int(p["min_items"]) and 2 <= p["min_items"] <= 100000, "min_items", "an integer >= 2")


def _check_rule(p: Mapping[str, Any], need: Need) -> None:
    """The verdict rule's settings: the alternative annotator test and the ceiling margin."""
    need(
        p["annotator_type"] in EPSILON_BY_ANNOTATOR_TYPE,
        "annotator_type",
        "one of " + ", ".join(EPSILON_BY_ANNOTATOR_TYPE),
    )
    need(
        p["epsilon"] is None or (is_num(p["epsilon"]) and 0 <= p["epsilon"] < 1),
        "epsilon",
        "null or a number in [0, 1)",
    )
    need(is_num(p["q"]) and 0 < p["q"] < 1, "q", "a number in (0, 1)")
    need(is_num(p["margin"]) and 0 <= p["margin"] <= 1, "margin", "a number in [0, 1]")
    need(
        is_int(p["min_alt_annotators"]) and p["min_alt_annotators"] >= 2,
        "min_alt_annotators",
        "an integer >= 2",
    )
    need(
        is_int(p["min_pair_items"]) and p["min_pair_items"] >= 2,
        "min_pair_items",
        "an integer >= 2",
    )


def _check_tables(p: Mapping[str, Any], need: Need) -> None:
    """The optional tables and what they read."""
    need(isinstance(p["system_level"], bool), "system_level", "true or false")
    need(isinstance(p["correlation_levels"], bool), "correlation_levels", "true or false")
    need(isinstance(p["by_candidate"], bool), "by_candidate", "true or false")
    need(p["unparseable_as"] in ("miss", "tie"), "unparseable_as", "'miss' or 'tie'")
    need(
        is_num(p["disagreement_gap"]) and p["disagreement_gap"] > 0,
        "disagreement_gap",
        "a positive number",
    )
    need(
        is_int(p["max_examples"]) and 0 <= p["max_examples"] <= 10000,
        "max_examples",
        "an integer from 0 to 10000",
    )
    groups = p["rater_groups"]
    need(
        groups is None
        or (isinstance(groups, str) and groups.strip() == groups and 0 < len(groups) <= 100),
        "rater_groups",
        "null or a rater attribute key (a non-empty string of at most 100 characters, e.g. "
        "\"group\")",
    )


def _check_selections(p: Mapping[str, Any], need: Need) -> None:
    """The strata crossed and the criteria, candidates and judge versions kept."""
    crosses = p["crosses"]
    ok_crosses = isinstance(crosses, list) and all(
        isinstance(c, (list, tuple))
        and len(c) == 2
        and all(isinstance(x, str) for x in c)
        and c[0] != c[1]
        for c in crosses
    )
    need(ok_crosses, "crosses", "a list of [dimension, dimension] pairs")
    for key in ("strata", "criteria", "candidates"):
        v = p[key]
        need(
            v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
            key,
            "null or a list of strings",
        )
    v = p["judges"]
    need(
        v is None or (isinstance(v, list) and all(is_int(x) for x in v)),
        "judges",
        "null or a list of judge version ids",
    )


def params_validate(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fill defaults and check types; raise ValidationFailed naming each bad parameter."""
    p, problems, need = params_merged(raw, DEFAULT_PARAMS)

    # In this order: the 400's details list the problems in it.
    for check in (_check_bootstrap, _check_rule, _check_tables, _check_selections):
        check(p, need)
    problems.raise_if_any("The report parameters")
    p["crosses"] = [list(c) for c in p["crosses"]]
    if p["epsilon"] is None:
        p["epsilon"] = EPSILON_BY_ANNOTATOR_TYPE[p["annotator_type"]]
    p["level"] = float(p["level"])
    return p


def plan_defaults(params: dict[str, Any], plan: AnalysisPlan | None) -> dict[str, Any]:
    """Parameters the caller left out are taken from the analysis plan where it says them."""
    if plan is None:
        return params
    return plan_strata_defaults(params, plan.spec, min_labels_key="min_items")


__all__ = ["DEFAULT_PARAMS", "EPSILON_BY_ANNOTATOR_TYPE", "params_validate", "plan_defaults"]
