"""A scripted Anthropic Messages API server with a small context window (127.0.0.1, standard
library only): `WindowServer`'s script (tests/wire/window_server.py) in Anthropic's shapes, for
tests of context compaction with `AnthropicModel`.

It measures a ``POST /v1/messages`` body by `anthropic_tokens`, `request_tokens`' rule on the
Messages API's shapes: ``ceil(len(text) / 4)`` of each message's text blocks and ``tool_result``
contents, plus ``ceil(len(name + json.dumps(input)) / 4)`` of each ``tool_use`` block, plus 4
tokens a message, plus the system text's tokens, plus ``ceil(len(json.dumps(tools)) / 4)`` when
tools are offered.

A request larger than ``window`` is refused as Anthropic refuses it (HTTP 400, the body of the
recorded tests/wire/anthropic_messages/anthropic_error_400_prompt_too_long.json:
``{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: <n>
tokens > <window> maximum"}, "request_id": ...}``). A request the API would refuse for its tool
blocks (`anthropic_paired` false) gets Anthropic's 400 for that. Any other is answered by:

- no tools offered (a compactor's summary request): the text ``SUMMARY(<k> messages, <t>
  tokens): <digest>`` (the first three words of each user text block, joined by ``"; "``);
- tools offered, the last user turn a prompt (no ``tool_result``): a ``tool_use`` of the tool named
  ``tool`` (default: the first offered) with ``{"n": <the prompt's first integer, or 0>}``, ids
  ``toolu_000001``, ``toolu_000002``, ...;
- tools offered, the last user turn tool results: ``turn done: <the first 40 characters of the
  last prompt>``.

A request with Anthropic's ``context_management`` (a ``clear_tool_uses_20250919`` edit, which
needs the ``anthropic-beta: context-management-2025-06-27`` header, else a 400 as the API gives) is
measured after the edit: past its ``trigger`` (input tokens; default 100,000), the content of every
``tool_result`` but the last ``keep`` (tool uses; default 3) becomes `CLEARED`, and the answer
reports ``context_management.applied_edits`` (`cleared` keeps how many results each request cleared).

Answers are whole JSON ``message`` objects (``stream: true`` is refused: the SDK reads named SSE
events, which the shared `LoopbackServer` does not send); ``usage.input_tokens`` is the size.
It keeps `requests`, `sizes`, `refused`, `max_prompt_tokens`, and holds the requests a test picks
until `release` (`hold`, `held`), as `WindowServer` does.

    with AnthropicWindowServer(window=4000) as server:
        model = AnthropicModel("claude-haiku-4-5", base_url=server.url, api_key="sk-test")
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from .scripted_server import REQUEST_HEADERS, LoopbackServer
from .window_server import DIGEST_CHARS, DIGEST_WORDS, MESSAGE_TOKENS, TURN_DONE_CHARS, Holding, text_tokens

__all__ = ["CLEARED", "AnthropicWindowServer", "anthropic_paired", "anthropic_tokens", "clear_tool_uses",
           "prompt_too_long"]

CLEARED = "[tool result cleared]"
"""What a cleared ``tool_result``'s content becomes."""
BETA = "context-management-2025-06-27"


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in _blocks(content))


def _block_tokens(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return text_tokens(block.get("text", ""))
    if kind == "tool_use":
        return text_tokens(block.get("name", "") + json.dumps(block.get("input") or {}))
    if kind == "tool_result":
        return text_tokens(_result_text(block))
    return 0


def anthropic_tokens(body: dict[str, Any]) -> int:
    """A Messages API request body's size in tokens, by the rule the module doc gives."""
    size = sum(MESSAGE_TOKENS + sum(_block_tokens(b) for b in _blocks(m.get("content")))
               for m in body.get("messages") or [])
    system = body.get("system")
    size += text_tokens(system if isinstance(system, str) else "".join(b.get("text", "") for b in system or []))
    tools = body.get("tools")
    return size + (text_tokens(json.dumps(tools)) if tools else 0)


def anthropic_paired(body: dict[str, Any]) -> bool:
    """Whether the API would accept the request's turns: the first is the user's, the roles
    alternate, each assistant turn's ``tool_use`` ids are answered by ``tool_result`` blocks at the
    start of the next user turn, and no ``tool_result`` answers anything else."""
    waiting: set[str] = set()
    for index, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role != ("user" if index % 2 == 0 else "assistant"):
            return False
        blocks = _blocks(message.get("content"))
        if role == "assistant":
            waiting = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
            continue
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        leading = [b.get("tool_use_id") for b in blocks[:len(results)]]
        if set(results) != waiting or len(results) != len(set(results)) or leading != results:
            return False
        waiting = set()
    return not waiting


def clear_tool_uses(request: dict[str, Any]) -> dict[str, Any] | None:
    """Apply the request's ``clear_tool_uses_20250919`` edit to it in place (see the module doc):
    the applied edit as the API reports it, or None when the request asks for none."""
    edits = (request.pop("context_management", None) or {}).get("edits") or []
    edit = next((e for e in edits if e.get("type") == "clear_tool_uses_20250919"), None)
    if edit is None:
        return None
    trigger = (edit.get("trigger") or {}).get("value", 100_000)
    keep = (edit.get("keep") or {}).get("value", 3)
    before = anthropic_tokens(request)
    if before <= trigger:
        return {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 0, "cleared_input_tokens": 0}
    results = [b for m in request.get("messages") or [] if m.get("role") == "user"
               for b in _blocks(m.get("content")) if b.get("type") == "tool_result"]
    old = results[:len(results) - keep] if keep else results
    for block in old:
        block["content"] = CLEARED
    return {"type": "clear_tool_uses_20250919", "cleared_tool_uses": len(old),
            "cleared_input_tokens": before - anthropic_tokens(request)}


def prompt_too_long(window: int, tokens: int) -> dict[str, Any]:
    """The body Anthropic answers (HTTP 400) to a request of `tokens` tokens for a `window`."""
    return {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": f"prompt is too long: {tokens} tokens > {window} maximum"},
            "request_id": f"req_window{time.monotonic_ns()}"}


def _invalid(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message},
            "request_id": f"req_window{time.monotonic_ns()}"}


