"""Judge runs: start, cancel, resume, re-run; claiming and recording jobs; verdicts; sweeping.

Services for writes (house style): keyword-only, typed, each owning its `transaction.atomic`,
no network I/O inside. The executor (`judges/executor.py`) calls `jobs_claim`, makes the calls
with no transaction open, then calls `jobs_record` and `verdicts_build`.

Decisions worth knowing (also in docs/judges.md):

- **Jobs are unique per judge version**, not per run: (judge version, criterion, subject,
  sample index, order). A second run of the same judge version over the same subjects does not
  call the provider again for a job that already finished (done, unparseable, or failed
  permanently) in an earlier run — its verdict already exists. It *adopts* (moves to itself and
  re-queues) the jobs earlier runs left cancelled or failed for a transient reason, and leaves
  jobs still queued or running in another active run to that run. `creation_stats` says how
  many of each. A new judge version (changed prompt/model/parser) always gets fresh jobs.
- **Pairwise subjects are `Comparison` rows.** If the selected items have no comparison at
  all, the run creates one per pair of candidates' outputs on the same item, in canonical
  order (output_a = the output of the candidate with the lower id). If any comparison exists
  for the selected items, the curated set is used as is and nothing is added.
- **Selection** (stored on the run, with the seed for samples):
  `{"kind": "all"}`, `{"kind": "stratum", "dimension": key, "label": label}`,
  `{"kind": "candidate", "candidate": name}`, `{"kind": "sample", "n": N, "seed": S}`.
  For single-output criteria it selects outputs; for pairwise criteria it selects comparisons
  (stratum: of items in the stratum; candidate: comparisons involving the candidate; sample: N
  comparisons drawn with the same seed).
- **Budgets**: `max_calls` counts provider calls (every claim, retries included) and is exact:
  claims happen under the run row lock. `max_cost` is checked before each claim against the
  cost recorded so far plus the average cost of a call for the calls in flight, so a run can
  overshoot by at most the spread of the calls in flight. Hitting either stops the run:
  queued jobs are cancelled, running ones finish, `status=stopped`, `stop_reason` has figures;
  a retry one of those calls asks for is cancelled too (`run_settle`), so a stopped run never
  keeps queued jobs. Calls under a lapsed lease do not count as in flight.
- **Attempts**: each claim is one attempt. Transient errors re-queue the job with a jittered,
  capped exponential backoff that honours Retry-After (a Retry-After above the cap is honoured
  as sent); after `REVIEWHUB_JUDGE_MAX_ATTEMPTS` the job fails with `error_kind="transient"`.
  Resuming a run re-queues such jobs with their attempt count reset.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import secrets
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from reviewhub.api.errors import Conflict, ValidationFailed
from studies.models import Comparison, Criterion, Item, Output, StratumDimension, Study

from .aggregation import (
    RAW_EXCERPT_CHARS,
    TERMINAL_STATUSES,
    CallView,
    CombinedVerdict,
    combine_pairwise,
    combine_single,
)
from .models import Judge, JudgeJob, JudgeRun, JudgeVersion, Verdict

logger = logging.getLogger(__name__)

JOB_BULK_BATCH = 1000
SELECTION_KINDS = ("all", "stratum", "candidate", "sample")
ACTIVE_JOB_STATUSES = (JudgeJob.Status.QUEUED, JudgeJob.Status.RUNNING)
# Before the first priced call finishes, a cost-limited run claims this many calls at most.
COST_PROBE_CALLS = 8

Enqueue = Callable[[int, int], None]


def _default_enqueue(run_id: int, n: int) -> None:
    from .celery_tasks import judge_run_enqueue

    judge_run_enqueue(run_id=run_id, n=n)


# --- selection ----------------------------------------------------------------------------


def selection_normalise(*, study: Study, selection: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a selection and return the canonical form stored on the run."""
    sel = dict(selection or {"kind": "all"})
    kind = sel.get("kind", "all")
    if kind not in SELECTION_KINDS:
        raise ValidationFailed(
            f"selection.kind must be one of {', '.join(SELECTION_KINDS)}",
            details={"selection.kind": kind},
        )
    if kind == "all":
        return {"kind": "all"}
    if kind == "stratum":
        dimension, label = sel.get("dimension"), sel.get("label")
        if not isinstance(dimension, str) or not isinstance(label, str) or not label:
            raise ValidationFailed(
                "a stratum selection needs 'dimension' and 'label' (strings)",
                details={"selection": sel},
            )
        if not StratumDimension.objects.filter(study=study, key=dimension).exists():
            raise ValidationFailed(
                f"selection.dimension '{dimension}' is not a dimension of this study",
                details={"selection.dimension": dimension},
            )
        return {"kind": "stratum", "dimension": dimension, "label": label}
    if kind == "candidate":
        name = sel.get("candidate")
        candidate = study.candidates.filter(name=name).first() if isinstance(name, str) else None
        if candidate is None:
            raise ValidationFailed(
                f"selection.candidate '{name}' is not a candidate of this study",
                details={"selection.candidate": name},
            )
        return {"kind": "candidate", "candidate": candidate.name, "candidate_id": candidate.pk}
    n, seed = sel.get("n"), sel.get("seed")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationFailed(
            "selection.n must be a positive integer", details={"selection.n": n}
        )
    if seed is None:
        # Drawn once and stored, so that a re-run judges exactly the same sample.
        seed = secrets.randbelow(2**31)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise ValidationFailed("selection.seed must be an integer",
                               details={"selection.seed": seed})
    return {"kind": "sample", "n": n, "seed": seed}


