"""Benchmark: the calibrated-score export (1M rows, JSON Lines and CSV) and the list page.

Run against PostgreSQL (a throw-away test database is created and dropped):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench DJANGO_DEBUG=1 \
        .venv/bin/python bench/calibration_export.py [--rows 1000000] [--requests 200]

Seeds one study with 125k outputs and `--rows` calibrated scores (4 criteria x 2 judge
versions per output, COPY through reviewhub.bulkcopy), then streams the export through the
Django test client (the whole view: access check, selector, keyset chunks, serialisation) and
times it; memory is the tracemalloc peak of a second, traced export (Python allocations, so
"flat" means it does not grow with the row count) and the process's peak RSS. The list page is
timed over `--requests` requests walking cursor pages. Prints the figures recorded in
docs/benchmarks.md ("Calibrated scores").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

CRITERIA = ("correct", "complete", "safe", "tone")
LANGS = ("en", "de", "fr", "es", "it")


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[18]


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(args.rows, args.requests)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def seed(n_rows: int) -> tuple[Any, str]:
    """The study and a read-only lead token."""
    import random

    from django.contrib.auth.models import User

    from calibration.models import CalibratedScore
    from judges.models import Judge, JudgeVersion
    from reviewhub.bulkcopy import bulk_insert
    from studies.models import Candidate, Criterion, Item, Membership, Output, RubricVersion, Study
    from studies.services import api_token_create

    rng = random.Random(11)
    lead = User.objects.create(username="bench-lead")
    study = Study.objects.create(slug="bench", name="Bench", owner=lead)
    Membership.objects.create(study=study, user=lead, role="lead")
    rubric = RubricVersion.objects.create(study=study, version=1)
    crits = [Criterion.objects.create(rubric=rubric, key=k, name=k, scale="binary", position=i)
             for i, k in enumerate(CRITERIA)]
    judges = []
    for name in ("judge-a", "judge-b"):
        judge = Judge.objects.create(study=study, name=name, kind=Judge.Kind.PROGRAMMATIC)
        judges.append(JudgeVersion.objects.create(judge=judge, version=1,
                                                  content_hash=f"{name:0>64}"[-64:]))
    cands = [Candidate.objects.create(study=study, name=f"model-{c}") for c in "ab"]
    per_output = len(CRITERIA) * len(judges)
    n_outputs = -(-n_rows // per_output)
    t = time.perf_counter()
    bulk_insert(Item, [
        {"study_id": study.pk, "external_id": f"q{i}", "input": "question",
         "strata": json.dumps({"language": LANGS[i % len(LANGS)]}), "metadata": "{}"}
        for i in range(n_outputs)
    ])
    items = list(Item.objects.filter(study=study).order_by("id").values_list("id", "strata"))
    bulk_insert(Output, [
        {"study_id": study.pk, "item_id": item_id, "candidate_id": cands[k % 2].pk,
         "text": "answer"}
        for k, (item_id, _s) in enumerate(items)
    ])
    outputs = list(Output.objects.filter(study=study).order_by("id")
                   .values_list("id", "candidate_id", "item__strata"))
    print(f"seeded {len(items):,} items and {len(outputs):,} outputs in "
          f"{time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    snapshot_id = 1
    rows: list[dict[str, Any]] = []
    done = 0
    decisions = ("pass", "fail", "escalate", "pass", "human")
    for out_id, cand_id, strata in outputs:
        label = f"language={strata['language']}"
        for crit in crits:
            for jv in judges:
                if done >= n_rows:
                    break
                p = rng.random()
                decision = decisions[done % len(decisions)]
                rows.append({
                    "study_id": study.pk, "snapshot_id": snapshot_id, "output_id": out_id,
                    "comparison_id": None, "candidate_id": cand_id, "criterion_id": crit.pk,
                    "criterion_key": crit.key, "judge_version_id": jv.pk,
                    "judge_version_hash": jv.content_hash, "stratum": label,
                    "strata": json.dumps(strata), "raw_value": "pass" if p > 0.5 else "fail",
                    "raw_confidence": p, "p_pass": p, "p_low": max(0.0, p - 0.05),
                    "p_high": min(1.0, p + 0.05), "decision": decision,
                    "expected_cost": rng.random() * 5,
                    "source": "human" if decision == "human" else "judge", "plan_version": 1,
                    "n_labels": rng.randint(0, 400), "evidence_at": "2026-12-01T12:00:00+00:00",
                })
                done += 1
        if len(rows) >= 100_000:
            bulk_insert(CalibratedScore, rows)
            rows = []
    bulk_insert(CalibratedScore, rows)
    with connection.cursor() as cur:
        # What autovacuum does soon after a snapshot is written (hint bits, visibility map,
        # statistics); without it the first export pays for setting the hint bits.
        cur.execute("VACUUM ANALYZE calibration_calibratedscore, studies_output, studies_item")
    print(f"seeded {done:,} calibrated scores (COPY) in {time.perf_counter() - t:.1f} s")
    _, secret = api_token_create(user=lead, name="bench", can_write=False)
    return study, secret


def export_once(client: Any, fmt: str, query: str = "") -> tuple[int, int, float]:
    """(lines, bytes, seconds) of one streamed export through the test client."""
    t = time.perf_counter()
    response = client.get(f"/api/studies/bench/calibrated-scores/export?format={fmt}{query}")
    assert response.status_code == 200, response.content
    lines = size = 0
    for block in response.streaming_content:
        lines += block.count(b"\n")
        size += len(block)
    return lines, size, time.perf_counter() - t


def run(n_rows: int, n_requests: int) -> None:
    from rest_framework.test import APIClient

    _study, secret = seed(n_rows)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    print(f"peak RSS after seeding: {rss_mib():.0f} MiB")
    client.get("/api/studies/bench/calibrated-scores")  # URL conf and views imported
    for fmt in ("jsonl", "csv", "jsonl", "csv"):
        lines, size, secs = export_once(client, fmt)
        rows = lines - (1 if fmt == "csv" else 0)
        print(f"export {fmt}: {rows:,} rows, {size / 2**20:.0f} MiB in {secs:.2f} s = "
              f"{rows / secs:,.0f} rows/s; peak RSS now {rss_mib():.0f} MiB")
    lines, _size, secs = export_once(client, "jsonl", "&decision=escalate&criterion=safe")
    print(f"export jsonl, decision=escalate&criterion=safe: {lines:,} rows in {secs:.2f} s = "
          f"{lines / secs:,.0f} rows/s")
    for query in ("&criterion=correct", ""):
        # Memory: the traced peak of an export of a quarter and of all rows (flat = equal).
        tracemalloc.start()
        lines, _size, secs = export_once(client, "jsonl", query)
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"traced export of {lines:,} rows: tracemalloc peak {peak / 2**20:.1f} MiB "
              f"({secs:.1f} s under tracing)")
    print(f"peak RSS at the end of the exports: {rss_mib():.0f} MiB")

    for label, url in (
        ("list page_size=100", "/api/studies/bench/calibrated-scores?page_size=100"),
        ("list page_size=500", "/api/studies/bench/calibrated-scores?page_size=500"),
        ("list decision=escalate&criterion=safe page_size=100",
         "/api/studies/bench/calibrated-scores?page_size=100&decision=escalate&criterion=safe"),
        ("list candidate+stratum page_size=100",
         "/api/studies/bench/calibrated-scores?page_size=100&candidate=model-b"
         "&stratum=language%3Dde"),
    ):
        samples = []
        next_url = url
        for _ in range(n_requests):
            t = time.perf_counter()
            body = client.get(next_url).json()
            samples.append((time.perf_counter() - t) * 1000)
            next_url = body["next"] or url
        print(f"{label}: p50 {statistics.median(samples):.1f} ms, p95 {p95(samples):.1f} ms "
              f"over {n_requests} requests (walking cursor pages)")


if __name__ == "__main__":
    main()
