"""A recorded OpenAI chat request's messages and tools in Anthropic's messages form (pure).

OpenAI keeps a tool call on the assistant message (`tool_calls[].function.arguments`, a JSON
*string*) and its result in a message of its own (`role: "tool"`, `tool_call_id`); Anthropic
keeps both as content blocks: the call a `tool_use` block (`id`, `name`, `input` an object)
in the assistant's content, the results `tool_result` blocks (`tool_use_id`, `content`) at
the start of the next user message, every result of one assistant turn in that one message.
What has no faithful form raises NotReplayable naming the message index and field, so that
output fails with the reason and the run goes on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# Both providers' rule for tool names; Anthropic's for tool_use ids (OpenAI's `call_…` fit).
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
ID_RE = re.compile(r"[A-Za-z0-9_-]+")
NO_PARAMETERS = {"type": "object", "properties": {}}


class NotReplayable(ValueError):
    """The recorded request is not a valid chat request for the candidate's provider."""


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "".join(str(p["text"]) for p in content)
    raise NotReplayable(f"{where}: content is not text (only text parts can be replayed to "
                        "this provider)")


def tools_to_anthropic(tools: Any) -> list[dict[str, Any]]:
    """OpenAI `tools` (`{"type": "function", "function": {name, description, parameters}}`)
    as Anthropic tools (`{name, description, input_schema}`)."""
    if not isinstance(tools, list) or not tools:
        raise NotReplayable("tools: must be a non-empty list")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" \
                or not isinstance(fn, Mapping):
            raise NotReplayable(f"tools[{i}].type: only function tools have an Anthropic form")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise NotReplayable(f"tools[{i}].function.name: {name!r} is not 1-64 letters, "
                                "digits, _ or -")
        if fn.get("strict"):
            # Strict schema adherence is a guarantee the candidate would not be given.
            raise NotReplayable(f"tools[{i}].function.strict: strict mode has no faithful "
                                "Anthropic form here")
        params = fn.get("parameters")
        if params is None or params == {}:
            # OpenAI: omitted parameters define a function that takes none.
            params = NO_PARAMETERS
        elif not isinstance(params, Mapping) or params.get("type") != "object":
            raise NotReplayable(f"tools[{i}].function.parameters: Anthropic needs a JSON "
                                "Schema of type object")
        sent: dict[str, Any] = {"name": name}
        if isinstance(fn.get("description"), str) and fn["description"]:
            sent["description"] = fn["description"]
        sent["input_schema"] = dict(params)
        out.append(sent)
    return out


