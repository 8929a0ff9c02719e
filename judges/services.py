"""Writes for judges and their immutable versions (runs live in `judges/runs.py`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

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
from .verdict_write import gc_paused, use_copy_default, verdict_rows_upsert

MAX_NAME_CHARS = 200
# Up to this many verdicts, an upsert reads the existing verdicts of its subjects only.
SUBJECT_FILTER_MAX = 20_000


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
class ImportedSample:
    """One judge call brought in from elsewhere: its presentation order ("" for a single
    output, "ab"/"ba"), sample index, canonical value ("" = unparseable) and the judge's
    probability in canonical terms: P(pass) where the criterion has a pass reading, P(A
    better) for a comparison, P(the given label) for a categorical criterion."""

    order: str
    sample: int
    value: str
    probability: float | None = None
    rationale: str = ""


@dataclass(frozen=True)
class VerdictImport:
    """One imported verdict: canonical value per presentation order ("" for single outputs,
    "ab"/"ba" for a comparison: which output the judge saw first, in canonical terms).

    ``samples`` (when given) are the judge's calls; ``orders`` is then derived from them and
    the samples combine by the judge-run rules (`judges.aggregation`): see
    `verdict_import_fields`."""

    criterion: Criterion
    orders: Mapping[str, str] = field(default_factory=dict)
    continuous: bool = False
    samples: tuple[ImportedSample, ...] = ()


@dataclass
class VerdictBulkCounts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def _pass_probability(crit: Criterion, value: str, p: float | None) -> float | None:
    """A categorical sample's P(the given label) as P(pass): p for a pass label, 1 - p for a
    fail label. Exact for two labels; with more, a lower bound on the judge's confidence in
    its pass/fail reading (docs/import-ratings.md). Other scales: p is already P(pass)."""
    if p is None or crit.scale != Criterion.Scale.CATEGORICAL:
        return p
    labels = [str(v) for v in (crit.pass_labels or [])]
    if not labels:
        return None
    return p if value in labels else 1.0 - p


def _one_call(crit: Criterion, one: ImportedSample) -> bool:
    """One call on one output with a value (the common case of a push): its fields are the
    call's value and probability as given (`_one_call_fields`)."""
    return not one.order and one.value != "" and crit.scale != Criterion.Scale.CATEGORICAL


def _one_call_fields(crit: Criterion, one: ImportedSample,
                     value_nums: dict[tuple[int, str], float | None] | None) -> dict[str, Any]:
    """The fields `_samples_combined` gives a verdict of one call on one output; the same
    fields its general path gives one sample."""
    memo_key = (crit.id, one.value)
    if value_nums is not None and memo_key in value_nums:
        fields: dict[str, Any] = {"value": one.value, "value_num": value_nums[memo_key],
                                  "details": {"imported": True}, "n_samples": 1,
                                  "is_scored": True}
    else:
        fields = verdict_import_fields(VerdictImport(criterion=crit, orders={"": one.value}))
        if value_nums is not None:
            value_nums[memo_key] = fields["value_num"]
    fields["probability"] = None
    if one.probability is None and not one.rationale and one.sample == 0:
        return fields
    # A sample index other than 0 is recorded, so that the same sample sent again replaces
    # it rather than joining it as a second sample.
    record: dict[str, Any] = {"sample": one.sample, "value": one.value,
                              "probability": one.probability}
    if one.rationale:
        record["rationale"] = one.rationale
    fields["details"] = {**fields["details"], "samples": [record]}
    if one.probability is not None:
        fields["details"]["probability_source"] = "imported"
    fields["probability"] = one.probability
    fields["rationale"] = one.rationale
    return fields


