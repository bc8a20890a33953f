"""`OpenAIResponsesModel` against the 43 recorded real Responses API interactions
(tests/wire/openai_responses), through an `Agent`, over real HTTP to the replay server on loopback.

For every case (the background-mode and compaction ones exempt: those flows are not nbagent's)
the expected answer is read from the recorded JSON / SSE independently of the provider
(`recorded`): text, refusal, function calls, reasoning summaries, every output item, token counts.
For each recorded multi-step pair, the later request nbagent builds carries the earlier
response's items exactly as the recorded client sent them: whole and streamed, and from a new
process resuming the thread from its SQLite file.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import Agent
from nbagent.events import ModelRetryEvent, ReasoningDeltaEvent, TextDeltaEvent
from nbagent.exceptions import AuthenticationError, BadRequestError, ModelHTTPError
from nbagent.messages import AssistantMessage
from nbagent.models.openai import OpenAIResponsesModel
from nbagent.models.openai._responses_wire import item_for_input
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore
from nbagent.tools import Tool
from tests.wire.replay_server import RESPONSES_CASES_DIR, ReplayServer, all_cases, split_sse_events

CASES = all_cases(RESPONSES_CASES_DIR)
KEY = "sk-responses-test-0123456789abcdef"
FAST = Retry(attempts=3, initial_delay=0, max_delay=0, jitter=0)
ROOT = Path(__file__).resolve().parent.parent
EXEMPT = ("responses_background_", "responses_compact_")
AGENT_CASES = sorted(n for n in CASES if not n.startswith(EXEMPT))
ERRORS = {400: BadRequestError, 401: AuthenticationError}


def test_all_43_cases_are_present_with_their_provenance() -> None:
    assert len(CASES) == 43
    for case in CASES.values():
        assert case["source"] and case["license"] == "MIT" and len(case["source_commit"]) == 40


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


# ----------------------------------------------------------------------------- the oracle
def sse_events(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON data of a recorded stream's events."""
    events = []
    for raw in split_sse_events(case["response"]["sse"]):
        data = "\n".join(line[5:].strip() for line in raw.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            events.append(json.loads(data))
    return events


def recorded(case: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The output items a recorded answer ends with (a stream's: as its ``output_item.done``
    events carry them) and its final response object."""
    if "sse" not in case["response"]:
        body = case["response"]["body"]
        return body["output"], body
    events = sse_events(case)
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    final = next(e["response"] for e in events if e["type"] in ("response.completed", "response.incomplete"))
    return [done[i] for i in sorted(done)], final


def texts(items: list[dict[str, Any]], part: str, key: str) -> str:
    return "".join(p[key] for i in items if i["type"] == "message" for p in i["content"] if p["type"] == part)


def model_at(base_url: str, name: str = "gpt-5", **kwargs: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(name, base_url=base_url, api_key=KEY, **kwargs)


def tools_for(body: dict[str, Any], outputs: dict[str, str] | None = None, **options: Any) -> list[Tool]:
    """A tool for every function tool of a recorded request; it returns `outputs` by name."""
    tools = []
    for t in body.get("tools") or ():
        if t.get("type") != "function":
            continue

        def run(_name: str = t["name"], **kwargs: Any) -> str:
            return (outputs or {}).get(_name, f"result of {_name}")

        tools.append(Tool(t["name"], t.get("description") or "", t["parameters"], function=run, **options))
    return tools


async def run_agent(agent: Agent[Any], stream: bool, prompt: str = "go", **kwargs: Any) -> tuple[Any, list[Any]]:
    if not stream:
        return await agent.run(prompt, **kwargs), []
    events = [e async for e in agent.stream(prompt, **kwargs)]
    return events[-1].result, events


def first_answer(result: Any) -> AssistantMessage:
    return next(m for m in result.new_messages if isinstance(m, AssistantMessage))


# ----------------------------------------------------------------------------- every case through an Agent
class Book(BaseModel):
    title: str
    author: dict[str, str]
    rating: int


# every case, and every streamed one a second time through the SDK's parsed events (`sdk_stream=True`)
READERS = [pytest.param(n, False, id=n) for n in AGENT_CASES] + [
    pytest.param(n, True, id=f"{n}-sdk_stream") for n in AGENT_CASES if CASES[n]["request"]["body"].get("stream")]


@pytest.mark.parametrize(("name", "sdk_stream"), READERS)
async def test_every_case_runs_through_an_agent(server: Any, name: str, sdk_stream: bool) -> None:
    """Mapped faithfully (text, refusal, calls, reasoning, every item kept, usage, truncation), or
    a failure that carries the recorded status."""
    case = CASES[name]
    body = case["request"]["body"]
    model = model_at(server.base_url_for(name), body.get("model", "gpt-5"), provider=case["provider"],
                     builtin_tools=[t for t in body.get("tools") or () if t.get("type") != "function"],
                     sdk_stream=sdk_stream)
    output_type = Book if name == "responses_structured_output" else None
    agent = Agent(model, tools=tools_for(body, requires_approval=True), store=MemoryStore(), retry=FAST,
                  output_type=output_type)
    try:
        result, events = await run_agent(agent, bool(body.get("stream")))
    finally:
        await model.aclose()
    status = case["response"]["status"]
    if status >= 400:
        assert result.status == "failed"
        assert isinstance(result.exception, ERRORS[status]) and result.exception.status_code == status
        assert str(status) in (result.error or "")
        assert len(server.responses_requests()) >= 1
        return
    items, final = recorded(case)
    message = first_answer(result)
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in items if i["type"] == "function_call"]
    assert [(c.id, c.name, c.args_json) for c in message.tool_calls] == calls
    assert result.status == ("paused" if calls else "completed"), result.error
    assert message.text == (texts(items, "output_text", "text") or (None if calls else "")) or message.refusal
    assert message.refusal == (texts(items, "refusal", "refusal") or None)
    assert message.thinking_blocks == items  # every item kept, in order, as the server sent it
    for item in items:
        for part in item.get("summary") or ():
            assert part["text"] in (message.reasoning or "")
    usage = final.get("usage") or {}
    assert result.usage.input_tokens == usage.get("input_tokens", 0)
    assert result.usage.output_tokens == usage.get("output_tokens", 0)
    assert result.usage.cache_read_tokens == (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    assert result.usage.reasoning_tokens == (usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0)
    assert result.truncated == (final.get("status") == "incomplete")
    if output_type is not None:
        assert result.output == Book(title="THE NAME OF THE WIND",
                                     author={"first_name": "Patrick", "last_name": "Rothfuss"}, rating=7)
    if events:
        streamed = "".join(e.delta for e in events if isinstance(e, TextDeltaEvent))
        assert streamed == (message.text or "")
        thought = "".join(e.delta for e in events if isinstance(e, ReasoningDeltaEvent))
        assert thought == (message.reasoning or "")


def test_the_recorded_facts_written_out() -> None:
    """A few facts literally, so a bug shared by the oracle and the provider cannot hide."""
    items, final = recorded(CASES["responses_stream_reasoning_tool_call_0"])
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[1]["phase"] == "commentary"
    added = next(e["item"] for e in sse_events(CASES["responses_stream_reasoning_tool_call_0"])
                 if e["type"] == "response.output_item.added" and e["item"]["type"] == "reasoning")
    assert added["encrypted_content"] != items[0]["encrypted_content"]  # the early copy differs
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


async def test_a_refusal_is_visible_and_an_incomplete_answer_is_truncated(server: Any) -> None:
    for name, stream, words in (("responses_refusal", False, "I'm very sorry, but I can't assist with that."),
                                ("responses_stream_refusal", True, "I'm sorry, I can't assist with that.")):
        model = model_at(server.base_url_for(name), "gpt-4o")
        try:
            result, _ = await run_agent(Agent(model, store=MemoryStore()), stream)
        finally:
            await model.aclose()
        assert result.status == "completed" and first_answer(result).refusal == words
        assert first_answer(result).text is None
    for name, stream in (("responses_incomplete_max_output_tokens", False),
                         ("responses_stream_incomplete_max_output_tokens", True)):
        model = model_at(server.base_url_for(name), "gpt-4o", settings={"max_output_tokens": 50})
        try:
            result, _ = await run_agent(Agent(model, store=MemoryStore()), stream)
        finally:
            await model.aclose()
        assert result.status == "completed" and result.truncated
        assert first_answer(result).finish_reason == "length"
        assert server.responses_requests()[-1]["body"]["max_output_tokens"] == 50


# ----------------------------------------------------------------------------- the wire contract
async def test_every_request_sends_store_false_and_no_previous_response_id(server: Any) -> None:
    """With reasoning configured, ``include`` asks for the encrypted reasoning; without it (a
    model that does not reason) it does not."""
    url = server.base_url_for("responses_plain_text")
    before = len(server.responses_requests())
    for model in (model_at(url, "gpt-5.4", reasoning_effort="medium", reasoning_summary="auto"),
                  model_at(url, "gpt-4o"), model_at(url, "gpt-4o", reasoning_effort="low")):
        try:
            result, _ = await run_agent(Agent(model, store=MemoryStore()), False)
            assert result.status == "completed", result.error
        finally:
            await model.aclose()
    sent = [r["body"] for r in server.responses_requests()[before:]]
    assert len(sent) == 3
    for body in sent:
        assert body["store"] is False and "previous_response_id" not in body
    assert sent[0]["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert sent[0]["include"] == ["reasoning.encrypted_content"]
    assert "include" not in sent[1] and "reasoning" not in sent[1]
    assert sent[2]["include"] == ["reasoning.encrypted_content"]


# ----------------------------------------------------------------------------- round trips
PAIRS = {
    "responses_tool_call": {"get_capital": "Potato City"},
    "responses_parallel_tool_calls": {"secret_retrieval_tool": ""},
    "responses_reasoning_tool_call": {"update_plan": "plan updated"},
    "responses_stream_tool_call": {"get_capital": "Paris"},
    "responses_stream_parallel_tool_calls": {"secret_retrieval_tool": ""},
    "responses_stream_reasoning_tool_call": {"get_capital": "Potato City"},
}
"""The recorded tool loops, and what their tools returned."""

EXACT = ("responses_reasoning_tool_call", "responses_stream_reasoning_tool_call")
"""Pairs whose recorded later request nbagent's equals item for item after the prompt (the other
recorded clients spell a function call differently: without ``id``, with ``status``...). In the
streamed one the recorded client sent the commentary message with its quotes straightened
(``I'll`` for the server's curly apostrophe): nbagent sends the server's text."""


def later_input(stem: str) -> list[dict[str, Any]]:
    return CASES[f"{stem}_1"]["request"]["body"]["input"]


def check_round_trip(stem: str, sent: list[dict[str, Any]]) -> None:
    """The later request carries the earlier answer's reasoning items exactly as the recorded
    client sent them, every item in the recorded order, and the function call outputs."""
    expected = later_input(stem)
    answered = {i["id"]: i for i in recorded(CASES[f"{stem}_0"])[0]}
    start = next(i for i, item in enumerate(expected) if item.get("role") not in ("user", "developer", "system"))
    expected_items, ours = expected[start:], sent[-len(expected) + start:]
    assert [i.get("type") for i in ours] == [i.get("type") for i in expected_items]
    for mine, theirs in zip(ours, expected_items, strict=True):
        if theirs["type"] == "reasoning":
            assert mine == theirs  # every string identical, encrypted_content included
        elif theirs["type"] == "message":
            assert mine["id"] == theirs["id"] and mine.get("phase") == theirs.get("phase")
            assert mine["content"][0]["text"] == answered[theirs["id"]]["content"][0]["text"]
        else:
            if theirs["call_id"].startswith("call_"):  # (an early-2025 client sent the item id instead)
                assert mine["call_id"] == theirs["call_id"]
            if theirs["type"] == "function_call":
                assert mine["name"] == theirs["name"]
                assert json.loads(mine["arguments"]) == json.loads(theirs["arguments"])
            else:
                assert mine["output"] == theirs["output"]
    if stem in EXACT:
        assert [i for i in ours if i["type"] != "message"] == [i for i in expected_items if i["type"] != "message"]


def outputs_for(stem: str) -> dict[str, Any]:
    """Tools returning what the recorded tools returned, by call (parallel calls return different texts)."""
    by_call = {i["call_id"]: i["output"] for i in later_input(stem) if i.get("type") == "function_call_output"}
    calls = {i[key]: i for i in recorded(CASES[f"{stem}_0"])[0] if i["type"] == "function_call"
             for key in ("id", "call_id")}
    return {json.dumps(json.loads(calls[c]["arguments"]), sort_keys=True): out for c, out in by_call.items()}


def pair_tools(stem: str) -> list[Tool]:
    table = outputs_for(stem)
    tools = []
    for t in CASES[f"{stem}_0"]["request"]["body"]["tools"]:
        def run(**kwargs: Any) -> str:
            return str(table[json.dumps(kwargs, sort_keys=True)])

        tools.append(Tool(t["name"], t.get("description") or "", t["parameters"], function=run))
    return tools


@pytest.mark.parametrize("stem", sorted(PAIRS))
async def test_the_later_request_carries_the_earlier_items_as_the_recorded_client_sent_them(
    server: Any, stem: str
) -> None:
    server.reset()  # the `then:` counters
    first, second = CASES[f"{stem}_0"], f"{stem}_1"
    body = first["request"]["body"]
    model = model_at(server.fault_base_url("then", f"{stem}_0", arg=second), body["model"])
    agent = Agent(model, tools=pair_tools(stem), store=MemoryStore(), retry=FAST)
    before = len(server.responses_requests())
    try:
        result, _ = await run_agent(agent, bool(body.get("stream")), body["input"][-1]["content"])
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    sent = [r["body"] for r in server.responses_requests()[before:]]
    assert len(sent) == 2
    check_round_trip(stem, sent[1]["input"])


@pytest.mark.parametrize("stem", ["responses_reasoning_summary", "responses_stream_reasoning_summary"])
async def test_reasoning_summaries_stream_as_reasoning_and_go_back_only_inside_their_item(
    server: Any, stem: str
) -> None:
    """``store=True`` (the recorded client's): the reasoning item goes back by id with its summary,
    as recorded; the summary is never the answer's text or an item of its own. With ``store=False``
    an item the server did not encrypt is not sent (its id alone could not be resolved)."""
    first, second = CASES[f"{stem}_0"], CASES[f"{stem}_1"]
    stream = bool(first["request"]["body"].get("stream"))
    prompts = [i["content"] for i in second["request"]["body"]["input"] if i.get("role") == "user"]
    items, _ = recorded(first)
    for store in (True, False):
        server.reset()  # the `then:` counters
        model = model_at(server.fault_base_url("then", f"{stem}_0", arg=f"{stem}_1"), "gpt-5", store=store,
                         reasoning_effort="medium", reasoning_summary="auto")
        agent = Agent(model, store=MemoryStore())
        before = len(server.responses_requests())
        try:
            result, events = await run_agent(agent, stream, prompts[0])
            again, _ = await run_agent(agent, stream, prompts[1], thread=result.thread)
        finally:
            await model.aclose()
        assert again.status == "completed", again.error
        summary = "\n\n".join(p["text"] for p in items[0]["summary"])
        assert first_answer(result).reasoning == summary and first_answer(result).text == "3"
        if stream:
            assert "".join(e.delta for e in events if isinstance(e, ReasoningDeltaEvent)) == summary
        sent = [r["body"] for r in server.responses_requests()[before:]]
        carried = sent[1]["input"]
        assert sent[1]["store"] is store
        reasoning = [i for i in carried if i.get("type") == "reasoning"]
        if store:
            assert reasoning == [i for i in second["request"]["body"]["input"] if i.get("type") == "reasoning"]
        else:
            assert reasoning == []
        assert not any(summary[:40] in json.dumps(i) for i in carried if i.get("type") != "reasoning")


# ----------------------------------------------------------------------------- after a restart
@pytest.mark.parametrize("stem", list(EXACT))
async def test_a_paused_thread_resumed_in_a_new_process_sends_the_reasoning_back_identical(
    server: Any, tmp_path: Path, stem: str
) -> None:
    """The first answer (reasoning + a call needing approval) pauses the run; a new Python process
    opens the same SQLite file and resumes: its request carries every item as the recorded
    client sent it, the encrypted reasoning byte-identical."""
    server.reset()  # the `then:` counters
    first = CASES[f"{stem}_0"]["request"]["body"]
    stream = bool(first.get("stream"))
    base = server.fault_base_url("then", f"{stem}_0", arg=f"{stem}_1")
    store = tmp_path / "threads.db"
    tool = first["tools"][0]
    answer = outputs_for(stem)
    model = model_at(base, first["model"])
    agent = Agent(model, tools=[Tool(tool["name"], tool.get("description") or "", tool["parameters"],
                                     function=lambda **kw: "unused", requires_approval=True)], store=str(store))
    before = len(server.responses_requests())
    try:
        paused, _ = await run_agent(agent, stream, first["input"][-1]["content"])
    finally:
        await model.aclose()
    assert paused.status == "paused", paused.error
    script = f"""
import asyncio, json
from nbagent import Agent, Tool
from nbagent.models import OpenAIResponsesModel

ANSWER = {next(iter(answer.values()))!r}
PARAMS = json.loads({json.dumps(tool["parameters"])!r})

async def main():
    model = OpenAIResponsesModel({first["model"]!r}, base_url={base!r})
    tool = Tool({tool["name"]!r}, {tool.get("description") or ""!r}, PARAMS, function=lambda **kw: ANSWER,
                requires_approval=True)
    agent = Agent(model, tools=[tool], store={str(store)!r})
    try:
        if {stream!r}:
            events = [e async for e in agent.resume_stream(thread={paused.thread!r},
                                                           approve=[{paused.pending[0].id!r}])]
            result = events[-1].result
        else:
            result = await agent.resume(thread={paused.thread!r}, approve=[{paused.pending[0].id!r}])
    finally:
        await model.aclose()
    print(json.dumps({{"status": result.status, "output": result.output, "error": result.error}}))

asyncio.run(main())
"""
    env = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_BASE_URL", None)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True,
                                   timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "completed", outcome
    sent = [r["body"] for r in server.responses_requests()[before:]]
    assert len(sent) == 2
    check_round_trip(stem, sent[1]["input"])
    assert sent[1]["input"][1] == later_input(stem)[1]  # the reasoning item byte for byte


CONTINUED = {
    "responses_reasoning_summary": {"store": True, "reasoning_effort": "medium", "reasoning_summary": "auto"},
    "responses_stream_reasoning_summary": {"store": True, "reasoning_effort": "medium", "reasoning_summary": "auto"},
    "responses_reasoning_history_error": {"reasoning_effort": "low", "reasoning_summary": "detailed"},
}
"""The reasoning pairs whose first answer ends the turn (no tool call), and the model options
of their recorded client (``store=True``: the summary pairs' reasoning went back by id)."""


@pytest.mark.parametrize("stem", sorted(CONTINUED))
async def test_a_thread_continued_in_a_new_process_sends_the_reasoning_back_identical(
    server: Any, tmp_path: Path, stem: str
) -> None:
    """The first turn here; the next one from a new Python process that opens the same SQLite
    file: its request carries the first answer's reasoning item exactly as the recorded client
    sent it, then that answer's message item (the history-error pair's recorded 400 is answered
    all the same: the run fails with it)."""
    server.reset()  # the `then:` counters
    second = CASES[f"{stem}_1"]["request"]["body"]
    stream = bool(second.get("stream"))
    prompts = [i["content"] for i in second["input"] if i.get("role") == "user" and isinstance(i["content"], str)]
    prompts = prompts or ["What is the meaning of life?", "Anything to add?"]
    base = server.fault_base_url("then", f"{stem}_0", arg=f"{stem}_1")
    store = tmp_path / "threads.db"
    options = CONTINUED[stem]
    model = model_at(base, "gpt-5", **options)
    before = len(server.responses_requests())
    try:
        first, _ = await run_agent(Agent(model, store=str(store), retry=FAST), stream, prompts[0])
    finally:
        await model.aclose()
    assert first.status == "completed", first.error
    script = f"""
import asyncio, json
from nbagent import Agent, Retry
from nbagent.models import OpenAIResponsesModel

async def main():
    model = OpenAIResponsesModel("gpt-5", base_url={base!r}, **{options!r})
    agent = Agent(model, store={str(store)!r}, retry=Retry(attempts=1))
    try:
        if {stream!r}:
            events = [e async for e in agent.stream({prompts[-1]!r}, thread={first.thread!r})]
            result = events[-1].result
        else:
            result = await agent.run({prompts[-1]!r}, thread={first.thread!r})
    finally:
        await model.aclose()
    print(json.dumps({{"status": result.status, "error": result.error}}))

asyncio.run(main())
"""
    env = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_BASE_URL", None)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True,
                                   timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == ("failed" if stem.endswith("history_error") else "completed"), outcome
    sent = [r["body"] for r in server.responses_requests()[before:]]
    assert len(sent) == 2
    carried = sent[1]["input"]
    theirs = [i for i in second["input"] if i.get("type") == "reasoning"]
    assert theirs and [i for i in carried if i.get("type") == "reasoning"] == theirs  # byte for byte
    at = carried.index(theirs[0])
    answered = recorded(CASES[f"{stem}_0"])[0]
    follows = answered[next(i for i, item in enumerate(answered) if item["type"] == "reasoning") + 1]
    assert carried[at + 1]["type"] == "message" and carried[at + 1]["id"] == follows["id"]
    assert carried[-1] == {"role": "user", "content": prompts[-1]}


# ----------------------------------------------------------------------------- items nbagent does not run
@pytest.mark.parametrize("name", ["responses_web_search", "responses_code_interpreter", "responses_image_generation",
                                  "responses_stream_web_search"])
async def test_built_in_tool_items_are_kept_and_sent_back_unchanged(server: Any, name: str) -> None:
    case = CASES[name]
    body = case["request"]["body"]
    stream = bool(body.get("stream"))
    follow = "responses_stream_text" if stream else "responses_plain_text"
    builtin = [t for t in body["tools"] if t["type"] != "function"]
    server.reset()  # the `then:` counters
    model = model_at(server.fault_base_url("then", name, arg=follow), body["model"], builtin_tools=builtin)
    agent = Agent(model, store=MemoryStore())
    before = len(server.responses_requests())
    try:
        result, _ = await run_agent(agent, stream, "first")
        again, _ = await run_agent(agent, stream, "second", thread=result.thread)
    finally:
        await model.aclose()
    assert again.status == "completed", again.error
    sent = [r["body"] for r in server.responses_requests()[before:]]
    assert [t for t in sent[0]["tools"]] == builtin
    items, _ = recorded(case)
    carried = sent[1]["input"][1:-1]  # between the first prompt and the second
    assert carried == [item_for_input(i) for i in items]
    assert any(i["type"].endswith("_call") and i["type"] != "function_call" for i in carried)


async def test_an_unknown_item_type_is_kept_and_sent_back_unchanged(server: Any) -> None:
    case = json.loads(json.dumps(CASES["responses_plain_text"]))
    unknown = {"type": "hologram_call", "id": "hg_1", "status": "completed", "frames": [1, 2, {"x": None}]}
    case["response"]["body"]["output"].insert(0, unknown)
    name = server.add_case("responses_unknown_item", case)
    model = model_at(server.base_url_for(name), "gpt-4o")
    agent = Agent(model, store=MemoryStore())
    try:
        result, _ = await run_agent(agent, False, "first")
        again, _ = await run_agent(agent, False, "second", thread=result.thread)
    finally:
        await model.aclose()
    assert result.status == again.status == "completed"
    assert first_answer(result).thinking_blocks[0] == unknown
    assert server.responses_requests()[-1]["body"]["input"][1] == unknown


# ----------------------------------------------------------------------------- failures and retries
async def test_rate_limits_server_errors_and_errors_mid_stream_are_retried(server: Any) -> None:
    """Scripted in the shapes OpenAI documents (no public recording has them): a 429 with
    ``retry-after``, a 500, and an ``error`` event inside a started stream."""
    event = "event: error\ndata: " + json.dumps({"type": "error", "code": "server_error", "message": "boom",
                                                  "param": None, "sequence_number": 3})
    failed = "event: response.failed\ndata: " + json.dumps({"type": "response.failed", "response": {
        "id": "resp_1", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "The model failed to generate a response."}}})
    server.reset()  # the fault counters
    urls = [(server.fault_base_url("429-then-200", "responses_plain_text"), False),
            (server.fault_base_url("500-then-200", "responses_plain_text"), False),
            (server.fault_base_url("error-once", "responses_stream_text", arg=f"2,{event}"), True),
            (server.fault_base_url("error-once", "responses_stream_text", arg=f"2,{failed}"), True),
            (server.fault_base_url("drop-once", "responses_stream_text", arg=3), True)]
    for url, stream in urls:
        model = model_at(url, "gpt-4o")
        try:
            result, events = await run_agent(Agent(model, store=MemoryStore(), retry=FAST), stream)
        finally:
            await model.aclose()
        assert result.status == "completed", (url, result.error)
        assert result.output and result.usage.requests >= 1
        if stream:
            assert any(type(e).__name__ == "ModelRetryEvent" for e in events), [type(e).__name__ for e in events]


