"""Verdicts pushed by judges run elsewhere (`POST /api/studies/<slug>/verdicts/bulk`): the
request checked row by row, its samples combined by the judge-run rules (`judges.services`)
and written by `judges.verdict_write` in one transaction."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from reviewhub.errors import Problems
from studies.criteria import criterion_value_num
from studies.imports_service import comparisons_import_bulk
from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study
from studies.subjects import SubjectRef

from .models import Judge, JudgeVersion, Verdict
from .services import (
    MAX_NAME_CHARS,
    ImportedSample,
    VerdictBulkCounts,
    VerdictImport,
    is_one_call,
    judge_imported_version_get_or_create,
    one_call_fields,
    samples_combined,
    verdict_probability_problem,
    verdicts_import_bulk,
    verdicts_of_subjects,
)
from .verdict_write import gc_paused, use_copy_default, verdict_rows_upsert

MAX_PUSH_VERDICTS = 10_000
_PUSH_FIELDS = frozenset({"criterion", "item", "candidate", "candidate_a", "candidate_b",
                          "value", "probability", "sample", "order", "rationale"})


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
            prior = verdicts_of_subjects(
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
    # OFFSET 0 keeps each LATERAL a probe per row: without it the planner flattens them into
    # joins and, once the study's outputs are analysed, hashes all of them (a sequential scan
    # of 1,000,000 outputs for every batch of 10,000: 1.6 s against 0.3 s, EXPLAIN ANALYZE).
    sql = (f"SELECT u.k, i.id, o.id, o.candidate_id "
           f"FROM jsonb_array_elements_text(%s::jsonb) AS u(k) "
           f"CROSS JOIN LATERAL (SELECT t.id FROM {items_t} t "
           f"WHERE t.study_id = %s AND t.external_id = u.k OFFSET 0) AS i "
           f"LEFT JOIN LATERAL (SELECT p.id, p.candidate_id FROM {outs_t} p "
           f"WHERE p.item_id = i.id OFFSET 0) AS o ON true")
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
            if one is not None and is_one_call(crit, one):  # as samples_combined, sooner
                out[k] = one_call_fields(crit, one, value_nums)
            else:
                out[k] = samples_combined(
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


PushedRow = tuple[int, Criterion, str, tuple[int, ...], ImportedSample]


def _push_rows_checked(
    verdicts: list[Any], problems: Problems, *, crits: Mapping[str, Criterion],
    items: Mapping[str, int], cands: Mapping[str, int], outs: Mapping[tuple[int, int], int],
) -> list[PushedRow]:
    """Each pushed row checked against the batch's pre-resolved criteria, items, candidates
    and outputs; problems added under ``verdicts[i].field``. Returns (row index, criterion,
    order, subject, sample) of the rows that passed: (output id,) or (item id, output a id,
    output b id) for a comparison, order "ab" by default.

    The common row (known fields, a float probability, an int sample) passes each check with
    one comparison; the messages are built only for a row that fails one. Each distinct
    (criterion, value) is checked once per batch."""
    parsed: list[PushedRow] = []
    seen: dict[tuple[Any, ...], int] = {}
    value_problem: dict[tuple[int, str], str | None] = {}
    for i, row in enumerate(verdicts):
        if not isinstance(row, Mapping):
            problems.add(f"verdicts[{i}]", "must be an object")
            continue
        fields = _push_row_fields(i, row, problems, crits=crits, items=items)
        if fields is None:
            continue
        crit, item, value, prob, sample, rationale = fields
        subject_order = _push_row_subject(i, row, problems, crit=crit, item=item, cands=cands,
                                          outs=outs)
        if subject_order is None:
            continue
        subject, order = subject_order
        bad = _push_value_problem(crit, value, prob, value_problem)
        if bad is not None:
            problems.add(f"verdicts[{i}].{bad[0]}", bad[1])
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


def _push_row_fields(
    i: int, row: Mapping[str, Any], problems: Problems, *, crits: Mapping[str, Criterion],
    items: Mapping[str, int],
) -> tuple[Criterion, int, str, Any, int, str] | None:
    """Row `i`'s criterion, item id, value, probability, sample and rationale, each checked
    on its own; None (the problems added) when one fails."""
    start = problems.count
    if not _PUSH_FIELDS.issuperset(row):
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
    sample = row.get("sample", 0)
    if not (type(sample) is int and 0 <= sample <= 1_000_000):
        problems.add(f"verdicts[{i}].sample",
                     f"an integer >= 0 (the sample index), got {sample!r}")
    rationale = row.get("rationale", "")
    if not isinstance(rationale, str):
        problems.add(f"verdicts[{i}].rationale", "a string")
    if crit is None or item is None or problems.count > start:
        return None
    return crit, item, value, prob, sample, rationale


def _push_row_subject(
    i: int, row: Mapping[str, Any], problems: Problems, *, crit: Criterion, item: int,
    cands: Mapping[str, int], outs: Mapping[tuple[int, int], int],
) -> tuple[tuple[int, ...], str] | None:
    """Row `i`'s subject and presentation order: (output id,) and "" for one output, (item
    id, output a id, output b id) and "ab"/"ba" for a comparison; None (the problems added)
    when the row does not name one."""
    at = f"verdicts[{i}]"
    start = problems.count
    item_name = row.get("item")
    if crit.scale != Criterion.Scale.PAIRWISE:
        cand = row.get("candidate")
        out = outs.get((item, cands.get(cand, -1))) if isinstance(cand, str) else None
        if out is None:
            problems.add(f"{at}.candidate", f"no output of candidate {cand!r} for item "
                                            f"{item_name!r}: ingest it first")
        for k in ("candidate_a", "candidate_b", "order"):
            if k in row:
                problems.add(f"{at}.{k}", f"only comparisons have {k}")
        return None if problems.count > start else ((int(out or 0),), "")
    ids = []
    for name in ("candidate_a", "candidate_b"):
        cand = row.get(name)
        out = outs.get((item, cands.get(cand, -1))) if isinstance(cand, str) else None
        if out is None:
            problems.add(f"{at}.{name}", f"no output of candidate {cand!r} for item "
                                         f"{item_name!r}: ingest it first")
        ids.append(out)
    order = row.get("order", "")
    if order not in ("", "ab", "ba"):
        problems.add(f"{at}.order", f"'ab' or 'ba' (which output the judge saw first), got "
                                    f"{order!r}")
    if "candidate" in row:
        problems.add(f"{at}.candidate", "a comparison names candidate_a and candidate_b")
    if ids[0] is not None and ids[0] == ids[1]:
        problems.add(f"{at}.candidate_b", "a comparison needs two different outputs")
    if problems.count > start:
        return None
    return (item, int(ids[0] or 0), int(ids[1] or 0)), order or "ab"


def _push_value_problem(crit: Criterion, value: str, prob: Any,
                        value_problem: dict[tuple[int, str], str | None]
                        ) -> tuple[str, str] | None:
    """(field, message) when a row's value is not one the criterion defines or its
    probability contradicts it. `value_problem` memoises the value check per (criterion,
    value) for one batch."""
    if value == "":
        return None
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
        return "value", bad
    if prob is not None:
        why = verdict_probability_problem(crit, value, prob)
        if why is not None:
            return "probability", why
    return None
