"""Combining a subject's finished calls into its verdict, and finishing a complete run."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from studies.models import Criterion
from studies.services.recordset import finite_or_text, rows_json, storable
from studies.subjects import SubjectRef
from studies.subjects import subject_field as subject_field_of

from ..aggregation import (
    RAW_EXCERPT_CHARS,
    TERMINAL_STATUSES,
    CallView,
    CombinedVerdict,
    combine_pairwise,
    combine_single,
)
from ..models import JudgeJob, JudgeRun, Verdict
from .claim import ClaimedJob
from .common import ACTIVE_JOB_STATUSES, JOB_BULK_BATCH, logger
from .record import JobOutcome, jobs_record, record_rows_json, record_update_sql

# (judge_version_id, criterion_id, "o"|"c", subject id): a plain tuple, with the subject as
# `SubjectRef.short`, because one is built per job on the recording path.
SubjectKey = tuple[int, int, str, int]


def subject_key(job: JudgeJob | ClaimedJob) -> SubjectKey:
    if job.output_id is not None:
        return (job.judge_version_id, job.criterion_id, "o", job.output_id)
    assert job.comparison_id is not None
    return (job.judge_version_id, job.criterion_id, "c", job.comparison_id)


# What aggregation reads of each job, in this order (after the subject id).
_VERDICT_JOB_COLUMNS = ("id", "run_id", "sample_index", "order", "status", "parsed_value",
                        "value_num", "probability", "rationale", "error", "raw_response")


def _call_view(row: Sequence[Any]) -> CallView:
    jid, _run_id, sample_index, order, status, value, value_num, prob, rationale, error, raw = row
    return CallView(
        job_id=jid, sample_index=sample_index, order=order, status=status, value=value,
        value_num=value_num, probability=prob, rationale=rationale, error=error,
        raw_excerpt=(raw or "")[:RAW_EXCERPT_CHARS] if status != "done" else "",
    )


def _subject_job_rows(
    version_id: int, crit_id: int, subject_field: str, sids: list[int]
) -> dict[int, list[tuple[Any, ...]]]:
    """subject id -> its jobs' `_VERDICT_JOB_COLUMNS` rows."""
    by_subject: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    if connection.vendor == "postgresql":
        cols = ", ".join(
            f"left(raw_response, {RAW_EXCERPT_CHARS})" if c == "raw_response" else f'"{c}"'
            for c in _VERDICT_JOB_COLUMNS
        )
        sql = (f"SELECT {subject_field}, {cols} FROM {JudgeJob._meta.db_table} "
               f"WHERE judge_version_id = %s AND criterion_id = %s AND {subject_field} = ANY(%s)")
        with connection.cursor() as cursor:
            cursor.execute(sql, [version_id, crit_id, sids])
            rows: Iterable[Sequence[Any]] = cursor.fetchall()
    else:
        rows = JudgeJob.objects.filter(
            judge_version_id=version_id, criterion_id=crit_id, **{f"{subject_field}__in": sids}
        ).values_list(subject_field, *_VERDICT_JOB_COLUMNS)
    for row in rows:
        by_subject[row[0]].append(tuple(row[1:]))
    return by_subject


JobRow = tuple[Any, ...]  # the `_VERDICT_JOB_COLUMNS` of one job


def job_row_for_outcome(*, outcome: JobOutcome, run_id: int, sample_index: int,
                        order: str) -> JobRow:
    """The `_VERDICT_JOB_COLUMNS` row that `jobs_record` stores for this outcome."""
    o = outcome
    return (o.job_id, run_id, sample_index, order, o.status, o.parsed_value[:200], o.value_num,
            o.probability, o.rationale, o.error, o.raw_response[:RAW_EXCERPT_CHARS])


