"""Writes of the calibration app: the one writer of `CalibratedScore`."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import connection, models, transaction
from django.utils import timezone
from psycopg.copy import QueuedLibpqWriter

from reviewhub.bulkcopy import bulk_insert
from studies.subjects import subject_split

from .models import CalibratedScore
from .results import ScoreBlock, ScoreRows, strata_json

# The fields a calibrated score row may carry (attnames); `snapshot_id` and `study_id` are
# set by the writer.
ROW_FIELDS = (
    "output_id", "comparison_id", "candidate_id", "criterion_id", "criterion_key",
    "judge_version_id", "judge_version_hash", "stratum", "strata", "raw_value",
    "raw_confidence", "p_pass", "p_low", "p_high", "decision", "expected_cost", "source",
    "plan_version", "n_labels", "evidence_at",
)
# Text fields stored as "" rather than NULL.
_BLANK_TEXT = frozenset(("judge_version_hash", "stratum", "raw_value"))


def calibrated_scores_write(
    *, study_id: int, snapshot_id: int, rows: Iterable[Mapping[str, Any]]
) -> int:
    """Store a calibration snapshot's calibrated scores; returns the number of rows written.

    Atomic and idempotent: the snapshot's existing rows are deleted and the given ones
    inserted in one transaction, so a retried computation never leaves duplicates or a
    half-written snapshot. PostgreSQL streams the rows with a binary COPY (below); other
    databases get bulk_create (reviewhub/bulkcopy.py). The report lifecycle calls this
    inside the transaction that records the snapshot's result (reports/services.py), so
    rows and result appear together. `rows` may be any iterable of row mappings or a
    computation's `ScoreRows` (columns: encoded for the COPY without a Python object per
    row).
    """
    if connection.vendor != "postgresql":
        prepared = [
            {"study_id": study_id, "snapshot_id": snapshot_id,
             **{name: _field_value(name, row.get(name)) for name in ROW_FIELDS}}
            for row in rows
        ]
        with transaction.atomic():
            CalibratedScore.objects.filter(study_id=study_id, snapshot_id=snapshot_id).delete()
            bulk_insert(CalibratedScore, prepared)
        return len(prepared)
    with transaction.atomic():
        CalibratedScore.objects.filter(study_id=study_id, snapshot_id=snapshot_id).delete()
        if isinstance(rows, ScoreRows):
            return _copy_columns(study_id, snapshot_id, rows)
        return _copy_binary(study_id, snapshot_id, rows)


def _field_value(name: str, value: Any) -> Any:
    if name == "strata":
        return value if type(value) is dict else dict(value or {})
    if name in _BLANK_TEXT and value is None:
        return ""
    return value


def _copy_type(field: models.Field[Any, Any]) -> str:
    """The PostgreSQL type name psycopg dumps a column's values as ("varchar(64)" ->
    "varchar")."""
    db_type = field.db_type(connection) or "text"
    return re.sub(r"\(.*\)", "", db_type).strip()


def _encoded(data: bytes) -> bytes:
    """The JSON "dumps" of strata encoded beforehand (psycopg's Jsonb wrapper calls it)."""
    return data


def _copy_binary(study_id: int, snapshot_id: int, rows: Iterable[Mapping[str, Any]]) -> int:
    """COPY the rows in PostgreSQL's binary format; returns the number written.

    A million-row snapshot is the case this serves: psycopg's C dumpers write the binary
    values straight from the Python objects (no text formatting or parsing of floats and
    timestamps: about half the time of a text COPY of the same rows), and the strata JSON
    is encoded once per distinct dict (the rows of a cell share theirs) rather than per row.
    Columns the rows do not carry get their model default, as reviewhub/bulkcopy.py does.
    """
    from psycopg.types.json import Jsonb

    by_attname = {f.attname: f for f in CalibratedScore._meta.concrete_fields
                  if not f.primary_key}
    given = ("study_id", "snapshot_id", *ROW_FIELDS)
    now = timezone.now()
    defaults: dict[str, Any] = {}
    for attname, f in by_attname.items():
        if attname in given:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[attname] = now
        else:
            defaults[attname] = f.get_default()
    names = [*given, *defaults]
    columns = ", ".join(f'"{by_attname[a].column}"' for a in names)
    types = [_copy_type(by_attname[a]) for a in names]
    head = (study_id, snapshot_id)
    tail = tuple(defaults.values())
    every = itemgetter(*ROW_FIELDS)
    strata_at = ROW_FIELDS.index("strata")
    blank_at = [ROW_FIELDS.index(n) for n in sorted(_BLANK_TEXT)]
    # Strata JSON by the identity of its dict, holding the dict so that its id cannot be
    # reused meanwhile.
    encoded: dict[int, tuple[Any, Any]] = {}

    sql = f'COPY "{CalibratedScore._meta.db_table}" ({columns}) FROM STDIN (FORMAT BINARY)'
    count = 0
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        copy.set_types(types)
        for row in rows:
            try:
                values = list(every(row))
            except KeyError:  # a row that leaves fields out: those are NULL
                values = [row.get(name) for name in ROW_FIELDS]
            strata = values[strata_at]
            hit = encoded.get(id(strata))
            if hit is None or hit[0] is not strata:
                text = strata_json(strata)
                hit = encoded[id(strata)] = (strata, Jsonb(text.encode(), _encoded))
            values[strata_at] = hit[1]
            for i in blank_at:
                if values[i] is None:
                    values[i] = ""
            copy.write_row((*head, *values, *tail))
            count += 1
    return count


# --- columns straight to PostgreSQL's binary COPY format ---------------------------------------
#
# The format (PostgreSQL docs, "COPY", binary format): a signature, then per row a 16-bit field
# count and per field a 32-bit byte length (-1: NULL) followed by the value in the type's
# binary send format, all big-endian; a 16-bit -1 ends the data. A chunk of rows is laid out
# with numpy as a padded byte matrix, one row per row and each field in a slot as wide as its
# widest value, with a mask of the bytes each row really uses (a NULL's value, a shorter
# text's padding are masked out); the matrix's masked bytes in row-major order are then the
# rows back to back. A million rows cost a few hundred array operations instead of a million
# Python calls.

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_TRAILER = b"\xff\xff"
# Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 UTC).
_PG_EPOCH_US = 946_684_800_000_000
# Rows encoded at a time (bounds the padded matrix: a few tens of MB).
_COPY_CHUNK = 65_536
_INT = ("bigint", "integer")
_TEXT = ("varchar", "text")
_FLOAT = ("double precision",)
# The PostgreSQL types (as `_copy_type` names them) `_block_fields` encodes each column as.
_COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "study_id": _INT, "snapshot_id": _INT, "output_id": _INT, "comparison_id": _INT,
    "candidate_id": _INT, "criterion_id": _INT, "criterion_key": _TEXT,
    "judge_version_id": _INT, "judge_version_hash": _TEXT, "stratum": _TEXT,
    "strata": ("jsonb",), "raw_value": _TEXT, "raw_confidence": _FLOAT, "p_pass": _FLOAT,
    "p_low": _FLOAT, "p_high": _FLOAT, "decision": _TEXT, "expected_cost": _FLOAT,
    "source": _TEXT, "plan_version": _INT, "n_labels": _INT,
    "evidence_at": ("timestamp with time zone",),
}
_NULL = np.frombuffer(struct.pack(">i", -1), dtype=np.uint8)


