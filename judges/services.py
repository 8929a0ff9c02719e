"""Writes for judges and their immutable versions (runs live in `judges/runs.py`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction

from reviewhub.bulkcopy import BATCH, bulk_insert
from reviewhub.errors import Conflict, Problems, ValidationFailed
from studies.criteria import criterion_value_num
from studies.models import Criterion, Study
from studies.subjects import SubjectRef

from .config import (
    JudgeNetworkPolicy,
    config_hash,
    config_simulated,
    config_validate,
    resolve_host,
)
from .models import Judge, JudgeVersion, Verdict

MAX_NAME_CHARS = 200


def judge_config_validate(config: Any, *, kind: str | None = None) -> dict[str, Any]:
    """Validate a judge config and return its canonical form (every default explicit).

    `kind` is the judge's kind ("llm" | "programmatic" | "imported"); None infers it from the
    config (a "check" field means programmatic). Raises ValidationFailed naming the field.
    """
    policy = JudgeNetworkPolicy.from_settings()
    return config_validate(
        config, kind=kind, allowed_base_urls=policy.allowed_base_urls,
        allowed_key_env=policy.key_env_allowed, reserved_key_env=policy.reserved_key_env,
        allow_private_base_urls=policy.allow_private, resolve=resolve_host,
    )


def judge_create(
    *, study: Study, name: str, kind: str, description: str = "", created_by: Any = None
) -> Judge:
    """Create a judge (no version yet). Names are unique within a study."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValidationFailed.at("name", "name is required (at most 200 characters).")
    if kind not in Judge.Kind.values:
        raise ValidationFailed.at("kind", f"kind must be one of {', '.join(Judge.Kind.values)}.")
    try:
        with transaction.atomic():
            return Judge.objects.create(study=study, name=name, kind=kind,
                                        description=description or "", created_by=created_by)
    except IntegrityError:
        raise Conflict(f"A judge named {name!r} already exists in this study.",
                       details={"field": "name"}) from None


def judge_create_with_config(
    *, study: Study, name: str, kind: str, description: str = "",
    config: Any = None, created_by: Any = None,
) -> tuple[Judge, JudgeVersion | None]:
    """Create a judge and, when a config is given, its first version, in one transaction.

    The config is validated before anything is written, so a bad one leaves no judge behind
    (the API and the judges page both create judges through this)."""
    if config is not None:
        judge_config_validate(config, kind=kind)
    with transaction.atomic():
        judge = judge_create(study=study, name=name, kind=kind, description=description,
                             created_by=created_by)
        version = judge_version_for_config(judge=judge, config=config) if config is not None \
            else None
    return judge, version


@dataclass(frozen=True)
class VersionOutcome:
    version: JudgeVersion
    created: bool


def judge_version_get_or_create(*, judge: Judge, config: Any) -> VersionOutcome:
    """The version for this config: the existing one with the same content hash, or version
    n+1. Validation and hashing happen before the transaction; the unique constraints on
    (judge, version) and (judge, content_hash) settle concurrent creators."""
    canonical = judge_config_validate(config, kind=judge.kind)
    digest = config_hash(canonical)
    family = str(canonical.get("model_family") or "")
    for _attempt in range(5):
        existing = JudgeVersion.objects.filter(judge=judge, content_hash=digest).first()
        if existing is not None:
            return VersionOutcome(existing, False)
        try:
            with transaction.atomic():
                # Lock the judge row so that concurrent creators number versions in turn.
                Judge.objects.select_for_update().filter(pk=judge.pk).first()
                last = (
                    JudgeVersion.objects.filter(judge=judge).order_by("-version")
                    .values_list("version", flat=True).first()
                )
                version = JudgeVersion.objects.create(
                    judge=judge, version=(last or 0) + 1, content_hash=digest,
                    config=canonical, model_family=family,
                    # From the validated config (part of its hash), never from a name.
                    simulated=config_simulated(canonical),
                )
            return VersionOutcome(version, True)
        except IntegrityError:
            continue  # someone else created this hash or this number first: look again
    raise Conflict("Could not create the judge version (concurrent updates); retry.")


def judge_version_for_config(*, judge: Judge, config: Any) -> JudgeVersion:
    """The contract entry point: validate, canonicalise, hash; existing or new version."""
    return judge_version_get_or_create(judge=judge, config=config).version


# --- Imported judges and verdicts (the `imports` app writes through these) -------------------


