"""Responses API answers in shapes the recordings lack, through an `Agent`, over real HTTP.

Issue #43:

- item 2: a ``function_call`` whose ``arguments`` is a JSON object, not the string the API
  documents, ran its tool with ``{}`` (its defaults: a side effect nobody asked for) and the
  thread recorded ``{}``. The object is now the call's arguments; any other value than a string or
  an object reaches the tool layer as it is and becomes an invalid-arguments result.
- item 3: an item whose ``response.output_item.done`` never came was dropped, although
  ``response.completed`` carried it (a tool call lost, or an empty answer stored after its text
  was shown). The answer's items are now the done items reconciled with the final response's
  ``output``, index by index.

Each stream is a recorded one (``tests/wire/openai_responses``) with events changed or left out,
served by the replay server on loopback, through the real ``openai`` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from nbagent import Agent
from nbagent.messages import AssistantMessage, ToolResultMessage
from nbagent.models.openai import OpenAIResponsesModel
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore
from nbagent.tools import Tool
from tests.wire.replay_server import RESPONSES_CASES_DIR, ReplayServer, load_case, split_sse_events

KEY = "sk-responses-shapes-0123456789abcdef"
FAST = Retry(attempts=2, initial_delay=0, max_delay=0, jitter=0)

Edit = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""Takes an event's JSON, returns it changed, or None to leave the event out."""


def edited(name: str, edit: Edit) -> dict[str, Any]:
    """The recorded case `name` with each event's JSON passed through `edit`."""
    case = load_case(name, RESPONSES_CASES_DIR)
    if "sse" not in case["response"]:
        body = edit({"type": "whole", "response": case["response"]["body"]})
        assert body is not None
        return {**case, "response": {**case["response"], "body": body["response"]}}
    events = []
    for text in split_sse_events(case["response"]["sse"]):
        head, _, data = text.partition("data: ")
        if not data.strip() or data.strip() == "[DONE]":
            events.append(text)
            continue
        event = edit(json.loads(data))
        if event is not None:
            events.append(f"{head}data: {json.dumps(event)}\n\n")
    return {**case, "response": {**case["response"], "sse": "".join(events)}}


