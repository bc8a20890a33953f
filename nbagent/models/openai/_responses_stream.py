"""The answer side of the Responses API wire: a response (whole, or its streamed events) in,
nbagent's `ModelResponse` out.

Owns `response_answer` (a whole response as its JSON dict: output items, status, usage),
`response_counts` (token counts with one meaning across providers: ``input_tokens`` all prompt
tokens, ``cache_read_tokens`` from ``input_tokens_details.cached_tokens``, ``reasoning_tokens``
from ``output_tokens_details``) and `response_stream_items`, the per-event loop of a streamed
answer, which reads the JSON object of each event (`models._sse.json_events` makes them of the
stream's bytes; `sdk_events` of the SDK's parsed events, the slower way): text deltas,
reasoning-summary (and raw reasoning-text) deltas as `ReasoningText`, and each output item kept as
its ``response.output_item.done`` event carries it (the earlier ``output_item.added`` copy
differs, and is not the one the server expects back), reconciled with the final response's
``output`` (`reconciled`: an item whose done event never came is taken from there). An event of
the wrong shape (no object, a delta that is no string, an item that is no object) is a retried
`ModelResponseError` naming it (`malformed`).

Every output item is kept on the answer (`AssistantMessage.thinking_blocks`, in order) and sent
back as it came (`_responses_wire`): reasoning (its summary shown as the answer's reasoning
text), messages (their text joined as the answer's text, a refusal part as its refusal, gpt-5.5's
``phase`` kept), function calls (as `ToolCall`; ``arguments`` sent as an object are serialised,
never replaced), and built-in tool calls or item types nbagent does not know, kept unchanged.
Sans-IO: the errors it raises are built by the caller's callbacks, or are `ModelResponseError` /
`StreamInterruptedError` of a stream cut off or malformed.

May import: nbagent's exceptions, messages, usage and model base, and `models._fields`.
Not the SDK client, `_errors` or the model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ...exceptions import ModelResponseError, StreamInterruptedError
from ...messages import AssistantMessage, ToolCall, unique_call_ids
from ...usage import TokenCounts
from .._fields import count, field
from ..base import ModelResponse, ReasoningText, StreamItem

__all__ = ["malformed", "response_answer", "response_counts", "response_stream_items", "sdk_events"]

_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""``incomplete_details.reason`` as nbagent's finish reason (``length``: `RunResult.truncated`)."""


def response_counts(usage: Any) -> TokenCounts:
    """Map a Responses ``usage`` object or dict to `TokenCounts`."""
    if not usage:
        return TokenCounts(reported=False)
    prompt = field(usage, "input_tokens")
    completion = field(usage, "output_tokens")
    return TokenCounts(
        input_tokens=count(prompt),
        cache_read_tokens=count(field(field(usage, "input_tokens_details"), "cached_tokens")),
        output_tokens=count(completion),
        reasoning_tokens=count(field(field(usage, "output_tokens_details"), "reasoning_tokens")),
        reported=prompt is not None or completion is not None,
    )


def _summary_text(item: dict[str, Any]) -> str:
    parts = [p.get("text") for p in item.get("summary") or () if isinstance(p, dict)]
    if not any(parts):  # a raw chain of thought (OpenRouter's reasoning_text content)
        parts = [p.get("text") for p in item.get("content") or () if isinstance(p, dict)]
    return "\n\n".join(p for p in parts if isinstance(p, str) and p)


def _message_parts(item: dict[str, Any], texts: list[str], refusals: list[str]) -> None:
    for part in item.get("content") or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])


def _finish(status: Any, incomplete: Any, calls: list[ToolCall]) -> str | None:
    if status == "incomplete":
        reason = field(incomplete, "reason")
        return _FINISH.get(reason, reason if isinstance(reason, str) else "length")
    if status == "completed":
        return "tool_calls" if calls else "stop"
    return status if isinstance(status, str) else None