def _imported_version_hash(label: str, value_type: str, simulated: bool = False) -> str:
    # Imported versions are identified by the file's version label and value type only (not by
    # their config), so that a later model-family mapping updates the same version; a
    # simulated source is another version (the flag versions, as in a config's hash), and
    # adds to the hash only when set, so the hashes of real imports stay what they were.
    fields: dict[str, Any] = {"imported_label": label, "value_type": value_type}
    if simulated:
        fields["simulated"] = True
    canon = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()


@dataclass(frozen=True)
class ImportedVersionOutcome:
    version: JudgeVersion
    judge_created: bool
    version_created: bool


def judge_imported_version_get_or_create(
    *,
    study: Study,
    name: str,
    label: str,
    value_type: str,
    model_family: str = "",
    created_by: Any = None,
    description: str = "Ratings imported from a file",
    simulated: bool = False,
    config: Any = None,
) -> ImportedVersionOutcome:
    """The imported judge `name` (created with `judge_create`'s rules) and its version `label`.

    Refuses (ValidationFailed, field rater_id) a name that belongs to a judge of another kind:
    imported ratings never mix with a runnable judge's verdicts. A non-empty `model_family`
    updates an existing version's family. `config` is the imported judge's config
    (`judges.config.imported_config_validate`: source, description, model, model_family, and
    `simulated: true` when the verdicts are simulated — the demo seed's path); it is validated
    before anything is written and stored on the version. `simulated=True` is the same as
    `simulated: true` in the config. Every report then stamps the version simulated.
    """
    if value_type not in ("label", "continuous"):
        raise ValidationFailed.at(
            "value_type", f"value_type must be 'label' or 'continuous', got {value_type!r}.",
        )
    described = judge_config_validate(dict(config or {}), kind=Judge.Kind.IMPORTED)
    simulated = bool(simulated) or config_simulated(described)
    if simulated:
        described["simulated"] = True
    judge = Judge.objects.filter(study=study, name=name).first()
    judge_created = False
    if judge is None:
        judge = judge_create(
            study=study, name=name, kind=Judge.Kind.IMPORTED,
            description=description, created_by=created_by,
        )
        judge_created = True
    elif judge.kind != Judge.Kind.IMPORTED:
        problems = Problems()
        problems.add("rater_id", f"'{name}' is an existing {judge.kind} judge; imported ratings "
                                 "need their own judge name")
        raise problems.error("The ratings")
    digest = _imported_version_hash(label, value_type, simulated)
    with transaction.atomic():
        # Lock the judge row so that concurrent importers number versions in turn.
        Judge.objects.select_for_update().filter(pk=judge.pk).first()
        version = JudgeVersion.objects.filter(judge=judge, content_hash=digest).first()
        if version is not None:
            changed = []
            if model_family and version.model_family != model_family:
                version.model_family = model_family
                changed.append("model_family")
            if simulated and not version.simulated:
                version.simulated = True
                changed.append("simulated")
            if changed:
                version.save(update_fields=changed)
            return ImportedVersionOutcome(version, judge_created, False)
        last = (
            JudgeVersion.objects.filter(judge=judge).order_by("-version")
            .values_list("version", flat=True).first()
        )
        version = JudgeVersion.objects.create(
            judge=judge, version=(last or 0) + 1, content_hash=digest, model_family=model_family,
            config={**described, "imported": True, "label": label, "value_type": value_type},
            simulated=simulated,
        )
    return ImportedVersionOutcome(version, judge_created, True)


@dataclass(frozen=True)
class VerdictImport:
    """One imported verdict: canonical value per presentation order ("" for single outputs,
    "ab"/"ba" for a comparison: which output the judge saw first, in canonical terms)."""

    criterion: Criterion
    orders: Mapping[str, str]
    continuous: bool = False


