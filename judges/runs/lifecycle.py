"""Starting, cancelling, resuming and re-running judge runs (creating and adopting jobs)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from reviewhub.errors import Conflict, Problems, ValidationFailed
from studies.models import Criterion, Study

from ..models import Judge, JudgeJob, JudgeRun, JudgeVersion
from ..pricing import cost_for
from .claim import budget_exhausted
from .common import ACTIVE_JOB_STATUSES, JOB_BULK_BATCH, logger
from .selection import (
    comparisons_ensure,
    selection_comparisons,
    selection_normalise,
    selection_outputs,
)

Enqueue = Callable[[int, int], None]


# The Celery task module imports these services (its tasks call them), so this module does not
# import it: JudgesConfig.ready registers the task module's enqueue here when Django starts.
_registered_enqueue: list[Enqueue] = []


def run_enqueue_register(enqueue: Enqueue) -> None:
    """Make `enqueue` what a run queues its batch tasks with when the caller passes none."""
    _registered_enqueue[:] = [enqueue]


def _default_enqueue(run_id: int, n: int) -> None:
    if not _registered_enqueue:
        raise RuntimeError("no judge run enqueue registered (judges.apps.JudgesConfig.ready)")
    _registered_enqueue[0](run_id, n)


def _samples_for(version: JudgeVersion) -> int:
    samples = version.config.get("samples", 1) if version.judge.kind == Judge.Kind.LLM else 1
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValidationFailed.at(
            "samples", "judge version config 'samples' must be a positive integer",
        )
    return samples


def _check_budget_args(
    *, version: JudgeVersion, max_cost: float | None, max_calls: int | None
) -> None:
    if max_calls is not None and (isinstance(max_calls, bool) or max_calls < 1):
        raise ValidationFailed.at("max_calls", "max_calls must be a positive integer")
    if max_cost is not None:
        if max_cost <= 0 or not math.isfinite(max_cost):
            raise ValidationFailed.at("max_cost", "max_cost must be a positive number")
        if version.judge.kind == Judge.Kind.LLM:
            config = version.config
            price = cost_for(provider=str(config.get("provider", "")),
                             model=str(config.get("model", "")), tokens_in=1_000_000,
                             tokens_out=1_000_000, override=config.get("prices"))
            if price is None:
                raise ValidationFailed.at(
                    "max_cost",
                    "max_cost needs a price for this model: add it to "
                    "REVIEWHUB_JUDGE_PRICES or to the judge config 'prices'",
                    model=config.get("model"),
                )


def judge_run_start(
    *,
    study: Study,
    judge_version: JudgeVersion,
    criteria: Sequence[Criterion],
    selection: Mapping[str, Any] | None = None,
    max_cost: float | None = None,
    max_calls: int | None = None,
    created_by: Any = None,
    enqueue: Enqueue | None = None,
) -> JudgeRun:
    """Create a run and its jobs (one per version x subject x criterion x sample x order).

    Jobs are inserted with `bulk_create(ignore_conflicts=True)` under the per-version unique
    constraints, and batch tasks are enqueued after commit. See the module docstring for how
    a run relates to earlier runs of the same judge version.
    """
    version = judge_version
    criteria = _run_criteria_check(study=study, judge=version.judge, criteria=criteria)
    pairwise = [c for c in criteria if c.scale == Criterion.Scale.PAIRWISE]
    _check_budget_args(version=version, max_cost=max_cost, max_calls=max_calls)
    sel = selection_normalise(study=study, selection=selection)
    samples = _samples_for(version)
    now = timezone.now()

    with transaction.atomic():
        comparisons_created = comparisons_ensure(study=study, selection=sel) if pairwise else 0
        output_ids = selection_outputs(
            study=study, selection=sel, errored=version.judge.kind == Judge.Kind.PROGRAMMATIC,
        ) if len(pairwise) < len(criteria) else []
        comparison_ids = selection_comparisons(study=study, selection=sel) if pairwise else []
        run = JudgeRun.objects.create(
            study=study, judge_version=version, selection=sel, max_cost=max_cost,
            max_calls=max_calls, created_by=created_by, status=JudgeRun.Status.RUNNING,
            started_at=now, last_activity_at=now,
        )
        run.criteria.set(criteria)
        wanted = _jobs_wanted(criteria, output_ids, comparison_ids, samples)
        _jobs_insert(run=run, version=version, wanted=sorted(wanted))
        stats = _classify_jobs(run=run, wanted=wanted, criteria=criteria)
        stats["subjects"] = len(output_ids) + len(comparison_ids)
        stats["comparisons_created"] = comparisons_created
        run.creation_stats = stats
        queued = JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).count()
        if queued == 0:
            run.status = JudgeRun.Status.DONE
            run.finished_at = now
            run.stop_reason = "nothing to do: every selected job already finished or belongs "
            run.stop_reason += "to another active run"
        run.save(update_fields=["creation_stats", "status", "finished_at", "stop_reason"])
        if queued:
            on_commit_enqueue(run.pk, queued, enqueue)
    logger.info("judge run %s started: %s", run.pk, stats)
    return run



def _run_criteria_check(
    *, study: Study, judge: Judge, criteria: Sequence[Criterion]
) -> list[Criterion]:
    """The criteria of a run, distinct in their order, after checking that the judge can run
    (not imported) and that they are this study's and not pairwise for a programmatic check."""
    if judge.study_id != study.pk:
        raise ValidationFailed.at("judge_version", "the judge version belongs to another study")
    if judge.kind == Judge.Kind.IMPORTED:
        raise ValidationFailed.at(
            "judge_version", "imported judges hold imported verdicts and cannot be run",
        )
    criteria = list(dict.fromkeys(criteria))
    if not criteria:
        raise ValidationFailed.at("criteria", "at least one criterion is required")
    foreign = [c.key for c in criteria if c.rubric.study_id != study.pk]
    if foreign:
        problems = Problems()
        for key in foreign:
            problems.add("criteria", f"criterion '{key}' is not in this study's rubric")
        raise problems.error(message="criteria must belong to this study's rubric")
    pairwise = [c for c in criteria if c.scale == Criterion.Scale.PAIRWISE]
    if pairwise and judge.kind == Judge.Kind.PROGRAMMATIC:
        problems = Problems()
        for c in pairwise:
            problems.add("criteria", f"criterion '{c.key}' is pairwise")
        raise problems.error(message="programmatic checks judge single outputs, not pairs")
    return criteria


