"""`OpenAIResponsesModel` reads a streamed answer's bytes itself (issue #46, part 1).

The ``openai`` SDK's parsed event stream cost about 170 µs of kernel CPU per delta; the model now
reads the HTTP response the SDK returns (``responses.with_raw_response.create``) with nbagent's
event-stream reader (`nbagent.models._sse.json_events`), and keeps the SDK's parsed events behind
``OpenAIResponsesModel(sdk_stream=True)``. Both readers must give the same answer for every
recorded stream, the same errors for broken ones, and the byte reader must read any chunking,
line ends, comments and compression a server or proxy may send.

Real HTTP on loopback (the replay server, or a small chunked server here), through the real SDK.
"""

from __future__ import annotations

import gzip
import json
import pickle
from typing import Any

import pytest

from nbagent.exceptions import BadRequestError, ModelError, ModelResponseError, StreamInterruptedError
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest, ModelResponse
from nbagent.models.openai import OpenAIResponsesModel
from nbagent.models.openai import _sdk_model as sdk_model_module
from tests.loopback import cut, streaming
from tests.wire.replay_server import RESPONSES_CASES_DIR, ReplayServer, all_cases, split_sse_events

KEY = "sk-responses-reader-0123456789abcdef"
CASES = all_cases(RESPONSES_CASES_DIR)
STREAMED = sorted(n for n, c in CASES.items() if "sse" in c["response"])
READERS = pytest.mark.parametrize("sdk_stream", [False, True], ids=["bytes", "sdk"])


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


async def items_of(base_url: str, sdk_stream: bool = False, **kwargs: Any) -> list[Any]:
    model = OpenAIResponsesModel("gpt-4o", base_url=base_url, api_key=KEY, sdk_stream=sdk_stream, **kwargs)
    try:
        return [item async for item in model.request_stream(ModelRequest([UserMessage("hi")]))]
    finally:
        await model.aclose()


async def failure_of(base_url: str, sdk_stream: bool) -> ModelError:
    with pytest.raises(ModelError) as info:
        await items_of(base_url, sdk_stream)
    return info.value


def test_there_are_recorded_streams() -> None:
    assert len(STREAMED) == 13  # every 200 SSE case of the corpus (its README)


@pytest.mark.parametrize("name", STREAMED)
async def test_both_readers_read_every_recorded_stream_alike(server: Any, name: str) -> None:
    ours = await items_of(server.base_url_for(name))
    sdks = await items_of(server.base_url_for(name), sdk_stream=True)
    assert [(type(i), i) for i in ours[:-1]] == [(type(i), i) for i in sdks[:-1]]
    answer, expected = ours[-1], sdks[-1]
    assert isinstance(answer, ModelResponse) and isinstance(expected, ModelResponse)
    assert answer.message.to_dict() == expected.message.to_dict()
    assert (answer.usage, answer.model, answer.request_id) == (expected.usage, expected.model, expected.request_id)


@READERS
async def test_both_readers_fail_alike_on_a_broken_stream(server: Any, sdk_stream: bool) -> None:
    cut = await failure_of(server.fault_base_url("drop-mid-stream", "responses_stream_text", arg=5), sdk_stream)
    assert isinstance(cut, StreamInterruptedError) and cut.retryable
    busy = await failure_of(server.fault_base_url("error-mid-stream", "responses_stream_text", arg=5), sdk_stream)
    assert isinstance(busy, StreamInterruptedError) and busy.retryable and "The server had an error" in str(busy)
    refused = json.dumps({"error": {"type": "invalid_request_error", "message": "bad input"}})
    error = await failure_of(server.fault_base_url("error-mid-stream", "responses_stream_text", arg=f"5,{refused}"),
                             sdk_stream)
    assert isinstance(error, BadRequestError) and "the server ended the stream with an error: bad input" in str(error)


# ----------------------------------------------------------------------------- bytes as a server sends them
async def items_from(chunks: list[bytes], headers: dict[str, str] | None = None, sdk_stream: bool = False) -> list[Any]:
    with streaming(chunks, headers) as url:
        return await items_of(url + "/v1", sdk_stream)


RECORDED = CASES["responses_stream_text"]["response"]["sse"]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("sizes", [[], [1] * 300, [7, 13, 2, 1, 1, 50, 3], [4000]],
                         ids=["whole", "bytes", "odd", "big"])