def _arguments(value: Any) -> str:
    """A function call's ``arguments`` as the JSON text a `ToolCall` keeps: the string the API
    sends, or any other JSON value serialised as it came (an object from a server that sends
    one; an array or a number, which the tool layer then refuses as invalid arguments); "{}"
    only when there are none."""
    if isinstance(value, str):
        return value
    return "{}" if value is None else json.dumps(value)


def answer_from_items(items: list[dict[str, Any]], response: dict[str, Any]) -> ModelResponse:
    """The `ModelResponse` of a response's output `items` (kept whole, in order, on the message)
    and its status, usage, model and id (`response`)."""
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            _message_parts(item, texts, refusals)
        elif kind == "function_call":
            calls.append(ToolCall(str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or ""),
                                  _arguments(item.get("arguments"))))
        elif kind == "reasoning":
            summary = _summary_text(item)
            if summary:
                reasoning.append(summary)
    unique_call_ids(calls)
    model = response.get("model") or None
    text = "".join(texts)
    message = AssistantMessage(
        text=text if text or not (calls or refusals) else None,
        tool_calls=calls,
        reasoning="\n\n".join(reasoning) or None,
        refusal="".join(refusals) or None,
        finish_reason=_finish(response.get("status"), response.get("incomplete_details"), calls),
        model=model,
        thinking_blocks=items,
    )
    return ModelResponse(message, response_counts(response.get("usage")), model, response.get("id") or None)


def response_answer(response: dict[str, Any], fail: Callable[..., Exception],
                    provider: str = "openai") -> ModelResponse:
    """Map a whole response (its JSON dict) to a `ModelResponse`. A failed response raises
    ``fail(error)``; one still queued or in progress (background mode) a `ModelResponseError`."""
    status = response.get("status")
    if status == "failed" or (response.get("error") and status not in ("completed", "incomplete")):
        raise fail(response.get("error"), "the response failed")
    if status in ("queued", "in_progress"):
        raise ModelResponseError(
            f"the response is {status} (background mode), not an answer: OpenAIResponsesModel waits for "
            "no background response; leave settings={'background': ...} out", provider=provider)
    items = [dict(i) for i in response.get("output") or () if isinstance(i, dict)]
    return answer_from_items(items, response)


# ------------------------------------------------------------------------------- a streamed answer
class _Streamed:
    """What a stream gathered besides its deltas: the done items by output index, the response."""

    __slots__ = ("calls_open", "done", "request_id", "response")

    def __init__(self) -> None:
        self.done: dict[int, dict[str, Any]] = {}
        self.response: dict[str, Any] | None = None
        self.request_id: str | None = None
        self.calls_open: str | None = None

    def answer(self) -> ModelResponse:
        response = self.response or {}
        answer = answer_from_items(reconciled(self.done, response.get("output")), response)
        answer.request_id = self.request_id or answer.request_id
        return answer


def reconciled(done: dict[int, dict[str, Any]], output: Any) -> list[dict[str, Any]]:
    """The answer's items, in order: each output index's item as its ``response.output_item.done``
    event carried it, else as the final response's ``output`` carries it at that index (a done
    event that never came loses no item the server says it sent); an ``output`` item already
    among the done ones (same id) is not taken twice."""
    final = [dict(i) if isinstance(i, dict) else None for i in output] if isinstance(output, list) else []
    if not done:
        return [i for i in final if i is not None]
    ids = {i.get("id") for i in done.values() if i.get("id")}
    items = []
    for index in range(max(max(done) + 1, len(final))):
        item = done.get(index)
        if item is None and index < len(final):
            item = final[index]
            if item is not None and item.get("id") in ids:
                item = None
        if item is not None:
            items.append(item)
    return items


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    # warnings off: a field of another type than the SDK's model says (arguments as an object) is kept as it came
    return to_dict(warnings=False) if to_dict is not None else dict(obj)


_TEXT = "response.output_text.delta"
_THOUGHT = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
_READ_WHOLE = frozenset({"response.output_item.added", "response.output_item.done", "response.completed",
                         "response.incomplete", "response.failed", "error"})
"""The events `response_stream_items` reads more of than their type and delta."""


