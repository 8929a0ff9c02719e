"""Row errors, the rejection of a file, the result of an import, and the progress interface.

Pure Python (no Django): `IngestRejected` is a plain application error (reviewhub.errors)
that the API renders as a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from reviewhub.errors import ValidationFailed

# The 400 body lists at most this many errors and says how many more there were.
ERROR_LIMIT = 50


# --------------------------------------------------------------------------------------------
# Errors and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    """One problem in an ingest file: where (line, JSON array element), which field, why."""

    line: int
    field: str
    reason: str
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "field": self.field, "reason": self.reason}
        if self.index is not None:
            out["index"] = self.index
        return out

    def __str__(self) -> str:
        where = f"line {self.line}"
        if self.index is not None:
            where += f" (element [{self.index}])"
        return f"{where}: {self.field}: {self.reason}"


class IngestRejected(ValidationFailed):
    """The file had invalid rows; nothing was written. Renders as a 400 listing the errors."""

    def __init__(
        self, *, errors: list[RowError], error_count: int, rows_with_errors: int, rows: int
    ) -> None:
        more = error_count - len(errors)
        if rows:
            message = (
                f"{rows_with_errors} of {rows} rows are invalid ({error_count} errors); "
                "nothing was written."
            )
        else:
            message = f"The file was rejected ({error_count} errors); nothing was written."
        super().__init__(
            message,
            details={
                "errors": [e.as_dict() for e in errors],
                "error_count": error_count,
                "more_errors": more,
                "rows_with_errors": rows_with_errors,
            },
        )
        self.errors = errors
        self.error_count = error_count
        self.more_errors = more


@dataclass(frozen=True)
class IngestResult:
    created: int
    updated: int
    unchanged: int

    def as_dict(self) -> dict[str, int]:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged}


class IngestProgress(Protocol):
    """Progress of an import; the CLI implements it with tqdm.

    Phase "validating" advances by bytes of the file read (total None: the caller knows the
    file size), phase "writing" by rows written (total: the number of rows).
    """

    def phase(self, name: str, total: int | None) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class IngestRowProgress(IngestProgress, Protocol):
    """An `IngestProgress` that is also told, with each advance while validating, how many rows
    have been read so far (the data page shows the count; the CLI's byte bar has no use for
    it). The service asks for this only when the object has `rows_read`, so an import without
    progress, or with the CLI's, runs exactly as before."""

    def rows_read(self, rows: int) -> None: ...


class _ErrorCollector:
    def __init__(self, limit: int = ERROR_LIMIT) -> None:
        self.limit = limit
        self.shown: list[RowError] = []
        self.total = 0
        self.rows = 0

    def add_row(self, errors: list[RowError]) -> None:
        if not errors:
            return
        self.rows += 1
        self.total += len(errors)
        room = self.limit - len(self.shown)
        if room > 0:
            self.shown.extend(errors[:room])

    def rejection(self, rows: int) -> IngestRejected:
        shown = sorted(self.shown, key=lambda e: (e.line, e.index or 0))
        return IngestRejected(
            errors=shown, error_count=self.total, rows_with_errors=self.rows, rows=rows
        )
