"""Shared helpers of the management commands (`report` here; the importers in `imports` too).

`app_error_text` is `reviewhub.errors.error_text`: an application error's message, then each
listed problem of the one `details` shape a line (``line 3: value: ...``)."""

from __future__ import annotations

from reviewhub.errors import error_text as app_error_text

__all__ = ["app_error_text"]
