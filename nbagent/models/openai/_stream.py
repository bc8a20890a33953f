"""The answer side of the chat-completions wire: a whole ``ChatCompletion`` (an SDK object) or
the JSON objects of a stream's chunks in, nbagent's `ModelResponse` out.

Owns the mapping of a whole ``ChatCompletion`` (`completion_response`), the assembly of streamed
chunks (`stream_items`, the per-delta loop over each chunk's JSON object as `models._sse.json_events`
reads it, and `StreamAssembler`: tool-call deltas, refusal, reasoning, finish reason, usage),
token counts (`token_counts`, Groq's ``x_groq`` included) and `chunks_of`, the chunks of
event-stream text that came as one body. Sans-IO: nothing here sends or reads a socket. The errors
it raises are built by the caller's callbacks, except the `StreamInterruptedError` of a stream cut
inside a tool call and the `ModelResponseError` of a chunk of the wrong shape (`malformed`).
Fields are read with `models._fields`.

May import: nbagent's exceptions, messages, usage and model base, `models._fields`, and
`_responses_stream.malformed`. Not the SDK client, not `_wire`, `_errors` or `_model`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ...exceptions import StreamInterruptedError
from ...messages import AssistantMessage, ToolCall, unique_call_ids
from ...usage import TokenCounts
from .._fields import count, field
from ..base import ModelResponse, ReasoningText, StreamItem
from ._responses_stream import malformed


def token_counts(usage: Any) -> TokenCounts:
    """Map an OpenAI ``usage`` object (or Groq's ``x_groq.usage`` dict) to `TokenCounts`."""
    if usage is None:
        return TokenCounts(reported=False)
    prompt = field(usage, "prompt_tokens")
    completion = field(usage, "completion_tokens")
    pdet = field(usage, "prompt_tokens_details")
    cdet = field(usage, "completion_tokens_details")
    cached = field(pdet, "cached_tokens")
    if cached is None:
        cached = field(usage, "prompt_cache_hit_tokens")  # DeepSeek's older field
    written = field(pdet, "cache_write_tokens") or field(pdet, "cache_creation_tokens")
    return TokenCounts(
        input_tokens=count(prompt),
        cache_read_tokens=count(cached),
        cache_write_tokens=count(written),
        output_tokens=count(completion),
        reasoning_tokens=count(field(cdet, "reasoning_tokens")),
        reported=prompt is not None or completion is not None,
    )


def _arguments_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)  # a server that sent an object instead of a JSON string


def _final_text(text: str | None, calls: list[ToolCall]) -> str | None:
    # llama.cpp and others send content "" next to tool calls: that is no text.
    if calls and not text:
        return None
    return text


def _choice_zero(choices: Any) -> Any:
    if not choices:
        return None
    for choice in choices:
        if getattr(choice, "index", 0) == 0:
            return choice
    return choices[0]


# ------------------------------------------------------------------------------- a whole answer
def completion_response(raw: Any) -> ModelResponse:
    """Map a ``ChatCompletion`` to a `ModelResponse` (choice 0 when there are several)."""
    choice = _choice_zero(getattr(raw, "choices", None))
    message = getattr(choice, "message", None) if choice is not None else None
    finish = getattr(choice, "finish_reason", None) if choice is not None else None
    model = getattr(raw, "model", None) or None
    if message is None:
        # Azure's content filter answers with a choice that has no message at all.
        reply = AssistantMessage(
            text="",
            finish_reason=finish or ("content_filter" if choice is not None else None),
            model=model,
        )
    else:
        calls = []
        for tc in getattr(message, "tool_calls", None) or ():
            fn = getattr(tc, "function", None)
            if fn is None:
                continue  # not a function tool (e.g. a custom tool): nothing nbagent can run
            calls.append(ToolCall(tc.id or "", fn.name or "", _arguments_text(fn.arguments)))
        unique_call_ids(calls)
        reasoning = field(message, "reasoning_content") or field(message, "reasoning")
        reply = AssistantMessage(
            text=_final_text(message.content, calls),
            tool_calls=calls,
            reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
            refusal=getattr(message, "refusal", None) or None,
            finish_reason=finish,
            model=model,
        )
    usage = getattr(raw, "usage", None)
    if usage is None:
        usage = field(field(raw, "x_groq"), "usage")
    request_id = getattr(raw, "_request_id", None) or getattr(raw, "id", None) or None
    return ModelResponse(reply, token_counts(usage), model, request_id)