def _samples_combined(spec: VerdictImport,
                      value_nums: dict[tuple[int, str], float | None] | None = None
                      ) -> dict[str, Any]:
    """value, value_num, probability, details, n_samples of a verdict given as samples.

    `value_nums`: a memo of `verdict_import_fields`' value_num per (criterion id, value) for
    one batch, so that a million one-call verdicts check each distinct value once."""
    from .aggregation import CallView, combine_single

    crit = spec.criterion
    if len(spec.samples) == 1 and not spec.continuous and _one_call(crit, spec.samples[0]):
        return _one_call_fields(crit, spec.samples[0], value_nums)
    samples = sorted(spec.samples, key=lambda s: (s.order, s.sample))
    by_order: dict[str, list[ImportedSample]] = {}
    for s in samples:
        by_order.setdefault(s.order, []).append(s)
    orders: dict[str, str] = {}
    for order, group in by_order.items():
        scored = [s.value for s in group if s.value != ""]
        if not scored:
            orders[order] = ""
            continue
        counts: dict[str, int] = {}
        for v in scored:
            counts[v] = counts.get(v, 0) + 1
        top = max(counts.values())
        # Ties: the lowest sample index, as the judge-run rules break them.
        orders[order] = next(v for v in scored if counts[v] == top)
    simple = len(samples) == len(by_order) and all(
        s.probability is None and not s.rationale and s.sample == 0 for s in samples)
    fields = verdict_import_fields(VerdictImport(
        criterion=crit, orders=orders, continuous=spec.continuous,
    ))
    fields["probability"] = None
    if simple or not fields["is_scored"]:
        # One call per order and no probability: stored exactly as before samples existed.
        return fields
    details = dict(fields["details"])
    records: list[dict[str, Any]] = []
    for s in samples:
        rec: dict[str, Any] = {"sample": s.sample, "value": s.value or None,
                               "probability": s.probability}
        if s.order:
            rec["order"] = s.order
        if s.rationale:
            rec["rationale"] = s.rationale
        records.append(rec)
    details["samples"] = records
    scored_s = [s for s in samples if s.value != ""]
    n_scored = len(scored_s)
    prob: float | None = None
    source = ""
    if crit.scale == Criterion.Scale.PAIRWISE:
        if all(s.probability is not None for s in scored_s):
            prob = sum(float(s.probability or 0.0) for s in scored_s) / n_scored
            source = "imported"
        elif n_scored >= 2:
            num = {"A": 1.0, "B": 0.0, "tie": 0.5}
            prob = sum(num.get(s.value, 0.5) for s in scored_s) / n_scored
            source = "sample_share"
    elif spec.continuous or len(samples) == 1:
        only_one = len(samples) == 1
        if spec.continuous and not only_one:
            mean = sum(float(s.value) for s in scored_s) / n_scored
            fields["value"], fields["value_num"] = repr(mean), mean
            details["mean"] = mean
        if all(s.probability is not None for s in scored_s):
            probs = [_pass_probability(crit, s.value, s.probability) for s in scored_s]
            if all(p is not None for p in probs):
                prob = sum(float(p or 0.0) for p in probs) / n_scored
                source = "imported"
        elif n_scored >= 2 and crit.pass_threshold is not None:
            t = float(crit.pass_threshold)
            prob = sum(float(s.value) >= t for s in scored_s) / n_scored
            source = "sample_share"
    else:
        calls = [
            CallView(
                job_id=0, sample_index=s.sample, order="",
                status="done" if s.value != "" else "unparseable", value=s.value,
                value_num=criterion_value_num(crit, s.value) if s.value != "" else None,
                probability=_pass_probability(crit, s.value, s.probability),
                rationale="", error="" if s.value != "" else "unparseable answer",
            )
            for s in samples
        ]
        combined = combine_single(
            scale=crit.scale, calls=calls, pass_threshold=crit.pass_threshold,
            pass_labels=[str(v) for v in (crit.pass_labels or [])],
        )
        fields["value"], fields["value_num"] = combined.value, combined.value_num
        for k in ("mean", "tie_break", "unscored_samples"):
            if k in combined.details:
                details[k] = combined.details[k]
        prob = combined.probability
        source = str(combined.details.get("probability_source", ""))
        if source == "logprobs":
            source = "imported"
        if source == "sample_share" and n_scored < 2:
            prob, source = None, ""  # one answer is not a share
    if crit.scale == Criterion.Scale.CATEGORICAL and any(s.probability is not None
                                                         for s in samples):
        details["probability_meaning"] = "label probability -> P(pass)"
    if source:
        details["probability_source"] = source
    fields["probability"] = prob
    fields["details"] = details
    fields["n_samples"] = len(samples)
    fields["rationale"] = next((s.rationale for s in samples if s.rationale), "")
    return fields


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
    n_samples = max(1, len(orders))
    parsed = {o: v for o, v in orders.items() if v != ""}
    if len(parsed) < len(orders):
        # An empty value: the judge's answer could not be parsed (None in details.orders, the
        # shape judges.aggregation.combine_pairwise records, which the orders table reads).
        details["unparseable"] = True
        if "" not in orders:
            details["orders"] = {o: (v or None) for o, v in sorted(orders.items())}
        if not parsed:
            return {"value": "", "value_num": None, "details": details,
                    "n_samples": n_samples, "is_scored": False}
        # A pair rated in both orders where one order parsed keeps that order's answer as the
        # verdict (docs/import-ratings.md): the import states the judge's label per order, and
        # dropping it would leave the comparison without a judge label in cells, calibration,
        # selection and PPI although the judge did answer. Whether the two orders agree is
        # unknown, so position_inconsistent is not set; the orders table still counts the
        # empty order as a miss (or a tie) from details.orders.
        orders = parsed
    if "" in orders:
        value = orders[""]
    else:
        details.setdefault("orders", dict(sorted(orders.items())))
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
            "n_samples": n_samples, "is_scored": True}


