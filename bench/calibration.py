"""Benchmark: a calibration snapshot of 1,000,000 judge verdicts and 100,000 human annotations,
computed end to end on PostgreSQL through the production service (issue 13, section 9;
figures in docs/benchmarks.md, "Calibration snapshot").

Shape: 62,500 items x 2 candidates = 125,000 outputs; 4 criteria (three binary, two of them
hard gates, and one ordinal 1-5 with pass threshold 4); 10 strata (dimension "segment");
2 judge versions (one reports P(pass), one only its verdict) = 4 x 2 x 125,000 = 1,000,000
verdicts. Humans: a stratified random sample of 11,900 outputs with unequal inclusion
probabilities per stratum (recorded on the queue entries, so the curves are weighted) plus
600 escalated outputs (left out of the fits), 2 annotators each, every criterion graded:
12,500 x 2 x 4 = 100,000 annotations, with severities on failures and 200 adjudications.
The humans pass an output with a known, stratum-dependent miscalibration of the judge's
probability. A locked analysis plan names the strata and the costs.

The snapshot is computed by `reports.services.report_compute` (what the Celery task and
`manage.py report calibration` run) with the calibration parameters' defaults: 5-fold
selection, 200 bootstrap resamples of the diagnostics and costs, `curve_resamples` of the
P(pass) bands. Printed: wall time per phase (load = the evidence read; fingerprint; fit =
curves, diagnostics, costs, bands; rows = building the CalibratedScore rows; write = COPY of
those rows in the transaction that records the result), end to end, the process's peak RSS
(`resource.getrusage`) and the rows written.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench .venv/bin/python \
        bench/calibration.py [--reuse] [--params '{"curve_resamples": 100}'] [--profile FILE]

The study is seeded with COPY (reviewhub/bulkcopy.py) in a child process, so seeding does not
count in the measured process's peak RSS; with --reuse a study seeded by an earlier run with
the same data (the seed version is in its name) is kept. --profile writes a cProfile of the
computation (not of the seeding). --scale 0.2 seeds and measures a fifth of the study (200,000
verdicts; for profiling). Besides wall time, each phase's CPU time of this process is printed
(on a shared machine the steadier figure), and the time spent in the cyclic garbage collector.

--compare N runs N rounds of the last commit's calibration results/compute/services modules
(`git show HEAD:...`, imported as "calibration_head"; frames and models are the working tree's)
then the working tree's, one process each on the same study, prints their figures side by side
and fails unless every run stored the same rows (an md5 over every value but id, snapshot and
created_at, in subject order) and the same result JSON: old and new measured in the same
conditions, and a check that a change altered no result.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")

SLUG = "bench-calibration"
# Bump when the synthetic data changes: --reuse keeps only a study of this version.
DATA_VERSION = 1
SEED = 13
N_ITEMS = 62_500
N_CANDIDATES = 2
N_STRATA = 10
N_ANNOTATORS = 20
HUMANS_PER_OUTPUT = 2
N_RANDOM = 11_900
N_ESCALATED = 600
N_ADJUDICATED = 200
CRITERIA = (
    # key, scale, hard gate, weight
    ("correct", "binary", True, 1.0),
    ("complete", "binary", False, 1.0),
    ("safe", "binary", True, 1.0),
    ("tone", "ordinal", False, 0.5),
)
JUDGES = ("judge-prob", "judge-verdict")
CHUNK = 100_000
SCALE = 1.0


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def study_name() -> str:
    scale = "" if SCALE == 1.0 else f" scale {SCALE:g}"
    return f"bench calibration data v{DATA_VERSION} seed {SEED}{scale}"


def scale_set(scale: float) -> None:
    """Shrink (or grow) the study by `scale` (items and human sample alike; the shape, the
    criteria, strata and judges stay), e.g. 0.2 for 200,000 verdicts, for profiling."""
    global SCALE, N_ITEMS, N_RANDOM, N_ESCALATED, N_ADJUDICATED
    SCALE = scale
    N_ITEMS = round(62_500 * scale)
    N_RANDOM = round(11_900 * scale)
    N_ESCALATED = round(600 * scale)
    N_ADJUDICATED = round(200 * scale)


def n_verdicts() -> int:
    return N_ITEMS * N_CANDIDATES * len(CRITERIA) * len(JUDGES)


def n_annotations() -> int:
    return (N_RANDOM + N_ESCALATED) * HUMANS_PER_OUTPUT * len(CRITERIA)


# --- seeding (child process) -------------------------------------------------------------------


def _chunks(rows: Iterator[tuple[Any, ...]], names: tuple[str, ...]) -> Iterator[list[dict]]:
    batch: list[dict[str, Any]] = []
    for r in rows:
        batch.append(dict(zip(names, r, strict=True)))
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
    from scipy.special import expit, logit

    from annotations.models import (
        Adjudication,
        Annotation,
        Assignment,
        QueueEntry,
        SamplingPlan,
    )
    from calibration.models import CalibratedScore
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
        CalibratedScore.objects.filter(study=old).delete()
        ReportSnapshot.objects.filter(study=old).delete()
        Adjudication.objects.filter(criterion__rubric__study=old).delete()
        Annotation.objects.filter(criterion__rubric__study=old).delete()
        Verdict.objects.filter(criterion__rubric__study=old).delete()
        old.delete()
    owner, _ = users.objects.get_or_create(username="bench-cal-owner")
    unusable = make_password(None)
    annotators = []
    for a in range(N_ANNOTATORS):
        u, _ = users.objects.get_or_create(
            username=f"bench-cal-ann-{a}", defaults={"is_active": False, "password": unusable}
        )
        annotators.append(u.pk)

    n_out = N_ITEMS * N_CANDIDATES
    item_stratum = rng.integers(0, N_STRATA, N_ITEMS)
    out_item = np.repeat(np.arange(N_ITEMS), N_CANDIDATES)
    out_cand = np.tile(np.arange(N_CANDIDATES), N_ITEMS)
    out_stratum = item_stratum[out_item]
    # The judge's probability q per output x criterion; humans pass with a stratum-dependent
    # distortion of it (slope and offset on the logit scale), the known miscalibration.
    q = rng.beta(1.6, 1.4, (n_out, len(CRITERIA)))
    slope = np.linspace(0.6, 1.6, N_STRATA)[out_stratum][:, None]
    offset = np.linspace(-0.8, 0.6, N_STRATA)[out_stratum][:, None]
    truth = expit(slope * logit(np.clip(q, 1e-4, 1 - 1e-4)) + offset)
    human_pass = rng.random(truth.shape) < truth

    with transaction.atomic():
        study = Study.objects.create(slug=SLUG, name=study_name(), owner=owner,
                                     is_simulated=True)
        StratumDimension.objects.create(study=study, key="segment", name="Segment",
                                        kind="categorical", source="metadata.segment")
        rubric = RubricVersion.objects.create(study=study, version=1)
        crits = []
        for pos, (key, scale, gate, weight) in enumerate(CRITERIA):
            points = ([{"value": v, "label": str(v)} for v in range(1, 6)]
                      if scale == "ordinal" else [])
            crits.append(Criterion.objects.create(
                rubric=rubric, key=key, name=key, scale=scale, points=points,
                pass_threshold=4 if scale == "ordinal" else None, is_hard_gate=gate,
                weight=weight, position=pos,
            ))
        now = timezone.now()
        AnalysisPlan.objects.create(
            study=study, version=1, locked_at=now, locked_by=owner, created_by=owner,
            spec={
                "strata": ["segment"],
                "costs": {"unit": "EUR", "severity": {"1": 0.5, "2": 2.0, "3": 8.0,
                                                      "4": 25.0, "5": 80.0},
                          "false_fail": 2.0, "review": 1.5},
            },
        )
        bulk_insert(Item, [
            {"study_id": study.pk, "external_id": f"i{i}", "input": "question",
             "strata": json.dumps({"segment": f"s{s:02d}"}),
             "metadata": json.dumps({"segment": f"s{s:02d}"})}
            for i, s in enumerate(item_stratum)
        ])
        item_ids = np.array(Item.objects.filter(study=study).order_by("id")
                            .values_list("id", flat=True))
        cands = [Candidate.objects.create(study=study, name=f"model-{c}").pk
                 for c in range(N_CANDIDATES)]
        bulk_insert(Output, [
            {"study_id": study.pk, "candidate_id": cands[int(c)], "item_id": int(item_ids[i]),
             "text": "answer"}
            for i, c in zip(out_item, out_cand, strict=True)
        ])
        out_ids = np.array(Output.objects.filter(study=study).order_by("id")
                           .values_list("id", flat=True))
        jvs = []
        for j, name in enumerate(JUDGES):
            judge = Judge.objects.create(study=study, name=name, kind="llm")
            jvs.append(JudgeVersion.objects.create(judge=judge, version=1,
                                                   content_hash=f"{j:x}" * 64).pk)

        def verdicts() -> Iterator[tuple[Any, ...]]:
            noise = rng.normal(0.0, 0.12, (len(JUDGES), *q.shape))
            for ci, (crit, (_k, scale, _g, _w)) in enumerate(zip(crits, CRITERIA, strict=True)):
                for j, jv in enumerate(jvs):
                    seen = np.clip(q[:, ci] + (noise[j, :, ci] if j else 0.0), 0.0, 1.0)
                    if scale == "ordinal":
                        level = np.clip(np.rint(1 + 4 * seen), 1, 5).astype(int)
                        values = [str(v) for v in level]
                        nums = level.astype(float)
                    else:
                        ok = seen >= 0.5
                        values = np.where(ok, "pass", "fail").tolist()
                        nums = ok.astype(float)
                    probs = q[:, ci] if j == 0 else [None] * n_out
                    for k in range(n_out):
                        prob = probs[k]
                        yield (jv, crit.pk, int(out_ids[k]), values[k], float(nums[k]),
                               None if prob is None else float(prob))

        names: tuple[str, ...] = ("judge_version_id", "criterion_id", "output_id", "value",
                                  "value_num", "probability")
        for batch in _chunks(verdicts(), names):
            bulk_insert(Verdict, batch)

        plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric,
                                           k=HUMANS_PER_OUTPUT)
        # Stratified sample of fixed size per stratum, unequal allocation: pi varies 2.5x.
        share = np.linspace(1.0, 2.5, N_STRATA)
        sizes = np.bincount(out_stratum, minlength=N_STRATA)
        alloc = np.floor(N_RANDOM * share * sizes / (share * sizes).sum()).astype(int)
        alloc[-1] += N_RANDOM - alloc.sum()
        drawn: list[int] = []
        pis = np.zeros(n_out)
        for s in range(N_STRATA):
            members = np.flatnonzero(out_stratum == s)
            drawn.extend(rng.choice(members, alloc[s], replace=False).tolist())
            pis[members] = alloc[s] / members.size
        rest = np.setdiff1d(np.arange(n_out), np.array(drawn))
        escalated = rng.choice(rest, N_ESCALATED, replace=False).tolist()
        entry_rows = [
            {"plan_id": plan.pk, "output_id": int(out_ids[k]), "needed": HUMANS_PER_OUTPUT,
             "done_count": HUMANS_PER_OUTPUT, "leased_count": 0,
             "sort_key": int(rng.integers(0, 2**31)), "stratum": f"s{out_stratum[k]:02d}",
             "draw_kind": kind, "inclusion_probability": pi}
            for kind, ks in (("random", drawn), ("escalation", escalated))
            for k in ks
            for pi in [float(pis[k]) if kind == "random" else None]
        ]
        bulk_insert(QueueEntry, entry_rows)
        entry_ids = list(QueueEntry.objects.filter(plan=plan).order_by("id")
                         .values_list("id", flat=True))
        sampled = [*drawn, *escalated]
        pairs = [rng.choice(N_ANNOTATORS, HUMANS_PER_OUTPUT, replace=False)
                 for _ in sampled]
        bulk_insert(Assignment, [
            {"entry_id": e, "annotator_id": annotators[int(a)], "status": "submitted",
             "finished_at": now}
            for e, pair in zip(entry_ids, pairs, strict=True) for a in pair
        ])
        assignment_ids = iter(Assignment.objects.filter(entry__plan=plan).order_by("id")
                              .values_list("id", flat=True))

        def annotations() -> Iterator[tuple[Any, ...]]:
            per = [(k, int(a), next(assignment_ids)) for k, pair in zip(sampled, pairs,
                                                                          strict=True)
                   for a in pair]
            flip = rng.random((len(per), len(CRITERIA))) < 0.08
            level_hi = rng.integers(4, 6, (len(per), len(CRITERIA)))
            level_lo = rng.integers(1, 4, (len(per), len(CRITERIA)))
            severity = np.minimum(5, 1 + rng.poisson(1.3, (len(per), len(CRITERIA))))
            for row, (k, a, asg) in enumerate(per):
                esc = k in escalated_set
                for ci, (crit, (_key, scale, _g, _w)) in enumerate(zip(crits, CRITERIA,
                                                                       strict=True)):
                    # Escalated outputs: the humans pass them whatever the truth, so a fit
                    # that let escalations in would be pulled up.
                    passed = True if esc else bool(human_pass[k, ci]) != bool(flip[row, ci])
                    if scale == "ordinal":
                        level = int(level_hi[row, ci] if passed else level_lo[row, ci])
                        value, num = str(level), float(level)
                    else:
                        value, num = ("pass", 1.0) if passed else ("fail", 0.0)
                    sev = None if passed else int(severity[row, ci])
                    yield (annotators[a], crit.pk, int(out_ids[k]), asg, plan.pk, value, num,
                           sev, "ui", now)

        escalated_set = set(escalated)
        names = ("annotator_id", "criterion_id", "output_id", "assignment_id", "plan_id",
                 "value", "value_num", "severity", "source", "created_at")
        for batch in _chunks(annotations(), names):
            bulk_insert(Annotation, batch)
        adjudicated = rng.choice(np.array(drawn), N_ADJUDICATED, replace=False)
        bulk_insert(Adjudication, [
            {"criterion_id": crits[0].pk, "output_id": int(out_ids[k]),
             "value": "pass" if human_pass[k, 0] else "fail", "adjudicated_by_id": owner.pk}
            for k in adjudicated
        ])
    with connection.cursor() as cur:
        cur.execute("ANALYZE judges_verdict; ANALYZE annotations_annotation; "
                    "ANALYZE annotations_queueentry; ANALYZE annotations_assignment; "
                    "ANALYZE studies_output; ANALYZE studies_item")
    print(f"seeded {n_out:,} outputs, {n_verdicts():,} verdicts, {n_annotations():,} "
          f"annotations (COPY) in {time.perf_counter() - t0:.1f} s; seeding peak RSS "
          f"{rss_mib():.0f} MiB (child process, not counted below)")


def reusable() -> bool:
    """True when the database holds this benchmark's study, complete."""
    from annotations.models import Annotation
    from judges.models import Verdict
    from studies.models import Study

    study = Study.objects.filter(slug=SLUG).first()
    if study is None or study.name != study_name():
        return False
    return (Verdict.objects.filter(criterion__rubric__study=study).count() == n_verdicts()
            and Annotation.objects.filter(criterion__rubric__study=study).count()
            == n_annotations())


