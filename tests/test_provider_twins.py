"""The three HTTP providers answer alike where their code was once written twice, over real HTTP.

`OpenAIModel` (Chat Completions), `OpenAIResponsesModel` and `AnthropicModel` share one base
(`nbagent.models._http.HTTPModel`). Before it, each wrote its own whole-body fallbacks, key
scrubbing and field readers, and they disagreed; each test here failed for at least one provider
before:

- the key a server echoes never shows in any error, whichever part of the provider built it (a
  stream reader quoting a tool call's name or a stop reason, a refusal's explanation): only
  Anthropic scrubbed nbagent's own errors, and only on one path;
- a 2xx body that is not the answer asked for is named (HTML, empty, JSON that is no answer),
  an error object sent with a 2xx status is sorted like the error it is, a whole answer to a
  streamed request (and an event stream to a whole one) is read as the answer: Anthropic named
  none of them on a streamed request, Chat Completions took an error object or ``{"ok": true}``
  for an empty answer;
- a token count that is a JSON ``true`` is no count: Chat Completions and Responses counted it as 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from nbagent.exceptions import BadRequestError, ModelError, ResponseBodyError, StreamInterruptedError
from nbagent.messages import UserMessage
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.base import Model, ModelRequest, ModelResponse
from nbagent.models.openai import OpenAIModel, OpenAIResponsesModel
from tests.loopback import answering

KEY = "sk-twins-SECRET-0123456789abcdefghij"

PROVIDERS: dict[str, Callable[[str], Model]] = {
    "chat": lambda url: OpenAIModel("m", base_url=url + "/v1", api_key=KEY),
    "responses": lambda url: OpenAIResponsesModel("m", base_url=url + "/v1", api_key=KEY),
    "anthropic": lambda url: AnthropicModel("m", base_url=url, api_key=KEY),
}


def _whole(provider: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole answer "hi" as each API spells it."""
    if provider == "chat":
        return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": usage or {"prompt_tokens": 3, "completion_tokens": 1}}
    if provider == "responses":
        return {"id": "resp_1", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
                "usage": usage or {"input_tokens": 3, "output_tokens": 1}}
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": usage or {"input_tokens": 3, "output_tokens": 1}}


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e.get('type', 'message')}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


async def _call(model: Any, stream: bool) -> ModelResponse:
    """One call: the answer (the last item of a stream)."""
    request = ModelRequest([UserMessage("hi")])
    try:
        if not stream:
            return await model.request(request)
        items = [item async for item in model.request_stream(request)]
    finally:
        await model.aclose()
    assert isinstance(items[-1], ModelResponse)
    return items[-1]


async def _failure(model: Any, stream: bool) -> ModelError:
    with pytest.raises(ModelError) as info:
        await _call(model, stream)
    return info.value


def _shows_no_key(error: BaseException) -> None:
    assert KEY not in str(error) and KEY not in repr(error.args) and KEY not in repr(vars(error)), vars(error)


# ----------------------------------------------------------------------------- the key, whoever built the error
_CUT_IN_A_NAMED_PLACE = {
    # a stream that ends inside a tool call whose name (or at a stop reason that) echoes the key
    "chat": _sse({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": None, "delta": {"role": "assistant", "tool_calls": [
                      {"index": 0, "id": "call_1", "type": "function",
                       "function": {"name": f"tool {KEY}", "arguments": '{"a"'}}]}}]}),
    "responses": _sse({"type": "response.created", "sequence_number": 0,
                       "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}},
                      {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
                       "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": f"tool {KEY}",
                                "arguments": "", "status": "in_progress"}}),
    "anthropic": _sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                            "model": "m", "content": [],
                                                            "usage": {"input_tokens": 3, "output_tokens": 1}}},
                      {"type": "message_delta", "delta": {"stop_reason": f"echo {KEY}"},
                       "usage": {"output_tokens": 2}}),
}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cut_stream_that_quotes_the_key_is_named_without_it(provider: str) -> None:
    """The reader names where the stream broke off (the tool call's name, the last stop reason),
    words the server chose: a server echoing the request's headers there never gets the key shown."""
    with answering(("text/event-stream", _CUT_IN_A_NAMED_PLACE[provider])) as url:
        error = await _failure(PROVIDERS[provider](url), stream=True)
    assert isinstance(error, StreamInterruptedError) and error.retryable
    assert "***" in str(error)
    _shows_no_key(error)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_refusal_whose_explanation_quotes_the_key_keeps_it_out_of_the_answer_error(stream: bool) -> None:
    """Anthropic's stop reason ``refusal`` puts a `ContentFilterError` on the answer, with the
    server's explanation: scrubbed like every error a call raises."""
    details = {"category": "cyber", "explanation": f"echoed {KEY}"}
    if stream:
        body = _sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                           "model": "m", "content": [],
                                                           "usage": {"input_tokens": 3, "output_tokens": 1}}},
                    {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": details},
                     "usage": {"output_tokens": 2}},
                    {"type": "message_stop"})
        reply = ("text/event-stream", body)
    else:
        reply = ("application/json", json.dumps({**_whole("anthropic"), "stop_reason": "refusal",
                                                 "stop_details": details}).encode())
    with answering(reply) as url:
        answer = await _call(PROVIDERS["anthropic"](url), stream)
    assert answer.error is not None and "echoed ***" in str(answer.error)
    _shows_no_key(answer.error)


