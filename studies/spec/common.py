"""What every section of a study spec shares: slugs, numbers and the JSON-path joiner."""

from __future__ import annotations

import math
import re
from typing import Any

from reviewhub.errors import MAX_LISTED

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
