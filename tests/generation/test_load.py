"""The load profile: exactly C requests in flight, latencies as the server's distribution.

The server counts the requests it is serving on its own clock; its latencies are a configured
log-normal distribution (median 300 ms, sigma 0.4), drawn at stratified quantiles so that the
sample has the distribution's quantiles. Checks (issue 27 §5): the server-side maximum in
flight is C and the time-average over the steady state within 2 % of C; the measured p50/p95
within 5 % of the configured distribution's (scipy's log-normal quantiles).

The server runs in the test process, so its CPU and the client's share one GIL: the median is
300 ms so that the few milliseconds each request costs both of them on a loaded two-core
machine stay small against the latency (at 100 ms and C = 24 the turnaround of a request,
not the drain, held the time-average 12 % under C on such a machine).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from scipy import stats

from generation.models import GenerationJob
from generation.selectors import generation_run_progress

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer
from .test_runs import _start, drain_all

pytestmark = pytest.mark.django_db

MEDIAN_S = 0.300
SIGMA = 0.4


def _latencies(n: int, seed: int = 7) -> list[float]:
    dist = stats.lognorm(s=SIGMA, scale=MEDIAN_S)
    values = [float(dist.ppf((i + 0.5) / n)) for i in range(n)]
    random.Random(seed).shuffle(values)
    return values


@pytest.mark.parametrize("c", [8, 24])
def test_concurrency_is_held_at_c_and_latency_matches_the_server(
        study: Any, monkeypatch: pytest.MonkeyPatch, c: int) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    n = 20 * c
    data = build(study, n_items=n)
    dist = stats.lognorm(s=SIGMA, scale=MEDIAN_S)
    with LoadServer(latencies_s=_latencies(n)) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        run = _start(study, make_template(study), [config], concurrency=c)
        drain_all(run, timeout_s=120)
        assert server.count() == n
        assert server.max_in_flight == c
        mean = server.mean_in_flight(from_level=c, until_completion=n - c)
    assert abs(mean - c) / c <= 0.02, mean
    latencies = sorted(GenerationJob.objects.filter(run=run).values_list("latency_ms",
                                                                         flat=True))
    assert len(latencies) == n
    progress = generation_run_progress(run=run)["candidates"][0]
    for q, key in ((0.5, "p50"), (0.95, "p95")):
        configured_ms = float(dist.ppf(q)) * 1000
        measured = progress["latency_ms"][key]
        assert abs(measured - configured_ms) / configured_ms <= 0.05, (key, measured,
                                                                       configured_ms)
    # The client measured the same load from its side (mean in flight over its window).
    assert progress["mean_in_flight"] == pytest.approx(c, rel=0.05)
    assert progress["overhead_ms"]["p50"] is not None and progress["overhead_ms"]["p50"] < 5


def test_open_loop_starts_requests_at_the_rate_whatever_their_latency(
        study: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """At a rate r, requests start every 1/r s however long each takes: the server sees
    arrivals at r (within 5 %) and, by Little's law, r x latency in flight, below the cap C."""
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    n, rate, latency = 120, 40.0, 0.2
    data = build(study, n_items=n)
    with LoadServer(latencies_s=[latency]) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        run = _start(study, make_template(study), [config], concurrency=32, rate=rate)
        drain_all(run, timeout_s=60)
        arrivals = [t for t, _, d in server.events if d > 0]
        assert server.count() == n
        mean = server.mean_in_flight(from_level=int(rate * latency), until_completion=n - 16)
    measured = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert abs(measured - rate) / rate <= 0.05, measured
    assert server.max_in_flight < 32
    assert mean == pytest.approx(rate * latency, rel=0.1)


def test_a_rate_that_is_not_positive_is_a_400(study: Any) -> None:
    from reviewhub.errors import ValidationFailed

    data = build(study, n_items=1)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValidationFailed) as info:
            _start(study, make_template(study), [config], rate=bad)
        assert info.value.details["errors"][0]["path"] == "rate"