class AnthropicWindowServer(Holding, LoopbackServer):
    """The server (see the module doc); `start` runs it on a daemon thread with its own loop.

    Args:
        window: the context window, in tokens by `anthropic_tokens`; larger requests are refused.
        tool: the tool every call names (default: the first tool the request offers).
        host, port: where to listen (port 0: a free one).
    """

    thread_name = "anthropic-window-server"

    def __init__(self, window: int = 4000, tool: str | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.window = window
        self.tool = tool
        self.requests: list[dict[str, Any]] = []
        """Every request body received (parsed JSON), refused ones too, in order."""
        self.sizes: list[int] = []
        """`anthropic_tokens` of each of `requests`."""
        self.refused = 0
        """Requests refused as longer than the window."""
        self.unpaired = 0
        """Requests refused for their tool blocks (`anthropic_paired`)."""
        self.max_prompt_tokens = 0
        """The largest size of an accepted request."""
        self.cleared: list[int | None] = []
        """How many tool results each request's ``context_management`` cleared (None: it asked for none)."""
        self._calls = 0
        self._init_hold()

    @property
    def url(self) -> str:
        """``http://<host>:<port>``: an Anthropic client's ``base_url`` (the SDK adds ``/v1/messages``)."""
        return f"http://{self.host}:{self.port}"

    async def _answer(self, method: str, path: str, body: bytes, peer_port: int) -> tuple[int, dict[str, str], Any]:
        if method != "POST" or not path.split("?")[0].endswith("/v1/messages"):
            return 404, {}, {"type": "error", "error": {"type": "not_found_error", "message": f"no route {path}"}}
        request = json.loads(body or b"{}")
        if "context_management" in request and BETA not in REQUEST_HEADERS.get({}).get("anthropic-beta", ""):
            return 400, {}, _invalid("context_management: Extra inputs are not permitted")
        sent = json.loads(body or b"{}")  # kept as sent, before an edit
        applied = clear_tool_uses(request)
        size = anthropic_tokens(request)
        with self._lock:
            self.requests.append(sent)
            self.cleared.append(applied["cleared_tool_uses"] if applied is not None else None)
            self.sizes.append(size)
            too_large, unpaired = size > self.window, not anthropic_paired(request)
            self.refused += too_large
            self.unpaired += unpaired and not too_large
            if not too_large and not unpaired:
                self.max_prompt_tokens = max(self.max_prompt_tokens, size)
            gate = self._gate_for(sent)
        if gate is not None:
            await gate.wait()
        if too_large:
            return 400, {}, prompt_too_long(self.window, size)
        if unpaired:
            return 400, {}, _invalid("messages: `tool_use` ids were found without `tool_result` blocks "
                                     "immediately after, or roles do not alternate")
        if request.get("stream"):
            return 400, {}, _invalid("this test server answers whole messages only (stream: false)")
        content, stop = self._reply(request)
        output = sum(_block_tokens(b) for b in content)
        return 200, {"request-id": f"req_window{time.monotonic_ns()}"}, {
            "id": f"msg_window{time.monotonic_ns()}", "type": "message", "role": "assistant",
            "model": request.get("model", "window"), "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": size, "output_tokens": output},
            **({"context_management": {"applied_edits": [applied] if applied["cleared_tool_uses"] else []}}
               if applied is not None else {}),
        }

    def _reply(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """The answer's content blocks and stop reason (the module doc's script)."""
        messages = request.get("messages") or []
        tools = request.get("tools") or []
        prompts = [b.get("text", "") for m in messages if m.get("role") == "user"
                   for b in _blocks(m.get("content")) if b.get("type") == "text"]
        if not tools:
            digest = "; ".join(" ".join(text.split()[:DIGEST_WORDS]) for text in prompts)
            if len(digest) > DIGEST_CHARS:
                digest = digest[:DIGEST_CHARS - 3] + "..."
            text = f"SUMMARY({len(messages)} messages, {anthropic_tokens(request)} tokens): {digest}"
            return [{"type": "text", "text": text}], "end_turn"
        last = _blocks(messages[-1].get("content")) if messages else []
        if not any(b.get("type") == "tool_result" for b in last):
            found = re.search(r"-?\d+", prompts[-1] if prompts else "")
            with self._lock:
                self._calls += 1
                call_id = f"toolu_{self._calls:06d}"
            name = self.tool or tools[0]["name"]
            return [{"type": "tool_use", "id": call_id, "name": name,
                     "input": {"n": int(found.group()) if found else 0}}], "tool_use"
        last_prompt = prompts[-1] if prompts else ""
        return [{"type": "text", "text": f"turn done: {last_prompt[:TURN_DONE_CHARS]}"}], "end_turn"
