"""The agreement report kind: does a judge agree with the humans well enough to stand in for
them? Its parameters, its computation (frames in, a JSON-ready result out, no ORM access), its
typed result, how it is shown, and its pages.

For every judge version x criterion x stratum ("overall", each dimension's labels, and the
crosses asked for) the cell holds the coefficients suited to the scale with item-clustered
bootstrap intervals, the human-human ceiling on the same subjects, the alternative annotator
test and a verdict by the rule written into the result (`rule_text`). Statistics, intervals
clustered by item included, come from evalstats (`evalstats.clustered`); this package picks the
subjects of each cell and shapes the results into the stored JSON (the codes of each scale
are described in `common`).

Modules, by concern:

- `params`: the parameters' defaults and validation (pure: no Django, no numpy);
- `verdict`: the verdict rule, as text and as the decision of a cell (pure);
- `common`: JSON of estimates, bootstrap options, per-cell generators, codes of each scale;
- `humans`: a criterion's human block (annotators x subjects, consensus) and its strata;
- `coefficients`: judge-human coefficients per kind of criterion, the alternative annotator test,
  agreement per human vote;
- `ceiling`: the human-human ceiling (with the pooled pair agreement on nominal scales);
- `bias`: the bias audits; `system`: system-level correlation; `examples`: disagreeing examples;
- `levels`: correlation at sample, dataset and system level; `orders`: verdicts in both
  presentation orders;
- `groups`: agreement by rater group (judge vs a group's consensus and each of its votes, group
  vs group, within a group); `candidates`: every cell metric per candidate (`by_candidate`);
- `load`: the ratings through the evidence read model, and their fingerprint;
- `compute`: the report itself (`compute_report`), in named steps;
- `results`: the typed, versioned result; `present`: how it is shown (summary, page, tables,
  charts, CSV); `views` and `api`: its pages and CSV endpoint; `kind`: its registration.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .params import DEFAULT_PARAMS, EPSILON_BY_ANNOTATOR_TYPE, params_validate
from .verdict import NOT_TRUSTWORTHY, TOO_FEW, TRUSTWORTHY, rule_text

if TYPE_CHECKING:
    from .ceiling import MAX_LISTED_PAIRS
    from .common import FloatArray, est_dict
    from .compute import (
        DEFAULT_WORKERS,
        RESULT_VERSION,
        cells_for,
        compute_report,
        lookup,
    )
    from .humans import human_block
    from .load import input_fingerprint

# The parameters and the verdict rule import without Django (the report parameters are checked
# before any database work, and tests/test_pure_imports.py imports them in a bare interpreter);
# the computation reads calibration.frames, which needs Django's models. Its names are therefore
# imported on first use, not when the package is.
_LAZY = {
    "DEFAULT_WORKERS": "compute",
    "FloatArray": "common",
    "MAX_LISTED_PAIRS": "ceiling",
    "RESULT_VERSION": "compute",
    "human_block": "humans",
    "cells_for": "compute",
    "compute_report": "compute",
    "est_dict": "common",
    "input_fingerprint": "load",
    "lookup": "compute",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_PARAMS",
    "DEFAULT_WORKERS",
    "EPSILON_BY_ANNOTATOR_TYPE",
    "MAX_LISTED_PAIRS",
    "NOT_TRUSTWORTHY",
    "RESULT_VERSION",
    "TOO_FEW",
    "TRUSTWORTHY",
    "FloatArray",
    "cells_for",
    "compute_report",
    "est_dict",
    "human_block",
    "input_fingerprint",
    "lookup",
    "params_validate",
    "rule_text",
]
