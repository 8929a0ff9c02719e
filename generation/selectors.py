"""Reads for candidate runs: progress, errors by kind and the measured figures per candidate."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from studies.models import Study

from .models import GenerationConfig, GenerationJob, GenerationRun, PromptTemplate, RunCandidate


def generation_runs_list(*, study: Study) -> QuerySet[GenerationRun]:
    return GenerationRun.objects.filter(study=study).select_related("template").order_by("-id")


def generation_configs_list(*, study: Study) -> QuerySet[GenerationConfig]:
    return (GenerationConfig.objects.filter(candidate__study=study)
            .select_related("candidate").order_by("candidate_id", "-version"))


def prompt_templates_list(*, study: Study) -> QuerySet[PromptTemplate]:
    return PromptTemplate.objects.filter(study=study).order_by("-version")


def _quantile(sorted_values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def generation_run_progress(*, run: GenerationRun) -> dict[str, Any]:
    """Job counts, errors by kind and measured figures, overall and per candidate."""
    jobs = GenerationJob.objects.filter(run=run)
    by_status: dict[str, int] = {}
    errors: dict[str, int] = {}
    for status, kind, n in jobs.values_list("status", "error_kind").annotate(n=Count("id")):
        by_status[status] = by_status.get(status, 0) + n
        if kind:
            key = f"{kind} (retrying)" if status == GenerationJob.Status.QUEUED else kind
            errors[key] = errors.get(key, 0) + n
    candidates = []
    for rc in RunCandidate.objects.filter(run=run).select_related("config__candidate"):
        mine = jobs.filter(config_id=rc.config_id)
        agg = mine.aggregate(
            done=Count("id", filter=Q(status=GenerationJob.Status.DONE)),
            failed=Count("id", filter=Q(status=GenerationJob.Status.FAILED)),
            finished_with_error=Count("id", filter=Q(
                status__in=[GenerationJob.Status.DONE, GenerationJob.Status.FAILED])
                & ~Q(error_kind="")),
            schema_checked=Count("id", filter=Q(schema_valid__isnull=False)),
            schema_valid=Count("id", filter=Q(schema_valid=True)),
            cost=Sum("cost"),
        )
        latencies = sorted(float(v) for v in mine.filter(
            status=GenerationJob.Status.DONE, latency_ms__isnull=False)
            .values_list("latency_ms", flat=True) if v is not None)
        overheads = sorted(float(v) for v in mine.filter(overhead_ms__isnull=False)
                           .values_list("overhead_ms", flat=True) if v is not None)
        # Streamed calls only (a config with `stream`): time to the first text piece.
        ttfts = sorted(float(v) for v in mine.filter(
            status=GenerationJob.Status.DONE, details__has_key="ttft_ms")
            .values_list("details__ttft_ms", flat=True) if isinstance(v, int | float))
        finished = agg["done"] + agg["failed"]
        load = rc.load or {}
        window = float(load.get("window_s") or 0.0)
        candidates.append({
            "candidate": rc.config.candidate.name,
            "config": {"id": rc.config_id, "version": rc.config.version,
                       "content_hash": rc.config.content_hash},
            "finished": finished,
            "error_rate": (agg["finished_with_error"] / finished) if finished else None,
            "schema_valid_rate": (agg["schema_valid"] / agg["schema_checked"])
            if agg["schema_checked"] else None,
            "latency_ms": {"p50": _quantile(latencies, 0.5), "p95": _quantile(latencies, 0.95),
                           "n": len(latencies)},
            "ttft_ms": {"p50": _quantile(ttfts, 0.5), "p95": _quantile(ttfts, 0.95),
                        "n": len(ttfts)} if ttfts else None,
            "overhead_ms": {"p50": _quantile(overheads, 0.5), "p95": _quantile(overheads, 0.95)},
            "cost": float(agg["cost"] or 0.0),
            "cost_per_1000": (float(agg["cost"] or 0.0) / finished * 1000) if finished else None,
            "mean_in_flight": (float(load.get("busy_s", 0.0)) / window) if window > 0 else None,
        })
    return {"jobs": by_status, "errors_by_kind": errors, "candidates": candidates,
            "calls_made": run.calls_made}


def gate_provenance(*, study: Study) -> list[dict[str, Any]]:
    """Where the operational figures of the study's outputs come from: per candidate and
    candidate run that wrote outputs, the concurrency and when its outputs were measured.

    Read from the outputs as the study holds them now (their job rows), for the selection
    report's gates ("measured at C = 32, 2026-12-07"); candidates whose outputs were brought
    in from elsewhere have no row.
    """
    from django.db.models import Max, Min

    rows = (GenerationJob.objects.filter(config__candidate__study=study, sample_index=0,
                                         output__isnull=False,
                                         output__metadata__generated_by="generation")
            .values("config__candidate__name", "run_id", "run__concurrency")
            .annotate(n=Count("id"), first=Min("finished_at"), last=Max("finished_at"))
            .order_by("config__candidate__name", "run_id"))
    return [{"candidate": r["config__candidate__name"], "run": r["run_id"],
             "concurrency": r["run__concurrency"], "outputs": r["n"],
             "measured_from": r["first"], "measured_to": r["last"]} for r in rows]
