"""The run loop: model -> tools -> model ... -> answer; max_steps, budgets and stop conditions;
usage rows. Whole histories are asserted where they say the most.

Only the shipped fakes and `MemoryStore`.
"""

import asyncio
import json
from typing import Any

import pytest

from nbagent import Agent, AssistantMessage, RunResult, UserError, tool
from nbagent.models import FunctionModel, ModelResponse, ScriptedModel, TestModel, tool_call
from nbagent.store import MemoryStore
from nbagent.usage import TokenCounts
from tests.helpers import shape


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return f"Sunny in {city}"


@tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return f"12:00 in {city}"


def weather_answer(messages: list[Any], request: Any) -> Any:
    last = messages[-1]
    if last.kind == "user":
        return [tool_call("get_weather", city="Paris"), tool_call("get_time", city="Paris")]
    return "Sunny, and it is noon."


# ---------------------------------------------------------------------- the loop
async def test_the_loop_runs_tools_and_sends_results_back_until_a_text_answer() -> None:
    model = FunctionModel(weather_answer)
    agent = Agent(model, tools=[get_weather, get_time], system="Be brief.", store=MemoryStore())
    result = await agent.run("Weather and time in Paris?", thread="t")

    assert isinstance(result, RunResult)
    assert (result.status, result.output, result.steps, result.thread) == (
        "completed", "Sunny, and it is noon.", 2, "t")
    assert result.pending == [] and result.stop_reason is None and result.error is None
    assert shape(result.messages) == [
        ("user", "Weather and time in Paris?"),
        ("assistant", None, [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris"})]),
        ("tool-result", "get_weather", "Sunny in Paris", False),
        ("tool-result", "get_time", "12:00 in Paris", False),
        ("assistant", "Sunny, and it is noon.", []),
    ]
    # Each request carries the system prompt first, the conversation so far, and the tool schemas.
    first, second = model.requests
    assert [m.kind for m in first.messages] == ["system", "user"]
    assert first.messages[0].content == "Be brief."
    assert shape(second.messages[1:]) == shape(result.messages[:4])
    assert [t["name"] for t in first.tools] == ["get_weather", "get_time"]
    assert first.tools[0]["parameters"]["properties"]["city"]["description"] == "The city name."
    assert (first.step, second.step) == (1, 2)
    # The system prompt is sent, never stored in the thread.
    stored = await agent.store.load("t")
    assert stored is not None and [m.kind for m in stored.messages] == [
        "user", "assistant", "tool-result", "tool-result", "assistant"]
    assert stored.meta.status == "completed"


async def test_test_model_calls_every_tool_then_answers() -> None:
    agent = Agent(TestModel(), tools=[get_weather, get_time], store=MemoryStore())
    result = await agent.run("anything")
    assert result.output == json.dumps({"get_weather": "Sunny in a", "get_time": "12:00 in a"})


async def test_a_thread_continues_with_the_next_prompt() -> None:
    agent = Agent(FunctionModel(weather_answer), tools=[get_weather, get_time], store=MemoryStore())
    first = await agent.run("Weather?", thread="t")
    second = await agent.run("And tomorrow?", thread="t")
    assert len(first.messages) == 5 and first.usage.requests == 2  # an earlier result does not change
    assert second.messages[: len(first.messages)] == first.messages
    assert second.new_message_index == len(first.messages)
    assert shape(second.new_messages)[0] == ("user", "And tomorrow?")
    assert second.usage.requests == 2  # this run's calls only
    assert [row.step for row in second.usage.calls] == [3, 4]  # steps count on across the thread
    assert (await agent.thread_usage("t")).requests == 4
    assert [info.thread for info in await agent.threads()] == ["t"]
    assert len(await agent.checkpoints("t")) >= 4


async def test_settings_are_passed_to_the_model() -> None:
    model = FunctionModel(lambda m, r: "ok")
    await Agent(model, settings={"temperature": 0, "max_tokens": 50}, store=MemoryStore()).run("hi")
    assert model.requests[0].settings == {"temperature": 0, "max_tokens": 50}


async def test_max_steps_stops_gracefully() -> None:
    calls: list[int] = []

    def always_a_tool(messages: list[Any], request: Any) -> Any:
        calls.append(request.step)
        return tool_call("get_weather", city=f"City{len(calls)}")

    agent = Agent(FunctionModel(always_a_tool), tools=[get_weather], max_steps=3, store=MemoryStore())
    result = await agent.run("loop forever")  # no exception
    assert (result.status, result.stop_reason, result.steps) == ("stopped", "max_steps", 3)
    assert result.output is None
    assert calls == [1, 2, 3]
    assert shape(result.messages)[-1] == ("tool-result", "get_weather", "Sunny in City3", False)
    assert len(result.messages) == 1 + 2 * 3
    assert "stopped" in repr(result) and "max_steps" in repr(result)


async def test_a_stopped_run_can_be_continued() -> None:
    answers = [tool_call("get_weather", city="A"), tool_call("get_weather", city="B"), "done at last"]
    agent = Agent(ScriptedModel(answers), tools=[get_weather], max_steps=1, store=MemoryStore())
    stopped = await agent.run("go", thread="t")
    assert stopped.status == "stopped" and stopped.stop_reason == "max_steps"
    again = await agent.resume(stopped)
    assert again.status == "stopped" and again.steps == 1
    final = await agent.run(thread="t")  # no prompt: continue the thread
    assert final.status == "completed" and final.output == "done at last"
    assert shape(final.messages) == [
        ("user", "go"),
        ("assistant", None, [("get_weather", {"city": "A"})]),
        ("tool-result", "get_weather", "Sunny in A", False),
        ("assistant", None, [("get_weather", {"city": "B"})]),
        ("tool-result", "get_weather", "Sunny in B", False),
        ("assistant", "done at last", []),
    ]


def test_bad_agent_arguments() -> None:
    with pytest.raises(UserError, match="max_steps"):
        Agent(TestModel(), max_steps=0, store=MemoryStore())
    with pytest.raises(UserError, match="unknown model"):
        Agent("nonsense:model", store=MemoryStore())
    with pytest.raises(UserError, match="needs a prompt"):
        Agent(TestModel(), store=MemoryStore()).run_sync()
    with pytest.raises(UserError, match="must be a string"):
        Agent(TestModel(), store=MemoryStore()).run_sync(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- budgets, stop_when
async def test_token_budget_stops_before_the_next_model_call_and_can_be_resumed() -> None:
    model = ScriptedModel([tool_call("get_weather", city="Rome"), "Rome is sunny."])
    agent = Agent(model, tools=[get_weather], token_budget=5, store=MemoryStore())
    result = await agent.run("Weather in Rome, please?")
    assert result.usage.total_tokens >= 5
    assert (result.status, result.stop_reason, result.steps) == ("stopped", "token_budget", 1)
    assert len(model.requests) == 1  # checked before the second call, which never happened
    assert shape(result.messages)[-1] == ("tool-result", "get_weather", "Sunny in Rome", False)

    resumed = await agent.resume(result)  # a new run gets its own budget
    assert resumed.status == "completed" and resumed.output == "Rome is sunny."
    assert len(model.requests) == 2


async def test_stop_when_is_checked_before_each_model_call() -> None:
    seen: list[int] = []

    def found_it(so_far: RunResult) -> bool:
        seen.append(so_far.steps)
        return any(m.kind == "tool-result" and "Oslo" in m.content for m in so_far.messages)

    answers = [tool_call("get_weather", city="Rome"), tool_call("get_weather", city="Oslo"), "never asked"]
    model = ScriptedModel(answers)
    agent = Agent(model, tools=[get_weather], stop_when=found_it, store=MemoryStore())
    result = await agent.run("find Oslo")
    assert (result.status, result.stop_reason, result.steps) == ("stopped", "stop_when", 2)
    assert seen == [0, 1, 2]
    assert len(model.requests) == 2


async def test_stop_when_true_at_once_makes_no_model_call() -> None:
    model = ScriptedModel(["never"])
    result = await Agent(model, stop_when=lambda r: True, store=MemoryStore()).run("hi")
    assert (result.status, result.stop_reason, result.steps) == ("stopped", "stop_when", 0)
    assert model.requests == []
    assert shape(result.messages) == [("user", "hi")]


async def test_a_run_stopped_by_stop_when_can_be_continued() -> None:
    stop = {"on": True}
    model = ScriptedModel([tool_call("get_weather", city="A"), "finished"])
    agent = Agent(model, tools=[get_weather], stop_when=lambda r: stop["on"] and r.steps >= 1,
                  store=MemoryStore())
    stopped = await agent.run("go")
    assert stopped.stop_reason == "stop_when"
    stop["on"] = False
    done = await agent.resume(stopped)
    assert done.status == "completed" and done.output == "finished"


async def test_cost_budget_stops_with_known_prices() -> None:
    model = ScriptedModel([tool_call("get_weather", city="A"), "never"], model_name="priced")
    agent = Agent(model, tools=[get_weather], cost_budget=0.000001, store=MemoryStore(),
                  prices={"priced": {"input": 1000.0, "output": 1000.0}})
    result = await agent.run("go")
    assert (result.status, result.stop_reason) == ("stopped", "cost_budget")
    assert result.usage.cost_total is not None and result.usage.cost_total > 0.000001


# ---------------------------------------------------------------------- usage
def reported(message: AssistantMessage, **counts: int) -> ModelResponse:
    return ModelResponse(message, TokenCounts(**counts), model="gpt-fake-1")


async def test_usage_rows_record_every_model_call() -> None:
    answers = [
        reported(AssistantMessage(tool_calls=[tool_call("get_weather", city="A")],
                                  finish_reason="tool_calls"),
                 input_tokens=100, cache_read_tokens=40, output_tokens=20, reasoning_tokens=5),
        reported(AssistantMessage(text="done", finish_reason="stop"),
                 input_tokens=130, cache_read_tokens=100, output_tokens=7),
    ]
    script = ScriptedModel(answers)
    original = script._next

    async def slow_next(messages: list[Any], request: Any) -> Any:
        await asyncio.sleep(0.03)
        return await original(messages, request)

    script.function = slow_next
    agent = Agent(script, tools=[get_weather], store=MemoryStore())
    result = await agent.run("go", thread="t")
    rows = result.usage.rows()
    assert len(rows) == 2
    keep = ("run_id", "thread", "step", "provider", "model", "input_tokens", "cache_read_tokens",
            "output_tokens", "reasoning_tokens", "finish_reason", "tool_calls", "usage_reported")
    assert [{k: r[k] for k in keep} for r in rows] == [
        {"run_id": result.run_id, "thread": "t", "step": 1, "provider": "function", "model": "gpt-fake-1",
         "input_tokens": 100, "cache_read_tokens": 40, "output_tokens": 20, "reasoning_tokens": 5,
         "finish_reason": "tool_calls", "tool_calls": 1, "usage_reported": True},
        {"run_id": result.run_id, "thread": "t", "step": 2, "provider": "function", "model": "gpt-fake-1",
         "input_tokens": 130, "cache_read_tokens": 100, "output_tokens": 7, "reasoning_tokens": 0,
         "finish_reason": "stop", "tool_calls": 0, "usage_reported": True},
    ]
    assert all(r["latency_s"] >= 0.025 for r in rows)
    assert all(r["time"] > 1.6e9 for r in rows)
    # Plain dicts of plain values: ready for pandas, CSV or JSON.
    assert all(type(r) is dict for r in rows)
    json.dumps(rows)

    usage = result.usage
    assert (usage.requests, usage.input_tokens, usage.cache_read_tokens, usage.output_tokens,
            usage.reasoning_tokens, usage.tool_calls, usage.total_tokens) == (2, 230, 140, 27, 5, 1, 257)
    assert usage.cost_total is None  # no price known for a fake
    stored = await agent.store.load("t")
    assert stored is not None and [row.to_dict() for row in stored.usage] == rows


async def test_usage_costs_with_custom_prices() -> None:
    answers = [reported(AssistantMessage(text="x", finish_reason="stop"), input_tokens=1_000_000,
                        output_tokens=500_000)]
    agent = Agent(ScriptedModel(answers), store=MemoryStore(),
                  prices={"gpt-fake-1": {"input": 2.0, "output": 8.0}})
    result = await agent.run("hi")
    (row,) = result.usage.calls
    assert (row.cost_input, row.cost_output, row.cost_total) == pytest.approx((2.0, 4.0, 6.0))
    assert result.usage.cost_total == pytest.approx(6.0)


async def test_fake_models_estimate_tokens() -> None:
    result = await Agent(FunctionModel(lambda m, r: "three word answer"), store=MemoryStore()).run("hi there")
    (row,) = result.usage.calls
    assert row.output_tokens == 3
    assert row.input_tokens > 0


@pytest.mark.parametrize("answer", ["call", "list", "message"])
async def test_a_fake_model_returning_the_same_call_object_twice_keeps_each_call_with_its_result(answer: str) -> None:
    # A module-level constant returned on two steps: the second answer's call gets a fresh id,
    # and the first answer in the thread keeps its own (it was rewritten in place, leaving the
    # first result pointing at no call and two answers with the same call id).
    call = tool_call("get_weather", city="Paris")
    same = {"call": call, "list": [call], "message": AssistantMessage(tool_calls=[call])}[answer]
    answers = iter([same, same, "done"])
    agent = Agent(FunctionModel(lambda messages, request: next(answers)), tools=[get_weather], store=MemoryStore())
    result = await agent.run("weather twice", thread="t")
    loaded = await agent.store.load("t")
    assert result.status == "completed" and loaded is not None
    asked = [c.id for m in loaded.messages if m.kind == "assistant" for c in m.tool_calls]
    answered = [m.call_id for m in loaded.messages if m.kind == "tool-result"]
    assert len(set(asked)) == 2 and asked == answered
