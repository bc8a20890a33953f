"""`OpenAIModel` against the 39 recorded real chat-completions interactions (tests/wire/cases).

The real ``openai`` SDK talks real HTTP to the replay server on loopback; nothing is mocked.
For every case the expected result is computed from the recorded response by an independent
reading of the JSON / SSE (`expected`), and a few facts per case are also written out literally
(`FACTS`) so a bug shared by the oracle and the provider cannot hide. The request the recorded
client sent is rebuilt as nbagent messages and the request nbagent sent is compared with it.
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
    ContentFilterError,
    ModelHTTPError,
    NotFoundError,
    RateLimitError,
)
from nbagent.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from nbagent.models.base import ModelRequest, ModelResponse, ReasoningText
from nbagent.models.openai import OpenAIModel
from nbagent.models.openai._wire import _allowed_settings
from nbagent.tools import Tool
from tests.wire.replay_server import ReplayServer, all_cases, split_sse_events

CASES = all_cases()
NAMES = sorted(CASES)
KEY = "sk-wire-test-0123456789abcdef"
SDK_SETTINGS = _allowed_settings()
ERROR_CLASSES = {400: BadRequestError, 401: AuthenticationError, 404: NotFoundError, 429: RateLimitError}


def test_all_39_cases_are_present() -> None:
    assert len(NAMES) == 39


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


# ----------------------------------------------------------------------------- the oracle
@dataclass
class Expect:
    text: str | None = None
    deltas: list[str] = field(default_factory=list)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    refusal: str | None = None
    reasoning: str | None = None
    usage: tuple[int, int, int, int, bool] = (0, 0, 0, 0, False)
    model: str | None = None


def is_stream(case: dict[str, Any]) -> bool:
    return bool(case["request"]["body"].get("stream"))


def recorded_body(case: dict[str, Any]) -> Any:
    resp = case["response"]
    return json.loads(resp["body_raw"]) if "body_raw" in resp else resp["body"]


def recorded_chunks(case: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    for event in split_sse_events(case["response"]["sse"]):
        for line in event.splitlines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                chunks.append(json.loads(line[5:].strip()))
    return chunks


def usage_tuple(usage: dict[str, Any] | None) -> tuple[int, int, int, int, bool]:
    if not usage:
        return (0, 0, 0, 0, False)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return (usage["prompt_tokens"], cached, usage["completion_tokens"], reasoning, True)


def expected(case: dict[str, Any]) -> Expect:
    """What the recording says the answer is, read without nbagent or the SDK."""
    if not is_stream(case):
        body = recorded_body(case)
        choice = next(c for c in body["choices"] if c.get("index", 0) == 0)
        usage = body.get("usage") or (body.get("x_groq") or {}).get("usage")
        msg = choice.get("message")
        if msg is None:
            return Expect(
                "",
                [],
                [],
                choice.get("finish_reason") or "content_filter",
                usage=usage_tuple(usage),
                model=body.get("model"),
            )
        calls = [
            (tc["id"], tc["function"]["name"], json.loads(tc["function"]["arguments"] or "{}"))
            for tc in msg.get("tool_calls") or []
        ]
        content = msg.get("content")
        return Expect(
            None if calls and not content else content,
            [],
            calls,
            choice["finish_reason"],
            msg.get("refusal"),
            msg.get("reasoning_content") or None,
            usage_tuple(usage),
            body.get("model"),
        )
    pieces: list[str | None] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    by_index: dict[int, list[Any]] = {}
    raw_calls: list[list[Any]] = []
    finish = usage = groq = model = None
    for chunk in recorded_chunks(case):
        model = model or chunk.get("model")
        usage = chunk.get("usage") or usage
        groq = (chunk.get("x_groq") or {}).get("usage") or groq
        for ch in chunk.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            d = ch.get("delta") or {}
            if "content" in d:
                pieces.append(d["content"])
            if d.get("reasoning_content"):
                reasoning.append(d["reasoning_content"])
            if d.get("refusal"):
                refusal.append(d["refusal"])
            for tc in d.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if "index" in tc and tc["index"] in by_index:
                    slot = by_index[tc["index"]]
                elif "index" not in tc and not fn.get("name"):
                    slot = raw_calls[-1]
                else:
                    slot = [tc.get("id", ""), fn.get("name", ""), ""]
                    raw_calls.append(slot)
                    if "index" in tc:
                        by_index[tc["index"]] = slot
                slot[2] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    calls = [(i, n, json.loads(a or "{}")) for i, n, a in raw_calls]
    seen = [p for p in pieces if p is not None]
    text = "".join(seen) if seen else None
    return Expect(
        None if calls and not text else text,
        [p for p in seen if p],
        calls,
        finish,
        "".join(refusal) or None,
        "".join(reasoning) or None,
        usage_tuple(usage or groq),
        model,
    )


# Literal facts read off the recordings by a person (input, cached, output, reasoning tokens;
# tool calls; finish reason; a piece of the text), as a second, independent check.
FACTS: dict[str, dict[str, Any]] = {
    "azure_content_filter": {"text": "", "finish": "content_filter", "tokens": (15, 0, 19, 0)},
    "deepseek_parallel_tool_calls_reasoning": {
        "calls": [("get_player_name", {}), ("roll_dice", {})],
        "finish": "tool_calls",
        "tokens": (875, 0, 79, 26),
        "text_starts": "Let me get your name",
        "reasoning_starts": "Great, now I have",
    },
    "deepseek_stream_reasoning_content": {
        "tokens": (6, 0, 212, 198),
        "finish": "stop",
        "text_starts": "Hello there!",
        "reasoning_starts": "Hmm, the user",
    },
    "gemini_stream_tool_call": {
        "calls": [("return_bool", {"value": True})],
        "finish": "stop",
        "text": None,
        "tokens": (8, 0, 4, 0),
    },
    "gemini_tool_call_without_id": {
        "calls": [("get_current_time", {})],
        "finish": "tool_calls",
        "tokens": (35, 0, 12, 0),
    },
    "groq_error_400_tool_use_failed": {"error": 400, "says": "Tool call validation failed"},
    "groq_stream_text": {
        "tokens": (18, 0, 73, 0),
        "finish": "stop",
        "text_starts": "A joke about OpenTelemetry",
    },
    "ollama_plain_text": {"text": "4200 + 42 = 4242\n", "finish": "stop", "tokens": (21, 0, 16, 0)},
    "ollama_stream_tool_call": {
        "calls": [("return_bool", {"value": True})],
        "finish": "stop",
        "tokens": None,
    },
    "openai_cached_tokens": {"tokens": (1149, 1024, 353, 0), "finish": "stop"},
    "openai_error_400_unsupported_value": {"error": 400, "says": "does not support 'system'"},
    "openai_error_401": {"error": 401, "says": "Incorrect API key provided"},
    "openai_error_404_model": {"error": 404, "says": "does not exist"},
    "openai_length": {
        "finish": "length",
        "tokens": (14, 0, 50, 0),
        "text_starts": "Certainly! Here is a list",
    },
    "openai_parallel_tool_calls_same_tool": {
        "calls": [
            ("get_current_weather", {"location": "Seattle, WA"}),
            ("get_current_weather", {"location": "San Francisco, CA"}),
        ],
        "finish": "tool_calls",
        "tokens": (75, 0, 51, 0),
        "text": None,
    },
    "openai_parallel_tool_calls_two_tools": {
        "calls": [("delete_file", {"path": ".env"}), ("create_file", {"path": "test.txt"})],
        "finish": "tool_calls",
        "tokens": (71, 0, 46, 0),
    },
    "openai_parallel_tool_results_answer": {
        "finish": "stop",
        "tokens": (99, 0, 25, 0),
        "text_starts": "Today, the weather in Seattle",
    },
    "openai_plain_n2_choices": {"finish": "stop", "tokens": (12, 0, 24, 0), "text_starts": "This is a test."},
    "openai_plain_text": {"text": "This is a test.", "finish": "stop", "tokens": (12, 0, 5, 0)},
    "openai_reasoning_length_empty": {"text": "", "finish": "length", "tokens": (13, 0, 50, 50)},
    "openai_reasoning_tool_call": {
        "calls": [("get_weather", {"city": "Paris"})],
        "finish": "tool_calls",
        "tokens": (130, 0, 87, 64),
    },
    "openai_refusal": {
        "text": None,
        "refusal_starts": "I'm very sorry",
        "finish": "stop",
        "tokens": (64, 0, 13, 0),
    },
    "openai_single_tool_call": {
        "calls": [("get_temperature", {"city": "Tokyo"})],
        "finish": "tool_calls",
        "tokens": (50, 0, 15, 0),
    },
    "openai_single_tool_result_answer": {
        "finish": "stop",
        "tokens": (75, 0, 15, 0),
        "text_starts": "The temperature in Tokyo",
    },
    "openai_stream_cached_tokens": {"finish": "length", "tokens": (1420, 1280, 100, 0)},
    "openai_stream_error_401": {"error": 401, "says": "Incorrect API key provided"},
    "openai_stream_length": {
        "finish": "length",
        "tokens": (14, 0, 50, 0),
        "text_starts": "Here is a list of all 50",
    },
    "openai_stream_n2_usage": {
        "finish": "stop",
        "tokens": (26, 0, 104, 0),
        "text_starts": "I'm unable to provide",
    },
    "openai_stream_parallel_tool_calls": {
        "calls": [
            ("get_current_weather", {"location": "Seattle, WA"}),
            ("get_current_weather", {"location": "San Francisco, CA"}),
        ],
        "finish": "tool_calls",
        "tokens": (75, 0, 51, 0),
    },
    "openai_stream_parallel_tool_calls_no_usage": {
        "calls": [
            ("get_current_weather", {"location": "San Francisco"}),
            ("get_current_weather", {"location": "Boston"}),
        ],
        "finish": "tool_calls",
        "tokens": None,
    },
    "openai_stream_reasoning_length": {"text": "", "finish": "length", "tokens": (13, 0, 50, 50)},
    "openai_stream_refusal": {
        "text": None,
        "refusal_starts": "I'm very sorry",
        "finish": "stop",
        "tokens": (64, 0, 13, 0),
    },
    "openai_stream_single_tool_call": {
        "calls": [("get_capital", {"country": "UK"})],
        "finish": "tool_calls",
        "tokens": (53, 0, 15, 0),
    },
    "openai_stream_text_legacy_2023": {
        "finish": "stop",
        "tokens": None,
        "text_starts": "The Los Angeles Dodgers",
    },
    "openai_stream_text_usage": {"text": '"This is a test."', "finish": "stop", "tokens": (12, 0, 5, 0)},
    "openai_stream_tool_result_answer": {
        "text": "The capital of the UK is London.",
        "finish": "stop",
        "tokens": (78, 0, 9, 0),
    },
    "openrouter_error_429": {"error": 429, "says": "Provider returned error"},
    "together_finish_reason_eos": {"finish": "eos", "tokens": (18, 0, 35, 0), "text_starts": " Why don't we"},
    "vllm_stream_length": {"finish": "length", "tokens": None},
}


def test_facts_cover_every_case() -> None:
    assert sorted(FACTS) == NAMES


# ----------------------------------------------------------------------------- the request
def recorded_request(case: dict[str, Any]) -> ModelRequest:
    """The recorded client's request rebuilt as an nbagent `ModelRequest`."""
    body = case["request"]["body"]
    names: dict[str, str] = {}
    messages: list[Message] = []
    for m in body["messages"]:
        role = m["role"]
        if role == "system":
            messages.append(SystemMessage(m["content"]))
        elif role == "user":
            messages.append(UserMessage(m["content"]))
        elif role == "assistant":
            calls = [
                ToolCall(tc["id"], tc["function"]["name"], tc["function"]["arguments"])
                for tc in m.get("tool_calls") or []
            ]
            names.update((c.id, c.name) for c in calls)
            messages.append(
                AssistantMessage(m.get("content"), calls, reasoning=m.get("reasoning_content") or None)
            )
        elif role == "tool":
            messages.append(ToolResultMessage(m["tool_call_id"], names[m["tool_call_id"]], m["content"]))
        else:  # pragma: no cover - no such case recorded
            raise AssertionError(role)
    tools = [dict(t["function"]) for t in body.get("tools") or []]
    settings = {
        k: v for k, v in body.items() if k not in ("messages", "model", "tools", "stream", "stream_options")
    }
    # Server-specific parameters (Together's top_k, min_p...) go through extra_body, as a user would.
    extra = {k: settings.pop(k) for k in list(settings) if k not in SDK_SETTINGS}
    if extra:
        settings["extra_body"] = extra
    return ModelRequest(messages, tools, settings, 1)


