"""Outputs made by candidate runs (generation/), written as the study's outputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ..models import Item, Output
from .recordset import finite_or_text, rows_json

GENERATED_BY = "generation"


@dataclass(frozen=True)
class GeneratedOutput:
    """What a candidate run measured for one (candidate, item): the study's ordinary output."""

    candidate_id: int
    item_id: int
    text: str
    error: str
    finish_reason: str
    latency_ms: float | None
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None
    schema_valid: bool | None
    # {"generated_by": "generation", "config_version", "config_hash", "run", "request_hash",
    #  "error_kind", "overhead_ms", "schema_violation", "concurrency"}
    metadata: dict[str, Any]


def outputs_generated_conflicts(*, candidate_id: int, item_ids: Sequence[int],
                                config_hash: str) -> int:
    """How many of these items already have an output of the candidate that another source
    made (an import, or another generation config): a run must not overwrite them."""
    # Read, not filtered in SQL: a JSON key the row lacks compares as NULL, which an
    # `exclude` on it would silently drop.
    metas = Output.objects.filter(candidate_id=candidate_id,
                                  item_id__in=list(item_ids)).values_list("metadata", flat=True)
    return sum(1 for m in metas if not (isinstance(m, dict)
                                        and m.get("generated_by") == GENERATED_BY
                                        and m.get("config_hash") == config_hash))


def outputs_record_generated(*, outs: Sequence[GeneratedOutput]) -> dict[tuple[int, int], int]:
    """Create (or refresh) the outputs a candidate run produced; {(candidate, item): id}.

    Called inside the caller's transaction, together with the conditional update that ends
    the jobs: a job ends once, so its output is written once. A few statements per chunk,
    whatever its size. An output of the same (candidate, item) from another source is left
    alone (the run refused to start over it; one that appeared since is kept) and its id
    returned unchanged.
    """
    if not outs:
        return {}

    def fields(out: GeneratedOutput) -> dict[str, Any]:
        return {"text": out.text, "error": out.error, "finish_reason": out.finish_reason[:50],
                "latency_ms": out.latency_ms, "tokens_in": out.tokens_in,
                "tokens_out": out.tokens_out, "cost": out.cost,
                "schema_valid": out.schema_valid,
                "metadata": {**out.metadata, "generated_by": GENERATED_BY}}

    if connection.vendor == "postgresql":
        return _outputs_upsert_postgres(outs)
    wanted = {(o.candidate_id, o.item_id): o for o in outs}
    cands = {o.candidate_id for o in outs}
    items = {o.item_id for o in outs}
    with transaction.atomic():
        existing = {(o.candidate_id, o.item_id): o for o in Output.objects.select_for_update()
                    .filter(candidate_id__in=cands, item_id__in=items)
                    if (o.candidate_id, o.item_id) in wanted}
        refresh = []
        for key, row in existing.items():
            meta = row.metadata or {}
            new = wanted[key]
            if (meta.get("generated_by") == GENERATED_BY
                    and meta.get("config_hash") == new.metadata.get("config_hash")):
                for name, value in fields(new).items():
                    setattr(row, name, value)
                refresh.append(row)
        if refresh:
            Output.objects.bulk_update(refresh, [*fields(outs[0]), "updated_at"])
        study_of = dict(Item.objects.filter(id__in=items).values_list("id", "study_id"))
        created = Output.objects.bulk_create([
            Output(study_id=study_of[o.item_id], candidate_id=o.candidate_id,
                   item_id=o.item_id, **fields(o))
            for key, o in wanted.items() if key not in existing])
    ids = {key: int(row.pk) for key, row in existing.items()}
    ids.update({(row.candidate_id, row.item_id): int(row.pk) for row in created})
    return ids


# One INSERT … ON CONFLICT for a chunk of generated outputs: a drain records many outputs a
# second, and building them through the ORM (select, bulk_update's CASE per field,
# bulk_create) cost more CPU than the calls it records. An existing row is refreshed only if
# the same generation config made it (the WHERE of DO UPDATE); other rows are left alone
# and their ids read afterwards.
_OUTPUT_UPSERT_SQL = """
INSERT INTO {output} AS o (study_id, candidate_id, item_id, text, parsed_json, latency_ms,
    tokens_in, tokens_out, cost, error, finish_reason, schema_valid, metadata, created_at,
    updated_at)
SELECT i.study_id, v.candidate_id, v.item_id, v.text, NULL, v.latency_ms, v.tokens_in,
    v.tokens_out, v.cost, v.error, v.finish_reason, v.schema_valid, v.metadata::jsonb,
    %(now)s, %(now)s
FROM json_to_recordset(%(rows)s::json) AS v(candidate_id bigint, item_id bigint, text text,
    latency_ms double precision, tokens_in integer, tokens_out integer, cost double precision,
    error text, finish_reason varchar, schema_valid boolean, metadata json)
JOIN {item} i ON i.id = v.item_id
ON CONFLICT (candidate_id, item_id) DO UPDATE SET text = EXCLUDED.text,
    latency_ms = EXCLUDED.latency_ms, tokens_in = EXCLUDED.tokens_in,
    tokens_out = EXCLUDED.tokens_out, cost = EXCLUDED.cost, error = EXCLUDED.error,
    finish_reason = EXCLUDED.finish_reason, schema_valid = EXCLUDED.schema_valid,
    metadata = EXCLUDED.metadata, updated_at = EXCLUDED.updated_at
WHERE o.metadata->>'generated_by' = %(by)s
    AND o.metadata->>'config_hash' = EXCLUDED.metadata->>'config_hash'
RETURNING o.id, o.candidate_id, o.item_id
"""


_FLOATS = ("latency_ms", "cost")


def _outputs_upsert_postgres(outs: Sequence[GeneratedOutput]) -> dict[tuple[int, int], int]:
    # A model's answer is recorded rather than refused: `rows_json` makes it storable.
    rows = [finite_or_text({
        "candidate_id": o.candidate_id, "item_id": o.item_id, "text": o.text,
        "latency_ms": o.latency_ms, "tokens_in": o.tokens_in, "tokens_out": o.tokens_out,
        "cost": o.cost, "error": o.error, "finish_reason": o.finish_reason[:50],
        "schema_valid": o.schema_valid,
        "metadata": {**o.metadata, "generated_by": GENERATED_BY}}, _FLOATS) for o in outs]
    sql = _OUTPUT_UPSERT_SQL.format(output=Output._meta.db_table, item=Item._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"rows": rows_json(rows), "now": timezone.now(),
                             "by": GENERATED_BY})
        ids = {(c, i): int(pk) for pk, c, i in cursor.fetchall()}
    missing = [(o.candidate_id, o.item_id) for o in outs
               if (o.candidate_id, o.item_id) not in ids]
    if missing:  # rows another source made: kept as they are
        for pk, c, i in Output.objects.filter(
                candidate_id__in={m[0] for m in missing},
                item_id__in={m[1] for m in missing}).values_list("id", "candidate_id",
                                                                 "item_id"):
            if (c, i) in missing:
                ids[(c, i)] = int(pk)
    return ids
