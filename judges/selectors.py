"""Reads for judges: judges and their versions, preview subjects, judge runs (lists, detail,
progress) and verdicts. Bounded query counts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db.models import (
    Case,
    CharField,
    Count,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.utils import timezone

from reviewhub.errors import NotFound, Problems, ValidationFailed
from studies.models import Comparison, Criterion, Output, RubricVersion, Study
from studies.selectors import rubric_current

from .models import Judge, JudgeJob, JudgeRun, JudgeVersion, Verdict


def judges_list(*, study: Study) -> QuerySet[Judge]:
    """The study's judges with their version count and latest version number (one query)."""
    return (
        Judge.objects.filter(study=study)
        .select_related("created_by")
        .annotate(versions_count=Count("versions"), latest_version=Max("versions__version"))
    )


def judge_get(*, study: Study, judge_id: int) -> Judge:
    judge = judges_list(study=study).filter(pk=judge_id).first()
    if judge is None:
        raise NotFound(f"Judge {judge_id} not found in study '{study.slug}'.")
    return judge


def judge_versions_list(*, judge: Judge) -> QuerySet[JudgeVersion]:
    return JudgeVersion.objects.filter(judge=judge).order_by("-version")


def judge_version_get(*, judge: Judge, version_id: int) -> JudgeVersion:
    version = JudgeVersion.objects.filter(judge=judge, pk=version_id).select_related(
        "judge").first()
    if version is None:
        raise NotFound(f"Version {version_id} of judge {judge.pk} not found.")
    return version


def preview_subject_get(
    *, study: Study, output_id: int | None, comparison_id: int | None
) -> Output | Comparison:
    if output_id is not None:
        output = (Output.objects.filter(study=study, pk=output_id)
                  .select_related("item", "study", "candidate").first())
        if output is None:
            raise NotFound(f"Output {output_id} not found in study '{study.slug}'.")
        return output
    if comparison_id is None:
        raise ValidationFailed.at("output_id", "Give output_id or comparison_id.")
    comparison = (Comparison.objects.filter(study=study, pk=comparison_id)
                  .select_related("item", "study", "output_a", "output_b").first())
    if comparison is None:
        raise NotFound(f"Comparison {comparison_id} not found in study '{study.slug}'.")
    return comparison


def preview_criterion_get(*, study: Study, criterion_key: str | None, pairwise: bool
                          ) -> Criterion:
    """The criterion to preview with: the named one, else the first of the current rubric
    that fits the subject (pairwise for comparisons, any other scale for outputs)."""
    rubric = rubric_current(study)
    if rubric is None:
        raise ValidationFailed.at(
            "criterion_key", "The study has no rubric yet; a preview needs a criterion.",
        )
    criteria = list(rubric.criteria.all())
    if criterion_key:
        chosen = next((c for c in criteria if c.key == criterion_key), None)
        if chosen is None:
            raise ValidationFailed.at(
                "criterion_key", f"No criterion {criterion_key!r} in the current rubric.",
            )
    else:
        chosen = next((c for c in criteria if (c.scale == "pairwise") == pairwise), None)
        if chosen is None:
            kind = "pairwise" if pairwise else "single-output"
            raise ValidationFailed.at(
                "criterion_key", f"The current rubric has no {kind} criterion.",
            )
    if (chosen.scale == "pairwise") != pairwise:
        raise ValidationFailed.at(
            "criterion_key",
            f"Criterion {chosen.key!r} is {chosen.scale}: preview it with "
            f"{'a comparison_id' if chosen.scale == 'pairwise' else 'an output_id'}.",
        )
    return chosen


# --- runs and verdicts ---------------------------------------------------------------------

# Calls per minute are measured over at most this recent window.
RATE_WINDOW = timedelta(minutes=3)


def criteria_for_refs(*, study: Study, refs: list[str]) -> list[Criterion]:
    """Criteria by key (in the study's latest rubric version) or by id; a 400 naming the
    unknown ones. The API and the run form of the judges page both start runs through it."""
    latest = study.rubric_versions.order_by("-version").first()
    found: list[Criterion] = []
    missing: list[str] = []
    by_key = {c.key: c for c in latest.criteria.select_related("rubric")} if latest else {}
    ids = [int(r) for r in refs if r.isdigit()]
    by_id = {c.pk: c for c in Criterion.objects.filter(rubric__study=study, pk__in=ids)
             .select_related("rubric")}
    for ref in refs:
        crit = by_key.get(ref) or (by_id.get(int(ref)) if ref.isdigit() else None)
        if crit is None:
            missing.append(ref)
        else:
            found.append(crit)
    if missing:
        problems = Problems()
        for ref in missing:
            problems.add("criteria", f"unknown criterion {ref!r}")
        raise problems.error(message=f"unknown criteria for this study: {', '.join(missing)}")
    return found


