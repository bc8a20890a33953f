"""The `Model` protocol every provider implements, and the request/response shapes.

Imports messages, usage, exceptions and pricing (for `Model.context_window`, which imports
genai-prices only when first read). A model answers one request either whole (`request`) or as a
stream (`request_stream`) of text deltas (``str``), `ReasoningText` deltas, and finally the whole
`ModelResponse`. The run loop asks for a stream only when someone consumes events.

A model's optional powers are members of `Model` too, each with a default that means "not
supported": `context_window`, `native_context`, `native_compaction` with `compact`,
`keep_recording`, `recorded_result` and `batched` (the model answering through its provider's
batch API, ``agent.map(..., batch_api=True)``). The run loop calls them on every model, never probes for
them; `WrappedModel`, the base of every model that wraps another, forwards each of them.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..exceptions import ModelError, UserError
from ..messages import AssistantMessage, Message, ToolCall, ToolResultMessage
from ..pricing import context_window_of
from ..usage import TokenCounts

if TYPE_CHECKING:
    from ..context import NativeContext
    from ._batch import BatchRounds
    from ._recording import RecordingSink

__all__ = ["Model", "ModelRequest", "ModelResponse", "ReasoningText", "StreamItem", "WrappedModel",
           "check_context_window"]


@dataclass(slots=True)
class ModelRequest:
    """What the run loop asks a model for."""

    messages: list[Message]
    tools: Sequence[dict[str, Any]] = field(default_factory=list)
    """Tool definitions: ``{"name", "description", "parameters"}`` (JSON schema)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """temperature, max_tokens, seed, tool_choice, parallel_tool_calls, extra_body, ..."""
    step: int = 0
    output_tool: str | None = None
    """The name of the tool (among `tools`) that carries a structured final answer, when the
    agent has an ``output_type`` (fakes use it to answer through it)."""
    parallel_tools: bool = True
    """False when the agent runs the calls of one answer in order (``tools_in_order``): a
    provider may then ask for one call per answer unless the ``parallel_tool_calls`` setting says
    otherwise (`AnthropicModel` sends ``disable_parallel_tool_use``; `OpenAIModel` sends
    ``parallel_tool_calls`` only when it is set, since some compatible servers refuse it)."""
    context_management: NativeContext | None = None
    """Provider-side context management to ask for (``Compaction.native()``), set only for a
    model whose `Model.native_context` is True."""


@dataclass(slots=True)
class ModelResponse:
    """One complete answer with its token counts."""

    message: AssistantMessage
    usage: TokenCounts = field(default_factory=TokenCounts)
    model: str | None = None
    """The model name the server reported (may differ from the one asked for)."""
    request_id: str | None = None
    error: ModelError | None = None
    """Set when the answer arrived (and is billed) but cannot be used: the run loop records its
    usage row, keeps the answer out of the thread and fails the run with this error (e.g. a
    `ContentFilterError` for Anthropic's stop reason ``refusal``, with the provider's details)."""
    fallbacks: list[Any] = field(default_factory=list)
    """The models that failed before this answer, as `FallbackModel` records them (each a
    `nbagent.models.fallback.Fallback`: failed, error, next); empty for a direct answer."""
    replayed: bool = False
    """True for an answer taken from a recording (`nbagent.models.replay`): its usage row is
    marked ``replayed`` and costs 0."""
    batch: bool = False
    """True for an answer read from a provider's batch (``agent.map(..., batch_api=True)``): its
    usage row is marked ``batch`` and priced at the batch price."""


class ReasoningText(str):
    """A streamed piece of reasoning text (a ``str`` subclass, so text deltas stay plain ``str``)."""

    __slots__ = ()


StreamItem = str | ReasoningText | ModelResponse
"""What `Model.request_stream` yields: answer text deltas (plain ``str``), `ReasoningText` deltas,
and last the whole `ModelResponse`."""