def tool_choice_to_anthropic(recorded: Mapping[str, Any],
                             tool_names: list[str]) -> dict[str, Any] | None:
    """`tool_choice` and `parallel_tool_calls` as Anthropic's `tool_choice` (None: the
    default, auto with parallel calls allowed)."""
    choice = recorded.get("tool_choice")
    parallel = recorded.get("parallel_tool_calls")
    if choice is not None and not tool_names:
        raise NotReplayable("tool_choice: set without tools")
    if parallel not in (None, True, False):
        raise NotReplayable("parallel_tool_calls: must be true or false")
    sent: dict[str, Any]
    if choice is None or choice == "auto":
        sent = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}  # no call at all: the parallel setting does not apply
    elif choice == "required":
        sent = {"type": "any"}
    elif isinstance(choice, Mapping) and choice.get("type") == "function" \
            and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        if name not in tool_names:
            raise NotReplayable(f"tool_choice.function.name: {name!r} is not one of the tools")
        sent = {"type": "tool", "name": name}
    else:
        raise NotReplayable(f"tool_choice: {choice!r} has no Anthropic form")
    if parallel is False and tool_names:
        sent["disable_parallel_tool_use"] = True
    elif choice is None:
        return None
    return sent


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    """One OpenAI tool call as an Anthropic `tool_use` block."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(call, Mapping) or call.get("type", "function") != "function" \
            or not isinstance(fn, Mapping):
        raise NotReplayable(f"{where}.type: only function calls have an Anthropic form")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not ID_RE.fullmatch(call_id):
        raise NotReplayable(f"{where}.id: {call_id!r} is not an id Anthropic accepts "
                            "(letters, digits, _ or -)")
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise NotReplayable(f"{where}.function.name: {name!r} is not 1-64 letters, digits, "
                            "_ or -")
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        raise NotReplayable(f"{where}.function.arguments: must be a JSON string")
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise NotReplayable(f"{where}.function.arguments: not valid JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise NotReplayable(f"{where}.function.arguments: must be a JSON object, got "
                            f"{type(parsed).__name__}")
    return {"type": "tool_use", "id": call_id, "name": name, "input": parsed}


def _assistant(m: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """An assistant message in Anthropic's form, and the ids of the tool calls it makes."""
    calls = m.get("tool_calls")
    if not calls:
        return {"role": "assistant", "content": text_of(m.get("content"), where)}, []
    if not isinstance(calls, list):
        raise NotReplayable(f"{where}.tool_calls: must be a list")
    content = m.get("content")
    text = "" if content is None else text_of(content, where)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [_tool_use(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    ids = [str(b["id"]) for b in blocks if b["type"] == "tool_use"]
    if len(set(ids)) != len(ids):
        raise NotReplayable(f"{where}.tool_calls: two calls share an id")
    return {"role": "assistant", "content": blocks}, ids


class _Conversation:
    """The Anthropic messages being built, with the tool calls still waiting for a result."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.pending: dict[str, int] = {}  # tool call id -> index of the assistant message
        self.answered: set[str] = set()

    def _results_open(self) -> bool:
        last = self.messages[-1] if self.messages else None
        return bool(last and last["role"] == "user" and isinstance(last["content"], list))

    def _close_tool_turn(self, before: str) -> None:
        """Anthropic (as OpenAI) needs every call answered before the conversation goes on."""
        if self.pending:
            call_id, at = next(iter(self.pending.items()))
            raise NotReplayable(f"messages[{at}].tool_calls: call {call_id!r} has no tool "
                                f"result {before}")

    def add(self, i: int, m: Mapping[str, Any]) -> None:
        role, where = m["role"], f"messages[{i}]"
        if "function_call" in m or role == "function":
            raise NotReplayable(f"{where}: legacy function calling has no faithful Anthropic "
                                "form here")
        if role in ("system", "developer"):
            self.system.append(text_of(m.get("content"), where))
        elif role == "tool":
            self._tool_result(i, m, where)
        elif role == "user":
            self._close_tool_turn(f"before {where}")
            text = text_of(m.get("content"), where)
            if self._results_open():
                # Text after the results of a tool turn joins them (results come first).
                self.messages[-1]["content"].append({"type": "text", "text": text})
            else:
                self.messages.append({"role": "user", "content": text})
        elif role == "assistant":
            self._close_tool_turn(f"before {where}")
            message, ids = _assistant(m, where)
            self.messages.append(message)
            self.pending = {call_id: i for call_id in ids}
        else:
            raise NotReplayable(f"{where}: role {role!r} cannot be replayed to Anthropic")

    def _tool_result(self, i: int, m: Mapping[str, Any], where: str) -> None:
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in self.pending:
            why = ("answers a tool call already answered" if call_id in self.answered
                   else "matches no tool call of the assistant message before it")
            raise NotReplayable(f"{where}.tool_call_id: {call_id!r} {why}")
        del self.pending[call_id]
        self.answered.add(call_id)
        block = {"type": "tool_result", "tool_use_id": call_id,
                 "content": text_of(m.get("content"), where)}
        if self._results_open() and all(b.get("type") == "tool_result"
                                        for b in self.messages[-1]["content"]):
            self.messages[-1]["content"].append(block)
        else:
            self.messages.append({"role": "user", "content": [block]})

    def finish(self) -> None:
        self._close_tool_turn("(the conversation ends with it)")


def messages_to_anthropic(messages: list[Mapping[str, Any]]
                          ) -> tuple[list[str], list[dict[str, Any]]]:
    """(the system texts, the Anthropic messages) of the recorded messages."""
    conversation = _Conversation()
    for i, m in enumerate(messages):
        conversation.add(i, m)
    conversation.finish()
    return conversation.system, conversation.messages