def verdicts_build(
    *,
    subjects: Iterable[SubjectKey],
    criteria: Mapping[int, Criterion] | None = None,
    complete: Mapping[SubjectKey, Sequence[JobRow]] | None = None,
) -> int:
    """Create or refresh the verdict of every given subject whose jobs have all finished.

    Returns the number of verdicts created or changed. Safe to call twice or concurrently for
    the same subject: creation goes through the verdict unique constraints (an upsert on
    PostgreSQL, `ignore_conflicts` elsewhere), and the combined value is a pure function of
    the finished jobs, so two workers computing it agree.

    `criteria` (id -> criterion) saves the lookup when the caller has them already.
    `complete` gives, for some subjects, rows of jobs the caller has just recorded and knows
    to be ALL of the subject's jobs (the one job of a one-sample single-output subject: jobs
    are unique per version, criterion, subject, sample and order); those subjects are combined
    from these rows without reading their jobs back.
    """
    groups: dict[tuple[int, int, str], set[int]] = defaultdict(set)
    for version_id, crit_id, kind, sid in subjects:
        groups[(version_id, crit_id, kind)].add(sid)
    if not groups:
        return 0
    wanted = {crit_id for _, crit_id, _ in groups}
    known = dict(criteria or {})
    if wanted - set(known):
        known.update(Criterion.objects.in_bulk(list(wanted - set(known))))
    given = complete or {}
    changed = 0
    for (version_id, crit_id, kind), sids in groups.items():
        criterion = known[crit_id]
        subject_field = subject_field_of(kind)
        sid_list = sorted(sids)
        for start in range(0, len(sid_list), JOB_BULK_BATCH):
            chunk = sid_list[start : start + JOB_BULK_BATCH]
            rows_of = {sid: list(given[(version_id, crit_id, kind, sid)]) for sid in chunk
                       if (version_id, crit_id, kind, sid) in given}
            unknown = [sid for sid in chunk if sid not in rows_of]
            if unknown:
                rows_of.update(_subject_job_rows(version_id, crit_id, subject_field, unknown))
            combined: dict[int, tuple[CombinedVerdict, int]] = {}
            for sid, rows in rows_of.items():
                if not rows or any(r[4] not in TERMINAL_STATUSES for r in rows):
                    continue
                calls = [_call_view(r) for r in rows]
                if kind == "c":
                    verdict = combine_pairwise(calls=calls)
                else:
                    verdict = combine_single(
                        scale=criterion.scale, calls=calls,
                        pass_threshold=criterion.pass_threshold,
                        pass_labels=[str(v) for v in (criterion.pass_labels or [])],
                    )
                combined[sid] = (verdict, max(r[1] for r in rows))
            changed += _verdicts_upsert(version_id, crit_id, subject_field, combined)
    return changed


_VERDICT_VALUE_COLUMNS = ("is_scored", "value", "value_num", "probability", "rationale",
                          "details", "n_samples", "run_id")


def _verdict_values(cv: CombinedVerdict, run_id: int) -> dict[str, Any]:
    return {"is_scored": cv.is_scored, "value": cv.value[:200], "value_num": cv.value_num,
            "probability": cv.probability, "rationale": cv.rationale, "details": cv.details,
            "n_samples": cv.n_samples, "run_id": run_id}


def _verdicts_upsert_postgres(
    version_id: int, crit_id: int, subject_field: str,
    combined: Mapping[int, tuple[CombinedVerdict, int]],
) -> int:
    """One INSERT … ON CONFLICT DO UPDATE; a verdict whose values did not change is left as
    it is (not even `updated_at` moves), and only created or changed rows are counted."""
    rows = (finite_or_text({"sid": sid, **_verdict_values(cv, run_id)},
                            ("value_num", "probability"))
            for sid, (cv, run_id) in combined.items())
    types = {"is_scored": "boolean", "value": "varchar", "value_num": "double precision",
             "probability": "double precision", "rationale": "text", "details": "json",
             "n_samples": "integer", "run_id": "bigint"}
    cols = ", ".join(_VERDICT_VALUE_COLUMNS)
    picked = ", ".join(f"v.{c}::jsonb" if c == "details" else f"v.{c}"
                       for c in _VERDICT_VALUE_COLUMNS)
    mine = ", ".join(f"t.{c}" for c in _VERDICT_VALUE_COLUMNS)
    theirs = ", ".join(f"EXCLUDED.{c}" for c in _VERDICT_VALUE_COLUMNS)
    sql = (
        f"INSERT INTO {Verdict._meta.db_table} AS t (judge_version_id, criterion_id, "
        f"{subject_field}, source, created_at, updated_at, {cols}) "
        f"SELECT %(version)s, %(criterion)s, v.sid, %(source)s, %(now)s, %(now)s, {picked} "
        "FROM json_to_recordset(%(rows)s::json) AS v(sid bigint, "
        + ", ".join(f"{c} {types[c]}" for c in _VERDICT_VALUE_COLUMNS)
        + f") ON CONFLICT (judge_version_id, criterion_id, {subject_field}) "
        f"WHERE {subject_field} IS NOT NULL DO UPDATE SET "
        + ", ".join(f"{c} = EXCLUDED.{c}" for c in (*_VERDICT_VALUE_COLUMNS, "updated_at"))
        + f" WHERE ({mine}) IS DISTINCT FROM ({theirs}) RETURNING 1"
    )
    params: dict[str, Any] = {"version": version_id, "criterion": crit_id,
                              "source": Verdict.Source.RUN, "now": timezone.now(),
                              "rows": rows_json(rows)}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return len(cursor.fetchall())