@dataclass
class VerdictBulkCounts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def verdict_import_fields(spec: VerdictImport) -> dict[str, Any]:
    """value, value_num, details and n_samples of an imported verdict, by the judge-run rules.

    The value must be one the criterion defines (`criterion_value_num`, as for run verdicts);
    continuous scores only on ordinal criteria and finite. Two orders of a pair combine as in
    `judges.aggregation.combine_pairwise`: the label when they agree, a tie when they do not.
    Raises ValidationFailed naming the criterion.
    """
    crit = spec.criterion
    orders = dict(spec.orders)
    if not orders or (("" in orders) and len(orders) > 1) or not set(orders) <= {"", "ab", "ba"}:
        raise ValidationFailed.at(
            "orders", f"verdict on '{crit.key}': give one value, or one per order ab/ba.",
        )
    details: dict[str, Any] = {"imported": True}
    if spec.continuous:
        details["value_type"] = "continuous"
    if any(v == "" for v in orders.values()):
        # An empty value: the judge's answer could not be parsed. Unscored, like a run's
        # verdict whose answer was unparseable; a pair keeps the order that did parse (None
        # for the other), as judges.aggregation.combine_pairwise records it.
        details["unparseable"] = True
        if "" not in orders:
            details["orders"] = {o: (v or None) for o, v in sorted(orders.items())}
        return {"value": "", "value_num": None, "details": details,
                "n_samples": max(1, len(orders)), "is_scored": False}
    if "" in orders:
        value = orders[""]
    else:
        details["orders"] = dict(sorted(orders.items()))
        vals = list(orders.values())
        value = vals[0] if len(set(vals)) == 1 else "tie"
        if len(vals) == 2:
            details["position_inconsistent"] = len(set(vals)) > 1
    value_num: float | None
    if spec.continuous:
        num = _finite(value)
        if crit.scale != Criterion.Scale.ORDINAL or num is None:
            raise ValidationFailed.at(
                "value",
                f"verdict on '{crit.key}': continuous scores are finite numbers on ordinal "
                f"criteria ('{crit.key}' is {crit.scale}, value {value!r}).",
            )
        value_num = num
    else:
        for v in orders.values():
            try:
                criterion_value_num(crit, v)
            except ValueError as exc:
                raise ValidationFailed.at("value", f"verdict on '{crit.key}': {exc}") from None
        value_num = criterion_value_num(crit, value)
    return {"value": value, "value_num": value_num, "details": details,
            "n_samples": max(1, len(orders)), "is_scored": True}


def _finite(raw: str) -> float | None:
    try:
        num = float(raw)
    except (TypeError, ValueError):
        return None
    return num if math.isfinite(num) else None


def verdicts_import_bulk(
    *, verdicts: Mapping[tuple[int, int, str, int], VerdictImport], rationale: str = ""
) -> VerdictBulkCounts:
    """Upsert imported verdicts keyed by (judge version, criterion, subject kind, subject id).

    Every verdict is checked by `verdict_import_fields` before anything is written (the writes
    follow the loop that checks them); new rows go in with COPY on PostgreSQL, changed ones are
    updated, equal ones counted. One transaction.
    """
    counts = VerdictBulkCounts()
    if not verdicts:
        return counts
    versions = {k[0] for k in verdicts}
    crits = {k[1] for k in verdicts}
    postgres = connection.vendor == "postgresql"
    with transaction.atomic():
        existing: dict[tuple[int, int, str, int], Verdict] = {}
        for v in Verdict.objects.filter(
            judge_version_id__in=versions, criterion_id__in=crits
        ).only("id", "judge_version_id", "criterion_id", "output_id", "comparison_id", "value",
               "value_num", "details", "n_samples", "is_scored"):
            subj = SubjectRef.of(v.output_id, v.comparison_id).pair
            existing[(v.judge_version_id, v.criterion_id, *subj)] = v
        new: list[dict[str, Any]] = []
        changed: list[Verdict] = []
        for key, spec in verdicts.items():
            fields = verdict_import_fields(spec)
            cur = existing.get(key)
            if cur is None:
                is_output = key[2] == "output"
                new.append({
                    "judge_version_id": key[0],
                    "criterion_id": key[1],
                    "output_id": key[3] if is_output else None,
                    "comparison_id": None if is_output else key[3],
                    "source": Verdict.Source.IMPORT.value,
                    "is_scored": fields["is_scored"],
                    "value": fields["value"],
                    "value_num": fields["value_num"],
                    # COPY writes JSON text verbatim; bulk_create wants the object.
                    "details": json.dumps(fields["details"]) if postgres else fields["details"],
                    "n_samples": fields["n_samples"],
                    "rationale": rationale,
                })
            elif (cur.value, cur.details, cur.is_scored) != (
                fields["value"], fields["details"], fields["is_scored"]
            ):
                for k, val in fields.items():
                    setattr(cur, k, val)
                changed.append(cur)
            else:
                counts.unchanged += 1
        bulk_insert(Verdict, new)
        Verdict.objects.bulk_update(
            changed, ["value", "value_num", "details", "n_samples", "is_scored"], batch_size=BATCH
        )
    counts.created, counts.updated = len(new), len(changed)
    return counts