def norm_message(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
    if m["role"] == "assistant":
        out["content"] = m.get("content") or None  # "" and null both mean "no text"
        if m.get("tool_calls"):
            out["tool_calls"] = [
                {
                    "id": tc["id"],
                    "type": "function",
                    "function": {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]},
                }
                for tc in m["tool_calls"]
            ]
        if m.get("reasoning_content"):
            out["reasoning_content"] = m["reasoning_content"]
    if m["role"] == "tool":
        out["tool_call_id"] = m["tool_call_id"]
    return out


def norm_tool(t: dict[str, Any]) -> dict[str, Any]:
    fn = {k: v for k, v in t["function"].items() if not (k == "description" and not v)}
    return {"type": "function", "function": fn}


def assert_sent_like_recording(case: dict[str, Any], sent: dict[str, Any]) -> None:
    body = case["request"]["body"]
    assert sent["model"] == body["model"]
    assert [norm_message(m) for m in sent["messages"]] == [norm_message(m) for m in body["messages"]]
    assert [norm_tool(t) for t in sent.get("tools") or []] == [norm_tool(t) for t in body.get("tools") or []]
    for key, value in body.items():
        if key not in ("messages", "model", "tools", "stream", "stream_options"):
            assert sent.get(key) == value, key  # None: not sent, the server default
    if is_stream(case):
        assert sent["stream"] is True
        assert sent["stream_options"] == {"include_usage": True}
    else:
        assert not sent.get("stream")
        assert "stream_options" not in sent


