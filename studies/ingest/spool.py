"""Temporary storage: a REST request body copied into a seekable file under the upload size
limit, and the validated rows waiting between pass 1 and pass 2 of an import.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from django.conf import settings

from reviewhub.errors import PayloadTooLarge, ValidationFailed

from .reading import READ_CHUNK

# REST bodies are spooled to disk beyond this size so that two passes need no big buffer.
_SPOOL_IN_MEMORY = 8 << 20


# --------------------------------------------------------------------------------------------
# REST upload spooling
# --------------------------------------------------------------------------------------------


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than the limit of {limit:,} bytes "
        "(REVIEWHUB_MAX_UPLOAD_BYTES). Split the file, or import it with "
        "`python manage.py import_outputs`, which has no size limit.",
        details={"limit_bytes": limit},
    )


def _incomplete(received: int, declared: int | None, reason: str) -> ValidationFailed:
    return ValidationFailed.at(
        "(body)",
        f"The request body ended early: {reason}; nothing was written. Send the whole file "
        "again (an import is all or nothing, so re-sending is safe).",
        code="incomplete_body",
        received_bytes=received,
        declared_bytes=declared,
    )


def upload_spool(
    stream: IO[bytes] | None, *, content_length: int | None, limit: int | None = None
) -> IO[bytes]:
    """Copy a request body into a seekable temporary file, enforcing the upload size limit.

    The declared Content-Length is checked before anything is read, and the byte count is
    checked again while reading, so a body that lies about its length is cut off as well.

    A body that ends before its declared length (the client aborted, half-closed, or its
    connection dropped; WSGI servers then hand over a short stream or raise OSError) is
    refused with a 400 `incomplete_body`: importing the part that arrived would store a
    truncated file (a CSV's last row cut inside its text) as if it were whole.
    """
    limit = settings.REVIEWHUB_MAX_UPLOAD_BYTES if limit is None else limit
    if content_length is not None and content_length > limit:
        raise _too_large(limit)
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - returned to the caller
        max_size=_SPOOL_IN_MEMORY, mode="w+b"
    )
    total = 0
    if stream is not None:
        while True:
            try:
                chunk = stream.read(READ_CHUNK)
            except OSError as exc:  # the client went away mid-body (gunicorn: NoMoreData)
                spool.close()
                raise _incomplete(total, content_length,
                                  f"the connection failed after {total:,} bytes ({exc})") from exc
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                spool.close()
                raise _too_large(limit)
            spool.write(chunk)
    if content_length is not None and total != content_length:
        spool.close()
        raise _incomplete(total, content_length,
                          f"{total:,} of the {content_length:,} bytes declared in "
                          "Content-Length arrived")
    spool.seek(0)
    return spool


# --------------------------------------------------------------------------------------------
# The spool between the passes
# --------------------------------------------------------------------------------------------


class Spool:
    """Validated rows waiting for pass 2, pickled in blocks of one batch, in a temporary file:
    they live on disk, not in memory, and pass 2 neither re-reads nor re-validates the input."""

    def __init__(self, *, batch_size: int) -> None:
        self.batch_size = batch_size
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.blocks: list[tuple[int, int, int]] = []  # (offset, length, rows)
        self.pending: list[tuple[Any, ...]] = []
        self.rows = 0

    def extend(self, rows: list[tuple[Any, ...]]) -> None:
        self.pending.extend(rows)
        while len(self.pending) >= self.batch_size:
            block, self.pending = (self.pending[: self.batch_size],
                                   self.pending[self.batch_size:])
            self._write(block)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        payload = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        offset = self.file.seek(0, 2)
        self.file.write(payload)
        self.blocks.append((offset, len(payload), len(rows)))
        self.rows += len(rows)

    def seal(self) -> None:
        self._write(self.pending)
        self.pending = []

    def replay(self) -> Iterator[list[tuple[Any, ...]]]:
        for offset, length, _rows in self.blocks:
            self.file.seek(offset)
            # Unpickling is safe here: the file is our own, written by _write above.
            yield pickle.loads(self.file.read(length))

    def close(self) -> None:
        self.file.close()
