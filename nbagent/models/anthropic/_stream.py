"""The answer side of the Messages API wire: SDK objects in, nbagent's `ModelResponse` out.

Owns the mapping of a whole ``Message`` (`message_response`), the assembly of a stream of raw
events (`stream_items` with `_StreamAssembler`: text deltas, tool input from
``input_json_delta``, reasoning from ``thinking_delta``, signatures from ``signature_delta``,
``ping`` ignored), stop reasons (`finish_reason`) and token counts (`token_counts`). Sans-IO:
nothing here sends or reads a socket; an ``error`` event is handed to the caller's callback.

May import: nbagent's messages, usage and model base. Not the SDK client, not `_wire`,
`_errors` or `_model`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ...messages import AssistantMessage, ToolCall, unique_call_ids
from ...usage import TokenCounts
from ..base import ModelResponse, ReasoningText

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "model_context_window_exceeded": "length", "refusal": "content_filter"}
"""Anthropic ``stop_reason`` -> nbagent's finish reason (others, e.g. ``pause_turn``, kept as they are)."""


def _get(obj: Any, name: str) -> Any:
    """Field `name` of an SDK object or a plain dict, or None."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def finish_reason(stop_reason: str | None) -> str | None:
    if stop_reason is None:
        return None
    return _FINISH.get(stop_reason, stop_reason)


def token_counts(usage: Any) -> TokenCounts:
    """Anthropic ``usage`` as `TokenCounts`: nbagent's `input_tokens` counts every prompt token
    (Anthropic's ``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``)."""
    if usage is None:
        return TokenCounts(reported=False)
    fresh = _int(_get(usage, "input_tokens"))
    written = _int(_get(usage, "cache_creation_input_tokens"))
    read = _int(_get(usage, "cache_read_input_tokens"))
    details = _get(usage, "output_tokens_details")
    return TokenCounts(
        input_tokens=fresh + written + read,
        cache_read_tokens=read,
        cache_write_tokens=written,
        output_tokens=_int(_get(usage, "output_tokens")),
        reasoning_tokens=_int(_get(details, "thinking_tokens")),
        reported=_get(usage, "input_tokens") is not None or _get(usage, "output_tokens") is not None,
    )


def _block_dict(block: Any) -> dict[str, Any]:
    """A thinking / redacted_thinking block as the dict to send back unchanged."""
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "redacted_thinking", "data": block.data}


def message_response(raw: Any, request_id: str | None = None) -> ModelResponse:
    """Map a whole ``Message`` to a `ModelResponse`."""
    texts: list[str] = []
    reasoning: list[str] = []
    thinking_blocks: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in raw.content or ():
        kind = block.type
        if kind == "text":
            texts.append(block.text)
        elif kind == "thinking":
            reasoning.append(block.thinking)
            thinking_blocks.append(_block_dict(block))
        elif kind == "redacted_thinking":
            thinking_blocks.append(_block_dict(block))
        elif kind == "tool_use":
            calls.append(ToolCall(block.id or "", block.name or "", json.dumps(block.input)))
        # server tools (web search...) run on Anthropic's side: their blocks are not nbagent's to run
    unique_call_ids(calls)
    text = "".join(texts)
    model = raw.model or None
    message = AssistantMessage(
        text=None if (calls and not text) or not texts else text,
        tool_calls=calls,
        reasoning="".join(reasoning) or None,
        thinking_blocks=thinking_blocks,
        finish_reason=finish_reason(raw.stop_reason),
        model=model,
    )
    return ModelResponse(message, token_counts(raw.usage), model, request_id or raw.id or None)