def _finite(raw: str) -> float | None:
    try:
        num = float(raw)
    except (TypeError, ValueError):
        return None
    return num if math.isfinite(num) else None


def _of_subjects(versions: Any, crits: Any, outs: list[int], comps: list[int]) -> Any:
    """The verdicts of judge versions `versions` on criteria `crits` for the given outputs and
    comparisons (model instances). On PostgreSQL, for one kind of subject, the query is driven
    from the ids (a LATERAL lookup per id in the (judge version, criterion, subject) index),
    so a batch costs the same however many verdicts the table holds and whatever the
    planner's statistics say about a table that was just bulk-loaded."""
    qs = Verdict.objects.filter(judge_version_id__in=list(versions), criterion_id__in=list(crits))
    if outs and comps:
        return qs.filter(Q(output_id__in=outs) | Q(comparison_id__in=comps))
    column, ids = ("comparison_id", comps) if comps else ("output_id", outs)
    if connection.vendor != "postgresql":
        return qs.filter(**{f"{column}__in": ids})
    table = Verdict._meta.db_table
    return Verdict.objects.raw(
        f'SELECT v.* FROM unnest(%s::bigint[]) AS u(sid) CROSS JOIN LATERAL '
        f'(SELECT * FROM "{table}" w WHERE w."{column}" = u.sid '
        f'AND w."judge_version_id" = ANY(%s::bigint[]) '
        f'AND w."criterion_id" = ANY(%s::bigint[])) AS v',
        [ids, list(versions), list(crits)],
    )


def verdicts_import_bulk(
    *, verdicts: Mapping[tuple[int, int, str, int], VerdictImport], rationale: str = "",
    use_copy: bool | None = None,
) -> VerdictBulkCounts:
    """Upsert imported verdicts keyed by (judge version, criterion, subject kind, subject id).

    Every verdict is checked by `verdict_import_fields` before anything is written (the writes
    follow the loop that checks them); then `judges.verdict_write.verdict_rows_upsert` writes
    them: new ones created, changed ones updated, equal ones counted. One transaction.
    `use_copy` (default: on PostgreSQL) picks the COPY-and-merge writer; False the ORM one
    (SQLite, and the tests that hold the two to the same answers).
    """
    if not verdicts:
        return VerdictBulkCounts()
    if use_copy is None:
        use_copy = use_copy_default()
    with gc_paused(), transaction.atomic():
        rows: dict[tuple[int, int, str, int], dict[str, Any]] = {}
        value_nums: dict[tuple[int, str], float | None] = {}
        for key, spec in verdicts.items():
            if spec.samples:
                rows[key] = _samples_combined(spec, value_nums)
            else:
                rows[key] = {**verdict_import_fields(spec), "probability": None,
                             "rationale": rationale}
        # Every verdict is combined and checked before the first write.
        written = verdict_rows_upsert(
            rows, rationale=rationale, use_copy=use_copy,
            stored=None if use_copy else _stored_of(verdicts),
        )
    return VerdictBulkCounts(written.created, written.updated, written.unchanged)


