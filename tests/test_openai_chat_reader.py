"""`OpenAIModel` reads a streamed chat completion's bytes itself, as `OpenAIResponsesModel` does.

The ``openai`` SDK's parsed chunk stream built a ``ChatCompletionChunk`` per delta (pydantic's
``construct``, about a hundred µs of the kernel's only thread per delta: bench/bench_loop_lag.py);
the model now reads the HTTP response the SDK returns (``chat.completions.with_raw_response.create``)
with nbagent's event-stream reader (`nbagent.models._sse.json_events`) and reads each chunk's JSON
object. Every recorded stream keeps its answer (tests/test_openai_wire.py); here: the reader is
the byte reader, any chunking and line ends read alike, and a chunk of the wrong shape is a
retried `ModelResponseError` naming it, not an ``AttributeError`` from deep in the reader.

Real HTTP on loopback (the replay server, or a small chunked server here), through the real SDK.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import ModelResponseError
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel, _sdk_model
from nbagent.retry import Retry
from tests.loopback import answering, cut, streaming
from tests.wire.replay_server import ReplayServer, load_case

KEY = "sk-chat-reader-0123456789abcdef"
RECORDED = load_case("openai_stream_text_usage")["response"]["sse"]  # '"This is a test."' in 6 deltas
TOOL_CALL = load_case("openai_stream_single_tool_call")["response"]["sse"]


async def items_of(base_url: str) -> list[Any]:
    model = OpenAIModel("gpt-4o-mini", base_url=base_url, api_key=KEY)
    try:
        return [item async for item in model.request_stream(ModelRequest([UserMessage("hi")]))]
    finally:
        await model.aclose()


async def items_from(chunks: list[bytes]) -> list[Any]:
    with streaming(chunks) as url:
        return await items_of(url + "/v1")


async def test_the_stream_is_read_from_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[Any] = []
    real = _sdk_model.json_events
    monkeypatch.setattr(_sdk_model, "json_events",
                        lambda chunks, provider: used.append(provider) or real(chunks, provider))
    with ReplayServer() as server:
        *deltas, answer = await items_of(server.base_url_for("openai_stream_text_usage"))
    assert used == ["openai"]  # nbagent's reader, told whose stream it reads
    assert "".join(deltas) == answer.message.text == '"This is a test."'
    assert answer.usage.output_tokens == 5 and answer.message.finish_reason == "stop"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("sizes", [[], [1] * 400, [7, 13, 2, 1, 1, 50, 3]], ids=["whole", "bytes", "odd"])
async def test_a_tool_call_is_read_whatever_the_chunking_and_line_ends(newline: str, sizes: list[int]) -> None:
    text = (": keep-alive\n\n" + TOOL_CALL).replace("\n", newline)
    *deltas, answer = await items_from(cut(text.encode(), sizes))
    assert deltas == [] and answer.message.finish_reason == "tool_calls"
    [call] = answer.message.tool_calls
    assert call.name == "get_capital" and call.args == {"country": "UK"}


def _with_chunk(change: dict[str, Any] | Any, at: int = 2) -> list[bytes]:
    """The recorded text stream with its chunk `at` (a text delta) replaced by `change`: a dict
    of paths (``"choices.0.delta.content"``) to the values put there, or any JSON value whole."""
    events = [e for e in RECORDED.split("\n\n") if e]
    data = json.loads(events[at].partition("data: ")[2])
    if isinstance(change, dict):
        for path, value in change.items():
            *parents, last = path.split(".")
            node = data
            for key in parents:
                node = node[int(key)] if key.isdigit() else node[key]
            node[int(last) if last.isdigit() else last] = value
    else:
        data = change
    events[at] = "data: " + json.dumps(data)
    return [(e + "\n\n").encode() for e in events]


@pytest.mark.parametrize(("change", "words"), [
    ([1, 2], "malformed stream event: its chunk is a list, not an object"),
    ({"choices": "none"}, "malformed chunk event: its choices is a str, not a list"),
    ({"choices.0": 7}, "malformed chunk event: its choice is a int, not an object"),
    ({"choices.0.delta": "text"}, "malformed chunk event: its delta is a str, not an object"),
    ({"choices.0.delta.content": 5}, "malformed chunk event: its content is a int, not a string"),
    ({"choices.0.delta.tool_calls": "f"}, "malformed chunk event: its tool_calls is a str, not a list"),
    ({"choices.0.delta.tool_calls": [3]}, "malformed chunk event: its tool call is a int, not an object"),
], ids=["chunk-a-list", "choices-a-string", "choice-a-number", "delta-a-string", "content-a-number",
        "tool-calls-a-string", "tool-call-a-number"])
async def test_a_chunk_of_the_wrong_shape_is_a_retried_error_naming_it(change: Any, words: str) -> None:
    with pytest.raises(ModelResponseError) as info:
        await items_from(_with_chunk(change))
    assert words in str(info.value) and info.value.retryable


async def test_a_malformed_chunk_once_is_retried_and_the_run_completes() -> None:
    bad = b"".join(_with_chunk({"choices.0.delta": "text"}))
    with answering(("text/event-stream", bad), ("text/event-stream", RECORDED.encode())) as url:
        model = OpenAIModel("gpt-4o-mini", base_url=url + "/v1", api_key=KEY)
        result = await Agent(model, retry=Retry(attempts=2, initial_delay=0, jitter=0)).run("hi")
    assert result.status == "completed" and result.output == '"This is a test."'


async def test_an_unreadable_chunk_is_named() -> None:
    with pytest.raises(ModelResponseError, match=r"unreadable event: .*'\{not json'"):
        await items_from([b"data: {not json\n\n"])
