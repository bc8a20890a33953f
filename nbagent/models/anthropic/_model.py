"""`AnthropicModel` itself: the Messages API on the `HTTPModel` base.

Owns the model's configuration beyond the base's (max_tokens, thinking, prompt caching,
continuations) and its three parts for `HTTPModel`: the wire (`request_params`, `_wire`'s;
``messages.create`` as the sends), the readers (`read_stream`: `_stream.stream_items` over the
SDK's events; `read_answer`: a whole ``Message``; `body_events`: events that came as one body)
and the error table (`AnthropicErrors`). Also a paused turn (``pause_turn``), continued by sending
its content back: one model call may be several requests. The client per event loop, the
deadline of each request, the key's hygiene and the answers in another shape than asked are the
base's.

May import: ``anthropic``, nbagent's exceptions and model base, the models' `_http` base and
`_keys`, and `_wire`, `_stream`, `_errors`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from anthropic import AsyncAnthropic

from ...exceptions import UserError
from .._deadline import DEFAULT_DEADLINE
from .._http import DEFAULT_TIMEOUT, HTTPModel, Reading
from .._keys import safe_url, scrub_error
from ..base import ModelRequest, ModelResponse, StreamItem
from ._errors import AnthropicErrors
from ._stream import StreamAssembler, joined, message_response, paused_content, stream_items, too_many_pauses
from ._wire import check_settings, request_params

__all__ = ["DEFAULT_MAX_CONTINUATIONS", "DEFAULT_MAX_TOKENS", "DEFAULT_TIMEOUT", "AnthropicModel"]

DEFAULT_MAX_TOKENS = 4096

DEFAULT_MAX_CONTINUATIONS = 5
"""How many times one model call continues a turn the server paused (stop reason ``pause_turn``:
a long-running server tool such as web search ran out of its server-side iterations)."""


def _thinking_param(thinking: Any) -> dict[str, Any] | None:
    if thinking is None or thinking is False:
        return None
    if isinstance(thinking, bool):
        raise UserError("AnthropicModel(thinking=...) is a token budget (int >= 1024) or a dict, not True")
    if isinstance(thinking, int):
        return {"type": "enabled", "budget_tokens": thinking}
    if isinstance(thinking, Mapping):
        return dict(thinking)
    raise UserError(f"AnthropicModel(thinking=...) is a token budget or a dict, got {thinking!r}")


class AnthropicModel(HTTPModel):
    """A Claude model through the official ``anthropic`` SDK (the Messages API).

    ```python
    model = AnthropicModel("claude-sonnet-4-5")                 # ANTHROPIC_API_KEY from the env
    model = AnthropicModel("claude-sonnet-4-5", thinking=2048)  # extended thinking, 2048 tokens
    agent = Agent(model, tools=[get_weather])
    ```

    Args:
        model_name: the model to ask for (``claude-sonnet-4-5``, ``claude-haiku-4-5``...).
        api_key: default ``$ANTHROPIC_API_KEY``. Never shown in reprs, messages, events, usage
            rows or errors.
        base_url: the server's root URL (the SDK adds ``/v1/messages``); default
            ``$ANTHROPIC_BASE_URL``, else Anthropic's.
        max_tokens: the answer's token limit (the Messages API needs one); a ``max_tokens``
            setting overrides it. An answer cut off there has finish reason ``length``.
        thinking: extended thinking: a token budget (``2048``) or the API's dict
            (``{"type": "enabled", "budget_tokens": 2048}``); None for none. The thinking text
            streams as `ReasoningText`; its signed blocks are kept on the answer
            (`AssistantMessage.thinking_blocks`) and sent back unchanged. The API takes no forced
            tool with thinking: a ``tool_choice`` of ``required`` or a tool's name is sent as auto.
        cache: prompt-caching breakpoints (``cache_control``) on the last tool, the system prompt
            and the latest message, so each step reads the history before it from the cache.
        settings: default settings (temperature, top_p, top_k, stop, tool_choice,
            parallel_tool_calls, metadata, extra_body, ...); the agent's are merged over them.
        timeout: seconds for each network operation (connect, each read).
        max_retries: the SDK's own retries; 0 because nbagent's run loop retries (and shows it).
        client: an ``anthropic.AsyncAnthropic`` to use as is (then `base_url`, `api_key`,
            `timeout` are ignored).
        deadline: seconds for each request of a model call, from sending it to the stream's last
            event (None: no limit; default `DEFAULT_DEADLINE`, 600), as ``OpenAIModel(deadline=...)``:
            it also ends a stream kept alive by ``ping`` events. A call past it fails with a
            retried `ModelTimeoutError`. A paused turn's continuation has a deadline of its own.
        max_continuations: how many times a paused turn (stop reason ``pause_turn``, from a
            long-running server tool such as web search) is continued within one model call, by
            sending the paused content back as the API documents; the parts make one answer
            (token counts summed). A turn still paused after that fails the run.
        context_window: the model's context window in tokens (`Model.context_window`; default:
            genai-prices' figure for `model_name`, None when unknown).

    With ``Agent(compaction=Compaction.native())`` each request asks the API to clear old tool
    results itself (``context_management`` with a ``clear_tool_uses_20250919`` edit, behind the
    ``context-management-2025-06-27`` beta header); see docs/context.md.

    Stop reasons: ``end_turn`` / ``stop_sequence`` end an answer (finish reason ``stop``),
    ``tool_use`` asks for tools; ``max_tokens`` cuts it off (``length``) and
    ``model_context_window_exceeded`` too (``context_window``): a text answer then completes
    with ``truncated=True``, a cut-off tool call fails the run. ``refusal`` (Claude's streaming
    classifiers stopped the answer) fails the run with a `ContentFilterError` carrying the
    category and explanation the API gave; the refused answer is kept out of the thread.

    It pickles as its configuration, without the key (`Travelling`: ``ANTHROPIC_API_KEY`` is read
    where it arrives, e.g. on a Ray or Dask worker); a model made with ``client=`` does not.
    """

    key_variable = "ANTHROPIC_API_KEY"
    base_url_variable = "ANTHROPIC_BASE_URL"
    default_host = "api.anthropic.com"
    request_id_header = "request-id"
    expected = "a Messages API answer"
    errors = AnthropicErrors()
    native_context = True  # Compaction.native(): the API's tool-result clearing

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking: int | Mapping[str, Any] | None = None,
        cache: bool = True,
        settings: Mapping[str, Any] | None = None,
        timeout: float | Any = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        client: AsyncAnthropic | None = None,
        deadline: float | None = DEFAULT_DEADLINE,
        max_continuations: int = DEFAULT_MAX_CONTINUATIONS,
        context_window: int | None = None,
    ) -> None:
        if isinstance(max_continuations, bool) or not isinstance(max_continuations, int) or max_continuations < 0:
            raise UserError(f"AnthropicModel(max_continuations=...) is an int >= 0, got {max_continuations!r}")
        self.max_tokens = max_tokens
        self.thinking = _thinking_param(thinking)
        self.cache = cache
        self.max_continuations = max_continuations
        super().__init__(
            model_name, provider="anthropic", base_url=base_url, api_key=api_key, settings=settings, timeout=timeout,
            max_retries=max_retries, deadline=deadline, client=client, context_window=context_window,
        )

    def _default_model_name(self) -> str:
        raise UserError("AnthropicModel needs a model name: AnthropicModel('claude-sonnet-4-5')")

    def _check_settings(self, settings: Mapping[str, Any]) -> None:
        check_settings(settings)

    def _no_key(self) -> str:
        raise UserError("no Anthropic API key: pass AnthropicModel(..., api_key=...) or set ANTHROPIC_API_KEY")

    def __repr__(self) -> str:
        url = f", base_url={safe_url(self.base_url)!r}" if self.base_url else ""
        return f"AnthropicModel({self.model_name!r}{url})"

    def _make_client(self) -> AsyncAnthropic:
        return AsyncAnthropic(api_key=self._api_key.get(), base_url=self.base_url, timeout=self.timeout,
                              max_retries=self.max_retries)

    # ------------------------------------------------------------------ the wire
    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``messages.create`` (without the key)."""
        return request_params(
            request, model_name=self.model_name, settings=self.settings, max_tokens=self.max_tokens,
            thinking=self.thinking, cache=self.cache, stream=stream,
        )

    def _resource(self, client: AsyncAnthropic) -> Any:
        return client.messages

    def batch_wire(self) -> Any:
        """Anthropic's Message Batches API (``agent.map(..., batch_api=True)``)."""
        from ._batch import AnthropicBatchWire

        return AnthropicBatchWire(self)

    # ------------------------------------------------------------------ the readers
    def read_stream(self, events: AsyncIterator[Any], reading: Reading) -> AsyncGenerator[StreamItem, None]:
        """`_stream.stream_items` over the SDK's events; the assembler stays on `reading` (a paused
        turn sends its content back)."""
        state = reading.state = StreamAssembler()
        state.request_id = reading.request_id
        return stream_items(events, state, reading.empty)

    def read_answer(self, body: dict[str, Any], reading: Reading) -> ModelResponse | None:
        """A whole ``Message`` (``"type": "message"`` with a ``content`` list); it stays on
        `reading` (a paused turn sends its content back)."""
        if body.get("type") != "message" or not isinstance(body.get("content"), list):
            return None
        from anthropic.types import Message

        message = reading.state = Message.construct(**body)
        return message_response(message, reading.request_id)

    def body_events(self, data: list[str]) -> list[Any] | None:
        try:
            return [json.loads(d) for d in data]  # `StreamAssembler` reads dicts as it reads the SDK's events
        except ValueError:
            return None

    # ------------------------------------------------------------------ a turn in parts
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask for the whole answer (no streaming); a paused turn is continued (`max_continuations`)."""
        params = self.request_params(request, stream=False)
        parts: list[ModelResponse] = []
        while True:
            reading = Reading()
            parts.append(await self._call_whole(params, reading))
            if parts[-1].message.finish_reason != "pause_turn":
                return joined(parts)
            if len(parts) > self.max_continuations:
                return _unfinished(parts, self.max_continuations)
            params = _continued(params, _paused(reading))

    async def request_stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream the answer: text deltas (``str``), `ReasoningText` deltas, then the `ModelResponse`;
        a paused turn is continued (`max_continuations`), its parts streamed as one answer."""
        params = self.request_params(request, stream=True)
        parts: list[ModelResponse] = []
        while True:
            reading = Reading()
            async with contextlib.aclosing(self._call_stream(request, params, reading)) as items:
                async for item in items:
                    if isinstance(item, ModelResponse):
                        parts.append(item)
                    else:
                        yield item
            if parts[-1].error is not None:
                scrub_error(self._api_key, parts[-1].error)  # (`_call_stream` leaves it to its caller)
            if parts[-1].message.finish_reason != "pause_turn":
                yield joined(parts)
                return
            if len(parts) > self.max_continuations:
                yield _unfinished(parts, self.max_continuations)
                return
            params = _continued(params, _paused(reading))


def _paused(reading: Reading) -> list[dict[str, Any]]:
    """The content of a paused turn as the server sent it: from the stream's assembler, or the whole message."""
    state = reading.state
    return state.paused_content() if isinstance(state, StreamAssembler) else paused_content(state)


def _continued(params: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
    """The request that continues a paused turn: the same one, the paused content (as the server
    sent it) appended as the last, assistant, message (after the parts of earlier pauses)."""
    messages = params["messages"]
    if messages and messages[-1]["role"] == "assistant":  # paused again: the turn so far, then this part
        messages = [*messages[:-1], {"role": "assistant", "content": [*messages[-1]["content"], *content]}]
    else:
        messages = [*messages, {"role": "assistant", "content": content}]
    return {**params, "messages": messages}


def _unfinished(parts: list[ModelResponse], continuations: int) -> ModelResponse:
    response = joined(parts)
    too_many_pauses(response, continuations)
    return response