def judge_run_list(*, study: Study) -> QuerySet[JudgeRun]:
    return (
        JudgeRun.objects.filter(study=study)
        .select_related("judge_version__judge", "created_by")
        .prefetch_related("criteria")
    )


def judge_run_get(*, study: Study, run_id: int) -> JudgeRun:
    run = judge_run_list(study=study).filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"Judge run {run_id} not found in study '{study.slug}'.")
    return run


def judge_run_progress(*, run: JudgeRun) -> dict[str, Any]:
    """Counts by job status, tokens and cost so far, calls per minute, ETA (two queries)."""
    now = timezone.now()
    since = max(now - RATE_WINDOW, run.started_at or run.created_at)
    st = JudgeJob.Status
    agg = JudgeJob.objects.filter(run=run).aggregate(
        total=Count("id"),
        queued=Count("id", filter=Q(status=st.QUEUED)),
        running=Count("id", filter=Q(status=st.RUNNING)),
        done=Count("id", filter=Q(status=st.DONE)),
        failed=Count("id", filter=Q(status=st.FAILED)),
        unparseable=Count("id", filter=Q(status=st.UNPARSEABLE)),
        cancelled=Count("id", filter=Q(status=st.CANCELLED)),
        retrying=Count("id", filter=Q(status=st.QUEUED, available_at__isnull=False)),
        tokens_in=Sum("tokens_in"),
        tokens_out=Sum("tokens_out"),
        cost=Sum("cost"),
        recent=Count("id", filter=Q(finished_at__gte=since)),
    )
    window_s = max(1.0, (now - since).total_seconds())
    if run.finished_at is not None:
        window_s = max(1.0, (min(now, run.finished_at) - since).total_seconds())
    per_minute = agg["recent"] * 60.0 / window_s
    remaining = agg["queued"] + agg["running"]
    eta_s = None
    if run.status == JudgeRun.Status.RUNNING and remaining and per_minute > 0:
        eta_s = round(remaining / (per_minute / 60.0), 1)
    elif run.status == JudgeRun.Status.RUNNING and not remaining:
        eta_s = 0.0
    finished = agg["done"] + agg["failed"] + agg["unparseable"]
    return {
        "status": run.status,
        "stop_reason": run.stop_reason,
        "jobs": {k: agg[k] for k in ("total", "queued", "running", "done", "failed",
                                     "unparseable", "cancelled", "retrying")},
        "finished": finished,
        "fraction_done": round(finished / agg["total"], 4) if agg["total"] else 1.0,
        "calls_made": run.calls_made,
        "tokens_in": agg["tokens_in"] or 0,
        "tokens_out": agg["tokens_out"] or 0,
        "cost": round(float(agg["cost"] or 0.0), 6),
        "calls_per_minute": round(per_minute, 1),
        "eta_seconds": eta_s,
        "budget": {"max_cost": run.max_cost, "max_calls": run.max_calls},
        "creation": run.creation_stats,
        # Verdicts are scored ones: a subject whose every call failed gets an unscored
        # verdict (no value), which is a failure to count, not a verdict.
        **_verdict_counts(run),
    }


def _verdict_counts(run: JudgeRun) -> dict[str, int]:
    agg = Verdict.objects.filter(run=run).aggregate(
        scored=Count("id", filter=Q(is_scored=True)),
        unscored=Count("id", filter=Q(is_scored=False)),
    )
    return {"verdicts": agg["scored"], "verdicts_unscored": agg["unscored"]}


# --- what went wrong in a run ------------------------------------------------------------------

# The kinds a failed or unparseable job is counted under, in the order they are shown. Derived
# from what a job stores (error_kind, http_status, and the start of `error`, which the executor
# writes as "[gave up after N attempts: ]<reason>" with the reason starting "timeout" or
# "connection error" for transport failures: judges/providers/__init__.py `_transport_error`).
FAILURE_KINDS: dict[str, str] = {
    "connection": "connection error",
    "timeout": "timeout",
    "rate_limited": "rate limited (HTTP 429)",
    "server_error": "server error (HTTP 5xx)",
    "refused": "request refused (HTTP 4xx)",
    "bad_response": "malformed answer",
    "parse": "answer did not parse",
    "not_sent": "not sent (configuration: key, URL, prompt)",
    "other": "other error",
}
FAILED_JOB_STATUSES = (JudgeJob.Status.FAILED, JudgeJob.Status.UNPARSEABLE)
# How many of a run's failed jobs the run page and the API quote.
FIRST_ERRORS = 5
_GAVE_UP = r"^(gave up after [0-9]+ attempts: )?"