def _object_arguments(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "function_call" and isinstance(item.get("arguments"), str) and item["arguments"]:
        return {**item, "arguments": json.loads(item["arguments"])}
    return item


def arguments_as_objects(event: dict[str, Any]) -> dict[str, Any]:
    """Every function call's ``arguments`` as a JSON object, wherever an item is carried."""
    if "item" in event:
        event = {**event, "item": _object_arguments(event["item"])}
    if isinstance(event.get("response"), dict) and isinstance(event["response"].get("output"), list):
        event = {**event, "response": {**event["response"],
                                       "output": [_object_arguments(i) for i in event["response"]["output"]]}}
    if event.get("type") == "response.function_call_arguments.done":
        event = {**event, "arguments": json.loads(event["arguments"])}
    return event


def without_done(index: int) -> Edit:
    """Leave out the ``response.output_item.done`` event of output `index`."""
    def edit(event: dict[str, Any]) -> dict[str, Any] | None:
        if event.get("type") == "response.output_item.done" and event.get("output_index") == index:
            return None
        return event
    return edit


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        srv.add_case("object-args-stream", edited("responses_stream_tool_call_0", arguments_as_objects))
        srv.add_case("object-args-whole", edited("responses_tool_call_0", arguments_as_objects))
        srv.add_case("second-call-not-done", edited("responses_stream_parallel_tool_calls_0", without_done(1)))
        srv.add_case("message-not-done", edited("responses_stream_reasoning_summary_0", without_done(1)))
        srv.add_case("first-call-not-done", edited("responses_stream_parallel_tool_calls_0", without_done(0)))
        yield srv


def capital_tool(calls: list[dict[str, Any]]) -> Tool:
    def get_capital(country: str = "Nowhere") -> str:
        """The capital of a country."""
        calls.append({"country": country})
        return "Paris"
    return Tool.from_function(get_capital)


# ----------------------------------------------------------------------------- item 2
@pytest.mark.parametrize(("first", "second", "country"),
                         [("object-args-stream", "responses_stream_tool_call_1", "France"),
                          ("object-args-whole", "responses_tool_call_1", "PotatoLand")], ids=["streamed", "whole"])
async def test_function_call_arguments_sent_as_an_object_are_the_calls_arguments(
    server: Any, first: str, second: str, country: str
) -> None:
    calls: list[dict[str, Any]] = []
    model = OpenAIResponsesModel("gpt-4o", base_url=server.fault_base_url("then", first, arg=second), api_key=KEY)
    store = MemoryStore()
    agent = Agent(model, tools=[capital_tool(calls)], store=store, retry=FAST)
    try:
        if first.endswith("stream"):
            result = [e async for e in agent.stream("capital?", thread="t")][-1].result
        else:
            result = await agent.run("capital?", thread="t")
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    assert calls == [{"country": country}]  # never the tool's default
    loaded = await store.load("t")
    assert loaded is not None
    call = next(m for m in loaded.messages if isinstance(m, AssistantMessage) and m.tool_calls).tool_calls[0]
    assert call.args == {"country": country}
    sent = server.responses_requests()[-1]["body"]["input"]
    assert {"type": "function_call", "arguments": json.dumps({"country": country})}.items() <= next(
        i for i in sent if i.get("type") == "function_call").items()


@pytest.mark.parametrize("value", [["France"], 5, "not json"], ids=["array", "number", "text"])
def test_function_call_arguments_that_are_no_object_reach_the_tool_layer_as_they_are(value: Any) -> None:
    """An array or a number is serialised as it is: the tool layer makes it an invalid-arguments
    result (the call's ``args`` is None), never a call with other arguments."""
    model = OpenAIResponsesModel("gpt-4o", api_key=KEY)
    answer = model.map_completion({"object": "response", "status": "completed", "output": [
        {"type": "function_call", "call_id": "call_1", "name": "get_capital", "arguments": value}]})
    call = answer.message.tool_calls[0]
    assert call.args is None and call.args_json == (value if isinstance(value, str) else json.dumps(value))


# ----------------------------------------------------------------------------- item 3
@pytest.mark.parametrize("case", ["second-call-not-done", "first-call-not-done"])
async def test_a_tool_call_whose_done_event_never_came_is_taken_from_the_completed_response(
    server: Any, case: str
) -> None:
    model = OpenAIResponsesModel("gpt-4o", base_url=server.base_url_for(case), api_key=KEY)
    ran: list[str] = []

    def secret_retrieval_tool(password: str) -> str:
        """A tool that requires a password to retrieve a secret."""
        ran.append(password)
        return "secret"

    agent = Agent(model, tools=[secret_retrieval_tool], store=MemoryStore(), retry=FAST, max_steps=1)
    try:
        result = [e async for e in agent.stream("go")][-1].result
    finally:
        await model.aclose()
    answer = next(m for m in result.new_messages if isinstance(m, AssistantMessage))
    assert [c.args for c in answer.tool_calls] == [{"password": "mellon"}, {"password": "radiance"}]
    assert sorted(ran) == ["mellon", "radiance"] and len(answer.thinking_blocks) == 2
    assert [m.call_id for m in result.new_messages if isinstance(m, ToolResultMessage)] == [
        c.id for c in answer.tool_calls]


async def test_a_message_whose_done_event_never_came_is_the_answer_the_completed_response_carries(
    server: Any
) -> None:
    model = OpenAIResponsesModel("gpt-5", base_url=server.base_url_for("message-not-done"), api_key=KEY)
    store = MemoryStore()
    try:
        events = [e async for e in Agent(model, store=store, retry=FAST).stream("go", thread="t")]
    finally:
        await model.aclose()
    shown = "".join(e.delta for e in events if e.kind == "text-delta")
    result = events[-1].result
    assert shown == "3" and result.status == "completed" and result.output == "3"
    loaded = await store.load("t")
    assert loaded is not None and loaded.messages[-1].text == "3"
    assert [b["type"] for b in loaded.messages[-1].thinking_blocks] == ["reasoning", "message"]
