"""A Messages API stream whose events have the wrong shape is no answer (issue #43, item 1).

The SDK's decoder builds its events without checking them, so a ``content_block_delta`` without a
``delta``, a ``message_start`` whose ``message`` is a string, a ``content_block_start`` whose
``content_block`` is a list, a ``partial_json`` or text delta that is a number, or a missing
``index`` reached the reader as they came. Before, the run completed with output ``''``, stored
the malformed text, or failed with a raw ``TypeError``. Now each is a `ModelResponseError` naming
the event and the field, retried like a stream cut off, and nothing of it is stored.

Each stream is a recorded one (``tests/wire/anthropic_messages``) with one event changed, served
over real HTTP by the replay server, through the real ``anthropic`` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import ModelResponseError
from nbagent.messages import UserMessage
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.base import ModelRequest
from nbagent.retry import Retry
from nbagent.store import MemoryStore
from tests.wire.replay_server import ANTHROPIC_CASES_DIR, ReplayServer, load_case, split_sse_events

KEY = "sk-ant-malformed-0123456789abcdef"

Change = Callable[[dict[str, Any]], Any]


def _drop(name: str) -> Change:
    return lambda event: {k: v for k, v in event.items() if k != name}


def _set(name: str, value: Any) -> Change:
    return lambda event: {**event, name: value}


def _set_delta(name: str, value: Any) -> Change:
    return lambda event: {**event, "delta": {**event["delta"], name: value}}


# name: (recorded case, the type of the event changed (its first one), the change, what the error says)
SHAPES: dict[str, tuple[str, str, Change, str]] = {
    "delta-missing": ("anthropic_stream_text", "content_block_delta", _drop("delta"),
                      "malformed content_block_delta event: its delta is missing or null, not an object"),
    "delta-null": ("anthropic_stream_text", "content_block_delta", _set("delta", None),
                   "malformed content_block_delta event: its delta is missing or null, not an object"),
    "message-a-string": ("anthropic_stream_text", "message_start", _set("message", "msg_1"),
                         "malformed message_start event: its message is a string, not an object"),
    "content-block-a-list": ("anthropic_stream_text", "content_block_start", _set("content_block", [{"type": "text"}]),
                             "malformed content_block_start event: its content_block is an array"),
    "partial-json-a-number": ("anthropic_stream_tool_use", "content_block_delta", _set_delta("partial_json", 5),
                              "malformed content_block_delta event: its delta.partial_json is a number, not a string"),
    "text-a-number": ("anthropic_stream_text", "content_block_delta", _set_delta("text", 5),
                      "malformed content_block_delta event: its delta.text is a number, not a string"),
    "delta-index-missing": ("anthropic_stream_text", "content_block_delta", _drop("index"),
                            "malformed content_block_delta event: its index is missing or null, not an integer"),
    "start-index-missing": ("anthropic_stream_text", "content_block_start", _drop("index"),
                            "malformed content_block_start event: its index is missing or null, not an integer"),
}


def changed_stream(case_name: str, kind: str, change: Change) -> dict[str, Any]:
    """The recorded case `case_name` with the first event of type `kind` changed."""
    case = load_case(case_name, ANTHROPIC_CASES_DIR)
    events, done = [], False
    for text in split_sse_events(case["response"]["sse"]):
        name, _, data = text.partition("\ndata: ")
        if not done and name == f"event: {kind}":
            text = f"{name}\ndata: {json.dumps(change(json.loads(data)))}\n\n"
            done = True
        events.append(text)
    assert done, f"{case_name} has no {kind} event"
    return {**case, "response": {**case["response"], "sse": "".join(events)}}


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        for name, (case_name, kind, change, _) in SHAPES.items():
            srv.add_case(f"malformed-{name}", changed_stream(case_name, kind, change))
        yield srv


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_malformed_event_is_a_retried_error_naming_it(server: Any, shape: str) -> None:
    words = SHAPES[shape][3]
    model = AnthropicModel("claude-sonnet-4-5", base_url=server.anthropic_base_url_for(f"malformed-{shape}"),
                           api_key=KEY)
    try:
        with pytest.raises(ModelResponseError) as info:
            async for _ in model.request_stream(ModelRequest([UserMessage("hi")])):
                pass
    finally:
        await model.aclose()
    assert words in str(info.value)
    assert info.value.retryable and info.value.provider == "anthropic"


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_malformed_stream_is_retried_and_nothing_of_it_is_stored(server: Any, shape: str) -> None:
    """The next request gets the recorded stream unchanged: the run completes with its answer,
    after one retry, and the thread holds the prompt and that answer only (one usage row)."""
    good = SHAPES[shape][0]
    later = good if good == "anthropic_stream_text" else f"{good},anthropic_stream_tool_result_answer"
    url = server.anthropic_fault_base_url("then", f"malformed-{shape}", arg=later)
    model = AnthropicModel("claude-sonnet-4-5", base_url=url, api_key=KEY)
    store = MemoryStore()
    try:
        events = [e async for e in Agent(model, retry=Retry(initial_delay=0, jitter=0), store=store,
                                         tools=[weather_forecast]).stream("hi", thread="t")]
    finally:
        await model.aclose()
    assert [e.kind for e in events].count("model-retry") == 1
    retry = next(e for e in events if e.kind == "model-retry")
    assert SHAPES[shape][3] in retry.error
    result = events[-1].result
    assert result.status == "completed"
    loaded = await store.load("t")
    assert loaded is not None
    if good == "anthropic_stream_text":
        assert result.output == "- Captain\n- Scoop"
        assert [m.kind for m in loaded.messages] == ["user", "assistant"] and len(loaded.usage) == 1
    else:  # the whole tool call ran once, then the recorded answer to its result
        assert [m.kind for m in loaded.messages] == ["user", "assistant", "tool-result", "assistant"]
        assert loaded.messages[1].tool_calls[0].args == {"city": "New York"} and len(loaded.usage) == 2


def weather_forecast(city: str) -> str:
    """The forecast for a city."""
    return "sunny"