def _verdicts_upsert(
    version_id: int, crit_id: int, subject_field: str,
    combined: Mapping[int, tuple[CombinedVerdict, int]],
) -> int:
    if not combined:
        return 0
    if connection.vendor == "postgresql":
        return _verdicts_upsert_postgres(version_id, crit_id, subject_field, combined)
    with transaction.atomic():
        existing = {
            getattr(v, subject_field): v
            for v in Verdict.objects.filter(
                judge_version_id=version_id, criterion_id=crit_id,
                **{f"{subject_field}__in": list(combined)},
            )
        }
        new, updated = [], []
        for sid, (cv, run_id) in combined.items():
            values = storable(_verdict_values(cv, run_id))
            current = existing.get(sid)
            if current is None:
                new.append(Verdict(judge_version_id=version_id, criterion_id=crit_id,
                                   source=Verdict.Source.RUN, **{subject_field: sid}, **values))
            elif any(getattr(current, k) != v for k, v in values.items()):
                for k, v in values.items():
                    setattr(current, k, v)
                current.updated_at = timezone.now()
                updated.append(current)
        Verdict.objects.bulk_create(new, ignore_conflicts=True)
        if updated:
            Verdict.objects.bulk_update(updated, [*_VERDICT_VALUE_COLUMNS, "updated_at"])
    return len(new) + len(updated)


def _combine_one_job(key: SubjectKey, row: JobRow, criterion: Criterion) -> CombinedVerdict:
    return combine_single(scale=criterion.scale, calls=[_call_view(row)],
                          pass_threshold=criterion.pass_threshold,
                          pass_labels=[str(v) for v in (criterion.pass_labels or [])])


@functools.cache
def _record_with_verdicts_sql() -> str:
    types = {"is_scored": "boolean", "value": "varchar", "value_num": "double precision",
             "probability": "double precision", "rationale": "text", "details": "json",
             "n_samples": "integer", "run_id": "bigint"}
    cols = ", ".join(_VERDICT_VALUE_COLUMNS)
    picked = ", ".join(f"v.{c}::jsonb" if c == "details" else f"v.{c}"
                       for c in _VERDICT_VALUE_COLUMNS)
    mine = ", ".join(f"t.{c}" for c in _VERDICT_VALUE_COLUMNS)
    theirs = ", ".join(f"EXCLUDED.{c}" for c in _VERDICT_VALUE_COLUMNS)
    return (
        f"WITH rec AS ({record_update_sql('%(jobs)s')}), "
        f"ver AS (INSERT INTO {Verdict._meta.db_table} AS t (judge_version_id, criterion_id, "
        f"output_id, source, created_at, updated_at, {cols}) "
        f"SELECT v.version, v.criterion, v.sid, %(source)s, %(now)s, %(now)s, {picked} "
        "FROM json_to_recordset(%(verdicts)s::json) AS v(job bigint, version bigint, "
        "criterion bigint, sid bigint, "
        + ", ".join(f"{c} {types[c]}" for c in _VERDICT_VALUE_COLUMNS)
        + ") WHERE v.job IN (SELECT id FROM rec) "
        "ON CONFLICT (judge_version_id, criterion_id, output_id) "
        "WHERE output_id IS NOT NULL DO UPDATE SET "
        + ", ".join(f"{c} = EXCLUDED.{c}" for c in (*_VERDICT_VALUE_COLUMNS, "updated_at"))
        + f" WHERE ({mine}) IS DISTINCT FROM ({theirs}) RETURNING 1) "
        "SELECT rec.id, (SELECT count(*) FROM ver) FROM rec"
    )