def _failure_kind() -> Case:
    """The failure kind of a job as a SQL expression (one grouped query per page of runs)."""
    return Case(
        When(Q(error_kind=JudgeJob.ErrorKind.PARSE) | Q(status=JudgeJob.Status.UNPARSEABLE),
             then=Value("parse")),
        When(http_status=429, then=Value("rate_limited")),
        When(http_status__gte=500, then=Value("server_error")),
        When(http_status__gte=400, then=Value("refused")),
        When(error__regex=_GAVE_UP + "timeout", then=Value("timeout")),
        When(error__regex=_GAVE_UP + "connection error", then=Value("connection")),
        When(http_status__gte=200, then=Value("bad_response")),
        When(Q(error_kind=JudgeJob.ErrorKind.PERMANENT, http_status__isnull=True),
             then=Value("not_sent")),
        default=Value("other"),
        output_field=CharField(),
    )


def failure_kind_of(*, error_kind: str, http_status: int | None, error: str,
                    unparseable: bool = False) -> str:
    """`_failure_kind` for one failure held in memory (the connection test's): same rules."""
    if error_kind == JudgeJob.ErrorKind.PARSE or unparseable:
        return "parse"
    if http_status == 429:
        return "rate_limited"
    if http_status is not None and http_status >= 500:
        return "server_error"
    if http_status is not None and http_status >= 400:
        return "refused"
    if re.match(_GAVE_UP + "timeout", error):
        return "timeout"
    if re.match(_GAVE_UP + "connection error", error):
        return "connection"
    if http_status is not None and http_status >= 200:
        return "bad_response"
    if error_kind == JudgeJob.ErrorKind.PERMANENT and http_status is None:
        return "not_sent"
    return "other"


def judge_run_failure_kinds(*, run_ids: list[int]) -> dict[int, dict[str, int]]:
    """{run id: {failure kind: failed jobs}} for a page of runs, in one grouped query."""
    counts: dict[int, dict[str, int]] = {rid: {} for rid in run_ids}
    rows = (
        JudgeJob.objects.filter(run_id__in=run_ids, status__in=FAILED_JOB_STATUSES)
        .annotate(kind=_failure_kind())
        .values_list("run_id", "kind")
        .annotate(n=Count("id"))
        .order_by()
    )
    for run_id, kind, n in rows:
        counts[run_id][kind] = counts[run_id].get(kind, 0) + n
    return counts


def judge_run_first_errors(*, run: JudgeRun, limit: int = FIRST_ERRORS) -> list[dict[str, Any]]:
    """The run's first failed jobs (by id) with their kind and recorded reason."""
    rows = (
        JudgeJob.objects.filter(run=run, status__in=FAILED_JOB_STATUSES)
        .annotate(kind=_failure_kind())
        .order_by("id")
        .values("id", "kind", "error", "http_status", "attempts", "criterion__key",
                "output_id", "comparison_id")[:limit]
    )
    return [{"job": r["id"], "kind": r["kind"], "kind_label": FAILURE_KINDS[r["kind"]],
             "error": r["error"], "http_status": r["http_status"], "attempts": r["attempts"],
             "criterion": r["criterion__key"], "output": r["output_id"],
             "comparison": r["comparison_id"]} for r in rows]


def judge_run_first_error_texts(*, run_ids: list[int]) -> dict[int, str]:
    """{run id: the error of its first failed job} for a page of runs (one query)."""
    first = (JudgeJob.objects.filter(run=OuterRef("pk"), status__in=FAILED_JOB_STATUSES)
             .order_by("id").values("error")[:1])
    return {
        rid: text for rid, text in JudgeRun.objects.filter(pk__in=run_ids)
        .annotate(first_error=Subquery(first)).values_list("id", "first_error")
        if text is not None
    }