def _stored_of(keys: Mapping[tuple[int, int, str, int], Any]) -> Any:
    """The stored verdicts the ORM writer compares `keys` with."""
    versions = {k[0] for k in keys}
    crits = {k[1] for k in keys}
    if len(keys) <= SUBJECT_FILTER_MAX:
        # A batch (the push endpoint): read only its subjects' verdicts, so that the cost of a
        # batch does not grow with everything the judge version has already.
        return _of_subjects(versions, crits, [k[3] for k in keys if k[2] == "output"],
                            [k[3] for k in keys if k[2] != "output"])
    return Verdict.objects.filter(judge_version_id__in=versions, criterion_id__in=crits)


# --- Verdicts pushed by judges run elsewhere (POST /api/studies/<slug>/verdicts/bulk) ---------

MAX_PUSH_VERDICTS = 10_000
_PUSH_FIELDS = frozenset({"criterion", "item", "candidate", "candidate_a", "candidate_b",
                          "value", "probability", "sample", "order", "rationale"})


def verdict_probability_problem(
    criterion: Any, value: str, probability: float | None
) -> str | None:
    """Why a judge's probability contradicts its value (None when it does not).

    The probability is P(pass) where the criterion has a pass reading (binary; ordinal and
    interval with a pass threshold), P(output_a better) on a pairwise criterion, P(the given
    label) on a categorical one. A value on one side of 0.5 with a probability strictly on
    the other side is refused: one of the two is misread (docs/import-ratings.md)."""
    p = probability
    if p is None or value == "":
        return None
    scale = criterion.scale
    if scale == "pairwise":
        if value == "A" and p < 0.5:
            return (f"{p:g} is P(A better) but the value is A (a judge preferring B with "
                    "confidence c gives 1 - c)")
        if value == "B" and p > 0.5:
            return (f"{p:g} is P(A better) but the value is B: a judge preferring B with "
                    f"confidence {p:g} gives {1 - p:g}")
        return None
    if scale == "categorical":
        return None
    from studies.criteria import criterion_has_pass_reading

    if not criterion_has_pass_reading(criterion):
        return (f"criterion '{criterion.key}' has no pass/fail reading, so a probability "
                "(P(pass)) has no meaning here: set its pass threshold, or leave it out")
    passed = value == "pass" if scale == "binary" else (
        float(value) >= float(criterion.pass_threshold))
    if passed and p < 0.5:
        return f"{p:g} is P(pass) but the value {value!r} passes"
    if not passed and p > 0.5:
        return f"{p:g} is P(pass) but the value {value!r} fails"
    return None


@dataclass(frozen=True)
class PushOutcome:
    version: JudgeVersion
    version_created: bool
    counts: VerdictBulkCounts


def _stored_samples(v: Verdict) -> list[ImportedSample]:
    """The calls a stored verdict was combined from (in canonical terms)."""
    recs = v.details.get("samples") if isinstance(v.details, dict) else None
    if isinstance(recs, list) and recs and all("sample" in r for r in recs):
        return [ImportedSample(order=str(r.get("order") or ""), sample=int(r["sample"]),
                               value=str(r.get("value") or ""),
                               probability=r.get("probability"),
                               rationale=str(r.get("rationale") or ""))
                for r in recs]
    orders = v.details.get("orders") if isinstance(v.details, dict) else None
    if isinstance(orders, dict) and orders:
        return [ImportedSample(order=o, sample=0, value=str(val or ""))
                for o, val in orders.items()]
    return [ImportedSample(order="", sample=0, value=v.value, probability=v.probability,
                           rationale=v.rationale)]