def _sample_ids(ids: list[int], *, n: int, seed: int) -> list[int]:
    ids = sorted(ids)
    if n >= len(ids):
        return ids
    return sorted(random.Random(seed).sample(ids, n))


def selection_outputs(*, study: Study, selection: Mapping[str, Any]) -> list[int]:
    """Output ids selected (sorted), for single-output criteria."""
    qs = Output.objects.filter(study=study)
    kind = selection["kind"]
    if kind == "stratum":
        qs = qs.filter(**{f"item__strata__{selection['dimension']}": selection["label"]})
    elif kind == "candidate":
        qs = qs.filter(candidate_id=selection["candidate_id"])
    ids = list(qs.order_by("id").values_list("id", flat=True))
    if kind == "sample":
        ids = _sample_ids(ids, n=selection["n"], seed=selection["seed"])
    return ids


def _item_ids_for(*, study: Study, selection: Mapping[str, Any]) -> QuerySet[Any]:
    qs = study.items.all()
    if selection["kind"] == "stratum":
        qs = qs.filter(**{f"strata__{selection['dimension']}": selection["label"]})
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


# --- starting, cancelling, resuming ---------------------------------------------------------


def _samples_for(version: JudgeVersion) -> int:
    samples = version.config.get("samples", 1) if version.judge.kind == Judge.Kind.LLM else 1
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValidationFailed(
            "judge version config 'samples' must be a positive integer",
            details={"samples": samples},
        )
    return samples


