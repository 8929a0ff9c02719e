"""Shared helpers of the management commands (`report` here; the importers in `imports` too)."""

from __future__ import annotations

from typing import Any

from reviewhub.errors import AppError


def app_error_text(exc: AppError) -> str:
    """The error message plus its listed problems, one a line."""
    lines = [exc.message]
    details: Any = exc.details
    if isinstance(details, dict):
        errors = details.get("errors") or []
        lines.extend(f"  {e}" for e in errors)
        total = details.get("error_count")
        if isinstance(total, int) and total > len(errors):
            lines.append(f"  ... and {total - len(errors)} more")
    return "\n".join(lines)