def _push_judge_version(*, study: Study, judge_ref: Any, problems: Problems,
                        created_by: Any) -> tuple[JudgeVersion | None, bool]:
    if not isinstance(judge_ref, Mapping):
        problems.add("judge", "required: an object {name, config_hash, external}")
        return None, False
    unknown = sorted(set(judge_ref) - {"name", "config_hash", "external", "model_family",
                                       "config"})
    for k in unknown:
        problems.add(f"judge.{k}", "unknown field")
    name = judge_ref.get("name")
    digest = judge_ref.get("config_hash")
    external = judge_ref.get("external", False)
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        problems.add("judge.name", f"a non-empty string of at most {MAX_NAME_CHARS} characters")
    if not isinstance(digest, str) or not digest.strip() or len(digest) > 64:
        problems.add("judge.config_hash", "a non-empty string of at most 64 characters (the "
                                          "hash of the judge's configuration)")
    if not isinstance(external, bool):
        problems.add("judge.external", "true or false")
    config = judge_ref.get("config", {})
    if not isinstance(config, Mapping):
        problems.add("judge.config", "a JSON object (the judge's configuration, kept as given)")
    family = judge_ref.get("model_family", "")
    if not isinstance(family, str) or len(family) > 100:
        problems.add("judge.model_family", "a string of at most 100 characters")
    if problems:
        return None, False
    judge = Judge.objects.filter(study=study, name=name).first()
    version = (JudgeVersion.objects.filter(judge=judge, content_hash=digest).first()
               if judge is not None else None)
    if version is not None:
        return version, False
    if not external:
        where = "judge" if judge is None else "version of judge"
        problems.add("judge.config_hash",
                     f"no {where} '{name}' with this config hash in study '{study.slug}': send "
                     "\"external\": true to create it on first use")
        return None, False
    if judge is not None and judge.kind != Judge.Kind.IMPORTED:
        problems.add("judge.name", f"'{name}' is an existing {judge.kind} judge whose versions "
                                   "ReviewHub runs; name the external judge differently")
        return None, False
    return None, True


def verdicts_push_bulk(*, study: Study, judge: Any, verdicts: Any,
                       created_by: Any = None, use_copy: bool | None = None) -> PushOutcome:
    """Verdicts of a judge run elsewhere, upserted by (judge version, criterion, subject, sample).

    `judge`: ``{"name", "config_hash", "external"?, "model_family"?, "config"?}`` names the
    version by judge name and config hash; an unknown one is created on first use when
    ``external`` is true (kind imported, config ``{"external": true, "config_hash", ...}``).
    Each verdict names its criterion, its subject (``item`` and ``candidate``, or ``item``,
    ``candidate_a`` and ``candidate_b`` for a comparison, the outputs ingested first), its
    ``value`` and optionally ``probability`` (meaning per scale:
    `verdict_probability_problem`), ``sample`` (index, default 0), ``order`` ("ab"/"ba",
    comparisons) and ``rationale``. A sample sent again replaces that sample; the samples of
    a subject combine by the judge-run rules. Every row is checked before anything is
    written (ValidationFailed with ``verdicts[i].field`` paths); one transaction.
    `use_copy` (default: on PostgreSQL) writes with COPY and one merge statement
    (`judges.verdict_write`); False reads and writes through the ORM (SQLite).
    """
    if use_copy is None:
        use_copy = use_copy_default()
    with gc_paused():
        return _verdicts_push_bulk(study=study, judge=judge, verdicts=verdicts,
                                   created_by=created_by, use_copy=use_copy)