# ----------------------------------------------------------------------------- every case
# every case, and every streamed one a second time through the SDK's parsed chunks (`sdk_stream=True`)
READERS = [pytest.param(n, False, id=n) for n in NAMES] + [
    pytest.param(n, True, id=f"{n}-sdk_stream") for n in NAMES if is_stream(CASES[n])]


@pytest.mark.parametrize(("name", "sdk_stream"), READERS)
async def test_case_through_openai_model(server: Any, name: str, sdk_stream: bool) -> None:
    case = CASES[name]
    facts = FACTS[name]
    model = OpenAIModel(case["request"]["body"]["model"], base_url=server.base_url_for(name), api_key=KEY,
                        sdk_stream=sdk_stream)
    request = recorded_request(case)
    stream = is_stream(case)
    before = len(server.chat_requests())
    items: list[Any] = []
    try:
        if "error" in facts:
            status = facts["error"]
            with pytest.raises(ModelHTTPError) as info:
                if stream:
                    async for item in model.request_stream(request):
                        items.append(item)
                else:
                    await model.request(request)
            err = info.value
            assert type(err) is ERROR_CLASSES[status]
            assert err.status_code == status
            assert str(err).startswith(f"{status} ")
            assert facts["says"] in str(err)
            recorded_message = recorded_body(case)["error"]["message"]
            assert recorded_message in err.message
            assert err.body == recorded_body(case)["error"]
            assert err.provider == "openai"
            assert err.retryable is (status == 429)
            assert items == []
            assert err.__cause__ is None and err.__context__ is None
        else:
            if stream:
                items = [item async for item in model.request_stream(request)]
                response = items[-1]
            else:
                response = await model.request(request)
            check_response(case, facts, response, items if stream else None)
        sent = server.chat_requests()[before:]
        assert len(sent) == 1
        assert_sent_like_recording(case, sent[0]["body"])
    finally:
        await model.aclose()