def _check_budget_args(
    *, version: JudgeVersion, max_cost: float | None, max_calls: int | None
) -> None:
    if max_calls is not None and (isinstance(max_calls, bool) or max_calls < 1):
        raise ValidationFailed("max_calls must be a positive integer",
                               details={"max_calls": max_calls})
    if max_cost is not None:
        if max_cost <= 0 or not math.isfinite(max_cost):
            raise ValidationFailed("max_cost must be a positive number",
                                   details={"max_cost": max_cost})
        if version.judge.kind == Judge.Kind.LLM:
            from .pricing import cost_for

            config = version.config
            price = cost_for(provider=str(config.get("provider", "")),
                             model=str(config.get("model", "")), tokens_in=1_000_000,
                             tokens_out=1_000_000, override=config.get("prices"))
            if price is None:
                raise ValidationFailed(
                    "max_cost needs a price for this model: add it to "
                    "REVIEWHUB_JUDGE_PRICES or to the judge config 'prices'",
                    details={"max_cost": max_cost, "model": config.get("model")},
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
    judge = version.judge
    if judge.study_id != study.pk:
        raise ValidationFailed("the judge version belongs to another study",
                               details={"judge_version": version.pk})
    if judge.kind == Judge.Kind.IMPORTED:
        raise ValidationFailed("imported judges hold imported verdicts and cannot be run",
                               details={"judge_version": version.pk})
    criteria = list(dict.fromkeys(criteria))
    if not criteria:
        raise ValidationFailed("at least one criterion is required", details={"criteria": []})
    foreign = [c.key for c in criteria if c.rubric.study_id != study.pk]
    if foreign:
        raise ValidationFailed("criteria must belong to this study's rubric",
                               details={"criteria": foreign})
    pairwise = [c for c in criteria if c.scale == Criterion.Scale.PAIRWISE]
    if pairwise and judge.kind == Judge.Kind.PROGRAMMATIC:
        raise ValidationFailed("programmatic checks judge single outputs, not pairs",
                               details={"criteria": [c.key for c in pairwise]})
    _check_budget_args(version=version, max_cost=max_cost, max_calls=max_calls)
    sel = selection_normalise(study=study, selection=selection)
    samples = _samples_for(version)
    now = timezone.now()

    with transaction.atomic():
        comparisons_created = comparisons_ensure(study=study, selection=sel) if pairwise else 0
        output_ids = selection_outputs(study=study, selection=sel) if len(pairwise) < len(
            criteria) else []
        comparison_ids = selection_comparisons(study=study, selection=sel) if pairwise else []
        run = JudgeRun.objects.create(
            study=study, judge_version=version, selection=sel, max_cost=max_cost,
            max_calls=max_calls, created_by=created_by, status=JudgeRun.Status.RUNNING,
            started_at=now, last_activity_at=now,
        )
        run.criteria.set(criteria)
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
            _on_commit_enqueue(run.pk, queued, enqueue)
    logger.info("judge run %s started: %s", run.pk, stats)
    return run


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


def _on_commit_enqueue(run_id: int, queued: int, enqueue: Enqueue | None) -> None:
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
        exhausted = _budget_exhausted(run)
        if exhausted:
            raise ValidationFailed(f"the budget is still exhausted ({exhausted}); raise it to "
                                   "resume", details={"max_cost": run.max_cost,
                                                      "max_calls": run.max_calls})
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
        _on_commit_enqueue(run.pk, n, enqueue)
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


# --- claiming -------------------------------------------------------------------------------


@dataclass
class ClaimedJob:
    """A claimed job's own columns, no related rows: what a worker needs to run and record it.

    Plain values rather than a `JudgeJob` with its related rows: building seven model
    instances per job was most of a worker's CPU (see docs/benchmarks.md, judge throughput).
    """

    id: int
    run_id: int
    judge_version_id: int
    criterion_id: int
    output_id: int | None
    comparison_id: int | None
    sample_index: int
    order: str
    attempts: int
    details: dict[str, Any]
    # The subject's texts, when the claim fetched them with the job (PostgreSQL does).
    texts: SubjectTexts | None = None

    @property
    def pk(self) -> int:
        return self.id


class SubjectTexts(NamedTuple):
    """What a prompt shows of a claimed job's subject: the item, and the output (single-output
    criteria) or both outputs of the comparison, in canonical order (pairwise)."""

    item_input: str
    item_context: str
    item_reference: str
    output_text: str | None = None
    output_a_id: int | None = None
    output_a_text: str | None = None
    output_b_id: int | None = None
    output_b_text: str | None = None


_CLAIMED_COLUMNS = ("id", "run_id", "judge_version_id", "criterion_id", "output_id",
                    "comparison_id", "sample_index", "order", "attempts", "details")


@dataclass
class ClaimResult:
    jobs: list[ClaimedJob]
    # "ok" (claimed or nothing claimable right now), "inactive" (run not running),
    # "stopped" (a budget stopped it now), "budget_wait" (waiting for in-flight costs).
    state: str = "ok"
    next_available_at: datetime | None = None
    # Queued + running jobs of the run after this claim. Counted only when the claim got no
    # job (it then tells "wait for a retry" from "finished"); a claim that got jobs reports
    # len(jobs), a lower bound: counting scans every active job of the run, on every claim.
    remaining: int = 0


def _cost_so_far(run: JudgeRun, now: datetime | None = None) -> tuple[float, int, int]:
    """(cost recorded, calls priced, calls in flight).

    In flight = running under a live lease. A job whose lease lapsed is not in flight (its
    worker is presumed dead, and this claim may take it again); counted, a probe of
    `COST_PROBE_CALLS` lost with its worker would hold a cost-limited run in "budget_wait"
    until the sweeper re-queued the jobs, or for ever without one.
    """
    agg = JudgeJob.objects.filter(run=run).aggregate(
        spent=Sum("cost"), priced=Count("cost"),
        running=Count("id", filter=Q(status=JudgeJob.Status.RUNNING,
                                     lease_expires_at__gte=now or timezone.now())),
    )
    return float(agg["spent"] or 0.0), int(agg["priced"] or 0), int(agg["running"] or 0)


def _budget_exhausted(run: JudgeRun) -> str:
    if run.max_calls is not None and run.calls_made >= run.max_calls:
        return f"max_calls reached: {run.calls_made} calls made of {run.max_calls} allowed"
    if run.max_cost is not None:
        spent, _, _ = _cost_so_far(run)
        if spent >= run.max_cost:
            return f"max_cost reached: {spent:.6f} spent of {run.max_cost:.6f} allowed"
    return ""


def _stop_run(run: JudgeRun, reason: str) -> None:
    now = timezone.now()
    JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).update(
        status=JudgeJob.Status.CANCELLED, finished_at=now, error="run stopped: " + reason
    )
    run.status = JudgeRun.Status.STOPPED
    run.stop_reason = reason
    run.finished_at = now
    run.save(update_fields=["status", "stop_reason", "finished_at"])
    logger.info("judge run %s stopped: %s", run.pk, reason)


def _claimable(run_id: int, now: datetime, max_attempts: int) -> QuerySet[JudgeJob]:
    return JudgeJob.objects.filter(run_id=run_id).filter(
        Q(status=JudgeJob.Status.QUEUED, available_at__isnull=True)
        | Q(status=JudgeJob.Status.QUEUED, available_at__lte=now)
        | Q(status=JudgeJob.Status.RUNNING, lease_expires_at__lt=now, attempts__lt=max_attempts)
    )


def _exhausted_lease_error(max_attempts: int) -> str:
    return f"lease expired on each of {max_attempts} attempts (worker lost)"


def _fail_exhausted_leases(qs: QuerySet[JudgeJob], now: datetime, max_attempts: int) -> int:
    return qs.filter(
        status=JudgeJob.Status.RUNNING, lease_expires_at__lt=now, attempts__gte=max_attempts
    ).update(
        status=JudgeJob.Status.FAILED, error_kind=JudgeJob.ErrorKind.TRANSIENT,
        error=_exhausted_lease_error(max_attempts),
        lease_token="", lease_expires_at=None, finished_at=now,
    )


