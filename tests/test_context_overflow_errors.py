"""A request too long for the model's context window is a `ContextOverflowError`, over real HTTP.

Through the real ``openai`` and ``anthropic`` SDK clients against a loopback server
(tests/loopback.py) that answers with the bodies the providers send:

- OpenAI's documented 400 (``"code": "context_length_exceeded"``, "This model's maximum context
  length is 128000 tokens. However, your messages resulted in 130419 tokens."), llama.cpp's
  (``"type": "exceed_context_size_error"`` with ``n_prompt_tokens`` / ``n_ctx``: the server's
  ``format_error_response`` and ``server_task_result_error::to_json``, tools/server in
  ggml-org/llama.cpp), vLLM's "maximum context length" message, and the same errors as an event
  inside a started stream;
- Anthropic's recorded ``prompt is too long: 200027 tokens > 200000 maximum``
  (tests/wire/anthropic_messages/anthropic_error_400_prompt_too_long.json, pydantic/pydantic-ai,
  MIT), its ``input length and `max_tokens` exceed context limit``, and that error as a stream's
  ``error`` event.

Each is a `BadRequestError` subclass with ``tokens`` / ``limit`` where the server said them, whose
text is the server's message; an ordinary 400 stays a plain `BadRequestError`; and the run loop's
default `Retry` sends the request once only. Last, the real bundled llama.cpp server (marked
``local_llm``) refuses a prompt longer than its context the same way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import BadRequestError, ContextOverflowError, ModelError
from nbagent.messages import UserMessage
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel
from nbagent.store.memory import MemoryStore
from tests.loopback import answering
from tests.provider_calls import KEY, failure, model_at
from tests.wire.replay_server import ANTHROPIC_CASES_DIR, load_case, split_sse_events

JSON = "application/json"
SSE = "text/event-stream"

OPENAI_MESSAGE = ("This model's maximum context length is 128000 tokens. However, your messages resulted in "
                  "130419 tokens. Please reduce the length of the messages.")
OPENAI_OVERFLOW = {"message": OPENAI_MESSAGE, "type": "invalid_request_error", "param": "messages",
                   "code": "context_length_exceeded"}  # OpenAI's documented body
LLAMACPP_OVERFLOW = {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                     "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}

# (id, the error object, tokens, limit)
OPENAI_OVERFLOWS = [
    ("openai", OPENAI_OVERFLOW, 130419, 128000),
    ("llamacpp", LLAMACPP_OVERFLOW, 5000, 4096),
    ("llamacpp-counts-in-message", {  # the server's own wording: the counts are read from it
        "code": 400, "type": "exceed_context_size_error",
        "message": "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it"},
     4476, 4096),
    ("vllm", {  # no code word: its message, worded as OpenAI's, says it
        "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                   "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages or "
                   "completion.", "type": "BadRequestError", "param": None, "code": 400},
     5000, 4096),
    ("no-counts", {"message": "Your input exceeds the context window of this model. Please adjust your input "
                              "and try again.", "type": "invalid_request_error", "param": "input",
                   "code": "context_length_exceeded"},
     None, None),
]
ORDINARY_400 = {"message": "Invalid value: 'tool'. Supported values are: 'system', 'assistant', 'user'.",
                "type": "invalid_request_error", "param": "messages[0].role", "code": "invalid_value"}


def body(error: dict[str, Any]) -> bytes:
    return json.dumps({"error": error}).encode()


def refused(error: dict[str, Any]) -> tuple[Any, ...]:
    """A loopback reply: HTTP 400 with this error object."""
    return (JSON, body(error), {}, 400)


def openai_stream_then(error: dict[str, Any]) -> tuple[Any, ...]:
    """A loopback reply: HTTP 200, a recorded stream's first two events (role, first text), then
    the error as one more event."""
    events = split_sse_events(load_case("openai_stream_text_usage")["response"]["sse"])
    return (SSE, ("".join(events[:2]) + f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n").encode())


def assert_overflow(err: BaseException, tokens: int | None, limit: int | None) -> None:
    assert isinstance(err, ContextOverflowError), repr(err)
    assert isinstance(err, BadRequestError)
    assert (err.tokens, err.limit) == (tokens, limit)
    assert err.retryable is False
    assert KEY not in str(err) and err.__cause__ is None and err.__context__ is None


def test_it_is_a_public_bad_request_error_that_is_not_retried() -> None:
    from nbagent import exceptions

    assert "ContextOverflowError" in exceptions.__all__ and "ContextOverflowError" in (exceptions.__doc__ or "")
    err = ContextOverflowError("too long", status_code=400, provider="openai", tokens=9, limit=8)
    assert isinstance(err, BadRequestError) and not err.retryable
    assert str(err) == "400 too long (openai)" and (err.tokens, err.limit) == (9, 8)
    assert (ContextOverflowError("too long").tokens, ContextOverflowError("too long").limit) == (None, None)


# ----------------------------------------------------------------------------- OpenAI-compatible servers
@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
@pytest.mark.parametrize(("name", "error", "tokens", "limit"), OPENAI_OVERFLOWS, ids=[r[0] for r in OPENAI_OVERFLOWS])
async def test_an_openai_400_for_too_many_tokens_is_a_context_overflow(
    name: str, error: dict[str, Any], tokens: int | None, limit: int | None, stream: bool
) -> None:
    with answering(refused(error)) as url:
        err = await failure(model_at(url + "/v1"), stream)
    assert_overflow(err, tokens, limit)
    assert err.status_code == 400  # type: ignore[attr-defined]
    assert str(err) == f"400 {error['message']} (openai)"  # the server's words, as any ModelError shows them
    assert err.body == error  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "error", "tokens", "limit"), OPENAI_OVERFLOWS, ids=[r[0] for r in OPENAI_OVERFLOWS])
async def test_an_overflow_error_inside_a_started_stream_is_a_context_overflow(
    name: str, error: dict[str, Any], tokens: int | None, limit: int | None
) -> None:
    with answering(openai_stream_then(error)) as url:
        err = await failure(model_at(url + "/v1"), True)
    assert_overflow(err, tokens, limit)
    given = error["code"] == 400  # a status in the object is shown; none is made up
    assert err.status_code == (400 if given else None)  # type: ignore[attr-defined]
    assert str(err).startswith(f"{'400 ' if given else ''}the server ended the stream with an error: "
                               f"{error['message']}")


@pytest.mark.parametrize("how", ["request", "stream", "mid-stream"])
async def test_an_ordinary_openai_400_stays_a_plain_bad_request(how: str) -> None:
    with answering(openai_stream_then(ORDINARY_400) if how == "mid-stream" else refused(ORDINARY_400)) as url:
        err = await failure(model_at(url + "/v1"), how != "request")
    assert type(err) is BadRequestError and not err.retryable  # type: ignore[attr-defined]
    assert ORDINARY_400["message"] in str(err)


# ----------------------------------------------------------------------------- Anthropic
PROMPT_TOO_LONG = "anthropic_error_400_prompt_too_long"
INPUT_AND_MAX_TOKENS = {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, decrease input "
               "length or `max_tokens` and try again"}}


def recorded(name: str) -> dict[str, Any]:
    """The recorded response body of an Anthropic case (only the response: the request is 1.4 MB)."""
    response = load_case(name, ANTHROPIC_CASES_DIR)["response"]
    assert response["status"] == 400
    return response["body"]  # type: ignore[no-any-return]


def anthropic_at(url: str) -> AnthropicModel:
    return AnthropicModel("claude-haiku-4-5", base_url=url, api_key=KEY)


async def anthropic_failure(model: AnthropicModel, stream: bool) -> ModelError:
    request = ModelRequest([UserMessage("hi")])
    try:
        with pytest.raises(ModelError) as info:
            if stream:
                async for _ in model.request_stream(request):
                    pass
            else:
                await model.request(request)
    finally:
        await model.aclose()
    return info.value


def anthropic_stream_then(error: dict[str, Any]) -> tuple[Any, ...]:
    """HTTP 200: a recorded stream's ``message_start``, then this ``error`` event."""
    first = split_sse_events(load_case("anthropic_stream_text", ANTHROPIC_CASES_DIR)["response"]["sse"])[0]
    assert "message_start" in first
    return (SSE, (first + f"event: error\ndata: {json.dumps(error)}\n\n").encode())


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
@pytest.mark.parametrize(("name", "tokens"), [(PROMPT_TOO_LONG, 200027), ("input-and-max-tokens", 197626)])
async def test_an_anthropic_prompt_too_long_is_a_context_overflow(name: str, tokens: int, stream: bool) -> None:
    answer = recorded(name) if name == PROMPT_TOO_LONG else INPUT_AND_MAX_TOKENS
    with answering((JSON, json.dumps(answer).encode(), {}, 400)) as url:
        err = await anthropic_failure(anthropic_at(url), stream)
    assert_overflow(err, tokens, 200000)
    assert err.status_code == 400 and err.body == answer
    assert str(err) == f"400 {answer['error']['message']} [invalid_request_error] (anthropic)"


