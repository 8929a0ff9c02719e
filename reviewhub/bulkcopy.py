"""Insert many rows of plain values in one go: COPY on PostgreSQL, bulk_create elsewhere.

The bulk services of the apps that own a table (annotations and verdicts imported from files)
call this, and benchmarks that seed large studies; product code outside an owning app's
services should not.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, models
from django.utils import timezone

BATCH = 5000


def bulk_insert(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    """Insert `rows` (dicts of attname -> int, float, str or None; same keys in every row).

    On PostgreSQL this streams them with COPY: building 75k model instances for bulk_create
    costs several seconds of pure Python, COPY a fraction of that. Every other concrete column
    gets its model default, so columns added later with a default keep working. JSON columns
    given in `rows` must already be JSON text on PostgreSQL (COPY writes them verbatim).
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create([model(**r) for r in rows], batch_size=BATCH)
        return
    given = list(rows[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    by_attname = {f.attname: f for f in fields}
    now = timezone.now()
    defaults: dict[str, Any] = {}
    for f in fields:
        if f.attname in given:
            continue
        column = str(f.column)
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[column] = now
        elif isinstance(f, models.JSONField):
            defaults[column] = json.dumps(f.get_default())
        else:
            defaults[column] = f.get_default()
    columns = [str(by_attname[a].column) for a in given] + list(defaults)
    tail = tuple(defaults.values())
    sql = f'COPY "{model._meta.db_table}" (' + ", ".join(f'"{c}"' for c in columns) + ") FROM STDIN"
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        for r in rows:
            copy.write_row((*r.values(), *tail))
