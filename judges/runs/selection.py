"""Which subjects a judge run judges: the stored selection, its outputs and comparisons."""

from __future__ import annotations

import random
import secrets
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db.models import Q, QuerySet

from reviewhub.errors import ValidationFailed
from studies.models import Comparison, Output, StratumDimension, Study

from .common import JOB_BULK_BATCH

SELECTION_KINDS = ("all", "stratum", "candidate", "sample", "outputs")
# An "outputs" selection names its outputs (monitoring dispatches sampled live rows this way).
MAX_SELECTED_OUTPUTS = 50_000



def selection_normalise(*, study: Study, selection: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a selection and return the canonical form stored on the run."""
    sel = dict(selection or {"kind": "all"})
    kind = sel.get("kind", "all")
    if kind not in SELECTION_KINDS:
        raise ValidationFailed.at(
            "selection.kind", f"selection.kind must be one of {', '.join(SELECTION_KINDS)}",
        )
    if kind == "all":
        return {"kind": "all"}
    if kind == "stratum":
        dimension, label = sel.get("dimension"), sel.get("label")
        if not isinstance(dimension, str) or not isinstance(label, str) or not label:
            raise ValidationFailed.at(
                "selection", "a stratum selection needs 'dimension' and 'label' (strings)",
            )
        if not StratumDimension.objects.filter(study=study, key=dimension).exists():
            raise ValidationFailed.at(
                "selection.dimension",
                f"selection.dimension '{dimension}' is not a dimension of this study",
            )
        return {"kind": "stratum", "dimension": dimension, "label": label}
    if kind == "candidate":
        name = sel.get("candidate")
        candidate = study.candidates.filter(name=name).first() if isinstance(name, str) else None
        if candidate is None:
            raise ValidationFailed.at(
                "selection.candidate",
                f"selection.candidate '{name}' is not a candidate of this study",
            )
        return {"kind": "candidate", "candidate": candidate.name, "candidate_id": candidate.pk}
    if kind == "outputs":
        ids = sel.get("ids")
        if not isinstance(ids, list) or not ids or len(ids) > MAX_SELECTED_OUTPUTS or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise ValidationFailed.at(
                "selection.ids",
                f"an outputs selection needs 'ids': 1 to {MAX_SELECTED_OUTPUTS} output ids",
            )
        ids = sorted(set(ids))
        if Output.objects.filter(study=study, pk__in=ids).count() != len(ids):
            raise ValidationFailed.at("selection.ids", "some ids are not outputs of this study")
        return {"kind": "outputs", "ids": ids}
    n, seed = sel.get("n"), sel.get("seed")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationFailed.at("selection.n", "selection.n must be a positive integer")
    if seed is None:
        # Drawn once and stored, so that a re-run judges exactly the same sample.
        seed = secrets.randbelow(2**31)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise ValidationFailed.at("selection.seed", "selection.seed must be an integer")
    return {"kind": "sample", "n": n, "seed": seed}


def _sample_ids(ids: list[int], *, n: int, seed: int) -> list[int]:
    ids = sorted(ids)
    if n >= len(ids):
        return ids
    return sorted(random.Random(seed).sample(ids, n))


def selection_outputs(*, study: Study, selection: Mapping[str, Any],
                      errored: bool = True) -> list[int]:
    """Output ids selected (sorted), for single-output criteria. `errored=False` leaves out
    outputs whose generation call errored: their text is empty or only what a cut stream
    delivered, not an answer a model judge should grade (a programmatic check still sees
    them, to fail them as errored)."""
    qs = Output.objects.filter(study=study)
    if not errored:
        qs = qs.filter(error="")
    kind = selection["kind"]
    if kind == "stratum":
        qs = qs.filter(**{f"item__strata__{selection['dimension']}": selection["label"]})
    elif kind == "candidate":
        qs = qs.filter(candidate_id=selection["candidate_id"])
    elif kind == "outputs":
        qs = qs.filter(pk__in=selection["ids"])
    ids = list(qs.order_by("id").values_list("id", flat=True))
    if kind == "sample":
        ids = _sample_ids(ids, n=selection["n"], seed=selection["seed"])
    return ids


def _item_ids_for(*, study: Study, selection: Mapping[str, Any]) -> QuerySet[Any]:
    qs = study.items.all()
    if selection["kind"] == "stratum":
        qs = qs.filter(**{f"strata__{selection['dimension']}": selection["label"]})
    elif selection["kind"] == "outputs":
        qs = qs.filter(outputs__in=selection["ids"]).distinct()
    return qs.values("id")


def comparisons_ensure(*, study: Study, selection: Mapping[str, Any]) -> int:
    """Create canonical comparisons when the selected items have none; return how many.

    Canonical order: output_a belongs to the candidate with the lower id. Every unordered pair
    of candidates' outputs on an item becomes one comparison.
    """
    items = _item_ids_for(study=study, selection=selection)
    if Comparison.objects.filter(study=study, item_id__in=items).exists():
        return 0
    by_item: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for out_id, item_id, cand_id in (
        Output.objects.filter(study=study, item_id__in=items)
        .order_by("item_id", "candidate_id")
        .values_list("id", "item_id", "candidate_id")
    ):
        by_item[item_id].append((cand_id, out_id))
    rows = []
    for item_id, outs in by_item.items():
        outs.sort()
        for i in range(len(outs)):
            for j in range(i + 1, len(outs)):
                rows.append(
                    Comparison(study=study, item_id=item_id, output_a_id=outs[i][1],
                               output_b_id=outs[j][1])
                )
    Comparison.objects.bulk_create(rows, batch_size=JOB_BULK_BATCH, ignore_conflicts=True)
    return len(rows)


def selection_comparisons(*, study: Study, selection: Mapping[str, Any]) -> list[int]:
    """Comparison ids selected (sorted), for pairwise criteria."""
    qs = Comparison.objects.filter(study=study)
    kind = selection["kind"]
    if kind == "stratum":
        qs = qs.filter(item_id__in=_item_ids_for(study=study, selection=selection))
    elif kind == "candidate":
        cid = selection["candidate_id"]
        qs = qs.filter(Q(output_a__candidate_id=cid) | Q(output_b__candidate_id=cid))
    ids = list(qs.order_by("id").values_list("id", flat=True))
    if kind == "sample":
        ids = _sample_ids(ids, n=selection["n"], seed=selection["seed"])
    return ids