def jobs_record_with_verdicts(
    *,
    outcomes: Sequence[JobOutcome],
    one_job: Mapping[int, tuple[SubjectKey, JobRow]],
    criteria: Mapping[int, Criterion] | None = None,
) -> tuple[list[int], int]:
    """`jobs_record(outcomes=…)`, and the verdict of every one-job subject in `one_job`
    (job id -> its subject and its `job_row_for_outcome` row) whose job was recorded: on
    PostgreSQL both in ONE statement (the jobs' UPDATE and the verdicts' upsert as two parts
    of one WITH), a round trip per chunk fewer than recording and then building.

    `one_job` may only name single-output subjects whose given job is ALL of their jobs (a
    one-sample run's output: see `verdicts_build`'s `complete`). Returns (the ids recorded,
    the verdicts created or changed). A verdict is written only for a job this statement
    recorded, so an outcome whose lease was lost changes neither the job nor the verdict.
    """
    if not outcomes:
        return [], 0
    known = dict(criteria or {})
    missing = {key[1] for key, _ in one_job.values()} - set(known)
    if missing:
        known.update(Criterion.objects.in_bulk(list(missing)))
    if connection.vendor != "postgresql" or not one_job:
        recorded = jobs_record(outcomes=outcomes)
        done = set(recorded)
        complete = {key: [row] for job_id, (key, row) in one_job.items() if job_id in done}
        changed = verdicts_build(subjects=list(complete), criteria=known,
                                 complete=complete) if complete else 0
        return recorded, changed
    rows = []
    for job_id, (key, row) in one_job.items():
        version_id, crit_id, kind, sid = key
        if kind != "o":
            raise ValueError(f"job {job_id}: only single-output subjects have one-job verdicts")
        if row[4] not in TERMINAL_STATUSES:  # a job to be retried has no verdict yet
            continue
        cv = _combine_one_job(key, row, known[crit_id])
        rows.append(finite_or_text(
            {"job": job_id, "version": version_id, "criterion": crit_id, "sid": sid,
             **_verdict_values(cv, row[1])}, ("value_num", "probability")))
    now = timezone.now()
    params: dict[str, Any] = {"jobs": record_rows_json(outcomes, now),
                              "verdicts": rows_json(rows), "source": Verdict.Source.RUN,
                              "now": now}
    with connection.cursor() as cursor:
        cursor.execute(_record_with_verdicts_sql(), params)
        result = cursor.fetchall()
    return [r[0] for r in result], (int(result[0][1]) if result else 0)


def run_finish_if_complete(*, run_id: int) -> bool:
    """Mark a running run done when no job is queued or running; build missing verdicts.

    Returns True when this call finished the run.
    """
    if JudgeJob.objects.filter(run_id=run_id, status__in=ACTIVE_JOB_STATUSES).exists():
        return False
    verdicts_finalize(run_id=run_id)
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != JudgeRun.Status.RUNNING:
            return False
        if JudgeJob.objects.filter(run_id=run_id, status__in=ACTIVE_JOB_STATUSES).exists():
            return False
        run.status = JudgeRun.Status.DONE
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
    logger.info("judge run %s done", run_id)
    return True


def verdicts_finalize(*, run_id: int) -> int:
    """Build the verdict of every subject of the run whose jobs finished but has none yet.

    A safety net behind the per-chunk aggregation (e.g. a worker killed between recording its
    last job and building the verdict).
    """
    jobs = JudgeJob.objects.filter(run_id=run_id, status__in=TERMINAL_STATUSES)
    keys = {
        (v, c, *SubjectRef.of(o, cp).short)
        for v, c, o, cp in jobs.values_list(
            "judge_version_id", "criterion_id", "output_id", "comparison_id"
        ).distinct()
    }
    have = set()
    run = JudgeRun.objects.filter(pk=run_id).first()
    if run is None:
        return 0
    for c, o, cp in Verdict.objects.filter(judge_version_id=run.judge_version_id).values_list(
        "criterion_id", "output_id", "comparison_id"
    ):
        have.add((run.judge_version_id, c, *SubjectRef.of(o, cp).short))
    missing = keys - have
    return verdicts_build(subjects=missing) if missing else 0
