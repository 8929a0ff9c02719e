"""The service: `ingest_run` validates a whole file (pass 1), then upserts it in one
transaction (pass 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from django.db import IntegrityError, connection, transaction

from reviewhub.errors import Conflict

from ..models import Study
from ..services import study_strata_recompute
from .errors import ErrorCollector, IngestProgress, IngestResult, IngestRowProgress
from .formats import Format, Kind, Strategy
from .reading import iter_records
from .spool import Spool

# Looked up through this module at call time, so that a test can put a failing writer in.
from .upsert import Upserter as _Upserter
from .validation import SPECS, KeyedTracker, OutputTracker, RowValidator

DEFAULT_BATCH_SIZE = 5000


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


def ingest_run(
    *,
    study: Study,
    kind: Kind,
    stream: IO[bytes],
    fmt: Format,
    batch_size: int = DEFAULT_BATCH_SIZE,
    strategy: Strategy = "auto",
    progress: IngestProgress | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> IngestResult:
    """Validate and upsert every row of an ingest file, all or nothing.

    Pass 1 streams `stream` once, validating every row and checking duplicates and references
    (raising `IngestRejected`, a 400 listing up to ERROR_LIMIT errors by line, field and
    reason); while no error has been seen, each row's database values go to an on-disk spool.
    Pass 2 upserts the spool in batches of `batch_size` inside one transaction: COPY plus one
    merge statement per batch on PostgreSQL (`strategy="copy"`), `bulk_create` elsewhere
    (`"orm"`). Items are keyed by external_id, candidates by name, outputs by (candidate,
    item). After an items import that changed anything, the study's strata are recomputed in
    the same transaction. `on_batch` is told the size of each batch written (for tests).
    `progress`, when given, hears each phase and advance (an `IngestRowProgress` also the rows
    read while validating); without it no callback is made at all.
    """
    if kind not in SPECS:
        raise ValueError(f"unknown ingest kind {kind!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if study.status == Study.Status.CLOSED:
        raise Conflict(f"Study '{study.slug}' is closed; no more {kind} can be imported.")
    use_copy = connection.vendor == "postgresql" if strategy == "auto" else strategy == "copy"
    if use_copy and connection.vendor != "postgresql":
        raise ValueError("the COPY strategy needs PostgreSQL")
    validator = RowValidator(study=study, kind=kind, fmt=fmt, json_as_text=use_copy)
    upserter = _Upserter(kind=kind, study=study, use_copy=use_copy)
    spool = Spool(batch_size=batch_size)
    try:
        rows = _validate_pass(study, kind, stream, fmt, validator, spool, batch_size, progress)
        return _write_pass(study, kind, upserter, spool, rows, progress, on_batch)
    finally:
        spool.close()
        if progress is not None:
            progress.close()


def _validate_pass(
    study: Study,
    kind: Kind,
    stream: IO[bytes],
    fmt: Format,
    validator: RowValidator,
    spool: Spool,
    batch_size: int,
    progress: IngestProgress | None,
) -> int:
    """Pass 1: check every row and spool the valid ones; raise IngestRejected on any error."""
    if progress is not None:
        progress.phase("validating", None)
    tracker: KeyedTracker | OutputTracker
    if kind == "outputs":
        tracker = OutputTracker(validator=validator, study=study, batch_size=batch_size)
    else:
        tracker = KeyedTracker(validator, "external_id" if kind == "items" else "name")
    errors = ErrorCollector()
    rows = 0
    on_bytes: Callable[[int], None] | None = None
    if isinstance(progress, IngestRowProgress):
        counting = progress

        def advance_counting(nbytes: int) -> None:
            # Called from inside iter_records between two rows, so `rows` (read through the
            # closure) is the count so far; one call per ~256 KB, nothing per row.
            counting.rows_read(rows)
            counting.advance(nbytes)

        on_bytes = advance_counting
    elif progress is not None:
        on_bytes = progress.advance
    for rec in iter_records(stream, fmt, validator.spec, on_bytes):
        rows += rec.is_row
        if rec.errors:
            errors.add_row(rec.errors, is_row=rec.is_row)
            continue
        values, row_errors = validator.validate(rec)
        if values is None:
            errors.add_row(row_errors)
            continue
        # Once any row is bad nothing will be written, so stop spooling (keep checking).
        found, ready = tracker.add(rec, values, stage=not errors.total)
        for row_errors in found:
            errors.add_row(row_errors)
        if ready and not errors.total:
            spool.extend(ready)
    found, ready = tracker.finish(stage=not errors.total)
    for row_errors in found:
        errors.add_row(row_errors)
    if errors.total:
        raise errors.rejection(rows)
    spool.extend(ready)
    spool.seal()
    return rows


def _write_pass(
    study: Study,
    kind: Kind,
    upserter: _Upserter,
    spool: Spool,
    rows: int,
    progress: IngestProgress | None,
    on_batch: Callable[[int], None] | None,
) -> IngestResult:
    """Pass 2: upsert the spooled rows in batches inside one transaction."""
    if spool.rows != rows:  # every row was validated, so every row must have been spooled
        raise RuntimeError(f"ingest spooled {spool.rows} of {rows} rows")
    if progress is not None:
        progress.phase("writing", rows)
    try:
        with transaction.atomic():
            for batch in spool.replay():
                if on_batch is not None:
                    on_batch(len(batch))
                upserter.write(batch)
                if progress is not None:
                    progress.advance(len(batch))
            result = upserter.close()
            if kind == "items" and (result.created or result.updated):
                study_strata_recompute(study=study)
    except IntegrityError as exc:
        raise Conflict(f"The import conflicted with a concurrent change ({exc}); nothing was "
                       "written.") from None
    return result
