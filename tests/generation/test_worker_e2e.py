"""End-to-end: real Celery workers on Redis run candidate runs against local servers.

Reuses the judge e2e harness (tests/judges/test_worker_e2e.py: worker subprocesses on the
test database, celery beat as docker-compose.yml starts it). Two scenarios: two candidates
run side by side, each held at exactly C by its own server's count; the worker running a
candidate is SIGKILLed mid-run and the run finishes through the beat sweeper with every
item answered once (no job lost, no output duplicated).
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from typing import Any

import pytest

from generation.models import GenerationJob, GenerationRun
from generation.runs import generation_run_start
from studies.models import Output
from tests.judges.test_worker_e2e import Workers, wait_for

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer
from .test_load import _latencies

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

QUESTION_RE = re.compile(r"Question (\d+)\?")


def _calls_per_item(server: LoadServer) -> Counter[int]:
    counts: Counter[int] = Counter()
    for req in list(server.requests):
        match = QUESTION_RE.search(req.prompt_text())
        if match:
            counts[int(match.group(1))] += 1
    return counts


def _env() -> dict[str, str]:
    return {KEY_ENV: "sk-test-e2e"}


def test_two_candidates_run_side_by_side_each_at_c(study: Any, workers: Workers,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-e2e")
    c, n = 8, 120
    data = build(study, n_items=n, n_candidates=2)
    # Log-normal latencies: a constant latency would make all C requests end and restart in
    # lockstep, measuring the worker's turnaround of C at once, not the load. Median 600 ms:
    # both drains share one worker's GIL on a two-core machine running other test suites,
    # and a request's few milliseconds of turnaround must stay small against its latency.
    slow = [3 * x for x in _latencies(n, seed=1)], [3 * x for x in _latencies(n, seed=2)]
    with (LoadServer(latencies_s=slow[0]) as a, LoadServer(latencies_s=slow[1]) as b):
        configs = [make_config(data.candidates[0], a.openai_base_url),
                   make_config(data.candidates[1], b.openai_base_url)]
        workers.start(**_env())
        run = generation_run_start(study=study, template=make_template(study), configs=configs,
                                   concurrency=c)
        wait_for(lambda: GenerationRun.objects.get(pk=run.pk).status == "done", 180,
                 "the run to finish", workers)
        for server in (a, b):
            assert server.count() == n
            assert server.max_in_flight == c
            mean = server.mean_in_flight(from_level=c, until_completion=n - c)
            assert abs(mean - c) / c <= 0.02, (mean, [round(m, 2) for m in (
                a.mean_in_flight(from_level=c, until_completion=n - c),
                b.mean_in_flight(from_level=c, until_completion=n - c))])
        # Side by side: each candidate's steady state overlapped the other's.
        assert a.events[0][0] < b.events[-1][0] and b.events[0][0] < a.events[-1][0]
    assert Output.objects.filter(study=study).count() == 2 * n


def test_sigkilled_worker_loses_and_duplicates_nothing(study: Any, workers: Workers,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-e2e")
    c, n = 8, 120
    data = build(study, n_items=n)
    with LoadServer(latencies_s=[0.3]) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        beat = workers.start_beat()
        first, second = workers.start(**_env()), workers.start(**_env())
        for proc in (first, second):
            def ready(p: subprocess.Popen[bytes] = proc) -> bool:
                return " ready." in workers.log_of(p)

            wait_for(ready, 60, "the workers to be ready", workers)
        run = generation_run_start(study=study, template=make_template(study),
                                   configs=[config], concurrency=c)
        done = GenerationJob.objects.filter(run=run, status="done")
        wait_for(lambda: done.count() >= 30, 120, "30 jobs done", workers)
        holders = [p for p in (first, second)
                   if "generation.run_work[" in workers.log_of(p)]
        assert len(holders) == 1, workers.tail()
        holder = holders[0]
        survivor = second if holder is first else first
        workers.kill(holder, signal.SIGKILL)
        running_at_kill = set(GenerationJob.objects.filter(run=run, status="running")
                              .values_list("id", flat=True))
        assert running_at_kill, "the kill should interrupt calls in flight"
        wait_for(lambda: GenerationRun.objects.get(pk=run.pk).status == "done", 180,
                 "the run to finish after the kill", workers)
        calls = _calls_per_item(server)
        # The survivor never had more than C in flight, the lost worker's calls included.
        assert server.max_in_flight <= c
    jobs = list(GenerationJob.objects.filter(run=run).select_related("item"))
    assert Counter(j.status for j in jobs) == {"done": n}
    assert all(j.lease_token == "" and j.finished_at and j.output_id for j in jobs)
    outputs = Output.objects.filter(candidate=data.candidates[0])
    assert outputs.count() == n
    assert sorted(o.item_id for o in outputs) == sorted(j.item_id for j in jobs)
    for j in jobs:
        index = int(j.item.external_id.split("-")[1])
        assert 1 <= calls[index] <= j.attempts, (j.pk, calls[index], j.attempts)
    reclaimed = GenerationJob.objects.filter(id__in=running_at_kill)
    assert all(j.attempts >= 2 for j in reclaimed)
    assert "Sending due task generation-sweep (generation.sweep)" in workers.log_of(beat)
    kicked = re.compile(r"generation\.sweep\[[^\]]+\] succeeded .*'kicked': \[\(" +
                        str(run.pk) + r", ")
    assert kicked.search(workers.log_of(survivor)), workers.tail()