async def sdk_events(events: AsyncIterator[Any]) -> AsyncGenerator[dict[str, Any], None]:
    """The SDK's parsed events (``client.responses.create(stream=True)``) as the JSON objects
    `response_stream_items` reads: a delta's type and text, an event it reads whole as its dict,
    any other event as its type alone (each event's dict costs the SDK as much as parsing it)."""
    async for event in events:
        kind = getattr(event, "type", None)
        if kind == _TEXT or kind in _THOUGHT:
            yield {"type": kind, "delta": event.delta}
        elif kind in _READ_WHOLE:
            yield _as_dict(event)
        else:
            yield {"type": kind}


def malformed(event: Any, name: str, value: Any, wanted: str, provider: str) -> ModelResponseError:
    """The error for an event whose field `name` is not `wanted`: none of the answer is kept, and
    the call is retried like a stream cut off (a server's or proxy's glitch passes)."""
    what = "missing or null" if value is None else f"a {type(value).__name__}"
    return ModelResponseError(f"the stream sent a malformed {event} event: its {name} is {what}, not {wanted}",
                              provider=provider, retryable=True)


def _object(event: dict[str, Any], name: str, kind: str, provider: str) -> dict[str, Any]:
    value = event.get(name)
    if type(value) is not dict:
        raise malformed(kind, name, value, "an object", provider)
    return value


async def response_stream_items(  # noqa: C901  # Size: the per-event loop, kept in one function with local names
    events: AsyncIterator[Any],
    request_id: str | None,
    fail: Callable[..., Exception],
    empty: Callable[[], Exception],
    provider: str = "openai",
) -> AsyncGenerator[StreamItem, None]:
    """The text deltas (``str``) and `ReasoningText` deltas of a stream's events (the JSON objects
    of its data: `models._sse.json_events`, or `sdk_events`), then the `ModelResponse` of its
    items. An ``error`` event (or an event with an ``error``) or ``response.failed`` raises
    ``fail(error)``; a stream without events ``empty()``; one that stops before its last event
    (``response.completed`` / ``incomplete``) a retried `StreamInterruptedError`; an event of the
    wrong shape a retried `ModelResponseError` naming it (`malformed`). One loop with local names:
    it runs for every delta of every answer."""
    state = _Streamed()
    state.request_id = request_id
    seen = thought = False
    async for event in events:
        seen = True
        if type(event) is not dict:
            raise malformed("stream", "event", event, "an object", provider)
        kind = event.get("type")
        if kind == _TEXT or kind in _THOUGHT:
            delta = event.get("delta")
            if type(delta) is not str:
                raise malformed(kind, "delta", delta, "a string", provider)
            if kind == _TEXT:
                if delta:
                    yield delta
            elif delta:
                thought = True
                yield ReasoningText(delta)
        elif kind == "response.reasoning_summary_part.added":
            if thought:  # parts and items are joined by a blank line, as in the answer's reasoning
                yield ReasoningText("\n\n")
        elif kind == "response.output_item.added":
            item = _object(event, "item", kind, provider)
            if item.get("type") == "function_call":
                state.calls_open = item.get("name") or "?"
        elif kind == "response.output_item.done":
            item = _object(event, "item", kind, provider)
            index = event.get("output_index")
            state.done[index if type(index) is int else len(state.done)] = item
            if item.get("type") == "function_call":
                state.calls_open = None
        elif kind in ("response.completed", "response.incomplete"):
            state.response = _object(event, "response", kind, provider)
        elif kind == "response.failed":
            raise fail(_object(event, "response", kind, provider).get("error"), "the response failed")
        elif kind == "error":
            error = {k: v for k, v in event.items() if k not in ("type", "sequence_number")}
            raise fail(error, "the server ended the stream with an error")
        elif event.get("error"):  # {"error": {...}} in place of an event (the SDK raises it so)
            raise fail(event["error"], "the server ended the stream with an error")
    if not seen:
        raise empty()
    if state.response is None:
        where = f" inside the tool call {state.calls_open!r}" if state.calls_open else ""
        raise StreamInterruptedError(f"the streamed answer broke off{where} (no response.completed came)",
                                     provider=provider)
    yield state.answer()
