"""The start every report kind's parameter validation shares.

Each kind's `params_validate` lays the caller's parameters over its defaults, refuses names it
does not know and then checks each value; this module holds the first part and the two type
tests the checks use, so that every kind answers a bad parameter with the same 400.
Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from reviewhub.errors import Problems

#: `need(condition, key, message)`: records `message` under `params.<key>` when it fails.
Need = Callable[[bool, str, str], None]


def is_int(v: Any) -> bool:
    """An integer, not a bool (JSON's true is not 1 here)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    """A finite number, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def params_merged(
    raw: Mapping[str, Any] | None, defaults: Mapping[str, Any]
) -> tuple[dict[str, Any], Problems, Need]:
    """The caller's parameters over `defaults`, the problems found so far (one per unknown
    name, in sorted order) and the `need` that adds the value checks' problems to them.

    Raises ValidationFailed at once when `raw` is not an object: nothing else can be said.
    """
    if raw is not None and not isinstance(raw, Mapping):
        raise Problems.from_mapping({"params": "must be an object"}).error("The report parameters")
    raw = dict(raw or {})
    problems = Problems()
    for key in sorted(set(raw) - set(defaults), key=str):
        problems.add(f"params.{key}", "unknown parameter")
    p = {**defaults, **{k: v for k, v in raw.items() if k in defaults}}

    def need(cond: bool, key: str, message: str) -> None:
        if not cond:
            problems.add(f"params.{key}", message)

    return p, problems, need
