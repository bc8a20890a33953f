"""The bundled model's chat template (nbagent/models/smollm2-tools.jinja).

A 135M model copies what it sees. With the old template its few-shot example ("2 plus 2 is 4.")
leaked into answers after a tool result, and from the second message of a thread it wrote a fake
``<tool_response>...`` as text instead of calling the tool. The first tests render the template
(jinja2, no server) and check what the model is shown; the ``local_llm`` ones run conversations
on the real server and check what it does: every turn of a thread calls the tool it names, with
the argument it names, and the answer repeats the tool's result with no prompt text in it.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import Agent, RunContext, tool
from nbagent.models._llama_server import CHAT_TEMPLATE
from nbagent.store import MemoryStore

jinja2 = pytest.importorskip("jinja2")

LEAKS = ("<tool_response>", "</tool_response>", "<tool_call>", "2 plus 2", "calculator")

TOOLS = [
    {"type": "function", "function": {"name": "add_item", "description": "Add an item to the order.",
                                      "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                                                     "required": ["item"]}}},
]


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = TOOLS) -> str:
    template = jinja2.Environment().from_string(CHAT_TEMPLATE.read_text(encoding="utf-8"))
    return str(template.render(messages=messages, tools=tools, add_generation_prompt=True))


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}


SECOND_TURN = [
    {"role": "system", "content": "You take orders."},
    {"role": "user", "content": "Use the add_item tool for coffee."},
    call("add_item", item="coffee"),
    {"role": "tool", "content": "order now: ['coffee']"},
    {"role": "assistant", "content": "The add_item tool says: order now: ['coffee']"},
    {"role": "user", "content": "Use the add_item tool for a croissant."},
]


def test_a_follow_up_is_shown_alone_after_examples_of_the_real_tools() -> None:
    prompt = render(SECOND_TURN)
    assert prompt.startswith("<|im_start|>system\nYou take orders.")
    assert "coffee" not in prompt  # the earlier turn is left out: nothing to copy from
    body = prompt.split("</tool_call><|im_end|>\n", 1)[1]  # after the format's description
    assert body == (
        "<|im_start|>user\nPlease use the add_item tool.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "add_item", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nUse the add_item tool for a croissant.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_after_a_tool_result_the_example_answer_is_the_real_result() -> None:
    messages = [*SECOND_TURN, call("add_item", item="croissant"),
                {"role": "tool", "content": "order now: ['coffee', 'croissant']"}]
    prompt = render(messages)
    assert "2 plus 2" not in prompt and "calculator" not in prompt and "<tool_response>" not in prompt
    assert "The add_item tool says: order now: ['coffee', 'croissant']<|im_end|>" in prompt
    assert prompt.endswith(
        "<|im_start|>user\nUse the add_item tool for a croissant.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "add_item", "arguments": {"item": "croissant"}}\n'
        "</tool_call><|im_end|>\n<|im_start|>user\nThe tool answered: order now: ['coffee', 'croissant']\n"
        "Answer my question in one sentence using this result.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_without_tools_the_whole_conversation_is_plain_chatml() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "How are you?"}]
    assert render(messages, tools=None) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_header_keeps_its_provenance_and_names_no_shared_path() -> None:
    header = CHAT_TEMPLATE.read_text(encoding="utf-8").split("-#}", 1)[0]
    assert "Provenance: derived from the team's reference template" in header
    assert "written for nbagent" in header and "same licence as the project" in header
    assert "shared/" not in header and "/work/" not in header


# ----------------------------------------------------------------------------------- the real model
class Order(BaseModel):
    items: list[str] = []


@tool
def add_item(ctx: RunContext[Order], item: str) -> str:
    """Add an item to the order."""
    ctx.state.items.append(item)
    return f"order now: {ctx.state.items}"


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 22 °C in {city}"


@tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return f"It is 14:05 in {city}"


def _model(base_url: str) -> Any:
    from nbagent.models.openai import OpenAIModel

    return OpenAIModel("local-model", base_url=base_url, api_key="local", provider="local",
                       settings={"temperature": 0, "max_tokens": 120}, timeout=240)


def _turn(result: Any) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The calls the run made, and its answer."""
    new = result.messages[result.new_message_index:]
    calls = [(c.name, c.args) for m in new if m.kind == "assistant" for c in m.tool_calls]
    return calls, result.output or ""


@pytest.mark.local_llm
@pytest.mark.timeout(900)
async def test_every_turn_of_a_thread_calls_its_tool(local_llm_base_url: str) -> None:
    """On today's main, turns 2 and 3 answer with a fake ``<tool_response>`` and call nothing."""
    model = _model(local_llm_base_url)
    agent = Agent(model, tools=[get_weather, get_time], store=MemoryStore())
    try:
        turns = []
        for prompt in ["Use the get_weather tool for Paris.", "Use the get_time tool for Tokyo.",
                       "Use the get_weather tool for Rome."]:
            result = await agent.run(prompt, thread="trip")
            assert result.status == "completed", result.error
            turns.append(_turn(result))
    finally:
        await model.aclose()
    assert [calls for calls, _ in turns] == [
        [("get_weather", {"city": "Paris"})], [("get_time", {"city": "Tokyo"})], [("get_weather", {"city": "Rome"})]]
    answers = [answer for _, answer in turns]
    assert "22 °C in Paris" in answers[0] and "14:05 in Tokyo" in answers[1] and "22 °C in Rome" in answers[2]
    assert not [leak for answer in answers for leak in LEAKS if leak in answer], answers


@pytest.mark.local_llm
@pytest.mark.timeout(900)
async def test_the_croissant_is_added_on_the_second_turn(local_llm_base_url: str) -> None:
    """Notebook 04's story; on today's main the second turn writes text and adds nothing."""
    model = _model(local_llm_base_url)
    agent = Agent(model, tools=[add_item], store=MemoryStore())
    order = Order()
    try:
        first = await agent.run("Use the add_item tool for coffee.", thread="order", state=order)
        second = await agent.run("Use the add_item tool for a croissant.", thread="order", state=order)
    finally:
        await model.aclose()
    assert [i.lower() for i in order.items] == ["coffee", "croissant"]
    calls, answer = _turn(second)
    assert [(name, args["item"].lower()) for name, args in calls] == [("add_item", "croissant")]
    assert "croissant" in answer.lower() and not [leak for leak in LEAKS if leak in answer + (first.output or "")]


@pytest.mark.local_llm
def test_llama_cpp_sees_a_template_with_tool_calls(local_llm_server: Any) -> None:
    """llama.cpp decides from the fields a template reads whether it supports tool calls; the
    earlier turns the template leaves out are still read, so it does (else calls come as text)."""
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            local_llm_server.base_url.removesuffix("/v1") + "/props", timeout=30) as reply:
        caps = json.loads(reply.read())["chat_template_caps"]
    assert caps["supports_tools"] and caps["supports_tool_calls"]
    assert caps["supports_object_arguments"] and caps["supports_parallel_tool_calls"]


def test_nbagents_own_reminder_is_not_taken_for_the_request() -> None:
    """A structured-output retry ("[nbagent] Your answer must be given by calling ...") is a user
    message too; the request it reminds of must stay in view."""
    messages = [{"role": "user", "content": "Cairo, 35 degrees. Report the weather."},
                {"role": "assistant", "content": "It is hot."},
                {"role": "user", "content": "[nbagent] Your answer must be given by calling the final_result tool"}]
    prompt = render(messages)
    assert "Cairo, 35 degrees" in prompt and prompt.index("Cairo") < prompt.index("[nbagent]")