def _verdicts_push_bulk(*, study: Study, judge: Any, verdicts: Any, created_by: Any,
                        use_copy: bool) -> PushOutcome:
    from studies.imports_service import comparisons_import_bulk
    from studies.models import Candidate, RubricVersion

    problems = Problems()
    version, create = _push_judge_version(study=study, judge_ref=judge, problems=problems,
                                          created_by=created_by)
    if not isinstance(verdicts, list) or not verdicts:
        problems.add("verdicts", "a non-empty list of verdicts")
        problems.raise_if_any("The verdicts")
    assert isinstance(verdicts, list)
    if len(verdicts) > MAX_PUSH_VERDICTS:
        problems.add("verdicts", f"at most {MAX_PUSH_VERDICTS} verdicts per request, got "
                                 f"{len(verdicts)}: send them in batches")
        problems.raise_if_any("The verdicts")
    rubric = RubricVersion.objects.filter(study=study).order_by("-version").first()
    crits = {c.key: c for c in Criterion.objects.filter(rubric=rubric)} if rubric else {}
    # Only the items this request names: a batch costs the same in a study of any size.
    named = list({str(r.get("item")) for r in verdicts if isinstance(r, Mapping)})
    items, outs = _push_subjects(study.pk, named)
    cands = {n: i for n, i in Candidate.objects.filter(study=study).values_list("name", "id")}
    parsed = _push_rows_checked(verdicts, problems, crits=crits, items=items, cands=cands,
                                outs=outs)
    problems.raise_if_any("The verdicts")
    with transaction.atomic():
        if create:
            outcome = judge_imported_version_get_or_create(
                study=study, name=judge["name"], label=judge["config_hash"],
                value_type="label", model_family=judge.get("model_family", ""),
                created_by=created_by, description="Verdicts pushed by a judge run elsewhere",
            )
            version = outcome.version
            version.content_hash = judge["config_hash"]
            version.config = {"external": True, "config_hash": judge["config_hash"],
                              "config": dict(judge.get("config") or {})}
            version.save(update_fields=["content_hash", "config"])
        assert version is not None
        pairs = sorted({(s[0], s[1], s[2]) for _, _, _, s, _ in parsed if len(s) == 3})
        stored, _ = comparisons_import_bulk(study=study, pairs=pairs) if pairs else ({}, None)
        calls: dict[tuple[int, int, str, int], dict[tuple[str, int], ImportedSample]] = {}
        crit_of: dict[tuple[int, int, str, int], Criterion] = {}
        for _, crit, order, subject, smp in parsed:
            if len(subject) == 3:
                cid, reversed_ = stored[(subject[1], subject[2])]
                key = (version.pk, crit.id, "comparison", cid)
                if reversed_:
                    swap = {"A": "B", "B": "A"}
                    smp = ImportedSample(
                        order="ba" if order == "ab" else "ab", sample=smp.sample,
                        value=swap.get(smp.value, smp.value),
                        probability=None if smp.probability is None else 1 - smp.probability,
                        rationale=smp.rationale)
            else:
                key = (version.pk, crit.id, "output", subject[0])
            calls.setdefault(key, {})[(smp.order, smp.sample)] = smp
            crit_of[key] = crit
        # Samples sent earlier stay unless this request sends the same (order, sample).
        if use_copy:
            counts = _push_write_copy(calls, crit_of)
        else:
            prior = _of_subjects(
                [version.pk], {k[1] for k in calls},
                [k[3] for k in calls if k[2] == "output"],
                [k[3] for k in calls if k[2] == "comparison"],
            )
            for v in prior:
                k = (version.pk, v.criterion_id,
                     *SubjectRef.of(v.output_id, v.comparison_id).pair)
                if k in calls:
                    for old in _stored_samples(v):
                        calls[k].setdefault((old.order, old.sample), old)
            counts = verdicts_import_bulk(verdicts={
                k: VerdictImport(criterion=crit_of[k], samples=tuple(smps.values()))
                for k, smps in calls.items()
            }, use_copy=False)
    return PushOutcome(version=version, version_created=create, counts=counts)


def _push_subjects(study_id: int, names: list[str]
                   ) -> tuple[dict[str, int], dict[tuple[int, int], int]]:
    """The items of `study_id` named `names` (external id -> id) and their outputs ((item id,
    candidate id) -> output id). On PostgreSQL one statement driven from the names (an index
    probe per name, then per item), the names sent as one JSON text: psycopg builds a
    10,000-element array parameter element by element, JSON is encoded in C."""
    from studies.models import Item, Output

    items: dict[str, int]
    outs: dict[tuple[int, int], int]
    if connection.vendor != "postgresql":
        items = dict(Item.objects.filter(study_id=study_id, external_id__in=names)
                     .values_list("external_id", "id"))
        outs = {(it, ca): o for o, it, ca in Output.objects.filter(
            item_id__in=list(items.values())).values_list("id", "item_id", "candidate_id")}
        return items, outs
    items_t = connection.ops.quote_name(Item._meta.db_table)
    outs_t = connection.ops.quote_name(Output._meta.db_table)
    sql = (f"SELECT u.k, i.id, o.id, o.candidate_id "
           f"FROM jsonb_array_elements_text(%s::jsonb) AS u(k) "
           f"CROSS JOIN LATERAL (SELECT t.id FROM {items_t} t "
           f"WHERE t.study_id = %s AND t.external_id = u.k) AS i "
           f"LEFT JOIN LATERAL (SELECT p.id, p.candidate_id FROM {outs_t} p "
           f"WHERE p.item_id = i.id) AS o ON true")
    items, outs = {}, {}
    with connection.cursor() as cur:
        cur.execute(sql, [json.dumps(names), study_id])
        for name, item_id, out_id, cand_id in cur.fetchall():
            items[name] = item_id
            if out_id is not None:
                outs[(item_id, cand_id)] = out_id
    return items, outs


