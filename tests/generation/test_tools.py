"""Tool definitions in the production prompt template: validated (a 400 naming the field),
part of the content hash whatever wire shape they were given in, sent in each provider's shape
(the preview shows the exact request), and a tool call in the answer recorded (finish reason,
the calls' JSON as the text of a call-only answer, `tool_calls` in the output's metadata).

SIMULATED PROVIDER: `ProviderServer` (in the test process) answers with scripted bodies in the
providers' documented tool-call shapes."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from generation.models import GenerationJob, PromptTemplate
from judges.providers.streaming import assemble
from studies.models import Output
from tests.judges.provider_server import ProviderServer, raw

from .fixtures import KEY_ENV, build, make_config, make_template
from .test_runs import _start, drain_all

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OPENAI_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.", "parameters": SCHEMA}}
ANTHROPIC_TOOL = {"name": "get_weather", "description": "Weather in a city.",
                  "input_schema": SCHEMA}


def _templates(study: Any) -> str:
    return f"/api/studies/{study.slug}/prompt-templates"


def test_tools_in_either_shape_are_one_version_and_change_the_hash(study: Any,
                                                                   lead_client: Any) -> None:
    build(study)
    base = {"user": "Q: {input}"}
    plain = lead_client.post(_templates(study), base, format="json").json()
    assert "tools" not in plain["template"]  # no tools: the hash of before tools existed
    a = lead_client.post(_templates(study), {**base, "tools": [OPENAI_TOOL]}, format="json")
    assert a.status_code == 201, a.content
    b = lead_client.post(_templates(study), {**base, "tools": [ANTHROPIC_TOOL]}, format="json")
    assert b.status_code == 200 and b.json()["id"] == a.json()["id"]
    assert a.json()["content_hash"] != plain["content_hash"]
    assert a.json()["template"]["tools"] == [
        {"name": "get_weather", "description": "Weather in a city.", "parameters": SCHEMA}]
    other = {**ANTHROPIC_TOOL, "description": "Weather."}
    c = lead_client.post(_templates(study), {**base, "tools": [other]}, format="json")
    assert c.status_code == 201 and c.json()["content_hash"] != a.json()["content_hash"]


@pytest.mark.parametrize(("tools", "extra", "field"), [
    ({"name": "x"}, {}, "tools"),
    (["get_weather"], {}, "tools[0]"),
    ([{"type": "function"}], {}, "tools[0].function"),
    ([{"type": "function", "function": {"name": "bad name!"}}], {}, "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "t", "parameters": {"type": "wrong"}}}], {},
     "tools[0].function.parameters"),
    ([ANTHROPIC_TOOL, {"name": "t", "input_schema": {"type": "string"}}], {},
     "tools[1].input_schema"),
    ([ANTHROPIC_TOOL, OPENAI_TOOL], {}, "tools[1].function.name"),  # the same name twice
    ([{"name": "t", "input_schema": SCHEMA, "cache": True}], {}, "tools[0].cache"),
    ([{"name": "t", "description": 3}], {}, "tools[0].description"),
    ([ANTHROPIC_TOOL], {"output_schema": SCHEMA, "structured_output": True}, "tools"),
])
def test_a_malformed_tool_is_a_400_naming_the_field(study: Any, lead_client: Any, tools: Any,
                                                    extra: dict[str, Any], field: str) -> None:
    build(study)
    resp = lead_client.post(_templates(study), {"user": "Q: {input}", "tools": tools, **extra},
                            format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["details"]["errors"][0]["path"] == field
    assert PromptTemplate.objects.count() == 0


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_preview_shows_the_request_exactly_as_sent(study: Any, lead_client: Any,
                                                       monkeypatch: Any, provider: str) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    data = build(study, n_items=2)
    template = make_template(study, tools=[OPENAI_TOOL])
    with ProviderServer() as server:
        answer = (
            {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
             "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                          "input": {"city": "Tokyo"}}],
             "usage": {"input_tokens": 30, "output_tokens": 12}}
            if provider == "anthropic" else
            {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{
                "index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None, "tool_calls": [{
                        "id": "call_1", "type": "function", "function": {
                            "name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]}}],
             "usage": {"prompt_tokens": 30, "completion_tokens": 12}})
        server.enqueue(*[raw(200, json.dumps(answer),
                             {"Content-Type": "application/json"})] * 2)
        base = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
        config = make_config(data.candidates[0], base, provider=provider)
        resp = lead_client.post(f"{_templates(study)}/{template.pk}/preview",
                                {"config": config.pk, "item": data.items[1].external_id},
                                format="json")
        assert resp.status_code == 200, resp.content
        preview = resp.json()
        run = _start(study, template, [config], concurrency=2)
        drain_all(run)
        sent = [r for r in server.requests if r.body]
    tools = preview["body"]["tools"]
    if provider == "anthropic":
        assert tools == [ANTHROPIC_TOOL]
        assert preview["headers"]["x-api-key"] == "REDACTED"
    else:
        assert tools == [OPENAI_TOOL]
        assert preview["headers"]["Authorization"] == "REDACTED"
    # The preview is the request the run sent for that item, byte for byte.
    job = GenerationJob.objects.get(run=run, item=data.items[1])
    assert preview["request_hash"] == job.request_hash
    assert job.request_hash in {hashlib.sha256(r.body).hexdigest() for r in sent}
    assert next(r.json for r in sent
                if hashlib.sha256(r.body).hexdigest() == job.request_hash) == preview["body"]
    # The tool call is the answer: recorded with its finish reason and its JSON.
    calls = [{"id": "toolu_1" if provider == "anthropic" else "call_1",
              "name": "get_weather", "arguments": {"city": "Tokyo"}}]
    assert job.status == "done" and job.error_kind == ""
    assert job.finish_reason == ("tool_use" if provider == "anthropic" else "tool_calls")
    assert json.loads(job.text) == calls and job.details["tool_calls"] == calls
    out = Output.objects.get(pk=job.output_id)
    assert json.loads(out.text) == calls and out.metadata["tool_calls"] == calls
    assert out.tokens_out == 12


def test_a_preview_of_an_item_missing_a_placeholder_is_a_400(study: Any,
                                                            lead_client: Any) -> None:
    data = build(study, n_items=1)
    template = make_template(study)  # {metadata.lang}, which the item then loses
    item = data.items[0]
    item.metadata = {}
    item.save()
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    resp = lead_client.post(f"{_templates(study)}/{template.pk}/preview", {"config": config.pk},
                            format="json")
    assert resp.status_code == 400
    assert resp.json()["error"]["details"]["errors"][0]["path"] == "item"
    bad = lead_client.post(f"{_templates(study)}/{template.pk}/preview", {"config": 999999},
                           format="json")
    assert bad.json()["error"]["details"]["errors"][0]["path"] == "config"


async def _pieces(events: list[bytes]) -> AsyncIterator[bytes]:
    for e in events:
        yield e


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def test_streamed_tool_calls_are_assembled_from_their_pieces() -> None:
    openai = [_sse(None, {"id": "c1", "choices": [{"index": 0, "delta": {
        "role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                             "function": {"name": "get_weather",
                                                          "arguments": ""}}]}}]})]
    openai += [_sse(None, {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": piece}}]}}]})
        for piece in ('{"ci', 'ty": "To', 'kyo"}')]
    openai += [_sse(None, {"id": "c1", "choices": [{"index": 0, "delta": {},
                                                    "finish_reason": "tool_calls"}]}),
               _sse(None, "[DONE]")]
    answer = asyncio.run(assemble("openai", _pieces(openai)))
    assert answer.finish_reason == "tool_calls" and answer.text == ""
    assert answer.tool_calls() == [{"id": "call_1", "name": "get_weather",
                                    "arguments": {"city": "Tokyo"}}]
    assert answer.first_token_at is not None
    anthropic = [
        _sse("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "usage": {"input_tokens": 9, "output_tokens": 1}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "Checking."}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 1,
                                     "content_block": {"type": "tool_use", "id": "toolu_1",
                                                       "name": "get_weather", "input": {}}}),
        *[_sse("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
            "type": "input_json_delta", "partial_json": p}}) for p in ('{"city":', ' "Tokyo"}')],
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                               "usage": {"output_tokens": 20}}),
        _sse("message_stop", {"type": "message_stop"})]
    answer = asyncio.run(assemble("anthropic", _pieces(anthropic)))
    assert (answer.text, answer.finish_reason, answer.tokens_out) == ("Checking.", "tool_use",
                                                                      20)
    assert answer.tool_calls() == [{"id": "toolu_1", "name": "get_weather",
                                    "arguments": {"city": "Tokyo"}}]


def test_the_estimate_counts_the_tool_definitions(study: Any) -> None:
    from generation.config import canonical_json, estimate_tokens
    from generation.estimate import run_estimate

    data = build(study, n_items=3)
    config = make_config(data.candidates[0], "http://127.0.0.1:9/v1")
    plain = make_template(study)
    with_tools = make_template(study, tools=[OPENAI_TOOL])
    ids = [i.pk for i in data.items]
    a = run_estimate(template=plain, configs=[config], item_ids=ids, samples=1)
    b = run_estimate(template=with_tools, configs=[config], item_ids=ids, samples=1)
    tools_chars = len(canonical_json(with_tools.template["tools"]))
    # Three requests' prompt characters plus three copies of the tools, at four a token.
    chars_a = a.candidates[0].tokens_in
    assert b.candidates[0].tokens_in > chars_a
    assert b.candidates[0].tokens_in == pytest.approx(
        estimate_tokens(chars_a * 4 + 3 * tools_chars), abs=2)