def _jobs_wanted(
    criteria: Sequence[Criterion], output_ids: Sequence[int], comparison_ids: Sequence[int],
    samples: int,
) -> set[tuple[int, str, int, int, str]]:
    """(criterion, "o"/"c", subject, sample, order) of every job the run asks for: both
    presentation orders of each comparison for a pairwise criterion, each output otherwise."""
    wanted: set[tuple[int, str, int, int, str]] = set()
    for crit in criteria:
        if crit.scale == Criterion.Scale.PAIRWISE:
            for cid in comparison_ids:
                for s in range(samples):
                    for order in ("ab", "ba"):
                        wanted.add((crit.pk, "c", cid, s, order))
        else:
            for oid in output_ids:
                for s in range(samples):
                    wanted.add((crit.pk, "o", oid, s, ""))
    return wanted


# Jobs a run creates are inserted this many per statement on PostgreSQL.
JOB_INSERT_BATCH = 10_000


def _jobs_insert(
    *, run: JudgeRun, version: JudgeVersion, wanted: Sequence[tuple[int, str, int, int, str]]
) -> None:
    """Insert the run's jobs, skipping the ones the unique constraints say exist already.

    On PostgreSQL one INSERT … SELECT FROM json_to_recordset(…) per JOB_INSERT_BATCH jobs:
    `bulk_create` spent ~0.1 ms of CPU per job building and adapting model instances, half a
    second of every 5,000-job run start. Every other column gets the model's default, taken
    from the model (so a new field cannot be forgotten here).
    """
    def job(crit_id: int, kind: str, sid: int, s: int, order: str) -> JudgeJob:
        return JudgeJob(run=run, judge_version=version, criterion_id=crit_id,
                        output_id=sid if kind == "o" else None,
                        comparison_id=sid if kind == "c" else None, sample_index=s, order=order)

    if connection.vendor != "postgresql":
        JudgeJob.objects.bulk_create([job(*w) for w in wanted], batch_size=JOB_BULK_BATCH,
                                     ignore_conflicts=True)
        return
    varying = {"criterion_id": "bigint", "output_id": "bigint", "comparison_id": "bigint",
               "sample_index": "integer", "order": "varchar"}
    template = job(0, "o", 0, 0, "")
    fixed = [f for f in JudgeJob._meta.concrete_fields
             if not f.primary_key and f.attname not in varying]
    fixed_values = [f.get_db_prep_save(f.pre_save(template, add=True), connection)
                    for f in fixed]
    var_cols = list(varying)  # column names: the attnames of these fields
    quoted = ", ".join(f'"{c}"' for c in var_cols)
    sql = (
        f"INSERT INTO {JudgeJob._meta.db_table} "
        f"({', '.join(str(f.column) for f in fixed)}, {quoted}) "
        f"SELECT {', '.join(['%s'] * len(fixed))}, "
        + ", ".join(f'v."{c}"' for c in var_cols)
        + " FROM json_to_recordset(%s::json) AS v("
        + ", ".join(f'"{c}" {pgtype}' for c, pgtype in varying.items())
        + ") ON CONFLICT DO NOTHING"
    )
    with connection.cursor() as cursor:
        for start in range(0, len(wanted), JOB_INSERT_BATCH):
            rows = [
                dict(zip(var_cols, (crit_id, sid if kind == "o" else None,
                                    sid if kind == "c" else None, s, order), strict=True))
                for crit_id, kind, sid, s, order in wanted[start : start + JOB_INSERT_BATCH]
            ]
            cursor.execute(sql, [*fixed_values, json.dumps(rows)])