@dataclass
class _Field:
    """One column of a chunk as its slot of the padded matrix: the bytes (length word
    included) and the mask of those each row uses (None: all of them)."""

    data: npt.NDArray[np.uint8]  # (n, slot width)
    used: npt.NDArray[np.bool_] | None = None


def _fixed(values: npt.NDArray[Any], dtype: str, null: npt.NDArray[np.bool_] | None) -> _Field:
    """A fixed-width column (`dtype`: big-endian numpy type); `null` rows are NULL."""
    arr = np.ascontiguousarray(values, dtype=dtype)
    n, k = arr.size, arr.dtype.itemsize
    if null is not None and n and null.all():  # a column of NULLs: 4 bytes a row, no mask
        return _Field(np.broadcast_to(_NULL, (n, 4)))
    data = np.empty((n, 4 + k), dtype=np.uint8)
    data[:, :4] = np.frombuffer(struct.pack(">i", k), dtype=np.uint8)
    data[:, 4:] = arr.view(np.uint8).reshape(n, k)
    if null is None or not null.any():
        return _Field(data)
    data[null, :4] = _NULL
    used = np.ones((n, 4 + k), dtype=bool)
    used[null, 4:] = False
    return _Field(data, used)


def _text(codes: npt.NDArray[np.intp], uniques: Sequence[bytes]) -> _Field:
    """A text (or jsonb) column: codes into the distinct values' bytes; never NULL."""
    width = 4 + max((len(u) for u in uniques), default=0)
    table = np.zeros((max(len(uniques), 1), width), dtype=np.uint8)
    mask = np.zeros((max(len(uniques), 1), width), dtype=bool)
    for i, u in enumerate(uniques):
        value = struct.pack(">i", len(u)) + u
        table[i, :len(value)] = np.frombuffer(value, dtype=np.uint8)
        mask[i, :len(value)] = True
    if len(uniques) == 1:
        return _Field(np.broadcast_to(table[0], (codes.size, width)))
    if len({len(u) for u in uniques}) == 1:  # no padding: no mask
        return _Field(table[codes])
    return _Field(table[codes], mask[codes])