def chunks_of(data: list[str]) -> list[Any] | None:
    """The JSON object of each event's data (`_whole_body.sse_data`) of event-stream text that
    came as one body, or None when one is no JSON object."""
    try:
        chunks = [json.loads(d) for d in data]
    except ValueError:
        return None
    return chunks if all(type(c) is dict for c in chunks) else None


# ------------------------------------------------------------------------------- stream assembly
class _CallParts:
    __slots__ = ("args", "id", "name")

    def __init__(self, id: str, name: str) -> None:
        self.id = id
        self.name = name
        self.args: list[str] = []


class StreamAssembler:
    """Collects what is not plain text from chunks: tool-call deltas, refusal, finish reason,
    usage, model name. Sans-IO: fed SDK chunk pieces, it builds the final `ModelResponse`."""

    __slots__ = (
        "by_id",
        "by_index",
        "calls",
        "content_seen",
        "finish_reason",
        "model",
        "provider",
        "reasoning",
        "refusal",
        "request_id",
        "usage",
    )

    def __init__(self, provider: str | None = None) -> None:
        self.provider = provider  # named in the errors raised here
        self.calls: list[_CallParts] = []
        self.by_index: dict[int, _CallParts] = {}
        self.by_id: dict[str, _CallParts] = {}
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.model: str | None = None
        self.request_id: str | None = None
        self.content_seen = False

    def add_tool_calls(self, deltas: Any) -> None:
        """Assemble tool-call deltas (their JSON objects) by ``index`` and by ``id`` (Gemini and
        Ollama send no index)."""
        if type(deltas) is not list:
            raise malformed("chunk", "tool_calls", deltas, "a list", self.provider or "")
        for tc in deltas:
            if type(tc) is not dict:
                raise malformed("chunk", "tool call", tc, "an object", self.provider or "")
            index = tc.get("index")
            call_id = tc.get("id") or ""
            fn = tc.get("function")
            name = field(fn, "name") or ""
            args = field(fn, "arguments")
            slot: _CallParts | None = None
            if index is not None:
                slot = self.by_index.get(index)
                if slot is not None and call_id and slot.id and call_id != slot.id:
                    slot = None  # a server reusing one index for several calls
            elif call_id:
                slot = self.by_id.get(call_id)
            if slot is None and index is None and not call_id and not name and self.calls:
                slot = self.calls[-1]  # a continuation with neither index nor id
            if slot is None:
                slot = _CallParts(call_id, name)
                self.calls.append(slot)
                if index is not None:
                    self.by_index[index] = slot
            else:
                if call_id and not slot.id:
                    slot.id = call_id
                if name and (not slot.name or name.startswith(slot.name)):
                    slot.name = name
            if call_id:
                self.by_id[call_id] = slot
            if args:
                slot.args.append(_arguments_text(args))

    def finish(self, choice: dict[str, Any], chunk: dict[str, Any], fail: Callable[..., Exception]) -> None:
        """Keep a choice's ``finish_reason``; OpenRouter's ``"error"`` raises ``fail(error)`` (the
        error sent beside it)."""
        finish = choice["finish_reason"]
        if finish == "error":
            raise fail(choice.get("error") or chunk.get("error"),
                       "the server ended the answer with finish_reason 'error'")
        self.finish_reason = finish

    def note_usage(self, chunk: dict[str, Any]) -> None:
        """Keep a chunk's ``usage`` (Groq's in ``x_groq`` when there is none)."""
        usage = chunk.get("usage")
        self.usage = usage if usage is not None else field(chunk.get("x_groq"), "usage")

    def response(self, parts: list[str]) -> ModelResponse:
        calls = [ToolCall(c.id, c.name, "".join(c.args)) for c in self.calls]
        unique_call_ids(calls)
        text = "".join(parts) if (parts or self.content_seen) else None
        message = AssistantMessage(
            text=_final_text(text, calls),
            tool_calls=calls,
            reasoning="".join(self.reasoning) or None,
            refusal="".join(self.refusal) or None,
            finish_reason=self.finish_reason,
            model=self.model,
        )
        return ModelResponse(message, token_counts(self.usage), self.model, self.request_id)


