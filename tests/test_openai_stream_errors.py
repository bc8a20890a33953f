"""Errors a server sends inside a stream it has already started (HTTP 200), over real HTTP.

The replay server's ``error-mid-stream`` / ``error-once`` fault modes send the first K events of a
recorded stream, then one error event (the payloads below are the shapes real servers send), then
``[DONE]``. A refused request must fail at once with a typed error that carries the server's words;
a transient error is retried like a dropped connection and the next, good answer is used.

Shapes: OpenAI ``data: {"error": {...}}`` with ``type``/``code`` (its ``server_error`` text is the
replay server's default); OpenRouter's chunk with a top-level ``error`` (numeric ``code``, upstream
words in ``metadata.raw``) and ``finish_reason: "error"`` (openrouter.ai/docs, "Errors During
Streaming"); llama.cpp ``{"error": {"code": 400, "type": "exceed_context_size_error", ...}}``
(server ``format_error_response``, sent as ``data:`` since ggml-org/llama.cpp#16109); vLLM
``{"error": {"type": "BadRequestError", "code": 400}}`` and its older unwrapped
``{"object": "error", ...}``; Groq's ``event: error`` line (sashabaranov/go-openai#1057).
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from nbagent import Agent
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    ModelError,
    ModelHTTPError,
    NotFoundError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel, stream_error_status
from nbagent.retry import Retry
from tests.loopback import answering
from tests.wire.replay_server import ReplayServer, load_case, split_sse_events

KEY = "sk-proj-SECRET-0123456789abcdefghijklmnop"
CASE = "openai_stream_text_usage"  # 9 events: '"This is a test."' in 6 text deltas, then usage
KEEP = 4  # events sent before the error: the role chunk and three text deltas
RETRY = Retry(attempts=3, initial_delay=0, jitter=0)


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


def model_at(url: str, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("gpt-4o-mini", base_url=url, api_key=KEY, **kwargs)


def text_of(events: list[str]) -> str:
    out = []
    for event in events:
        data = event.strip().removeprefix("data:").strip()
        if data.startswith("{"):
            for choice in json.loads(data)["choices"]:
                out.append(choice["delta"].get("content") or "")
    return "".join(out)


ALL_EVENTS = split_sse_events(load_case(CASE)["response"]["sse"])
PARTIAL = text_of(ALL_EVENTS[:KEEP])
WHOLE = text_of(ALL_EVENTS)


def chunk(**fields: Any) -> str:
    """An OpenRouter-style chunk: id, object, model and the given fields."""
    return json.dumps({"id": "gen-1", "object": "chat.completion.chunk", "created": 1750000000,
                       "model": "openai/gpt-4o", **fields})


# ----------------------------------------------------------------------------- the payloads
# (id, SSE event, error class, status_code, words of the server that the error must show)
PERMANENT = [
    (
        "openai-context-length",
        json.dumps({"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages "
                       "resulted in 131072 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        ContextOverflowError, None, ["maximum context length is 128000 tokens", "context_length_exceeded"],
    ),
    (
        "openai-invalid-key-echoed",
        json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}.",
                              "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}),
        AuthenticationError, None, ["Incorrect API key provided: ***.", "invalid_api_key"],
    ),
    (
        "llamacpp-context-size",
        json.dumps({"error": {"code": 400, "message": "request (4476 tokens) exceeds the available context "
                              "size (4096 tokens)", "type": "exceed_context_size_error",
                              "n_prompt_tokens": 4476, "n_ctx": 4096}}),
        ContextOverflowError, 400, ["exceeds the available context size (4096 tokens)"],
    ),
    (
        "vllm-unwrapped",
        json.dumps({"object": "error", "message": "'stream_options' is only allowed when 'stream' is set",
                    "type": "BadRequestError", "param": None, "code": 400}),
        BadRequestError, 400, ["'stream_options' is only allowed", "BadRequestError"],
    ),
    (
        "openrouter-moderation",
        chunk(provider="OpenAI",
              error={"code": 403, "message": "openai/gpt-4o requires moderation on OpenRouter. Your input was "
                     "flagged for \"harassment\"", "metadata": {"reasons": ["harassment"], "flagged_input":
                     "...", "provider_name": "OpenAI", "model_slug": "openai/gpt-4o"}},
              choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]),
        AuthenticationError, 403, ["Your input was flagged", "or the input if it was flagged"],
    ),
    (
        "groq-event-error",
        'event: error\ndata: ' + json.dumps({"error": {
            "message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' for "
                       "more details.", "type": "invalid_request_error", "code": "tool_use_failed",
            "failed_generation": "<function=get_weather>{\"city\": }"}}),
        BadRequestError, None, ["Failed to call a function", "tool_use_failed"],
    ),
    (
        "choice-level-404",
        chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "error",
                        "error": {"code": 404, "message": "No endpoints found for openai/gpt-9"}}]),
        NotFoundError, 404, ["No endpoints found for openai/gpt-9", "'gpt-4o-mini'"],
    ),
    (
        "openrouter-no-credits",
        json.dumps({"error": {"code": 402, "message": "Insufficient credits. Add more using "
                              "https://openrouter.ai/settings/credits"}}),
        ModelHTTPError, 402, ["Insufficient credits"],
    ),
    (
        "llamacpp-not-supported",  # 501 Not Implemented: a 5xx that will not change on a retry
        json.dumps({"error": {"code": 501, "message": "This server does not support this feature",
                              "type": "not_supported_error"}}),
        ServerError, 501, ["does not support this feature", "not retried: the server does not implement this"],
    ),
]

TRANSIENT = [
    (
        "openai-server-error",
        "",  # the replay server's default: OpenAI's own server_error event
        StreamInterruptedError, None, ["The server had an error while processing your request", "server_error"],
    ),
    (
        "overloaded",
        json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        StreamInterruptedError, None, ["Overloaded", "overloaded_error"],
    ),
    (
        "openrouter-upstream-502",
        chunk(provider="Nvidia",
              error={"code": 502, "message": "Provider returned error",
                     "metadata": {"raw": "Worker local total request limit reached (33/32)",
                                  "provider_name": "Nvidia"}},
              choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]),
        StreamInterruptedError, 502, ["Provider returned error: Worker local total request limit reached"],
    ),
    (
        "vllm-internal",
        json.dumps({"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError",
                              "param": None, "code": 500}}),
        StreamInterruptedError, 500, ["EngineCore encountered an issue", "InternalServerError"],
    ),
    (
        "rate-limit",
        json.dumps({"error": {"message": "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000",
                              "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}),
        RateLimitError, None, ["Rate limit reached for gpt-4o", "rate_limit_exceeded"],
    ),
    (
        "unknown-string",
        json.dumps({"error": "worker 3 went away"}),
        StreamInterruptedError, None, ["worker 3 went away"],
    ),
    (
        "finish-reason-error-alone",
        chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "error"}]),
        StreamInterruptedError, None, ["finish_reason 'error'"],
    ),
]


def ids(table: list[tuple[Any, ...]]) -> list[str]:
    return [row[0] for row in table]


async def read_until_error(model: OpenAIModel) -> tuple[list[str], BaseException]:
    texts: list[str] = []
    try:
        with pytest.raises(ModelError) as info:
            async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
                if isinstance(item, str):
                    texts.append(item)
    finally:
        await model.aclose()
    return texts, info.value


def assert_secret_kept(exc: BaseException) -> None:
    assert exc.__cause__ is None and exc.__context__ is None  # no SDK request with its headers
    blob = "\n".join([str(exc), repr(exc), repr(vars(exc))])
    assert KEY not in blob and KEY[8:24] not in blob


# ----------------------------------------------------------------------------- through the model
@pytest.mark.parametrize(("name", "event", "cls", "status", "words"), PERMANENT + TRANSIENT,
                         ids=ids(PERMANENT + TRANSIENT))
async def test_model_raises_the_typed_error_after_the_partial_text(
    server: Any, name: str, event: str, cls: type, status: int | None, words: list[str]
) -> None:
    url = server.fault_base_url("error-mid-stream", CASE, arg=f"{KEEP},{event}")
    texts, exc = await read_until_error(model_at(url))
    assert "".join(texts) == PARTIAL and PARTIAL  # the text before the error did stream
    assert type(exc) is cls
    assert exc.status_code == status  # type: ignore[attr-defined]
    assert exc.retryable is (name in ids(TRANSIENT))  # type: ignore[attr-defined]
    assert exc.provider == "openai"  # type: ignore[attr-defined]
    for word in words:
        assert word in str(exc)
    if name != "finish-reason-error-alone":  # the one with no error object
        assert exc.body  # type: ignore[attr-defined]  # the server's error object, for code to inspect
    assert_secret_kept(exc)


# ----------------------------------------------------------------------------- through a whole run
async def run_events(agent: Agent) -> list[Any]:
    try:
        return [e async for e in agent.stream("hi")]
    finally:
        await agent.model.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "event", "cls", "status", "words"), PERMANENT, ids=ids(PERMANENT))
async def test_a_refused_request_fails_the_run_after_one_request(
    server: Any, name: str, event: str, cls: type, status: int | None, words: list[str]
) -> None:
    url = server.fault_base_url("error-mid-stream", CASE, arg=f"{KEEP},{event}")
    before = len(server.chat_requests())
    t0 = time.perf_counter()
    events = await run_events(Agent(model_at(url), retry=RETRY))
    elapsed = time.perf_counter() - t0
    kinds = [e.kind for e in events]
    assert "model-retry" not in kinds
    assert len(server.chat_requests()) - before == 1  # not retried
    assert "text-delta" in kinds  # the user saw the partial text before the error
    result = events[-1].result
    assert kinds[-1] == "run-failed" and result.status == "failed"
    assert type(result.exception) is cls
    assert result.error.startswith(f"{cls.__name__}: {'' if status is None else f'{status} '}"
                                   "the server ended the stream with an error: ")
    for word in words:
        assert word in result.error
    assert KEY not in result.error and result.messages[-1].kind == "user"  # no half answer kept
    assert elapsed < 5


@pytest.mark.parametrize(("name", "event", "cls", "status", "words"), TRANSIENT, ids=ids(TRANSIENT))
async def test_a_transient_error_is_retried_and_the_next_answer_used(
    server: Any, name: str, event: str, cls: type, status: int | None, words: list[str]
) -> None:
    url = server.fault_base_url("error-once", CASE, arg=f"{KEEP},{event}")
    before = len(server.chat_requests())
    events = await run_events(Agent(model_at(url), retry=RETRY))
    kinds = [e.kind for e in events]
    (retry,) = [e for e in events if e.kind == "model-retry"]
    assert retry.attempt == 1 and retry.delay_s == 0
    for word in words:
        assert word in retry.error
    assert len(server.chat_requests()) - before == 2
    # the view clears the partial text: the retried answer's snapshots start from scratch
    first_after = next(e for e in events[kinds.index("model-retry"):] if e.kind == "text-delta")
    assert first_after.snapshot == first_after.delta
    result = events[-1].result
    assert result.status == "completed" and result.output == WHOLE
    assert len(result.usage.calls) == 1 and result.usage.calls[0].input_tokens > 0


async def test_a_transient_error_every_time_exhausts_the_retries(server: Any) -> None:
    url = server.fault_base_url("error-mid-stream", CASE, arg=KEEP)
    before = len(server.chat_requests())
    events = await run_events(Agent(model_at(url), retry=RETRY))
    assert [e.kind for e in events].count("model-retry") == 2
    assert len(server.chat_requests()) - before == 3
    result = events[-1].result
    assert result.status == "failed" and type(result.exception) is StreamInterruptedError
    assert "The server had an error while processing your request" in result.error


# ----------------------------------------------------------------------------- the rule itself
@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"code": 400, "type": "server_error"}, 400),  # a status in the object decides
        ({"code": "503", "type": "invalid_request_error"}, 503),
        ({"status": 404}, 404),
        ({"code": 501, "type": "not_supported_error"}, 501),
        ({"code": True, "type": "InternalServerError"}, None),
        ({"code": 200, "type": "server_error"}, None),
        ({"type": "invalid_request_error", "code": "rate_limit_exceeded"}, 429),  # code before type
        ({"type": "Invalid_Request_Error"}, 400),
        ({"type": "insufficient_quota", "code": "insufficient_quota"}, 402),
        ({"type": "overloaded_error"}, None),
        ({"message": "no type, no code"}, None),
        ("a plain string", None),
        (None, None),
    ],
)
def test_stream_error_status(error: Any, status: int | None) -> None:
    assert stream_error_status(error) == status


@pytest.mark.parametrize(
    ("body", "cls", "retryable"),
    [
        ({"message": "m", "code": 408}, StreamInterruptedError, True),
        ({"message": "m", "code": 409}, StreamInterruptedError, True),
        ({"message": "m", "code": 429}, RateLimitError, True),
        ({"message": "m", "code": 413}, ModelHTTPError, False),
        ({"message": "m", "code": 422}, BadRequestError, False),
        ({"message": "m", "code": 401}, AuthenticationError, False),
        ({"message": "m", "type": "permission_error"}, AuthenticationError, False),
        ({"message": "m", "type": "not_found_error"}, NotFoundError, False),
        ({"message": "m", "type": "server_error"}, StreamInterruptedError, True),
        (None, StreamInterruptedError, True),
    ],
)
def test_sdk_stream_errors_map_by_the_rule(body: Any, cls: type, retryable: bool) -> None:
    """`map_error` on the `openai.APIError` the SDK raises for an ``{"error": ...}`` event."""
    import httpx2

    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    sdk_error = openai.APIError("An error occurred during streaming", request, body=body)
    err = model.map_error(sdk_error, streaming=True)
    assert type(err) is cls and err.retryable is retryable
    assert "An error occurred during streaming" in str(err) or (body and "m" in str(err))


# ----------------------------------------------------------------------------- the fault mode
def test_error_fault_mode_bytes(server: ReplayServer) -> None:
    """The fault really is a well-formed 200 stream: K recorded events, the error, [DONE], the end."""
    import urllib.request

    event = 'event: error\ndata: {"error": {"message": "x"}}'
    url = server.fault_base_url("error-mid-stream", CASE, arg=f"2,{event}") + "/chat/completions"
    assert "%0A" in url and "%7B" in url  # the event travels percent-encoded
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url, data=b"{}"), timeout=10) as r:
        assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
        body = r.read().decode()
    assert body == "".join(ALL_EVENTS[:2]) + event + "\n\n" + "data: [DONE]\n\n"
    bad = server.fault_base_url("error-mid-stream", CASE, arg="2,{not json") + "/chat/completions"
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(urllib.request.Request(bad, data=b"{}"), timeout=10)
    info.value.close()
    assert info.value.code == 422


# ----------------------------------------------------------------------------- labelled as JSON
@pytest.mark.parametrize("shape", ["whole-body", "event-stream"])
async def test_an_error_in_a_json_labelled_answer(tmp_path: Any, shape: str) -> None:
    """A proxy that answers a streamed request with ``application/json`` and status 200: an error
    there (a whole ``{"error": ...}`` body, or an error event in event-stream text) is sorted too."""
    error = {"message": "Invalid 'messages[1].content': string too long.", "type": "invalid_request_error",
             "code": "string_above_max_length"}
    first = ALL_EVENTS[1]
    response: dict[str, Any] = {"status": 200, "headers": {"content-type": "application/json"}}
    if shape == "whole-body":
        response["body"] = {"error": error}
    else:
        response["sse"] = first + "data: " + json.dumps({"error": error}) + "\n\ndata: [DONE]\n\n"
    (tmp_path / "mislabelled.json").write_text(json.dumps({"name": "mislabelled", "response": response}))
    with ReplayServer(cases_dir=tmp_path) as srv:
        texts, exc = await read_until_error(model_at(srv.base_url_for("mislabelled")))
    assert type(exc) is BadRequestError and not exc.retryable  # type: ignore[attr-defined]
    assert "string too long. [invalid_request_error, string_above_max_length]" in str(exc)
    assert "".join(texts) == ("" if shape == "whole-body" else text_of([first]))
    assert_secret_kept(exc)


# ----------------------------------------------------------------------------- cut inside a call
CUT_IN_A_CALL = "".join(split_sse_events(load_case("openai_stream_single_tool_call")["response"]["sse"])[:3])
"""The first three events of a streamed tool call (``{"country`` of its arguments), then a clean end:
no ``finish_reason``, no ``[DONE]``."""


async def test_a_stream_that_ends_inside_a_tool_call_is_a_cut_stream() -> None:
    with answering(("text/event-stream", CUT_IN_A_CALL.encode())) as url:
        model = model_at(url + "/v1")
        try:
            with pytest.raises(StreamInterruptedError, match="inside the tool call 'get_capital'") as info:
                [i async for i in model.request_stream(ModelRequest([UserMessage("hi")]))]
        finally:
            await model.aclose()
    assert info.value.retryable and info.value.provider == "openai"


async def test_a_stream_cut_inside_a_tool_call_is_retried_and_nothing_of_it_is_stored() -> None:
    from nbagent.store import MemoryStore

    whole = load_case(CASE)["response"]["sse"].encode()
    store = MemoryStore()
    with answering(("text/event-stream", CUT_IN_A_CALL.encode()), ("text/event-stream", whole)) as url:
        model = model_at(url + "/v1")
        try:
            events = [e async for e in Agent(model, retry=RETRY, store=store).stream("hi", thread="t")]
        finally:
            await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.output == WHOLE
    assert [e.kind for e in events].count("model-retry") == 1
    loaded = await store.load("t")
    assert loaded is not None and [m.kind for m in loaded.messages] == ["user", "assistant"]
    assert loaded.messages[-1].tool_calls == []
