#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (standard library only).

Where `replay_server` replays recorded answers whatever is asked, this one answers by what the
conversation holds, so many concurrent conversations (a batch) each get their own answers:

- the last message is the user's, and tools are offered: a call of the first tool, with its first
  parameter set to the prompt (the first user message's text);
- the last message is a tool result: the text ``answer to <prompt>: <tool result>``;
- no tools: the text ``answer to <prompt>``.

Prompts can ask for faults: one containing ``[fail]`` gets HTTP 400 with an OpenAI-style error;
one containing ``[429]`` gets HTTP 429 with ``retry-after: 0.2`` on its first request.

It counts what a test asserts on the server's side: requests per prompt, tool results received per
prompt, requests running at once (``max_active``). Answers can wait `delay` seconds, and a gate
can hold every request after the first ``hold_after`` until `release` (to catch a batch
mid-flight: kill a worker, press Stop). It is asyncio with HTTP/1.1 keep-alive, so a thousand
20 ms answers cost it little CPU.

Python (a thread of the test process)::

    with ScriptedServer(delay=0.02) as server:
        model = OpenAIModel("scripted", base_url=server.base_url)
        ...
        server.requests_for("question 3")          # 2: the tool call, then the answer

Command line (its own process, as `bench/bench_cluster.py` runs it; prints ``PORT <n>``)::

    python tests/wire/scripted_server.py --delay 0.02 [--port 0]

``GET /stats`` answers the counters as JSON; ``POST /reset`` clears them.

Its HTTP side, `LoopbackServer` (keep-alive connections, JSON or `EventStream` answers, the
thread and its loop), is shared with `tests/wire/window_server.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextvars
import json
import threading
import time
from typing import Any, TypeVar

__all__ = ["REQUEST_HEADERS", "EventStream", "LoopbackServer", "ScriptedServer", "message_text"]

REQUEST_HEADERS: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("REQUEST_HEADERS")
"""The headers of the request being answered (names in lower case), for a subclass's `_answer`."""

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}

_S = TypeVar("_S", bound="LoopbackServer")


class EventStream(list[dict[str, Any]]):
    """A payload `LoopbackServer` sends as ``text/event-stream``, as OpenAI does: each item (a
    JSON object) one ``data: ...`` event in its own HTTP chunk, then ``data: [DONE]``."""


class LoopbackServer:
    """An asyncio HTTP/1.1 keep-alive server on a daemon thread with its own event loop: what
    `ScriptedServer` and `tests.wire.window_server.WindowServer` share. A subclass answers in
    `_answer` with ``(status, extra headers, payload)``: the payload is sent as JSON, or as an
    event stream when it is an `EventStream`.

    Args:
        host, port: where to listen (port 0: a free one).
    """

    thread_name = "loopback-server"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.connections = 0
        """Client connections open now."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control
    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``, for a client's ``base_url``."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self: _S) -> _S:
        """Listen on a daemon thread; returns once the port is known."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self._listen())
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name=self.thread_name, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def serve_until_interrupted(self) -> None:
        """The command line's loop: print ``PORT <n>`` and serve until Ctrl-C (or SIGINT)."""
        print(f"PORT {self.port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            self.stop()

    def stop(self) -> None:
        """Close the listener and the open connections, and end the thread."""
        loop = self._loop
        if loop is None or self._thread is None:
            return
        loop.call_soon_threadsafe(self._stopping)

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # open keep-alive connections
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        self._thread.join(10)

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _stopping(self) -> None:
        """Run on the server's loop when `stop` begins, before the connections are cancelled."""

    # ------------------------------------------------------------------ HTTP
    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        with self._lock:
            self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in
                           (line.split(":", 1) for line in lines[1:] if ":" in line)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                REQUEST_HEADERS.set(headers)
                status, extra, payload = await self._answer(method, path, body, peer_port)
                if isinstance(payload, EventStream):
                    await _send_events(writer, status, extra, payload)
                    continue
                data = json.dumps(payload).encode()
                head_out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
                            "content-type: application/json", f"content-length: {len(data)}",
                            *(f"{k}: {v}" for k, v in extra.items())]
                writer.write(("\r\n".join(head_out) + "\r\n\r\n").encode() + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            with self._lock:
                self.connections -= 1
            writer.close()

    async def _answer(self, method: str, path: str, body: bytes, peer_port: int) -> tuple[int, dict[str, str], Any]:
        """``(status, extra headers, payload)`` for one request: the subclass's script."""
        raise NotImplementedError


async def _send_events(writer: asyncio.StreamWriter, status: int, extra: dict[str, str], events: EventStream) -> None:
    head_out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
                "content-type: text/event-stream; charset=utf-8", "transfer-encoding: chunked",
                *(f"{k}: {v}" for k, v in extra.items())]
    writer.write(("\r\n".join(head_out) + "\r\n\r\n").encode())
    for event in [*(f"data: {json.dumps(e)}" for e in events), "data: [DONE]"]:
        data = (event + "\n\n").encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


class ScriptedServer(LoopbackServer):
    """The server; `start` runs it on a daemon thread with its own event loop (see module doc).

    Args:
        delay: seconds each answer waits before it is sent.
        host, port: where to listen (port 0: a free one).
    """

    thread_name = "scripted-server"

    def __init__(self, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.delay = delay
        self.hold_after: int | None = None
        """Hold every request after this many were answered, until `release` (None: never)."""
        self.requests: collections.Counter[str] = collections.Counter()
        self.tool_results: collections.Counter[str] = collections.Counter()
        self.answered: collections.Counter[str] = collections.Counter()
        """Prompts whose final answer (text) was sent."""
        self.served = 0
        self.active = 0
        self.max_active = 0
        self.held: list[tuple[str, int]] = []
        """(prompt, client port) of each request the gate holds now."""
        self._open: asyncio.Event | None = None

    def hold(self, after: int) -> None:
        """Hold every request once `after` requests in all have been answered."""
        with self._lock:
            self.hold_after = after

    def release(self) -> None:
        """Answer the held requests, and hold no more."""
        with self._lock:
            self.hold_after = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._release)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.tool_results.clear()
            self.answered.clear()
            self.served = self.max_active = 0

    def requests_for(self, prompt: str) -> int:
        with self._lock:
            return self.requests[prompt]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"served": self.served, "max_active": self.max_active, "active": self.active,
                    "open_connections": self.connections,
                    "held": len(self.held), "requests": dict(self.requests),
                    "tool_results": dict(self.tool_results), "answered": dict(self.answered)}

    def _release(self) -> None:
        if self._open is not None:
            self._open.set()

    def _stopping(self) -> None:
        self._release()

    # ------------------------------------------------------------------ HTTP
    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        await super()._listen()

    async def _answer(self, method: str, path: str, body: bytes, peer_port: int) -> tuple[int, dict[str, str], Any]:
        if method == "GET" and path.endswith("/stats"):
            return 200, {}, self.stats()
        if method == "POST" and path.endswith("/reset"):
            self.reset()
            return 200, {}, {"ok": True}
        if method != "POST" or not path.endswith("/chat/completions"):
            return 404, {}, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}
        request = json.loads(body or b"{}")
        messages = request.get("messages", [])
        prompt = next((message_text(m) for m in messages if m.get("role") == "user"), "")
        with self._lock:
            self.requests[prompt] += 1
            first_time = self.requests[prompt] == 1
            if messages and messages[-1].get("role") == "tool":
                self.tool_results[prompt] += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            await self._gate(prompt, peer_port)
            if self.delay:
                await asyncio.sleep(self.delay)
            if "[fail]" in prompt:
                return 400, {}, {"error": {"message": f"the scripted server refuses {prompt!r}",
                                           "type": "invalid_request_error", "code": None, "param": None}}
            if "[429]" in prompt and first_time:
                return 429, {"retry-after": "0.2"}, {"error": {"message": "slow down", "type": "rate_limit_error"}}
            return 200, {}, self._completion(request, messages, prompt)
        finally:
            with self._lock:
                self.active -= 1
                self.served += 1

    async def _gate(self, prompt: str, peer_port: int) -> None:
        assert self._open is not None
        with self._lock:
            holding = self.hold_after is not None and self.served >= self.hold_after
        if not holding:
            return
        self._open.clear()
        entry = (prompt, peer_port)
        with self._lock:
            self.held.append(entry)
        try:
            await self._open.wait()
        finally:
            with self._lock:
                self.held.remove(entry)

    def _completion(self, request: dict[str, Any], messages: list[dict[str, Any]], prompt: str) -> dict[str, Any]:
        tools = request.get("tools") or []
        last = messages[-1] if messages else {}
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if last.get("role") == "user" and tools:
            function = tools[0]["function"]
            params = list((function.get("parameters") or {}).get("properties") or {})
            args = {params[0]: prompt} if params else {}
            call_id = f"call_{abs(hash((prompt, len(messages)))) % 10**12}"
            message["tool_calls"] = [{"id": call_id, "type": "function",
                                      "function": {"name": function["name"], "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        else:
            result = message_text(last) if last.get("role") == "tool" else None
            message["content"] = f"answer to {prompt}" + (f": {result}" if result is not None else "")
            finish = "stop"
            with self._lock:
                self.answered[prompt] += 1
        return {
            "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text: its string content, or its text parts joined ("" for none)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ScriptedServer(delay=args.delay, port=args.port).start()
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