# --- the measured run ---------------------------------------------------------------------------


def _timed(times: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` adding its wall time to times[key] and this process's CPU time to
    times["cpu:" + key] (on a shared machine the CPU time is the steadier figure)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            times[key] = times.get(key, 0.0) + time.perf_counter() - t
            times[f"cpu:{key}"] = times.get(f"cpu:{key}", 0.0) + time.process_time() - c

    return wrapper


ROOT = Path(__file__).resolve().parent.parent
# The calibration modules --code head reads from the last commit (`git show`); the others
# (frames, models) are the working tree's, so a comparison isolates these.
HEAD_MODULES = ("results", "scoring", "score_rows", "compute", "services")


def head_modules() -> dict[str, Any]:
    """The last commit's calibration/{results,scoring,score_rows,compute,services}.py (those it
    has) imported as the package "calibration_head" (their relative imports of frames and
    models resolve to the working tree's), for measuring old and new code in the same
    conditions."""
    import types

    import calibration.frames
    import calibration.models

    pkg = types.ModuleType("calibration_head")
    pkg.__path__ = []
    sys.modules["calibration_head"] = pkg
    sys.modules["calibration_head.frames"] = calibration.frames
    sys.modules["calibration_head.models"] = calibration.models
    out: dict[str, Any] = {}
    for name in HEAD_MODULES:
        shown = subprocess.run(["git", "show", f"HEAD:calibration/{name}.py"], cwd=ROOT,
                               capture_output=True)
        if shown.returncode != 0:  # a module the last commit does not have yet
            continue
        src = shown.stdout
        mod = types.ModuleType(f"calibration_head.{name}")
        mod.__package__ = "calibration_head"
        sys.modules[mod.__name__] = mod
        exec(compile(src, f"HEAD:calibration/{name}.py", "exec"), mod.__dict__)
        out[name] = mod
    return out


def rows_digest(snapshot_id: int) -> str:
    """md5 over every stored value of a snapshot's rows but id, snapshot_id and created_at,
    in (subject, criterion) order: equal digests, identical rows."""
    from django.db import connection

    from calibration.models import CalibratedScore

    skip = {"id", "snapshot_id", "created_at"}
    cols = [f.column for f in CalibratedScore._meta.concrete_fields if f.column not in skip]
    row = "concat_ws('|', " + ", ".join(
        f"coalesce(\"{c}\"::text, 'NULL')" for c in cols) + ")"
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT md5(string_agg({row}, E'\\n' ORDER BY output_id, comparison_id, "
            "criterion_key)), count(*) FROM calibration_calibratedscore WHERE snapshot_id = %s",
            [snapshot_id],
        )
        digest, _n = cur.fetchone()
    return str(digest)


def run(params: dict[str, Any], profile: str | None, code: str = "new") -> None:
    """Compute one calibration snapshot through report_compute and print the figures
    (`code` "head": with the last commit's calibration modules, `head_modules`)."""
    from django.db import connection

    import calibration.compute as compute_mod
    from calibration.models import CalibratedScore
    from reports import kinds
    from reports.services import report_compute, report_snapshot_create
    from snapshots.models import ReportSnapshot
    from studies.models import Study

    study = Study.objects.get(slug=SLUG)
    # Earlier runs' snapshots and rows go first (untimed), so every run writes into a table
    # of the same size.
    CalibratedScore.objects.filter(study=study).delete()
    ReportSnapshot.objects.filter(study=study).delete()
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE calibration_calibratedscore")
    times: dict[str, float] = {}
    # Timing wrappers around the kind's hooks (the service calls them in this order) and
    # around the per-row step of the computation; nothing else changes.
    spec = kinds.kind_get("calibration")
    if code == "head":
        head = head_modules()
        compute_mod = head["compute"]
        writer = head["services"].calibrated_scores_write

        def record(study_id: int, snapshot_id: int, result: Any) -> None:
            writer(study_id=study_id, snapshot_id=snapshot_id, rows=result.scores)

        spec = replace(
            spec, load_with_plan=compute_mod.calibration_inputs_load,
            fingerprint=compute_mod.calibration_fingerprint,
            compute=compute_mod.calibration_compute, record=record,
        )
    assert spec.load_with_plan is not None and spec.record is not None
    kinds._CACHE["calibration"] = replace(
        spec,
        load_with_plan=_timed(times, "load", spec.load_with_plan),
        fingerprint=_timed(times, "fingerprint", spec.fingerprint),
        compute=_timed(times, "compute", spec.compute),
        record=_timed(times, "write", spec.record),
    )
    for name in getattr(compute_mod, "ROW_STEPS", ("_rubric_rows",)):
        setattr(compute_mod, name, _timed(times, "rows", getattr(compute_mod, name)))
    # The P(pass) bands step: `p_bands` since calibration/scoring.py, `_bands` before.
    bands_name = "p_bands" if hasattr(compute_mod, "p_bands") else "_bands"
    setattr(compute_mod, bands_name, _timed(times, "bands", getattr(compute_mod, bands_name)))
    snapshot = report_snapshot_create(study=study, kind="calibration", params=params,
                                      created_by=None)
    print(f"params: {json.dumps(snapshot.params, sort_keys=True)}")
    connection.close()  # a fresh connection, as a worker's task would have
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    gc_time = [0.0, 0.0, 0]  # seconds in the cyclic collector, start of the current one, count

    def gc_watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]
            gc_time[2] += 1

    gc.callbacks.append(gc_watch)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    snapshot = report_compute(report_id=snapshot.pk)
    total = time.perf_counter() - t0
    gc.callbacks.remove(gc_watch)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    if snapshot.status != ReportSnapshot.Status.DONE:
        raise SystemExit(f"snapshot failed: {snapshot.error}")
    written = CalibratedScore.objects.filter(snapshot_id=snapshot.pk).count()
    result: dict[str, Any] = snapshot.result or {}
    fit = times.get("compute", 0.0) - times.get("rows", 0.0)
    other = total - sum(times.get(k, 0.0) for k in ("load", "fingerprint", "compute", "write"))
    print(f"cells: {len(result['cells'])}; warnings: {len(result['warnings'])}")
    for w in result["warnings"][:5]:
        print(f"  warning: {w}")
    print(
        f"phases: load {times.get('load', 0):.2f} s, fingerprint "
        f"{times.get('fingerprint', 0):.2f} s, fit {fit:.2f} s (of which P(pass) bands "
        f"{times.get('bands', 0):.2f} s), rows "
        f"{times.get('rows', 0):.2f} s, write {times.get('write', 0):.2f} s, lifecycle "
        f"(claim, result JSON, commit) {other:.2f} s"
    )
    print(
        f"CPU of this process: load {times.get('cpu:load', 0):.2f} s, fingerprint "
        f"{times.get('cpu:fingerprint', 0):.2f} s, fit "
        f"{times.get('cpu:compute', 0) - times.get('cpu:rows', 0):.2f} s (bands "
        f"{times.get('cpu:bands', 0):.2f} s), rows {times.get('cpu:rows', 0):.2f} s, write "
        f"{times.get('cpu:write', 0):.2f} s"
    )
    print(f"end to end (report_compute): {total:.2f} s; peak RSS {rss_mib():.0f} MiB; "
          f"rows written {written:,} (result n_scores {result['n_scores']:,})")
    # The rest of the wall time is PostgreSQL's (the COPY's index updates, the foreign-key
    # checks at commit) or waiting for a core on a shared machine.
    print(f"CPU time of this process over report_compute: {cpu:.2f} s "
          f"({total - cpu:.2f} s of the wall time is elsewhere); cyclic garbage collector "
          f"{gc_time[0]:.2f} s in {gc_time[2]} collections")
    print(f"target < 15 s end to end: {'met' if total < 15 else 'missed'}; "
          f"< 2 GB: {'met' if rss_mib() < 2048 else 'missed'}")
    digest = rows_digest(snapshot.pk)
    result_digest = hashlib.md5(json.dumps(result, sort_keys=True).encode()).hexdigest()
    print(f"code {code}: rows digest {digest}; result JSON digest {result_digest}")
    print("FIGURES " + json.dumps({
        "code": code, "total": total, "cpu": cpu, "rss_mib": rss_mib(), "gc": gc_time[0],
        "n_rows": written, "digest": digest, "result_digest": result_digest,
        "load_avg": os.getloadavg()[0],
        **{k: v for k, v in times.items()},
    }))
    cells = [c for c in result["cells"] if c["stratum"] == "" and c["diagnostics"]["after"]]
    for c in cells:
        before = c["diagnostics"]["before"]["ece"]["value"]
        after = c["diagnostics"]["after"]["ece"]["value"]
        print(f"  {c['judge']:<18} {c['criterion']:<9} method {c['method']:<9} "
              f"ECE before {before:.3f} after {after:.3f} (held out)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reuse", action="store_true",
                    help="keep the study of an earlier run when it holds this data")
    ap.add_argument("--params", default="{}", help="calibration parameters (JSON object)")
    ap.add_argument("--profile", help="write a cProfile of report_compute to this file")
    ap.add_argument("--code", choices=("new", "head"), default="new",
                    help="head: the last commit's calibration results/compute/services")
    ap.add_argument("--compare", type=int, default=0, metavar="N",
                    help="N rounds of head then new, one process each, on the same study: "
                         "figures side by side and a check that rows and result are equal")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="study size relative to the issue's (0.2: 200,000 verdicts)")
    ap.add_argument("--seed-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    scale_set(args.scale)
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
        subprocess.run([sys.executable, __file__, "--seed-only", "--scale", str(args.scale)],
                       check=True)
    if args.compare:
        compare(args.compare, args.scale, args.params)
        return
    run(json.loads(args.params), args.profile, args.code)


def compare(rounds: int, scale: float, params: str) -> None:
    """Alternate head and new runs (a process each, so each has its own peak RSS) and print
    their figures side by side; fail unless every run wrote the same rows and result."""
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        for code in ("head", "new"):
            out = subprocess.run(
                [sys.executable, __file__, "--reuse", "--scale", str(scale), "--params", params,
                 "--code", code], check=True, capture_output=True, text=True,
            ).stdout
            fig = json.loads(next(line for line in out.splitlines()
                                  if line.startswith("FIGURES "))[len("FIGURES "):])
            runs.append(fig)
            print(f"round {r + 1} {code:>4}: end to end {fig['total']:6.2f} s, CPU "
                  f"{fig['cpu']:6.2f} s (load {fig.get('cpu:load', 0):.2f}, fingerprint "
                  f"{fig.get('cpu:fingerprint', 0):.2f}, fit "
                  f"{fig.get('cpu:compute', 0) - fig.get('cpu:rows', 0):.2f}, rows "
                  f"{fig.get('cpu:rows', 0):.2f}, write {fig.get('cpu:write', 0):.2f}), "
                  f"GC {fig['gc']:.2f} s, peak RSS {fig['rss_mib']:.0f} MiB, load average "
                  f"{fig['load_avg']:.1f}", flush=True)
    for code in ("head", "new"):
        mine = [f for f in runs if f["code"] == code]
        print(f"{code:>4} median: end to end "
              f"{statistics.median(f['total'] for f in mine):.2f} s, CPU "
              f"{statistics.median(f['cpu'] for f in mine):.2f} s, rows+write CPU "
              f"{statistics.median(f.get('cpu:rows', 0) + f.get('cpu:write', 0) for f in mine):.2f}"
              f" s, peak RSS {statistics.median(f['rss_mib'] for f in mine):.0f} MiB")
    digests = {(f["digest"], f["result_digest"]) for f in runs}
    if len(digests) != 1:
        raise SystemExit(f"the runs disagree: {digests}")
    print(f"every run wrote the same {runs[0]['n_rows']:,} rows and the same result JSON")


if __name__ == "__main__":
    main()