def check_response(
    case: dict[str, Any], facts: dict[str, Any], response: Any, items: list[Any] | None
) -> None:
    exp = expected(case)
    assert isinstance(response, ModelResponse)
    msg = response.message
    # text, refusal, reasoning
    assert msg.text == exp.text
    assert msg.refusal == exp.refusal
    assert msg.reasoning == exp.reasoning
    if "text" in facts:
        assert msg.text == facts["text"]
    if "text_starts" in facts:
        assert msg.text is not None and msg.text.startswith(facts["text_starts"])
    if "refusal_starts" in facts:
        assert msg.refusal is not None and msg.refusal.startswith(facts["refusal_starts"])
    if "reasoning_starts" in facts:
        assert msg.reasoning is not None and msg.reasoning.startswith(facts["reasoning_starts"])
    # tool calls: names and parsed arguments in order; recorded ids kept, empty ones made unique
    assert [(c.name, c.args) for c in msg.tool_calls] == [(n, a) for _, n, a in exp.calls]
    assert [(c.name, c.args) for c in msg.tool_calls] == facts.get("calls", [])
    for call, (rec_id, _, _) in zip(msg.tool_calls, exp.calls, strict=True):
        if rec_id:
            assert call.id == rec_id
        else:
            assert call.id.startswith("call_") and len(call.id) > 10
    assert len({c.id for c in msg.tool_calls}) == len(msg.tool_calls)
    # finish reason passed through, whatever the server's vocabulary
    assert msg.finish_reason == exp.finish_reason == facts["finish"]
    # usage, exactly
    u = response.usage
    got = (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens, u.reported)
    assert got == exp.usage
    if facts["tokens"] is None:
        assert got == (0, 0, 0, 0, False)
    else:
        assert got == (*facts["tokens"], True)
    assert response.model == exp.model and msg.model == exp.model
    first = recorded_chunks(case)[0] if items is not None else recorded_body(case)
    headers = case["response"].get("headers") or {}
    assert response.request_id == (headers.get("x-request-id") or first.get("id") or None)
    if items is not None:
        # streamed: every text piece is yielded as it arrives, in order, nothing buffered
        texts = [i for i in items if type(i) is str]
        reasoning = [i for i in items if isinstance(i, ReasoningText)]
        assert texts == exp.deltas
        assert "".join(texts) == (msg.text or "")
        assert "".join(reasoning) == (msg.reasoning or "")
        assert all(isinstance(i, (str, ModelResponse)) for i in items)
        assert sum(isinstance(i, ModelResponse) for i in items) == 1


