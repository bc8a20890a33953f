#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server with a small context window (127.0.0.1,
standard library only), for tests of context compaction.

It measures each request in tokens by one documented rule, `request_tokens` (tests use the same
function): ``ceil(len(text) / 4)`` of every message's text (its string content, or its text parts
joined), plus ``ceil(len(name + arguments) / 4)`` of every tool call, plus 4 tokens a message, plus
``ceil(len(json.dumps(tools)) / 4)`` when the request offers tools.

A request larger than ``window`` tokens is refused as OpenAI refuses it: HTTP 400, type
``invalid_request_error``, param ``messages``, code ``context_length_exceeded`` and OpenAI's
sentence ("This model's maximum context length is ..."); a streamed one too, before any event.
Any other request is answered (as SSE chunks when ``stream`` is true, ``usage`` in the last chunk
when ``stream_options.include_usage`` is set), by what the conversation holds:

- no tools offered (what a compactor's summary request looks like): the text
  ``SUMMARY(<k> messages, <t> tokens): <digest>``, ``k`` and ``t`` the request's message count
  and size, the digest the first three words of each user message, joined by ``"; "`` (at most
  200 characters);
- tools offered, the last message the user's: a call of the tool named ``tool`` (default: the
  first offered) with the arguments ``{"n": <the first integer in that message, or 0>}``;
- tools offered, anything else last (a tool result): the text
  ``turn done: <the first 40 characters of the last user message>``.

``usage.prompt_tokens`` is the measured size; ``completion_tokens`` is the answer's text and tool
calls by the same rule without the 4 tokens of a message. Tool call ids are ``call_000001``,
``call_000002``, ... in the order the server makes them, unique for the server's life.

The server keeps every request body it received (``requests``, refused ones too), their sizes
(``sizes``), the refusals (``refused``) and the largest accepted size (``max_prompt_tokens``).
`paired` says whether a request's tool calls and tool results match, for tests to assert on each.

Python (a thread of the test process)::

    with WindowServer(window=4000) as server:
        model = OpenAIModel("window", base_url=server.base_url)
        ...
        assert all(paired(body) for body in server.requests)

Command line (its own process; prints ``PORT <n>``)::

    python tests/wire/window_server.py --window 4000 [--tool NAME] [--port 0]

``GET /stats`` answers the counters as JSON; ``POST /reset`` clears them.

`hold` makes the server keep the requests a test picks (e.g. the summary request of a compaction,
``hold(lambda body: not body.get("tools"))``) unanswered until `release`, to catch a client
mid-request (and kill it); a held request is recorded when it arrives, counted in `held`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

if __package__:
    from .scripted_server import EventStream, LoopbackServer, message_text
else:  # run as a script: this file's folder is sys.path[0]
    from scripted_server import EventStream, LoopbackServer, message_text  # type: ignore[no-redef]

__all__ = ["WindowServer", "context_length_error", "paired", "request_tokens", "text_tokens"]

MESSAGE_TOKENS = 4
"""Tokens each message costs besides its text and tool calls."""
DIGEST_WORDS = 3
"""Words of each user message in a summary's digest."""
DIGEST_CHARS = 200
"""At most this many characters of digest in a summary."""
TURN_DONE_CHARS = 40
"""Characters of the last user message quoted in ``turn done: ...``."""