# One statement claims a batch on PostgreSQL, in autocommit: lock the run row (first: every
# other part depends on it, so locks are always taken run first, jobs second, as cancel and the
# budget path do), then (optionally) fail the leases that lapsed on their last attempt and take
# the other lapsed ones first (older work), then queued jobs; lease them, count the calls on
# the run row, and return the run's state with the jobs' own columns and their subjects' texts.
# Nothing is claimed unless the run is running without a budget (budgets need the checks in
# `jobs_claim`). The queued pick is not ordered by id: that would sort every queued job of the
# run on every claim. Its ORDER BY (constant within the result) is what makes the planner read
# the (run, status) index, which hands the jobs out in insertion order and stops at the
# LIMIT, whatever the statistics say: with fresh statistics of a new run ("all queued") it
# otherwise scans the table from the start, past every job the run claimed already, on every
# claim. Rows another claimer took since this statement's snapshot are re-checked by
# FOR UPDATE and skipped. The lease update finds the picked ids by primary key.
_LAPSED_CTES = """
lapsed AS (
    SELECT id, attempts FROM {job}
    WHERE status = 'running' AND lease_expires_at < %(now)s AND run_id = (SELECT id FROM go)
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE {job} SET status = 'failed', error_kind = 'transient', error = %(fail_error)s,
        lease_token = '', lease_expires_at = NULL, finished_at = %(now)s
    WHERE id = ANY(ARRAY(SELECT id FROM lapsed WHERE attempts >= %(max_attempts)s))
), expired AS (
    SELECT id FROM lapsed WHERE attempts < %(max_attempts)s ORDER BY id LIMIT %(n)s
),"""
_CLAIM_SQL = """
WITH r AS (
    SELECT id, status, max_calls IS NULL AND max_cost IS NULL AS free
    FROM {run} WHERE id = %(run)s FOR UPDATE
), go AS (
    SELECT id FROM r WHERE status = 'running' AND free
), {lapsed} queued AS (
    SELECT id FROM {job}
    WHERE run_id = (SELECT id FROM go) AND status = 'queued'
        AND (available_at IS NULL OR available_at <= %(now)s)
    ORDER BY run_id, status LIMIT %(n)s FOR UPDATE SKIP LOCKED
), picked AS (
    {expired} SELECT id FROM queued LIMIT %(n)s
), claimed AS (
    UPDATE {job} AS j SET status = 'running', lease_token = %(token)s,
        lease_expires_at = %(lease_until)s, attempts = j.attempts + 1, available_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING {returning}
), counted AS (
    UPDATE {run} SET calls_made = calls_made + (SELECT count(*) FROM claimed),
        last_activity_at = %(now)s
    WHERE id = (SELECT id FROM go)
)
SELECT r.status, r.free, {claimed_cols}, o.text, c.output_a_id, a.text, c.output_b_id, b.text,
    i.input, i.context, i.reference
FROM r LEFT JOIN claimed ON true
    LEFT JOIN {output} o ON o.id = claimed.output_id
    LEFT JOIN {comparison} c ON c.id = claimed.comparison_id
    LEFT JOIN {output} a ON a.id = c.output_a_id
    LEFT JOIN {output} b ON b.id = c.output_b_id
    LEFT JOIN {item} i ON i.id = COALESCE(o.item_id, c.item_id)
ORDER BY claimed.id
"""


def _claim_postgres(
    *, run_id: int, n: int, token: str, now: datetime, max_attempts: int, lapsed: bool = True
) -> tuple[str | None, bool, list[ClaimedJob]]:
    """(run status or None when there is no such run, whether it has no budget, the jobs)."""
    job = JudgeJob._meta.db_table
    sql = _CLAIM_SQL.format(
        job=job, run=JudgeRun._meta.db_table, output=Output._meta.db_table,
        comparison=Comparison._meta.db_table, item=Item._meta.db_table,
        lapsed=_LAPSED_CTES.format(job=job) if lapsed else "",
        expired="(SELECT id FROM expired) UNION ALL" if lapsed else "",
        returning=", ".join(f'j."{c}"' for c in _CLAIMED_COLUMNS),
        claimed_cols=", ".join(f'claimed."{c}"' for c in _CLAIMED_COLUMNS),
    )
    params: dict[str, Any] = {
        "run": run_id, "n": n, "token": token, "now": now,
        "lease_until": now + timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S),
    }
    if lapsed:
        params.update(max_attempts=max_attempts, fail_error=_exhausted_lease_error(max_attempts))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return None, False, []
    width = len(_CLAIMED_COLUMNS)
    jobs = []
    for row in rows:
        if row[2] is None:  # the run row alone: nothing claimed
            continue
        text, a_id, a_text, b_id, b_text, inp, context, reference = row[2 + width:]
        texts = None if inp is None else SubjectTexts(  # None: the subject is gone
            item_input=inp, item_context=context, item_reference=reference, output_text=text,
            output_a_id=a_id, output_a_text=a_text, output_b_id=b_id, output_b_text=b_text)
        jobs.append(_claimed(row[2 : 2 + width], texts))
    return rows[0][0], bool(rows[0][1]), jobs