def _push_write_copy(
    calls: dict[tuple[int, int, str, int], dict[tuple[str, int], ImportedSample]],
    crit_of: Mapping[tuple[int, int, str, int], Criterion],
) -> VerdictBulkCounts:
    """The push's write on PostgreSQL: each subject's sent samples combined and merged in one
    statement; the few stored verdicts holding samples this request does not send again are
    held back by the merge, read, combined with the sent samples and written in a second
    merge (what the ORM path does for every verdict, read first)."""
    value_nums: dict[tuple[int, str], float | None] = {}

    def combined(keys: Any) -> dict[tuple[int, int, str, int], dict[str, Any]]:
        out: dict[tuple[int, int, str, int], dict[str, Any]] = {}
        for k in keys:
            smps, crit = calls[k], crit_of[k]
            one = next(iter(smps.values())) if len(smps) == 1 else None
            if one is not None and _one_call(crit, one):  # as _samples_combined, sooner
                out[k] = _one_call_fields(crit, one, value_nums)
            else:
                out[k] = _samples_combined(
                    VerdictImport(criterion=crit, samples=tuple(smps.values())), value_nums)
        return out

    first = verdict_rows_upsert(combined(calls), use_copy=True, sent=calls)
    counts = VerdictBulkCounts(first.created, first.updated, first.unchanged)
    if first.held:
        held = []
        for v in Verdict.objects.filter(pk__in=first.held):
            k = (v.judge_version_id, v.criterion_id,
                 *SubjectRef.of(v.output_id, v.comparison_id).pair)
            for old in _stored_samples(v):
                calls[k].setdefault((old.order, old.sample), old)
            held.append(k)
        again = verdict_rows_upsert(combined(held), use_copy=True)
        counts.created += again.created
        counts.updated += again.updated
        counts.unchanged += again.unchanged
    return counts