# ----------------------------------------------------------------------------- whole agents
def _recorder(calls: list[tuple[str, dict[str, Any]]]) -> list[Tool]:
    def get_temperature(city: str) -> float:
        calls.append(("get_temperature", {"city": city}))
        return 20.0

    def get_current_weather(location: str) -> str:
        calls.append(("get_current_weather", {"location": location}))
        return "50 degrees and raining" if location.startswith("Seattle") else "70 degrees and sunny"

    def delete_file(path: str) -> str:
        calls.append(("delete_file", {"path": path}))
        return "deleted"

    def create_file(path: str) -> str:
        calls.append(("create_file", {"path": path}))
        return "created"

    def get_player_name() -> str:
        calls.append(("get_player_name", {}))
        return "Anne"

    def roll_dice() -> int:
        calls.append(("roll_dice", {}))
        return 4

    def get_current_time() -> str:
        calls.append(("get_current_time", {}))
        return "12:00"

    def return_bool(value: bool) -> bool:
        calls.append(("return_bool", {"value": value}))
        return value

    def get_weather(city: str) -> str:
        calls.append(("get_weather", {"city": city}))
        return "sunny"

    def get_capital(country: str) -> str:
        calls.append(("get_capital", {"country": country}))
        return "London"

    return [
        Tool.from_function(f)
        for f in (
            get_temperature,
            get_current_weather,
            delete_file,
            create_file,
            get_player_name,
            roll_dice,
            get_current_time,
            return_bool,
            get_weather,
            get_capital,
        )
    ]