def _classify_jobs(
    *, run: JudgeRun, wanted: set[tuple[int, str, int, int, str]], criteria: Sequence[Criterion]
) -> dict[str, int]:
    """Adopt resumable jobs of earlier runs; count what the run found (see module docstring)."""
    created = adopted = finished = elsewhere = 0
    adopt_ids: list[int] = []
    jobs = JudgeJob.objects.filter(
        judge_version=run.judge_version, criterion__in=criteria
    ).values_list("id", "run_id", "criterion_id", "output_id", "comparison_id", "sample_index",
                  "order", "status", "error_kind")
    for jid, run_id, crit_id, oid, cid, s, order, status, error_kind in jobs.iterator(
        chunk_size=5000
    ):
        key = (crit_id, "o", oid, s, order) if oid is not None else (crit_id, "c", cid, s, order)
        if key not in wanted:
            continue
        if run_id == run.pk:
            created += 1
        elif status == JudgeJob.Status.CANCELLED or (
            status == JudgeJob.Status.FAILED and error_kind == JudgeJob.ErrorKind.TRANSIENT
        ):
            adopt_ids.append(jid)
        elif status in ACTIVE_JOB_STATUSES:
            elsewhere += 1
        else:
            finished += 1
    for start in range(0, len(adopt_ids), JOB_BULK_BATCH):
        chunk = adopt_ids[start : start + JOB_BULK_BATCH]
        adopted += JudgeJob.objects.filter(
            id__in=chunk, status__in=[JudgeJob.Status.CANCELLED, JudgeJob.Status.FAILED]
        ).update(run=run, **_requeue_fields())
    return {"jobs_created": created, "jobs_adopted": adopted, "already_finished": finished,
            "in_other_runs": elsewhere}


