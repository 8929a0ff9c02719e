"""Benchmark: a selection report of 5 candidates x 100,000 items x 10 strata, computed end to end
on PostgreSQL through the production service, and our vectorised prediction-powered estimates
beside a per-cell loop over `ppi_py` on the same cells (issue 14, section 7; figures in
docs/benchmarks.md, "Selection report").

Shape (all synthetic): 100,000 items in 10 strata of unequal size (dimension "segment"), 5
candidates = 500,000 outputs with latency, tokens, cost, error and schema-valid flag; one binary
criterion ("correct") and one judge version = 500,000 verdicts, one per output. Humans: a
stratified sample of 1,000 items with unequal inclusion probabilities per stratum (recorded on
the queue entries), every candidate's output on those items graded by one annotator = 5,000
labels (paired across candidates). The judge agrees with the humans more in some strata than
in others. The locked analysis plan gives a deployment mix over the 10 strata that differs from
the items' shares, a margin, the primary metric and every gate; one candidate fails the p95
latency gate and one the schema-valid gate.

Printed, in one run:

1. The selection snapshot computed by `reports.services.report_compute` (what the Celery task
   and `manage.py report selection` run): wall time per phase (load, fingerprint, compute,
   record), end to end, and the process's peak RSS (`resource.getrusage`).
2. On the same arrays (the human labels and judge verdicts per candidate and stratum, read
   once from the database): the estimates of 5 candidates x 11 cells (10 strata and the mix)
   for the rubric pass rate, and of the 4 paired differences (the mix's best against each
   other candidate) x 11 cells, computed by a per-cell loop calling `ppi_py.ppi_mean_ci` and
   `ppi_py.ppi_mean_pointestimate`, and by `evalstats.ppi.ppi_mean_stratified` (one call per
   candidate or pair, every stratum at once); the ratio of the two times and the largest
   difference between their answers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench .venv/bin/python \\
        bench/selection.py [--reuse] [--params '{"n_resamples": 1000}'] [--repeat 5] \\
        [--skip-report | --skip-ppi] [--profile FILE]

The study is seeded with COPY (reviewhub/bulkcopy.py) in a child process, so seeding does not
count in the measured process's peak RSS; with --reuse a study seeded by an earlier run with the
same data (the seed version is in its name) is kept. `--skip-report` and `--skip-ppi` measure
one part only; --profile writes a cProfile of part 1's report_compute (not of the seeding).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")

SLUG = "bench-selection"
# Bump when the synthetic data changes: --reuse keeps only a study of this version.
DATA_VERSION = 2
SEED = 14
N_ITEMS = 100_000
N_CANDIDATES = 5
N_STRATA = 10
N_LABELLED_ITEMS = 1_000
N_ANNOTATORS = 10
LEVEL = 0.95
CHUNK = 100_000
# Items' shares of the strata (unequal) and the deployment mix the plan re-weights them to.
ITEM_SHARES = np.array([0.20, 0.16, 0.13, 0.11, 0.10, 0.08, 0.07, 0.06, 0.05, 0.04])
MIX = np.array([0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10])
GATES = {"schema_valid_rate": 0.95, "error_rate": 0.05, "latency_p95_ms": 4000,
         "latency_p50_ms": 2000, "cost_per_1000": 5.0, "tokens_per_1000": 2_000_000}


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def study_name() -> str:
    return f"bench selection data v{DATA_VERSION} seed {SEED}"


def label(s: int) -> str:
    return f"s{s:02d}"


def n_outputs() -> int:
    return N_ITEMS * N_CANDIDATES


def n_annotations() -> int:
    return N_LABELLED_ITEMS * N_CANDIDATES


# --- seeding (child process) -------------------------------------------------------------------


def _chunks(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for r in rows:
        batch.append(r)
        if len(batch) >= CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def seed() -> None:
    """Write the synthetic study (module docstring), replacing an earlier one."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from annotations.models import Annotation, Assignment, QueueEntry, SamplingPlan
    from judges.models import Judge, JudgeVersion, Verdict
    from reviewhub.bulkcopy import bulk_insert
    from snapshots.models import ReportSnapshot
    from studies.models import (
        AnalysisPlan,
        Candidate,
        Criterion,
        Item,
        Output,
        RubricVersion,
        StratumDimension,
        Study,
    )

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    rng = np.random.default_rng(SEED)
    users = get_user_model()
    old = Study.objects.filter(slug=SLUG).first()
    if old is not None:
        ReportSnapshot.objects.filter(study=old).delete()
        Annotation.objects.filter(criterion__rubric__study=old).delete()
        Verdict.objects.filter(criterion__rubric__study=old).delete()
        SamplingPlan.objects.filter(study=old).delete()
        old.delete()
    owner, _ = users.objects.get_or_create(username="bench-sel-owner")
    unusable = make_password(None)
    annotators = [
        users.objects.get_or_create(username=f"bench-sel-ann-{a}",
                                    defaults={"is_active": False, "password": unusable})[0].pk
        for a in range(N_ANNOTATORS)
    ]

    item_stratum = rng.choice(N_STRATA, N_ITEMS, p=ITEM_SHARES)
    n_out = n_outputs()
    # Outputs in item-major order: output k is candidate k % 5 on item k // 5.
    out_item = np.repeat(np.arange(N_ITEMS), N_CANDIDATES)
    out_cand = np.tile(np.arange(N_CANDIDATES), N_ITEMS)
    out_stratum = item_stratum[out_item]
    # Human pass probability per candidate x stratum: candidate 0 leads on the mix, candidate 1
    # leads in the last two strata (a flip), the others trail.
    base = np.array([0.86, 0.76, 0.74, 0.70, 0.66])[:, None] + np.zeros((1, N_STRATA))
    base[0, 8:] = 0.74
    base[1, 8:] = 0.93
    human_pass = rng.random(n_out) < base[out_cand, out_stratum]
    # The judge agrees with the humans 95% of the time in the first strata, 70% in the last.
    accuracy = np.linspace(0.95, 0.70, N_STRATA)[out_stratum]
    judge_pass = np.where(rng.random(n_out) < accuracy, human_pass, ~human_pass)
    judge_prob = np.clip(np.where(judge_pass, 0.75, 0.25) + rng.normal(0, 0.15, n_out),
                         0.01, 0.99)
    # Latency (ms): lognormal bodies; candidate 3 has the heavy tail that fails the p95 gate.
    median = np.array([1400.0, 1100.0, 900.0, 800.0, 600.0])[out_cand]
    sigma = np.array([0.25, 0.25, 0.25, 1.1, 0.3])[out_cand]
    latency = np.round(median * np.exp(sigma * rng.standard_normal(n_out)), 1)
    error = rng.random(n_out) < 0.01
    # Candidate 4 breaks the output format 8% of the time: it fails the schema-valid gate.
    schema_valid = rng.random(n_out) >= np.where(out_cand == 4, 0.08, 0.005)
    tokens_in = rng.integers(200, 1200, n_out)
    tokens_out = rng.integers(40, 400, n_out)
    price = np.array([3.0, 2.0, 1.5, 1.0, 0.5])[out_cand] * 1e-6
    cost = np.round((tokens_in + 3 * tokens_out) * price, 8)

    with transaction.atomic():
        study = Study.objects.create(slug=SLUG, name=study_name(), owner=owner,
                                     is_simulated=True)
        StratumDimension.objects.create(
            study=study, key="segment", name="Segment", kind="categorical",
            source="metadata.segment",
            config={"values": [label(s) for s in range(N_STRATA)]},
        )
        rubric = RubricVersion.objects.create(study=study, version=1)
        crit = Criterion.objects.create(rubric=rubric, key="correct", name="correct",
                                        scale="binary", is_hard_gate=True, weight=1.0,
                                        position=0)
        now = timezone.now()
        shares = {label(s): float(MIX[s]) for s in range(N_STRATA)}
        AnalysisPlan.objects.create(
            study=study, version=1, locked_at=now, locked_by=owner, created_by=owner,
            spec={
                "criteria": {"correct": {"metric": "pass_rate", "threshold": 0.7,
                                         "every_stratum": False, "primary": True}},
                "strata": ["segment"],
                "deployment_mix": {"segment": shares},
                "confidence_level": LEVEL,
                "primary_metric": "rubric_pass_rate",
                "margin": 0.02,
                "gates": GATES,
            },
        )
        bulk_insert(Item, [
            {"study_id": study.pk, "external_id": f"i{i}", "input": "question",
             "strata": json.dumps({"segment": label(s)}),
             "metadata": json.dumps({"segment": label(s)})}
            for i, s in enumerate(item_stratum.tolist())
        ])
        item_ids = np.array(Item.objects.filter(study=study).order_by("id")
                            .values_list("id", flat=True))
        public = [0.71, 0.80, 0.69, 0.74, 0.66]  # candidate 1 leads publicly
        cands = [Candidate.objects.create(study=study, name=f"model-{c}",
                                          model_family=f"family-{c}",
                                          public_scores={"mmlu": public[c]}).pk
                 for c in range(N_CANDIDATES)]

        def outputs() -> Iterator[dict[str, Any]]:
            for k in range(n_out):
                yield {"study_id": study.pk, "candidate_id": cands[int(out_cand[k])],
                       "item_id": int(item_ids[out_item[k]]), "text": "answer",
                       "latency_ms": float(latency[k]), "tokens_in": int(tokens_in[k]),
                       "tokens_out": int(tokens_out[k]), "cost": float(cost[k]),
                       "error": "simulated error" if error[k] else "",
                       "schema_valid": bool(schema_valid[k])}

        for batch in _chunks(outputs()):
            bulk_insert(Output, batch)
        # Map (item, candidate) -> output id, whatever order COPY assigned ids in.
        id_of = {
            (item_id, cand_id): oid
            for oid, item_id, cand_id in Output.objects.filter(study=study)
            .values_list("id", "item_id", "candidate_id").iterator(chunk_size=50_000)
        }
        out_ids = np.array([id_of[(int(item_ids[out_item[k]]), cands[int(out_cand[k])])]
                            for k in range(n_out)])
        del id_of
        judge = Judge.objects.create(study=study, name="judge (synthetic)", kind="llm")
        jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="e" * 64).pk

        def verdicts() -> Iterator[dict[str, Any]]:
            for k in range(n_out):
                ok = bool(judge_pass[k])
                yield {"judge_version_id": jv, "criterion_id": crit.pk,
                       "output_id": int(out_ids[k]), "value": "pass" if ok else "fail",
                       "value_num": 1.0 if ok else 0.0, "probability": float(judge_prob[k])}

        for batch in _chunks(verdicts()):
            bulk_insert(Verdict, batch)

        plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
        # Stratified sample of items, equal numbers per stratum: small strata are sampled at a
        # higher rate, so inclusion probabilities differ up to 5x between strata.
        alloc = np.full(N_STRATA, N_LABELLED_ITEMS // N_STRATA)
        alloc[-1] += N_LABELLED_ITEMS - alloc.sum()
        sampled_items: list[int] = []
        pi_item = np.zeros(N_ITEMS)
        for s in range(N_STRATA):
            members = np.flatnonzero(item_stratum == s)
            sampled_items.extend(rng.choice(members, alloc[s], replace=False).tolist())
            pi_item[members] = alloc[s] / members.size
        sampled = [i * N_CANDIDATES + c for i in sampled_items for c in range(N_CANDIDATES)]
        bulk_insert(QueueEntry, [
            {"plan_id": plan.pk, "output_id": int(out_ids[k]), "needed": 1, "done_count": 1,
             "leased_count": 0, "sort_key": int(rng.integers(0, 2**31)),
             "stratum": label(int(out_stratum[k])), "draw_kind": "random",
             "inclusion_probability": float(pi_item[out_item[k]])}
            for k in sampled
        ])
        entry_of = dict(QueueEntry.objects.filter(plan=plan).values_list("output_id", "id"))
        who = rng.integers(0, N_ANNOTATORS, len(sampled))
        bulk_insert(Assignment, [
            {"entry_id": entry_of[int(out_ids[k])], "annotator_id": annotators[int(a)],
             "status": "submitted", "finished_at": now}
            for k, a in zip(sampled, who, strict=True)
        ])
        assignment_of = dict(Assignment.objects.filter(entry__plan=plan)
                             .values_list("entry_id", "id"))
        # The humans' labels are the truth with 5% disagreement (one annotator per output).
        slip = rng.random(len(sampled)) < 0.05
        bulk_insert(Annotation, [
            {"annotator_id": annotators[int(a)], "criterion_id": crit.pk,
             "output_id": int(out_ids[k]),
             "assignment_id": assignment_of[entry_of[int(out_ids[k])]], "plan_id": plan.pk,
             "value": "pass" if passed else "fail", "value_num": 1.0 if passed else 0.0,
             "severity": None if passed else 3, "source": "ui", "created_at": now}
            for k, a, f in zip(sampled, who, slip, strict=True)
            for passed in [bool(human_pass[k]) != bool(f)]
        ])
    with connection.cursor() as cur:
        cur.execute("ANALYZE judges_verdict; ANALYZE annotations_annotation; "
                    "ANALYZE annotations_queueentry; ANALYZE annotations_assignment; "
                    "ANALYZE studies_output; ANALYZE studies_item")
    print(f"seeded {n_out:,} outputs, {n_out:,} verdicts, {n_annotations():,} human labels "
          f"(COPY) in {time.perf_counter() - t0:.1f} s; seeding peak RSS {rss_mib():.0f} MiB "
          f"(child process, not counted below)")


def reusable() -> bool:
    """True when the database holds this benchmark's study, complete."""
    from annotations.models import Annotation
    from judges.models import Verdict
    from studies.models import Study

    study = Study.objects.filter(slug=SLUG).first()
    if study is None or study.name != study_name():
        return False
    return (Verdict.objects.filter(criterion__rubric__study=study).count() == n_outputs()
            and Annotation.objects.filter(criterion__rubric__study=study).count()
            == n_annotations())


# --- part 1: the selection snapshot, end to end ----------------------------------------------


def _timed(times: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[key] = times.get(key, 0.0) + time.perf_counter() - t

    return wrapper


def run_report(params: dict[str, Any], profile: str | None = None) -> float | None:
    """Compute one selection snapshot through report_compute and print the figures; returns the
    end-to-end seconds (None when the selection kind is not registered)."""
    from django.db import connection

    from reports import kinds
    from reports.services import report_compute, report_snapshot_create
    from snapshots.models import ReportSnapshot
    from studies.models import Study

    if "selection" not in kinds.kind_names():
        print("part 1 skipped: the report kind 'selection' is not registered yet")
        return None
    study = Study.objects.get(slug=SLUG)
    ReportSnapshot.objects.filter(study=study, kind="selection").delete()
    times: dict[str, float] = {}
    # Timing wrappers around the kind's hooks, in the order the service calls them.
    spec = kinds.kind_get("selection")
    hooks: dict[str, Any] = {
        "load": _timed(times, "load", spec.load),
        "fingerprint": _timed(times, "fingerprint", spec.fingerprint),
        "compute": _timed(times, "compute", spec.compute),
    }
    if spec.load_with_plan is not None:
        hooks["load_with_plan"] = _timed(times, "load", spec.load_with_plan)
    if spec.record is not None:
        hooks["record"] = _timed(times, "record", spec.record)
    kinds._CACHE["selection"] = replace(spec, **hooks)
    snapshot = report_snapshot_create(study=study, kind="selection", params=params,
                                      created_by=None)
    print(f"params: {json.dumps(snapshot.params, sort_keys=True)}")
    connection.close()  # a fresh connection, as a worker's task would have
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    snapshot = report_compute(report_id=snapshot.pk)
    total = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    kinds._CACHE["selection"] = spec
    if snapshot.status != ReportSnapshot.Status.DONE:
        raise SystemExit(f"snapshot failed: {snapshot.error}")
    result: dict[str, Any] = snapshot.result or {}
    other = total - sum(times.values())
    print(f"phases: load {times.get('load', 0):.2f} s, fingerprint "
          f"{times.get('fingerprint', 0):.2f} s, compute {times.get('compute', 0):.2f} s, "
          f"record {times.get('record', 0):.2f} s, lifecycle (claim, result JSON, commit) "
          f"{other:.2f} s")
    peak = rss_mib()
    print(f"end to end (report_compute): {total:.2f} s; peak RSS {peak:.0f} MiB; CPU time "
          f"{cpu:.2f} s")
    print(f"target < 10 s end to end: {'met' if total < 10 else 'missed'}; "
          f"< 2 GB: {'met' if peak < 2048 else 'missed'}")
    print(f"result: {len(result.get('estimates', []))} estimates, "
          f"{len(result.get('differences', []))} differences, "
          f"{len(result.get('gates', []))} gate rows; flips "
          f"{[(f['stratum'], f['best']) for f in result.get('flips', [])]}; gate failures "
          f"{result.get('gate_failures')}; decision "
          f"{(result.get('decision') or {}).get('verdict')} "
          f"{(result.get('decision') or {}).get('candidate')}")
    return total


# --- part 2: our vectorised PPI beside a per-cell ppi_py loop ----------------------------------


@dataclass(frozen=True)
class Cells:
    """Per candidate: the human label, judge verdict and stratum code of its outputs, split
    into labelled (a human label exists) and unlabelled."""

    y: list[np.ndarray]
    f_l: list[np.ndarray]
    s_l: list[np.ndarray]
    f_u: list[np.ndarray]
    s_u: list[np.ndarray]
    # Per candidate: output order of the labelled items, so pairs line up item by item.
    items_l: list[np.ndarray]
    items_u: list[np.ndarray]


def load_cells() -> Cells:
    """Read the arrays once (untimed): one row per output with its judge verdict and, when
    graded, its human label."""
    from django.db import connection

    from studies.models import Study

    study = Study.objects.get(slug=SLUG)
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT o.candidate_id, o.item_id, i.strata->>'segment', v.value_num, a.value_num
            FROM studies_output o
            JOIN studies_item i ON i.id = o.item_id
            JOIN judges_verdict v ON v.output_id = o.id
            LEFT JOIN annotations_annotation a ON a.output_id = o.id
            WHERE o.study_id = %s
            ORDER BY o.candidate_id, o.item_id
            """,
            [study.pk],
        )
        rows = cur.fetchall()
    cand = np.array([r[0] for r in rows])
    item = np.array([r[1] for r in rows])
    stratum = np.array([int(r[2][1:]) for r in rows])
    f = np.array([r[3] for r in rows], dtype=float)
    y = np.array([np.nan if r[4] is None else r[4] for r in rows], dtype=float)
    del rows
    out = Cells([], [], [], [], [], [], [])
    for c in np.unique(cand):
        m = cand == c
        lab = m & ~np.isnan(y)
        unl = m & np.isnan(y)
        out.y.append(y[lab])
        out.f_l.append(f[lab])
        out.s_l.append(stratum[lab])
        out.f_u.append(f[unl])
        out.s_u.append(stratum[unl])
        out.items_l.append(item[lab])
        out.items_u.append(item[unl])
    return out


def _workload(cells: Cells, best: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray,
                                                        np.ndarray, np.ndarray]]:
    """The 5 candidates' arrays and the 4 paired differences (best minus each other), on items
    both were labelled (or not labelled) on: (name, y, f_l, s_l, f_u, s_u)."""
    work = [(f"model-{c}", cells.y[c], cells.f_l[c], cells.s_l[c], cells.f_u[c], cells.s_u[c])
            for c in range(len(cells.y))]
    for c in range(len(cells.y)):
        if c == best:
            continue
        # Every candidate answered every item and a labelled item has every candidate's
        # output labelled, so the sorted item arrays line up.
        assert np.array_equal(cells.items_l[c], cells.items_l[best])
        assert np.array_equal(cells.items_u[c], cells.items_u[best])
        work.append((f"model-{best} - model-{c}", cells.y[best] - cells.y[c],
                     cells.f_l[best] - cells.f_l[c], cells.s_l[c],
                     cells.f_u[best] - cells.f_u[c], cells.s_u[c]))
    return work


def ppi_py_loop(work: list[Any], mix: dict[int, float]) -> dict[tuple[str, Any], tuple[float, ...]]:
    """The per-cell loop: for every candidate (or pair) and stratum, ppi_py's point estimate
    and interval; the mix cell by ppi_py's weighted estimate (weights re-weighting every
    stratum to its mix share)."""
    import ppi_py

    alpha = 1 - LEVEL
    out: dict[tuple[str, Any], tuple[float, ...]] = {}
    for name, y, f_l, s_l, f_u, s_u in work:
        for s in mix:
            ml, mu = s_l == s, s_u == s
            point = ppi_py.ppi_mean_pointestimate(y[ml], f_l[ml], f_u[mu])
            lo, hi = ppi_py.ppi_mean_ci(y[ml], f_l[ml], f_u[mu], alpha=alpha)
            out[(name, s)] = (float(np.squeeze(point)), float(np.squeeze(lo)),
                              float(np.squeeze(hi)))
        n_l = np.bincount(s_l, minlength=len(mix))
        n_u = np.bincount(s_u, minlength=len(mix))
        share = np.array([mix[s] for s in range(len(mix))])
        w_l, w_u = (share / n_l)[s_l], (share / n_u)[s_u]
        point = ppi_py.ppi_mean_pointestimate(y, f_l, f_u, w=w_l, w_unlabeled=w_u)
        lo, hi = ppi_py.ppi_mean_ci(y, f_l, f_u, alpha=alpha, w=w_l, w_unlabeled=w_u)
        out[(name, "mix")] = (float(np.squeeze(point)), float(np.squeeze(lo)),
                              float(np.squeeze(hi)))
    return out


def ours(work: list[Any], mix: dict[int, float]) -> dict[tuple[str, Any], tuple[Any, ...]]:
    """The same cells by evalstats.ppi: one stratified call per candidate or pair."""
    from evalstats.ppi import ppi_mean_stratified

    out: dict[tuple[str, Any], tuple[Any, ...]] = {}
    for name, y, f_l, s_l, f_u, s_u in work:
        res = ppi_mean_stratified(y, f_l, s_l, f_u, s_u, mix=mix, level=LEVEL)
        for s, est in res.per_stratum.items():
            out[(name, s)] = (est.value, est.ci_low, est.ci_high, est.se or 0.0)
        if res.mix is not None:
            out[(name, "mix")] = (res.mix.value, res.mix.ci_low, res.mix.ci_high,
                                  res.mix.se or 0.0)
    return out


def _interleaved(fns: list[Callable[[], Any]], repeat: int) -> list[tuple[float, Any]]:
    """Best time and last answer of each function, run in turn `repeat` times, so that both
    sides of a ratio see the same load of the shared machine."""
    best = [float("inf")] * len(fns)
    values: list[Any] = [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            values[i] = fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return list(zip(best, values, strict=True))


def run_ppi(repeat: int) -> None:
    """Part 2 (module docstring)."""
    from scipy import stats

    t = time.perf_counter()
    cells = load_cells()
    mix = {s: float(MIX[s]) for s in range(N_STRATA)}
    # The mix's best by the judge-only mix estimate (what a reader of the report would pair
    # the others against).
    naive = [sum(mix[s] * cells.f_u[c][cells.s_u[c] == s].mean() for s in mix)
             for c in range(len(cells.y))]
    best = int(np.argmax(naive))
    work = _workload(cells, best)
    n_cells = len(work) * (N_STRATA + 1)
    print(f"part 2: arrays read in {time.perf_counter() - t:.1f} s (untimed): "
          f"{sum(len(c) for c in cells.y):,} labelled and {sum(len(c) for c in cells.f_u):,} "
          f"unlabelled outputs; {len(work)} series (5 candidates, {len(work) - 5} paired "
          f"differences) x {N_STRATA + 1} cells = {n_cells} cells")
    (loop_s, theirs), (ours_s, mine) = _interleaved(
        [lambda: ppi_py_loop(work, mix), lambda: ours(work, mix)], repeat)
    print(f"per-cell ppi_py loop: {loop_s * 1000:.1f} ms ({2 * n_cells} ppi_py calls); "
          f"evalstats.ppi ({len(work)} stratified calls): {ours_s * 1000:.1f} ms (best of "
          f"{repeat}, interleaved)")
    ratio = loop_s / ours_s
    print(f"ratio: {ratio:.1f}x (goal >= 10x: {'met' if ratio >= 10 else 'missed'})")
    # Same answers: every stratum cell to ppi_py's figures; the mix to the stratified
    # combination of ppi_py's stratum figures (se from the interval's half-width).
    z = stats.norm.ppf(0.5 + LEVEL / 2)
    worst = 0.0
    for name, *_ in work:
        for s in mix:
            a, b = theirs[(name, s)], mine[(name, s)]
            worst = max(worst, *(abs(x - y) for x, y in zip(a, b[:3], strict=True)))
        value = sum(mix[s] * theirs[(name, s)][0] for s in mix)
        se = float(np.sqrt(sum((mix[s] * (theirs[(name, s)][2] - theirs[(name, s)][1])
                                / (2 * z)) ** 2 for s in mix)))
        worst = max(worst, abs(value - mine[(name, "mix")][0]),
                    abs(se - mine[(name, "mix")][3]))
    print(f"largest difference from ppi_py over every stratum cell and the stratified mix: "
          f"{worst:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reuse", action="store_true",
                    help="keep the study of an earlier run when it holds this data")
    ap.add_argument("--params", default="{}", help="selection parameters (JSON object)")
    ap.add_argument("--repeat", type=int, default=5, help="timing repeats of part 2 (best)")
    ap.add_argument("--skip-report", action="store_true", help="measure only part 2")
    ap.add_argument("--skip-ppi", action="store_true", help="measure only part 1")
    ap.add_argument("--profile", help="write a cProfile of report_compute to this file")
    ap.add_argument("--seed-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.seed_only:
        seed()
        return
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(f"machine: {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.reuse and reusable():
        print("reusing the study of an earlier run")
    else:
        subprocess.run([sys.executable, __file__, "--seed-only"], check=True)
    if not args.skip_report:
        run_report(json.loads(args.params), args.profile)
    if not args.skip_ppi:
        run_ppi(args.repeat)


if __name__ == "__main__":
    main()