TOOL_CASES = [n for n in NAMES if "error" not in FACTS[n] and FACTS[n].get("calls")]
PARALLEL_CASES = [n for n in TOOL_CASES if len(FACTS[n]["calls"]) > 1]


def test_tool_cases_include_the_parallel_ones() -> None:
    assert len(TOOL_CASES) == 11
    assert set(PARALLEL_CASES) == {
        "deepseek_parallel_tool_calls_reasoning",
        "openai_parallel_tool_calls_same_tool",
        "openai_parallel_tool_calls_two_tools",
        "openai_stream_parallel_tool_calls",
        "openai_stream_parallel_tool_calls_no_usage",
    }


@pytest.mark.parametrize("name", TOOL_CASES)
async def test_agent_runs_the_recorded_tool_calls(server: Any, name: str) -> None:
    """A whole agent: the recorded tool-call answer, the tools run, their results sent back, and
    a recorded text answer (the second request of the conversation) ends the run."""
    case = CASES[name]
    stream = is_stream(case)
    follow_up = "openai_stream_tool_result_answer" if stream else "openai_single_tool_result_answer"
    base = server.fault_base_url("then", name, arg=follow_up)
    executed: list[tuple[str, dict[str, Any]]] = []
    model = OpenAIModel("gpt-4o-mini", base_url=base, api_key=KEY)
    agent = Agent(model, tools=_recorder(executed))
    before = len(server.chat_requests())
    try:
        if stream:
            events = [e async for e in agent.stream("go")]
            result = events[-1].result
        else:
            events = []
            result = await agent.run("go")
    finally:
        await model.aclose()

    exp_calls = FACTS[name]["calls"]
    final = expected(CASES[follow_up])
    assert result.status == "completed", result.error
    assert result.output == final.text
    # every call ran once with the recorded arguments (parallel ones concurrently, any order)
    assert sorted(executed, key=json.dumps) == sorted(exp_calls, key=json.dumps)
    answer = next(m for m in result.messages if m.kind == "assistant")
    results = [m for m in result.messages if m.kind == "tool-result"]
    assert [r.call_id for r in results] == [c.id for c in answer.tool_calls]
    assert len({c.id for c in answer.tool_calls}) == len(exp_calls)
    assert all(not r.is_error for r in results)
    # usage: one row per model call with the recorded numbers
    rows = result.usage.calls
    assert len(rows) == 2
    first = expected(case).usage
    assert (rows[0].input_tokens, rows[0].output_tokens, rows[0].usage_reported) == (
        first[0],
        first[2],
        first[4],
    )
    assert rows[0].tool_calls == len(exp_calls) and rows[0].provider == "openai"
    assert rows[0].finish_reason == FACTS[name]["finish"]
    assert (rows[1].input_tokens, rows[1].output_tokens) == (final.usage[0], final.usage[2])
    assert result.usage.tool_calls == len(exp_calls)
    # the second request carried the calls and their results, ids matching
    sent = server.chat_requests()[before:]
    assert len(sent) == 2
    second = sent[1]["body"]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert [tc["id"] for tc in assistant["tool_calls"]] == [c.id for c in answer.tool_calls]
    assert [json.loads(tc["function"]["arguments"]) for tc in assistant["tool_calls"]] == [
        a for _, a in exp_calls
    ]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [c.id for c in answer.tool_calls]
    assert [m["content"] for m in tool_msgs] == [r.content for r in results]
    if answer.reasoning:
        assert assistant["reasoning_content"] == answer.reasoning
    if stream:
        kinds = [e.kind for e in events]
        assert kinds.count("tool-call-started") == kinds.count("tool-call-finished") == len(exp_calls)
        deltas = [e for e in events if e.kind == "text-delta"]
        assert "".join(e.delta for e in deltas) == result.output
        assert deltas[-1].snapshot == result.output
        assert kinds[-1] == "run-completed"


