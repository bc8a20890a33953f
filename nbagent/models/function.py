"""Fake models for tests and demos: `FunctionModel` (answers with your function) and
`ScriptedModel` (answers from a list). They ship in the library so users can test their agents
with no key and no network.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from ..context import _view
from ..exceptions import UserError
from ..messages import AssistantMessage, Message, ToolCall, UserMessage
from ..usage import TokenCounts
from .base import Model, ModelRequest, ModelResponse, ReasoningText, StreamItem, check_context_window

__all__ = ["FunctionModel", "ScriptedModel", "estimate_tokens"]

_WORD = re.compile(r"\S+")


def estimate_tokens(text: str | None) -> int:
    """A deterministic stand-in for a tokenizer: one token per whitespace-separated word."""
    return len(text.split()) if text else 0  # same count as _WORD.findall, ~3x faster


IMAGE_TOKENS = 85
"""What the fakes count per image in a prompt (OpenAI's price of one low-detail image)."""

_Counted = dict[int, tuple[list[Message], int, int]]
"""A model's conversations: the first message after the system prompt (its id) -> the last request
(its own list), its length, and its words (`_request_tokens`)."""


def _request_tokens(messages: list[Message], counted: _Counted | None = None) -> int:
    """The fakes' count of a request: `estimate_tokens` of each message, 2 more a message.

    With `counted` (a model's own), a request that starts with the messages of the conversation's
    previous request (compared as values, which the count depends on) counts only the messages
    added since, so a step of a long run costs what a step of a short one does.
    """
    first = 1 if messages and messages[0].kind == "system" else 0
    if counted is None or first >= len(messages) or not _view.CACHED:
        return _words(messages, 0) + 2 * len(messages)
    key = id(messages[first])
    start = total = 0
    found = counted.get(key)
    if found is not None:
        before, n, words = found
        if len(before) == n <= len(messages) and before[first] is messages[first] and messages[:n] == before:
            start, total = n, words
    total += _words(messages, start)
    if len(counted) >= 64:  # conversations this model no longer sees
        counted.clear()
    # The request's own list, not a copy (a step at 2,000 messages would copy 16 KB): the model
    # keeps it in `requests`, where only a test could change it, and a changed length is seen.
    counted[key] = (messages, len(messages), total)
    return total + 2 * len(messages)


def _words(messages: list[Message], start: int) -> int:
    total = 0
    for i in range(start, len(messages)):
        m = messages[i]
        if isinstance(m, AssistantMessage):
            total += estimate_tokens(m.text) + sum(1 + estimate_tokens(c.args_json) for c in m.tool_calls)
        else:
            total += estimate_tokens(m.content)
            if isinstance(m, UserMessage) and m.images:
                total += IMAGE_TOKENS * len(m.images)
    return total


def to_response(
    value: Any, request: ModelRequest, model_name: str, counted: _Counted | None = None
) -> ModelResponse:
    """Coerce what a fake's function returned into a `ModelResponse` (`counted`: see `_request_tokens`)."""
    if isinstance(value, ModelResponse):
        return value
    # Every answer is a message of its own: a function that returns the same ToolCall (or
    # AssistantMessage) object twice, e.g. a module-level constant, gets copies, so the run's
    # giving a repeated call id a fresh one never rewrites the earlier answer's call in place.
    if isinstance(value, str):
        message = AssistantMessage(text=value, finish_reason="stop")
    elif isinstance(value, ToolCall):
        message = AssistantMessage(tool_calls=[_copy(value)], finish_reason="tool_calls")
    elif isinstance(value, AssistantMessage):
        message = dataclasses.replace(value, tool_calls=[_copy(c) for c in value.tool_calls])
    elif isinstance(value, (list, tuple)) and all(isinstance(v, ToolCall) for v in value):
        message = AssistantMessage(tool_calls=[_copy(c) for c in value], finish_reason="tool_calls")
    else:
        raise UserError(
            "a fake model's function must return a str, a ToolCall, a list of ToolCall, an "
            f"AssistantMessage or a ModelResponse; got {type(value).__name__}"
        )
    if message.finish_reason is None:
        message.finish_reason = "tool_calls" if message.tool_calls else "stop"
    if message.model is None:
        message.model = model_name
    output = estimate_tokens(message.text) + sum(1 + estimate_tokens(c.args_json) for c in message.tool_calls)
    usage = TokenCounts(input_tokens=_request_tokens(request.messages, counted), output_tokens=output)
    return ModelResponse(message, usage, model=model_name)


def _copy(call: ToolCall) -> ToolCall:
    """A copy of `call`: what ``dataclasses.replace(call)`` gives, at a sixth of its cost for a
    plain `ToolCall` (a fake's every answer with calls makes one)."""
    if type(call) is not ToolCall:
        return dataclasses.replace(call)
    return ToolCall(call.id, call.name, call.args_json, call._args)


def _split_deltas(text: str) -> list[str]:
    # Word-sized pieces keep their spaces, so "".join(pieces) == text.
    return re.findall(r"\s*\S+|\s+", text) or [text]


class FunctionModel(Model):
    """A model whose answers come from a Python function.

    ```python
    def answer(messages, info):
        if messages[-1].kind == "user":
            return tool_call("get_weather", city="Paris")
        return "It is sunny in Paris."
    agent = Agent(FunctionModel(answer), tools=[get_weather])
    ```

    Args:
        function: ``(messages, request) -> str | ToolCall | list[ToolCall] | AssistantMessage |
            ModelResponse`` (sync or async); it may raise nbagent's `ModelError`s to test retries.
        stream_function: optional ``async (messages, request)`` generator yielding text deltas
            (``str``), `ReasoningText`, and optionally a final answer (as above; it keeps the
            streamed text and reasoning unless it sets its own). Without it a streamed request
            streams the function's text word by word.
        model_name: reported as the model (usage rows).
        context_window: what `context_window` reports, in tokens (default None: unknown), to test
            code that reads it.
    """

    provider = "function"

    @property
    def priced(self) -> bool:  # type: ignore[override]
        """Not priced, unless a test gave it a real provider's name to price it like one."""
        return self.provider != type(self).provider

    def __init__(
        self,
        function: Callable[[list[Message], ModelRequest], Any] | None = None,
        *,
        stream_function: Callable[[list[Message], ModelRequest], AsyncIterator[Any]] | None = None,
        model_name: str = "function",
        context_window: int | None = None,
    ) -> None:
        if function is None and stream_function is None:
            raise UserError("FunctionModel needs a function or a stream_function")
        self._context_window = check_context_window(f"{type(self).__name__}(context_window=...)", context_window)
        self.function = function
        self.stream_function = stream_function
        self.model_name = model_name
        self.requests: list[ModelRequest] = []
        """Every request received, for assertions in tests."""
        self._counted: _Counted = {}
        """Each conversation's last request and its token count (`_request_tokens`)."""

    def _default_context_window(self) -> int | None:
        return None  # a fake has no window unless given one (not even under a real model's name)

    async def _answer(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        assert self.function is not None
        value = self.function(request.messages, request)
        if inspect.isawaitable(value):
            value = await value
        return to_response(value, request, self.model_name, self._counted)

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.function is None:
            return await self._collect_stream(request)
        return await self._answer(request)

    async def _collect_stream(self, request: ModelRequest) -> ModelResponse:
        final: ModelResponse | None = None
        async for item in self.request_stream(request):
            if isinstance(item, ModelResponse):
                final = item
        assert final is not None
        return final

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if self.stream_function is None:
            response = await self._answer(request)
            if response.message.text:
                for piece in _split_deltas(response.message.text):
                    yield piece
            yield response
            return
        self.requests.append(request)
        parts: list[str] = []
        reasoning: list[str] = []
        final: Any = None
        async for item in self.stream_function(request.messages, request):
            if type(item) is str:
                parts.append(item)
                yield item
            elif isinstance(item, ReasoningText):
                reasoning.append(item)
                yield item
            else:
                final = item
        if final is None:
            final = AssistantMessage(text="".join(parts), reasoning="".join(reasoning) or None)
        response = to_response(final, request, self.model_name, self._counted)
        # A final item (a tool call, a message) keeps what was streamed before it, as a real
        # provider's answer would: the streamed text and reasoning, unless it sets its own.
        message = response.message
        if parts and not message.text:
            message.text = "".join(parts)
        if reasoning and not message.reasoning:
            message.reasoning = "".join(reasoning)
        yield response


class ScriptedModel(FunctionModel):
    """A model that answers from a list, one item per request.

    Items: a ``str`` (text answer), a `ToolCall` or list of them, an `AssistantMessage`, a
    `ModelResponse`, an exception instance (raised, e.g. ``RateLimitError(...)`` to test retries),
    or a function ``(messages, request) -> item``. ``context_window``: as `FunctionModel`'s.
    """

    def __init__(
        self, responses: Iterable[Any], *, model_name: str = "scripted", context_window: int | None = None
    ) -> None:
        self.script = list(responses)
        self.position = 0
        super().__init__(self._next, model_name=model_name, context_window=context_window)

    async def _next(self, messages: list[Message], request: ModelRequest) -> Any:
        if self.position >= len(self.script):
            raise UserError(f"ScriptedModel has no answer left after {len(self.script)} requests")
        item = self.script[self.position]
        self.position += 1
        if isinstance(item, BaseException):
            raise item
        if callable(item) and not isinstance(item, (ToolCall, AssistantMessage, ModelResponse)):
            item = item(messages, request)
            if inspect.isawaitable(item):
                item = await item
        return item

    def reset(self) -> None:
        self.position = 0