async def test_a_rate_limit_keeps_its_status_and_retry_after_and_the_wait_is_honoured(server: Any) -> None:
    """A 429 that outlasts the retries fails the run as `RateLimitError` with its status and
    ``retry-after``; a 429 asking for 0.3 s is retried after 0.3 s (the `ModelRetryEvent`'s delay)."""
    from nbagent.exceptions import RateLimitError

    server.reset()  # the fault counters
    for stream in (False, True):
        model = model_at(server.fault_base_url("429-then-200", "responses_stream_text" if stream
                                               else "responses_plain_text", arg=9), "gpt-4o")
        try:
            result, _ = await run_agent(Agent(model, store=MemoryStore(), retry=FAST), stream)
        finally:
            await model.aclose()
        assert result.status == "failed" and isinstance(result.exception, RateLimitError)
        assert result.exception.status_code == 429 and result.exception.retry_after == 0
        assert "429" in (result.error or "")
    slow = Retry(attempts=2, initial_delay=5, max_delay=5, jitter=0)  # retry-after comes first
    model = model_at(server.fault_base_url("429-retry-after", "responses_stream_text", arg=0.3), "gpt-4o")
    try:
        result, events = await run_agent(Agent(model, store=MemoryStore(), retry=slow), True)
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    assert [e.delay_s for e in events if isinstance(e, ModelRetryEvent)] == [pytest.approx(0.3)]


