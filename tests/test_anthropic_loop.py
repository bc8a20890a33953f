"""`AnthropicModel` across several requests, over real HTTP: thinking blocks sent back byte-identical
on every later step (also from a new process resuming a paused thread), caching breakpoints, a
paused turn (``pause_turn``) continued, the stop reasons ``refusal``, ``max_tokens`` and
``model_context_window_exceeded``, the call's deadline, and ``output_type`` with thinking.

The replay server answers with recorded interactions (tests/wire/anthropic_messages), chained with
its ``then:`` mode, or with answers scripted from recorded blocks (tests/anthropic_script.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import Agent
from nbagent.exceptions import ContentFilterError, ModelResponseError, ModelTimeoutError, UserError
from nbagent.messages import UserMessage
from nbagent.models.anthropic import DEFAULT_DEADLINE, REDACTED_THINKING
from nbagent.models.base import ModelRequest
from nbagent.store.memory import MemoryStore
from nbagent.tools import Tool
from tests.anthropic_script import json_case, message, stream_case
from tests.test_anthropic_model import FAST, KEY, case, model_at
from tests.test_anthropic_wire import recorded_message
from tests.wire.replay_server import ReplayServer

EPHEMERAL = {"type": "ephemeral"}
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


def tools_of(*names: str, calls: list[tuple[str, dict[str, Any]]], **options: Any) -> list[Tool]:
    """A tool for every client tool of the recorded requests `names`, recording its calls."""
    tools: dict[str, Tool] = {}
    for name in names:
        for t in case(name)["request"]["body"].get("tools") or ():
            if "input_schema" not in t or t["name"] in tools:
                continue

            def run(_name: str = t["name"], **kwargs: Any) -> str:
                calls.append((_name, kwargs))
                return f"result of {_name}"

            schema = {k: v for k, v in t["input_schema"].items() if k != "additionalProperties"}
            tools[t["name"]] = Tool(t["name"], t.get("description", ""), schema, function=run, **options)
    return list(tools.values())


async def run_agent(agent: Agent[Any], stream: bool, prompt: str = "go", **kwargs: Any) -> Any:
    if not stream:
        return await agent.run(prompt, **kwargs)
    events = [e async for e in agent.stream(prompt, **kwargs)]
    return events[-1].result


def first_thinking(name: str) -> dict[str, Any]:
    """The recorded answer's signed thinking block, exactly as the server sent it."""
    block = next(b for b in recorded_message(case(name))["content"] if b["type"] == "thinking")
    return {k: block[k] for k in ("type", "thinking", "signature")}


