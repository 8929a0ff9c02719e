"""Model instances from hand-written SQL, for the few queries on every request's hot path.

Compiling a queryset costs the Django ORM 0.5-1 ms of CPU per query (building the filter tree,
resolving joins, quoting every column), more than PostgreSQL spends running a primary-key or
unique-index lookup. The annotators' next/submit loop issues a dozen such lookups per round
trip, so those few are written once as SQL and their rows turned into ordinary model instances
here. Everything else stays on the ORM.

`RowShape(Model, "t")` gives the select list of every concrete column under table alias `t`
and turns that slice of a row back into an instance the way the ORM would: the field's
database converters run (JSONField decoding, for one), `_state` says the row came from the
database, so `save(update_fields=…)` and relation caches behave as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)

Converter = Callable[[Any, Any, Any], Any]


class RowShape(Generic[M]):
    """The columns of `model` under `alias`, and the way back from a row slice to an instance."""

    def __init__(self, model: type[M], alias: str, only: Sequence[str] | None = None) -> None:
        # `only`: attnames to load (the rest are deferred, as with QuerySet.only()).
        fields = [f for f in model._meta.concrete_fields if only is None or f.attname in only]
        if only is not None and len(fields) != len(set(only)):
            raise ValueError(f"{model.__name__}: unknown columns in {sorted(only)}")
        self.model = model
        self.width = len(fields)
        self.attnames = [f.attname for f in fields]
        self.select = ", ".join(f'{alias}."{f.column}"' for f in fields)
        self._fields = fields
        self._converters: list[tuple[int, Any, list[Converter]]] | None = None

    def _converters_for(self) -> list[tuple[int, Any, list[Converter]]]:
        # Resolved on first use, not at import: the connection's vendor is only known then.
        if self._converters is None:
            out = []
            for i, f in enumerate(self._fields):
                col = f.cached_col  # the expression the ORM passes to converters
                convs = connection.ops.get_db_converters(col) + f.get_db_converters(connection)
                if convs:
                    out.append((i, col, convs))
            self._converters = out
        return self._converters

    def load(self, row: Sequence[Any], offset: int = 0) -> M:
        values = list(row[offset : offset + self.width])
        for i, field, convs in self._converters_for():
            value = values[i]
            for conv in convs:
                value = conv(value, field, connection)
            values[i] = value
        return self.model.from_db(connection.alias, self.attnames, values)

    def load_optional(self, row: Sequence[Any], offset: int = 0) -> M | None:
        """None when the slice is all NULL (the outer-joined row was missing)."""
        if all(v is None for v in row[offset : offset + self.width]):
            return None
        return self.load(row, offset)


def fetch_one(sql: str, params: Sequence[Any] | dict[str, Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """`value` as the ORM would send it for `model.name` (UUIDs as hex text on SQLite,
    datetimes adapted to the backend, and so on), for a parameter of hand-written SQL."""
    return model._meta.get_field(name).get_db_prep_value(value, connection)  # type: ignore[union-attr]