def _requeue_fields() -> dict[str, Any]:
    return {"status": JudgeJob.Status.QUEUED, "attempts": 0, "lease_token": "",
            "lease_expires_at": None, "available_at": None, "error_kind": "", "error": "",
            "finished_at": None}


def on_commit_enqueue(run_id: int, queued: int, enqueue: Enqueue | None) -> None:
    per_task = max(1, settings.REVIEWHUB_JUDGE_CONCURRENCY)
    n = max(1, min(settings.REVIEWHUB_JUDGE_TASKS_PER_RUN, math.ceil(queued / per_task)))
    fn = enqueue or _default_enqueue
    transaction.on_commit(lambda: fn(run_id, n))


def judge_run_cancel(*, run: JudgeRun) -> JudgeRun:
    """Cancel a run: queued jobs become cancelled; running jobs finish and are recorded."""
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().get(pk=run.pk)
        if run.status not in (JudgeRun.Status.PENDING, JudgeRun.Status.RUNNING):
            raise Conflict(f"run {run.pk} is {run.status}; only a running run can be cancelled",
                           details={"status": run.status})
        JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).update(
            status=JudgeJob.Status.CANCELLED, finished_at=timezone.now()
        )
        run.status = JudgeRun.Status.CANCELLED
        run.stop_reason = "cancelled by a lead"
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "stop_reason", "finished_at"])
    return run


def judge_run_resume(
    *,
    run: JudgeRun,
    max_cost: float | None = None,
    max_calls: int | None = None,
    enqueue: Enqueue | None = None,
) -> JudgeRun:
    """Re-queue a run's cancelled jobs and transient failures (attempts reset) and restart it.

    New budgets, when given, replace the old ones; a run stopped by a budget that is still
    exhausted is refused (raise the budget to resume).
    """
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().select_related("judge_version__judge").get(
            pk=run.pk
        )
        if run.status in (JudgeRun.Status.PENDING, JudgeRun.Status.RUNNING):
            raise Conflict(f"run {run.pk} is already running", details={"status": run.status})
        _check_budget_args(version=run.judge_version, max_cost=max_cost, max_calls=max_calls)
        if max_cost is not None:
            run.max_cost = max_cost
        if max_calls is not None:
            run.max_calls = max_calls
        exhausted = budget_exhausted(run)
        if exhausted:
            raise ValidationFailed.at(
                exhausted.split(" ", 1)[0],  # "max_calls reached: ..." or "max_cost reached: ..."
                f"the budget is still exhausted ({exhausted}); raise it to resume",
                max_cost=run.max_cost, max_calls=run.max_calls,
            )
        resumable = JudgeJob.objects.filter(run=run).filter(
            Q(status=JudgeJob.Status.CANCELLED)
            | Q(status=JudgeJob.Status.FAILED, error_kind=JudgeJob.ErrorKind.TRANSIENT)
        )
        n = resumable.update(**_requeue_fields())
        if n == 0:
            raise Conflict(f"run {run.pk} has no cancelled or transiently failed job to resume",
                           details={"status": run.status})
        run.status = JudgeRun.Status.RUNNING
        run.stop_reason = ""
        run.finished_at = None
        run.last_activity_at = timezone.now()
        run.save(update_fields=["status", "stop_reason", "finished_at", "last_activity_at",
                                "max_cost", "max_calls"])
        on_commit_enqueue(run.pk, n, enqueue)
    return run


def judge_run_rerun(*, run: JudgeRun, created_by: Any = None,
                    enqueue: Enqueue | None = None) -> JudgeRun:
    """Start a new run with the same judge version, criteria, selection (and seed) and budgets.

    Finished jobs are skipped and resumable ones adopted (see the module docstring).
    """
    return judge_run_start(
        study=run.study, judge_version=run.judge_version,
        criteria=list(run.criteria.select_related("rubric")), selection=run.selection,
        max_cost=run.max_cost, max_calls=run.max_calls, created_by=created_by, enqueue=enqueue,
    )
