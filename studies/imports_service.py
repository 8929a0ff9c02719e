"""Bulk writes of studies' tables for ratings imported from files (the `imports` app).

The generic ratings importer resolves a file into plain mappings and calls these. Items,
candidates and outputs are written through the ingest's writer (`studies.ingest.upsert`), so
that one piece of code writes those rows in bulk; comparisons, criteria, strata dimensions and
the inactive accounts that hold imported human labels are written here. Each call upserts by
natural key (re-importing changes nothing) and returns the ids the importer needs next plus
created/updated/unchanged counts. Callers hold the transaction that makes the whole import
all-or-nothing; each service also opens its own (nested) one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import transaction
from django.db.models import Max

from .ingest.formats import Kind
from .ingest.schema import ROW_FIELDS
from .ingest.upsert import Upserter
from .models import (
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)
from .spec import Problems, criteria_validate

BATCH = 5000


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def _import_criterion_validate(
    spec: Mapping[str, Any], problems: Problems | None = None
) -> list[dict[str, Any]]:
    # The rubric rules, with one exception a file forces: an ordinal scale read from ratings
    # has no pass threshold (the file cannot say where passing starts), so it is checked with
    # a stand-in threshold and stored without one until a lead sets it in the rubric.
    fields = dict(spec)
    stand_in = fields.get("scale") == "ordinal" and fields.get("pass_threshold") is None
    if stand_in:
        fields["pass_threshold"] = 1
    out = criteria_validate([fields], problems=problems)
    if stand_in:
        for crit in out:
            crit["pass_threshold"] = None
    return out


def criterion_import_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why a criterion the import would create is refused (the rubric rules); [] when fine."""
    problems = Problems()
    _import_criterion_validate(spec, problems)
    return [p["message"] for p in problems.items]


def criterion_unsaved(spec: Mapping[str, Any]) -> Criterion:
    """An unsaved Criterion as `criteria_import_create` would store it (for validating labels
    against a criterion that does not exist yet)."""
    [normalised] = _import_criterion_validate(spec)
    return Criterion(**normalised)


def criteria_import_create(
    *, study: Study, specs: Sequence[Mapping[str, Any]], created_by: Any = None
) -> tuple[dict[str, Criterion], RubricVersion | None]:
    """Append new criteria (validated by the rubric rules) to the study's latest rubric.

    A study without a rubric gets v1. Returns the created criteria by key and the rubric.
    """
    if not specs:
        return {}, None
    normalised = [crit for spec in specs for crit in _import_criterion_validate(spec)]
    with transaction.atomic():
        rubric = study.rubric_versions.order_by("-version").first()
        if rubric is None:
            rubric = RubricVersion.objects.create(
                study=study, version=1, created_by=created_by,
                notes="created by the ratings importer",
            )
        pos = (Criterion.objects.filter(rubric=rubric).aggregate(m=Max("position"))["m"] or 0) + 1
        out: dict[str, Criterion] = {}
        for i, fields in enumerate(normalised):
            crit = Criterion(rubric=rubric, **fields)
            crit.position = pos + i
            crit.save()
            out[crit.key] = crit
    return out, rubric


def _upsert(kind: Kind, study: Study, rows: list[tuple[Any, ...]],
            extra_fields: tuple[str, ...] = ()) -> None:
    """Write full rows (`ROW_FIELDS` order, then ``extra_fields``) through the ingest's writer,
    the one bulk writer of items, candidates and outputs."""
    if not rows:
        return
    writer = Upserter(kind=kind, study=study, use_copy=False, extra_fields=extra_fields)
    try:
        for start in range(0, len(rows), BATCH):
            writer.write(rows[start:start + BATCH])
    finally:
        writer.close()


