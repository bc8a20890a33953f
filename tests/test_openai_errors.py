"""`OpenAIModel`'s errors, retries, requests, configuration and key hygiene, over real HTTP.

The replay server (tests/wire/replay_server.py) answers with recorded cases or injects faults:
429 with Retry-After, 500 then 200, a stream cut mid-way, a slow server. The run loop's `Retry`
does the retrying (the SDK's own is off), so a user sees every retry as a ``model-retry`` event.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
from typing import Any

import httpx2
import openai
import pytest

from nbagent import Agent
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ModelConnectionError,
    ModelTimeoutError,
    NotFoundError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
    UserError,
)
from nbagent.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models import infer_model
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel, parse_retry_after
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore
from nbagent.tools import tool
from tests.wire.replay_server import ReplayServer, load_case

KEY = "sk-proj-SECRET-0123456789abcdefghijklmnop"
FAST = Retry(attempts=3, initial_delay=0.01, jitter=0)


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


def model_at(url: str, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel(kwargs.pop("model_name", "gpt-4o-mini"), base_url=url, api_key=KEY, **kwargs)


async def stream_events(agent: Agent, prompt: str = "hi") -> list[Any]:
    try:
        return [e async for e in agent.stream(prompt)]
    finally:
        await agent.model.aclose()  # type: ignore[attr-defined]


def recorded_text(case: str) -> str:
    sse = load_case(case)["response"]["sse"]
    out = []
    for line in sse.splitlines():
        if line.startswith("data:") and "[DONE]" not in line:
            for ch in json.loads(line[5:])["choices"]:
                out.append(ch["delta"].get("content") or "")
    return "".join(out)


# ----------------------------------------------------------------------------- retried errors
async def test_429_is_retried_after_the_servers_retry_after(server: Any) -> None:
    url = server.fault_base_url("429-retry-after", "openai_plain_text", arg=1)
    agent = Agent(model_at(url), retry=Retry(attempts=3, initial_delay=5, jitter=0))
    t0 = time.perf_counter()
    events = await stream_events(agent)
    elapsed = time.perf_counter() - t0
    retries = [e for e in events if e.kind == "model-retry"]
    assert len(retries) == 1
    assert retries[0].delay_s == 1.0  # the header's 1 s, not the policy's 5 s
    assert retries[0].attempt == 1 and retries[0].error.startswith("429 ")
    assert 0.9 <= elapsed < 4.5
    result = events[-1].result
    assert result.status == "completed" and result.output == "This is a test."
    assert len(result.usage.calls) == 1  # the failed attempt made no usage row


async def test_retry_after_as_http_date(server: Any) -> None:
    url = server.fault_base_url("429-retry-after", "openai_plain_text", arg="date2")
    events = await stream_events(Agent(model_at(url), retry=Retry(attempts=2, initial_delay=30, jitter=0)))
    (retry,) = [e for e in events if e.kind == "model-retry"]
    assert 0.5 <= retry.delay_s <= 2.0  # the date is 2 s ahead (whole seconds on the wire)
    assert events[-1].result.status == "completed"


async def test_retry_after_zero_means_retry_at_once(server: Any) -> None:
    url = server.fault_base_url("429-then-200", "openai_plain_text", arg=2)
    events = await stream_events(Agent(model_at(url), retry=Retry(attempts=3, initial_delay=5, jitter=0)))
    assert [e.delay_s for e in events if e.kind == "model-retry"] == [0.0, 0.0]
    assert events[-1].result.output == "This is a test."


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412490.0) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


async def test_recorded_openrouter_429_exhausts_the_retries(server: Any) -> None:
    before = len(server.chat_requests())
    agent = Agent(
        model_at(server.base_url_for("openrouter_error_429"), provider="openrouter"),
        retry=Retry(attempts=2, initial_delay=0.01, jitter=0),
    )
    events = await stream_events(agent)
    result = events[-1].result
    assert result.status == "failed"
    assert isinstance(result.exception, RateLimitError)
    assert result.exception.status_code == 429 and result.exception.provider == "openrouter"
    assert "Provider returned error" in result.error and "rate-limited upstream" in result.error
    assert [e.kind for e in events].count("model-retry") == 1
    assert len(server.chat_requests()) - before == 2


@pytest.mark.parametrize(
    ("case", "stream"),
    [("openai_stream_text_usage", True), ("openai_plain_text", True), ("openai_plain_text", False)],
)
async def test_500_then_200_succeeds_on_the_retry(server: Any, case: str, stream: bool) -> None:
    before = len(server.chat_requests())
    # fault counters are per path: a distinct path per parameter set
    agent = Agent(
        model_at(server.fault_base_url("500-then-200", case, arg=None if stream else 1)), retry=FAST
    )
    if stream:
        events = await stream_events(agent)
        retries = [e for e in events if e.kind == "model-retry"]
        assert len(retries) == 1 and retries[0].error.startswith("500 ")
        assert "The server had an error" in retries[0].error
        result = events[-1].result
    else:
        try:
            result = await agent.run("hi")
        finally:
            await agent.model.aclose()  # type: ignore[attr-defined]
    assert result.status == "completed"
    assert result.output.strip('"') == "This is a test."
    assert len(server.chat_requests()) - before == 2


async def test_a_server_ignoring_stream_true_still_answers(server: Any) -> None:
    """Some proxies answer a streamed request with one JSON completion: it is used whole."""
    model = model_at(server.base_url_for("openai_parallel_tool_calls_same_tool"))
    try:
        items = [i async for i in model.request_stream(ModelRequest([UserMessage("hi")]))]
    finally:
        await model.aclose()
    (response,) = items
    assert [c.args for c in response.message.tool_calls] == [
        {"location": "Seattle, WA"},
        {"location": "San Francisco, CA"},
    ]
    assert response.usage.input_tokens == 75
    assert response.request_id == "req_a0c3b432eb349a35b6d8dde6e01451e4"


async def test_500_error_class_without_agent(server: Any) -> None:
    model = model_at(server.fault_base_url("500-then-200", "openai_plain_text", arg=5))
    try:
        with pytest.raises(ServerError) as info:
            await model.request(ModelRequest([UserMessage("hi")]))
    finally:
        await model.aclose()
    assert info.value.retryable and info.value.status_code == 500


async def test_stream_dropped_after_text_emits_retry_then_succeeds(server: Any) -> None:
    case = "openai_stream_cached_tokens"  # ~100 text deltas
    url = server.fault_base_url("drop-once", case, arg=20)
    events = await stream_events(Agent(model_at(url), retry=FAST))
    kinds = [e.kind for e in events]
    i_retry = kinds.index("model-retry")
    before_retry = [e for e in events[:i_retry] if e.kind == "text-delta"]
    after_retry = [e for e in events[i_retry:] if e.kind == "text-delta"]
    assert before_retry, "text arrived before the connection dropped"
    assert events[i_retry].error.startswith("the streamed answer broke off")
    # the view clears the partial text: the retried answer's snapshots start from scratch
    assert after_retry[0].snapshot == after_retry[0].delta
    result = events[-1].result
    assert result.status == "completed"
    assert result.output == recorded_text(case) == after_retry[-1].snapshot
    assert kinds.count("model-response") == 1 and kinds.count("usage") == 1
    assert result.usage.calls[0].cache_read_tokens == 1280


async def test_stream_that_always_breaks_fails_with_stream_interrupted(server: Any) -> None:
    model = model_at(server.fault_base_url("drop-mid-stream", "openai_stream_text_usage", arg=3))
    items: list[Any] = []
    try:
        with pytest.raises(StreamInterruptedError) as info:
            async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
                items.append(item)
    finally:
        await model.aclose()
    assert items and all(type(i) is str for i in items)  # text came, then the break
    assert info.value.retryable
    events = await stream_events(Agent(model, retry=Retry(attempts=2, initial_delay=0.01)))
    result = events[-1].result
    assert result.status == "failed" and isinstance(result.exception, StreamInterruptedError)


async def test_timeout_is_retried_as_model_timeout(server: Any) -> None:
    before = len(server.chat_requests())
    model = model_at(server.fault_base_url("slow", "openai_plain_text", arg=3), timeout=0.3)
    events = await stream_events(Agent(model, retry=Retry(attempts=2, initial_delay=0.01)))
    retries = [e for e in events if e.kind == "model-retry"]
    assert len(retries) == 1 and "timed out" in retries[0].error
    result = events[-1].result
    assert result.status == "failed" and isinstance(result.exception, ModelTimeoutError)
    assert len(server.chat_requests()) - before == 2


async def test_read_timeout_mid_stream_is_an_interrupted_stream(server: Any) -> None:
    model = model_at(server.fault_base_url("event-delay", "openai_stream_text_usage", arg=1.5), timeout=0.4)
    items: list[Any] = []
    try:
        with pytest.raises(StreamInterruptedError, match="timed out"):
            async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
                items.append(item)
    finally:
        await model.aclose()


async def test_timeout_non_streaming(server: Any) -> None:
    model = model_at(server.fault_base_url("slow", "openai_plain_text", arg=3), timeout=0.3)
    try:
        with pytest.raises(ModelTimeoutError) as info:
            await model.request(ModelRequest([UserMessage("hi")]))
    finally:
        await model.aclose()
    assert info.value.retryable


async def test_connection_refused_is_a_retried_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    model = model_at(f"http://127.0.0.1:{port}/v1")
    events = await stream_events(Agent(model, retry=Retry(attempts=2, initial_delay=0.01)))
    result = events[-1].result
    assert isinstance(result.exception, ModelConnectionError)
    assert f"127.0.0.1:{port}" in result.error
    assert [e.kind for e in events].count("model-retry") == 1


# ----------------------------------------------------------------------------- errors at once
@pytest.mark.parametrize(
    ("case", "cls", "status", "stream"),
    [
        ("openai_error_401", AuthenticationError, 401, False),
        ("openai_stream_error_401", AuthenticationError, 401, True),
        ("openai_error_400_unsupported_value", BadRequestError, 400, False),
        ("groq_error_400_tool_use_failed", BadRequestError, 400, True),
        ("openai_error_404_model", NotFoundError, 404, False),
    ],
)
async def test_client_errors_fail_at_once(
    server: Any, case: str, cls: type, status: int, stream: bool
) -> None:
    before = len(server.chat_requests())
    agent = Agent(model_at(server.base_url_for(case)), retry=FAST)
    if stream:
        events = await stream_events(agent)
        assert "model-retry" not in [e.kind for e in events]
        result = events[-1].result
    else:
        try:
            result = await agent.run("hi")
        finally:
            await agent.model.aclose()  # type: ignore[attr-defined]
    assert result.status == "failed"
    assert type(result.exception) is cls
    assert result.error.startswith(f"{cls.__name__}: {status} ")
    recorded = load_case(case)["response"]["body"]["error"]["message"]
    assert recorded in result.error
    assert len(server.chat_requests()) - before == 1  # not retried


async def test_404_names_the_model_and_url(server: Any) -> None:
    url = server.base_url_for("openai_error_404_model")
    result = await Agent(model_at(url, model_name="this-model-does-not-exist")).run("hi")
    assert "'this-model-does-not-exist'" in result.error and url in result.error


# ----------------------------------------------------------------------------- the request sent
@tool
def get_weather(city: str) -> str:
    """Get the weather for a city.

    Args:
        city: the city name.
    """
    return f"sunny in {city}"


async def test_streaming_request_body(server: Any) -> None:
    model = model_at(
        server.base_url_for("openai_stream_text_usage"),
        settings={"temperature": 0.5, "seed": 7, "extra_body": {"top_k": 3, "min_p": 0.1}},
    )
    agent = Agent(
        model,
        tools=[get_weather],
        system="Be brief.",
        settings={
            "temperature": 0,
            "max_tokens": 64,
            "stop": ["\n\n"],
            "top_p": 0.9,
            "tool_choice": "get_weather",
            "parallel_tool_calls": False,
            "extra_body": {"min_p": 0.2},
        },
    )
    before = len(server.chat_requests())
    await stream_events(agent, "Weather in Paris?")
    (sent,) = [r["body"] for r in server.chat_requests()[before:]]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "gpt-4o-mini"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather for a city.",
                "parameters": get_weather.parameters,
            },
        }
    ]
    assert sent["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    # a tool's name as tool_choice forces that tool
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False
    # the agent's settings over the model's; extra_body merged key by key and sent top-level
    assert (sent["temperature"], sent["seed"], sent["max_tokens"], sent["top_p"]) == (0, 7, 64, 0.9)
    assert sent["stop"] == ["\n\n"]
    assert (sent["top_k"], sent["min_p"]) == (3, 0.2)


async def test_non_streaming_request_body_and_no_tool_settings_without_tools(server: Any) -> None:
    model = model_at(server.base_url_for("openai_plain_text"))
    agent = Agent(
        model,
        settings={"tool_choice": "required", "parallel_tool_calls": True, "seed": 1, "temperature": None},
    )
    before = len(server.chat_requests())
    try:
        result = await agent.run("hi")
    finally:
        await model.aclose()
    assert result.output == "This is a test."
    (sent,) = [r["body"] for r in server.chat_requests()[before:]]
    assert "stream" not in sent and "stream_options" not in sent
    # servers reject tool_choice / parallel_tool_calls without tools; None means "not set"
    assert "tools" not in sent and "tool_choice" not in sent and "parallel_tool_calls" not in sent
    assert "temperature" not in sent and sent["seed"] == 1


async def test_history_is_sent_faithfully_and_broken_arguments_are_not_replayed(server: Any) -> None:
    model = model_at(server.base_url_for("openai_plain_text"))
    good = ToolCall("call_a", "get_weather", '{"city": "Paris"}')
    broken = ToolCall("call_b", "get_weather", '{"city": "Par')
    messages = [
        UserMessage("weather?"),
        AssistantMessage("Let me check.", [good, broken], reasoning="think"),
        ToolResultMessage("call_a", "get_weather", "sunny"),
        ToolResultMessage("call_b", "get_weather", "invalid arguments: not JSON", is_error=True),
        AssistantMessage(None, refusal="I can't help with that."),
        AssistantMessage(""),
    ]
    before = len(server.chat_requests())
    try:
        await model.request(ModelRequest(messages, [get_weather.definition()]))
    finally:
        await model.aclose()
    (sent,) = [r["body"] for r in server.chat_requests()[before:]]
    assert sent["messages"] == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "invalid arguments: not JSON"},
        {"role": "assistant", "content": "I can't help with that."},
        {"role": "assistant", "content": ""},
    ]


def test_history_conversion_is_cached_per_message() -> None:
    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1")
    history: list[Any] = [UserMessage("q"), AssistantMessage("a")]
    first = model.request_params(ModelRequest(history), stream=False)["messages"]
    history.append(UserMessage("q2"))
    second = model.request_params(ModelRequest(history), stream=False)["messages"]
    assert second[0] is first[0] and second[1] is first[1]  # converted once
    assert second[2] == {"role": "user", "content": "q2"}


def test_unknown_setting_is_a_user_error() -> None:
    with pytest.raises(UserError, match="extra_body"):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", settings={"temprature": 0})
    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(UserError, match="top_k"):
        model.request_params(ModelRequest([UserMessage("x")], settings={"top_k": 3}), stream=True)


# ----------------------------------------------------------------------------- configuration
def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    model = OpenAIModel()
    assert (model.model_name, model.base_url, model.provider) == (
        "env-model",
        "http://127.0.0.1:9/v1",
        "openai",
    )
    assert model._api_key.get() == KEY
    via_string = infer_model("openai:gpt-4.1-mini")
    assert isinstance(via_string, OpenAIModel) and via_string.model_name == "gpt-4.1-mini"
    assert via_string.base_url == "http://127.0.0.1:9/v1"


def test_missing_model_name_or_key_is_a_clear_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UserError, match="OPENAI_MODEL"):
        OpenAIModel(api_key="x")
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-4.1-mini")
    # a local server needs no key
    assert OpenAIModel("llama3", base_url="http://127.0.0.1:11434/v1", provider="ollama").provider == "ollama"


async def test_provider_name_is_what_the_user_configured(server: Any) -> None:
    model = model_at(server.base_url_for("groq_stream_text"), provider="groq", model_name="llama3-8b-8192")
    events = await stream_events(Agent(model))
    row = events[-1].result.usage.calls[0]
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == (
        "groq",
        "llama3-8b-8192",
        18,
        73,
    )


# ----------------------------------------------------------------------------- the key stays secret
async def test_the_api_key_never_leaks(server: Any) -> None:
    store = MemoryStore()
    seen: list[str] = []
    for case, tools in (
        ("openai_stream_single_tool_call", []),
        ("openai_error_401", []),
        ("openai_plain_text", [get_weather]),
        ("openrouter_error_429", []),
    ):
        model = model_at(server.base_url_for(case))
        agent = Agent(model, tools=tools, store=store, retry=Retry(attempts=2, initial_delay=0))
        seen += [repr(model), str(model), repr(agent), repr(vars(model))]
        events = await stream_events(agent)
        for e in events:
            seen.append(repr(e))
        result = events[-1].result
        seen += [repr(result), json.dumps([m.to_dict() for m in result.messages]), repr(result.usage.rows())]
        if result.exception is not None:
            exc = result.exception
            seen += [str(exc), repr(exc), repr(vars(exc)), repr(exc.body)]
            assert exc.__cause__ is None and exc.__context__ is None  # no SDK request with headers
        thread = await store.load(result.thread)
        seen.append(repr(thread))
    blob = "\n".join(seen)
    assert KEY not in blob and KEY[8:24] not in blob
    # the server did receive it (as the Authorization header only: the body never has it)
    assert all(KEY not in json.dumps(r["body"]) for r in server.chat_requests())


def test_a_server_echoing_the_key_is_scrubbed() -> None:
    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx2.Response(401, request=request, json={"error": {"message": f"bad key {KEY}"}})
    sdk_error = openai.AuthenticationError(
        "Error code: 401", response=response, body={"message": f"bad key {KEY}"}
    )
    err = model.map_error(sdk_error)
    assert isinstance(err, AuthenticationError)
    assert KEY not in str(err) and KEY not in repr(err.body) and "***" in str(err)


# ----------------------------------------------------------------------------- event loops
async def test_one_client_per_event_loop_run_sync_and_await(server: Any) -> None:
    """The Jupyter pattern: `agent.run_sync` (nbagent's background loop) and `await agent.run`
    (the kernel's loop) on one agent, interleaved: no 'Event loop is closed', clients reused."""
    from nbagent._sync import background_loop, run_sync

    model = model_at(server.base_url_for("openai_plain_text"))
    agent = Agent(model)
    outputs = [agent.run_sync("a").output]
    bg_client = model._clients[background_loop()][0]
    outputs.append((await agent.run("b")).output)
    own_client = model._clients[asyncio.get_running_loop()][0]
    outputs.append(agent.run_sync("c").output)
    outputs.append((await agent.run("d")).output)
    assert outputs == ["This is a test."] * 4
    assert bg_client is not own_client
    assert model._clients[background_loop()][0] is bg_client  # reused, not rebuilt
    assert model._clients[asyncio.get_running_loop()][0] is own_client
    await model.aclose()
    run_sync(model.aclose)


def test_asyncio_run_twice_then_run_sync(server: Any) -> None:
    """Each asyncio.run closes its loop; the next call gets a fresh client, and the old
    connections are closed with their loop (no ResourceWarning: warnings are errors here)."""
    model = model_at(server.base_url_for("openai_plain_text"))
    agent = Agent(model)
    assert asyncio.run(agent.run("a")).output == "This is a test."
    assert asyncio.run(agent.run("b")).output == "This is a test."
    assert agent.run_sync("c").output == "This is a test."
    gc.collect()
    from nbagent._sync import run_sync

    run_sync(model.aclose)
