"""The recorded chat request of a Langfuse generation / a promptfoo result becomes the item's
`recorded_request`, which a candidate run replays (generation/replay.py): on the real exports
of `peer-exports/`, and on exports built in the shapes the tools' integrations log (Langfuse's
OpenAI integration logs `{"messages", "tools", "tool_choice"}` as the generation's input and
the sampling parameters, numbers as text included, as `modelParameters`; a promptfoo result
holds the rendered prompt in `prompt.raw` and the prompt's `config`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from generation.replay import recorded_of, replay_body
from imports.management.commands._common import study_for_import
from imports.peers import peer_import
from imports.peers.langfuse import translate as langfuse_translate
from imports.peers.promptfoo import translate as promptfoo_translate
from studies.models import Item

pytestmark = pytest.mark.django_db


@pytest.fixture
def exports(data_dir: Path) -> Path:
    path = data_dir / "peer-exports"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


def _requests(tr: Any) -> dict[str, Any]:
    return {row["item_id"]: row.get("item_recorded_request") for _, row in tr.rows}


def test_a_langchain_generation_with_tools_becomes_a_chat_request(exports: Path) -> None:
    doc = json.loads((exports / "langfuse" / "langgraph-python-2025-08-22.trace.json")
                     .read_text())
    tr = langfuse_translate(json.dumps(doc).encode(), "t.json", {"generation": "last"})
    (request,) = set(json.dumps(r, sort_keys=True) for r in _requests(tr).values())
    body = json.loads(request)
    last = max((o for o in doc["observations"] if o["type"] == "GENERATION"),
               key=lambda o: (o["endTime"], o["id"]))
    logged = json.loads(last["input"])
    assert body["model"] == last["model"] == "gpt-4o-2024-08-06"
    assert body["temperature"] == 0
    # The tool definition LangChain logs as a `role: tool` message is a tool of the request;
    # the assistant's tool call (under additional_kwargs) is an OpenAI `tool_calls`.
    assert body["tools"] == [logged[-1]["content"]]
    assert [m["role"] for m in body["messages"]] == ["user", "user", "assistant", "tool"]
    assert body["messages"][2]["tool_calls"] == logged[2]["additional_kwargs"]["tool_calls"]
    assert body["messages"][3]["tool_call_id"] == logged[3]["tool_call_id"]
    assert recorded_of({}, body) is body
    assert any("recorded_request" in n for n in tr.notes)


@pytest.mark.parametrize("name", ["google-gemini-2025-08-01.trace.json",
                                  "openai-agents-2025-09-30.trace.json"])
def test_inputs_that_are_not_chat_messages_give_no_request(exports: Path, name: str) -> None:
    data = (exports / "langfuse" / name).read_bytes()
    tr = langfuse_translate(data, name, {"generation": "last"})
    assert tr.rows and set(_requests(tr).values()) == {None}
    assert any("no recorded request" in n for n in tr.notes)


def _openai_integration_trace() -> bytes:
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    gen = {"id": "gen-1", "type": "GENERATION", "model": "gpt-4o-mini",
           "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z",
           "input": json.dumps({"tools": tools, "tool_choice": "auto", "messages": [
               {"role": "system", "content": "You are a weather bot."},
               {"role": "user", "content": "Weather in Tokyo?"}]}),
           "output": json.dumps({"role": "assistant", "content": "Sunny."}),
           "modelParameters": {"temperature": "0.2", "max_tokens": "256", "top_p": 1,
                               "response_format": json.dumps({"type": "json_object"})},
           "usageDetails": {"input": 40, "output": 3}, "latency": 0.8}
    score = {"id": "s-1", "traceId": "tr-1", "observationId": None, "name": "helpful",
             "dataType": "BOOLEAN", "value": 1, "source": "ANNOTATION",
             "authorUserId": "user-ann"}
    return json.dumps([{"trace": {"id": "tr-1", "input": json.dumps("Weather in Tokyo?"),
                                  "scores": [score]}, "observations": [gen]}]).encode()


def test_the_openai_integrations_shape_is_imported_and_replayable(lead: Any) -> None:
    study = study_for_import("lf-req", owner="lead", name=None)
    peer_import(study=study, tool="langfuse", data=_openai_integration_trace(),
                filename="t.json")
    item = Item.objects.get(study=study)
    body = item.recorded_request
    assert body["model"] == "gpt-4o-mini"
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.2, 256, 1)
    assert body["response_format"] == {"type": "json_object"}
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == \
        "get_weather"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "recorded_request" not in item.metadata
    sent = replay_body(recorded_of(item.metadata, item.recorded_request), provider="openai",
                       model="cand-x", max_tokens=None)
    assert sent == {**body, "model": "cand-x"}


def test_promptfoo_results_name_the_chat_request_sent(exports: Path, lead: Any) -> None:
    f = exports / "promptfoo" / "french-greeting-output.json"
    tr = promptfoo_translate(f.read_bytes(), f.name, {})
    assert _requests(tr) == {"test-0": {"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "Greet the user in French."}]}}
    study = study_for_import("pf-req", owner="lead", name=None)
    peer_import(study=study, tool="promptfoo", data=f.read_bytes(), filename=f.name)
    assert Item.objects.get(study=study).recorded_request["messages"][0]["content"] == \
        "Greet the user in French."


def test_a_chat_prompt_with_tools_in_its_config(lead: Any) -> None:
    messages = [{"role": "system", "content": "Answer in JSON."},
                {"role": "user", "content": "Capital of France?"}]
    config = {"temperature": 0, "response_format": {"type": "json_object"},
              "tools": [{"type": "function", "function": {"name": "search", "parameters": {
                  "type": "object", "properties": {}}}}]}

    def result(t: int, provider: str) -> dict[str, Any]:
        return {"id": f"r{t}", "testIdx": t, "promptIdx": 0, "vars": {"q": "France"},
                "provider": {"id": provider, "label": ""},
                "prompt": {"raw": json.dumps(messages), "label": "json", "config": config},
                "response": {"output": "{\"capital\": \"Paris\"}"}, "latencyMs": 10,
                "gradingResult": {"pass": True, "score": 1, "componentResults": [
                    {"pass": True, "score": 1, "assertion": {"type": "is-json"}}]}}

    doc = {"results": {"version": 3, "prompts": [{"raw": json.dumps(messages), "label": "json"}],
                       "results": [result(0, "openai:chat:gpt-4o"),
                                   result(1, "exec:python run.py"),
                                   result(2, "anthropic:messages:claude-3-5-haiku-latest")]}}
    tr = promptfoo_translate(json.dumps(doc).encode(), "r.json", {})
    got = _requests(tr)
    assert got["test-0"] == {"model": "gpt-4o", "messages": messages, **config}
    assert got["test-1"] is None  # a script provider: no chat request
    assert got["test-2"]["model"] == "claude-3-5-haiku-latest"


def test_the_csv_says_it_has_no_request() -> None:
    header = ["q", "[openai:gpt-4o] p", "Status", "Score", "Named Scores", "Grader Reason",
              "Comment"]
    data = (",".join(header) + "\nFrance,Paris,PASS,1,{},,\n").encode()
    tr = promptfoo_translate(data, "r.csv", {})
    assert set(_requests(tr).values()) == {None}
    assert any("no recorded request" in n for n in tr.notes)