# ----------------------------------------------------------------------------- 2xx bodies that are not what was asked
_ERROR_200 = json.dumps({"error": {"type": "invalid_request_error", "message": f"bad thing; key {KEY}"}}).encode()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("content_type", "body", "words", "retryable"), [
    ("text/html", b"<html><title>502 Bad Gateway</title></html>", "an HTML page", True),
    ("application/json", b"", "an empty body", True),
    ("application/json", b'{"ok": true}', "JSON that is not", False),
], ids=["html", "empty", "json-no-answer"])
async def test_a_2xx_body_that_is_no_answer_is_named_alike(
    provider: str, stream: bool, content_type: str, body: bytes, words: str, retryable: bool
) -> None:
    with answering((content_type, body)) as url:
        error = await _failure(PROVIDERS[provider](url), stream)
    assert isinstance(error, ResponseBodyError), repr(error)
    assert words in str(error) and error.status_code == 200 and error.retryable is retryable


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_error_object_sent_with_status_200_is_the_error_it_names(provider: str, stream: bool) -> None:
    """``{"error": {"type": "invalid_request_error", ...}}`` with a 200: the request is refused
    (not retried), in the server's words, the key scrubbed."""
    with answering(("application/json", _ERROR_200)) as url:
        error = await _failure(PROVIDERS[provider](url), stream)
    assert isinstance(error, BadRequestError) and not error.retryable, repr(error)
    assert "bad thing; key ***" in str(error)
    _shows_no_key(error)


_BUSY_200 = json.dumps({"error": {"type": "server_error", "message": "busy; try again"}}).encode()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_error_object_as_the_whole_answer_speaks_of_no_stream(provider: str, stream: bool) -> None:
    """An error object sent as the whole body (JSON, status 200) was named "the server ended the
    stream with an error" or "the streamed answer broke off", although no stream came (issue #43,
    item 14), for every provider and whether or not a stream was asked for. A refusal says the
    server answered with an error; an error that is not one (a server error) is a retried
    `ResponseBodyError`, the class of every other 2xx body that is no answer."""
    with answering(("application/json", _ERROR_200)) as url:
        refused = await _failure(PROVIDERS[provider](url), stream)
    with answering(("application/json", _BUSY_200)) as url:
        busy = await _failure(PROVIDERS[provider](url), stream)
    assert isinstance(refused, BadRequestError) and not refused.retryable
    assert str(refused).startswith("the server answered with an error: bad thing; key ***"), str(refused)
    assert isinstance(busy, ResponseBodyError) and busy.retryable, repr(busy)
    assert str(busy).startswith("the server answered with an error: busy; try again"), str(busy)
    for error in (refused, busy):
        assert "stream" not in str(error)


async def test_an_error_event_inside_a_stream_still_says_so() -> None:
    """The same objects inside a started event stream keep their words (the stream ended, or broke off)."""
    refused = _sse({"type": "error", "error": {"type": "invalid_request_error", "message": "bad thing"}})
    busy = _sse({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    with answering(("text/event-stream", refused)) as url:
        error = await _failure(PROVIDERS["anthropic"](url), stream=True)
    assert isinstance(error, BadRequestError) and str(error).startswith("the server ended the stream with an error: ")
    with answering(("text/event-stream", busy)) as url:
        error = await _failure(PROVIDERS["anthropic"](url), stream=True)
    assert isinstance(error, StreamInterruptedError) and str(error).startswith("the streamed answer broke off: busy")


def test_a_failed_whole_response_speaks_of_no_stream() -> None:
    model = OpenAIResponsesModel("m", api_key=KEY)
    with pytest.raises(BadRequestError) as info:
        model.map_completion({"object": "response", "status": "failed", "output": [],
                              "error": {"code": "invalid_prompt", "message": "flagged"}})
    assert str(info.value).startswith("the server answered with an error: flagged")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_streamed_request_answered_whole_is_read_as_the_answer(provider: str) -> None:
    """A server or proxy that ignores ``stream``: its whole answer is the answer, its text one delta."""
    with answering(("application/json", json.dumps(_whole(provider)).encode(), {"x-request-id": "req_1",
                                                                                "request-id": "req_1"})) as url:
        model: Any = PROVIDERS[provider](url)
        try:
            items = [item async for item in model.request_stream(ModelRequest([UserMessage("hi")]))]
        finally:
            await model.aclose()
    assert items[:-1] == ["hi"]
    answer = items[-1]
    assert isinstance(answer, ModelResponse) and answer.message.text == "hi" and answer.request_id == "req_1"
    assert answer.usage.input_tokens == 3 and answer.usage.output_tokens == 1


def _anthropic_stream(text: str) -> bytes:
    return _sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                       "model": "m", "content": [],
                                                       "usage": {"input_tokens": 3, "output_tokens": 1}}},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
                {"type": "message_stop"})


