"""The batched upsert of pass 2: the only code that writes items, candidates and outputs in
bulk, for the ingest and for the ratings importer (`studies.imports_service`).

On PostgreSQL each batch is COPYed into a temporary table and merged by one
``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` statement that also classifies the rows as
created / updated / unchanged (unchanged rows are not touched at all). Other databases use
``bulk_create(update_conflicts=True)`` after comparing the batch with the stored rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import connection, models
from django.utils import timezone

from reviewhub.errors import Conflict

from ..models import Candidate, Item, Output, Study
from .errors import IngestResult
from .formats import Kind
from .schema import ROW_FIELDS

_UNIQUE: dict[Kind, tuple[str, ...]] = {
    "items": ("study", "external_id"),
    "candidates": ("study", "name"),
    "outputs": ("candidate", "item"),
}
_MODELS: dict[Kind, type[models.Model]] = {"items": Item, "candidates": Candidate,
                                           "outputs": Output}


# --------------------------------------------------------------------------------------------
# The batched upsert
# --------------------------------------------------------------------------------------------


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def insert_select(meta: Any, given: Mapping[str, tuple[str, tuple[Any, ...]]], now: Any
                  ) -> tuple[list[str], list[str], list[Any]]:
    """The columns of an ``INSERT ... SELECT`` of new rows of `meta`'s table (every column
    but the primary key), what each is selected as, and the parameters of those selections.

    `given`: attname -> (SQL, its parameters), e.g. a staged column or a constant. Columns
    not given get the time of the write when they are auto_now(_add), else the model default,
    as an ORM insert would; listing every column keeps the SQL right when fields are added.
    """
    insert_cols: list[str] = []
    select: list[str] = []
    params: list[Any] = []
    for f in meta.concrete_fields:
        if f.primary_key:
            continue
        insert_cols.append(_qn(f.column))
        if f.attname in given:
            sql, values = given[f.attname]
        elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            sql, values = "%s", (now,)
        else:
            sql, values = "%s", (f.get_db_prep_save(f.get_default(), connection),)
        select.append(sql)
        params.extend(values)
    return insert_cols, select, params


class Upserter:
    """Upserts blocks of rows keyed by a unique constraint, counting created / updated /
    unchanged. Unchanged rows are never written, so re-sending a file writes nothing."""

    def __init__(self, *, kind: Kind, study: Study, use_copy: bool,
                 extra_fields: tuple[str, ...] = ()) -> None:
        """``extra_fields``: attnames written after the kind's `ROW_FIELDS` in every row (the
        ratings importer also writes items' strata labels, which ingest recomputes)."""
        self.model = _MODELS[kind]
        meta: Any = self.model._meta
        self.meta = meta
        self.const = {"study_id": study.pk}
        self.unique = _UNIQUE[kind]  # field names of the unique constraint (ON CONFLICT)
        # attnames, the order of every row tuple
        self.row_fields = ROW_FIELDS[kind] + tuple(extra_fields)
        keys = {meta.get_field(n).attname for n in self.unique}
        self.compare_fields = tuple(a for a in self.row_fields if a not in keys)
        by_attname = {f.attname: f for f in meta.concrete_fields}
        self.fields: list[Any] = [by_attname[a] for a in self.row_fields]
        self.json_positions = frozenset(i for i, f in enumerate(self.fields)
                                        if isinstance(f, models.JSONField))
        self.use_copy = use_copy
        self.created = self.updated = self.unchanged = 0
        self.tmp: str | None = None
        self.copy_sql = ""
        self.merge_sql = ""
        self.merge_params: list[Any] = []

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        if self.use_copy:
            self._write_copy(rows)
        else:
            self._write_orm(rows)

    def close(self) -> IngestResult:
        if self.tmp is not None:
            with connection.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {self.tmp}")
            self.tmp = None
        return IngestResult(self.created, self.updated, self.unchanged)

    # -- PostgreSQL: COPY into a temporary table, then one merge statement -------------------

    def _setup_copy(self) -> None:
        meta = self.meta
        self.tmp = _qn(f"rh_ingest_{uuid.uuid4().hex[:16]}")
        cols = ", ".join(f"{_qn(f.column)} {f.db_type(connection)}" for f in self.fields)
        with connection.cursor() as cur:
            cur.execute(f"CREATE TEMPORARY TABLE {self.tmp} ({cols}) ON COMMIT DROP")
        table = _qn(meta.db_table)
        pk = _qn(meta.pk.column)
        now = timezone.now()
        row_columns = {f.attname for f in self.fields}
        params: list[Any] = []
        where = []
        for name in self.unique:
            key_field = meta.get_field(name)
            column = _qn(key_field.column)
            if key_field.attname in row_columns:
                where.append(f"o.{column} = t.{column}")
            else:
                where.append(f"o.{column} = %s")
                params.append(self.const[key_field.attname])
        compare = [_qn(meta.get_field(self._name(a)).column) for a in self.compare_fields]
        given: dict[str, tuple[str, tuple[Any, ...]]] = {
            a: ("%s", (v,)) for a, v in self.const.items()}
        given.update((f.attname, (f"t.{_qn(f.column)}", ())) for f in self.fields)
        insert_cols, select, select_params = insert_select(meta, given, now)
        params += select_params
        # The compared columns take the staged values, and auto_now ones (not staged) the
        # time of this import.
        updates = [f"{c} = EXCLUDED.{c}" for f in meta.concrete_fields
                   if f.attname in self.compare_fields or (
                       getattr(f, "auto_now", False) and f.attname not in given)
                   for c in (_qn(f.column),)]
        unique_cols = ", ".join(_qn(meta.get_field(n).column) for n in self.unique)
        # LATERAL ... LIMIT 1 keeps the stored-row lookup an index probe per row: a plain
        # join lets the planner pick a full scan of a big table for each batch.
        self.merge_sql = f"""
            WITH src AS (
                SELECT t.*, o.rh_id AS rh_existing,
                       (o.rh_id IS NOT NULL AND
                        ROW({', '.join('o.' + c for c in compare)}) IS NOT DISTINCT FROM
                        ROW({', '.join('t.' + c for c in compare)})) AS rh_same
                FROM {self.tmp} t
                LEFT JOIN LATERAL (
                    SELECT o.{pk} AS rh_id, {', '.join('o.' + c for c in compare)}
                    FROM {table} o WHERE {' AND '.join(where)} LIMIT 1
                ) o ON true
            ), merged AS (
                INSERT INTO {table} ({', '.join(insert_cols)})
                SELECT {', '.join(select)} FROM src t WHERE NOT t.rh_same
                ON CONFLICT ({unique_cols}) DO UPDATE SET {', '.join(updates)}
                RETURNING 1
            )
            SELECT count(*) FILTER (WHERE rh_existing IS NULL),
                   count(*) FILTER (WHERE rh_existing IS NOT NULL AND NOT rh_same),
                   count(*) FILTER (WHERE rh_same),
                   (SELECT count(*) FROM merged)
            FROM src
        """
        self.merge_params = params
        self.copy_sql = (f"COPY {self.tmp} ({', '.join(_qn(f.column) for f in self.fields)}) "
                         "FROM STDIN")

    def _name(self, attname: str) -> str:
        return str(next(f.name for f in self.meta.concrete_fields if f.attname == attname))

    def _write_copy(self, rows: list[tuple[Any, ...]]) -> None:
        if self.tmp is None:
            self._setup_copy()
        with connection.cursor() as cur:
            cur.execute(f"TRUNCATE {self.tmp}")
            with cur.copy(self.copy_sql) as copy:
                write_row = copy.write_row
                for row in rows:
                    write_row(row)
            cur.execute(self.merge_sql, self.merge_params)
            created, updated, unchanged, merged = cur.fetchone()
        if merged != created + updated:
            # Another transaction wrote the same keys between our read and our write.
            raise Conflict("Rows were changed by another import while this one ran; nothing "
                           "was written. Try again.")
        self.created += created
        self.updated += updated
        self.unchanged += unchanged

    # -- other databases: compare with the stored rows, bulk_create the rest -----------------

    def _write_orm(self, rows: list[tuple[Any, ...]]) -> None:
        meta = self.meta
        positions = {a: i for i, a in enumerate(self.row_fields)}
        unique_attnames: list[str] = [meta.get_field(n).attname for n in self.unique]
        # The key columns that vary per row; the others (study_id) are constants.
        varying = [(a, positions[a]) for a in unique_attnames if a in positions]
        const = self.const
        filters: dict[str, Any] = {a: const[a] for a in unique_attnames if a not in positions}
        for attname, pos in varying:
            filters[f"{attname}__in"] = {row[pos] for row in rows}
        existing: dict[tuple[Any, ...], dict[str, Any]] = {}
        for found in self.model._default_manager.filter(**filters).values(
            *unique_attnames, *self.compare_fields
        ):
            existing[tuple(found[a] for a, _ in varying)] = found
        json_fields = {self.row_fields[i] for i in self.json_positions}
        to_write = []
        for row in rows:
            stored = existing.get(tuple(row[p] for _, p in varying))
            if stored is None:
                self.created += 1
            elif all(_same_value(stored[a], row[positions[a]], a in json_fields)
                     for a in self.compare_fields):
                self.unchanged += 1
                continue
            else:
                self.updated += 1
            to_write.append(self.model(**const, **dict(zip(self.row_fields, row, strict=True))))
        if to_write:
            self.model._default_manager.bulk_create(
                to_write,
                update_conflicts=True,
                unique_fields=list(self.unique),
                update_fields=[self._name(a) for a in self.compare_fields]
                + [f.name for f in meta.concrete_fields if getattr(f, "auto_now", False)],
            )


def _same_value(stored: Any, new: Any, is_json: bool) -> bool:
    if is_json:
        # {"a": 1} == {"a": True} in Python; compare the JSON texts instead.
        return json.dumps(stored, sort_keys=True) == json.dumps(new, sort_keys=True)
    return bool(stored == new)
