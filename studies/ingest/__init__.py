"""Bulk ingest of items, candidates and outputs from JSON arrays, JSON Lines and CSV.

One code path serves the REST bulk endpoints (`studies/ingest_views.py`) and the `import_*`
management commands, so both accept the same files and report the same errors:

1. `iter_records` streams a binary file and yields one raw record per row with its 1-based line
   number (and, inside a JSON array, its 0-based element index). The whole file is never held
   in memory.
2. `RowValidator` turns a raw record into database-ready values or a list of `RowError`.
3. `ingest_run` makes two passes. Pass 1 streams the file once, validates every row and checks
   duplicates and references, keeping only compact keys, and spools the database-ready rows to
   a temporary file. Pass 2 upserts the spooled rows in batches inside ONE transaction. Any
   error in pass 1 means pass 2 never starts, so an invalid file writes nothing; spooling to
   disk instead of keeping the rows is what lets a 1 GB file import in bounded memory.

On PostgreSQL each batch is COPYed into a temporary table and merged by one
``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` statement that also classifies the rows as
created / updated / unchanged (unchanged rows are not touched at all). Other databases use
``bulk_create(update_conflicts=True)`` after comparing the batch with the stored rows.

The modules, in the order a file goes through them:

- `formats`: row kinds, file formats, Content-Type and file-name lookup (pure).
- `errors`: `RowError`, `IngestRejected`, `IngestResult`, the progress interface and the error
  collector (pure).
- `schema`: field specifications, the row tuple's column order, canonical JSON (pure).
- `reading`: the streaming readers, `iter_records` (pure).
- `validation`: each kind's `SPECS`, `RowValidator`, pass 1's duplicate and reference checks.
- `spool`: `upload_spool` for REST bodies and the on-disk spool between the passes.
- `upsert`: the batched upsert, the only writer of items, candidates and outputs here.
- `service`: `ingest_run`.

The pure modules import with no Django settings (tests/test_pure_imports.py). So that importing
one of them does not load the models through this package, the names of the Django modules are
resolved on first use (PEP 562 `__getattr__`); `from studies import ingest` followed by
`ingest.ingest_run(...)`, or `from studies.ingest import ingest_run`, work as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ERROR_LIMIT,
    IngestProgress,
    IngestRejected,
    IngestResult,
    IngestRowProgress,
    RowError,
)
from .formats import (
    CONTENT_TYPES,
    EXTENSIONS,
    KINDS,
    Format,
    Kind,
    Strategy,
    format_for_content_type,
    format_for_path,
)
from .reading import RawRecord, iter_records
from .schema import FieldKind, FieldSpec, KindSpec, canonical_json

if TYPE_CHECKING:
    from .service import DEFAULT_BATCH_SIZE, ingest_run
    from .spool import upload_spool
    from .validation import SPECS, Converter, RowValidator

# Name -> the module (needing Django) that defines it.
_LAZY: dict[str, str] = {
    "DEFAULT_BATCH_SIZE": "service",
    "ingest_run": "service",
    "upload_spool": "spool",
    "SPECS": "validation",
    "Converter": "validation",
    "RowValidator": "validation",
}

__all__ = [
    "CONTENT_TYPES",
    "DEFAULT_BATCH_SIZE",
    "ERROR_LIMIT",
    "EXTENSIONS",
    "KINDS",
    "SPECS",
    "Converter",
    "FieldKind",
    "FieldSpec",
    "Format",
    "IngestProgress",
    "IngestRejected",
    "IngestResult",
    "IngestRowProgress",
    "Kind",
    "KindSpec",
    "RawRecord",
    "RowError",
    "RowValidator",
    "Strategy",
    "canonical_json",
    "format_for_content_type",
    "format_for_path",
    "ingest_run",
    "iter_records",
    "upload_spool",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