def _claimed(row: Sequence[Any], texts: SubjectTexts | None = None) -> ClaimedJob:
    jid, run_id, version_id, crit_id, output_id, comparison_id, sample, order, attempts, det = row
    return ClaimedJob(id=jid, run_id=run_id, judge_version_id=version_id, criterion_id=crit_id,
                      output_id=output_id, comparison_id=comparison_id, sample_index=sample,
                      order=order, attempts=attempts, details=_json_value(det) or {},
                      texts=texts)


def _json_value(raw: Any) -> Any:
    # Django has psycopg hand jsonb over as text (JSONField decodes it); raw SQL does too.
    if raw == "{}":  # a job's details before its first error: most jobs, most of the time
        return {}
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def _claim_orm(
    *, run: JudgeRun, ids: list[int], token: str, now: datetime
) -> list[ClaimedJob]:
    JudgeJob.objects.filter(id__in=ids).update(
        status=JudgeJob.Status.RUNNING, lease_token=token,
        lease_expires_at=now + timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S),
        attempts=F("attempts") + 1, available_at=None,
    )
    run.calls_made += len(ids)
    run.last_activity_at = now
    run.save(update_fields=["calls_made", "last_activity_at"])
    return [
        _claimed(row) for row in JudgeJob.objects.filter(id__in=ids, lease_token=token)
        .order_by("id").values_list(*_CLAIMED_COLUMNS)
    ]


def jobs_claim(
    *, run_id: int, limit: int, lease_token: str | None = None, lapsed: bool = True
) -> ClaimResult:
    """Claim up to `limit` claimable jobs of a run for one worker, under a lease.

    Claimable: queued and available now, or running with an expired lease (its worker is
    presumed dead; each claim counts one attempt; these go first). The run row is locked for
    the duration so that budget checks and `calls_made` are exact across workers; the jobs
    themselves are picked with FOR UPDATE SKIP LOCKED on PostgreSQL (one statement, see
    `_CLAIM_SQL`; SQLite serialises writers instead).

    `lapsed=False` lets a worker that claims many times a second skip looking for expired
    leases (they take minutes to expire) while queued jobs are claimable; a claim that finds
    no queued job always looks.
    """
    token = lease_token or uuid.uuid4().hex
    now = timezone.now()
    max_attempts = settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS
    fast = connection.vendor == "postgresql"
    if fast:
        # The common case, a running run without a budget, is one statement (`_CLAIM_SQL`).
        for look in dict.fromkeys((lapsed, True)):  # skipping lapsed leases: retry once
            status, free, claimed = _claim_postgres(run_id=run_id, n=limit, token=token,
                                                    now=now, max_attempts=max_attempts,
                                                    lapsed=look)
            if status != JudgeRun.Status.RUNNING:
                return ClaimResult(jobs=[], state="inactive")
            if not free or claimed:
                break
        if free:
            if claimed:
                return ClaimResult(jobs=claimed, remaining=len(claimed))
            return _claim_nothing(run_id, "ok")
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != JudgeRun.Status.RUNNING:
            return ClaimResult(jobs=[], state="inactive")
        _fail_exhausted_leases(JudgeJob.objects.filter(run=run), now, max_attempts)
        allowance = limit
        state = "ok"
        if run.max_calls is not None:
            allowance = min(allowance, run.max_calls - run.calls_made)
        if run.max_cost is not None:
            spent, priced, running = _cost_so_far(run, now)
            if spent >= run.max_cost:
                allowance = 0
            elif priced:
                avg = spent / priced
                affordable = (
                    math.floor((run.max_cost - spent) / avg) - running if avg > 0 else limit
                )
                allowance = min(allowance, affordable)
            else:
                allowance = min(allowance, max(0, COST_PROBE_CALLS - running))
                if allowance == 0:
                    state = "budget_wait"
        jobs: list[ClaimedJob] = []
        if allowance > 0:
            for look in dict.fromkeys((lapsed, True)):  # skipping lapsed leases: retry once
                qs = _claimable(run.pk, now, max_attempts).order_by("id")
                if not look:
                    qs = qs.filter(status=JudgeJob.Status.QUEUED)
                if connection.features.has_select_for_update_skip_locked:
                    qs = qs.select_for_update(skip_locked=True)
                ids = list(qs.values_list("id", flat=True)[:allowance])
                if ids:
                    jobs = _claim_orm(run=run, ids=ids, token=token, now=now)
                    break
        elif state != "budget_wait" and _claimable(run.pk, now, max_attempts).exists():
            reason = _budget_exhausted(run) or (
                f"max_cost reached: {_cost_so_far(run)[0]:.6f} spent of "
                f"{run.max_cost:.6f} allowed; the next calls would exceed it"
            )
            _stop_run(run, reason)
            return ClaimResult(jobs=[], state="stopped")
        if jobs:
            return ClaimResult(jobs=jobs, state=state, remaining=len(jobs))
        run.last_activity_at = now
        run.save(update_fields=["last_activity_at"])
        return _claim_nothing(run_id, state)