async def test_a_refused_request_mid_stream_fails_at_once_with_its_words(server: Any) -> None:
    event = "event: error\ndata: " + json.dumps({"type": "error", "code": "invalid_prompt",
                                                  "message": "Invalid prompt: flagged", "param": None})
    model = model_at(server.fault_base_url("error-mid-stream", "responses_stream_text", arg=f"2,{event}"), "gpt-4o")
    try:
        result, _ = await run_agent(Agent(model, store=MemoryStore(), retry=FAST), True)
    finally:
        await model.aclose()
    assert result.status == "failed" and isinstance(result.exception, BadRequestError)
    assert "Invalid prompt: flagged" in (result.error or "")


def test_a_failed_response_in_a_200_names_its_error() -> None:
    model = OpenAIResponsesModel("gpt-4o", api_key=KEY)
    with pytest.raises(ModelHTTPError, match="quota"):
        model.map_completion({"object": "response", "status": "failed", "output": [],
                              "error": {"code": "insufficient_quota", "message": "You exceeded your quota"}})


# ----------------------------------------------------------------------------- how it is chosen
def test_infer_model_and_auto_pick_the_responses_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.models import OpenAIModel, auto, infer_model

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for name in ("ANTHROPIC_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OLLAMA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    model = infer_model("openai-responses:gpt-5.4")
    assert type(model) is OpenAIResponsesModel and model.model_name == "gpt-5.4" and model.provider == "openai"
    chosen = auto()
    assert type(chosen) is OpenAIResponsesModel and chosen.model_name == "gpt-5.4"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    assert type(auto()) is OpenAIResponsesModel
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("OPENAI_MODEL", "qwen3")
    compatible = auto()
    assert type(compatible) is OpenAIModel and compatible.model_name == "qwen3"
    assert KEY not in repr(chosen)
    # the rule reads the URL's host: a gateway that only names OpenAI's host in its path or as a
    # prefix of its own host name is another server, which keeps Chat Completions
    for elsewhere in ("https://gateway.example/api.openai.com/v1", "https://api.openai.com.gateway.example/v1"):
        monkeypatch.setenv("OPENAI_BASE_URL", elsewhere)
        assert type(auto()) is OpenAIModel, elsewhere
    monkeypatch.setenv("OPENAI_BASE_URL", "https://API.openai.com:443/v1/")
    assert type(auto()) is OpenAIResponsesModel


async def test_a_streamed_unknown_item_and_event_are_kept_not_dropped(server: Any) -> None:
    """An item type and an event type the SDK does not know, inside a recorded stream: the item
    is kept as its ``output_item.done`` carries it and sent back; the event is passed over."""
    case = json.loads(json.dumps(CASES["responses_stream_text"]))
    unknown = {"type": "hologram_call", "id": "hg_1", "status": "completed", "frames": [1, {"x": None}]}
    events = split_sse_events(case["response"]["sse"])
    extra = [f"event: response.hologram.delta\ndata: {json.dumps({'type': 'response.hologram.delta', 'x': 1})}\n\n",
             "event: response.output_item.done\ndata: " + json.dumps(
                 {"type": "response.output_item.done", "output_index": 9, "item": unknown}) + "\n\n"]
    case["response"]["sse"] = "".join(events[:2] + extra + events[2:])
    name = server.add_case("responses_stream_unknown_item", case)
    model = model_at(server.base_url_for(name), "gpt-4o")
    agent = Agent(model, store=MemoryStore())
    try:
        result, _ = await run_agent(agent, True, "first")
        again, _ = await run_agent(agent, True, "second", thread=result.thread)
    finally:
        await model.aclose()
    assert result.status == again.status == "completed", result.error
    assert first_answer(result).thinking_blocks[-1] == unknown
    assert first_answer(result).text == recorded(CASES["responses_stream_text"])[1]["output"][0]["content"][0]["text"]
    assert server.responses_requests()[-1]["body"]["input"][-2] == unknown


# ----------------------------------------------------------------------------- request shapes
def test_the_request_spells_tools_choice_images_and_settings_as_the_responses_api_does() -> None:
    from nbagent.exceptions import UserError
    from nbagent.images import Image
    from nbagent.messages import SystemMessage, ToolResultMessage, UserMessage
    from nbagent.models.base import ModelRequest

    model = OpenAIResponsesModel("gpt-4o", api_key=KEY, settings={"max_tokens": 64, "temperature": 0})
    png = Image(b"\x89PNG\r\n\x1a\n" + b"0" * 16, "image/png")
    tools = [{"name": "look", "description": "Look", "parameters": {"type": "object", "properties": {}},
              "strict": True}]
    history = [SystemMessage("Be brief."), UserMessage("What is this?", [png]),
               AssistantMessage(text="Looking.", tool_calls=[]),  # an answer from another model
               ToolResultMessage("call_9", "look", "a plot", images=[png])]
    params = model.request_params(ModelRequest(history, tools, {"tool_choice": "look",
                                                                "parallel_tool_calls": False}), stream=False)
    assert params["instructions"] == "Be brief." and params["store"] is False and "stream" not in params
    assert params["max_output_tokens"] == 64 and params["temperature"] == 0 and "include" not in params
    assert params["tools"] == [{"type": "function", "name": "look", "description": "Look",
                                "parameters": {"type": "object", "properties": {}}, "strict": True}]
    assert params["tool_choice"] == {"type": "function", "name": "look"} and params["parallel_tool_calls"] is False
    user, assistant, result = params["input"]
    assert user["content"][0] == {"type": "input_text", "text": "What is this?"}
    assert user["content"][1]["type"] == "input_image" and user["content"][1]["image_url"].startswith("data:image/png")
    assert assistant == {"role": "assistant", "content": "Looking."}
    assert result["type"] == "function_call_output" and result["output"][1]["type"] == "input_image"
    no_tools = model.request_params(ModelRequest(history[:2], [], {"tool_choice": "required"}), stream=True)
    assert "tool_choice" not in no_tools and no_tools["stream"] is True
    with pytest.raises(UserError, match="previous_response_id is never sent"):
        OpenAIResponsesModel("gpt-4o", api_key=KEY, settings={"previous_response_id": "resp_1"})


def test_the_model_travels_without_its_key_and_anthropic_skips_its_items(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from nbagent.models.anthropic._wire import _assistant_content

    model = OpenAIResponsesModel("gpt-5.4", api_key=KEY, reasoning_effort="low", store=False)
    data = pickle.dumps(model)
    assert KEY.encode() not in data
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-0123456789abcdef")
    arrived = pickle.loads(data)
    assert (arrived.reasoning, arrived.encrypted_reasoning, arrived._api_key.get()) == (
        {"effort": "low"}, True, "sk-other-0123456789abcdef")
    answer = AssistantMessage(text="hi", thinking_blocks=[{"type": "reasoning", "id": "rs_1", "summary": []},
                                                          {"type": "message", "id": "msg_1", "content": []}])
    assert _assistant_content(answer) == [{"type": "text", "text": "hi"}]


async def test_a_content_filter_stop_fails_and_a_body_that_is_no_response_is_named(server: Any) -> None:
    from nbagent.exceptions import ContentFilterError, ResponseBodyError

    case = json.loads(json.dumps(CASES["responses_incomplete_max_output_tokens"]))
    case["response"]["body"]["incomplete_details"] = {"reason": "content_filter"}
    case["response"].pop("body_raw", None)  # (replayed in preference to body)
    name = server.add_case("responses_content_filter", case)
    model = model_at(server.base_url_for(name), "gpt-4o")
    try:
        result, _ = await run_agent(Agent(model, store=MemoryStore()), False)
    finally:
        await model.aclose()
    assert result.status == "failed" and isinstance(result.exception, ContentFilterError)
    for stream in (False, True):
        model = model_at(server.fault_base_url("bad-body", "responses_plain_text", arg="html"), "gpt-4o")
        try:
            result, _ = await run_agent(Agent(model, store=MemoryStore(), retry=FAST), stream)
        finally:
            await model.aclose()
        assert result.status == "failed" and isinstance(result.exception, ResponseBodyError)
        assert "not a Responses API response" in (result.error or "") and "HTML" in (result.error or "")


async def test_usage_is_priced_as_openai(server: Any) -> None:
    model = model_at(server.base_url_for("responses_reasoning_tool_call_0"), "gpt-5")
    tool = tools_for(CASES["responses_reasoning_tool_call_0"]["request"]["body"], requires_approval=True)
    try:
        result, _ = await run_agent(Agent(model, tools=tool, store=MemoryStore()), False)
    finally:
        await model.aclose()
    usage = CASES["responses_reasoning_tool_call_0"]["response"]["body"]["usage"]
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.reasoning_tokens) == (
        usage["input_tokens"], usage["output_tokens"], 1792)
    assert result.usage.cost_total > 0  # genai-prices' gpt-5 at provider openai


async def test_two_streamed_reasoning_items_read_as_the_answer_reasoning(server: Any) -> None:
    """A second reasoning item in one stream (a web search between them): the streamed reasoning
    is the answer's reasoning, its items' summaries a blank line apart."""
    case = json.loads(json.dumps(CASES["responses_stream_reasoning_summary_0"]))
    events = split_sse_events(case["response"]["sse"])
    reasoning = [e for e in events if '"response.reasoning_summary' in e or
                 ('"response.output_item.' in e and '"type":"reasoning"' in e.replace(" ", ""))]
    again = [e.replace('"output_index":0', '"output_index":5').replace('"output_index": 0', '"output_index": 5')
             for e in reasoning]
    last = max(i for i, e in enumerate(events) if e in reasoning)
    case["response"]["sse"] = "".join(events[: last + 1] + again + events[last + 1:])
    name = server.add_case("responses_stream_two_reasonings", case)
    model = model_at(server.base_url_for(name), "gpt-5", reasoning_summary="auto")
    try:
        result, streamed = await run_agent(Agent(model, store=MemoryStore()), True)
    finally:
        await model.aclose()
    message = first_answer(result)
    assert [b["type"] for b in message.thinking_blocks].count("reasoning") == 2
    thought = "".join(e.delta for e in streamed if isinstance(e, ReasoningDeltaEvent))
    summary = "\n\n".join(p["text"] for p in recorded(CASES["responses_stream_reasoning_summary_0"])[0][0]["summary"])
    assert thought == message.reasoning == f"{summary}\n\n{summary}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_reasoning_goes_back_with_its_following_message_unlike_the_recorded_400(
    server: Any, stream: bool
) -> None:
    """The recorded client sent the reasoning item without the message item that followed it and
    got a 400 ("provided without its required following item"). nbagent sends the same reasoning
    item, byte-identical, followed by that message item with its id. (The replay answers the
    recorded 400 all the same: the run fails with it, its status shown.)"""
    server.reset()  # the `then:` counters
    first, second = CASES["responses_reasoning_history_error_0"], CASES["responses_reasoning_history_error_1"]
    items, _ = recorded(first)
    model = model_at(server.fault_base_url("then", "responses_reasoning_history_error_0",
                                           arg="responses_reasoning_history_error_1"),
                     "gpt-5", reasoning_effort="low", reasoning_summary="detailed")
    agent = Agent(model, store=MemoryStore(), retry=FAST)
    before = len(server.responses_requests())
    try:
        result, _ = await run_agent(agent, False, "What is the meaning of life?")
        again, _ = await run_agent(agent, stream, "Anything to add?", thread=result.thread)
    finally:
        await model.aclose()
    assert result.status == "completed" and again.status == "failed" and "400" in (again.error or "")
    carried = server.responses_requests()[before:][1]["body"]["input"]
    theirs = [i for i in second["request"]["body"]["input"] if i.get("type") == "reasoning"]
    assert [i for i in carried if i.get("type") == "reasoning"] == theirs
    at = carried.index(theirs[0])
    assert carried[at + 1]["type"] == "message" and carried[at + 1]["id"] == items[1]["id"]
    assert carried[at + 2] == {"role": "user", "content": "Anything to add?"}


