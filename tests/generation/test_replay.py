"""Replay of a recorded OpenAI chat request with tools to an Anthropic candidate: each shape of
the translation against Anthropic's documented messages-API form (tools with `input_schema`,
`tool_use` blocks with parsed `input`, `tool_result` blocks in one user message,
`tool_choice`, `disable_parallel_tool_use`), the exact body a local Anthropic server receives
in a run, and each refusal, which fails that output with the message index and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generation import executor, runs
from generation.models import GenerationJob
from generation.replay import NotReplayable, replay_body

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer

LOOKUP = {"type": "function", "function": {
    "name": "lookup_order", "description": "Find an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                   "required": ["order_id"]}}}
REFUND = {"type": "function", "function": {"name": "refund", "parameters": {
    "type": "object", "properties": {"amount": {"type": "number"}}}}}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


# A support conversation as an OpenAI application logs it: two parallel calls, their results,
# and the user's follow-up.
RECORDED: dict[str, Any] = {
    "model": "gpt-prod", "temperature": 0.2, "stream": True,
    "messages": [
        {"role": "system", "content": "You are the support bot."},
        {"role": "user", "content": "Where are orders A-17 and B-2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_a17", "lookup_order", '{"order_id": "A-17"}'),
            call("call_b2", "lookup_order", '{"order_id": "B-2"}')]},
        {"role": "tool", "tool_call_id": "call_a17", "content": "shipped 2026-12-01"},
        {"role": "tool", "tool_call_id": "call_b2",
         "content": [{"type": "text", "text": "not found"}]},
        {"role": "assistant", "content": "A-17 has shipped; B-2 is unknown."},
        {"role": "user", "content": "Refund B-2 then, 12.50."},
    ],
    "tools": [LOOKUP, REFUND],
    "tool_choice": {"type": "function", "function": {"name": "refund"}},
    "parallel_tool_calls": False,
}

EXPECTED_MESSAGES = [
    {"role": "user", "content": "Where are orders A-17 and B-2?"},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_a17", "name": "lookup_order",
         "input": {"order_id": "A-17"}},
        {"type": "tool_use", "id": "call_b2", "name": "lookup_order",
         "input": {"order_id": "B-2"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_a17", "content": "shipped 2026-12-01"},
        {"type": "tool_result", "tool_use_id": "call_b2", "content": "not found"}]},
    {"role": "assistant", "content": "A-17 has shipped; B-2 is unknown."},
    {"role": "user", "content": "Refund B-2 then, 12.50."},
]
EXPECTED_TOOLS = [
    {"name": "lookup_order", "description": "Find an order by its id.",
     "input_schema": LOOKUP["function"]["parameters"]},
    {"name": "refund", "input_schema": REFUND["function"]["parameters"]},
]


def anthropic(recorded: dict[str, Any]) -> dict[str, Any]:
    return replay_body(recorded, provider="anthropic", model="claude-x", max_tokens=None)


def with_(**changes: Any) -> dict[str, Any]:
    recorded = {k: v for k, v in RECORDED.items() if k not in changes}
    recorded.update({k: v for k, v in changes.items() if v is not None})
    return recorded


def test_the_whole_conversation_takes_anthropics_shapes() -> None:
    assert anthropic(RECORDED) == {
        "model": "claude-x", "max_tokens": 1024, "temperature": 0.2,
        "system": "You are the support bot.", "messages": EXPECTED_MESSAGES,
        "tools": EXPECTED_TOOLS,
        "tool_choice": {"type": "tool", "name": "refund", "disable_parallel_tool_use": True},
    }


@pytest.mark.parametrize(("tool_choice", "parallel", "expected"), [
    ("auto", None, {"type": "auto"}),
    ("none", None, {"type": "none"}),
    ("none", False, {"type": "none"}),  # no call at all: nothing to run in parallel
    ("required", None, {"type": "any"}),
    ("required", True, {"type": "any"}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ({"type": "function", "function": {"name": "lookup_order"}}, None,
     {"type": "tool", "name": "lookup_order"}),
    (None, None, None),  # the default on both sides: auto, parallel calls allowed
    (None, True, None),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
])
def test_tool_choice_and_parallel_calls(tool_choice: Any, parallel: Any, expected: Any) -> None:
    recorded = {k: v for k, v in RECORDED.items()
                if k not in ("tool_choice", "parallel_tool_calls")}
    if tool_choice is not None:
        recorded["tool_choice"] = tool_choice
    if parallel is not None:
        recorded["parallel_tool_calls"] = parallel
    body = anthropic(recorded)
    assert body.get("tool_choice") == expected
    assert body["tools"] == EXPECTED_TOOLS  # "none" keeps the definitions, as OpenAI does


def test_assistant_text_beside_calls_comes_first_and_parameterless_tools_get_an_empty_object(
        ) -> None:
    recorded = {"messages": [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}],
         "tool_calls": [call("call_1", "now", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "17:40"},
        {"role": "user", "content": "Thanks, and in Tokyo?"}],
        "tools": [{"type": "function", "function": {"name": "now"}},
                  {"type": "function", "function": {"name": "zone", "parameters": {}}}]}
    body = anthropic(recorded)
    assert body["messages"] == [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_1", "name": "now", "input": {}}]},
        # The user's text after a tool turn joins its results, after them.
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "17:40"},
            {"type": "text", "text": "Thanks, and in Tokyo?"}]}]
    empty = {"type": "object", "properties": {}}
    assert body["tools"] == [{"name": "now", "input_schema": empty},
                             {"name": "zone", "input_schema": empty}]
    assert "tool_choice" not in body


def test_the_openai_candidate_still_gets_the_recording_as_it_was() -> None:
    body = replay_body(RECORDED, provider="openai", model="gpt-new", max_tokens=None)
    assert body == {k: v for k, v in RECORDED.items() if k != "stream"} | {"model": "gpt-new"}


def _messages(*changed: tuple[int, dict[str, Any]]) -> list[dict[str, Any]]:
    messages = [dict(m) for m in RECORDED["messages"]]
    for i, m in changed:
        messages[i] = m
    return messages


ASSISTANT_CALLS = RECORDED["messages"][2]


@pytest.mark.parametrize(("recorded", "reason"), [
    (with_(messages=_messages((2, {**ASSISTANT_CALLS, "tool_calls": [
        call("call_a17", "lookup_order", '{"order_id": "A-17"'),
        call("call_b2", "lookup_order", "{}")]}))),
     "messages[2].tool_calls[0].function.arguments: not valid JSON (Expecting ',' delimiter"),
    (with_(messages=_messages((2, {**ASSISTANT_CALLS, "tool_calls": [
        call("call_a17", "lookup_order", "{}"), call("call_b2", "lookup_order", "[1]")]}))),
     "messages[2].tool_calls[1].function.arguments: must be a JSON object, got list"),
    (with_(messages=_messages((3, {"role": "tool", "tool_call_id": "call_zz",
                                   "content": "x"}))),
     "messages[3].tool_call_id: 'call_zz' matches no tool call of the assistant message "
     "before it"),
    (with_(messages=_messages((4, {"role": "tool", "tool_call_id": "call_a17",
                                   "content": "again"}))),
     "messages[4].tool_call_id: 'call_a17' answers a tool call already answered"),
    (with_(messages=_messages()[:4] + _messages()[5:]),
     "messages[2].tool_calls: call 'call_b2' has no tool result before messages[4]"),
    (with_(messages=_messages()[:3]),
     "messages[2].tool_calls: call 'call_a17' has no tool result (the conversation ends "
     "with it)"),
    (with_(messages=_messages((2, {**ASSISTANT_CALLS, "tool_calls": [
        call("call a17", "lookup_order", "{}")]}))),
     "messages[2].tool_calls[0].id: 'call a17' is not an id Anthropic accepts"),
    (with_(messages=_messages((2, {**ASSISTANT_CALLS, "tool_calls": [
        {"id": "c1", "type": "custom", "custom": {"name": "x", "input": "y"}}]}))),
     "messages[2].tool_calls[0].type: only function calls have an Anthropic form"),
    (with_(messages=_messages((2, {"role": "assistant", "content": None,
                                   "function_call": {"name": "f", "arguments": "{}"}}))),
     "messages[2]: legacy function calling has no faithful Anthropic form here"),
    (with_(tools=[LOOKUP, {"type": "function", "function": {"name": "refund",
                                                             "parameters": {"type": "array"}}}]),
     "tools[1].function.parameters: Anthropic needs a JSON Schema of type object"),
    (with_(tools=[LOOKUP, {"type": "function", "function": {**REFUND["function"],
                                                             "strict": True}}]),
     "tools[1].function.strict: strict mode has no faithful Anthropic form here"),
    (with_(tools=[{"type": "web_search"}]),
     "tools[0].type: only function tools have an Anthropic form"),
    (with_(tools=[{"type": "function", "function": {"name": "look up"}}]),
     "tools[0].function.name: 'look up' is not 1-64 letters, digits, _ or -"),
    (with_(tool_choice={"type": "function", "function": {"name": "cancel"}}),
     "tool_choice.function.name: 'cancel' is not one of the tools"),
    (with_(tool_choice="sometimes"), "tool_choice: 'sometimes' has no Anthropic form"),
    ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"},
     "tool_choice: set without tools"),
    (with_(response_format={"type": "json_object"}), "the recorded request uses "
     "response_format, which has no faithful Anthropic messages form here"),
])
def test_what_has_no_faithful_form_names_the_message_and_field(recorded: dict[str, Any],
                                                               reason: str) -> None:
    with pytest.raises(NotReplayable) as caught:
        anthropic(recorded)
    assert str(caught.value).startswith(reason), str(caught.value)


# --- End to end: a run against the local Anthropic server ----------------------------------

@pytest.fixture
def _env(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 1


def _drain(run: Any, config_ids: list[int]) -> None:
    for _ in range(50):
        for cid in config_ids:
            executor.run_drain(run_id=run.pk, config_id=cid)
        if not GenerationJob.objects.filter(run=run, status__in=runs.ACTIVE).exists():
            runs.run_finish_if_complete(run_id=run.pk)
            return
    raise AssertionError("the run did not finish")


@pytest.mark.django_db
def test_a_run_sends_the_translated_conversation_and_fails_only_the_unfaithful_item(
        study: Any, _env: None) -> None:
    data = build(study, n_items=2)
    good, bad = data.items
    good.recorded_request = RECORDED
    good.save()
    bad.recorded_request = with_(messages=_messages((4, {
        "role": "tool", "tool_call_id": "call_nope", "content": "x"})))
    bad.save()
    # The server answers the forced `refund` with this input as a tool_use block.
    with LoadServer(answer=lambda req: '{"amount": 12.5}') as server:
        config = make_config(data.candidates[0], server.anthropic_base_url,
                             provider="anthropic")
        run = runs.generation_run_start(study=study, template=make_template(study),
                                        configs=[config], concurrency=2, replay=True,
                                        enqueue=lambda r, c: None)
        _drain(run, [config.pk])
        sent = [r for r in server.requests if r.path == "/v1/messages"]
    assert len(sent) == 1
    assert json.loads(sent[0].body) == {
        "model": "sim-model", "max_tokens": 64, "temperature": 0.2,
        "system": "You are the support bot.", "messages": EXPECTED_MESSAGES,
        "tools": EXPECTED_TOOLS,
        "tool_choice": {"type": "tool", "name": "refund", "disable_parallel_tool_use": True},
    }
    jobs = {j.item_id: j for j in GenerationJob.objects.filter(run=run)}
    assert jobs[good.pk].status == "done"
    assert jobs[good.pk].details["tool_calls"][0]["name"] == "refund"
    failed = jobs[bad.pk]
    assert (failed.status, failed.error_kind) == ("failed", "config")
    assert "recorded request not replayable: messages[4].tool_call_id: 'call_nope'" \
        in failed.error
    run.refresh_from_db()
    assert run.status == "done"