def _item_row(ext: str, item: Item | None, input_text: str, metadata: dict[str, Any],
              strata: dict[str, Any], recorded: dict[str, Any] | None = None,
              ) -> tuple[Any, ...]:
    """An item's full row for the writer: the fields an import does not set keep their stored
    value (or the model's default for a new item)."""
    if recorded is None and item is not None:
        recorded = item.recorded_request
    return (ext, input_text,
            item.input_format if item is not None else Item.InputFormat.TEXT.value,
            item.context if item is not None else "",
            item.reference if item is not None else "",
            metadata, recorded, strata)


def items_import_bulk(
    *, study: Study, items: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, int], Counts, int]:
    """Upsert items by external id: {"input", "strata", "meta"} each; metadata and strata merge
    into what is stored. Returns (id per external id, item counts, strata dimensions created).

    Strata columns become categorical dimensions reading the same metadata key, so that a later
    recompute of the scheme gives every item the label it was imported with.
    """
    counts = Counts()
    with transaction.atomic():
        existing = {
            it.external_id: it
            for it in Item.objects.filter(study=study, external_id__in=list(items))
        }
        rows: list[tuple[Any, ...]] = []
        dims: dict[str, None] = {}
        for ext, spec in items.items():
            for dim in spec["strata"]:
                dims.setdefault(dim, None)
            meta = {**spec["meta"], **spec["strata"]}
            it = existing.get(ext)
            # The application's recorded request, when the import maps one (Langfuse, promptfoo).
            recorded = spec.get("recorded_request")
            if it is None:
                rows.append(_item_row(ext, None, spec["input"], meta, dict(spec["strata"]),
                                      recorded))
                counts.created += 1
                continue
            merged_meta = {**(it.metadata or {}), **meta}
            merged_strata = {**(it.strata or {}), **spec["strata"]}
            new_input = spec["input"] or it.input
            if merged_meta != it.metadata or merged_strata != it.strata or new_input != it.input \
                    or (recorded is not None and recorded != it.recorded_request):
                rows.append(_item_row(ext, it, new_input, merged_meta, merged_strata, recorded))
                counts.updated += 1
            else:
                counts.unchanged += 1
        _upsert("items", study, rows, extra_fields=("strata",))
        have = set(StratumDimension.objects.filter(study=study).values_list("key", flat=True))
        pos = StratumDimension.objects.filter(study=study).aggregate(m=Max("position"))["m"] or 0
        added = [d for d in dims if d not in have]
        for i, dim in enumerate(added):
            StratumDimension.objects.create(
                study=study, key=dim, name=dim, kind="categorical", source=f"metadata.{dim}",
                config={}, position=pos + 1 + i,
            )
        ids = dict(
            Item.objects.filter(study=study, external_id__in=list(items)).values_list(
                "external_id", "id"
            )
        )
    return ids, counts, len(added)


def _candidate_row(name: str, cand: Candidate | None, family: str) -> tuple[Any, ...]:
    """A candidate's full row for the writer (model id = name for a new one)."""
    if cand is None:
        return (name, "", name, "", family, {}, "", {})
    return (name, cand.provider, cand.model_id, cand.model_version, family, cand.parameters,
            cand.notes, cand.public_scores)


def candidates_import_bulk(
    *, study: Study, names: Iterable[str], families: Mapping[str, str]
) -> tuple[dict[str, int], Counts]:
    """Candidates by name (model id = name); a given family updates an existing candidate's."""
    names = set(names)
    counts = Counts()
    with transaction.atomic():
        existing = {c.name: c for c in Candidate.objects.filter(study=study, name__in=names)}
        rows = [_candidate_row(n, None, families.get(n, "")) for n in sorted(names)
                if n not in existing]
        counts.created = len(rows)
        for name, cand in existing.items():
            fam = families.get(name)
            if fam and cand.model_family != fam:
                rows.append(_candidate_row(name, cand, fam))
                counts.updated += 1
        _upsert("candidates", study, rows)
        ids = dict(
            Candidate.objects.filter(study=study, name__in=names).values_list("name", "id")
        )
    return ids, counts