def check_context_window(where: str, value: Any) -> int | None:
    """`value` when it is a context window a model can be given (a positive int of tokens, not a
    bool) or None.

    Raises:
        UserError: anything else, naming `where` (``"OpenAIModel(context_window=...)"``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"{where} is a positive int (tokens) or None, got {value!r}")
    return value


def check_known_settings(settings: Mapping[str, Any], allowed: frozenset[str], create: str, hint: str) -> None:
    """Raise `UserError` for the settings an SDK's `create` method (``"the openai SDK's
    responses.create"``) does not take (`allowed`: the ones it does); `hint` says how to send
    others anyway."""
    unknown = sorted(k for k in settings if k not in allowed)
    if unknown:
        raise UserError(f"unknown model setting(s) {unknown} for {create}; {hint}")


class Model:
    """Base class of models. Subclasses set `provider` and `model_name` and implement `request`;
    streaming providers also override `request_stream`.

    The optional powers below have defaults that mean "not supported"; a model that has one
    overrides it (and a model that wraps another subclasses `WrappedModel`, which forwards them).
    """

    provider: str = "unknown"
    model_name: str = "unknown"
    priced: bool = True
    """Whether its usage rows are priced from the price table; the fakes set False (their
    calls cost nothing unless an agent is given its own ``prices``)."""
    native_context: bool = False
    """Whether the model can ask its provider to manage the context itself (a request's
    ``context_management``; ``Compaction.native()``): `AnthropicModel`'s tool-result clearing."""
    native_compaction: bool = False
    """Whether `compact` works: the provider compacts a conversation itself
    (``Compaction.native()``; `OpenAIResponsesModel`'s ``/v1/responses/compact``)."""
    _context_window: int | None = None
    """The window given to the constructor (``context_window=``); None: `_default_context_window`."""

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens (how long a conversation it takes, as the provider
        states it), or None when unknown.

        The ``context_window=`` argument of the model's constructor when given, else what
        `nbagent.pricing.context_window_of` finds for `model_name` at `provider` (the fakes:
        None; the bundled local model: its server's ``ctx``). Read when asked for, not when the
        model is made. Setting it checks the value as the constructors do (None: back to the
        default).
        """
        if self._context_window is not None:
            return self._context_window
        return self._default_context_window()

    @context_window.setter
    def context_window(self, value: int | None) -> None:
        self._context_window = check_context_window(f"{type(self).__name__}.context_window", value)

    def _default_context_window(self) -> int | None:
        """The window when none was given: genai-prices' figure (subclasses may know better)."""
        return context_window_of(self.model_name, self.provider)

    async def request(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Yield text deltas (``str``), `ReasoningText` deltas, then the `ModelResponse`.

        The default asks for the whole answer and yields its text as one delta.
        """
        response = await self.request(request)
        if response.message.text:
            yield response.message.text
        yield response

    async def compact(self, request: ModelRequest) -> ModelResponse:
        """Have the provider compact `request`'s messages (``Compaction.native()``; asked only of
        a model whose `native_compaction` is True): the answer's ``thinking_blocks`` are the items
        later requests send in place of those messages; its usage is the compaction's.

        Raises:
            UserError: the model cannot (the default).
        """
        raise UserError(f"{type(self).__name__} cannot compact a conversation itself (native_compaction is False)")

    async def keep_recording(self, sink: RecordingSink, thread: str, response: ModelResponse) -> None:
        """Keep the recording of `response` in `sink` with `thread`, when this model records its
        calls (`nbagent.models.record`). The run loop calls it after each answer, with the run's
        store as the sink; the default keeps nothing."""

    def recorded_result(self, call: ToolCall, edited: dict[str, Any] | None = None) -> ToolResultMessage | None:
        """The result `call` had when it was recorded, which the run loop uses instead of running
        the tool (``replay(..., tools="recorded")``); `edited`: the arguments a person edited.
        The default, None: the tool runs."""
        return None

    def batched(self, rounds: BatchRounds) -> Model | None:
        """This model with its provider calls answered through its provider's batch API by
        `rounds` (the rounds of ``agent.map(..., batch_api=True)``: `nbagent.models._batch`), or
        None when it has no batch API (the default; `OpenAIModel`, `OpenAIResponsesModel` and
        `AnthropicModel` have one)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r})"


class WrappedModel(Model):
    """The base of a model that wraps another (`inner`): it answers, and reports its provider,
    name, pricing, context window and every optional power, as `inner` does.

    Subclass it to change what you need, e.g. `request` to log or edit each request; whatever
    you do not override stays `inner`'s, so a wrapper never turns off replay, recording or
    native compaction. Streaming: `request_stream` streams `inner`'s answer while `request` is
    not overridden; once it is, the stream goes through your `request` (the answer arrives
    whole), so your code is never bypassed: override `request_stream` too to stream.
    `nbagent.models.record` and tracing are wrappers of this kind.
    """

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    @property
    def provider(self) -> str:  # type: ignore[override]
        return self.inner.provider

    @property
    def model_name(self) -> str:  # type: ignore[override]
        return self.inner.model_name

    @property
    def priced(self) -> bool:  # type: ignore[override]
        return self.inner.priced

    @property  # type: ignore[misc]
    def context_window(self) -> int | None:
        return self.inner.context_window

    @property
    def native_context(self) -> bool:  # type: ignore[override]
        return self.inner.native_context

    @property
    def native_compaction(self) -> bool:  # type: ignore[override]
        return self.inner.native_compaction

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.request(request)

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if type(self).request is WrappedModel.request:  # `request` as it came: stream `inner`'s
            stream = self.inner.request_stream(request)
        else:  # a wrapper's own `request` is never bypassed
            stream = Model.request_stream(self, request)
        async for item in stream:
            yield item

    async def compact(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.compact(request)

    async def keep_recording(self, sink: RecordingSink, thread: str, response: ModelResponse) -> None:
        await self.inner.keep_recording(sink, thread, response)

    def recorded_result(self, call: ToolCall, edited: dict[str, Any] | None = None) -> ToolResultMessage | None:
        return self.inner.recorded_result(call, edited)

    def batched(self, rounds: BatchRounds) -> Model | None:
        """A shallow copy of this wrapper around `inner` batched (so the wrapper's own `request`
        still runs, in front of the batch), or None when `inner` has no batch API. The copy shares
        the wrapper's attributes: a list it appends to is the wrapper's, a number it rebinds is
        the copy's own."""
        inner = self.inner.batched(rounds)
        if inner is None:
            return None
        twin = copy.copy(self)
        twin.inner = inner
        return twin

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
