"""What every section of a study spec shares: slugs, numbers and the JSON-path joiner."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from reviewhub.errors import MAX_LISTED, Problems

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
SCALES = ("binary", "ordinal", "pairwise", "categorical", "interval")
DIMENSION_KINDS = ("categorical", "numeric_bins", "boolean")
MAX_ERRORS = MAX_LISTED
MIX_TOLERANCE = 1e-6


def join(prefix: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{prefix}[{part}]"
    return f"{prefix}.{part}" if prefix else part


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def slug_problem(value: Any, max_length: int = 60) -> str | None:
    if not isinstance(value, str) or not value:
        return "is required and must be a non-empty string"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not SLUG_RE.match(value):
        return ("must be a slug: lowercase letters, digits, '-' and '_', starting with a letter "
                "or digit")
    return None


def keyed_entries_validate(
    entries: Any, path: str, problems: Problems, *,
    entry_validate: Callable[[Any, str, Problems], dict[str, Any] | None],
    noun: str, list_problem: str, non_empty: bool,
) -> list[dict[str, Any]]:
    """A list of entries each named by a unique ``key`` (a rubric's criteria, a strata
    scheme's dimensions): each entry checked by `entry_validate` (None when it added a
    problem), a repeated key refused at the later entry naming the first, the valid ones
    returned in order. `list_problem` is said at `path` when `entries` is no (or, with
    `non_empty`, an empty) list."""
    out: list[dict[str, Any]] = []
    if not isinstance(entries, list) or (non_empty and not entries):
        problems.add(path, list_problem)
        return out
    seen: dict[str, int] = {}
    for i, raw in enumerate(entries):
        entry = entry_validate(raw, join(path, i), problems)
        if entry is None:
            continue
        if entry["key"] in seen:
            problems.add(join(join(path, i), "key"),
                         f"{noun} key '{entry['key']}' is already used by "
                         f"{join(path, seen[entry['key']])}")
            continue
        seen[entry["key"]] = i
        out.append(entry)
    return out
