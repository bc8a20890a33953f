"""`OpenAIModel` against HTTP 200 answers that are not chat completions, over real HTTP.

The replay server (tests/wire/replay_server.py, fault modes ``bad-body`` / ``bad-body-once``)
answers with a proxy's HTML page, an empty body, or JSON that is not UTF-8: each must end as a
`ResponseBodyError` (a `ModelResponseError`) naming the status, the content type and the first
bytes (never the key), retried when a retry can help, for whole and streamed requests alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from nbagent import Agent, exceptions
from nbagent.exceptions import ModelResponseError
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore
from tests.loopback import answering
from tests.provider_calls import KEY, call, failure, model_at
from tests.wire.replay_server import ReplayServer


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv

# ----------------------------------------------------------------------------- bad bodies
BAD_BODIES = [
    # kind, content type named, words of the reason, a piece of the first bytes, retryable
    ("html", "text/html", "HTML", "<title>502 Bad Gateway</title>", True),
    ("empty", "application/json", "empty", None, True),
    ("latin1", "application/json", "UTF-8", "Caf\\xe9", False),
    ("empty-sse", "text/event-stream", "empty", None, True),
]


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
@pytest.mark.parametrize(("kind", "content_type", "reason", "excerpt", "retryable"), BAD_BODIES,
                         ids=[b[0] for b in BAD_BODIES])
async def test_a_200_that_is_not_a_completion_is_a_clear_error(
    server: Any, stream: bool, kind: str, content_type: str, reason: str, excerpt: str | None, retryable: bool
) -> None:
    err = await failure(model_at(server.fault_base_url("bad-body", arg=kind)), stream)
    assert isinstance(err, ModelResponseError), repr(err)
    assert isinstance(err, exceptions.ResponseBodyError)
    text = str(err)
    assert err.status_code == 200 and text.startswith("200 ")
    assert err.content_type is not None and err.content_type.startswith(content_type)
    assert content_type in text and reason in text, text
    if excerpt is not None:
        assert excerpt in text and excerpt in err.body
    assert err.retryable is retryable
    assert len(text) < 600  # the first bytes, not the whole page
    assert err.__cause__ is None and err.__context__ is None  # no SDK request (with the key) attached


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
async def test_the_first_bytes_never_show_the_key(server: Any, stream: bool) -> None:
    err = await failure(model_at(server.fault_base_url("bad-body", arg="html-key")), stream)
    assert isinstance(err, exceptions.ResponseBodyError)
    assert "Request header: Bearer ***" in str(err)  # the page quoted it within its first bytes
    assert KEY not in str(err) and KEY not in repr(err.body) and KEY[8:24] not in str(err)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_a_proxy_error_page_is_retried_and_the_retry_completes(server: Any, stream: bool) -> None:
    url = server.fault_base_url("bad-body-once", "openai_stream_text_usage" if stream else "openai_plain_text",
                                arg="html")
    agent = Agent(model_at(url), store=MemoryStore(), retry=Retry(attempts=2, initial_delay=0.01, jitter=0))
    try:
        if stream:
            events = [e async for e in agent.stream("hi")]
            retries = [e for e in events if e.kind == "model-retry"]
            result = events[-1].result
            assert len(retries) == 1 and "text/html" in retries[0].error
        else:
            result = await agent.run("hi")
    finally:
        await agent.model.aclose()  # type: ignore[attr-defined]
    assert result.status == "completed", result.error
    assert result.output
    assert len(result.usage.calls) == 1  # the HTML page made no usage row


async def test_a_body_that_is_not_utf8_fails_at_once(server: Any) -> None:
    before = len(server.chat_requests())
    agent = Agent(model_at(server.fault_base_url("bad-body", arg="latin1")), store=MemoryStore(),
                  retry=Retry(attempts=3, initial_delay=0.01, jitter=0))
    try:
        result = await agent.run("hi")
    finally:
        await agent.model.aclose()  # type: ignore[attr-defined]
    assert result.status == "failed" and isinstance(result.exception, exceptions.ResponseBodyError)
    assert "UTF-8" in result.error
    assert len(server.chat_requests()) - before == 1  # the same bytes would come again: not retried


async def test_a_whole_request_answered_with_an_event_stream_is_read_as_one(server: Any) -> None:
    """A server or proxy that streams whatever was asked: its chunks are the answer (before, the
    SDK handed back the text and the answer was empty)."""
    items = await call(model_at(server.base_url_for("openai_stream_text_usage")), stream=False)
    (response,) = items
    assert response.message.text == "\"This is a test.\"" and response.message.finish_reason == "stop"
    assert response.usage.reported and response.request_id


# ----------------------------------------------------------------------------- more shapes, both calls
MORE_BODIES = {
    "truncated-json": ("application/json", b'{"id": "chatcmpl-1", "choices": [{"mess', {}),
    "json-list": ("application/json", b"[1, 2]", {}),
    "plain-text": ("text/plain", b"upstream connect error or disconnect/reset before headers", {}),
    "wrong-type-html": ("application/json", b"<html><body>oops</body></html>", {}),
    "bad-gzip": ("application/json", b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
@pytest.mark.parametrize("name", MORE_BODIES)
async def test_every_other_bad_body_is_a_typed_error_without_the_key(name: str, stream: bool) -> None:
    """Shapes the wire corpus and the replay server's faults do not send: each is a `ModelError`
    (never an AttributeError or a bare decoder error), and the key never shows."""
    content_type, body, headers = MORE_BODIES[name]
    with answering((content_type, body, headers)) as url:
        err = await failure(model_at(url + "/v1"), stream)
    assert isinstance(err, exceptions.ModelError), repr(err)
    assert KEY not in str(err)
    if name != "bad-gzip":
        assert isinstance(err, exceptions.ResponseBodyError) and err.status_code == 200, repr(err)
