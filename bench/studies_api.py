"""Benchmark: strata recompute over 100k items, and list-page latency over 100k outputs.

Run against PostgreSQL (a throw-away test database is created and dropped):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rh_bench DJANGO_DEBUG=1 \
        .venv/bin/python bench/studies_api.py [--items 100000] [--requests 200]

Prints the figures recorded in docs/benchmarks.md ("studies" section).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[18]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(args.items, args.requests)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(n_items: int, n_requests: int) -> None:
    import random

    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from studies.models import Candidate, Item, Membership, Output, Study
    from studies.services import api_token_create, dimension_set, study_strata_recompute

    rng = random.Random(7)
    lead = User.objects.create(username="bench-lead")
    study = Study.objects.create(slug="bench", name="Bench", owner=lead)
    Membership.objects.create(study=study, user=lead, role="lead")
    started = time.perf_counter()
    Item.objects.bulk_create(
        [Item(study=study, external_id=f"i{i}", input="q" * rng.randint(20, 4000),
              context="c" * rng.randint(0, 3000),
              metadata={"language": rng.choice(["en", "de", "fr"]),
                        "noisy": rng.random() < 0.15, "score": rng.random()})
         for i in range(n_items)],
        batch_size=5000,
    )
    cands = [Candidate.objects.create(study=study, name=f"model-{c}") for c in "abc"]
    item_ids = list(Item.objects.filter(study=study).order_by("id")
                    .values_list("id", flat=True)[: -(-n_items // 3)])
    Output.objects.bulk_create(
        [Output(study=study, candidate=c, item_id=i, text="answer " * 40,
                error="timeout" if rng.random() < 0.02 else "")
         for i in item_ids for c in cands][:n_items],
        batch_size=5000,
    )
    print(f"setup: {n_items} items, {Output.objects.count()} outputs in "
          f"{time.perf_counter() - started:.1f} s")

    scheme: list[dict[str, Any]] = [
        {"key": "language", "kind": "categorical", "source": "metadata.language",
         "config": {"values": ["en", "de"]}},
        {"key": "length", "kind": "numeric_bins", "source": "input_length",
         "config": {"edges": [0, 500, 2000], "labels": ["short", "medium", "long"]}},
        {"key": "noisy", "kind": "boolean", "source": "metadata.noisy"},
        {"key": "context", "kind": "numeric_bins", "source": "context_length",
         "config": {"quantiles": 4}},
    ]
    t = time.perf_counter()
    _, changed = dimension_set(study=study, dimensions=scheme)
    first = time.perf_counter() - t
    print(f"dimension_set (4 dims incl. quantiles), all items labelled: {first:.2f} s "
          f"({changed} items, {changed / first:,.0f} items/s)")
    t = time.perf_counter()
    again = study_strata_recompute(study=study)
    print(f"study_strata_recompute, nothing changed: {time.perf_counter() - t:.2f} s "
          f"({again} written)")

    client = APIClient()
    _, secret = api_token_create(user=lead, name="bench", can_write=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for label, url in [
        ("outputs page_size=100", "/api/studies/bench/outputs?page_size=100"),
        ("outputs stratum+candidate page_size=100",
         "/api/studies/bench/outputs?page_size=100&stratum=language:de&candidate=model-b"),
        ("items page_size=100", "/api/studies/bench/items?page_size=100"),
    ]:
        samples = []
        next_url: str = url
        for _ in range(n_requests):
            t = time.perf_counter()
            body = client.get(next_url).json()
            samples.append((time.perf_counter() - t) * 1000)
            next_url = body["next"] or url  # walk deep pages, restart at the end
        print(f"{label}: p50 {statistics.median(samples):.1f} ms, p95 {p95(samples):.1f} ms "
              f"over {n_requests} requests (walking cursor pages)")


if __name__ == "__main__":
    main()
