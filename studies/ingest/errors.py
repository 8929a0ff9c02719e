"""Row errors, the rejection of a file, the result of an import, and the progress interface.

Pure Python (no Django): `IngestRejected` is a plain application error (reviewhub.errors)
that the API renders as a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from reviewhub.errors import MAX_LISTED, Problems, ValidationFailed, problem_text

# The 400 body lists at most this many errors and says how many more there were.
ERROR_LIMIT = MAX_LISTED


# --------------------------------------------------------------------------------------------
# Errors and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    """One problem in an ingest file: where (line, JSON array element), which field, why.

    In the answer it is an entry of the one `details` shape: the field (a column, or
    "(row)"/"(file)") is its `path`, the reason its `message`."""

    line: int
    field: str
    reason: str
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.field, "message": self.reason, "line": self.line}
        if self.index is not None:
            out["index"] = self.index
        return out

    def __str__(self) -> str:
        return problem_text(self.as_dict())


class IngestRejected(ValidationFailed):
    """The file had invalid rows; nothing was written. Renders as a 400 listing the errors
    (the one `details` shape, plus `more_errors` and `rows_with_errors`)."""

    def __init__(
        self, *, errors: list[RowError], error_count: int, rows_with_errors: int, rows: int
    ) -> None:
        more = error_count - len(errors)
        if rows and rows_with_errors:
            message = (
                f"{rows_with_errors} of {rows} rows are invalid ({error_count} errors); "
                "nothing was written."
            )
        else:
            message = f"The file was rejected ({error_count} errors); nothing was written."
        if errors:
            message += f" First: {errors[0]}."
        problems = Problems()
        problems.extend(e.as_dict() for e in errors)
        problems.count = error_count
        super().__init__(
            message, details=problems.details(more_errors=more, rows_with_errors=rows_with_errors)
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


class ErrorCollector:
    """The rows' errors: every one counted, the first `limit` kept (in line order in the
    answer), and the rows that had any."""

    def __init__(self, limit: int = ERROR_LIMIT) -> None:
        self.problems = Problems(keep=limit)
        self.rows = 0

    @property
    def total(self) -> int:
        return self.problems.count

    def add_row(self, errors: list[RowError], *, is_row: bool = True) -> None:
        if not errors:
            return
        # File-level problems (empty file, bad header, no rows) are not a row of the file: a
        # count that included them could say "2 of 1 rows are invalid".
        self.rows += is_row
        for e in errors:
            self.problems.add(e.field, e.reason, line=e.line, index=e.index)

    def rejection(self, rows: int) -> IngestRejected:
        shown = sorted(
            (RowError(e["line"], e["path"], e["message"], e.get("index"))
             for e in self.problems.items),
            key=lambda e: (e.line, e.index or 0),
        )
        return IngestRejected(
            errors=shown, error_count=self.total, rows_with_errors=self.rows, rows=rows
        )