def _claim_nothing(run_id: int, state: str) -> ClaimResult:
    """An empty claim: how much work is left, and when the next retry becomes claimable."""
    rest = JudgeJob.objects.filter(run_id=run_id, status__in=ACTIVE_JOB_STATUSES)
    remaining = rest.count()
    next_at = None
    if remaining:
        next_at = (
            rest.filter(status=JudgeJob.Status.QUEUED, available_at__isnull=False)
            .order_by("available_at").values_list("available_at", flat=True).first()
        )
    return ClaimResult(jobs=[], state=state, next_available_at=next_at, remaining=remaining)


# --- recording ------------------------------------------------------------------------------


@dataclass
class JobOutcome:
    """The result of one claimed job, ready to record (built by the executor, no ORM)."""

    job_id: int
    lease_token: str
    status: str  # done | unparseable | failed | queued (transient, retry later)
    error_kind: str = ""
    error: str = ""
    raw_response: str = ""
    parsed_value: str = ""
    value_num: float | None = None
    probability: float | None = None
    rationale: str = ""
    http_status: int | None = None
    provider_request_id: str = ""
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_ms: float | None = None
    cost: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    available_at: datetime | None = None


_RECORD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("status", "varchar"), ("error_kind", "varchar"), ("error", "text"),
    ("raw_response", "text"), ("parsed_value", "varchar"), ("value_num", "double precision"),
    ("probability", "double precision"), ("rationale", "text"), ("http_status", "integer"),
    ("provider_request_id", "varchar"), ("tokens_in", "integer"), ("tokens_out", "integer"),
    ("latency_ms", "double precision"), ("cost", "double precision"), ("details", "jsonb"),
    ("available_at", "timestamptz"), ("finished_at", "timestamptz"),
)


