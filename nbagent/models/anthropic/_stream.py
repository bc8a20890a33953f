"""The answer side of the Messages API wire: a whole answer (the SDK's ``Message``) or the SDK's
stream events in, nbagent's `ModelResponse` out.

Owns the mapping of a whole ``Message`` (`message_response`), the assembly of a stream of events
(`stream_items`, the per-event loop, and `StreamAssembler`, fed the SDK's decoded events one by
one: text deltas, tool input from ``input_json_delta``, reasoning from ``thinking_delta``,
signatures from ``signature_delta``),
the shapes of the events it reads (`malformed`: an event whose ``delta``, ``message``,
``content_block`` is no object, whose ``index`` is no integer, whose text, tool input, thinking or
signature is no string, is a retried `ModelResponseError` naming it; the SDK's decoder builds its
events without checking them),
stop reasons (`finish_reason`; ``refusal`` as a `ContentFilterError` on the response), token
counts (`token_counts`), and a paused turn (stop reason ``pause_turn``): its content as sent
(`paused_content`) and its parts joined into one answer (`joined`). A ``redacted_thinking`` block
shows in the reasoning as `REDACTED_THINKING`. A stream that ends before ``message_stop`` was cut
off (`StreamAssembler.finish` raises a retried `StreamInterruptedError`): none of it is an
answer. Sans-IO: nothing here sends or reads a socket; the SDK decodes the server-sent events
(it raises an ``error`` event as an exception, which the error table sorts).

May import: nbagent's exceptions, messages, usage and model base, and `models._fields`. Not the
SDK client, not `_wire`, `_errors` or `_model`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ...exceptions import ContentFilterError, ModelResponseError, StreamInterruptedError
from ...messages import AssistantMessage, ToolCall, unique_call_ids
from ...usage import TokenCounts
from .._fields import count, field
from ..base import ModelResponse, ReasoningText, StreamItem

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "model_context_window_exceeded": "context_window", "refusal": "content_filter"}
"""Anthropic ``stop_reason`` -> nbagent's finish reason (others, e.g. ``pause_turn``, kept as they are).
``context_window``: the answer was cut off because the conversation filled the model's context
window (a truncated answer, like ``length``, with another remedy)."""

REDACTED_THINKING = "[redacted thinking: encrypted by Anthropic's safety systems, sent back unchanged]"
"""What a ``redacted_thinking`` block shows as in the reasoning text (the view's Thinking section):
its content is encrypted, so there is nothing to read; the block itself is kept and sent back."""


def finish_reason(stop_reason: str | None) -> str | None:
    if stop_reason is None:
        return None
    return _FINISH.get(stop_reason, stop_reason)


def token_counts(usage: Any) -> TokenCounts:
    """Anthropic ``usage`` as `TokenCounts`: nbagent's `input_tokens` counts every prompt token
    (Anthropic's ``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``)."""
    if usage is None:
        return TokenCounts(reported=False)
    fresh = count(field(usage, "input_tokens"))
    written = count(field(usage, "cache_creation_input_tokens"))
    read = count(field(usage, "cache_read_input_tokens"))
    details = field(usage, "output_tokens_details")
    return TokenCounts(
        input_tokens=fresh + written + read,
        cache_read_tokens=read,
        cache_write_tokens=written,
        output_tokens=count(field(usage, "output_tokens")),
        reasoning_tokens=count(field(details, "thinking_tokens")),
        reported=field(usage, "input_tokens") is not None or field(usage, "output_tokens") is not None,
    )


def _block_dict(block: Any) -> dict[str, Any]:
    """A thinking / redacted_thinking block as the dict to send back unchanged."""
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "redacted_thinking", "data": block.data}


def refusal_error(stop_details: Any, text: str) -> ContentFilterError:
    """The error of an answer Claude's streaming classifiers stopped (stop reason ``refusal``)."""
    category, explanation = field(stop_details, "category"), field(stop_details, "explanation")
    why = "; ".join(x for x in (category and f"category {category}", explanation) if x)
    return ContentFilterError(
        f"Claude's safety system stopped the answer (stop_reason refusal{': ' + why if why else ''}); "
        "Anthropic asks that the turn that caused it be removed or rephrased: continue in a new thread",
        category=category, explanation=explanation, text=text, provider="anthropic",
    )


_JSON_TYPES = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "an array",
               dict: "an object"}