async def test_the_event_stream_is_read_whatever_its_chunking_and_line_ends(newline: str, sizes: list[int]) -> None:
    """Events cut anywhere (inside a line, a ``\\r\\n``, a two-byte character), CRLF and CR line
    ends, comments, ``data: [DONE]``, a last event without its blank line."""
    text = (": keep-alive\n\n" + RECORDED.replace('"delta":"420"', '"delta":"4\u00e90"') + "data: [DONE]\n\n"
            + ": bye").replace("\n", newline)
    *deltas, answer = await items_from(cut(text.encode(), sizes))
    assert "".join(deltas) == "4\u00e90" + "0 + 42 equals 4242."
    assert answer.message.finish_reason == "stop" and answer.usage.output_tokens > 0


async def test_a_last_event_without_its_blank_line_counts() -> None:
    *deltas, answer = await items_from([RECORDED.rstrip("\n").encode()])
    assert "".join(deltas) == "4200 + 42 equals 4242." and answer.message.text == "4200 + 42 equals 4242."


async def test_a_compressed_event_stream_is_decoded() -> None:
    *deltas, answer = await items_from([gzip.compress(RECORDED.encode())], {"Content-Encoding": "gzip"})
    assert "".join(deltas) == answer.message.text == "4200 + 42 equals 4242."


def _with_event(change: dict[str, Any], kind: str = "response.output_text.delta") -> list[bytes]:
    """The recorded text stream with the first event of type `kind` updated by `change` (a key
    whose value is ... is left out)."""
    out, done = [], False
    for event in split_sse_events(RECORDED):
        head, _, data = event.partition("data: ")
        if not done and f"event: {kind}\n" in head:
            value = {k: v for k, v in {**json.loads(data), **change}.items() if v is not ...}
            event, done = f"{head}data: {json.dumps(value)}\n\n", True
        out.append(event.encode())
    return out


@READERS
@pytest.mark.parametrize(("change", "kind", "words"), [
    ({"delta": 5}, "response.output_text.delta", "its delta is a int, not a string"),
    ({"delta": ...}, "response.output_text.delta", "its delta is missing or null, not a string"),
    ({"item": "msg_1"}, "response.output_item.done", "its item is a str, not an object"),
    ({"response": []}, "response.completed", "its response is a list, not an object"),
], ids=["delta-a-number", "delta-missing", "item-a-string", "response-a-list"])
async def test_an_event_of_the_wrong_shape_is_a_retried_error_naming_it(
    change: dict[str, Any], kind: str, words: str, sdk_stream: bool
) -> None:
    with pytest.raises(ModelResponseError) as info:
        await items_from(_with_event(change, kind), sdk_stream=sdk_stream)
    assert f"malformed {kind} event: {words}" in str(info.value) and info.value.retryable


async def test_an_event_that_is_no_object_or_no_json_is_named() -> None:
    with pytest.raises(ModelResponseError, match="malformed stream event: its event is a list") as info:
        await items_from([b"data: [1, 2]\n\n"])
    assert info.value.retryable
    with pytest.raises(ModelResponseError, match=r"unreadable event: .*'\{not json'") as unreadable:
        await items_from([b"event: response.created\ndata: {not json\n\n"])
    assert not unreadable.value.retryable and unreadable.value.__cause__ is None
    with pytest.raises(ModelResponseError, match="unreadable event"):
        await items_from([b'data: {"type": "x", "t": "\xff"}\n\n'])  # bytes that are not UTF-8


# ----------------------------------------------------------------------------- the switch
async def test_the_switch_picks_the_reader(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    real = sdk_model_module.json_events

    def spy(chunks: Any, provider: Any = None) -> Any:
        used.append("bytes")
        return real(chunks, provider)

    monkeypatch.setattr(sdk_model_module, "json_events", spy)
    await items_of(server.base_url_for("responses_stream_text"))
    assert used == ["bytes"]
    sdk = await items_of(server.base_url_for("responses_stream_text"), sdk_stream=True)
    assert used == ["bytes"] and sdk[-1].message.text == "4200 + 42 equals 4242."


def test_the_switch_travels_with_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # where it arrives (keys never travel)
    model = OpenAIResponsesModel("gpt-4o", api_key=KEY, sdk_stream=True)
    assert pickle.loads(pickle.dumps(model)).sdk_stream is True
    assert OpenAIResponsesModel("gpt-4o", api_key=KEY).sdk_stream is False