def _encode(fields: Sequence[_Field], n: int) -> bytes:
    """The binary COPY rows (no signature) of one chunk of `n` rows."""
    count = np.broadcast_to(np.frombuffer(struct.pack(">h", len(fields)), dtype=np.uint8),
                            (n, 2))
    data = np.concatenate([count, *(f.data for f in fields)], axis=1)
    if all(f.used is None for f in fields):
        return data.tobytes()
    used = np.concatenate(
        [np.ones((n, 2), dtype=bool),
         *(np.ones(f.data.shape, dtype=bool) if f.used is None else f.used for f in fields)],
        axis=1,
    )
    return data[used].tobytes()


def _categories(values: npt.NDArray[Any], encode: Any) -> tuple[npt.NDArray[np.intp], list[bytes]]:
    """Codes of an object column's values and each distinct value's bytes (`encode`)."""
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.asarray(codes, dtype=np.intp), [encode(u) for u in uniques]


def _text_bytes(value: Any) -> bytes:
    return ("" if value is None else str(value)).encode()


def _block_fields(
    block: ScoreBlock, study_id: int, snapshot_id: int, rows: slice, types: Mapping[str, str],
    tail: Sequence[tuple[str, Any]],
) -> list[_Field]:
    """The chunk `rows` of a block as COPY fields, in the order of `_copy_columns`' columns."""
    s = block.subject[rows]
    n = s.size
    is_comparison, ids = subject_split(s)
    is_output = ~is_comparison

    def ints(values: npt.NDArray[np.int64], column: str,
             null: npt.NDArray[np.bool_] | None = None) -> _Field:
        dtype = ">i8" if types[column] == "bigint" else ">i4"
        return _fixed(values, dtype, null)

    def const_int(value: int | None, column: str) -> _Field:
        if value is None:
            return ints(np.zeros(n, dtype=np.int64), column, np.ones(n, dtype=bool))
        return ints(np.full(n, value, dtype=np.int64), column)

    def floats(values: npt.NDArray[np.float64], nullable: bool) -> _Field:
        return _fixed(values, ">f8", ~np.isfinite(values) if nullable else None)

    def const_text(value: str) -> _Field:
        return _text(np.zeros(n, dtype=np.intp), [value.encode()])

    jv = block.judge_version[rows]
    jv_distinct, jv_codes = np.unique(jv, return_inverse=True)
    hashes = [block.judge_hashes.get(v, "").encode() if v >= 0 else b""
              for v in jv_distinct.tolist()]
    raw_bytes = [u.encode() for u in block.raw_uniques]
    stamps = block.evidence_at[rows]
    no_stamp = np.isnat(stamps)
    micros = np.where(no_stamp, 0, stamps.astype("datetime64[us]").astype(np.int64)
                      - _PG_EPOCH_US)
    by_name: dict[str, _Field] = {
        "study_id": const_int(study_id, "study_id"),
        "snapshot_id": const_int(snapshot_id, "snapshot_id"),
        "output_id": ints(np.where(is_output, ids, 0), "output_id", ~is_output),
        "comparison_id": ints(np.where(is_output, 0, ids), "comparison_id", is_output),
        "candidate_id": ints(block.candidate[rows], "candidate_id", block.candidate[rows] < 0),
        "criterion_id": const_int(block.criterion_id, "criterion_id"),
        "criterion_key": const_text(block.criterion_key),
        "judge_version_id": ints(jv, "judge_version_id", jv < 0),
        "judge_version_hash": _text(np.asarray(jv_codes, dtype=np.intp).ravel(), hashes),
        "stratum": _text(*_categories(block.stratum[rows], _text_bytes)),
        # jsonb's binary form: a version byte (1), then the JSON text.
        "strata": _text(*_categories_by_identity(block.strata[rows])),
        "raw_value": _text(np.asarray(block.raw_codes[rows], dtype=np.intp), raw_bytes),
        "raw_confidence": floats(block.raw_confidence[rows], True),
        "p_pass": floats(block.p_pass[rows], False),
        "p_low": floats(block.p_low[rows], True),
        "p_high": floats(block.p_high[rows], True),
        "decision": _text(*_categories(block.decision[rows], _text_bytes)),
        "expected_cost": floats(block.expected_cost[rows], False),
        "source": _text(*_categories(block.source[rows], _text_bytes)),
        "plan_version": const_int(block.plan_version, "plan_version"),
        "n_labels": ints(block.n_labels[rows], "n_labels"),
        "evidence_at": _fixed(micros, ">i8", no_stamp),
    }
    for name, value in tail:
        by_name[name] = _tail_field(value, types[name], n)
    return list(by_name.values())