def judge_run_outcome(
    *, run: JudgeRun, jobs: Mapping[str, int], by_kind: Mapping[str, int],
    first_errors: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What became of a run, derived from its status and its jobs (nothing stored).

    `state`: pending | running | succeeded | partly_failed | failed | cancelled | stopped.
    A run the queue calls done is `failed` when jobs failed and none succeeded,
    `partly_failed` when some did, `succeeded` when none failed. Cancelled, stopped and
    active runs keep their status and carry their failures so far.
    """
    failed = sum(jobs.get(s, 0) for s in FAILED_JOB_STATUSES)
    succeeded = jobs.get(JudgeJob.Status.DONE, 0)
    total = sum(jobs.values())
    st = JudgeRun.Status
    if run.status == st.FAILED or (run.status == st.DONE and failed and not succeeded):
        state = "failed"
    elif run.status == st.DONE and failed:
        state = "partly_failed"
    elif run.status == st.DONE:
        state = "succeeded"
    else:
        state = str(run.status)
    labels = {"failed": "Failed", "partly_failed": "Partly failed", "succeeded": "Done",
              "pending": "Pending", "running": "Running", "cancelled": "Cancelled",
              "stopped": "Stopped (budget)"}
    kinds = [{"kind": k, "label": FAILURE_KINDS[k], "count": by_kind[k]}
             for k in FAILURE_KINDS if by_kind.get(k)]
    if failed == 0:
        headline = ""
    elif state == "failed" and failed == total:
        headline = f"every call failed ({failed} of {total} jobs)"
    else:
        headline = f"{failed} of {total} jobs failed"
    summary = headline
    if kinds:
        summary += " — " + "; ".join(f"{k['label']}: {k['count']}" for k in kinds)
    data: dict[str, Any] = {
        "state": state,
        "label": labels.get(state, state),
        "has_failures": failed > 0,
        "failed_jobs": failed,
        "headline": headline,
        "summary": summary,
        "by_kind": {k["kind"]: k["count"] for k in kinds},
        "kinds": kinds,
    }
    if first_errors is not None:
        data["first_errors"] = first_errors
    return data


def judge_run_page_outcomes(
    *, runs: Sequence[JudgeRun]
) -> list[tuple[JudgeRun, dict[str, int], dict[str, Any]]]:
    """A page of runs, each with its job counts by status and its `judge_run_outcome` (with
    the first error), in three grouped queries for the page instead of three per run."""
    ids = [r.pk for r in runs]
    counts = judge_run_job_counts(run_ids=ids)
    kinds = judge_run_failure_kinds(run_ids=ids)
    first = judge_run_first_error_texts(run_ids=[i for i in ids if kinds.get(i)])
    out = []
    for r in runs:
        jobs = counts.get(r.pk, {})
        outcome = judge_run_outcome(run=r, jobs=jobs, by_kind=kinds.get(r.pk, {}))
        outcome["first_error"] = first.get(r.pk, "")
        out.append((r, jobs, outcome))
    return out


def judge_run_outcome_for(*, run: JudgeRun) -> dict[str, Any]:
    """`judge_run_outcome` of one run, with its first errors (three queries)."""
    jobs = judge_run_job_counts(run_ids=[run.pk])[run.pk]
    by_kind = judge_run_failure_kinds(run_ids=[run.pk])[run.pk]
    first = judge_run_first_errors(run=run) if by_kind else []
    return judge_run_outcome(run=run, jobs=jobs, by_kind=by_kind, first_errors=first)


def _truthy(value: str, field: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValidationFailed.at(field, f"'{field}' must be true or false")


def verdict_list(*, study: Study, filters: Mapping[str, str]) -> QuerySet[Verdict]:
    """Verdicts of the study's judges, filtered by run, criterion (key or id), candidate
    (name; for pairwise, either side), judge version and scored. Rows are joined, not lazily
    loaded, so a page costs a constant number of queries."""
    qs = Verdict.objects.filter(judge_version__judge__study=study).select_related(
        "criterion", "judge_version__judge", "output__candidate", "output__item",
        "comparison__item", "comparison__output_a__candidate",
        "comparison__output_b__candidate",
    )
    if filters.get("run"):
        try:
            qs = qs.filter(run_id=int(filters["run"]))
        except ValueError:
            raise ValidationFailed.at("run", "'run' must be a run id") from None
    if filters.get("judge_version"):
        try:
            qs = qs.filter(judge_version_id=int(filters["judge_version"]))
        except ValueError:
            raise ValidationFailed.at("judge_version", "'judge_version' must be an id") from None
    if filters.get("criterion"):
        value = filters["criterion"]
        crit = Criterion.objects.filter(rubric__study=study)
        crit = crit.filter(pk=int(value)) if value.isdigit() else crit.filter(key=value)
        qs = qs.filter(criterion__in=crit)
    if filters.get("candidate"):
        name = filters["candidate"]
        qs = qs.filter(
            Q(output__candidate__name=name)
            | Q(comparison__output_a__candidate__name=name)
            | Q(comparison__output_b__candidate__name=name)
        )
    if filters.get("scored"):
        qs = qs.filter(is_scored=_truthy(filters["scored"], "scored"))
    return qs


def judge_run_job_counts(*, run_ids: list[int]) -> dict[int, dict[str, int]]:
    """{run id: {status: count}} for a page of runs, in one grouped query."""
    counts: dict[int, dict[str, int]] = {rid: {} for rid in run_ids}
    for run_id, job_status, n in (
        JudgeJob.objects.filter(run_id__in=run_ids)
        .values_list("run_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[run_id][job_status] = n
    return counts


def rubric_referenced(rubric: RubricVersion, criteria: QuerySet[Criterion]) -> bool:
    """Whether judge work refers to the rubric version's criteria: verdicts, or judge jobs
    (queued work would judge against changed text) (registered with
    `studies.services.rubric_use_register`)."""
    return any(model.objects.filter(criterion__in=criteria).exists()
               for model in (Verdict, JudgeJob))