# ---------------------------------------------------------------------------------- the rules
def text_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the tokens of a text by the server's rule."""
    return -(-len(text) // 4)


def _calls_tokens(message: dict[str, Any]) -> int:
    total = 0
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        total += text_tokens((function.get("name") or "") + (function.get("arguments") or ""))
    return total


def request_tokens(body: dict[str, Any]) -> int:
    """A chat-completions request body's size in tokens, by the rule the module doc gives."""
    size = sum(MESSAGE_TOKENS + text_tokens(message_text(m)) + _calls_tokens(m) for m in body.get("messages") or [])
    tools = body.get("tools")
    return size + (text_tokens(json.dumps(tools)) if tools else 0)


def paired(body: dict[str, Any]) -> bool:
    """Whether a request's tool calls and results match, as OpenAI requires: each ``tool_calls``
    entry of an assistant message has a ``tool`` message with its ``tool_call_id`` before the next
    message of another role, and each ``tool`` message answers (once) a call of the assistant
    message before it."""
    calls: set[str] = set()  # the call ids of the assistant message before these tool messages
    waiting: set[str] = set()  # of those, the ones not answered yet
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                return False  # answers no call, or one already answered
            waiting.discard(call_id)
            continue
        if waiting:
            return False
        calls = {c.get("id") for c in message.get("tool_calls") or []} if message.get("role") == "assistant" else set()
        waiting = set(calls)
    return not waiting


def context_length_error(window: int, tokens: int) -> dict[str, Any]:
    """The body OpenAI answers (HTTP 400) to a request of `tokens` tokens for a `window`-token model."""
    return {"error": {
        "message": f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                   f"{tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
    }}


# ---------------------------------------------------------------------------------- the server
class Holding:
    """`hold` / `release` of a scripted server: keep chosen requests unanswered until released
    (a test kills a process while its request waits). The server calls `_init_hold` when made and
    `_gate_for` under its lock for each request, then awaits the gate it returns, if any."""

    _loop: Any
    _lock: Any

    def _init_hold(self) -> None:
        self.held = 0
        """Requests `hold` kept waiting (now or before)."""
        self._hold: Callable[[dict[str, Any]], bool] | None = None
        self._gate: Any = None  # an asyncio.Event on the server's loop, made by `hold`

    def hold(self, which: Callable[[dict[str, Any]], bool]) -> None:
        """Keep each request for which `which(body)` is true unanswered until `release`."""
        assert self._loop is not None, "start the server first"
        gate = asyncio.run_coroutine_threadsafe(_new_event(), self._loop).result(10)
        with self._lock:
            self._hold, self._gate = which, gate

    def release(self) -> None:
        """Answer the held requests, and hold no more."""
        with self._lock:
            gate, self._hold, self._gate = self._gate, None, None
        if gate is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(gate.set)

    def _gate_for(self, body: dict[str, Any]) -> Any:
        """The gate `body` waits at (None: answered at once); call it holding the lock."""
        gate = self._gate if self._hold is not None and self._hold(body) else None
        self.held += gate is not None
        return gate


class WindowServer(Holding, LoopbackServer):
    """The server (see the module doc); `start` runs it on a daemon thread with its own loop.

    Args:
        window: the context window, in tokens by `request_tokens`; larger requests are refused.
        tool: the tool every call names (default: the first tool the request offers).
        host, port: where to listen (port 0: a free one).
    """

    thread_name = "window-server"

    def __init__(self, window: int = 4000, tool: str | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.window = window
        self.tool = tool
        self.requests: list[dict[str, Any]] = []
        """Every request body received (parsed JSON), refused ones too, in order."""
        self.sizes: list[int] = []
        """`request_tokens` of each of `requests`."""
        self.refused = 0
        """Requests refused as larger than the window."""
        self.max_prompt_tokens = 0
        """The largest size of an accepted request."""
        self._calls = 0
        self._init_hold()

    def reset(self) -> None:
        """Forget the requests and counters (tool call ids keep counting)."""
        with self._lock:
            self.requests.clear()
            self.sizes.clear()
            self.refused = self.max_prompt_tokens = 0

    def stats(self) -> dict[str, Any]:
        """The counters (what ``GET /stats`` answers)."""
        with self._lock:
            return {"window": self.window, "requests": len(self.requests), "refused": self.refused,
                    "max_prompt_tokens": self.max_prompt_tokens, "sizes": list(self.sizes),
                    "unpaired": sum(not paired(body) for body in self.requests),
                    "open_connections": self.connections}

    # ------------------------------------------------------------------ answers
    async def _answer(self, method: str, path: str, body: bytes, peer_port: int) -> tuple[int, dict[str, str], Any]:
        if method == "GET" and path.endswith("/stats"):
            return 200, {}, self.stats()
        if method == "POST" and path.endswith("/reset"):
            self.reset()
            return 200, {}, {"ok": True}
        if method != "POST" or not path.endswith("/chat/completions"):
            return 404, {}, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}
        request = json.loads(body or b"{}")
        size = request_tokens(request)
        with self._lock:
            self.requests.append(request)
            self.sizes.append(size)
            too_large = size > self.window
            if too_large:
                self.refused += 1
            else:
                self.max_prompt_tokens = max(self.max_prompt_tokens, size)
            gate = self._gate_for(request)
        if gate is not None:
            await gate.wait()
        if too_large:
            return 400, {}, context_length_error(self.window, size)
        message, finish = self._reply(request)
        completion = text_tokens(message_text(message)) + _calls_tokens(message)
        usage = {"prompt_tokens": size, "completion_tokens": completion, "total_tokens": size + completion}
        if request.get("stream"):
            return 200, {}, _chunks(request, message, finish, usage)
        return 200, {}, {
            "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "window"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }

    def _reply(self, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The assistant message answering `request`, and its finish reason (the module doc's script)."""
        messages = request.get("messages") or []
        tools = request.get("tools") or []
        users = [message_text(m) for m in messages if m.get("role") == "user"]
        if not tools:
            digest = "; ".join(" ".join(text.split()[:DIGEST_WORDS]) for text in users)
            if len(digest) > DIGEST_CHARS:
                digest = digest[:DIGEST_CHARS - 3] + "..."
            text = f"SUMMARY({len(messages)} messages, {request_tokens(request)} tokens): {digest}"
            return {"role": "assistant", "content": text}, "stop"
        if messages and messages[-1].get("role") == "user":
            found = re.search(r"-?\d+", users[-1])
            with self._lock:
                self._calls += 1
                call_id = f"call_{self._calls:06d}"
            name = self.tool or tools[0]["function"]["name"]
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": json.dumps({"n": int(found.group()) if found else 0})}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        last_user = users[-1] if users else ""
        return {"role": "assistant", "content": f"turn done: {last_user[:TURN_DONE_CHARS]}"}, "stop"


async def _new_event() -> asyncio.Event:
    return asyncio.Event()


def _chunks(request: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, int]) -> EventStream:
    """`message` as OpenAI streams it: the role (and a tool call's id and name), the text word by
    word (or the arguments), the finish reason, then a chunk of `usage` alone when asked for."""
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    base = {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.get("model", "window"), "system_fingerprint": None}
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}

    events = EventStream()
    calls = message.get("tool_calls") or []
    if calls:
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}
            events.append(chunk({"role": "assistant", "content": None, "tool_calls": [head]} if index == 0
                                else {"tool_calls": [head]}))
            arguments = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
            events.append(chunk({"tool_calls": [arguments]}))
    else:
        events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        events.extend(chunk({"content": piece}) for piece in re.findall(r"\s*\S+", message["content"] or ""))
    events.append(chunk({}, finish))
    if include_usage:
        events.append({**base, "choices": [], "usage": usage})
    return events


def main() -> None:
    """Run the server in this process until interrupted, printing ``PORT <n>`` first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--tool", default=None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = WindowServer(window=args.window, tool=args.tool, port=args.port).start()
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