def _json_type(value: Any) -> str:
    """What a JSON value is, in JSON's words (``missing or null`` for None)."""
    if value is None:
        return "missing or null"
    return _JSON_TYPES.get(type(value), "an object")


def malformed(event: str, name: str, value: Any, wanted: str) -> ModelResponseError:
    """The error for an event of the stream whose field `name` is not `wanted`: the answer it
    belongs to cannot be trusted, none of it is kept, and the call is retried like a stream cut
    off (a server's or proxy's glitch passes)."""
    return ModelResponseError(
        f"the stream sent a malformed {event} event: its {name} is {_json_type(value)}, not {wanted}",
        provider="anthropic", retryable=True,
    )


def _is_object(value: Any) -> bool:
    """An event's part is an object: the SDK's model of it, or a dict (not a JSON scalar or array)."""
    return value is not None and not isinstance(value, (str, int, float, list))


def _index(event: Any, kind: str) -> int:
    index = field(event, "index")
    if type(index) is not int:  # a bool is no index either
        raise malformed(kind, "index", index, "an integer")
    return index


def _text(part: Any, name: str, event: str, where: str) -> str:
    """Field `name` of `part`, which must be a string ("" when missing: a block may start empty)."""
    value = field(part, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise malformed(event, f"{where}.{name}", value, "a string")
    return value


def _answer(texts: list[str], reasoning: list[str], thinking_blocks: list[dict[str, Any]], calls: list[ToolCall],
            stop_reason: str | None, stop_details: Any, model: str | None, usage: Any,
            request_id: str | None) -> ModelResponse:
    unique_call_ids(calls)
    text = "".join(texts)
    message = AssistantMessage(
        text=None if (calls and not text) or not texts else text,
        tool_calls=calls,
        reasoning="".join(reasoning) or None,
        thinking_blocks=thinking_blocks,
        finish_reason=finish_reason(stop_reason),
        model=model,
    )
    response = ModelResponse(message, token_counts(usage), model, request_id)
    if stop_reason == "refusal":
        response.error = refusal_error(stop_details, text)
    return response


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
            reasoning.append(REDACTED_THINKING)
            thinking_blocks.append(_block_dict(block))
        elif kind == "tool_use":
            calls.append(ToolCall(block.id or "", block.name or "", json.dumps(block.input)))
        # server tools (web search...) run on Anthropic's side: their blocks are not nbagent's to run
    return _answer(texts, reasoning, thinking_blocks, calls, raw.stop_reason, getattr(raw, "stop_details", None),
                   raw.model or None, raw.usage, request_id or raw.id or None)


# ------------------------------------------------------------------------------- stream assembly
class _Block:
    __slots__ = ("citations", "data", "id", "kind", "name", "parts", "signature", "start")

    def __init__(self, kind: str, id: str = "", name: str = "", data: str = "", start: Any = None) -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.data = data
        self.start = start
        """The SDK's block from ``content_block_start`` (what `paused_content` sends back)."""
        self.parts: list[str] = []
        self.signature: list[str] = []
        self.citations: list[Any] = []

    def as_sent(self) -> dict[str, Any]:
        """The whole block as the server sent it (its start with the deltas applied)."""
        block: dict[str, Any] = _as_dict(self.start) if self.start is not None else {"type": self.kind}
        kind = self.kind
        if kind == "text":
            block["text"] = "".join(self.parts)
            if self.citations:
                block["citations"] = [*(block.get("citations") or ()), *map(_as_dict, self.citations)]
        elif kind == "thinking":
            block["thinking"] = "".join(self.parts)
            block["signature"] = "".join(self.signature)
        elif self.parts:  # tool_use, server_tool_use, mcp_tool_use...: input from input_json_delta
            args = "".join(self.parts)
            block["input"] = json.loads(args) if args.strip() else {}
        return block


def _as_dict(obj: Any) -> dict[str, Any]:
    """A block as the server sent it: a streamed event's dict (copied), or an SDK object's fields."""
    if isinstance(obj, dict):
        return dict(obj)
    return dict(obj.to_dict(mode="json"))


class StreamAssembler:
    """Collects the content blocks, stop reason, usage and model name of a stream of events (the
    SDK's event objects, or dicts of the same shape)."""

    __slots__ = ("blocks", "model", "request_id", "started", "stop_details", "stop_reason", "stopped", "usage")

    def __init__(self) -> None:
        self.started = False
        """A ``message_start`` event came."""
        self.stopped = False
        """A ``message_stop`` event came: the answer is whole."""
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.stop_details: Any = None
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
            value = field(usage, name)
            if value is not None:
                self.usage[name] = value
        details = field(usage, "output_tokens_details")
        if details is not None:
            self.usage["output_tokens_details"] = {"thinking_tokens": field(details, "thinking_tokens")}

    def finish(self) -> ModelResponse:
        """The answer, at the end of the stream. Raises `ModelResponseError` when no
        ``message_start`` came, and a retried `StreamInterruptedError` when the stream ended before
        ``message_stop`` (cut off, as when the connection drops: nothing of it is kept)."""
        if not self.started:
            raise ModelResponseError("the event stream ended without a message_start event", provider="anthropic")
        if not self.stopped:
            raise StreamInterruptedError(
                "the streamed answer broke off: the stream ended before its message_stop event "
                f"(last stop reason: {self.stop_reason or 'none yet'})", provider="anthropic",
            )
        return self.response()

    def handle(self, event: Any) -> str | None:
        """Take one event; returns the text or `ReasoningText` delta it carries, if any. (The
        shape checks of a delta event cost nothing until one fails: a delta that is no object has
        no known ``type``, an event that is no object no ``type`` at all.)"""
        kind = field(event, "type")
        if kind == "content_block_delta":
            index = field(event, "index")
            if type(index) is not int:  # a bool is no index either
                raise malformed(kind, "index", index, "an integer")
            return self._delta(index, field(event, "delta"))
        if kind == "content_block_start":
            block = field(event, "content_block")
            if not _is_object(block) or not isinstance(field(block, "type"), str):
                raise malformed(kind, "content_block", block, "a block object with a type")
            return self._start(_index(event, kind), block)
        if kind == "message_start":
            message = field(event, "message")
            if not _is_object(message):
                raise malformed(kind, "message", message, "an object")
            self.started = True
            self.model = _text(message, "model", kind, "message") or None
            self.request_id = self.request_id or _text(message, "id", kind, "message") or None
            self.merge_usage(field(message, "usage"))
        elif kind == "message_delta":
            delta = field(event, "delta")
            if not _is_object(delta):
                raise malformed(kind, "delta", delta, "an object")
            self.stop_reason = _text(delta, "stop_reason", kind, "delta") or self.stop_reason
            self.stop_details = field(delta, "stop_details") or self.stop_details
            self.merge_usage(field(event, "usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind is None and not _is_object(event):
            raise malformed("stream", "event", event, "an object")
        # ping, content_block_stop, an event type not known yet: nothing to do
        return None

    def _delta(self, index: int, delta: Any) -> str | None:
        dkind = field(delta, "type")
        block = self.blocks.get(index)
        if block is None:
            block = self.blocks[index] = _Block("text" if dkind == "text_delta" else "unknown")
        if dkind == "text_delta":
            text = field(delta, "text")
            if type(text) is not str:
                raise malformed("content_block_delta", "delta.text", text, "a string")
            if text:
                block.parts.append(text)
                return text
        elif dkind == "input_json_delta":
            block.parts.append(_text(delta, "partial_json", "content_block_delta", "delta"))
        elif dkind == "thinking_delta":
            thinking = _text(delta, "thinking", "content_block_delta", "delta")
            if thinking:
                block.parts.append(thinking)
                return ReasoningText(thinking)
        elif dkind == "signature_delta":
            block.signature.append(_text(delta, "signature", "content_block_delta", "delta"))
        elif dkind == "citations_delta":
            block.citations.append(field(delta, "citation"))  # kept only to send a paused turn back
        elif not _is_object(delta):
            raise malformed("content_block_delta", "delta", delta, "an object")
        # other deltas carry nothing nbagent keeps
        return None

    def _start(self, index: int, cb: Any) -> str | None:
        ckind = field(cb, "type")
        event = "content_block_start"
        delta: str | None = None
        if ckind == "tool_use":
            block = _Block("tool_use", _text(cb, "id", event, "content_block"),
                           _text(cb, "name", event, "content_block"), start=cb)
            if field(cb, "input"):  # a whole input in the start event (no deltas follow then)
                block.parts.append(json.dumps(field(cb, "input")))
        elif ckind == "text":
            block = _Block("text", start=cb)
            text = _text(cb, "text", event, "content_block")
            if text:
                block.parts.append(text)
                delta = text
        elif ckind == "thinking":
            block = _Block("thinking", start=cb)
            thinking = _text(cb, "thinking", event, "content_block")
            if thinking:
                block.parts.append(thinking)
                delta = ReasoningText(thinking)
            signature = _text(cb, "signature", event, "content_block")
            if signature:
                block.signature.append(signature)
        elif ckind == "redacted_thinking":
            block = _Block("redacted_thinking", data=_text(cb, "data", event, "content_block"), start=cb)
            delta = ReasoningText(REDACTED_THINKING)
        else:
            block = _Block(str(ckind), start=cb)  # server tool blocks: not nbagent's to run
        self.blocks[index] = block
        return delta

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
                reasoning.append(REDACTED_THINKING)
                thinking_blocks.append({"type": "redacted_thinking", "data": b.data})
            elif b.kind == "tool_use":
                args = "".join(b.parts)
                calls.append(ToolCall(b.id, b.name, args if args.strip() else "{}"))
        return _answer(texts, reasoning, thinking_blocks, calls, self.stop_reason, self.stop_details, self.model,
                       self.usage, self.request_id)

    def paused_content(self) -> list[dict[str, Any]]:
        """The content of a paused turn (stop reason ``pause_turn``) as the server sent it, to be
        sent back as the last (assistant) message so that the turn goes on."""
        return [self.blocks[i].as_sent() for i in sorted(self.blocks)]


async def stream_items(
    events: AsyncIterator[Any], state: StreamAssembler, empty: Callable[[], Exception]
) -> AsyncGenerator[StreamItem, None]:
    """The text deltas (``str``) and `ReasoningText` deltas of a stream's events (the SDK's, or
    dicts of the same shape), then the answer `state` assembled (`StreamAssembler.finish`). A
    stream without any event raises ``empty()``."""
    handle = state.handle
    seen = False
    async for event in events:
        seen = True
        delta = handle(event)
        if delta is not None:
            yield delta
    if not seen:
        raise empty()
    yield state.finish()


def paused_content(raw: Any) -> list[dict[str, Any]]:
    """`StreamAssembler.paused_content` for a whole ``Message``."""
    return [_as_dict(block) for block in raw.content or ()]


def joined(parts: list[ModelResponse]) -> ModelResponse:
    """One answer from the parts of a turn the server paused and nbagent continued: texts,
    reasoning, thinking blocks and tool calls in order, token counts summed (each part is a
    billed request), the last part's stop reason, model, request id and error."""
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    messages = [p.message for p in parts]
    texts = [m.text for m in messages if m.text]
    calls = [c for m in messages for c in m.tool_calls]
    unique_call_ids(calls)
    message = AssistantMessage(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        reasoning="".join(m.reasoning for m in messages if m.reasoning) or None,
        thinking_blocks=[b for m in messages for b in m.thinking_blocks],
        finish_reason=last.message.finish_reason,
        model=last.message.model,
    )
    counts = [p.usage for p in parts]
    usage = TokenCounts(
        input_tokens=sum(c.input_tokens for c in counts),
        cache_read_tokens=sum(c.cache_read_tokens for c in counts),
        cache_write_tokens=sum(c.cache_write_tokens for c in counts),
        output_tokens=sum(c.output_tokens for c in counts),
        reasoning_tokens=sum(c.reasoning_tokens for c in counts),
        reported=any(c.reported for c in counts),
    )
    return ModelResponse(message, usage, last.model, last.request_id, last.error)


def too_many_pauses(response: ModelResponse, continuations: int) -> None:
    """Mark `response` (a turn still paused after `continuations` continuations) as unusable."""
    response.error = ModelResponseError(
        f"the server paused its turn (stop_reason pause_turn: a long-running server tool such as web "
        f"search) and was still paused after {continuations} continuation(s); allow more with "
        "AnthropicModel(max_continuations=...) or ask for less server-side work",
        provider="anthropic",
    )