def cache_marks(body: dict[str, Any]) -> list[str]:
    """Where a request carries ``cache_control``: ``tools[i]``, ``system[i]``, ``messages[i][j]``."""
    marks = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or ()) if "cache_control" in t]
    marks += [f"system[{i}]" for i, b in enumerate(body.get("system") or ()) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            marks += [f"messages[{i}][{j}]" for j, b in enumerate(m["content"]) if "cache_control" in b]
    return marks


def last_block(body: dict[str, Any]) -> str:
    messages = body["messages"]
    return f"messages[{len(messages) - 1}][{len(messages[-1]['content']) - 1}]"


def without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


# ----------------------------------------------------------------------------- thinking across a tool loop
LOOPS = {
    False: ("anthropic_thinking_tool_use", "anthropic_single_tool_use", "anthropic_thinking_tool_result_answer"),
    True: ("anthropic_stream_thinking_tool_use", "anthropic_stream_tool_use", "anthropic_stream_tool_result_answer"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_thinking_goes_back_byte_identical_on_every_later_step_with_cache_breakpoints(
    server: Any, stream: bool
) -> None:
    """Three requests of one tool loop: the 2nd and 3rd carry the first answer's signed thinking
    block exactly as the server sent it; each request has its breakpoints on the last tool, the
    system prompt and the latest message's last block, and nowhere else."""
    first, second, third = LOOPS[stream]
    calls: list[tuple[str, dict[str, Any]]] = []
    model = model_at(server.anthropic_fault_base_url("then", first, arg=f"{second},{third}"), thinking=1024)
    agent = Agent(model, tools=tools_of(first, second, calls=calls), system="Be brief.", store=MemoryStore())
    before = len(server.messages_requests())
    try:
        result = await run_agent(agent, stream)
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    sent = [r["body"] for r in server.messages_requests()[before:]]
    assert len(sent) == 3 and len(calls) >= 2
    thinking = first_thinking(first)
    for body in sent[1:]:
        assistant = body["messages"][1]
        assert assistant["role"] == "assistant"
        assert without_cache_control(assistant["content"][0]) == thinking  # every string identical
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    for body in sent:
        n = len(body["tools"])
        assert cache_marks(body) == [f"tools[{n - 1}]", "system[0]", last_block(body)]
    # the answer in the thread keeps the block as it came (what a later run or a resume sends)
    answer = next(m for m in result.messages if m.kind == "assistant")
    assert answer.thinking_blocks == [thinking]


async def test_a_paused_thread_resumed_from_a_new_process_sends_the_thinking_back(
    server: Any, tmp_path: Path
) -> None:
    """The first answer (thinking + a call needing approval) pauses the run; a new Python process
    opens the same SQLite file and resumes the thread: its request carries the signed block
    byte-identical (what the API checks after a kernel restart)."""
    first, answer = "anthropic_thinking_tool_use", "anthropic_thinking_tool_result_answer"
    base = server.anthropic_fault_base_url("then", first, arg=answer)
    store = tmp_path / "threads.db"
    calls: list[tuple[str, dict[str, Any]]] = []
    model = model_at(base, "claude-sonnet-4-0", thinking=3000)
    agent = Agent(model, tools=tools_of(first, calls=calls, requires_approval=True), store=str(store),
                  settings={"tool_choice": "auto"})
    before = len(server.messages_requests())
    try:
        paused = await agent.run("What is the capital of my country?")
    finally:
        await model.aclose()
    assert paused.status == "paused" and not calls
    script = f"""
import asyncio, json, sys
from nbagent import Agent, Tool
from nbagent.models.anthropic import AnthropicModel

def get_user_country() -> str:
    "Get the user's country"
    return "Mexico"

async def main():
    model = AnthropicModel("claude-sonnet-4-0", base_url={base!r}, thinking=3000)
    agent = Agent(model, tools=[Tool.from_function(get_user_country, requires_approval=True)],
                  store={str(store)!r}, settings={{"tool_choice": "auto"}})
    try:
        result = await agent.resume(thread={paused.thread!r}, approve=[{paused.pending[0].id!r}])
    finally:
        await model.aclose()
    print(json.dumps({{"status": result.status, "output": result.output, "error": result.error}}))

asyncio.run(main())
"""
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "PYTHONPATH": str(ROOT)}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True,
                                   timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "completed", outcome
    assert outcome["output"] == recorded_message(case(answer))["content"][-1]["text"]
    sent = [r["body"] for r in server.messages_requests()[before:]]
    assert len(sent) == 2
    resumed = sent[1]["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "user"]
    assert without_cache_control(resumed[1]["content"][0]) == first_thinking(first)
    assert resumed[2]["content"][0]["type"] == "tool_result" and "Mexico" in str(resumed[2]["content"][0])


def size(text: str) -> int:
    """The length of a text."""
    return len(text)


async def test_tools_in_order_asks_for_one_call_per_answer(server: Any) -> None:
    url = server.anthropic_base_url_for("anthropic_plain_text")
    bodies = []
    for in_order, settings in ((False, {}), (True, {}), (True, {"parallel_tool_calls": True})):
        model = model_at(url)
        agent = Agent(model, tools=[Tool.from_function(size)], tools_in_order=in_order, settings=settings,
                      store=MemoryStore())
        before = len(server.messages_requests())
        try:
            await agent.run("hi")
        finally:
            await model.aclose()
        bodies.append(server.messages_requests()[before]["body"])
    assert "tool_choice" not in bodies[0]  # parallel calls on: the API's default
    assert bodies[1]["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "tool_choice" not in bodies[2]  # the setting wins


# ----------------------------------------------------------------------------- pause_turn
PAUSED = "anthropic_pause_turn_web_search"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_paused_turn_is_continued_with_its_content_sent_back(server: Any, stream: bool) -> None:
    """The recorded paused turn (10 web searches, then ``pause_turn``), then a recorded answer
    that ends the turn: one model call of two requests; the second sends the paused content back
    unchanged as the last message, after the breakpoint of the first."""
    paused = recorded_message(case(PAUSED))
    end = "anthropic_stream_web_search_citations" if stream else "anthropic_web_search"
    first = server.add_case(f"scripted_paused_{stream}", stream_case(paused) if stream else case(PAUSED))
    model = model_at(server.anthropic_fault_base_url("then", first, arg=end), thinking=4096)
    agent = Agent(model, store=MemoryStore())
    before = len(server.messages_requests())
    try:
        result = await run_agent(agent, stream)
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    sent = [r["body"] for r in server.messages_requests()[before:]]
    assert len(sent) == 2
    assert sent[1]["messages"][:-1] == sent[0]["messages"]
    assert sent[1]["messages"][-1] == {"role": "assistant", "content": paused["content"]}
    assert cache_marks(sent[1]) == ["messages[0][0]"]
    texts = [b["text"] for m in (paused, recorded_message(case(end))) for b in m["content"] if b["type"] == "text"]
    assert result.output == "".join(texts)
    row, = result.usage.calls  # one model call, both requests' tokens
    assert row.input_tokens == 401468 + sum(
        recorded_message(case(end))["usage"].get(k) or 0
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    answer = result.messages[-1]
    assert answer.thinking_blocks[0] == first_thinking(PAUSED)


async def test_a_turn_still_paused_after_max_continuations_fails(server: Any) -> None:
    model = model_at(server.anthropic_base_url_for(PAUSED), max_continuations=2)
    before = len(server.messages_requests())
    try:
        result = await Agent(model, retry=FAST, store=MemoryStore()).run("search")
    finally:
        await model.aclose()
    sent = [r["body"]["messages"] for r in server.messages_requests()[before:]]
    assert len(sent) == 3  # the request and two continuations
    paused = recorded_message(case(PAUSED))["content"]
    assert sent[2][-1] == {"role": "assistant", "content": paused + paused}  # the turn so far, in one message
    assert result.status == "failed" and isinstance(result.exception, ModelResponseError)
    assert "pause_turn" in (result.error or "") and "max_continuations" in (result.error or "")
    assert [m.kind for m in result.messages] == ["user"]  # no half turn in the thread
    row, = result.usage.calls
    assert (row.input_tokens, row.finish_reason) == (3 * 401468, "pause_turn")
    with pytest.raises(UserError, match="max_continuations"):
        model_at("http://127.0.0.1:9", max_continuations=-1)


# ----------------------------------------------------------------------------- stop reasons
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_refusal_fails_the_run_with_a_content_filter_error(server: Any, stream: bool) -> None:
    details = {"type": "refusal", "category": "cyber",
               "explanation": "This request was declined because it could enable cyber harm."}
    msg = message([{"type": "text", "text": "Hello.."}], "refusal", stop_details=details,
                  usage={"input_tokens": 20, "output_tokens": 3})
    name = server.add_case(f"scripted_refusal_{stream}", stream_case(msg) if stream else json_case(msg))
    model = model_at(server.anthropic_base_url_for(name))
    before = len(server.messages_requests())
    try:
        result = await run_agent(Agent(model, retry=FAST, store=MemoryStore()), stream)
    finally:
        await model.aclose()
    assert len(server.messages_requests()) - before == 1  # not retried
    err = result.exception
    assert result.status == "failed" and isinstance(err, ContentFilterError) and not err.retryable
    assert (err.category, err.explanation, err.text) == ("cyber", details["explanation"], "Hello..")
    assert result.error == (
        "ContentFilterError: Claude's safety system stopped the answer (stop_reason refusal: category cyber; "
        "This request was declined because it could enable cyber harm.); Anthropic asks that the turn that "
        "caused it be removed or rephrased: continue in a new thread (anthropic)")
    assert [m.kind for m in result.messages] == ["user"]  # the refused answer is not in the thread
    row, = result.usage.calls  # but it is billed
    assert (row.output_tokens, row.finish_reason) == (3, "content_filter")


@pytest.mark.parametrize(
    ("stop", "finish", "cut_at"),
    [("max_tokens", "length", "the output token limit"),
     ("model_context_window_exceeded", "context_window", "the model's context window")],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_cut_off_answers(server: Any, stream: bool, stop: str, finish: str, cut_at: str) -> None:
    """Cut off in text: completed with ``truncated=True``. Cut off inside a tool call: failed with
    a clear error, the call neither run nor kept."""
    text = message([{"type": "text", "text": "The first three states are Alabama, Alaska, Ariz"}], stop)
    tool = message([{"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_cut", "name": "len", "input": {}}], stop)
    ran: list[Any] = []

    def count(obj: str) -> int:
        ran.append(obj)
        return len(obj)

    results = []
    for label, msg in (("text", text), ("tool", tool)):
        name = server.add_case(f"scripted_{stop}_{label}_{stream}", stream_case(msg) if stream else json_case(msg))
        model = model_at(server.anthropic_base_url_for(name))
        agent = Agent(model, tools=[Tool.from_function(count, name="len")], store=MemoryStore())
        try:
            results.append(await run_agent(agent, stream))
        finally:
            await model.aclose()
    done, cut = results
    assert done.status == "completed" and done.truncated and done.output == text["content"][0]["text"]
    assert done.usage.calls[0].finish_reason == finish
    assert cut.status == "failed" and isinstance(cut.exception, ModelResponseError) and not ran
    assert f"cut off at {cut_at} inside a tool call" in (cut.error or "")
    assert [m.kind for m in cut.messages] == ["user"]


# ----------------------------------------------------------------------------- redacted thinking, deadline
async def test_redacted_thinking_shows_as_a_placeholder_in_the_reasoning(server: Any) -> None:
    model = model_at(server.anthropic_base_url_for("anthropic_stream_redacted_thinking"), thinking=1024)
    try:
        events = [e async for e in Agent(model, store=MemoryStore()).stream("hi")]
    finally:
        await model.aclose()
    reasoning = "".join(e.delta for e in events if e.kind == "reasoning-delta")
    assert REDACTED_THINKING in reasoning  # what the view's Thinking section shows
    result = events[-1].result
    answer = result.messages[-1]
    assert REDACTED_THINKING in (answer.reasoning or "")
    assert [b["type"] for b in answer.thinking_blocks].count("redacted_thinking") >= 1
    page = result._repr_html_()  # the static view of a stored thread: the answer's Thinking section
    assert "Thinking</summary>" in page and "[redacted thinking: encrypted by Anthropic" in page


def test_the_deadline_has_the_openai_default_and_is_checked() -> None:
    from nbagent.models.openai import DEFAULT_DEADLINE as OPENAI_DEADLINE

    assert model_at("http://127.0.0.1:9").deadline == DEFAULT_DEADLINE == OPENAI_DEADLINE == 600.0
    assert model_at("http://127.0.0.1:9", deadline=None).deadline is None
    with pytest.raises(UserError, match=r"AnthropicModel\(deadline=\.\.\.\)"):
        model_at("http://127.0.0.1:9", deadline=0)


@pytest.mark.parametrize("how", ["ping", "comment"])
async def test_a_stream_kept_alive_forever_ends_at_the_deadline(server: Any, how: str) -> None:
    """``event: ping`` (or comments) every 0.2 s never let the 2 s read timeout fire: the 1 s
    deadline ends the call with a retried timeout error, and the agent retries it."""
    model = model_at(server.anthropic_fault_base_url("keep-alive", arg=f"0.2,{how}"), timeout=2, deadline=1)
    agent = Agent(model, retry=FAST, store=MemoryStore())
    t0 = time.perf_counter()
    try:
        events = await asyncio.wait_for(_collect(agent), 15)
    finally:
        await model.aclose()
    elapsed = time.perf_counter() - t0
    result = events[-1].result
    err = result.exception
    assert isinstance(err, ModelTimeoutError) and err.retryable and err.__cause__ is None
    assert "AnthropicModel(deadline=...)" in str(err) and "1 s" in str(err)
    assert [e.kind for e in events].count("model-retry") == 1
    assert 1.8 <= elapsed < 4.0, elapsed


async def _collect(agent: Agent[Any]) -> list[Any]:
    return [e async for e in agent.stream("hi")]


async def test_a_whole_answer_that_takes_too_long_ends_at_the_deadline(server: Any) -> None:
    model = model_at(server.anthropic_fault_base_url("slow", "anthropic_plain_text", arg=5), timeout=10, deadline=1)
    t0 = time.perf_counter()
    try:
        with pytest.raises(ModelTimeoutError, match="deadline"):
            await model.request(ModelRequest([UserMessage("hi")]))
    finally:
        await model.aclose()
    assert 0.9 <= time.perf_counter() - t0 < 4.5  # the deadline (1 s), not the server's 5 s


# ----------------------------------------------------------------------------- output_type with thinking
class Weather(BaseModel):
    city: str
    sky: str


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_output_type_with_thinking_asks_again_when_the_model_answers_in_text(
    server: Any, stream: bool
) -> None:
    """With thinking the API refuses a forced tool, so an ``output_type`` agent asks for auto; a
    model that then answers in prose is asked again to call ``final_result``, and its call
    completes the run with the typed answer."""
    thinking = first_thinking("anthropic_thinking_tool_use")
    prose = message([thinking, {"type": "text", "text": "It is sunny in Paris today."}], "end_turn")
    call = message([{"type": "tool_use", "id": "toolu_final", "name": "final_result",
                     "input": {"city": "Paris", "sky": "sunny"}}], "tool_use")
    build = stream_case if stream else json_case
    first = server.add_case(f"scripted_prose_{stream}", build(prose))
    second = server.add_case(f"scripted_final_{stream}", build(call))
    model = model_at(server.anthropic_fault_base_url("then", first, arg=second), thinking=1024)
    agent = Agent(model, output_type=Weather, store=MemoryStore())
    before = len(server.messages_requests())
    try:
        result = await run_agent(agent, stream, "Weather in Paris?")
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    assert result.output == Weather(city="Paris", sky="sunny")
    sent = [r["body"] for r in server.messages_requests()[before:]]
    assert [b["tool_choice"] for b in sent] == [{"type": "auto"}] * 2  # never "any" with thinking
    asked = sent[1]["messages"][-1]["content"][-1]["text"]
    assert "final_result" in asked and asked.startswith("[nbagent]")
    assert without_cache_control(sent[1]["messages"][1]["content"][0]) == thinking


async def test_output_type_with_thinking_takes_a_json_text_answer(server: Any) -> None:
    msg = message([first_thinking("anthropic_thinking_tool_use"),
                   {"type": "text", "text": '```json\n{"city": "Paris", "sky": "sunny"}\n```'}], "end_turn")
    model = model_at(server.anthropic_base_url_for(server.add_case("scripted_json_answer", json_case(msg))),
                     thinking=1024)
    try:
        result = await Agent(model, output_type=Weather, store=MemoryStore()).run("Weather in Paris?")
    finally:
        await model.aclose()
    assert result.status == "completed" and result.output == Weather(city="Paris", sky="sunny")


async def test_an_unreadable_event_is_named_without_the_key(server: Any) -> None:
    """A server (or proxy) that echoes the request's key into a broken event: the error quotes
    the event, the key replaced by ``***``."""
    sse = ('event: message_start\ndata: {"type": "message_start", "message": {"id": "m", "model": "x", '
           '"usage": {"input_tokens": 1, "output_tokens": 1}}}\n\n'
           f"event: content_block_start\ndata: {{oops, x-api-key: {KEY}\n\n")
    name = server.add_case("scripted_unreadable", {**json_case(message([], "end_turn")),
                                                  "response": {"status": 200, "sse": sse}})
    model = model_at(server.anthropic_base_url_for(name))
    try:
        result = await run_agent(Agent(model, retry=FAST, store=MemoryStore()), True)
    finally:
        await model.aclose()
    assert result.status == "failed" and isinstance(result.exception, ModelResponseError)
    assert "unreadable event" in (result.error or "") and "oops, x-api-key: ***" in (result.error or "")
    assert KEY not in (result.error or "") and KEY not in str(result.exception)
