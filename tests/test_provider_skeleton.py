"""docs/architecture.md's "How to add a provider", followed: its toy provider, run over loopback HTTP.

The page's code block (a chat API shaped like Ollama's own, ``POST /api/chat`` answering in
NDJSON lines, on a plain ``httpx2`` client) is executed as written, and the model it defines is
checked for what the page says it gets from `HTTPModel` without writing it: the client per event
loop, the key scrubbed out of errors and never pickled, the deadline, transport errors, the
whole-body fallbacks, the error table's sorting, the field readers, and a run through `Agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import pickle
import re
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    ResponseBodyError,
    StreamInterruptedError,
    UserError,
)
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest, ModelResponse
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
KEY = "sk-toy-SECRET-0123456789abcdefghij"


def _page_code() -> str:
    """The python block of the page's "How to add a provider" section."""
    section = PAGE.read_text().split("## How to add a provider", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    return code


def _toy_model_class() -> Any:
    """The page's `ToyModel`, defined in a module of its own (a pickle names the class's module)."""
    module = types.ModuleType("tests_toy_provider")
    sys.modules[module.__name__] = module
    with contextlib.redirect_stdout(io.StringIO()):  # the page's print of a repr
        exec(compile(_page_code(), str(PAGE), "exec"), module.__dict__)
    return module.ToyModel


ToyModel = _toy_model_class()


# ----------------------------------------------------------------------------- the toy API's server
def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


WORDS = ["Hel", "lo", " there"]
LAST = {"model": "toy-1", "done": True, "done_reason": "stop", "prompt_eval_count": 7, "eval_count": 3}


class ToyServer:
    """A server on 127.0.0.1 speaking the toy API; `mode` says how it answers the next requests."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                with contextlib.suppress(OSError):  # the client may hang up (a deadline)
                    server.answer(self, body, self.headers.get("Authorization") or "")

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any], auth: str) -> None:
        mode = self.mode
        if mode == "drop-once":
            self.mode = "ok"
        if mode == "unauthorized":  # a server that echoes what it was sent
            return self.send(h, 401, "application/json", json.dumps({"error": f"bad key in {auth!r}"}).encode())
        if mode == "rate-limited":
            return self.send(h, 429, "application/json", b'{"error": "slow down"}', {"Retry-After": "7"})
        if mode == "html":
            return self.send(h, 200, "text/html", b"<html><title>502 Bad Gateway</title></html>")
        if mode == "error-200":
            return self.send(h, 200, "application/json", b'{"error": "invalid option: temperature"}')
        counts = {**LAST, "prompt_eval_count": True} if mode == "boolean-counts" else LAST
        if not body.get("stream") or mode == "whole":
            whole = {**counts, "message": {"role": "assistant", "content": "".join(WORDS)}}
            return self.send(h, 200, "application/json", json.dumps(whole).encode())
        lines = [_line({"message": {"role": "assistant", "content": w}, "done": False}) for w in WORDS]
        if mode in ("drop", "drop-once"):  # the connection closes with the body half sent
            return self.send(h, 200, "application/x-ndjson", lines[0], {"Content-Length": "10000"})
        if mode == "keep-alive":  # a blank line now and then, never the end
            self.send(h, 200, "application/x-ndjson", lines[0], {})
            for _ in range(200):
                time.sleep(0.05)
                h.wfile.write(b"\n")
                h.wfile.flush()
            return None
        if mode.startswith("error-line:"):
            lines.insert(1, _line({"error": mode.split(":", 1)[1]}))
        self.send(h, 200, "application/x-ndjson", b"".join([*lines, _line(counts)]).rstrip(b"\n"))
        return None

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, content_type: str, data: bytes,
             headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        for name, value in (headers if headers is not None else {"Content-Length": str(len(data))}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()


@pytest.fixture
def server() -> Iterator[ToyServer]:
    srv = ToyServer()
    try:
        yield srv
    finally:
        srv.http.shutdown()
        srv.http.server_close()


def toy(url: str, **kwargs: Any) -> Any:
    return ToyModel("toy-1", base_url=url, api_key=KEY, **kwargs)


async def call(model: Any, stream: bool) -> list[Any]:
    request = ModelRequest([UserMessage("hi")])
    try:
        if not stream:
            return [await model.request(request)]
        return [item async for item in model.request_stream(request)]
    finally:
        await model.aclose()


async def failure(model: Any, stream: bool) -> ModelError:
    with pytest.raises(ModelError) as info:
        await asyncio.wait_for(call(model, stream), 15)
    error = info.value
    assert KEY not in str(error) and KEY not in repr(vars(error)) and KEY not in repr(error.args)
    assert error.__cause__ is None and error.__context__ is None  # no HTTP request (with its header) attached
    return error


# ----------------------------------------------------------------------------- what the toy wrote
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_toy_answers_whole_and_streamed(server: ToyServer, stream: bool) -> None:
    items = await call(toy(server.url), stream)
    *deltas, answer = items
    assert deltas == (WORDS if stream else [])
    assert isinstance(answer, ModelResponse) and answer.message.text == "Hello there"
    assert answer.message.finish_reason == "stop" and answer.model == "toy-1"
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.reported) == (7, 3, True)
    sent = server.requests[-1]
    assert sent["path"] == "/api/chat" and sent["auth"] == f"Bearer {KEY}"
    assert sent["body"] == {"model": "toy-1", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


async def test_an_agent_streams_the_toy_and_retries_a_dropped_stream(server: ToyServer) -> None:
    server.mode = "drop-once"
    model = toy(server.url)
    try:
        agent = Agent(model, store=MemoryStore(), retry=Retry(initial_delay=0.01),
                      prices={"toy-1": {"input": 1.0, "output": 2.0}})
        events = [e async for e in agent.stream("hi")]
    finally:
        await model.aclose()
    result = events[-1].result
    assert result.status == "completed" and result.output == "Hello there"
    assert [e.kind for e in events].count("model-retry") == 1
    (row,) = result.usage.rows()
    assert row["provider"] == "toy" and row["input_tokens"] == 7 and row["cost_total"] == pytest.approx(13e-6)


# ----------------------------------------------------------------------------- what the base gave it
async def test_the_key_is_scrubbed_from_an_echoing_error_and_the_table_adds_its_hint(server: ToyServer) -> None:
    server.mode = "unauthorized"
    error = await failure(toy(server.url), stream=True)
    assert isinstance(error, AuthenticationError) and error.status_code == 401 and not error.retryable
    assert "bad key in 'Bearer ***'" in str(error) and "(check TOY_API_KEY)" in str(error)
    assert KEY not in repr(toy(server.url)) and KEY not in repr(vars(toy(server.url)))


async def test_an_error_status_keeps_its_retry_after(server: ToyServer) -> None:
    server.mode = "rate-limited"
    error = await failure(toy(server.url), stream=False)
    assert isinstance(error, RateLimitError) and error.retryable and error.retry_after == 7.0
    assert "slow down" in str(error)


async def test_a_stream_kept_alive_forever_ends_at_the_deadline(server: ToyServer) -> None:
    server.mode = "keep-alive"
    started = time.monotonic()
    error = await failure(toy(server.url, deadline=0.5), stream=True)
    assert isinstance(error, ModelTimeoutError) and error.retryable
    assert "ToyModel(deadline=...)" in str(error) and time.monotonic() - started < 5


async def test_transport_errors_are_the_retried_errors(server: ToyServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again before the call: nothing listens
    error = await failure(toy(nobody), stream=False)
    assert isinstance(error, ModelConnectionError) and error.retryable and "could not reach" in str(error)
    server.mode = "drop"
    error = await failure(toy(server.url), stream=True)
    assert isinstance(error, StreamInterruptedError) and error.retryable and "broke off" in str(error)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_proxy_page_is_named_and_retried(server: ToyServer, stream: bool) -> None:
    server.mode = "html"
    error = await failure(toy(server.url), stream)
    assert isinstance(error, ResponseBodyError) and error.retryable and error.status_code == 200
    assert "an HTML page" in str(error) and "not a toy chat answer" in str(error) and "502 Bad Gateway" in str(error)


async def test_a_streamed_request_answered_whole_is_the_answer(server: ToyServer) -> None:
    server.mode = "whole"
    deltas_and_answer = await call(toy(server.url), stream=True)
    assert deltas_and_answer[0] == "Hello there" and deltas_and_answer[1].message.text == "Hello there"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_errors_sent_with_a_200_are_sorted_by_the_toys_table(server: ToyServer, stream: bool) -> None:
    server.mode = "error-200"
    error = await failure(toy(server.url), stream)
    assert isinstance(error, BadRequestError) and not error.retryable and "invalid option" in str(error)


async def test_an_error_line_in_the_stream_is_sorted_by_the_toys_table(server: ToyServer) -> None:
    server.mode = "error-line:invalid option: top_k"
    refused = await failure(toy(server.url), stream=True)
    assert isinstance(refused, BadRequestError) and not refused.retryable
    server.mode = "error-line:the server is overloaded"
    broken = await failure(toy(server.url), stream=True)
    assert isinstance(broken, StreamInterruptedError) and broken.retryable and "overloaded" in str(broken)


async def test_the_field_readers_count_no_boolean(server: ToyServer) -> None:
    server.mode = "boolean-counts"
    (answer,) = await call(toy(server.url), stream=False)
    assert type(answer.usage.input_tokens) is int and answer.usage.input_tokens == 0


async def test_one_client_per_event_loop_closed_with_the_model(server: ToyServer) -> None:
    model = toy(server.url)
    await model.request(ModelRequest([UserMessage("a")]))
    first = await model.client()
    await model.request(ModelRequest([UserMessage("b")]))
    assert await model.client() is first  # reused within the loop
    await model.aclose()
    assert first.is_closed


def test_the_toy_travels_without_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    data = pickle.dumps(toy("http://127.0.0.1:9"))
    assert KEY.encode() not in data
    monkeypatch.delenv("TOY_API_KEY", raising=False)
    with pytest.raises(UserError, match="TOY_API_KEY"):
        pickle.loads(data)
    monkeypatch.setenv("TOY_API_KEY", "sk-toy-from-the-worker-environment")
    arrived = pickle.loads(data)
    assert arrived._api_key.get() == "sk-toy-from-the-worker-environment" and arrived.base_url == "http://127.0.0.1:9"
