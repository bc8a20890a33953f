"""`AnthropicModel` beyond one recorded answer: what it sends (compared with the recorded requests),
tool_choice and caching breakpoints, thinking blocks sent back, errors the recordings lack (403,
413, an ``error`` event inside a stream, retry-after), prices, the key's hygiene.

Real HTTP to the replay server on loopback, through the real ``anthropic`` SDK; nothing is mocked.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ModelConnectionError,
    ModelResponseError,
    RateLimitError,
    ResponseBodyError,
    StreamInterruptedError,
    UserError,
)
from nbagent.messages import (
    AssistantMessage,
    Image,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
)
from nbagent.models import infer_model
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.anthropic._wire import wire_tool_choice
from nbagent.models.base import ModelRequest, ModelResponse
from nbagent.pricing import lookup_prices
from nbagent.retry import Retry
from nbagent.store import MemoryStore
from nbagent.tools import Tool
from tests.loopback import answering, streaming
from tests.wire.replay_server import ANTHROPIC_CASES_DIR, ReplayServer, load_case

KEY = "sk-ant-model-test-0123456789abcdef"
FAST = Retry(attempts=2, initial_delay=0, max_delay=0, jitter=0)


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


def case(name: str) -> dict[str, Any]:
    return load_case(name, ANTHROPIC_CASES_DIR)


def model_at(base_url: str, name: str = "claude-sonnet-4-5", **kwargs: Any) -> AnthropicModel:
    return AnthropicModel(name, base_url=base_url, api_key=KEY, **kwargs)


def norm(value: Any) -> Any:
    """A wire body without what only differs in form: ``None`` values, ``is_error: false``, the
    ``caller`` of a tool_use, a string content as one text block."""
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, dict):
        out = {k: norm(v) for k, v in value.items()
               if v is not None and k != "caller" and not (k == "is_error" and v is False)}
        if isinstance(out.get("content"), str) and "role" in out:
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    return value


async def sent_after(server: Any, model: AnthropicModel, request: ModelRequest, stream: bool = False) -> Any:
    before = len(server.messages_requests())
    try:
        if stream:
            items = [i async for i in model.request_stream(request)]
            response = items[-1]
        else:
            response = await model.request(request)
    finally:
        await model.aclose()
    assert isinstance(response, ModelResponse)
    sent = server.messages_requests()[before:]
    assert len(sent) == 1
    return sent[0]["body"], response


def recorded_tools(name: str) -> list[dict[str, Any]]:
    return [{"name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]}
            for t in case(name)["request"]["body"]["tools"]]


# ----------------------------------------------------------------------------- what is sent
async def test_a_tool_error_result_is_sent_like_the_recording(server: Any) -> None:
    rec = case("anthropic_tool_result_is_error")["request"]["body"]
    use = rec["messages"][1]["content"][0]
    history = [
        UserMessage("What is the weather in SF?"),
        AssistantMessage(tool_calls=[ToolCall(use["id"], use["name"], json.dumps(use["input"]))]),
        ToolResultMessage(use["id"], use["name"], rec["messages"][2]["content"][0]["content"], is_error=True),
    ]
    model = model_at(server.anthropic_base_url_for("anthropic_tool_result_is_error"), "claude-haiku-4-5",
                     max_tokens=1024, cache=False)
    tools = recorded_tools("anthropic_tool_result_is_error")
    body, _ = await sent_after(server, model, ModelRequest(history, tools=tools))
    assert norm(body["messages"]) == norm(rec["messages"])
    assert body["messages"][2]["content"][0]["is_error"] is True
    assert body["tools"] == rec["tools"]  # parameters as input_schema
    assert (body["model"], body["max_tokens"]) == (rec["model"], rec["max_tokens"])
    assert "tool_choice" not in body and "system" not in body


async def test_all_results_of_one_answer_go_in_one_user_turn(server: Any) -> None:
    name = "anthropic_parallel_tool_results_answer"
    rec = case(name)["request"]["body"]
    first, answer, results = rec["messages"][:3]
    uses = [b for b in answer["content"] if b["type"] == "tool_use"]
    history = [
        SystemMessage(rec["system"] if isinstance(rec.get("system"), str) else rec["system"][0]["text"]),
        UserMessage(first["content"][0]["text"]),
        AssistantMessage(text=answer["content"][0]["text"],
                         tool_calls=[ToolCall(u["id"], u["name"], json.dumps(u["input"])) for u in uses]),
        *[ToolResultMessage(r["tool_use_id"], "retrieve_entity_info", r["content"]) for r in results["content"]],
    ]
    model = model_at(server.anthropic_base_url_for(name), rec["model"], cache=False)
    request = ModelRequest(history, tools=recorded_tools(name), settings={"tool_choice": "auto"})
    body, response = await sent_after(server, model, request)
    assert norm(body["messages"]) == norm(rec["messages"][:3])
    assert len(body["messages"]) == 3 and len(body["messages"][2]["content"]) == 4
    assert body["tool_choice"] == rec["tool_choice"] == {"type": "auto"}
    assert body["system"][0]["text"] == history[0].content
    assert response.message.text


@pytest.mark.parametrize("name", ["anthropic_image_base64", "anthropic_image_url"])
async def test_images_are_sent_like_the_recording(server: Any, name: str) -> None:
    rec = case(name)["request"]["body"]
    text, image = rec["messages"][0]["content"]
    source = image["source"]
    if source["type"] == "base64":
        img = Image(data=base64.b64decode(source["data"]), media_type=source["media_type"])
    else:
        img = Image.from_url(source["url"])
    model = model_at(server.anthropic_base_url_for(name), rec["model"], max_tokens=rec["max_tokens"], cache=False)
    body, response = await sent_after(server, model, ModelRequest([UserMessage(text["text"], [img])]))
    assert norm(body["messages"]) == norm(rec["messages"])
    assert response.message.text


async def test_the_system_prompt_is_sent_as_system(server: Any) -> None:
    rec = case("anthropic_system_prompt")["request"]["body"]
    model = model_at(server.anthropic_base_url_for("anthropic_system_prompt"), rec["model"], max_tokens=1024,
                     cache=False)
    history = [SystemMessage(rec["system"][0]["text"]), UserMessage(rec["messages"][0]["content"])]
    body, _ = await sent_after(server, model, ModelRequest(history))
    assert body["system"] == rec["system"]
    assert norm(body["messages"]) == norm(rec["messages"])


async def test_thinking_blocks_go_back_unchanged_through_an_agent(server: Any) -> None:
    """The recorded pair: a thinking answer with a tool call, then the request carrying the signed
    thinking block back before the text and the tool_use (what the recorded client sent)."""
    rec = case("anthropic_thinking_tool_result_answer")["request"]["body"]
    base = server.anthropic_fault_base_url("then", "anthropic_thinking_tool_use",
                                           arg="anthropic_thinking_tool_result_answer")

    def get_user_country() -> str:
        return "Mexico"

    model = model_at(base, rec["model"], thinking=rec["thinking"], cache=False)
    agent = Agent(model, tools=[Tool.from_function(get_user_country)], settings={"tool_choice": "auto"})
    before = len(server.messages_requests())
    try:
        result = await agent.run(rec["messages"][0]["content"][0]["text"])
    finally:
        await model.aclose()
    assert result.status == "completed", result.error
    second = server.messages_requests()[before:][1]["body"]
    assert norm(second["messages"]) == norm(rec["messages"])
    assert second["thinking"] == rec["thinking"]
    answer = next(m for m in result.messages if m.kind == "assistant")
    assert answer.thinking_blocks == [rec["messages"][1]["content"][0]]
    # persisted: to_dict / message_from_dict keep the signed blocks
    again = message_from_dict(json.loads(json.dumps(answer.to_dict())))
    assert isinstance(again, AssistantMessage) and again.thinking_blocks == answer.thinking_blocks
    assert AssistantMessage(text="x").to_dict() == {"kind": "assistant", "text": "x"}


async def test_redacted_thinking_goes_back_unchanged(server: Any) -> None:
    rec = case("anthropic_redacted_thinking_roundtrip")["request"]["body"]
    first = model_at(server.anthropic_base_url_for("anthropic_redacted_thinking"), rec["model"],
                     thinking=rec["thinking"], cache=False)
    prompt = UserMessage(rec["messages"][0]["content"][0]["text"])
    _, response = await sent_after(server, first, ModelRequest([prompt]))
    second = model_at(server.anthropic_base_url_for("anthropic_redacted_thinking_roundtrip"), rec["model"],
                      thinking=rec["thinking"], cache=False)
    history = [prompt, response.message, UserMessage("What was that?")]
    body, _ = await sent_after(server, second, ModelRequest(history))
    assert norm(body["messages"]) == norm(rec["messages"])


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("get_weather", None, {"type": "tool", "name": "get_weather"}),
        ("none", None, {"type": "none"}),
        (None, None, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ("get_weather", False, {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_mapping(choice: Any, parallel: Any, wire: Any) -> None:
    assert wire_tool_choice(choice, parallel) == wire


async def test_tool_choice_is_sent_only_with_tools_and_settings_are_translated(server: Any) -> None:
    tools = [{"name": "get_weather", "description": "w", "parameters": {"type": "object", "properties": {}}}]
    url = server.anthropic_base_url_for("anthropic_plain_text")
    settings = {"tool_choice": "required", "parallel_tool_calls": False, "stop": "END", "temperature": 0}
    body, _ = await sent_after(server, model_at(url), ModelRequest([UserMessage("hi")], tools, settings))
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["stop_sequences"] == ["END"] and body["temperature"] == 0  # (in extra_body for anthropic 2.x)
    assert "parallel_tool_calls" not in body and "stop" not in body
    body, _ = await sent_after(server, model_at(url), ModelRequest([UserMessage("hi")], [], settings))
    assert "tool_choice" not in body and "tools" not in body
    with pytest.raises(UserError, match="unknown model setting"):
        model_at(url, settings={"frequency_penalty": 1})


async def test_caching_breakpoints_and_cache_false(server: Any) -> None:
    tools = [{"name": f"t{i}", "description": "d", "parameters": {"type": "object", "properties": {}}} for i in (1, 2)]
    history: list[Any] = [SystemMessage("sys"), UserMessage("one"), AssistantMessage(text="two"), UserMessage("three")]
    url = server.anthropic_base_url_for("anthropic_plain_text")
    body, _ = await sent_after(server, model_at(url), ModelRequest(history, tools))
    ephemeral = {"type": "ephemeral"}
    assert [t.get("cache_control") for t in body["tools"]] == [None, ephemeral]
    assert body["system"] == [{"type": "text", "text": "sys", "cache_control": ephemeral}]
    marked = [m for m in body["messages"] if any("cache_control" in b for b in m["content"] if isinstance(b, dict))]
    assert marked == [body["messages"][-1]]
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "three", "cache_control": ephemeral}]
    # the next step marks only its own latest message (the history was not changed)
    history += [AssistantMessage(text="four"), UserMessage("five")]
    body, _ = await sent_after(server, model_at(url), ModelRequest(history, tools))
    assert body["messages"][2]["content"] == "three"
    assert body["messages"][-1]["content"][-1]["cache_control"] == ephemeral
    body, _ = await sent_after(server, model_at(url, cache=False), ModelRequest(history, tools))
    assert "cache_control" not in json.dumps(body)


async def test_a_forced_tool_becomes_auto_with_thinking(server: Any) -> None:
    """The API refuses tool_choice any / tool with extended thinking (an output_type agent asks for
    "required"): such a request asks for auto instead, keeping disable_parallel_tool_use."""
    tools = [{"name": "t", "description": "d", "parameters": {"type": "object", "properties": {}}}]
    url = server.anthropic_base_url_for("anthropic_plain_text")
    for choice in ("required", "t"):
        settings = {"tool_choice": choice, "parallel_tool_calls": False}
        request = ModelRequest([UserMessage("hi")], tools, settings)
        body, _ = await sent_after(server, model_at(url, thinking=1024), request)
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


async def test_thinking_setting_and_max_tokens(server: Any) -> None:
    url = server.anthropic_base_url_for("anthropic_plain_text")
    body, _ = await sent_after(server, model_at(url, thinking=2048, max_tokens=8000), ModelRequest([UserMessage("hi")]))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and body["max_tokens"] == 8000
    body, _ = await sent_after(server, model_at(url), ModelRequest([UserMessage("hi")], settings={"max_tokens": 77}))
    assert body["max_tokens"] == 77 and "thinking" not in body


# ----------------------------------------------------------------------------- errors not recorded
@pytest.mark.parametrize(
    ("status", "cls"), [(403, AuthenticationError), (413, BadRequestError), (400, BadRequestError)]
)
async def test_refused_requests_are_typed_and_not_retried(server: Any, status: int, cls: type) -> None:
    model = model_at(server.anthropic_fault_base_url("status", arg=status))
    agent = Agent(model, retry=FAST)
    before = len(server.messages_requests())
    try:
        result = await agent.run("hi")
    finally:
        await model.aclose()
    err = result.exception
    assert type(err) is cls and err.status_code == status and not err.retryable
    assert f"replay fault status {status}" in str(err)
    assert len(server.messages_requests()) - before == 1


@pytest.mark.parametrize(
    ("kind", "cls", "retryable"),
    [
        ("overloaded_error", StreamInterruptedError, True),
        ("api_error", StreamInterruptedError, True),
        ("rate_limit_error", RateLimitError, True),
        ("invalid_request_error", BadRequestError, False),
        ("authentication_error", AuthenticationError, False),
    ],
)
async def test_an_error_event_inside_a_stream_is_sorted_by_its_type(
    server: Any, kind: str, cls: type, retryable: bool
) -> None:
    event = "event: error\ndata: " + json.dumps({"type": "error", "error": {"type": kind, "message": f"boom {kind}"}})
    model = model_at(server.anthropic_fault_base_url("error-mid-stream", "anthropic_stream_text", arg=f"4,{event}"))
    deltas: list[str] = []
    try:
        with pytest.raises(cls) as info:
            async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
                deltas.append(item)
    finally:
        await model.aclose()
    err = info.value
    assert err.retryable is retryable and f"boom {kind}" in str(err) and kind in str(err)
    assert err.status_code is None and err.__cause__ is None and err.__context__ is None
    assert deltas == ["-"]  # what came before the error


async def test_an_agent_retries_a_stream_that_errored_then_completes(server: Any) -> None:
    model = model_at(server.anthropic_fault_base_url("error-once", "anthropic_stream_text"))
    try:
        events = [e async for e in Agent(model, retry=FAST).stream("hi")]
    finally:
        await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.output == "- Captain\n- Scoop"


@pytest.mark.parametrize("mode", ["500-then-200", "429-then-200"])
async def test_an_agent_retries_500_and_429(server: Any, mode: str) -> None:
    model = model_at(server.anthropic_fault_base_url(mode, "anthropic_plain_text"))
    try:
        result = await Agent(model, retry=FAST).run("hi")
    finally:
        await model.aclose()
    assert result.status == "completed" and result.output == "4200 + 42 = 4242"


async def test_retry_after_is_honoured(server: Any) -> None:
    model = model_at(server.anthropic_fault_base_url("429-retry-after", "anthropic_plain_text", arg=0.6))
    start = time.monotonic()
    try:
        result = await Agent(model, retry=Retry(attempts=2, initial_delay=0, jitter=0)).run("hi")
    finally:
        await model.aclose()
    assert result.status == "completed"
    assert time.monotonic() - start >= 0.6


async def test_529_overloaded_is_retried_then_fails(server: Any) -> None:
    model = model_at(server.anthropic_base_url_for("anthropic_error_529_overloaded"))
    before = len(server.messages_requests())
    try:
        result = await Agent(model, retry=FAST).run("hi")
    finally:
        await model.aclose()
    assert result.status == "failed" and result.exception.status_code == 529
    assert "Overloaded" in (result.error or "") and len(server.messages_requests()) - before == 2


# ----------------------------------------------------------------------------- the key, prices, entry points
async def test_the_key_is_never_shown() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url="http://127.0.0.1:9")  # nothing listens
    assert KEY not in repr(model) and KEY not in repr(vars(model)) and KEY not in str(model._api_key)
    with pytest.raises(ModelConnectionError) as info:
        await model.request(ModelRequest([UserMessage("hi")]))
    await model.aclose()
    assert KEY not in str(info.value) and info.value.__cause__ is None and info.value.__context__ is None


def test_a_key_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    model = infer_model("anthropic:claude-haiku-4-5")
    assert isinstance(model, AnthropicModel)
    assert (model.provider, model.model_name) == ("anthropic", "claude-haiku-4-5")


@pytest.mark.parametrize(
    ("name", "fresh", "read", "write", "output"),
    [("anthropic_cache_write", 4, 0, 1163, 187), ("anthropic_cache_read", 4, 1163, 0, 202)],
)
async def test_the_cost_of_a_cached_case(
    server: Any, name: str, fresh: int, read: int, write: int, output: int
) -> None:
    prices = {"input": 3.0, "cache_read": 0.3, "cache_write": 3.75, "output": 15.0}  # USD per million tokens
    assert lookup_prices("claude-3-5-sonnet-20240620", "anthropic") == prices
    model = model_at(server.anthropic_base_url_for(name), "claude-3-5-sonnet-20240620")
    try:
        result = await Agent(model).run("summarise")
    finally:
        await model.aclose()
    row = result.usage.calls[0]
    assert (row.provider, row.model) == ("anthropic", "claude-3-5-sonnet-20240620")
    assert (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens, row.output_tokens) == (
        fresh + read + write, read, write, output)
    by_hand = (fresh * prices["input"] + read * prices["cache_read"] + write * prices["cache_write"]
               + output * prices["output"]) / 1e6
    assert row.cost_total == pytest.approx(by_hand, rel=1e-9)


# ----------------------------------------------------------------------------- the replay server's /v1/messages
def test_the_replay_server_answers_messages_routes_in_anthropic_shape(server: Any) -> None:
    import urllib.error
    import urllib.request

    def post(url: str) -> tuple[int, Any]:
        req = urllib.request.Request(url, data=b'{"messages": []}', headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, body = post(server.url + "/case/nope/v1/messages")
    assert status == 422 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    status, body = post(server.anthropic_fault_base_url("status", arg="413,request_too_large") + "/v1/messages")
    assert (status, body["error"]["type"]) == (413, "request_too_large")
    status, body = post(server.fault_base_url("status", arg=413) + "/chat/completions")  # OpenAI shape there
    assert status == 413 and body["error"]["type"] == "invalid_request_error" and "type" not in body
    status, body = post(server.anthropic_base_url_for("anthropic_plain_text") + "/v1/messages")
    assert status == 200 and body["type"] == "message"
    assert server.messages_requests()[-1]["case"] == "anthropic_plain_text"


async def test_a_stream_that_breaks_off_is_retried(server: Any) -> None:
    model = model_at(server.anthropic_fault_base_url("drop-once", "anthropic_stream_text", arg=4))
    before = len(server.messages_requests())
    try:
        events = [e async for e in Agent(model, retry=FAST).stream("hi")]
    finally:
        await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.output == "- Captain\n- Scoop"
    assert len(server.messages_requests()) - before == 2
    model = model_at(server.anthropic_fault_base_url("drop-mid-stream", "anthropic_stream_text", arg=4))
    try:
        with pytest.raises(StreamInterruptedError) as info:
            async for _ in model.request_stream(ModelRequest([UserMessage("hi")])):
                pass
    finally:
        await model.aclose()
    assert info.value.retryable and KEY not in str(info.value)


# ----------------------------------------------------------------------------- the event stream
def _split(text: str, sizes: list[int]) -> list[bytes]:
    data, out, at = text.encode(), [], 0
    for size in sizes:
        out.append(data[at:at + size])
        at += size
    return [*out, data[at:]] if at < len(data) else out


async def _items(chunks: list[bytes]) -> list[Any]:
    """What `AnthropicModel.request_stream` makes of an event stream sent in these chunks over
    real HTTP (each chunk written and flushed on its own): the deltas, then the answer."""
    with streaming(chunks) as url:
        model = model_at(url)
        try:
            return [i async for i in model.request_stream(ModelRequest([UserMessage("hi")]))]
        finally:
            await model.aclose()


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("sizes", [[], [1] * 40, [7, 13, 2, 1, 1, 50], [200]], ids=["whole", "bytes", "odd", "big"])
async def test_the_event_stream_is_read_whatever_its_chunking_and_line_ends(newline: str, sizes: list[int]) -> None:
    """Events split anywhere, CRLF / CR line ends, a comment, a character split across chunks."""
    sse = case("anthropic_stream_text")["response"]["sse"]
    text = sse.replace("\n", newline) + f": keep-alive{newline}{newline}"
    text = text.replace('"text":"oop"', '"text":"\u00f6p"')  # a two-byte character, which "bytes" splits
    *deltas, response = await _items(_split(text, sizes))
    assert "".join(deltas) == "- Captain\n- Sc\u00f6p"
    assert response.message.finish_reason == "stop" and response.usage.output_tokens == 10


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


_START = {"type": "message_start",
          "message": {"id": "m", "model": "x", "usage": {"input_tokens": 3, "output_tokens": 1}}}


async def test_an_unreadable_event_an_error_event_and_an_empty_stream_are_named() -> None:
    with pytest.raises(ModelResponseError, match="unreadable event") as info:
        await _items([b"event: message_start\ndata: {not json\n\n"])
    assert info.value.__cause__ is None and info.value.__context__ is None
    with pytest.raises(StreamInterruptedError, match="overloaded"):  # retried, like a 529
        await _items([_sse(_START), b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error",'
                      b' "message": "Overloaded"}}\n\n'])
    with pytest.raises(ResponseBodyError, match="an empty event stream") as empty:  # as every provider names it
        await _items([b": nothing but a comment\n\n"])
    assert empty.value.retryable and empty.value.status_code == 200
    with pytest.raises(ModelResponseError, match="without a message_start"):
        await _items([b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'])


async def test_a_stream_that_ends_before_message_stop_is_a_cut_stream_not_an_answer() -> None:
    """The body ends cleanly inside a tool call's arguments: no content_block_stop, message_delta or
    message_stop. That is a stream cut off (retried), never a call with half its arguments."""
    tool_start = {"type": "content_block_start", "index": 0,
                  "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}}
    half = {"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"order_id": "4'}}
    with pytest.raises(StreamInterruptedError, match="before its message_stop") as info:
        await _items([_sse(_START, tool_start, half)])
    assert info.value.retryable


async def test_a_cut_stream_is_retried_and_nothing_of_it_is_stored() -> None:
    whole = case("anthropic_stream_text")["response"]["sse"].encode()
    cut = _sse(_START, {"type": "content_block_start", "index": 0,
                        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}},
               {"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"order_id": "4'}})
    store = MemoryStore()
    with answering(("text/event-stream", cut), ("text/event-stream", whole)) as url:
        model = model_at(url)
        agent = Agent(model, retry=Retry(initial_delay=0.01), store=store)
        try:
            events = [e async for e in agent.stream("hi", thread="t")]
        finally:
            await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.output == "- Captain\n- Scoop"
    assert [e.kind for e in events].count("model-retry") == 1
    loaded = await store.load("t")
    assert loaded is not None and [m.kind for m in loaded.messages] == ["user", "assistant"]
    assert not loaded.messages[1].tool_calls and len(loaded.usage) == 1


async def test_a_compressed_event_stream_is_decoded() -> None:
    import gzip

    body = gzip.compress(case("anthropic_stream_text")["response"]["sse"].encode())
    with answering(("text/event-stream", body, {"Content-Encoding": "gzip"})) as url:
        model = model_at(url)
        try:
            items = [i async for i in model.request_stream(ModelRequest([UserMessage("hi")]))]
        finally:
            await model.aclose()
    assert "".join(items[:-1]) == "- Captain\n- Scoop" and items[-1].message.finish_reason == "stop"


# ----------------------------------------------------------------------------- bodies that are no answer
_WHOLE = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 3, "output_tokens": 1}}).encode()
BAD_BODIES = {
    "html": ("text/html", b"<html><body>502 Bad Gateway</body></html>", {}, "an HTML page"),
    "empty": ("application/json", b"", {}, "an empty body"),
    "truncated-json": ("application/json", _WHOLE[:40], {}, "JSON that cannot be parsed"),
    "not-a-message": ("application/json", b'{"ok": true}', {}, "not a Messages API answer object"),
    "json-list": ("application/json", b"[1, 2]", {}, "not a Messages API answer object"),
    "plain-text": ("text/plain", b"upstream connect error", {}, "text that is not JSON"),
    "bad-gzip": ("application/json", b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}, ""),
}


@pytest.mark.parametrize("name", BAD_BODIES)
async def test_a_whole_answer_whose_body_is_no_message_is_a_typed_error(name: str) -> None:
    """A misbehaving proxy answers a non-streamed request with 200 and a body that is no Messages
    API answer: a `ModelError` naming what came (a `ResponseBodyError` with the status and the
    content type where the body arrived), never an AttributeError; the key never shows."""

    from nbagent.exceptions import ModelError

    content_type, body, headers, words = BAD_BODIES[name]
    with answering((content_type, body, headers)) as url:
        model = model_at(url, max_retries=0)
        try:
            with pytest.raises(ModelError) as info:
                await model.request(ModelRequest([UserMessage("hi")]))
        finally:
            await model.aclose()
    assert KEY not in str(info.value) and words in str(info.value)
    if name != "bad-gzip":
        assert isinstance(info.value, ResponseBodyError)
        assert info.value.status_code == 200 and info.value.content_type == content_type
