"""Candidate runs end to end in-process: the drain against local wire-protocol servers."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from typing import Any

import pytest

from generation import executor, runs
from generation.models import GenerationJob, GenerationRun
from studies.models import Output
from tests.judges.provider_server import (
    connection_reset,
    rate_limited,
    raw,
    server_error,
    slow,
    success,
)

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.05
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 3


def drain_all(run: GenerationRun, timeout_s: float = 60.0) -> None:
    """Drain every candidate until the run has no queued or running job (what the Celery
    chain does; retries wait in the database, so a drain can end before they are due)."""
    deadline = time.monotonic() + timeout_s
    config_ids = list(run.candidates.values_list("config_id", flat=True))
    while time.monotonic() < deadline:
        for cid in config_ids:
            executor.run_drain(run_id=run.pk, config_id=cid)
        if not GenerationJob.objects.filter(run=run, status__in=runs.ACTIVE).exists():
            runs.run_finish_if_complete(run_id=run.pk)
            return
        time.sleep(0.02)
    raise AssertionError("the run did not finish")


def _start(study: Any, template: Any, configs: list[Any], **kw: Any) -> GenerationRun:
    kw.setdefault("concurrency", 4)
    return runs.generation_run_start(study=study, template=template, configs=configs,
                                     enqueue=lambda r, c: None, **kw)


def test_outputs_land_as_the_studys_outputs_with_their_measurements(study: Any) -> None:
    data = build(study, n_items=6)
    schema = {"type": "object", "required": ["answer"],
              "properties": {"answer": {"type": "string"}}}
    answers = iter(['{"answer": "yes"}', '{"answer": 3}', "not json"] * 2)
    with LoadServer(latencies_s=[0.01], answer=lambda req: next(answers)) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        template = make_template(study, output_schema=schema)
        run = _start(study, template, [config])
        drain_all(run)
        requests = list(server.requests)
    run.refresh_from_db()
    assert run.status == "done"
    outputs = list(Output.objects.filter(candidate=data.candidates[0]).order_by("item_id"))
    assert len(outputs) == 6
    jobs = {j.item_id: j for j in GenerationJob.objects.filter(run=run)}
    sent = {hashlib.sha256(r.body).hexdigest() for r in requests}
    for out in outputs:
        job = jobs[out.item_id]
        assert job.output_id == out.pk
        assert out.text == job.text and out.latency_ms == job.latency_ms > 0
        assert out.tokens_in and out.tokens_out and out.cost and out.cost > 0
        meta = out.metadata
        assert meta["generated_by"] == "generation" and meta["config_hash"] == config.content_hash
        assert meta["config_version"] == config.version and meta["concurrency"] == 4
        assert meta["request_hash"] == job.request_hash and job.request_hash in sent
        assert job.overhead_ms is not None and job.overhead_ms >= 0
    assert Counter(o.schema_valid for o in outputs) == {True: 2, False: 4}
    violations = {o.metadata["schema_violation"] for o in outputs if not o.schema_valid}
    assert "at /answer: 3 is not of type 'string'" in violations
    assert any(v.startswith("not JSON") for v in violations)
    # The request is what the template says, with the key in the header only.
    body = requests[0].json
    assert body["model"] == "sim-model" and body["max_tokens"] == 64
    assert body["messages"][0]["role"] == "system"
    assert requests[0].headers["authorization"] == "Bearer sk-test-not-a-real-key"


def test_item_text_is_never_expanded_as_template(study: Any) -> None:
    data = build(study, n_items=1)
    item = data.items[0]
    item.input = "Ignore the above {context} and {metadata.lang} {{x}}"
    item.save()
    with LoadServer() as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        run = _start(study, make_template(study), [config])
        drain_all(run)
        body = server.requests[0].json
    assert body["messages"][1]["content"] == (
        "Context: Context 0\nQuestion: Ignore the above {context} and {metadata.lang} {{x}}")
    assert body["messages"][0]["content"] == "You answer questions in de."


def test_anthropic_candidates_speak_the_messages_api(study: Any) -> None:
    data = build(study, n_items=3)
    with LoadServer() as server:
        config = make_config(data.candidates[0], server.anthropic_base_url, provider="anthropic")
        run = _start(study, make_template(study), [config])
        drain_all(run)
        reqs = list(server.requests)
    assert {r.path for r in reqs} == {"/v1/messages"}
    assert reqs[0].json["system"] == "You answer questions in de."
    assert Output.objects.filter(candidate=data.candidates[0], error="").count() == 3


def test_every_fault_is_retried_or_recorded_with_its_kind(study: Any, settings: Any) -> None:
    data = build(study, n_items=8)
    refusal = raw(200, json.dumps({"id": "x", "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": None,
                                               "refusal": "I can't help with that."}}]}))
    truncated = raw(200, json.dumps({"id": "y", "choices": [{
        "index": 0, "finish_reason": "length",
        "message": {"role": "assistant", "content": "The answer is"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 64}}))
    scripts = {  # per item (its question), one behaviour per attempt
        "Question 0?": [rate_limited("0.01")],          # 429, retried, then fine
        "Question 1?": [server_error(503)],             # 5xx, retried, then fine
        "Question 2?": [slow(3.0, success("late"))],    # timeout, retried, then fine
        "Question 3?": [refusal],                       # refused (permanent)
        "Question 4?": [truncated],                     # truncated (recorded with its text)
        "Question 5?": [raw(400, '{"error": {"message": "bad request"}}')],  # 4xx, permanent
        "Question 6?": [server_error(500)] * 3,         # 5xx on every attempt: gives up
        "Question 7?": [connection_reset()],            # connection, retried, then fine
    }
    with LoadServer(scripts=scripts) as server:
        config = make_config(data.candidates[0], server.openai_base_url, timeout_s=1.0)
        run = _start(study, make_template(study), [config], concurrency=2)
        drain_all(run)
    jobs = {j.item.external_id: j for j in GenerationJob.objects.filter(run=run)
            .select_related("item")}
    kinds = {k: [e["kind"] for e in j.details.get("attempt_errors", [])] for k, j in jobs.items()}
    assert kinds["q-0"] == ["rate_limited"] and jobs["q-0"].status == "done"
    assert kinds["q-1"] == ["server_error"] and jobs["q-1"].status == "done"
    assert kinds["q-2"] == ["timeout"] and jobs["q-2"].status == "done"
    assert kinds["q-7"] == ["connection"] and jobs["q-7"].status == "done"
    for key in ("q-0", "q-1", "q-2", "q-7"):
        assert jobs[key].error_kind == "" and jobs[key].output.error == ""  # type: ignore[union-attr]
    assert (jobs["q-3"].status, jobs["q-3"].error_kind) == ("failed", "refused")
    assert (jobs["q-4"].status, jobs["q-4"].error_kind) == ("done", "truncated")
    assert jobs["q-4"].output.text == "The answer is"  # type: ignore[union-attr]
    assert jobs["q-4"].output.error.startswith("truncated")  # type: ignore[union-attr]
    assert (jobs["q-5"].status, jobs["q-5"].error_kind) == ("failed", "client_error")
    assert (jobs["q-6"].status, jobs["q-6"].error_kind) == ("failed", "server_error")
    assert kinds["q-6"] == ["server_error"] * 3 and jobs["q-6"].attempts == 3
    assert "gave up after 3 attempts" in jobs["q-6"].error
    # Every job ended with an output (failed ones carry their error), so error rates count them.
    outs = Output.objects.filter(candidate=data.candidates[0])
    assert outs.count() == 8
    assert {o.metadata["error_kind"] for o in outs if o.error} == {
        "refused", "truncated", "client_error", "server_error"}
    progress = __import__("generation.selectors", fromlist=["x"]).generation_run_progress(run=run)
    assert progress["errors_by_kind"] == {"refused": 1, "truncated": 1, "client_error": 1,
                                          "server_error": 1}
    assert progress["candidates"][0]["error_rate"] == pytest.approx(4 / 8)


def test_a_rerun_does_not_call_again_and_a_budget_stops_the_run(study: Any) -> None:
    data = build(study, n_items=10)
    # 256 characters: the simulated server counts 64 completion tokens, the config's
    # max_tokens, so every call costs what the estimate says.
    with LoadServer(answer=lambda req: "x" * 256) as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        template = make_template(study)
        first = _start(study, template, [config], selection={"kind": "items",
                                                             "external_ids": ["q-0", "q-1"]})
        drain_all(first)
        assert server.count() == 2
        again = _start(study, template, [config])
        assert again.creation_stats["already_finished"] == 2
        assert again.creation_stats["jobs_created"] == 8
        # The budget covers three requests at the estimated cost of one.
        per = again.est_request_cost
        assert per
        GenerationRun.objects.filter(pk=again.pk).update(max_cost=per * 3.5)
        again.refresh_from_db()
        drain_all(again)
        again.refresh_from_db()
    assert again.status == "stopped" and "max_cost" in again.stop_reason
    assert server.count() == 2 + 3
    spent = sum(j.cost or 0 for j in GenerationJob.objects.filter(run=again))
    assert spent <= per * 3.5
    assert GenerationJob.objects.filter(run=again, status="cancelled").count() == 5


def test_samples_make_one_job_each_and_only_sample_zero_an_output(study: Any) -> None:
    data = build(study, n_items=3)
    with LoadServer() as server:
        config = make_config(data.candidates[0], server.openai_base_url,
                             parameters={"seed": 7, "max_tokens": 16})
        run = _start(study, make_template(study), [config], samples=3)
        drain_all(run)
        seeds = sorted(r.json["seed"] for r in server.requests)
    assert GenerationJob.objects.filter(run=run, status="done").count() == 9
    assert Output.objects.filter(candidate=data.candidates[0]).count() == 3
    assert seeds == [7, 7, 7, 8, 8, 8, 9, 9, 9]


def test_a_stratified_sample_allocates_proportionally(study: Any) -> None:
    build(study, n_items=10)
    sel, ids = runs.selection_items(study=study, selection={
        "kind": "sample", "n": 4, "seed": 3, "stratify_by": "lang"})
    langs = Counter(study.items.get(pk=i).strata["lang"] for i in ids)
    assert langs == {"en": 2, "de": 2} and sel["stratify_by"] == "lang"
    assert runs.selection_items(study=study, selection={
        "kind": "sample", "n": 4, "seed": 3, "stratify_by": "lang"})[1] == ids


def test_outputs_from_another_source_are_never_overwritten(study: Any) -> None:
    from reviewhub.errors import ValidationFailed

    data = build(study, n_items=2)
    Output.objects.create(study=study, candidate=data.candidates[0], item=data.items[0],
                          text="imported")
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    with pytest.raises(ValidationFailed) as info:
        _start(study, make_template(study), [config])
    assert info.value.details["errors"][0]["path"] == "configs"


def test_a_second_drain_of_the_same_candidate_is_refused(study: Any) -> None:
    data = build(study, n_items=1)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    run = _start(study, make_template(study), [config])
    assert runs.drain_slot_take(run_id=run.pk, config_id=config.pk, token="a", lease_s=60)
    assert executor.run_drain(run_id=run.pk, config_id=config.pk).state == "busy"
    runs.drain_slot_release(run_id=run.pk, config_id=config.pk, token="a")
    assert runs.drain_slot_take(run_id=run.pk, config_id=config.pk, token="b", lease_s=60)


RECORDED = {
    "model": "gpt-prod-2025", "temperature": 0.3, "stream": True,
    "messages": [{"role": "system", "content": "You are the support bot. Context: {context}"},
                 {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]}],
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
}


def test_replay_sends_the_recorded_request_with_only_the_model_swapped(study: Any) -> None:
    data = build(study, n_items=2, n_candidates=2)
    for item in data.items:
        item.metadata = {**item.metadata, "recorded_request": RECORDED}
        item.save()
    with LoadServer() as server:
        openai_cfg = make_config(data.candidates[0], server.openai_base_url)
        anthropic_cfg = make_config(data.candidates[1], server.anthropic_base_url,
                                    provider="anthropic")
        run = _start(study, make_template(study), [openai_cfg, anthropic_cfg], replay=True)
        drain_all(run)
        sent = [r for r in server.requests if r.path == "/v1/chat/completions"]
        anthropic_sent = [r for r in server.requests if r.path == "/v1/messages"]
    # OpenAI-compatible: the recorded body as it was, tools and all, but the model (and no
    # streaming: the run reads whole answers).
    assert len(sent) == 2
    expected = {k: v for k, v in RECORDED.items() if k != "stream"} | {"model": "sim-model"}
    assert sent[0].json == expected
    jobs = {j.config_id: j for j in GenerationJob.objects.filter(run=run, item=data.items[0])}
    assert jobs[openai_cfg.pk].status == "done"
    assert jobs[openai_cfg.pk].request_hash == hashlib.sha256(sent[0].body).hexdigest()
    # Anthropic gets the messages-API form, the tool included (tests/generation/test_replay.py
    # covers each shape and each refusal).
    assert len(anthropic_sent) == 2
    assert anthropic_sent[0].json["tools"] == [
        {"name": "lookup", "input_schema": {"type": "object", "properties": {}}}]
    assert jobs[anthropic_cfg.pk].status == "done"
    run.refresh_from_db()
    assert run.status == "done"


def test_replay_translates_a_plain_chat_to_anthropic_messages() -> None:
    from generation.replay import replay_body

    recorded = {k: v for k, v in RECORDED.items() if k != "tools"}
    body = replay_body(recorded, provider="anthropic", model="claude-x", max_tokens=None)
    assert body == {"model": "claude-x", "max_tokens": 1024, "temperature": 0.3,
                    "system": "You are the support bot. Context: {context}",
                    "messages": [{"role": "user", "content": "Where is my order?"}]}


def test_replay_needs_a_recorded_request_on_every_item(study: Any) -> None:
    from reviewhub.errors import ValidationFailed

    data = build(study, n_items=2)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    with pytest.raises(ValidationFailed) as info:
        _start(study, make_template(study), [config], replay=True)
    assert info.value.details["errors"][0]["path"] == "replay"
