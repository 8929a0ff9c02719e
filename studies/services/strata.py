"""Strata: the study's stratum dimensions and every item's labels, recomputed in batches."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.db.models.functions import Length

from reviewhub.errors import Conflict

from ..models import (
    AnalysisPlan,
    Item,
    StratumDimension,
    Study,
)
from ..selectors import dimensions_current
from ..spec import (
    dimensions_validate,
)
from ..strata import (
    DERIVED_SOURCES,
    DimensionAssigner,
    as_number,
    assign_strata,
    dimension_needs_quantiles,
    quantile_edges,
    source_value,
)
from ._common import _lock_study

RECOMPUTE_BATCH = 2000


def _length_annotations(sources: set[str]) -> dict[str, Any]:
    ann: dict[str, Any] = {}
    if "input_length" in sources:
        ann["input_length"] = Length("input")
    if "context_length" in sources:
        ann["context_length"] = Length("context")
    if "reference_length" in sources:
        # No reference answer means no reference length ("unknown"), not a length of 0.
        ann["reference_length"] = Case(
            When(reference="", then=Value(None)), default=Length("reference"),
            output_field=IntegerField(),
        )
    return ann


def _bulk_write_strata(rows: Sequence[tuple[int, dict[str, str]]]) -> None:
    if not rows:
        return
    if connection.vendor == "postgresql":
        # One UPDATE ... FROM (VALUES ...) per batch: several times faster than bulk_update's
        # CASE WHEN chain on 100k rows.
        import json

        table = Item._meta.db_table
        placeholders = ", ".join(["(%s, %s::jsonb)"] * len(rows))
        params: list[Any] = []
        for pk, strata in rows:
            params.extend([pk, json.dumps(strata)])
        with connection.cursor() as cursor:
            cursor.execute(
                f'UPDATE "{table}" AS t SET strata = v.strata FROM (VALUES {placeholders}) '
                "AS v(id, strata) WHERE t.id = v.id",
                params,
            )
        return
    Item.objects.bulk_update([Item(id=pk, strata=s) for pk, s in rows], ["strata"],
                             batch_size=500)


def _item_batches(
    base: Any, fields: list[str], batch_size: int, item_ids: Sequence[int] | None
) -> Iterator[list[dict[str, Any]]]:
    """Item rows in id order, `batch_size` at a time: an id keyset over the study (index
    item_study_id), or chunks of the given ids (bounded IN lists, for SQLite's variable cap)."""
    if item_ids is not None:
        ids = sorted(set(item_ids))
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            yield list(base.filter(pk__in=chunk).order_by("id").values(*fields))
        return
    last_id = 0
    while True:
        rows = list(base.filter(id__gt=last_id).order_by("id").values(*fields)[:batch_size])
        if not rows:
            return
        last_id = rows[-1]["id"]
        yield rows


def study_strata_recompute(
    *, study: Study, item_ids: Sequence[int] | None = None, batch_size: int = RECOMPUTE_BATCH
) -> int:
    """Recompute `Item.strata` for the items of the study from its current scheme.

    Returns the number of items whose labels changed (only those are written). Reads items in
    id-keyset batches with lengths computed in the database (large inputs are never loaded),
    so it runs in bounded memory on 100k items. Usable inside an outer atomic block (it then
    becomes a savepoint and commits with the caller).

    `item_ids` limits the work to those items (e.g. the rows an ingest created or updated).
    It is ignored when the scheme has quantile bins: their edges depend on every item, so a
    new item can move the labels of the others.
    """
    dims = list(study.dimensions.order_by("position", "id").values("key", "kind", "source",
                                                                    "config"))
    sources = {d["source"] for d in dims}
    lengths_needed = sources & set(DERIVED_SOURCES)
    need_metadata = any(s.startswith("metadata.") for s in sources)
    fields = ["id", "strata", *(["metadata"] if need_metadata else []), *sorted(lengths_needed)]
    base = Item.objects.filter(study=study).annotate(**_length_annotations(lengths_needed))
    if not dims and item_ids is None:
        # No scheme: only items still carrying old labels need a write.
        base = base.exclude(strata={})

    with transaction.atomic():
        quantile_dims = [d for d in dims if dimension_needs_quantiles(d)]
        edges = _quantile_edges_over(base, quantile_dims, batch_size)
        assigners = [DimensionAssigner(d, edges=edges.get(d["key"])) for d in dims]
        changed = 0
        for rows in _item_batches(base, fields, batch_size,
                                  None if quantile_dims else item_ids):
            updates: list[tuple[int, dict[str, str]]] = []
            for row in rows:
                strata = assign_strata(assigners, metadata=row.get("metadata"), lengths=row)
                if strata != row["strata"]:
                    updates.append((row["id"], strata))
            _bulk_write_strata(updates)
            changed += len(updates)
    return changed


def _quantile_edges_over(
    items: QuerySet[Item], quantile_dims: Sequence[Mapping[str, Any]], batch_size: int
) -> dict[str, list[float]]:
    """The edges of each quantile dimension over `items` (annotated with the lengths the
    dimensions read), keyed by dimension key, in one read of the items."""
    if not quantile_dims:
        return {}
    lengths = sorted({d["source"] for d in quantile_dims} & set(DERIVED_SOURCES))
    metadata = any(d["source"].startswith("metadata.") for d in quantile_dims)
    values: dict[str, list[float]] = {d["key"]: [] for d in quantile_dims}
    qfields = ["id", *(["metadata"] if metadata else []), *lengths]
    for row in items.values(*qfields).iterator(chunk_size=batch_size):
        for d in quantile_dims:
            raw = source_value(d["source"], metadata=row.get("metadata"), lengths=row)
            number = as_number(raw)
            if number is not None:
                values[d["key"]].append(number)
    return {d["key"]: quantile_edges(values[d["key"]], d["config"]["quantiles"])
            for d in quantile_dims}


def study_quantile_edges(
    study: Study, dims: Sequence[Mapping[str, Any]], *, batch_size: int = 2000
) -> dict[str, list[float]]:
    """The bin edges each quantile dimension of `dims` has over the study's items now, keyed
    by dimension key: what `study_strata_recompute` labels the items with, and what a
    deployment freezes so that live traffic is binned as the study's items are."""
    quantile_dims = [d for d in dims if dimension_needs_quantiles(d)]
    sources = {d["source"] for d in quantile_dims} & set(DERIVED_SOURCES)
    items = Item.objects.filter(study=study).annotate(**_length_annotations(sources))
    return _quantile_edges_over(items, quantile_dims, batch_size)


def _locked_plan_dimension_refs(study: Study) -> set[str]:
    refs: set[str] = set()
    for spec in AnalysisPlan.objects.filter(study=study, locked_at__isnull=False).values_list(
        "spec", flat=True
    ):
        refs.update(spec.get("strata", []) or [])
        refs.update((spec.get("deployment_mix") or {}).keys())
    return refs


def dimension_set(
    *, study: Study, dimensions: list[dict[str, Any]]
) -> tuple[list[StratumDimension], int]:
    """Validate and replace the study's strata scheme, then recompute every item's labels.

    Returns (dimensions in order, number of items whose labels changed). Removing a dimension
    that a locked analysis plan names is refused (409): the plan could no longer be reported.
    """
    normalised = dimensions_validate(dimensions)
    with transaction.atomic():
        _lock_study(study)
        new_keys = {d["key"] for d in normalised}
        missing = sorted(_locked_plan_dimension_refs(study) - new_keys)
        if missing:
            raise Conflict(
                f"A locked analysis plan uses dimension(s) {', '.join(missing)}; keep them or "
                "save a new plan version first.",
                details={"dimensions": missing},
            )
        if dimensions_current(study=study) == normalised:
            return list(study.dimensions.order_by("position", "id")), 0
        existing = {d.key: d for d in study.dimensions.all()}
        StratumDimension.objects.filter(study=study).exclude(key__in=new_keys).delete()
        out: list[StratumDimension] = []
        for position, d in enumerate(normalised):
            obj = existing.get(d["key"]) or StratumDimension(study=study, key=d["key"])
            obj.name, obj.kind, obj.source, obj.config = d["name"], d["kind"], d["source"], \
                d["config"]
            obj.position = position
            obj.save()
            out.append(obj)
        changed = study_strata_recompute(study=study)
    return out, changed