def _output_row(out: Output, **changes: Any) -> tuple[Any, ...]:
    """An output's full row for the writer (`ROW_FIELDS["outputs"]` order), with ``changes``."""
    return tuple(changes[name] if name in changes else getattr(out, name)
                 for name in ROW_FIELDS["outputs"])


def outputs_import_bulk(
    *, study: Study, outputs: Mapping[tuple[int, int], Mapping[str, str]]
) -> tuple[dict[tuple[int, int], int], Counts]:
    """Outputs by (item id, candidate id): {"text", "output_id"} (the file's output id, kept in
    metadata). A non-empty text replaces the stored one. Returns the id per key and counts."""
    counts = Counts()
    item_ids = {k[0] for k in outputs}
    cand_ids = {k[1] for k in outputs}
    with transaction.atomic():
        existing: dict[tuple[int, int], Output] = {
            (o.item_id, o.candidate_id): o
            for o in Output.objects.filter(
                study=study, item_id__in=item_ids, candidate_id__in=cand_ids
            )
        }
        rows: list[tuple[Any, ...]] = []
        for key, spec in outputs.items():
            out = existing.get(key)
            if out is None:
                # A new output: the model's defaults, as Output(...) has them.
                rows.append(_output_row(
                    Output(study=study, item_id=key[0], candidate_id=key[1]),
                    text=spec["text"], metadata={"import_output_id": spec["output_id"]}))
                counts.created += 1
            elif spec["text"] and out.text != spec["text"]:
                rows.append(_output_row(out, text=spec["text"]))
                counts.updated += 1
        _upsert("outputs", study, rows)
        ids = {
            (i, c): oid
            for oid, i, c in Output.objects.filter(
                study=study, item_id__in=item_ids, candidate_id__in=cand_ids
            ).values_list("id", "item_id", "candidate_id")
        }
    return {k: ids[k] for k in outputs}, counts


MEASUREMENT_FIELDS = ("latency_ms", "tokens_in", "tokens_out", "cost", "error")


def outputs_measurements_import(
    *, study: Study, measurements: Mapping[tuple[str, str], Mapping[str, Any]]
) -> int:
    """Set what a peer tool measured of outputs already imported, keyed by (item external id,
    candidate name): `latency_ms`, `tokens_in`, `tokens_out`, `cost` (numbers >= 0; a negative
    or non-finite one is refused) and `error` (text). Fields left out are left alone. Returns
    how many outputs changed; re-importing the same values changes none."""
    problems = Problems()
    for (item, cand), spec in measurements.items():
        for key, value in spec.items():
            if key not in MEASUREMENT_FIELDS:
                problems.add(key, f"output of item '{item}' / candidate '{cand}': unknown field")
            elif key == "error":
                if not isinstance(value, str):
                    problems.add(key, f"output of item '{item}' / candidate '{cand}': not text")
            elif (isinstance(value, bool) or not isinstance(value, (int, float))
                  or value != value or value < 0 or value == float("inf")
                  or (key.startswith("tokens") and (int(value) != value or value > 2**31 - 1))):
                problems.add(key, f"output of item '{item}' / candidate '{cand}': "
                             f"must be a finite number >= 0{' (whole)' if 'tokens' in key else ''}"
                             f", got {value!r}")
    problems.raise_if_any("The output measurements")
    if not measurements:
        return 0
    with transaction.atomic():
        by_key = {
            (o.item.external_id, o.candidate.name): o
            for o in Output.objects.filter(
                study=study,
                item__external_id__in={k[0] for k in measurements},
                candidate__name__in={k[1] for k in measurements},
            ).select_related("item", "candidate")
        }
        rows: list[tuple[Any, ...]] = []
        for out_key, spec in measurements.items():
            out = by_key.get(out_key)
            if out is None:
                continue
            values = {name: int(value) if name.startswith("tokens") else value
                      for name, value in spec.items()}
            if any(getattr(out, name) != value for name, value in values.items()):
                rows.append(_output_row(out, **values))
        _upsert("outputs", study, rows)
    return len(rows)


