"""Streaming: typed events with a `kind`, their order, text snapshots, and that the model is
asked to stream only when someone consumes the stream.

Retry events while streaming are here too. Only the shipped fakes and `MemoryStore`.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from nbagent import (
    Agent,
    ApprovalRequestedEvent,
    ModelResponseEvent,
    ModelRetryEvent,
    ReasoningDeltaEvent,
    Retry,
    RunEndedEvent,
    RunStartedEvent,
    TextDeltaEvent,
    Tool,
    ToolCallFinishedEvent,
    ToolCallStartedEvent,
    UsageEvent,
    tool,
)
from nbagent.exceptions import StreamInterruptedError
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.models.base import ReasoningText
from nbagent.store import MemoryStore


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("sensor offline")


def weather_model(messages: list[Any], request: Any) -> Any:
    if messages[-1].kind == "user":
        return tool_call("get_weather", city="Paris", id="w1")
    return "It is sunny in Paris today."


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in events]


async def test_event_kinds_and_order_for_a_tool_round_trip() -> None:
    agent = Agent(FunctionModel(weather_model), tools=[get_weather], store=MemoryStore())
    events = await collect(agent.stream("Weather in Paris?", thread="t"))
    kinds = [e.kind for e in events]
    deltas = ["It", " is", " sunny", " in", " Paris", " today."]
    assert kinds == [
        "run-started",
        "model-response", "usage",
        "tool-call-started", "tool-call-finished",
        *["text-delta"] * len(deltas),
        "model-response", "usage",
        "run-completed",
    ]
    types = {type(e) for e in events}
    assert types == {RunStartedEvent, ModelResponseEvent, UsageEvent, ToolCallStartedEvent, ToolCallFinishedEvent,
                     TextDeltaEvent, RunEndedEvent}

    started, finished = events[3], events[4]
    assert started.call.name == "get_weather" and started.call.args == {"city": "Paris"}
    assert finished.call is started.call
    assert (finished.result.content, finished.result.is_error, finished.result.status) == (
        "Sunny in Paris", False, "done")
    assert finished.result.duration_s is not None and finished.result.duration_s >= 0
    assert [e.step for e in events if hasattr(e, "step")] == [1, 1, 1, *[2] * len(deltas), 2]

    texts = [e for e in events if e.kind == "text-delta"]
    assert [e.delta for e in texts] == deltas
    end = events[-1]
    assert end.result.status == "completed"
    assert end.result.output == "It is sunny in Paris today."
    assert events[0].run_id == end.result.run_id and events[0].thread == "t"


async def test_snapshots_accumulate_and_stay_correct_after_the_stream() -> None:
    words = ["Once", " upon", " a", " time", ",", " the", " end."]

    async def stream(messages: list[Any], request: Any) -> AsyncIterator[str]:
        for w in words:
            yield w

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    seen_live: list[str] = []
    events = []
    async for event in agent.stream("story"):
        if isinstance(event, TextDeltaEvent):
            seen_live.append(event.snapshot)
        events.append(event)
    expected = ["".join(words[: i + 1]) for i in range(len(words))]
    assert seen_live == expected
    # Read again afterwards, in any order: each event keeps its own snapshot.
    texts = [e for e in events if isinstance(e, TextDeltaEvent)]
    assert [e.snapshot for e in reversed(texts)] == list(reversed(expected))
    assert events[-1].result.output == "".join(words)


async def test_the_model_streams_only_when_the_stream_is_consumed() -> None:
    paths: list[str] = []

    def whole(messages: list[Any], request: Any) -> str:
        paths.append("request")
        return "whole answer"

    async def streamed(messages: list[Any], request: Any) -> AsyncIterator[str]:
        paths.append("stream")
        yield "streamed "
        yield "answer"

    agent = Agent(FunctionModel(whole, stream_function=streamed), store=MemoryStore())
    result = await agent.run("hi")
    assert paths == ["request"] and result.output == "whole answer"

    paths.clear()
    events = await collect(agent.stream("hi"))
    assert paths == ["stream"] and events[-1].result.output == "streamed answer"

    paths.clear()
    assert agent.run_sync("hi").output == "whole answer" and paths == ["request"]

    paths.clear()
    created = agent.stream("hi")  # not iterated: nothing happens
    await asyncio.sleep(0.01)
    assert paths == []
    await created.aclose()


async def test_reasoning_deltas_are_separate_from_text() -> None:
    async def stream(messages: list[Any], request: Any) -> AsyncIterator[str]:
        yield ReasoningText("Think ")
        yield ReasoningText("first.")
        yield "Answer."

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    events = await collect(agent.stream("q"))
    assert [e.kind for e in events] == [
        "run-started", "reasoning-delta", "reasoning-delta", "text-delta", "model-response", "usage",
        "run-completed",
    ]
    assert isinstance(events[1], ReasoningDeltaEvent) and events[1].delta == "Think "
    answer = events[-1].result.messages[-1]
    assert (answer.text, answer.reasoning) == ("Answer.", "Think first.")


async def test_tool_error_appears_in_tool_call_finished() -> None:
    agent = Agent(ScriptedModel([tool_call("broken"), "sorry"]), tools=[broken], store=MemoryStore())
    events = await collect(agent.stream("go"))
    (finished,) = [e for e in events if isinstance(e, ToolCallFinishedEvent)]
    assert finished.result.is_error
    assert finished.result.content == "RuntimeError: sensor offline"
    assert finished.result.status == "failed"


async def test_usage_events_carry_the_row_and_the_running_total() -> None:
    agent = Agent(FunctionModel(weather_model), tools=[get_weather], store=MemoryStore())
    totals = []
    rows = []
    async for event in agent.stream("Weather?"):
        if isinstance(event, UsageEvent):
            rows.append(event.call)
            totals.append((event.total.requests, event.total.output_tokens))
    assert [r.step for r in rows] == [1, 2]
    assert totals[0] == (1, rows[0].output_tokens)
    assert totals[1] == (2, rows[0].output_tokens + rows[1].output_tokens)


async def test_usage_totals_stay_as_they_were_when_read_later() -> None:
    agent = Agent(FunctionModel(weather_model), tools=[get_weather], store=MemoryStore())
    events = await collect(agent.stream("Weather?"))
    usage = [e for e in events if isinstance(e, UsageEvent)]
    assert [(e.total.requests, len(e.total.calls)) for e in usage] == [(1, 1), (2, 2)]
    assert events[-1].result.usage.requests == 2


async def test_pause_stop_and_failure_end_events() -> None:
    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    agent = Agent(ScriptedModel([tool_call("delete", path="/tmp/x")]), tools=[delete], store=MemoryStore())
    events = await collect(agent.stream("clean up"))
    assert [e.kind for e in events][-2:] == ["approval-requested", "run-paused"]
    assert isinstance(events[-2], ApprovalRequestedEvent) and events[-2].pending.args == {"path": "/tmp/x"}

    looping = Agent(FunctionModel(lambda m, r: tool_call("get_weather", city="X")), tools=[get_weather],
                    max_steps=2, store=MemoryStore())
    events = await collect(looping.stream("loop"))
    assert events[-1].kind == "run-stopped" and events[-1].result.stop_reason == "max_steps"

    from nbagent.exceptions import error_for_status

    failing = Agent(ScriptedModel([error_for_status(400, "bad request")]), store=MemoryStore())
    events = await collect(failing.stream("x"))
    assert [e.kind for e in events] == ["run-started", "run-failed"]
    assert "400" in (events[-1].result.error or "")


async def test_a_broken_stream_is_retried_and_its_partial_text_discarded() -> None:
    attempts: list[int] = []

    async def stream(messages: list[Any], request: Any) -> AsyncIterator[str]:
        attempts.append(1)
        if len(attempts) == 1:
            yield "Partial "
            yield "garbage"
            raise StreamInterruptedError("connection reset mid-stream")
        yield "Good "
        yield "answer."

    agent = Agent(FunctionModel(stream_function=stream), retry=Retry(initial_delay=0.01),
                  store=MemoryStore())
    events = await collect(agent.stream("q"))
    assert [e.kind for e in events] == [
        "run-started", "text-delta", "text-delta", "model-retry", "text-delta", "text-delta",
        "model-response", "usage", "run-completed",
    ]
    retry = events[3]
    assert isinstance(retry, ModelRetryEvent)
    assert retry.attempt == 1 and "connection reset" in retry.error and 0 < retry.delay_s < 0.05
    after = [e.snapshot for e in events[4:6]]
    assert after == ["Good ", "Good answer."]  # the snapshot restarts: a view clears the partial text
    result = events[-1].result
    assert result.output == "Good answer."
    assert result.usage.requests == 1
    assert [m.kind for m in result.messages] == ["user", "assistant"]


async def test_stream_result_matches_run_result() -> None:
    agent = Agent(FunctionModel(weather_model), tools=[get_weather], store=MemoryStore())
    streamed = (await collect(agent.stream("Weather?")))[-1].result
    ran = await agent.run("Weather?")
    assert streamed.status == ran.status == "completed"
    assert streamed.output == ran.output

    def plain(messages: list[Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in m.to_dict().items() if k != "duration_s"} for m in messages]

    assert plain(streamed.messages) == plain(ran.messages)


async def test_start_runs_in_the_background_and_streams_to_a_callback() -> None:
    agent = Agent(FunctionModel(weather_model), tools=[get_weather], store=MemoryStore())
    kinds: list[str] = []
    handle = agent.start("Weather?", on_event=lambda e: kinds.append(e.kind))
    result = await handle
    assert result.status == "completed" and handle.done
    assert kinds[0] == "run-started" and kinds[-1] == "run-completed"
    assert "text-delta" in kinds  # a background run feeds a view: the model streams


async def test_a_streamed_tool_call_keeps_the_text_and_reasoning_streamed_before_it() -> None:
    calls: list[str] = []

    async def stream(messages: list[Any], request: Any) -> AsyncIterator[Any]:
        if messages[-1].kind == "user":
            yield ReasoningText("The user wants weather; ")
            yield ReasoningText("call the tool.")
            yield "Let me check. "
            yield tool_call("get_weather", city="Oslo")
        else:
            yield "Sunny."

    async def get_weather(city: str) -> str:
        """Weather."""
        calls.append(city)
        return "sunny"

    agent = Agent(FunctionModel(stream_function=stream), tools=[Tool.from_function(get_weather)], store=MemoryStore())
    events = [e async for e in agent.stream("weather in Oslo?")]
    result = events[-1].result
    first = result.messages[1]
    assert calls == ["Oslo"]
    assert first.text == "Let me check. " and first.reasoning == "The user wants weather; call the tool."
    assert [c.name for c in first.tool_calls] == ["get_weather"]
    assert [e.kind for e in events].count("reasoning-delta") == 2
