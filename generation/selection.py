"""Which items a candidate run selects: all, named ones, or a seeded (stratified) sample."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from reviewhub.errors import ValidationFailed
from studies.models import Item, Study


def selection_items(*, study: Study, selection: Mapping[str, Any] | None) -> tuple[
        dict[str, Any], list[int]]:
    """(the normalised selection, the ids of the items it selects, in id order)."""
    sel = dict(selection or {"kind": "all"})
    kind = sel.get("kind", "all")
    items = Item.objects.filter(study=study).order_by("id")
    if kind == "all":
        return {"kind": "all"}, list(items.values_list("id", flat=True))
    if kind == "items":
        ext = sel.get("external_ids")
        if not isinstance(ext, list) or not ext or not all(isinstance(e, str) for e in ext):
            raise ValidationFailed.at("selection.external_ids",
                                      "selection.external_ids must be a non-empty list of ids.")
        found = dict(items.filter(external_id__in=ext).values_list("external_id", "id"))
        missing = [e for e in ext if e not in found]
        if missing:
            raise ValidationFailed.at("selection.external_ids",
                                      f"no item {missing[0]!r} in this study.", missing=missing)
        return {"kind": "items", "external_ids": ext}, sorted(set(found.values()))
    if kind == "sample":
        n, seed = sel.get("n"), sel.get("seed", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationFailed.at("selection.n", "selection.n must be a positive integer.")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValidationFailed.at("selection.seed", "selection.seed must be an integer.")
        dim = sel.get("stratify_by") or ""
        rows = list(items.values_list("id", "strata"))
        rng = random.Random(seed)
        if not dim:
            ids = [r[0] for r in rows]
            chosen = sorted(rng.sample(ids, min(n, len(ids))))
        else:
            if not isinstance(dim, str) or not study.dimensions.filter(key=dim).exists():
                raise ValidationFailed.at("selection.stratify_by",
                                          f"no stratum dimension {dim!r} in this study.")
            groups: dict[str, list[int]] = {}
            for item_id, strata in rows:
                groups.setdefault(str((strata or {}).get(dim, "")), []).append(item_id)
            chosen = _stratified(groups, n, rng)
        return {"kind": "sample", "n": n, "seed": seed, "stratify_by": dim}, chosen
    raise ValidationFailed.at("selection.kind",
                              "selection.kind must be one of all, items, sample.")


def _stratified(groups: Mapping[str, list[int]], n: int, rng: random.Random) -> list[int]:
    """Proportional allocation (largest remainders, at least one per stratum while n allows)."""
    total = sum(len(g) for g in groups.values())
    n = min(n, total)
    keys = sorted(groups)
    quotas = {k: n * len(groups[k]) / total for k in keys}
    alloc = {k: min(len(groups[k]), math.floor(quotas[k])) for k in keys}
    for k in sorted(keys, key=lambda k: quotas[k] - alloc[k], reverse=True):
        if sum(alloc.values()) >= n:
            break
        if alloc[k] < len(groups[k]):
            alloc[k] += 1
    chosen: list[int] = []
    for k in keys:
        chosen += rng.sample(groups[k], alloc[k])
    return sorted(chosen)


