"""The column reader of the evidence read model: a `values_list` queryset straight into a frame
(COPY on PostgreSQL, the driver's tuples elsewhere), shared by every loader of ratings."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet


def rows_frame(rows: list[tuple[Any, ...]], names: Sequence[str]) -> pd.DataFrame:
    """Tuples as a frame, one column per name (float64 columns when there is no row)."""
    if not rows:
        return pd.DataFrame({n: pd.Series(dtype="float64") for n in names})
    cols = list(zip(*rows, strict=True))
    return pd.DataFrame({n: np.asarray(c) for n, c in zip(names, cols, strict=True)})


def values_frame(
    qs: QuerySet[Any], names: Sequence[str], text: Sequence[str] = ()
) -> pd.DataFrame:
    """The rows of a `values_list` queryset as a frame, one column per value, in query order.

    PostgreSQL: COPY of the compiled query as CSV, parsed by pandas. Integer columns come back
    as int64 and the others as float64 (NULL -> NaN). PostgreSQL prints the shortest text that
    reads back as the same double and pandas' parser reads it back exactly, so the frame holds
    the values `rows_frame` builds from the driver's tuples. Columns named in `text` are read as
    strings, taken literally (no "NA" -> NaN conversion; the columns read so are NOT NULL).
    Other databases: `rows_frame` over the tuples.
    """
    conn = connections[qs.db]
    if conn.vendor != "postgresql":
        return rows_frame(list(qs), names)
    try:
        sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    except EmptyResultSet:  # e.g. criterion_id__in=[]: the ORM would not query either
        return rows_frame([], names)
    buf = io.BytesIO()
    copy_sql = f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)"
    started = time.perf_counter()
    with conn.cursor() as cursor:
        raw = cursor.cursor  # the driver's cursor: Django's wrapper passes no COPY parameters
        if not hasattr(raw, "copy"):  # psycopg2 has no cursor.copy(); read the tuples instead
            return rows_frame(list(qs), names)
        # psycopg 3 merges the parameters client-side for COPY (it takes no bind parameters).
        with raw.copy(copy_sql, params) as copy:
            for block in copy:
                buf.write(block)
    if conn.queries_logged:
        # The driver's COPY bypasses Django's query log; record it so that query-count bounds
        # (and debug tooling) see the same statements on every backend.
        conn.queries_log.append(
            {"sql": f"{copy_sql} -- params {params!r}",
             "time": f"{time.perf_counter() - started:.3f}"}
        )
    if buf.tell() == 0:
        return rows_frame([], names)
    buf.seek(0)
    numeric = [n for n in names if n not in text]
    return pd.read_csv(
        buf,
        header=None,
        names=list(names),
        dtype={n: str for n in text},
        keep_default_na=False,
        # An unquoted empty field is NULL in PostgreSQL's CSV; text columns keep "" as "".
        na_values={n: [""] for n in numeric},
        engine="c",
    )

