"""The small-window server (tests/wire/window_server.py), with the real ``openai`` SDK and with
nbagent's `OpenAIModel` and `Agent`: answers by its script, refuses what overflows its window as
OpenAI does (streamed or not), measures tokens by `request_tokens`, and `paired` checks requests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from nbagent import Agent, tool
from nbagent.exceptions import BadRequestError
from nbagent.models import OpenAIModel
from nbagent.store import MemoryStore
from tests.wire.window_server import WindowServer, context_length_error, paired, request_tokens, text_tokens

COUNT_TOOL = {"type": "function", "function": {
    "name": "count", "description": "Count to n.",
    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
LONG = "word " * 4000  # 20000 characters: 5000 tokens, over a 4000-token window


@pytest.fixture
def server() -> Any:
    with WindowServer(window=4000) as srv:
        yield srv


@pytest.fixture
def client(server: WindowServer) -> Any:
    sdk = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    yield sdk
    sdk.close()


@tool
def count(n: int) -> str:
    """Count to n.

    Args:
        n: how far.
    """
    return " ".join(str(i) for i in range(1, n + 1))


def window_agent(server: WindowServer, **kwargs: Any) -> Agent:
    model = OpenAIModel("window", base_url=server.base_url, api_key="sk-test", provider="window")
    return Agent(model, store=MemoryStore(), prices={"window": {"input": 1.0, "output": 1.0}}, **kwargs)


# ---------------------------------------------------------------------------------- the rules
def test_request_tokens_follows_the_documented_rule() -> None:
    body = {"messages": [
        {"role": "system", "content": "abcde"},                                      # 4 + 2
        {"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "text", "text": "e"}]},  # 4 + 2
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "count", "arguments": '{"n": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 2 3"},                  # 4 + 2
    ], "tools": [COUNT_TOOL]}
    calls = text_tokens('count{"n": 3}')                                             # 13 characters: 4
    assert calls == 4
    assert request_tokens(body) == 6 + 6 + (4 + calls) + 6 + -(-len(json.dumps([COUNT_TOOL])) // 4)
    assert request_tokens({"messages": [{"role": "user", "content": ""}]}) == 4
    assert request_tokens({}) == 0


def ok_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "count", "arguments": "{}"}}


def asks(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [ok_call(i) for i in ids]}


def answers(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "hi"}
SAID = {"role": "assistant", "content": "done"}

PAIRED = {
    "no calls at all": [USER, SAID, USER],
    "a call and its result": [USER, asks("a"), answers("a"), SAID],
    "two calls answered in another order": [USER, asks("a", "b"), answers("b"), answers("a"), USER],
    "two turns": [USER, asks("a"), answers("a"), SAID, USER, asks("b"), answers("b")],
}
UNPAIRED = {
    "a call with no result": [USER, asks("a"), SAID],
    "the last call unanswered": [USER, asks("a")],
    "one of two calls unanswered": [USER, asks("a", "b"), answers("a"), SAID],
    "a result after a user message": [USER, asks("a"), USER, answers("a")],
    "a result for an unknown id": [USER, asks("a"), answers("a"), answers("z")],
    "a result answered twice": [USER, asks("a"), answers("a"), answers("a")],
    "a result first (its call compacted away)": [answers("a"), USER],
    "a result for an earlier turn's call": [USER, asks("a"), answers("a"), SAID, asks("b"), answers("a")],
}


@pytest.mark.parametrize("name", list(PAIRED))
def test_paired_accepts_matched_calls_and_results(name: str) -> None:
    assert paired({"messages": PAIRED[name]})


@pytest.mark.parametrize("name", list(UNPAIRED))
def test_paired_rejects_what_openai_would_refuse(name: str) -> None:
    assert not paired({"messages": UNPAIRED[name]})


# ---------------------------------------------------------------------------------- the openai SDK
def test_a_small_conversation_gets_a_tool_call_then_a_text(server: WindowServer, client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "please count to 12 for me"}]
    first = client.chat.completions.create(model="window", messages=messages, tools=[COUNT_TOOL])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("count", {"n": 12})
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": count(12)}]
    second = client.chat.completions.create(model="window", messages=messages, tools=[COUNT_TOOL])
    assert second.choices[0].message.content == "turn done: please count to 12 for me"
    assert len(server.requests) == 2 and all(paired(body) for body in server.requests)
    for answer, body in zip([first, second], server.requests, strict=True):
        assert answer.usage.prompt_tokens == request_tokens(body)
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert second.usage.completion_tokens == text_tokens("turn done: please count to 12 for me")
    assert server.max_prompt_tokens == max(server.sizes) and server.refused == 0


def test_a_streamed_answer_carries_the_same_call_and_its_usage(server: WindowServer, client: Any) -> None:
    stream = client.chat.completions.create(model="window", messages=[{"role": "user", "content": "count to 3"}],
                                            tools=[COUNT_TOOL], stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    arguments = "".join(tc.function.arguments or "" for d in deltas for tc in d.tool_calls or [])
    assert deltas[0].tool_calls[0].function.name == "count" and json.loads(arguments) == {"n": 3}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == request_tokens(server.requests[0])
    assert all(c.usage is None for c in chunks[:-1])


def test_the_tool_named_in_the_constructor_is_called_and_no_number_means_0() -> None:
    other = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    with WindowServer(tool="other") as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        answer = sdk.chat.completions.create(model="window", messages=[{"role": "user", "content": "go"}],
                                             tools=[COUNT_TOOL, other])
        sdk.close()
    call = answer.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("other", {"n": 0})


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_oversized_request_is_refused_as_openai_refuses_it(server: WindowServer, client: Any, stream: bool) -> None:
    messages = [{"role": "user", "content": LONG}]
    size = request_tokens({"messages": messages, "tools": [COUNT_TOOL]})
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="window", messages=messages, tools=[COUNT_TOOL], stream=stream)
    assert caught.value.status_code == 400
    assert caught.value.body == context_length_error(4000, size)["error"]
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"
    assert caught.value.body["message"] == (f"This model's maximum context length is 4000 tokens. However, your "
                                            f"messages resulted in {size} tokens. Please reduce the length of the "
                                            f"messages.")
    assert server.refused == 1 and server.sizes == [size] and server.max_prompt_tokens == 0


def test_a_request_of_exactly_the_window_is_answered() -> None:
    body = {"model": "window", "messages": [{"role": "user", "content": "x" * 400}]}
    with WindowServer(window=request_tokens(body)) as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        sdk.chat.completions.create(**body)
        server.window -= 1
        with pytest.raises(openai.BadRequestError):
            sdk.chat.completions.create(**body)
        sdk.close()
    assert server.refused == 1 and server.max_prompt_tokens == request_tokens(body) == 104


def test_with_no_tools_it_answers_a_summary(server: WindowServer, client: Any) -> None:
    messages = [{"role": "system", "content": "Summarize the conversation."},
                {"role": "user", "content": "Plan a trip to Paris in May"},
                {"role": "assistant", "content": "Sure."},
                {"role": "user", "content": [{"type": "text", "text": "Book the   hotel near the Louvre"}]}]
    answer = client.chat.completions.create(model="window", messages=messages)
    size = request_tokens(server.requests[0])
    text = answer.choices[0].message.content
    assert text == f"SUMMARY(4 messages, {size} tokens): Plan a trip; Book the hotel"
    assert answer.usage.completion_tokens == text_tokens(text) and answer.usage.prompt_tokens == size


def test_a_summary_digest_stays_short(server: WindowServer, client: Any) -> None:
    messages = [{"role": "user", "content": f"question number {i} about things"} for i in range(40)]
    text = client.chat.completions.create(model="window", messages=messages).choices[0].message.content
    assert text.startswith("SUMMARY(40 messages, ") and text.endswith("...")
    assert len(text.split(": ", 1)[1]) == 200


# ---------------------------------------------------------------------------------- nbagent
def run_agent(agent: Agent, prompt: str, stream: bool) -> tuple[Any, str]:
    """The run's result, and the text its stream's deltas carried (streamed) or its output (not)."""
    if not stream:
        result = agent.run_sync(prompt)
        return result, result.output

    async def events() -> list[Any]:
        try:
            return [e async for e in agent.stream(prompt)]
        finally:
            await agent.model.aclose()  # type: ignore[attr-defined]

    seen = asyncio.run(events())
    return seen[-1].result, "".join(e.delta for e in seen if e.kind == "text-delta")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_agent_calls_the_tool_then_answers(server: WindowServer, stream: bool) -> None:
    result, text = run_agent(window_agent(server, tools=[count]), "count to 4", stream)
    assert result.status == "completed" and result.output == text == "turn done: count to 4"
    assert [m.kind for m in result.messages] == ["user", "assistant", "tool-result", "assistant"]
    assert result.messages[2].content == "1 2 3 4"
    assert len(server.requests) == 2 and all(paired(body) for body in server.requests)
    assert all(body.get("stream", False) is stream for body in server.requests)
    assert [row["input_tokens"] for row in result.usage.rows()] == [request_tokens(b) for b in server.requests]


def test_an_agent_with_no_tools_gets_the_summary(server: WindowServer) -> None:
    result = window_agent(server, system="Summarize.").run_sync("the whole story so far")
    assert result.output == f"SUMMARY(2 messages, {server.sizes[0]} tokens): the whole story"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_agent_whose_prompt_overflows_fails_with_a_bad_request(server: WindowServer, stream: bool) -> None:
    result, _ = run_agent(window_agent(server, tools=[count]), LONG, stream)
    assert result.status == "failed" and isinstance(result.exception, BadRequestError)
    assert result.exception.status_code == 400
    assert result.exception.body == context_length_error(4000, server.sizes[0])["error"]  # the SDK's body
    assert "maximum context length is 4000 tokens" in result.error
    assert server.refused == 1 and len(server.requests) == 1  # a refused request is not retried


# ---------------------------------------------------------------------------------- its own process
def test_the_command_line_server_prints_its_port_and_answers() -> None:
    script = Path(__file__).parent / "wire" / "window_server.py"
    proc = subprocess.Popen([sys.executable, str(script), "--window", "50", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}/v1"
        body = json.dumps({"model": "w", "messages": [{"role": "user", "content": "hi"}]}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{url}/chat/completions", body)) as reply:
            assert json.load(reply)["choices"][0]["message"]["content"].startswith("SUMMARY(1 messages, 5 tokens)")
        big = json.dumps({"messages": [{"role": "user", "content": "x" * 400}]}).encode()
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(f"{url}/chat/completions", big))
        assert json.load(caught.value)["error"]["code"] == "context_length_exceeded"
        with urllib.request.urlopen(f"{url}/stats") as reply:
            stats = json.load(reply)
        assert (stats["window"], stats["requests"], stats["refused"], stats["max_prompt_tokens"]) == (50, 2, 1, 5)
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_held_request_is_recorded_and_answered_only_once_released(server: WindowServer) -> None:
    import threading

    server.hold(lambda body: not body.get("tools"))  # the summary requests of a compaction
    sdk = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    tool_answer = sdk.chat.completions.create(model="window", messages=[{"role": "user", "content": "count to 2"}],
                                              tools=[COUNT_TOOL])  # not held
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(sdk.chat.completions.create(
        model="window", messages=[{"role": "user", "content": "sum it up"}])))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not answers  # held
    assert server.held == 1 and len(server.requests) == 2 and not server.requests[1].get("tools")
    server.release()
    thread.join(10)
    sdk.close()
    assert tool_answer.choices[0].finish_reason == "tool_calls"
    assert answers[0].choices[0].message.content.startswith("SUMMARY(1 messages, ")