def _categories_by_identity(
    values: npt.NDArray[np.object_],
) -> tuple[npt.NDArray[np.intp], list[bytes]]:
    """Codes of a strata column by dict identity (the rows of a label combination share one
    dict) and each dict's jsonb bytes; equal dicts that are distinct objects encode alike."""
    ids = np.fromiter((id(v) for v in values), dtype=np.int64, count=values.size)
    first, codes = np.unique(ids, return_index=True, return_inverse=True)[1:]
    return (np.asarray(codes, dtype=np.intp).ravel(),
            [b"\x01" + strata_json(values[i]).encode() for i in first.tolist()])


def _tail_field(value: Any, pg_type: str, n: int) -> _Field:
    """A column the rows do not carry, at its default (`_copy_columns`): only an aware
    timestamp (created_at) is encoded here."""
    from datetime import UTC, datetime

    if (isinstance(value, datetime) and value.tzinfo is not None
            and pg_type == "timestamp with time zone"):
        delta = value - datetime(2000, 1, 1, tzinfo=UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return _fixed(np.full(n, micros, dtype=np.int64), ">i8", None)
    raise _Unsupported(f"no binary encoding of a {pg_type} default")


class _Unsupported(Exception):
    """A column the columnar writer cannot encode: the row-by-row COPY takes over."""


def _copy_columns(study_id: int, snapshot_id: int, scores: ScoreRows) -> int:
    """COPY a computation's column blocks (`ScoreRows`) in PostgreSQL's binary format, built
    with numpy (above); returns the number of rows written. The same rows, values and
    defaults as `_copy_binary` of the rows' dicts (tests/calibration/test_services.py)."""
    by_attname = {f.attname: f for f in CalibratedScore._meta.concrete_fields
                  if not f.primary_key}
    given = ("study_id", "snapshot_id", *ROW_FIELDS)
    now = timezone.now()
    tail: list[tuple[str, Any]] = []
    for attname, f in by_attname.items():
        if attname in given:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            tail.append((attname, now))
        else:
            tail.append((attname, f.get_default()))
    names = [*given, *(n for n, _ in tail)]
    types = {a: _copy_type(by_attname[a]) for a in names}
    try:
        for name, value in tail:
            _tail_field(value, types[name], 0)
        for name in given:
            if types[name] not in _COLUMN_TYPES[name]:
                raise _Unsupported(f"{name} is {types[name]}")
    except _Unsupported:  # a schema this encoder does not know: the row-by-row COPY
        return _copy_binary(study_id, snapshot_id, scores)
    columns = ", ".join(f'"{by_attname[a].column}"' for a in names)
    sql = f'COPY "{CalibratedScore._meta.db_table}" ({columns}) FROM STDIN (FORMAT BINARY)'
    count = 0
    # The queued writer sends each chunk from a worker thread, so numpy encodes the next
    # chunk while PostgreSQL stores this one (the server's share, rows and indexes, is the
    # larger); with the plain writer the encoding and the server's work took turns.
    with connection.cursor() as cur, cur.cursor.copy(
            sql, writer=QueuedLibpqWriter(cur.cursor)) as copy:
        copy.write(_SIGNATURE)
        for block in scores.blocks:
            for start in range(0, len(block), _COPY_CHUNK):
                rows = slice(start, min(start + _COPY_CHUNK, len(block)))
                fields = _block_fields(block, study_id, snapshot_id, rows, types, tail)
                n = rows.stop - rows.start
                copy.write(_encode(fields, n))
                count += n
        copy.write(_TRAILER)
    return count


__all__ = ["ROW_FIELDS", "calibrated_scores_write"]
