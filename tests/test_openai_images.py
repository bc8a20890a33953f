"""Images in prompts through `OpenAIModel` over real HTTP (loopback): what the server receives, and
errors that must not be retried (a text-only llama.cpp answers images with HTTP 500)."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nbagent import Agent, Image
from nbagent.exceptions import ModelHTTPError, RateLimitError, ServerError
from nbagent.models.openai import OpenAIModel
from nbagent.retry import Retry
from nbagent.store import MemoryStore
from tests.wire.replay_server import ReplayServer

FAST = Retry(attempts=3, initial_delay=0.01, jitter=0)


def png(size: int = 4) -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), (10, 120, 200)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def server() -> Iterator[ReplayServer]:
    with ReplayServer() as srv:
        yield srv


@pytest.mark.parametrize("stream", [False, True])
async def test_images_are_sent_as_image_url_parts(server: ReplayServer, stream: bool) -> None:
    case = "openai_stream_text_usage" if stream else "openai_plain_text"
    model = OpenAIModel("gpt-4o-mini", base_url=server.base_url_for(case), api_key="sk-test")
    agent = Agent(model, store=MemoryStore())
    data = png()
    before = len(server.chat_requests())
    try:
        prompt = ["What colour is this?", data, Image.from_url("https://example.com/cat.jpg", detail="low")]
        if stream:
            result = [e async for e in agent.stream(prompt)][-1].result
        else:
            result = await agent.run(prompt)
        assert result.status == "completed"
        # the next request of the thread sends the same parts again (history replayed as stored)
        await agent.run("And the other one?", thread=result.thread)
    finally:
        await model.aclose()
    first, second = (r["body"] for r in server.chat_requests()[before:])
    expected = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What colour is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
        ],
    }
    assert first["messages"] == [expected]
    assert second["messages"][0] == expected
    assert second["messages"][-1] == {"role": "user", "content": "And the other one?"}


async def test_an_image_alone_sends_no_empty_text_part(server: ReplayServer) -> None:
    model = OpenAIModel("gpt-4o-mini", base_url=server.base_url_for("openai_plain_text"), api_key="sk-test")
    before = len(server.chat_requests())
    try:
        await Agent(model, store=MemoryStore()).run(Image(png()))
    finally:
        await model.aclose()
    (sent,) = [r["body"] for r in server.chat_requests()[before:]]
    assert [p["type"] for p in sent["messages"][0]["content"]] == ["image_url"]


# ------------------------------------------------------------------ errors that must not be retried
class _Answer(BaseHTTPRequestHandler):
    status = 500
    body: dict[str, Any] = {}
    count = 0

    def do_POST(self) -> None:
        type(self).count += 1
        self.rfile.read(int(self.headers.get("content-length", 0)))
        data = json.dumps(self.body).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(status: int, body: dict[str, Any]) -> tuple[ThreadingHTTPServer, type[_Answer]]:
    handler = type("Answer", (_Answer,), {"status": status, "body": body, "count": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, handler


@pytest.mark.parametrize(("status", "error", "cls", "why"), [
    # llama.cpp's exact answer when a text-only model gets an image (seen with the bundled model)
    (500, {"code": 500, "message": "image input is not supported - hint: if this is unexpected, you may need "
           "to provide the mmproj", "type": "server_error"}, ServerError, "input is not supported"),
    (501, {"code": 501, "message": "This server does not support embeddings.", "type": "not_supported_error"},
     ServerError, "does not implement"),
    (429, {"message": "You exceeded your current quota, please check your plan and billing details.",
           "type": "insufficient_quota", "code": "insufficient_quota"}, RateLimitError, "quota is used up"),
])
async def test_errors_that_will_repeat_are_not_retried(
    status: int, error: dict[str, Any], cls: type[ModelHTTPError], why: str
) -> None:
    httpd, handler = serve(status, {"error": error})
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="sk-test")
    try:
        result = await Agent(model, store=MemoryStore(), retry=FAST).run(["What is this?", png()])
    finally:
        await model.aclose()
        httpd.shutdown()
        httpd.server_close()
    assert result.status == "failed"
    assert handler.count == 1  # one request, no retries
    assert isinstance(result.exception, cls) and not result.exception.retryable
    assert error["message"][:30] in str(result.exception) and why in str(result.exception)


async def test_an_ordinary_500_is_still_retried() -> None:
    httpd, handler = serve(500, {"error": {"message": "The server had an error", "type": "server_error"}})
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="sk-test")
    try:
        result = await Agent(model, store=MemoryStore(), retry=FAST).run("hi")
    finally:
        await model.aclose()
        httpd.shutdown()
        httpd.server_close()
    assert result.status == "failed" and handler.count == 3


@pytest.mark.local_llm
@pytest.mark.timeout(300)
async def test_a_text_only_local_model_refuses_an_image_at_once(local_llm_base_url: str) -> None:
    model = OpenAIModel("local-model", base_url=local_llm_base_url, api_key="local", provider="local",
                        settings={"max_tokens": 8})
    try:
        result = await Agent(model, store=MemoryStore(), retry=FAST).run(["What is this?", png()])
    finally:
        await model.aclose()
    assert result.status == "failed"
    assert isinstance(result.exception, ServerError) and not result.exception.retryable
    assert "image input is not supported" in str(result.exception)
    assert result.usage.requests == 0  # no answer, no usage row