async def test_a_background_response_fails_the_run_with_a_message_that_names_it(server: Any) -> None:
    """The recorded background case (``status: "queued"``) through an `Agent`: nbagent does not
    poll, so the run fails at once with an error that says why and what to leave out."""
    from nbagent.exceptions import ModelResponseError

    model = model_at(server.base_url_for("responses_background_0"), "gpt-4o")
    try:
        result, _ = await run_agent(Agent(model, store=MemoryStore(), retry=FAST), False)
    finally:
        await model.aclose()
    assert result.status == "failed" and isinstance(result.exception, ModelResponseError)
    assert "queued (background mode)" in (result.error or "") and "background" in (result.error or "")


# ----------------------------------------------------------------------------- provider-native compaction
def _answering(text: str) -> dict[str, Any]:
    case = json.loads(json.dumps(CASES["responses_plain_text"]))
    case["response"].pop("body_raw", None)  # (replayed in preference to body)
    case["response"]["body"]["output"][0]["content"][0]["text"] = text
    return case


async def test_native_compaction_sends_the_history_to_responses_compact_and_its_items_back(
    server: Any, tmp_path: Path
) -> None:
    """`Compaction.native()`: the older messages go to ``/v1/responses/compact`` (the recorded
    ``responses_compact_0``); its items (the user's messages, the encrypted compaction item) are
    stored in the record and sent, byte-identical, in their place by the next request
    (``responses_compact_1``) and by a later agent reading the thread back from SQLite."""
    from nbagent import Compaction
    from nbagent.messages import CompactionMessage

    server.reset()  # the `then:` counters
    two = server.add_case("responses_says_4", _answering("2 + 2 = 4."))
    six = server.add_case("responses_says_6", _answering("3 + 3 = 6."))
    url = server.fault_base_url("then", two, arg=f"{six},responses_compact_0,responses_compact_1")
    system = "You are a helpful math assistant. Give short answers."
    store = str(tmp_path / "threads.db")
    model = model_at(url, "gpt-4o-mini", context_window=100)
    native = Compaction.native(at=0.1, keep_last=1)
    before = len(server.requests)
    try:
        plain = Agent(model, system=system, store=store)
        first = await plain.run("What is 2+2?")
        await plain.run("And 3+3?", thread=first.thread)
        result = await Agent(model, system=system, store=store, compaction=native).run(
            "And 5+5?", thread=first.thread)
    finally:
        await model.aclose()
    assert result.status == "completed" and result.output == "5 + 5 = 10", result.error
    posts = [r for r in server.requests[before:] if r["method"] == "POST"]
    assert [r["path"].rsplit("/v1", 1)[1] for r in posts] == ["/responses", "/responses", "/responses/compact",
                                                              "/responses"]
    compact = posts[2]["body"]
    assert compact["model"] == "gpt-4o-mini" and compact["instructions"] == system
    assert "store" not in compact and "include" not in compact
    recorded_input = CASES["responses_compact_0"]["request"]["body"]["input"]
    said = [texts([i], "output_text", "text") if i.get("type") == "message" else i["content"] for i in compact["input"]]
    assert said == [i["content"] for i in recorded_input]  # the recorded client's history, item for item
    items = CASES["responses_compact_0"]["response"]["body"]["output"]
    sent = posts[3]["body"]["input"]
    assert sent == [*items, {"role": "user", "content": "And 5+5?"}]  # every item as the server returned it
    theirs = CASES["responses_compact_1"]["request"]["body"]["input"][0]
    assert theirs["type"] == "compaction" and theirs in sent  # as the recorded client sent it
    [record] = [m for m in result.new_messages if isinstance(m, CompactionMessage)]
    assert (record.policy, record.upto, record.replaced, record.items) == ("native", 4, 4, items)
    assert "on the provider's side" in record.describe()
    [row] = [r for r in result.usage.calls if r.purpose == "compaction"]
    assert (row.input_tokens, row.output_tokens, row.provider) == (156, 190, "openai")
    # a later agent reads the record back from the store and sends the same items again
    model = model_at(url, "gpt-4o-mini", context_window=100_000)
    try:
        again = await Agent(model, system=system, store=store, compaction=native).run(
            "And 7+7?", thread=first.thread)
    finally:
        await model.aclose()
    assert again.status == "completed", again.error
    last = server.responses_requests()[-1]["body"]["input"]
    assert last[: len(items)] == items and last[-1] == {"role": "user", "content": "And 7+7?"}


def test_native_compaction_needs_a_model_that_compacts() -> None:
    from nbagent import Compaction
    from nbagent.exceptions import UserError
    from nbagent.models import FunctionModel

    with pytest.raises(UserError, match=r"Compaction.native\(\) needs a model whose provider manages the context"):
        Agent(FunctionModel(lambda m, r: AssistantMessage(text="hi")), compaction=Compaction.native())
    assert Agent(model_at("http://127.0.0.1:9/v1"), compaction=Compaction.native()).compaction == Compaction.native()