async def test_an_anthropic_error_event_saying_the_prompt_is_too_long_is_a_context_overflow() -> None:
    with answering(anthropic_stream_then(recorded(PROMPT_TOO_LONG))) as url:
        err = await anthropic_failure(anthropic_at(url), True)
    assert_overflow(err, 200027, 200000)
    assert err.status_code is None  # the HTTP status was 200
    assert "prompt is too long: 200027 tokens > 200000 maximum [invalid_request_error]" in str(err)


@pytest.mark.parametrize("how", ["request", "stream", "mid-stream"])
async def test_an_ordinary_anthropic_400_stays_a_plain_bad_request(how: str) -> None:
    answer = recorded("anthropic_error_400_invalid_request")
    reply = anthropic_stream_then(answer) if how == "mid-stream" else (JSON, json.dumps(answer).encode(), {}, 400)
    with answering(reply) as url:
        err = await anthropic_failure(anthropic_at(url), how != "request")
    assert type(err) is BadRequestError and not err.retryable
    assert answer["error"]["message"] in str(err)


# ----------------------------------------------------------------------------- through a run
@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_default_retry_sends_an_overflowing_request_once_and_the_run_fails(
    provider: str, stream: bool
) -> None:
    if provider == "openai":
        reply, words = refused(OPENAI_OVERFLOW), OPENAI_MESSAGE
    else:
        answer = recorded(PROMPT_TOO_LONG)
        reply, words = (JSON, json.dumps(answer).encode(), {}, 400), answer["error"]["message"]
    seen: list[str] = []
    with answering(reply, seen=seen) as url:
        model = model_at(url + "/v1") if provider == "openai" else anthropic_at(url)
        agent = Agent(model, store=MemoryStore())  # the default Retry: three attempts for what is retried
        try:
            if stream:
                events = [e async for e in agent.stream("hi")]
                assert "model-retry" not in [e.kind for e in events]
                result = events[-1].result
            else:
                result = await agent.run("hi")
        finally:
            await model.aclose()
    assert len(seen) == 1  # one request: the same request would get the same answer
    assert result.status == "failed"
    assert isinstance(result.exception, ContextOverflowError)
    assert result.error.startswith("ContextOverflowError: 400 ") and words in result.error
    assert [m.kind for m in result.messages] == ["user"]  # nothing of a half answer kept


# ----------------------------------------------------------------------------- the real local model
@pytest.mark.local_llm
@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
async def test_a_prompt_longer_than_the_local_servers_context_is_a_context_overflow(
    local_llm_base_url: str, stream: bool
) -> None:
    """The bundled llama.cpp server (its context is 4096 tokens) refuses it before evaluating
    anything, so this costs no generation."""
    model = OpenAIModel("local-model", base_url=local_llm_base_url, api_key="local", provider="local",
                        settings={"max_tokens": 5}, timeout=120)
    request = ModelRequest([UserMessage("word " * 6000)])
    try:
        with pytest.raises(ContextOverflowError) as info:
            if stream:
                async for _ in model.request_stream(request):
                    pass
            else:
                await model.request(request)
    finally:
        await model.aclose()
    err = info.value
    assert err.status_code == 400 and err.provider == "local"
    assert err.limit is not None and err.tokens is not None and err.tokens > err.limit
    assert "exceeds the available context size" in str(err)
