"""The queue under real concurrency: 50 annotator threads, each with its own database connection,
pull and submit 2,000 outputs with k = 3 (PostgreSQL); one annotator's simultaneous "next" calls
(two tabs) get one lease (PostgreSQL and SQLite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from annotations import services
from annotations.models import Annotation, Assignment, QueueEntry
from studies.models import Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory

from .factories import annotators_make, passing_labels, world_build

pytestmark = [pytest.mark.django_db(transaction=True)]

N_OUTPUTS = 2000
K = 3
N_ANNOTATORS = 50
N_QUITTERS = 5  # annotators who take one output, let the lease expire, and leave


def _threads(n: int, target: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    return errors


def _setup_big_study() -> tuple[Study, list[Any], Any]:
    lead = UserFactory(username="bulk-lead")
    study = StudyFactory(owner=lead, slug="bulk")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    world_build(study=study, strata={"en": 1200, "de": 600, "fr": 200})
    annotators = annotators_make(study, N_ANNOTATORS, prefix="conc")
    return study, annotators, lead


@pytest.mark.postgres
def test_fifty_annotators_two_thousand_outputs_k3(settings: Any) -> None:
    settings.REVIEWHUB_LEASE_SWEEP_SECONDS = 1
    assert connection.vendor == "postgresql"
    study, annotators, lead = _setup_big_study()
    plan = services.sampling_plan_create(
        study=study, spec={"mode": "all", "seed": 7}, k=K, gold_rate=0.0, created_by=lead
    )
    assert plan.entries.count() == N_OUTPUTS
    submitted: list[list[tuple[int, int, str]]] = [[] for _ in annotators]
    abandoned: list[int] = []
    started = time.monotonic()

    def work(i: int) -> None:
        annotator = annotators[i]
        if i < N_QUITTERS:
            a = services.assignment_next(study=study, annotator=annotator)
            assert a is not None
            # Time passes beyond the lease; the annotator never comes back.
            Assignment.objects.filter(pk=a.pk).update(
                lease_expires_at=timezone.now() - timedelta(seconds=1)
            )
            abandoned.append(a.entry_id)
            return
        while True:
            a = services.assignment_next(study=study, annotator=annotator)
            if a is None:
                return
            sid = uuid.uuid4()
            created = services.annotation_submit(
                assignment=a,
                annotator=annotator,
                submission_id=sid,
                labels=passing_labels(),
                time_on_task_ms=1000,
            )
            assert len(created) == 2
            submitted[i].append((a.entry_id, a.pk, str(sid)))

    errors = _threads(N_ANNOTATORS, work)
    elapsed = time.monotonic() - started
    if errors:
        raise errors[0]

    # Every output ends with exactly k submitted annotations, by k different annotators.
    per_entry = Counter(
        Assignment.objects.filter(entry__plan=plan, status="submitted").values_list(
            "entry_id", flat=True
        )
    )
    assert len(per_entry) == N_OUTPUTS
    assert set(per_entry.values()) == {K}
    assert set(QueueEntry.objects.filter(plan=plan).values_list("done_count", flat=True)) == {K}
    assert set(QueueEntry.objects.filter(plan=plan).values_list("leased_count", flat=True)) == {0}
    by_output = Counter(
        (o, a)
        for o, a in Annotation.objects.filter(plan=plan).values_list("output_id", "annotator_id")
    )
    assert len(by_output) == N_OUTPUTS * K  # (output, annotator) pairs: nobody twice
    assert set(by_output.values()) == {2}  # two criteria each
    # Nobody was ever assigned the same output twice (the unique constraint plus this check).
    pairs = Counter(Assignment.objects.values_list("entry_id", "annotator_id"))
    assert max(pairs.values()) == 1
    # No submission lost: every one a thread saw succeed is in the database, and nothing else.
    flat = [s for per in submitted for s in per]
    assert len(flat) == N_OUTPUTS * K
    stored = set(Annotation.objects.filter(plan=plan).values_list("assignment_id", "submission_id"))
    assert {(pk, uuid.UUID(sid)) for _, pk, sid in flat} == stored
    # The abandoned leases expired and their outputs went to three other annotators.
    assert len(abandoned) == N_QUITTERS
    quitters = {u.pk for u in annotators[:N_QUITTERS]}
    for entry_id in abandoned:
        statuses = dict(
            Assignment.objects.filter(entry_id=entry_id).values_list("annotator_id", "status")
        )
        assert [statuses[q] for q in quitters if q in statuses] == ["expired"]
        assert sum(1 for s in statuses.values() if s == "submitted") == K
    print(f"\n50 annotators x 2000 outputs x k=3: {elapsed:.1f}s for {len(flat)} next+submit")
    # A guard against a serialised queue (lock convoy), generous because CI machines are shared;
    # on an idle 2-core machine this takes well under a minute.
    assert elapsed < 150, f"took {elapsed:.1f}s"


@pytest.mark.postgres
def test_concurrent_identical_submits_make_one_set(study: Study, lead: Any) -> None:
    world_build(study=study, strata={"en": 2})
    (annotator,) = annotators_make(study, 1)
    services.sampling_plan_create(
        study=study, spec={"mode": "all", "seed": 1}, k=1, gold_rate=0.0, created_by=lead
    )
    a = services.assignment_next(study=study, annotator=annotator)
    assert a is not None
    sid = uuid.uuid4()
    results: list[list[int]] = []

    def submit(_i: int) -> None:
        fresh = Assignment.objects.get(pk=a.pk)
        created = services.annotation_submit(
            assignment=fresh, annotator=annotator, submission_id=sid, labels=passing_labels()
        )
        results.append(sorted(x.pk for x in created))

    errors = _threads(8, submit)
    if errors:
        raise errors[0]
    assert len(results) == 8
    assert all(r == results[0] for r in results)
    assert Annotation.objects.filter(submission_id=sid).count() == 2
    assert QueueEntry.objects.get(pk=a.entry_id).done_count == 1


@pytest.mark.postgres
def test_concurrent_next_never_overleases(study: Study, lead: Any) -> None:
    """Ten annotators race for a single output with k = 3: exactly three get it."""
    world_build(study=study, strata={"en": 1})
    people = annotators_make(study, 10)
    services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=3, gold_rate=0.0, created_by=lead
    )
    got: list[int] = []

    def take(i: int) -> None:
        a = services.assignment_next(study=study, annotator=people[i])
        if a is not None:
            got.append(people[i].pk)

    errors = _threads(10, take)
    if errors:
        raise errors[0]
    assert len(got) == 3
    entry = QueueEntry.objects.get()
    assert entry.leased_count == 3
    assert Assignment.objects.filter(status="leased").count() == 3


N_TABS = 4
TRIALS = 30


def _two_tab_trials(*, trials: int = TRIALS, tabs: int = N_TABS) -> int:
    """Run `trials` rounds of `tabs` simultaneous "next" calls by one annotator; return in how
    many rounds they were handed more than one assignment (the caller asserts 0)."""
    lead = UserFactory(username="tabs-lead")
    study = StudyFactory(owner=lead, slug="tabs")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    # Room for every tab of every round to take an entry of its own, so that running dry never
    # hides a second lease.
    world_build(study=study, strata={"en": trials * tabs + 10})
    (annotator,) = annotators_make(study, 1, prefix="tabs")
    services.sampling_plan_create(
        study=study, spec={"mode": "all", "seed": 3}, k=2, gold_rate=0.0, created_by=lead
    )
    diverged = 0
    for _round in range(trials):
        got: list[int | None] = [None] * tabs

        def take(i: int, got: list[int | None] = got) -> None:
            a = services.assignment_next(study=study, annotator=annotator)
            got[i] = a.pk if a is not None else None

        errors = _threads(tabs, take)
        if errors:
            raise errors[0]
        assert None not in got, got
        diverged += len(set(got)) > 1
        leased = list(Assignment.objects.filter(annotator=annotator, status="leased"))
        if len(set(got)) == 1:
            assert [a.pk for a in leased] == [got[0]]
        # End whatever was handed out, so that the next round starts with no live lease.
        for a in leased:
            services.assignment_skip(assignment=a, annotator=annotator)
    # Nothing was over-leased along the way.
    assert set(QueueEntry.objects.values_list("leased_count", flat=True)) == {0}
    return diverged


@pytest.mark.postgres
def test_simultaneous_next_calls_of_one_annotator_get_one_lease_postgres() -> None:
    """Tabs of one annotator asking at the same instant all get the same assignment (the docs'
    promise for a reload or a second tab): serialised per (study, annotator)."""
    assert connection.vendor == "postgresql"
    diverged = _two_tab_trials()
    assert diverged == 0, f"{diverged} of {TRIALS} rounds handed out more than one lease"


# The same rounds on SQLite. Django's SQLite test database lives in memory with a shared cache,
# where concurrent writers fail at once with "database table is locked" instead of waiting, so
# the rounds run in a child process against a database file configured like the embedded
# default (WAL, IMMEDIATE transactions, busy timeout); the schema is built from the models.
_SQLITE_CHILD = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
from django.db import connection
settings.MIGRATION_MODULES = {app.label: None for app in django.apps.apps.get_app_configs()}
settings.REVIEWHUB_LEASE_SWEEP_SECONDS = 0
call_command("migrate", run_syncdb=True, verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
from tests.annotations.test_queue_concurrency import _two_tab_trials
print(json.dumps({"diverged": _two_tab_trials()}))
"""


def test_simultaneous_next_calls_of_one_annotator_get_one_lease_sqlite(tmp_path: Any) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'tabs.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "reviewhub.settings",
        "REVIEWHUB_LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, "-c", _SQLITE_CHILD],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    diverged = json.loads(done.stdout.strip().splitlines()[-1])["diverged"]
    assert diverged == 0, f"{diverged} of {TRIALS} rounds handed out more than one lease"
