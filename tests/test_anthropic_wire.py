"""`AnthropicModel` against the 39 recorded real Messages API interactions (tests/wire/anthropic_messages).

The real ``anthropic`` SDK talks real HTTP to the replay server on loopback; nothing is mocked.
For every case the expected answer is computed from the recorded response by an independent
reading of the JSON / SSE (`expected`), and a few facts per case are also written out literally
(`FACTS`) so a bug shared by the oracle and the provider cannot hide. Every case is also driven
through a whole `Agent`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    ModelError,
    NotFoundError,
    RateLimitError,
    ServerError,
)
from nbagent.messages import UserMessage
from nbagent.models.anthropic import REDACTED_THINKING, AnthropicModel
from nbagent.models.base import ModelRequest, ModelResponse, ReasoningText
from nbagent.retry import Retry
from nbagent.tools import Tool
from tests.wire.replay_server import ANTHROPIC_CASES_DIR, ReplayServer, all_cases, split_sse_events

CASES = all_cases(ANTHROPIC_CASES_DIR)
NAMES = sorted(CASES)
KEY = "sk-ant-wire-test-0123456789abcdef"
STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
        "model_context_window_exceeded": "context_window", "refusal": "content_filter"}
PAUSED = "anthropic_pause_turn_web_search"
"""The one recorded paused turn: replayed again for every request, so the model is told to continue
it 0 times here (tests/test_anthropic_loop.py continues it with a recorded answer)."""
ERRORS = {400: BadRequestError, 401: AuthenticationError, 404: NotFoundError, 429: RateLimitError,
          500: ServerError, 529: ServerError}
FAST = Retry(attempts=2, initial_delay=0, max_delay=0, jitter=0)


def test_all_39_cases_are_present_with_their_provenance() -> None:
    assert len(NAMES) == 39
    for case in CASES.values():
        assert case["source"] and case["license"] and case["source_commit"]


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


# ----------------------------------------------------------------------------- the oracle
@dataclass
class Expect:
    text: str | None = None
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    reasoning: str | None = None
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)
    """(input incl. cached, cache read, cache write, output)"""
    model: str | None = None


def is_stream(case: dict[str, Any]) -> bool:
    return bool(case["request"]["body"].get("stream"))


def recorded_message(case: dict[str, Any]) -> dict[str, Any]:
    """The answer as one Messages API ``message`` object, rebuilt from the SSE for streamed cases."""
    resp = case["response"]
    if "sse" not in resp:
        return json.loads(resp["body_raw"]) if "body_raw" in resp else resp["body"]  # type: ignore[no-any-return]
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    for event in split_sse_events(resp["sse"]):
        data = "".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
        if not data:
            continue
        ev = json.loads(data)
        if ev["type"] == "message_start":
            message = dict(ev["message"])
        elif ev["type"] == "content_block_start":
            blocks[ev["index"]] = {**ev["content_block"], "_json": ""}
        elif ev["type"] == "content_block_delta":
            block, delta = blocks[ev["index"]], ev["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                block["_json"] += delta["partial_json"]
        elif ev["type"] == "message_delta":
            message["stop_reason"] = ev["delta"]["stop_reason"]
            message["usage"] = {**message["usage"], **{k: v for k, v in ev["usage"].items() if v is not None}}
    for block in blocks.values():
        if block["type"] == "tool_use" and block["_json"]:
            block["input"] = json.loads(block["_json"])
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def expected(case: dict[str, Any]) -> Expect:
    """What the recording says the answer is, read without nbagent or the SDK."""
    msg = recorded_message(case)
    content = msg["content"]
    texts = [b["text"] for b in content if b["type"] == "text"]
    calls = [(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
    thinking = "".join(b["thinking"] if b["type"] == "thinking" else REDACTED_THINKING
                       for b in content if b["type"] in ("thinking", "redacted_thinking"))
    u = msg["usage"]
    read, write = u.get("cache_read_input_tokens") or 0, u.get("cache_creation_input_tokens") or 0
    text = "".join(texts)
    return Expect(
        None if not texts or (calls and not text) else text,
        calls,
        STOP.get(msg["stop_reason"], msg["stop_reason"]),
        thinking or None,
        (u["input_tokens"] + read + write, read, write, u["output_tokens"]),
        msg["model"],
    )


FACTS: dict[str, dict[str, Any]] = {
    "anthropic_cache_read": {"usage": (1167, 1163, 0, 202), "finish": "stop"},
    "anthropic_cache_write": {"usage": (1167, 0, 1163, 187), "finish": "stop"},
    "anthropic_max_tokens": {"finish": "length"},
    "anthropic_stop_sequence": {"finish": "stop"},
    "anthropic_parallel_tool_use": {"calls": ["get_weather", "get_time"], "finish": "tool_calls"},
    "anthropic_parallel_tool_use_x4": {"calls": ["retrieve_entity_info"] * 4, "finish": "tool_calls"},
    "anthropic_stream_parallel_tool_use": {"calls": ["get_weather", "get_time"], "finish": "tool_calls"},
    "anthropic_stream_thinking_tool_use": {"calls": ["fixed_version"], "finish": "tool_calls", "reasoning": 53},
    "anthropic_stream_cache_read": {"usage": (1042, 1031, 0, 100), "finish": "length"},
    "anthropic_stream_text": {"text": "- Captain\n- Scoop", "usage": (17, 0, 0, 10)},
    "anthropic_pause_turn_web_search": {"finish": "pause_turn"},
    "anthropic_error_400_invalid_request": {"error": 400},
    "anthropic_error_400_prompt_too_long": {"error": 400, "class": ContextOverflowError},
    "anthropic_error_401": {"error": 401},
    "anthropic_error_404_model": {"error": 404},
    "anthropic_error_429": {"error": 429, "retry_after": 7.0},
    "anthropic_error_500": {"error": 500},
    "anthropic_error_529_overloaded": {"error": 529},
    "anthropic_stream_error_429": {"error": 429},
}


def error_status(case: dict[str, Any]) -> int | None:
    status = int(case["response"]["status"])
    return status if status >= 400 else None


def recorded_error_message(case: dict[str, Any]) -> str:
    body = recorded_message(case)
    return body["error"]["message"]  # type: ignore[no-any-return]


def model_for(base_url: str, **kwargs: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", base_url=base_url, api_key=KEY, **kwargs)


def test_facts_agree_with_the_oracle() -> None:
    for name, facts in FACTS.items():
        case = CASES[name]
        if "error" in facts:
            assert error_status(case) == facts["error"], name
            continue
        exp = expected(case)
        if "usage" in facts:
            assert exp.usage == facts["usage"], name
        if "finish" in facts:
            assert exp.finish_reason == facts["finish"], name
        if "calls" in facts:
            assert [c[1] for c in exp.calls] == facts["calls"], name
        if "text" in facts:
            assert exp.text == facts["text"], name


# ----------------------------------------------------------------------------- one model call per case
async def _call(model: AnthropicModel, stream: bool) -> tuple[ModelResponse, list[Any]]:
    request = ModelRequest([UserMessage("hi")])
    if not stream:
        return await model.request(request), []
    items = [item async for item in model.request_stream(request)]
    assert isinstance(items[-1], ModelResponse)
    return items[-1], items[:-1]


@pytest.mark.parametrize("name", NAMES)
async def test_case_through_anthropic_model(server: Any, name: str) -> None:
    case = CASES[name]
    stream = is_stream(case)
    model = model_for(server.anthropic_base_url_for(name), max_continuations=0 if name == PAUSED else 5)
    try:
        status = error_status(case)
        if status is not None:
            with pytest.raises(ModelError) as info:
                await _call(model, stream)
            err = info.value
            assert type(err) is FACTS[name].get("class", ERRORS[status])
            assert err.status_code == status and err.provider == "anthropic"
            assert recorded_error_message(case) in str(err)
            assert err.retryable is (status in (429, 500, 529))
            if "retry_after" in FACTS[name]:
                assert err.retry_after == FACTS[name]["retry_after"]
            assert KEY not in repr(err.body) + str(err) and err.__cause__ is None and err.__context__ is None
            return
        response, deltas = await _call(model, stream)
    finally:
        await model.aclose()
    exp = expected(case)
    msg = response.message
    assert msg.text == exp.text
    assert [(c.id, c.name, c.args) for c in msg.tool_calls] == exp.calls
    assert msg.finish_reason == exp.finish_reason
    assert msg.reasoning == exp.reasoning
    u = response.usage
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == exp.usage
    assert u.reported
    assert response.model == msg.model == exp.model
    assert response.request_id
    if name == PAUSED:  # not continued (max_continuations=0): the answer is marked unusable
        assert isinstance(response.error, ModelError) and "pause_turn" in str(response.error)
    else:
        assert response.error is None
    if "reasoning" in FACTS.get(name, {}):
        assert u.reasoning_tokens == FACTS[name]["reasoning"]
    if stream:
        text = "".join(d for d in deltas if not isinstance(d, ReasoningText))
        assert text == (exp.text or "")
        assert "".join(d for d in deltas if isinstance(d, ReasoningText)) == (exp.reasoning or "")
    # thinking blocks are kept with their signatures, to be sent back unchanged
    recorded_thinking = [b for b in recorded_message(case)["content"] if b["type"] in ("thinking", "redacted_thinking")]
    assert [b["type"] for b in msg.thinking_blocks] == [b["type"] for b in recorded_thinking]
    for mine, theirs in zip(msg.thinking_blocks, recorded_thinking, strict=True):
        if theirs["type"] == "thinking":
            assert mine["thinking"] == theirs["thinking"]
            assert mine["signature"] == theirs["signature"]
        else:
            assert mine["data"] == theirs["data"]


# ----------------------------------------------------------------------------- every case through an Agent
def recorded_tools(case: dict[str, Any], executed: list[tuple[str, dict[str, Any]]]) -> list[Tool]:
    """A tool for every client tool of the recorded request (server tools such as web search run
    on Anthropic's side), recording its calls."""
    tools = []
    for t in case["request"]["body"].get("tools") or ():
        if "input_schema" not in t:
            continue

        def run(_name: str = t["name"], **kwargs: Any) -> str:
            executed.append((_name, kwargs))
            return f"result of {_name}"

        schema = {k: v for k, v in t["input_schema"].items() if k != "additionalProperties"}
        tools.append(Tool(t["name"], t.get("description", ""), schema, function=run))
    return tools


FOLLOW_UP = {True: "anthropic_stream_tool_result_answer", False: "anthropic_tool_result_is_error"}
CONTINUED = "anthropic_web_search"


@pytest.mark.parametrize("name", NAMES)
async def test_case_through_an_agent(server: Any, name: str) -> None:
    case = CASES[name]
    stream = is_stream(case)
    status = error_status(case)
    exp = None if status is not None else expected(case)
    calls = exp.calls if exp is not None else []
    follow_up = FOLLOW_UP[stream]
    if name == PAUSED:  # the paused turn is continued: the recorded web-search answer ends it
        base = server.anthropic_fault_base_url("then", name, arg=CONTINUED)
    elif calls:
        base = server.anthropic_fault_base_url("then", name, arg=follow_up)
    else:
        base = server.anthropic_base_url_for(name)
    executed: list[tuple[str, dict[str, Any]]] = []
    model = model_for(base)
    agent = Agent(model, tools=recorded_tools(case, executed), retry=FAST)
    before = len(server.messages_requests())
    events: list[Any] = []
    try:
        if stream:
            events = [e async for e in agent.stream("go")]
            result = events[-1].result
        else:
            result = await agent.run("go")
    finally:
        await model.aclose()
    sent = server.messages_requests()[before:]
    if status is not None:
        assert result.status == "failed"
        assert type(result.exception) is FACTS[name].get("class", ERRORS[status])
        assert recorded_error_message(case) in (result.error or "")
        assert len(sent) == (2 if status in (429, 500, 529) else 1)  # retried once, or not at all
        assert KEY not in (result.error or "")
        return
    assert exp is not None
    assert result.status == "completed", result.error
    rows = result.usage.calls
    if name == PAUSED:
        end = expected(CASES[CONTINUED])
        assert result.output == (exp.text or "") + (end.text or "")
        assert len(sent) == 2 and len(rows) == 1  # two requests, one model call
        assert (rows[0].input_tokens, rows[0].output_tokens) == (
            exp.usage[0] + end.usage[0], exp.usage[3] + end.usage[3])
        assert sent[1]["body"]["messages"][-1] == {
            "role": "assistant", "content": recorded_message(case)["content"]}  # sent back as it came
        return
    first = rows[0]
    assert (first.input_tokens, first.cache_read_tokens, first.cache_write_tokens, first.output_tokens) == exp.usage
    assert first.provider == "anthropic" and first.finish_reason == exp.finish_reason
    assert first.tool_calls == len(calls)
    if not calls:
        assert result.output == (exp.text or "")
        assert result.truncated is (exp.finish_reason == "length")
        assert len(sent) == 1
    else:
        final = expected(CASES[follow_up])
        assert result.output == final.text
        assert sorted(executed, key=json.dumps) == sorted(((n, a) for _, n, a in calls), key=json.dumps)
        assert len(rows) == 2 and len(sent) == 2
        second = sent[1]["body"]["messages"]
        # the answer went back as text + tool_use blocks, and ALL its results in ONE user turn
        assistant = second[-2]
        assert assistant["role"] == "assistant"
        uses = [b for b in assistant["content"] if b["type"] == "tool_use"]
        assert [(b["id"], b["name"], b["input"]) for b in uses] == calls
        results = second[-1]
        assert results["role"] == "user"
        assert [b["tool_use_id"] for b in results["content"]] == [c[0] for c in calls]
        assert all(b["type"] == "tool_result" and "is_error" not in b for b in results["content"])
        # thinking blocks went back first, unchanged, with their signatures
        thinking = [b for b in assistant["content"] if b["type"] in ("thinking", "redacted_thinking")]
        assert thinking == [{k: v for k, v in b.items() if k != "cache_control"} for b in thinking]
        answer = next(m for m in result.messages if m.kind == "assistant")
        assert thinking == answer.thinking_blocks
        assert len(thinking) == len(answer.thinking_blocks)
    if stream:
        reasoning = "".join(e.delta for e in events if e.kind == "reasoning-delta")
        assert reasoning == (exp.reasoning or "")
        assert events[-1].kind == "run-completed"
