"""Whole agents against a real model: SmolLM2-135M behind llama.cpp's server (``local_llm_base_url``).

The model is tiny, so prompts ask for tools explicitly and the assertions are about structure (a
call to the right tool with valid arguments, a non-empty answer, usage counted), never wording.
Temperature 0 makes each run deterministic.
"""

from __future__ import annotations

from typing import Any

import pytest

from nbagent import Agent
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest, ModelResponse
from nbagent.models.openai import OpenAIModel
from nbagent.tools import tool

pytestmark = [pytest.mark.local_llm, pytest.mark.timeout(600)]

PROMPT = "Use the get_weather tool for Paris."


def weather_tool(calls: list[str], *, requires_approval: bool = False) -> Any:
    @tool(requires_approval=requires_approval)
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: the city name.
        """
        calls.append(city)
        return f"It is sunny and 21 degrees in {city}."

    return get_weather


def local(base_url: str, **settings: Any) -> OpenAIModel:
    return OpenAIModel(
        "local-model",
        base_url=base_url,
        api_key="local",
        provider="local",
        settings={"temperature": 0, "max_tokens": 128, **settings},
        timeout=240,
    )


def assert_weather_call(call: Any) -> None:
    assert call.name == "get_weather"
    assert isinstance(call.args, dict), f"arguments are not a JSON object: {call.args_json!r}"
    assert isinstance(call.args.get("city"), str) and call.args["city"].strip()


async def test_agent_calls_the_tool_and_answers(local_llm_base_url: str) -> None:
    calls: list[str] = []
    model = local(local_llm_base_url)
    agent = Agent(model, tools=[weather_tool(calls)], max_steps=4)
    try:
        result = await agent.run(PROMPT)
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    first = next(m for m in result.messages if m.kind == "assistant")
    assert first.tool_calls and first.finish_reason == "tool_calls"
    assert first.text is None  # llama.cpp sends content "" with tool calls: no text
    assert_weather_call(first.tool_calls[0])
    assert calls and calls[0] == first.tool_calls[0].args["city"]
    results = [m for m in result.messages if m.kind == "tool-result"]
    assert results[0].call_id == first.tool_calls[0].id and not results[0].is_error
    assert "sunny" in results[0].content
    assert result.output and result.output.strip()
    assert result.messages[-1].kind == "assistant" and not result.messages[-1].tool_calls
    rows = result.usage.calls
    assert len(rows) >= 2
    assert all(r.usage_reported and r.input_tokens > 0 and r.output_tokens > 0 for r in rows)
    assert rows[0].tool_calls >= 1 and rows[0].provider == "local" and rows[0].model == "local-model"
    assert rows[1].input_tokens > rows[0].input_tokens  # the tool result was sent back


async def test_streaming_with_a_usage_chunk(local_llm_base_url: str) -> None:
    model = local(local_llm_base_url)
    try:
        items = [i async for i in model.request_stream(ModelRequest([UserMessage("Say hello.")]))]
        events = [e async for e in Agent(model).stream("Say hello.")]
    finally:
        await model.aclose()
    texts = [i for i in items if type(i) is str]
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert len(texts) >= 2 and "".join(texts) == response.message.text
    assert response.usage.reported and response.usage.input_tokens > 0
    assert response.usage.output_tokens >= len(texts) - 1
    deltas = [e for e in events if e.kind == "text-delta"]
    result = events[-1].result
    assert result.status == "completed" and result.output
    assert "".join(e.delta for e in deltas) == result.output == deltas[-1].snapshot
    assert result.output == response.message.text  # temperature 0: the same answer
    (usage,) = [e for e in events if e.kind == "usage"]
    assert usage.call.usage_reported and usage.call.output_tokens > 0


async def test_approval_pause_and_resume(local_llm_base_url: str) -> None:
    calls: list[str] = []
    model = local(local_llm_base_url)
    agent = Agent(model, tools=[weather_tool(calls, requires_approval=True)], max_steps=4)
    try:
        paused = await agent.run(PROMPT)
        assert paused.status == "paused", paused.error
        assert calls == []  # nothing ran before the decision
        (pending,) = paused.pending
        assert pending.name == "get_weather" and pending.reason == "approval"
        assert isinstance(pending.args.get("city"), str)
        result = await agent.resume(paused, approve=[pending.id])
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    assert calls == [pending.args["city"]]
    assert result.output and result.output.strip()
    tool_results = [m for m in result.messages if m.kind == "tool-result"]
    assert [r.call_id for r in tool_results][:1] == [pending.id]


async def test_length_finish_reason_is_a_truncated_completion(local_llm_base_url: str) -> None:
    model = local(local_llm_base_url, max_tokens=5)
    try:
        events = [e async for e in Agent(model).stream("Write a long story about a dragon and a knight.")]
    finally:
        await model.aclose()
    result = events[-1].result
    assert result.status == "completed"
    assert result.truncated
    assert result.messages[-1].finish_reason == "length"
    assert result.output
    assert result.usage.calls[0].output_tokens == 5


def test_local_shortcut_reuses_the_running_server(local_llm_base_url: str) -> None:
    from nbagent.models import local as local_shortcut

    model = local_shortcut()
    assert isinstance(model, OpenAIModel)
    assert model.base_url == local_llm_base_url
    assert (model.provider, model.model_name) == ("local", "local-model")
    assert model.settings["temperature"] == 0
    result = Agent(model, settings={"max_tokens": 16}).run_sync("Say hi.")
    assert result.status == "completed" and result.output
    assert result.usage.calls[0].provider == "local"
    from nbagent._sync import run_sync

    run_sync(model.aclose)


async def test_structured_answer_through_final_result(local_llm_base_url: str) -> None:
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        temperature_c: int

    model = local(local_llm_base_url)
    agent = Agent(model, output_type=Weather, max_steps=4)
    try:
        result = await agent.run("It is 21 degrees in Paris. Report the weather for Paris.")
    finally:
        await model.aclose()
    # a real model, forced to call a tool (tool_choice="required"), answers through final_result:
    # the output is a validated Weather whatever its values
    assert result.status == "completed", result.error
    assert isinstance(result.output, Weather) and result.output.city.strip()
    final = [c for m in result.messages if m.kind == "assistant" for c in m.tool_calls]
    assert final and final[-1].name == "final_result"