def _push_rows_checked(
    verdicts: list[Any], problems: Problems, *, crits: Mapping[str, Criterion],
    items: Mapping[str, int], cands: Mapping[str, int], outs: Mapping[tuple[int, int], int],
) -> list[tuple[int, Criterion, str, tuple[int, ...], ImportedSample]]:
    """Each pushed row checked against the batch's pre-resolved criteria, items, candidates
    and outputs; problems added under ``verdicts[i].field``. Returns (row index, criterion,
    order, subject, sample) of the rows that passed: (output id,) or (item id, output a id,
    output b id) for a comparison, order "ab" by default.

    The common row (known fields, a float probability, an int sample) passes each check with
    one comparison; the messages are built only for a row that fails one. Each distinct
    (criterion, value) is checked once per batch."""
    parsed: list[tuple[int, Criterion, str, tuple[int, ...], ImportedSample]] = []
    seen: dict[tuple[Any, ...], int] = {}
    value_problem: dict[tuple[int, str], str | None] = {}
    known_fields = _PUSH_FIELDS.issuperset
    pairwise_scale = Criterion.Scale.PAIRWISE
    for i, row in enumerate(verdicts):
        if not isinstance(row, Mapping):
            problems.add(f"verdicts[{i}]", "must be an object")
            continue
        start = problems.count
        if not known_fields(row):
            for k in sorted(set(row) - _PUSH_FIELDS):
                problems.add(f"verdicts[{i}].{k}", "unknown field")
        crit_key = row.get("criterion")
        crit = crits.get(crit_key) if isinstance(crit_key, str) else None
        if crit is None:
            problems.add(f"verdicts[{i}].criterion",
                         f"unknown criterion {row.get('criterion')!r} (the rubric has: "
                         f"{', '.join(sorted(crits)) or 'none'})")
        item_name = row.get("item")
        item = items.get(item_name) if isinstance(item_name, str) else None
        if item is None:
            problems.add(f"verdicts[{i}].item", f"unknown item {item_name!r}: ingest the items "
                                                "and outputs first")
        value = row.get("value")
        if not isinstance(value, str):
            problems.add(f"verdicts[{i}].value",
                         "a string (empty: the judge's answer was unparseable)")
            value = ""
        prob = row.get("probability")
        if prob is not None and not (type(prob) is float and 0.0 <= prob <= 1.0) and (
                isinstance(prob, bool) or not isinstance(prob, (int, float))
                or not math.isfinite(float(prob)) or not 0 <= prob <= 1):
            problems.add(f"verdicts[{i}].probability", f"a number in [0, 1], got {prob!r}")
            prob = None
        sample = row.get("sample", 0)
        if not (type(sample) is int and 0 <= sample <= 1_000_000):
            problems.add(f"verdicts[{i}].sample",
                         f"an integer >= 0 (the sample index), got {sample!r}")
            sample = 0
        rationale = row.get("rationale", "")
        if not isinstance(rationale, str):
            problems.add(f"verdicts[{i}].rationale", "a string")
            rationale = ""
        order = row.get("order", "")
        if crit is None or item is None or problems.count > start:
            continue
        subject: tuple[int, ...]
        if crit.scale == pairwise_scale:
            at = f"verdicts[{i}]"
            ca, cb = row.get("candidate_a"), row.get("candidate_b")
            ids = []
            for name, cand in (("candidate_a", ca), ("candidate_b", cb)):
                out = outs.get((item, cands.get(cand, -1))) if isinstance(cand, str) else None
                if out is None:
                    problems.add(f"{at}.{name}", f"no output of candidate {cand!r} for item "
                                                 f"{item_name!r}: ingest it first")
                ids.append(out)
            if order not in ("", "ab", "ba"):
                problems.add(f"{at}.order", f"'ab' or 'ba' (which output the judge saw "
                                            f"first), got {order!r}")
            if "candidate" in row:
                problems.add(f"{at}.candidate", "a comparison names candidate_a and candidate_b")
            if ids[0] is not None and ids[0] == ids[1]:
                problems.add(f"{at}.candidate_b", "a comparison needs two different outputs")
            if problems.count > start:
                continue
            subject = (item, int(ids[0] or 0), int(ids[1] or 0))
            order = order or "ab"
        else:
            cand = row.get("candidate")
            out = outs.get((item, cands.get(cand, -1))) if isinstance(cand, str) else None
            if out is None:
                problems.add(f"verdicts[{i}].candidate",
                             f"no output of candidate {cand!r} for item {item_name!r}: "
                             "ingest it first")
            if "candidate_a" in row or "candidate_b" in row or "order" in row:
                for k in ("candidate_a", "candidate_b", "order"):
                    if k in row:
                        problems.add(f"verdicts[{i}].{k}", f"only comparisons have {k}")
            if problems.count > start:
                continue
            subject = (int(out or 0),)
            order = ""
        if value != "":
            memo_key = (crit.id, value)
            if memo_key in value_problem:
                bad = value_problem[memo_key]
            else:
                try:
                    criterion_value_num(crit, value)
                    bad = None
                except ValueError as exc:
                    bad = str(exc)
                value_problem[memo_key] = bad
            if bad is not None:
                problems.add(f"verdicts[{i}].value", bad)
                continue
            if prob is not None:
                why = verdict_probability_problem(crit, value, prob)
                if why is not None:
                    problems.add(f"verdicts[{i}].probability", why)
                    continue
        dup = (crit.id, subject, order, sample)
        if dup in seen:
            problems.add(f"verdicts[{i}].sample", f"sample {sample} of this subject is also "
                                                  f"verdicts[{seen[dup]}]")
            continue
        seen[dup] = i
        parsed.append((i, crit, order, subject, ImportedSample(
            order=order, sample=sample, value=value,
            probability=None if prob is None else float(prob), rationale=rationale)))
    return parsed