def _outcome_row(o: JobOutcome, now: datetime) -> tuple[Any, ...]:
    """The values of `_RECORD_COLUMNS`, in that order."""
    return (
        o.status, o.error_kind, o.error, o.raw_response, o.parsed_value[:200], o.value_num,
        o.probability, o.rationale, o.http_status, o.provider_request_id[:200], o.tokens_in,
        o.tokens_out, o.latency_ms, o.cost, o.details, o.available_at,
        None if o.status == JudgeJob.Status.QUEUED else now,
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite_or_text(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    # JSON has no NaN/Infinity; as strings they still reach a double precision column intact.
    for name in names:
        value = row[name]
        if isinstance(value, float) and not math.isfinite(value):
            row[name] = str(value).replace("inf", "Infinity").replace("nan", "NaN")
    return row


def _rows_json(rows: Iterable[Mapping[str, Any]]) -> str:
    """A chunk's rows as ONE JSON parameter for `json_to_recordset`.

    One text parameter instead of a VALUES list of (rows x columns) placeholders: psycopg
    parses and caches the statement once, the rows are encoded by the C JSON encoder and
    decoded by PostgreSQL, and nothing is adapted value by value in Python.
    """
    items = list(rows)
    text = json.dumps(items, ensure_ascii=False, default=_json_default)
    if "\\u0000" in text or _LONE_SURROGATE.search(text):
        # PostgreSQL text and jsonb cannot hold NUL, and a lone UTF-16 surrogate (which
        # json.loads makes of a "\\ud800" in a provider's answer) cannot even be encoded to
        # send; one such answer would fail the statement for the whole chunk. Both become
        # U+FFFD. (The NUL check can also hit an escaped backslash followed by "u0000"; the
        # slow path then changes nothing.)
        text = json.dumps(_storable(items), ensure_ascii=False, default=_json_default)
    return text


# NUL and unpaired surrogates: what ingest refuses (studies/ingest.py) and a judge's answer,
# which is recorded rather than refused, has replaced. Every write of job and verdict rows goes
# through `_storable`: here on PostgreSQL (only when the chunk's JSON shows one), on the ORM
# path value by value (SQLite cannot encode a lone surrogate either).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_storable(v) for v in value)
    return value


_RECORD_FLOATS = tuple(name for name, pgtype in _RECORD_COLUMNS if pgtype == "double precision")


def _record_postgres(outcomes: Sequence[JobOutcome], now: datetime) -> list[int]:
    """One UPDATE … FROM json_to_recordset(…) for the whole chunk, conditional on each lease."""
    names = [name for name, _ in _RECORD_COLUMNS]
    rows = (
        _finite_or_text({"id": o.job_id, "token": o.lease_token,
                         **dict(zip(names, _outcome_row(o, now), strict=True))}, _RECORD_FLOATS)
        for o in outcomes
    )
    # The recordset declares `details` as json; the column is jsonb.
    decl = ", ".join(f"{name} {'json' if name == 'details' else pgtype}"
                     for name, pgtype in _RECORD_COLUMNS)
    sets = ", ".join(f"{name} = v.{name}" + ("::jsonb" if name == "details" else "")
                     for name in names)
    sql = (
        f"UPDATE {JudgeJob._meta.db_table} AS j SET {sets}, lease_token = '', "
        "lease_expires_at = NULL "
        f"FROM json_to_recordset(%s::json) AS v(id bigint, token varchar, {decl}) "
        "WHERE j.id = v.id AND j.lease_token = v.token AND j.status = 'running' RETURNING j.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_rows_json(rows)])
        return [row[0] for row in cursor.fetchall()]


def jobs_record(*, outcomes: Sequence[JobOutcome]) -> list[int]:
    """Record call outcomes; return the ids actually recorded.

    Each row is updated only while it is still `running` under the same lease token, so a late
    or duplicate delivery (the lease expired and another worker re-claimed the job, or the same
    outcome is recorded twice) changes nothing: every job ends exactly once.
    """
    if not outcomes:
        return []
    now = timezone.now()
    if connection.vendor == "postgresql":
        # A single statement is atomic on its own; BEGIN/COMMIT would only add round trips.
        return _record_postgres(outcomes, now)
    recorded = []
    names = [name for name, _ in _RECORD_COLUMNS]
    with transaction.atomic():
        for o in outcomes:
            n = JudgeJob.objects.filter(
                id=o.job_id, lease_token=o.lease_token, status=JudgeJob.Status.RUNNING
            ).update(lease_token="", lease_expires_at=None,
                     **dict(zip(names, _storable(_outcome_row(o, now)), strict=True)))
            if n:
                recorded.append(o.job_id)
    return recorded


# --- verdicts -------------------------------------------------------------------------------

SubjectKey = tuple[int, int, str, int]  # (judge_version_id, criterion_id, "o"|"c", subject id)


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
        subject_field = "output_id" if kind == "o" else "comparison_id"
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
    rows = (_finite_or_text({"sid": sid, **_verdict_values(cv, run_id)},
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
                              "rows": _rows_json(rows)}
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
            values = _storable(_verdict_values(cv, run_id))
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
        (v, c, "o", o) if o is not None else (v, c, "c", cp)
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
        have.add((run.judge_version_id, c, "o", o) if o is not None else
                 (run.judge_version_id, c, "c", cp))
    missing = keys - have
    return verdicts_build(subjects=missing) if missing else 0


# --- after a drain: the next wake-up, settling, stalls ---------------------------------------

INACTIVE_RUN_STATUSES = (JudgeRun.Status.DONE, JudgeRun.Status.CANCELLED,
                         JudgeRun.Status.STOPPED, JudgeRun.Status.FAILED)


@dataclass(frozen=True)
class RunWake:
    """What a running run's queue holds: whether, and from when, a batch task has work.

    Read from the database after a drain has recorded everything it claimed, so it sees the
    retries that drain's last chunk put back (the drain's own report may predate them).
    """

    queued: int
    ready: int  # queued and claimable now
    unscheduled: int  # queued with no retry time (claimable since they were queued)
    running: int  # running under a live lease (a worker is on it)
    lapsed: int  # running with an expired lease (its worker is presumed lost)
    next_retry_at: datetime | None  # the earliest `available_at` of the queued jobs
    next_lease_expiry_at: datetime | None  # the earliest live lease's expiry
    last_activity_at: datetime | None

    @property
    def due_at(self) -> datetime | None:
        """When the earliest queued job becomes claimable (None: claimable now)."""
        return None if self.ready else self.next_retry_at

    @property
    def claimable_from(self) -> datetime | None:
        """Since (or from) when the earliest queued job is claimable; None: since queued."""
        return None if self.unscheduled else self.next_retry_at


def run_wake(*, run_id: int, now: datetime | None = None) -> RunWake | None:
    """The queue of a running run with queued jobs (one query); None when there is no such
    run, it is not running, or it has no queued job (nothing to wake up for)."""
    now = now or timezone.now()
    st = JudgeJob.Status
    ready_q = Q(status=st.QUEUED) & (Q(available_at__isnull=True) | Q(available_at__lte=now))
    agg = JudgeJob.objects.filter(
        run_id=run_id, run__status=JudgeRun.Status.RUNNING, status__in=ACTIVE_JOB_STATUSES
    ).aggregate(
        queued=Count("id", filter=Q(status=st.QUEUED)),
        ready=Count("id", filter=ready_q),
        unscheduled=Count("id", filter=Q(status=st.QUEUED, available_at__isnull=True)),
        running=Count("id", filter=Q(status=st.RUNNING, lease_expires_at__gte=now)),
        lapsed=Count("id", filter=Q(status=st.RUNNING, lease_expires_at__lt=now)),
        next_retry_at=Min("available_at", filter=Q(status=st.QUEUED)),
        next_lease_expiry_at=Min("lease_expires_at",
                                 filter=Q(status=st.RUNNING, lease_expires_at__gte=now)),
        last_activity_at=Max("run__last_activity_at"),
    )
    if not agg["queued"]:
        return None
    return RunWake(**agg)


def run_settle(*, run_id: int) -> int:
    """Cancel the queued jobs of a run that is no longer running; return how many.

    A run stops (budget) or is cancelled while calls are in flight; those calls finish and are
    recorded, and a transient error among them is recorded as "queued, retry later", as is a
    lapsed lease the sweeper re-queues. Nothing claims jobs of a run that is not running, so
    they would stay queued for ever, and the run would look half-alive; cancelled, they are
    what `judge_run_resume` picks up. Under the run row lock, as resume changes the status.
    """
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().filter(
            pk=run_id, status__in=INACTIVE_RUN_STATUSES).first()
        if run is None:
            return 0
        n = JudgeJob.objects.filter(run=run, status=JudgeJob.Status.QUEUED).update(
            status=JudgeJob.Status.CANCELLED, finished_at=timezone.now(),
            available_at=None, error=f"run {run.status} before this job was retried",
        )
    if n:
        logger.info("judge run %s (%s): %s queued jobs cancelled", run_id, run.status, n)
    return n


# How long past its due time (the last claim, or the next retry) a run may sit with queued
# jobs and no claim before its page calls it stalled. Longer than the waits the chain of batch
# tasks schedules itself for ready work (a second at most) and than a worker's start-up; at
# least two sweeps, so that a sweeper that runs has had its chance.
STALL_GRACE_MIN_S = 60.0


def run_stall_grace_s() -> float:
    return max(STALL_GRACE_MIN_S, 2 * float(settings.REVIEWHUB_JUDGE_SWEEP_INTERVAL_S))


@dataclass(frozen=True)
class RunStall:
    """A running run that nothing is working on and nothing is due to wake."""

    queued: int
    lapsed: int
    idle_since: datetime  # the later of the last claim and the earliest retry time


def run_stall(*, run_id: int, now: datetime | None = None) -> RunStall | None:
    """The run's stall, if it has one: queued jobs, no job under a live lease, and neither a
    claim nor a retry time within `run_stall_grace_s()` of now. Jobs still marked running
    with an expired lease count as lost (their worker died), not as running."""
    now = now or timezone.now()
    wake = run_wake(run_id=run_id, now=now)
    if wake is None or wake.running:
        return None
    marks = [t for t in (wake.last_activity_at, wake.claimable_from) if t is not None]
    if not marks:
        return None
    idle_since = max(marks)
    if (now - idle_since).total_seconds() <= run_stall_grace_s():
        return None
    return RunStall(queued=wake.queued, lapsed=wake.lapsed, idle_since=idle_since)


# --- sweeping -------------------------------------------------------------------------------


@dataclass
class SweepResult:
    requeued: int = 0
    failed: int = 0
    runs_finished: int = 0
    runs_kicked: list[int] = field(default_factory=list)
    settled: int = 0  # queued jobs of runs no longer running, cancelled (`run_settle`)


def judge_sweep(*, now: datetime | None = None, enqueue: Enqueue | None = None) -> SweepResult:
    """Re-queue jobs left running past their lease, finish complete runs, re-kick idle runs.

    Jobs whose lease expired go back to `queued` (or `failed`, once they have used all their
    attempts); the lease token is cleared, so the lost worker's late result is discarded. A run
    that still has work but no claim or record for longer than a lease gets fresh batch tasks
    (its messages may have died with the worker, e.g. unacknowledged ones that Redis only
    redelivers after the visibility timeout). Queued jobs of runs that are no longer running
    are cancelled (`run_settle`).
    """
    now = now or timezone.now()
    result = SweepResult()
    max_attempts = settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS
    expired = JudgeJob.objects.filter(status=JudgeJob.Status.RUNNING, lease_expires_at__lt=now)
    with transaction.atomic():
        result.failed = _fail_exhausted_leases(expired, now, max_attempts)
        result.requeued = expired.filter(attempts__lt=max_attempts).update(
            status=JudgeJob.Status.QUEUED, lease_token="", lease_expires_at=None,
            error="lease expired (worker lost?); re-queued",
        )
    unsettled = JudgeRun.objects.filter(status__in=INACTIVE_RUN_STATUSES).filter(
        Exists(JudgeJob.objects.filter(run=OuterRef("pk"), status=JudgeJob.Status.QUEUED)))
    for run_id in unsettled.values_list("id", flat=True):
        result.settled += run_settle(run_id=run_id)
    idle_before = now - timedelta(seconds=settings.REVIEWHUB_JUDGE_LEASE_S)
    for run_id in JudgeRun.objects.filter(status=JudgeRun.Status.RUNNING).values_list(
        "id", flat=True
    ):
        if run_finish_if_complete(run_id=run_id):
            result.runs_finished += 1
            continue
        with transaction.atomic():
            kicked = JudgeRun.objects.filter(
                Q(last_activity_at__isnull=True) | Q(last_activity_at__lt=idle_before),
                pk=run_id, status=JudgeRun.Status.RUNNING,
            ).update(last_activity_at=now)
            if kicked:
                queued = JudgeJob.objects.filter(run_id=run_id,
                                                 status=JudgeJob.Status.QUEUED).count()
                if queued:
                    _on_commit_enqueue(run_id, queued, enqueue)
                    result.runs_kicked.append(run_id)
    if result.requeued or result.failed or result.runs_kicked or result.settled:
        logger.info("judge sweep: %s", result)
    return result