# ------------------------------------------------------------------------------- a streamed answer
def _cut_in_a_call(state: StreamAssembler) -> Exception | None:
    """A stream that ended with no ``finish_reason`` while a tool call was being streamed is a
    cut stream (the call's arguments may be half there): a retried `StreamInterruptedError`,
    nothing of it kept. A text answer without ``finish_reason`` is kept, as some servers send none."""
    if state.finish_reason is not None or not state.calls:
        return None
    call = state.calls[-1]
    return StreamInterruptedError(
        f"the streamed answer broke off inside the tool call {call.name or '?'!r} "
        "(no finish_reason came)", provider=state.provider,
    )


async def sdk_chunks(chunks: AsyncIterator[Any]) -> AsyncGenerator[dict[str, Any], None]:
    """The SDK's parsed chunks (``chat.completions.create(stream=True)``, `OpenAIModel`'s
    ``sdk_stream``) as the JSON objects `stream_items` reads: each chunk's fields as they came,
    a server's extra fields included."""
    async for chunk in chunks:
        yield chunk.to_dict()


def _choice_of(choices: Any, provider: str) -> dict[str, Any] | None:
    """Choice 0 of a chunk's `choices` (None when none is), the shape checked: the reader's way
    for anything but one well-formed choice."""
    if type(choices) is not list:
        raise malformed("chunk", "choices", choices, "a list", provider)
    for choice in choices:
        if type(choice) is not dict:
            raise malformed("chunk", "choice", choice, "an object", provider)
    return next((c for c in choices if c.get("index", 0) == 0), None)


async def stream_items(  # noqa: C901  # Size: the per-delta loop, kept in one function with local names
    chunks: AsyncIterator[Any],
    state: StreamAssembler,
    fail: Callable[..., Exception],
    empty: Callable[[], Exception],
) -> AsyncGenerator[StreamItem, None]:
    """The text deltas (``str``) and `ReasoningText` deltas of a stream's chunks (the JSON object
    of each event's data: `models._sse.json_events`), then the `ModelResponse` `state` assembled
    from them. An error chunk (vLLM's ``{"object": "error"}``, ``{"error": ...}``, OpenRouter's
    ``finish_reason: "error"``) raises ``fail(error, fallback_message)``; a stream without any
    chunk raises ``empty()``; one that stops inside a tool call without a ``finish_reason`` raises
    a retried `StreamInterruptedError`; a chunk of the wrong shape (no object, a choice or delta
    that is no object, text that is no string) a retried `ModelResponseError` naming it
    (`malformed`). One loop with local names, no call per delta: it runs for every delta of every
    answer."""
    parts: list[str] = []
    append = parts.append
    provider = state.provider or ""
    chunk = None
    async for chunk in chunks:
        if type(chunk) is not dict:
            raise malformed("stream", "chunk", chunk, "an object", provider)
        choices = chunk.get("choices")
        choice = None
        if choices:
            choice = choices[0] if type(choices) is list else None
            if type(choice) is not dict or len(choices) > 1 or choice.get("index", 0) != 0:
                choice = _choice_of(choices, provider)
        elif chunk.get("object") == "error" or chunk.get("error"):
            # vLLM's older {"object": "error", ...}; {"error": ...} in a stream (OpenAI's, llama.cpp's)
            raise fail(chunk.get("error") or chunk)
        if choice is not None:
            delta = choice.get("delta")
            if delta is not None:
                if type(delta) is not dict:
                    raise malformed("chunk", "delta", delta, "an object", provider)
                text = delta.get("content")
                if text:
                    if type(text) is not str:
                        raise malformed("chunk", "content", text, "a string", provider)
                    append(text)
                    yield text
                elif text is not None:
                    state.content_seen = True
                if delta.get("tool_calls"):
                    state.add_tool_calls(delta["tool_calls"])
                if delta.get("refusal"):
                    state.refusal.append(delta["refusal"])
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning and type(reasoning) is str:
                    state.reasoning.append(reasoning)
                    yield ReasoningText(reasoning)
            if choice.get("finish_reason"):
                state.finish(choice, chunk, fail)
        if chunk.get("usage") is not None or (state.usage is None and chunk.get("x_groq")):
            state.note_usage(chunk)
        if state.model is None:
            state.model = chunk.get("model") or None
            state.request_id = state.request_id or chunk.get("id") or None
    if chunk is None:  # not one event: an empty body, or one without any "data:" line
        raise empty()
    cut = _cut_in_a_call(state)
    if cut is not None:
        raise cut
    yield state.response(parts)