def comparisons_import_bulk(
    *, study: Study, pairs: Sequence[tuple[int, int, int]]
) -> tuple[dict[tuple[int, int], tuple[int, bool]], Counts]:
    """Comparisons for (item id, output a id, output b id) triples; a pair stored the other way
    round is the same comparison. Returns, per (a, b) as given, the comparison id and whether
    it is stored reversed (b, a)."""
    counts = Counts()
    if not pairs:
        return {}, counts
    out_ids = {o for _, a, b in pairs for o in (a, b)}

    def stored() -> dict[tuple[int, int], int]:
        return {
            (a, b): cid
            for cid, a, b in Comparison.objects.filter(
                study=study, output_a_id__in=out_ids
            ).values_list("id", "output_a_id", "output_b_id")
        }

    with transaction.atomic():
        existing = stored()
        new: list[Comparison] = []
        planned: set[tuple[int, int]] = set()
        for item_id, a, b in pairs:
            if {(a, b), (b, a)} & (set(existing) | planned):
                continue
            planned.add((a, b))
            new.append(Comparison(study=study, item_id=item_id, output_a_id=a, output_b_id=b))
        Comparison.objects.bulk_create(new, batch_size=BATCH)
        counts.created = len(new)
        existing = stored()
    result: dict[tuple[int, int], tuple[int, bool]] = {}
    for _, a, b in pairs:
        result[(a, b)] = (existing[(a, b)], False) if (a, b) in existing else (
            existing[(b, a)], True)
    return result, counts


def importer_username(study: Study, rater_id: str) -> str:
    """The username of the inactive account that holds an imported human rater's labels."""
    name = f"{study.slug}:{rater_id}"
    if len(name) <= 150:
        return name
    digest = hashlib.sha256(rater_id.encode()).hexdigest()[:16]
    return f"{study.slug}:{rater_id[: 150 - len(study.slug) - 18]}~{digest}"


def annotator_accounts_import(
    *, study: Study, rater_ids: Sequence[str]
) -> tuple[dict[str, int], int, int]:
    """Inactive accounts (no usable password) with annotator membership for imported raters.

    Returns (user id per rater id, users created, memberships created).
    """
    User = get_user_model()
    names = {r: importer_username(study, r) for r in rater_ids}
    with transaction.atomic():
        existing = set(
            User.objects.filter(username__in=list(names.values())).values_list(
                "username", flat=True
            )
        )
        unusable = make_password(None)
        new = [User(username=names[r], is_active=False, password=unusable)
               for r in rater_ids if names[r] not in existing]
        User.objects.bulk_create(new, batch_size=BATCH)
        ids = dict(
            User.objects.filter(username__in=list(names.values())).values_list("username", "id")
        )
        members = set(
            Membership.objects.filter(study=study, user_id__in=list(ids.values())).values_list(
                "user_id", flat=True
            )
        )
        new_members = [Membership(study=study, user_id=uid, role=Membership.Role.ANNOTATOR)
                       for uid in ids.values() if uid not in members]
        Membership.objects.bulk_create(new_members, batch_size=BATCH)
    return {r: ids[names[r]] for r in rater_ids}, len(new), len(new_members)


def annotator_attributes_import(
    *, study: Study, attributes: Mapping[int, Mapping[str, str]]
) -> int:
    """Merge imported rater attributes ({"group": "expert"}) into the members' metadata.

    Keyed by user id (members of `study`, e.g. from `annotator_accounts_import`); a given key
    replaces the stored value, other stored keys stay. Returns how many memberships changed.
    """
    if not attributes:
        return 0
    with transaction.atomic():
        members = list(
            Membership.objects.select_for_update().filter(
                study=study, user_id__in=list(attributes)
            )
        )
        changed: list[Membership] = []
        for m in members:
            merged = {**(m.metadata or {}), **attributes[m.user_id]}
            if merged != (m.metadata or {}):
                m.metadata = merged
                changed.append(m)
        Membership.objects.bulk_update(changed, ["metadata"], batch_size=BATCH)
    return len(changed)