@pytest.mark.parametrize("label", ["text/event-stream", "application/json"])
async def test_an_anthropic_event_stream_answering_a_whole_request_or_mislabelled_is_the_answer(label: str) -> None:
    """As with Chat Completions: a server that streams whatever is asked (an event stream to a
    whole request), or labels its stream as JSON, still gives its answer."""
    with answering((label, _anthropic_stream("hello"))) as url:
        whole = await _call(PROVIDERS["anthropic"](url), stream=False)
        streamed = await _call(PROVIDERS["anthropic"](url), stream=True)
    for answer in (whole, streamed):
        assert answer.message.text == "hello" and answer.message.finish_reason == "stop"
        assert answer.usage.output_tokens == 2


# ----------------------------------------------------------------------------- one field reader
_BOOLEAN_COUNTS = {
    "chat": {"prompt_tokens": True, "completion_tokens": 5},
    "responses": {"input_tokens": True, "output_tokens": 5},
    "anthropic": {"input_tokens": True, "output_tokens": 5},
}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_token_count_that_is_a_boolean_counts_nothing(provider: str) -> None:
    body = json.dumps(_whole(provider, _BOOLEAN_COUNTS[provider])).encode()
    with answering(("application/json", body)) as url:
        answer = await _call(PROVIDERS[provider](url), stream=False)
    usage = answer.usage
    assert type(usage.input_tokens) is int and usage.input_tokens == 0 and usage.output_tokens == 5


# ----------------------------------------------------------------------------- the event loop's turn
def _long_stream(provider: str, n: int) -> bytes:
    """A streamed answer of `n` text deltas "x", as each API spells it."""
    if provider == "chat":
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        return b"".join([
            *(f"data: {json.dumps({**chunk, 'choices': [{'index': 0, 'delta': {'content': 'x'}}]})}\n\n".encode()
              for _ in range(n)),
            f"data: {json.dumps({**chunk, 'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            .encode(), b"data: [DONE]\n\n"])
    if provider == "responses":
        done = {**_whole("responses"), "output": [{**_whole("responses")["output"][0], "content": [
            {"type": "output_text", "text": "x" * n, "annotations": []}]}]}
        return _sse(*({"type": "response.output_text.delta", "output_index": 0, "delta": "x"} for _ in range(n)),
                    {"type": "response.completed", "response": done})
    return _sse(
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                              "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}} for _ in range(n)),
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": n}},
        {"type": "message_stop"})


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_burst_of_buffered_events_leaves_the_event_loop_its_turns(provider: str) -> None:
    """A whole stream arriving at once (a fast server, a connection catching up) is read without
    an await that suspends, except one per socket read (~230 events here). The reading now lets
    the loop run every few milliseconds: a consumer spending 1 ms per delta (a view, a notebook's
    other work) no longer holds the kernel's loop for a whole socket read. Counted in turns of a
    ticker task, not in times, so a busy machine cannot fail it: it had under 10 turns, it has
    one per ~5 ms of reading (about 200)."""
    import asyncio
    import time

    n = 1000
    turns, running = [0], [True]

    async def ticker() -> None:
        while running[0]:
            await asyncio.sleep(0)
            turns[0] += 1

    with answering(("text/event-stream", _long_stream(provider, n))) as url:
        model = PROVIDERS[provider](url)
        try:
            items = []
            stream = model.request_stream(ModelRequest([UserMessage("hi")]))
            first = await stream.__anext__()  # the request made, the first event read
            task = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            turns[0] = 0
            async for item in stream:
                items.append(item)
                end = time.perf_counter() + 0.001
                while time.perf_counter() < end:  # the consumer's own work for each delta
                    pass
            counted = turns[0]
            running[0] = False
            await task
        finally:
            await model.aclose()
    assert "".join([first, *items[:-1]]) == "x" * n
    assert counted >= 50, counted
