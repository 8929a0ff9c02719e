"""Writes for judges and their immutable versions (runs live in `judges/runs.py`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from reviewhub.errors import Conflict, Problems, ValidationFailed
from studies.criteria import criterion_has_pass_reading, criterion_value_num
from studies.models import Criterion, Study
from studies.strata import as_number

from .aggregation import CallView, combine_single
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


def is_one_call(crit: Criterion, one: ImportedSample) -> bool:
    """One call on one output with a value (the common case of a push): its fields are the
    call's value and probability as given (`one_call_fields`)."""
    return not one.order and one.value != "" and crit.scale != Criterion.Scale.CATEGORICAL


def one_call_fields(crit: Criterion, one: ImportedSample,
                     value_nums: dict[tuple[int, str], float | None] | None) -> dict[str, Any]:
    """The fields `samples_combined` gives a verdict of one call on one output; the same
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


def samples_combined(spec: VerdictImport,
                      value_nums: dict[tuple[int, str], float | None] | None = None
                      ) -> dict[str, Any]:
    """value, value_num, probability, details, n_samples of a verdict given as samples.

    `value_nums`: a memo of `verdict_import_fields`' value_num per (criterion id, value) for
    one batch, so that a million one-call verdicts check each distinct value once."""
    crit = spec.criterion
    if len(spec.samples) == 1 and not spec.continuous and is_one_call(crit, spec.samples[0]):
        return one_call_fields(crit, spec.samples[0], value_nums)
    samples = sorted(spec.samples, key=lambda s: (s.order, s.sample))
    orders = _orders_voted(samples)
    simple = len(samples) == len(orders) and all(
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
    prob, source = _samples_probability(spec, samples, fields, details)
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


def _orders_voted(samples: list[ImportedSample]) -> dict[str, str]:
    """Each presentation order's value by majority of its scored samples ("" when none
    parsed); ties go to the lowest sample index, as the judge-run rules break them.
    `samples` sorted by (order, sample)."""
    orders: dict[str, str] = {}
    for s in samples:
        orders.setdefault(s.order, "")
    for order in orders:
        scored = [s.value for s in samples if s.order == order and s.value != ""]
        if not scored:
            continue
        counts: dict[str, int] = {}
        for v in scored:
            counts[v] = counts.get(v, 0) + 1
        top = max(counts.values())
        orders[order] = next(v for v in scored if counts[v] == top)
    return orders


def _samples_probability(spec: VerdictImport, samples: list[ImportedSample],
                         fields: dict[str, Any], details: dict[str, Any]
                         ) -> tuple[float | None, str]:
    """The probability of a verdict combined from several samples and where it comes from
    ("imported", "sample_share", or "" for none), by scale; sets the combined value of a
    continuous or multi-sample verdict in `fields` and its details in `details`."""
    crit = spec.criterion
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
    return prob, source


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
        num = as_number(value)
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


def verdicts_of_subjects(versions: Any, crits: Any, outs: list[int], comps: list[int]) -> Any:
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
                rows[key] = samples_combined(spec, value_nums)
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
        return verdicts_of_subjects(versions, crits, [k[3] for k in keys if k[2] == "output"],
                            [k[3] for k in keys if k[2] != "output"])
    return Verdict.objects.filter(judge_version_id__in=versions, criterion_id__in=crits)


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
