"""Pulling a deployment's traffic from Langfuse: against a local HTTP server in the test
process that speaks Langfuse's public API (Basic auth, `data` + `meta` paging, fromStartTime
inclusive / toStartTime exclusive), and against a real Langfuse when LANGFUSE_TEST_HOST,
LANGFUSE_TEST_PUBLIC_KEY and LANGFUSE_TEST_SECRET_KEY are set."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from rest_framework.test import APIClient

from monitoring import langfuse_pull
from monitoring.celery_tasks import monitoring_tick
from monitoring.models import Deployment, LangfuseSource, TrafficRow

pytestmark = pytest.mark.django_db

PUBLIC, SECRET = "pk-lf-test", "sk-lf-test"
T0 = dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC)


def _iso(when: dt.datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def _generation(i: int, **over: Any) -> dict[str, Any]:
    """An observation as GET /api/public/observations serves it (input/output as the SDKs log
    them: chat messages, a JSON-encoded string; latency in seconds)."""
    obs = {
        "id": f"obs-{i}", "traceId": f"trace-{i}", "type": "GENERATION", "name": "chat",
        "startTime": _iso(T0 + dt.timedelta(minutes=i)),
        "endTime": _iso(T0 + dt.timedelta(minutes=i, seconds=1)),
        "model": "gpt-4o-mini", "environment": "production",
        "input": [{"role": "user", "content": f"question {i}"}],
        "output": json.dumps({"role": "assistant", "content": f"answer {i}"}),
        "metadata": {"language": "de" if i % 2 else "en"},
        "modelParameters": {"temperature": "0.2"},
        "usageDetails": {"input": 10 + i, "output": 20 + i, "total": 30 + 2 * i},
        "latency": 0.5 + i / 10, "totalCost": 0.001 * i, "level": "DEFAULT",
    }
    obs.update(over)
    return obs


class FakeLangfuse:
    """The observations and traces endpoints of Langfuse's public API over `observations`;
    `failures` is a queue of what the next observations requests do instead of answering
    ("500", "not-json", "timeout")."""

    def __init__(self) -> None:
        self.observations: list[dict[str, Any]] = []
        self.traces: dict[str, dict[str, Any]] = {}
        self.failures: list[str] = []
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                fake.requests.append({"path": url.path, "query": query})
                expected = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    return self._send(401, {"message": "Invalid credentials"})
                if url.path.startswith("/api/public/traces/"):
                    trace = fake.traces.get(unquote(url.path.rsplit("/", 1)[1]))
                    return self._send(200 if trace else 404, trace or {"message": "nope"})
                if url.path != "/api/public/observations":
                    return self._send(404, {"message": "not found"})
                if fake.failures:
                    mode = fake.failures.pop(0)
                    if mode == "timeout":
                        time.sleep(1.5)
                    if mode == "not-json":
                        return self._send(200, b"<html>proxy error</html>")
                    return self._send(500, {"message": "Internal Server Error"})
                return self._send(200, fake.page(query))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def page(self, q: dict[str, str]) -> dict[str, Any]:
        rows = [o for o in self.observations
                if (not q.get("type") or o["type"] == q["type"])
                and (not q.get("fromStartTime") or o["startTime"] >= q["fromStartTime"])
                and (not q.get("toStartTime") or o["startTime"] < q["toStartTime"])
                and (not q.get("environment") or o.get("environment") == q["environment"])
                and (not q.get("name") or o.get("name") == q["name"])]
        rows.sort(key=lambda o: o["startTime"], reverse=True)
        page, limit = int(q.get("page", 1)), int(q.get("limit", 50))
        total_pages = -(-len(rows) // limit)
        return {"data": rows[(page - 1) * limit: page * limit],
                "meta": {"page": page, "limit": limit, "totalItems": len(rows),
                         "totalPages": total_pages}}

    def observation_pages(self) -> list[int]:
        return [int(r["query"]["page"]) for r in self.requests
                if r["path"] == "/api/public/observations"]


@pytest.fixture
def langfuse(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    fake = FakeLangfuse()
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = [fake.url]
    settings.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = ["*_API_KEY", "LANGFUSE_*_KEY"]
    settings.REVIEWHUB_LANGFUSE_PAGE_LIMIT = 2
    settings.REVIEWHUB_LANGFUSE_OVERLAP_S = 600
    settings.REVIEWHUB_LANGFUSE_TIMEOUT_S = 0.5
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _source(deployment: Deployment, fake: FakeLangfuse, **filters: Any) -> LangfuseSource:
    return langfuse_pull.source_create(deployment=deployment, raw={
        "host": fake.url, "public_key_env": "LANGFUSE_PUBLIC_KEY",
        "secret_key_env": "LANGFUSE_SECRET_KEY", "filters": filters,
        "start_from": _iso(T0)})


NOW = T0 + dt.timedelta(hours=2)


def test_pull_maps_pages_once_and_moves_the_cursor(deployment: Deployment,
                                                   langfuse: FakeLangfuse) -> None:
    langfuse.observations = [_generation(i) for i in range(5)]
    langfuse.observations[3]["output"] = None  # a generation that logged no output
    langfuse.observations.append(_generation(9, type="SPAN", id="span-9"))
    langfuse.observations.append(_generation(8, input=None, id="obs-no-input"))
    # Before the cursor and at/after the pull's end: not pulled.
    langfuse.observations.append(_generation(-30, id="obs-before"))
    langfuse.observations.append(_generation(200, id="obs-after"))
    source = _source(deployment, langfuse)

    report = langfuse_pull.source_pull(source=source, now=NOW)

    assert report == {"pages": 3, "created": 5, "skipped": 1, "done": True}
    assert langfuse.observation_pages() == [1, 2, 3]
    first = langfuse.requests[0]["query"]
    assert first["type"] == "GENERATION" and first["fromStartTime"] == _iso(T0)
    assert first["toStartTime"] == _iso(NOW) and first["limit"] == "2"
    rows = {r.request_id: r for r in TrafficRow.objects.filter(deployment=deployment)}
    assert sorted(rows) == [f"obs-{i}" for i in range(5)]
    r1 = rows["obs-1"]
    assert r1.input == '[{"content": "question 1", "role": "user"}]'
    assert r1.output == '{"content": "answer 1", "role": "assistant"}'
    assert r1.occurred_at == T0 + dt.timedelta(minutes=1)
    assert r1.latency_ms == pytest.approx(600.0)
    assert (r1.tokens_in, r1.tokens_out, r1.cost) == (11, 21, pytest.approx(0.001))
    assert r1.stratum == "de" and r1.metadata["langfuse"]["traceId"] == "trace-1"
    assert r1.request == {"model": "gpt-4o-mini", "temperature": 0.2,
                          "messages": [{"role": "user", "content": "question 1"}]}
    assert rows["obs-3"].output == "" and rows["obs-0"].stratum == "en"
    source.refresh_from_db()
    assert source.cursor_from == NOW - dt.timedelta(seconds=600)
    assert (source.pull_to, source.next_page, source.rows_created) == (None, 1, 5)
    assert source.last_success_at == NOW and source.last_error == ""

    # Pulled again from the start: every row is found and left as it was.
    langfuse_pull.source_update(deployment=deployment, raw={"start_from": _iso(T0)})
    source.refresh_from_db()
    again = langfuse_pull.source_pull(source=source, now=NOW + dt.timedelta(minutes=5))
    assert again["created"] == 0 and again["done"]
    assert TrafficRow.objects.filter(deployment=deployment).count() == 5


@pytest.mark.parametrize("mode, reason", [("500", "HTTP 500"), ("not-json", "not JSON"),
                                          ("timeout", "timed out")])
def test_a_failed_page_is_recorded_and_retried_without_loss_or_duplicates(
        deployment: Deployment, langfuse: FakeLangfuse, mode: str, reason: str) -> None:
    langfuse.observations = [_generation(i) for i in range(5)]
    source = _source(deployment, langfuse)
    langfuse.failures = []
    # Page 1 answers, page 2 fails.
    original = langfuse.page

    def page_then_fail(q: dict[str, str]) -> dict[str, Any]:
        if q.get("page") == "1":
            langfuse.failures.append(mode)
        return original(q)

    langfuse.page = page_then_fail  # type: ignore[method-assign]
    report = langfuse_pull.source_pull(source=source, now=NOW)
    assert reason in report["error"] and report["created"] == 2 and not report["done"]
    source.refresh_from_db()
    assert reason in source.last_error and source.failures == 1
    assert source.next_page == 2 and source.cursor_from == T0 and source.pull_to == NOW
    assert TrafficRow.objects.filter(deployment=deployment).count() == 2

    langfuse.page = original  # type: ignore[method-assign]
    langfuse.failures = []
    later = NOW + dt.timedelta(minutes=5)
    langfuse.observations.append(_generation(300, id="obs-late-arrival"))
    retried = langfuse_pull.source_pull(source=source, now=later)
    assert retried["done"] and retried["created"] == 3
    source.refresh_from_db()
    # The interrupted pull finished over its own range [T0, NOW): the cursor follows it.
    assert source.last_error == "" and source.failures == 0
    assert source.cursor_from == NOW - dt.timedelta(seconds=600)
    assert sorted(TrafficRow.objects.filter(deployment=deployment).values_list(
        "request_id", flat=True)) == [f"obs-{i}" for i in range(5)]


def test_wrong_keys_and_missing_variables_are_recorded(deployment: Deployment,
                                                       langfuse: FakeLangfuse,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    langfuse.observations = [_generation(1)]
    source = _source(deployment, langfuse)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    report = langfuse_pull.source_pull(source=source, now=NOW)
    assert "HTTP 401" in report["error"]
    monkeypatch.delenv("LANGFUSE_SECRET_KEY")
    report = langfuse_pull.source_pull(source=source, now=NOW)
    assert "LANGFUSE_SECRET_KEY" in report["error"] and "not set" in report["error"]
    assert TrafficRow.objects.filter(deployment=deployment).count() == 0
    source.refresh_from_db()
    assert source.failures == 2 and source.cursor_from == T0


def test_filters_go_to_the_api_and_to_the_trace(deployment: Deployment,
                                                langfuse: FakeLangfuse) -> None:
    langfuse.observations = [_generation(i) for i in range(5)]
    langfuse.observations[0]["environment"] = "staging"
    for i in range(4):  # trace-4 is gone from Langfuse (404): its generation matches nothing
        langfuse.traces[f"trace-{i}"] = {"id": f"trace-{i}", "name": "support" if i != 2
                                         else "other", "tags": ["eu", "v2"] if i != 3 else ["eu"]}
    source = _source(deployment, langfuse, environment="production", trace_name="support",
                     tags=["v2"])
    report = langfuse_pull.source_pull(source=source, now=NOW)
    assert report["done"] and report["created"] == 1
    assert list(TrafficRow.objects.values_list("request_id", flat=True)) == ["obs-1"]
    assert langfuse.requests[0]["query"]["environment"] == "production"


def test_the_tick_pulls_and_a_paused_deployment_is_left_alone(deployment: Deployment,
                                                              langfuse: FakeLangfuse) -> None:
    langfuse.observations = [_generation(i) for i in range(3)]
    _source(deployment, langfuse)
    assert monitoring_tick() == {"deployments": 1, "failed": 0}
    assert TrafficRow.objects.filter(deployment=deployment).count() == 3
    assert monitoring_tick() == {"deployments": 1, "failed": 0}
    assert TrafficRow.objects.filter(deployment=deployment).count() == 3
    Deployment.objects.filter(pk=deployment.pk).update(status=Deployment.Status.PAUSED)
    langfuse.requests.clear()
    monitoring_tick()
    assert langfuse.requests == []


def test_api_create_read_update_pull_delete(lead_client: APIClient, deployment: Deployment,
                                            langfuse: FakeLangfuse) -> None:
    url = f"/api/deployments/{deployment.pk}/langfuse"
    assert lead_client.get(url).json() == {"source": None}
    assert lead_client.post(url + "/pull").status_code == 409
    body = {"host": langfuse.url, "public_key_env": "LANGFUSE_PUBLIC_KEY",
            "secret_key_env": "LANGFUSE_SECRET_KEY", "start_from": _iso(T0)}
    for field, value in (("host", "https://langfuse.example.com"),
                         ("host", "ftp://x"), ("public_key_env", "DATABASE_URL"),
                         ("secret_key_env", "HOME_DIR_SECRET")):
        bad = lead_client.post(url, {**body, field: value}, format="json")
        assert bad.status_code == 400, bad.content
        assert [e["path"] for e in bad.json()["error"]["details"]["errors"]] == [field]
    created = lead_client.post(url, body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["source"]["public_key_env"] == "LANGFUSE_PUBLIC_KEY"
    assert PUBLIC not in created.content.decode() and SECRET not in created.content.decode()
    assert lead_client.post(url, body, format="json").status_code == 409
    patched = lead_client.patch(url, {"filters": {"environment": "production"}}, format="json")
    assert patched.json()["source"]["filters"] == {"environment": "production"}
    assert lead_client.patch(url, {"filters": {"colour": "red"}},
                             format="json").json()["error"]["details"]["errors"][0]["path"] == \
        "filters.colour"
    langfuse.observations = [_generation(i) for i in range(3)]
    pulled = lead_client.post(url + "/pull")
    assert pulled.status_code == 200, pulled.content
    assert pulled.json()["pull"]["created"] == 3
    assert pulled.json()["source"]["rows_created"] == 3
    assert lead_client.delete(url).status_code == 204
    assert lead_client.get(url).json() == {"source": None}
    assert TrafficRow.objects.filter(deployment=deployment).count() == 3


@pytest.mark.skipif(not all(os.environ.get(k) for k in (
    "LANGFUSE_TEST_HOST", "LANGFUSE_TEST_PUBLIC_KEY", "LANGFUSE_TEST_SECRET_KEY")),
    reason="no real Langfuse: set LANGFUSE_TEST_HOST, LANGFUSE_TEST_PUBLIC_KEY and "
           "LANGFUSE_TEST_SECRET_KEY")
def test_against_a_real_langfuse(deployment: Deployment, settings: Any) -> None:
    host = os.environ["LANGFUSE_TEST_HOST"].rstrip("/")
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = [host]
    settings.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = ["LANGFUSE_TEST_*_KEY"]
    source = langfuse_pull.source_create(deployment=deployment, raw={
        "host": host, "public_key_env": "LANGFUSE_TEST_PUBLIC_KEY",
        "secret_key_env": "LANGFUSE_TEST_SECRET_KEY",
        "start_from": _iso(dt.datetime.now(dt.UTC) - dt.timedelta(days=1))})
    report = langfuse_pull.source_pull(source=source)
    assert "error" not in report, report
    assert report["done"] and TrafficRow.objects.count() == report["created"]
    again = langfuse_pull.source_pull(source=source)
    # The second pull reads the overlap again: what it finds there is left unchanged.
    assert "error" not in again and again["done"], again
    assert TrafficRow.objects.count() == report["created"] + again["created"]


def test_a_row_the_traffic_validation_refuses_is_skipped_not_a_stuck_pull(
        deployment: Deployment, langfuse: FakeLangfuse, settings: Any) -> None:
    settings.REVIEWHUB_MAX_FIELD_CHARS = 200
    langfuse.observations = [_generation(i) for i in range(3)]
    langfuse.observations[1]["output"] = "x" * 201
    source = _source(deployment, langfuse)
    report = langfuse_pull.source_pull(source=source, now=NOW)
    assert report == {"pages": 2, "created": 2, "skipped": 1, "done": True}
    assert sorted(TrafficRow.objects.values_list("request_id", flat=True)) == ["obs-0", "obs-2"]


def test_the_pull_reads_a_generation_as_the_file_importer_does(deployment: Deployment) -> None:
    from imports.peers.langfuse import translate

    obs = _generation(4)
    score = {"id": "s1", "traceId": "trace-4", "name": "ok", "source": "EVAL", "value": 1}
    tr = translate(json.dumps({"trace": {"id": "trace-4", "input": obs["input"],
                                         "scores": [score]},
                               "observations": [obs]}).encode(), "t.json", {})
    row = langfuse_pull.observation_row(obs)
    assert row is not None and len(tr.rows) == 1
    imported = tr.rows[0][1]
    assert row["output"] == imported["output_text"]
    assert row["input"] == imported["item_input"]  # the trace input is the generation's here
    assert row["request"] == imported["item_recorded_request"]
    assert tr.measurements[("trace-4", "gpt-4o-mini")] == {
        k: row[k] for k in ("latency_ms", "tokens_in", "tokens_out", "cost")}
    assert row["output"] == '{"content": "answer 4", "role": "assistant"}'