async def test_agent_streams_reasoning_deltas(server: Any) -> None:
    model = OpenAIModel(
        "deepseek-reasoner",
        base_url=server.base_url_for("deepseek_stream_reasoning_content"),
        api_key=KEY,
        provider="deepseek",
    )
    try:
        events = [e async for e in Agent(model).stream("hi")]
    finally:
        await model.aclose()
    result = events[-1].result
    exp = expected(CASES["deepseek_stream_reasoning_content"])
    reasoning = "".join(e.delta for e in events if e.kind == "reasoning-delta")
    assert reasoning == exp.reasoning
    assert result.output == exp.text
    assert result.messages[-1].reasoning == exp.reasoning
    row = result.usage.calls[0]
    assert (row.provider, row.reasoning_tokens, row.output_tokens) == ("deepseek", 198, 212)


async def test_agent_keeps_a_length_answer_as_truncated(server: Any) -> None:
    model = OpenAIModel("gpt-4o", base_url=server.base_url_for("openai_stream_length"), api_key=KEY)
    try:
        events = [e async for e in Agent(model).stream("list the states")]
    finally:
        await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.truncated
    assert result.output == expected(CASES["openai_stream_length"]).text


async def test_agent_content_filter_answer(server: Any) -> None:
    model = OpenAIModel(
        "gpt-35-turbo", base_url=server.base_url_for("azure_content_filter"), api_key=KEY, provider="azure"
    )
    try:
        result = await Agent(model).run("something filtered")
    finally:
        await model.aclose()
    # The content filter stopped the answer: a failed run with a typed, not retried, error; the
    # stopped answer stays out of the thread, its (billed) usage row is kept.
    assert result.status == "failed" and result.output is None
    err = result.exception
    assert isinstance(err, ContentFilterError) and not err.retryable and err.text == ""
    assert "content_filter" in (result.error or "") and result.error.startswith("ContentFilterError: ")
    assert [m.kind for m in result.messages] == ["user"]
    row = result.usage.calls[0]
    assert (row.provider, row.finish_reason, row.input_tokens) == ("azure", "content_filter", 15)


# ----------------------------------------------------------------------------- shapes not recorded
def _tc(
    index: int | None = None, id: str | None = None, name: str | None = None, args: str | None = None
) -> Any:
    """A tool-call delta's JSON object, as the stream's chunk holds it."""
    data: dict[str, Any] = {
        "function": {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    }
    if index is not None:
        data["index"] = index
    if id is not None:
        data["id"] = id
    return data


@pytest.mark.parametrize(
    ("deltas", "calls"),
    [
        # no index at all, arguments in fragments after the first delta
        (
            [_tc(id="a", name="f", args='{"x"'), _tc(args=": 1}"), _tc(id="b", name="g", args="{}")],
            [("a", "f", {"x": 1}), ("b", "g", {})],
        ),
        # no index, fragments carrying only the id
        (
            [
                _tc(id="a", name="f"),
                _tc(id="b", name="g"),
                _tc(id="a", args='{"x": 1}'),
                _tc(id="b", args="{}"),
            ],
            [("a", "f", {"x": 1}), ("b", "g", {})],
        ),
        # one index reused for two calls with different ids
        ([_tc(0, "a", "f", "{}"), _tc(0, "b", "g", '{"y": 2}')], [("a", "f", {}), ("b", "g", {"y": 2})]),
        # the usual shape: index on every delta, id and name only first
        (
            [_tc(0, "a", "f", ""), _tc(1, "b", "g", ""), _tc(0, args='{"x": 1}'), _tc(1, args="{}")],
            [("a", "f", {"x": 1}), ("b", "g", {})],
        ),
    ],
)
def test_tool_call_deltas_are_assembled_by_index_and_by_id(deltas: list[Any], calls: list[Any]) -> None:
    from nbagent.models.openai._stream import StreamAssembler

    state = StreamAssembler()
    for d in deltas:
        state.add_tool_calls([d])
    message = state.response([]).message
    assert [(c.id, c.name, c.args) for c in message.tool_calls] == calls
    assert message.text is None