# ------------------------------------------------------------------------------- stream assembly
class _Block:
    __slots__ = ("data", "id", "kind", "name", "parts", "signature")

    def __init__(self, kind: str, id: str = "", name: str = "", data: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.data = data
        self.parts: list[str] = []
        self.signature: list[str] = []


class _StreamAssembler:
    """Collects the content blocks, stop reason, usage and model name of a stream of raw events."""

    __slots__ = ("blocks", "model", "request_id", "stop_reason", "usage")

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.request_id: str | None = None

    def merge_usage(self, usage: Any) -> None:
        """``message_start`` sends the input counts, ``message_delta`` the (cumulative) final ones."""
        if usage is None:
            return
        if self.usage is None:
            self.usage = {}
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"):
            value = _get(usage, name)
            if value is not None:
                self.usage[name] = value
        details = _get(usage, "output_tokens_details")
        if details is not None:
            self.usage["output_tokens_details"] = {"thinking_tokens": _get(details, "thinking_tokens")}

    def response(self) -> ModelResponse:
        texts: list[str] = []
        reasoning: list[str] = []
        thinking_blocks: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            b = self.blocks[index]
            if b.kind == "text":
                texts.append("".join(b.parts))
            elif b.kind == "thinking":
                reasoning.append("".join(b.parts))
                thinking_blocks.append({"type": "thinking", "thinking": "".join(b.parts),
                                        "signature": "".join(b.signature)})
            elif b.kind == "redacted_thinking":
                thinking_blocks.append({"type": "redacted_thinking", "data": b.data})
            elif b.kind == "tool_use":
                args = "".join(b.parts)
                calls.append(ToolCall(b.id, b.name, args if args.strip() else "{}"))
        unique_call_ids(calls)
        text = "".join(texts)
        message = AssistantMessage(
            text=text or None,
            tool_calls=calls,
            reasoning="".join(reasoning) or None,
            thinking_blocks=thinking_blocks,
            finish_reason=finish_reason(self.stop_reason),
            model=self.model,
        )
        return ModelResponse(message, token_counts(self.usage), self.model, self.request_id)


async def stream_items(
    events: AsyncIterator[Any],
    state: _StreamAssembler,
    fail: Callable[[Any], Exception],
    empty: Callable[[], Exception],
) -> AsyncGenerator[Any, None]:
    """The text deltas (``str``) and `ReasoningText` deltas of raw stream events, then the
    `ModelResponse` `state` assembled from them. An ``error`` event raises ``fail(error)``; a stream
    without ``message_start`` raises ``empty()``."""
    started = False
    blocks = state.blocks
    async for event in events:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            dkind = delta.type
            block = blocks.get(event.index)
            if block is None:
                block = blocks[event.index] = _Block("text" if dkind == "text_delta" else "unknown")
            if dkind == "text_delta":
                if delta.text:
                    block.parts.append(delta.text)
                    yield delta.text
            elif dkind == "input_json_delta":
                block.parts.append(delta.partial_json)
            elif dkind == "thinking_delta":
                if delta.thinking:
                    block.parts.append(delta.thinking)
                    yield ReasoningText(delta.thinking)
            elif dkind == "signature_delta":
                block.signature.append(delta.signature)
            # citations_delta and others carry nothing nbagent keeps
        elif kind == "content_block_start":
            cb = event.content_block
            ckind = cb.type
            if ckind == "tool_use":
                block = _Block("tool_use", cb.id or "", cb.name or "")
                if cb.input:  # a whole input in the start event (no deltas follow then)
                    block.parts.append(json.dumps(cb.input))
            elif ckind == "text":
                block = _Block("text")
                if cb.text:
                    block.parts.append(cb.text)
                    yield cb.text
            elif ckind == "thinking":
                block = _Block("thinking")
                if cb.thinking:
                    block.parts.append(cb.thinking)
                    yield ReasoningText(cb.thinking)
                if cb.signature:
                    block.signature.append(cb.signature)
            elif ckind == "redacted_thinking":
                block = _Block("redacted_thinking", data=cb.data)
            else:
                block = _Block(ckind)  # server tool blocks: not nbagent's to run
            blocks[event.index] = block
        elif kind == "message_start":
            started = True
            message = event.message
            state.model = message.model or None
            state.request_id = state.request_id or message.id or None
            state.merge_usage(message.usage)
        elif kind == "message_delta":
            state.stop_reason = event.delta.stop_reason or state.stop_reason
            state.merge_usage(event.usage)
        elif kind == "error":
            raise fail(_get(event, "error"))
        # ping, content_block_stop, message_stop: nothing to do
    if not started:
        raise empty()
    yield state.response()
