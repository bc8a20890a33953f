"""`AnthropicModel` itself: the SDK client of each event loop, and one request's orchestration.

Owns the configuration (model name, base URL, key, max_tokens, thinking, prompt caching,
settings, timeout, deadline, continuations), one ``AsyncAnthropic`` per event loop (closed when
that loop shuts down), and the calls: `request` (the whole answer) and `request_stream` (text and
reasoning deltas, then the answer), each request within its time limit (`models._deadline`,
shared with `models.openai`) and a paused turn (``pause_turn``) continued by sending its content
back. What a request sends is `_wire`'s, how an answer is read `_stream`'s, how a failure is named
`_errors`'.

May import: ``anthropic``, nbagent's exceptions, model base and `models._deadline` /
`models._keys`, and `_wire`, `_stream`, `_errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from anthropic import AsyncAnthropic

from ...exceptions import ModelError, ModelResponseError, ResponseBodyError, UserError
from .._clients import client_for_loop, close_for_loop
from .._deadline import DEFAULT_DEADLINE, Deadline, checked_deadline, read_within, within
from .._keys import Travelling, _safe_url, _Secret
from ..base import Model, ModelRequest, ModelResponse, StreamItem, check_context_window
from . import _errors
from ._stream import _StreamAssembler, joined, message_response, paused_content, too_many_pauses
from ._wire import check_settings, request_params

DEFAULT_TIMEOUT = 300.0
"""Seconds: the SDK's per-operation timeout (connect, each read)."""

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


class AnthropicModel(Travelling, Model):
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

    _key_variable = "ANTHROPIC_API_KEY"
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
        if not model_name:
            raise UserError("AnthropicModel needs a model name: AnthropicModel('claude-sonnet-4-5')")
        self.model_name = model_name
        self._context_window = check_context_window("AnthropicModel(context_window=...)", context_window)
        self.provider = "anthropic"
        self.max_tokens = max_tokens
        self.thinking = _thinking_param(thinking)
        self.cache = cache
        self.settings: dict[str, Any] = dict(settings or {})
        check_settings(self.settings)
        self.timeout = timeout
        self.max_retries = max_retries
        self.deadline = checked_deadline("AnthropicModel", deadline)
        if isinstance(max_continuations, bool) or not isinstance(max_continuations, int) or max_continuations < 0:
            raise UserError(f"AnthropicModel(max_continuations=...) is an int >= 0, got {max_continuations!r}")
        self.max_continuations = max_continuations
        self._client = client
        if client is not None:
            self.base_url: str | None = str(client.base_url)
            key: str | None = client.api_key
        else:
            self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
            if not key:
                raise UserError("no Anthropic API key: pass AnthropicModel(..., api_key=...) or set ANTHROPIC_API_KEY")
        self._api_key = _Secret(key or "")
        self._init_clients()

    def _init_clients(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[AsyncAnthropic, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()

    def __repr__(self) -> str:
        url = f", base_url={_safe_url(self.base_url)!r}" if self.base_url else ""
        return f"AnthropicModel({self.model_name!r}{url})"

    # ------------------------------------------------------------------ client per event loop
    async def client(self) -> AsyncAnthropic:
        """The SDK client for the running event loop (made on first use in that loop, closed when
        the loop shuts down)."""
        if self._client is not None:
            return self._client
        client: AsyncAnthropic = await client_for_loop(self, lambda: AsyncAnthropic(
            api_key=self._api_key.get(), base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
        ))
        return client

    async def aclose(self) -> None:
        """Close the SDK client of the running event loop (its pooled connections)."""
        if self._client is not None:
            return
        await close_for_loop(self)

    # ------------------------------------------------------------------ request building, errors
    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``messages.create`` (without the key)."""
        return request_params(
            request, model_name=self.model_name, settings=self.settings, max_tokens=self.max_tokens,
            thinking=self.thinking, cache=self.cache, stream=stream,
        )

    def stream_error(self, error: Any) -> ModelError:
        """The nbagent error for an ``error`` event inside a started stream (`_errors.stream_error`)."""
        return _errors.stream_error(self, error)

    def map_error(self, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
        """The nbagent error for an SDK / transport exception (None: not a model-call failure)."""
        return _errors.map_error(self, exc, streaming=streaming)

    # ------------------------------------------------------------------ requests
    async def _create(self, params: dict[str, Any], deadline: Deadline) -> Any:
        """``messages.create``: the SDK's stream for a streamed request, else the parsed
        ``Message`` and its request id; the SDK's errors mapped to nbagent's."""
        client = await self.client()
        if params.get("stream"):
            return await within(deadline, lambda: client.messages.create(**params), self.map_error)

        async def whole() -> tuple[Any, str | None]:
            raw = await client.messages.with_raw_response.create(**params)
            return await _whole_message(self, raw), raw.headers.get("request-id")

        return await within(deadline, whole, self.map_error)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask for the whole answer (no streaming); a paused turn is continued (`max_continuations`)."""
        params = self.request_params(request, stream=False)
        parts: list[ModelResponse] = []
        while True:
            deadline = Deadline(self, _errors._where)
            try:
                message, request_id = await self._create(params, deadline)
            finally:
                deadline.close()
            parts.append(message_response(message, request_id))
            if message.stop_reason != "pause_turn":
                return joined(parts)
            if len(parts) > self.max_continuations:
                return _unfinished(parts, self.max_continuations)
            params = _continued(params, paused_content(message))

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream the answer: text deltas (``str``), `ReasoningText` deltas, then the `ModelResponse`;
        a paused turn is continued (`max_continuations`), its parts streamed as one answer."""
        params = self.request_params(request, stream=True)
        parts: list[ModelResponse] = []
        while True:
            state = _StreamAssembler(self._empty_stream)
            deadline = Deadline(self, _errors._where)
            try:
                stream = await self._create(params, deadline)
                state.request_id = stream.response.headers.get("request-id")
                reading: AsyncGenerator[Any, None] = read_within(deadline, stream, stream, self.map_error)
                async with contextlib.aclosing(reading) as events:
                    async for event in events:
                        delta = state.handle(event)
                        if delta is not None:
                            yield delta
            finally:
                deadline.close()
            response = state.finish()
            parts.append(response)
            if state.stop_reason != "pause_turn":
                yield joined(parts)
                return
            if len(parts) > self.max_continuations:
                yield _unfinished(parts, self.max_continuations)
                return
            params = _continued(params, state.paused_content())

    def _empty_stream(self) -> ModelError:
        return ModelResponseError("the event stream ended without a message_start event", provider=self.provider)


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


async def _whole_message(model: AnthropicModel, raw: Any) -> Any:
    """The SDK's ``Message`` of a whole answer, or a `ResponseBodyError` naming the status,
    content type and first bytes for a 200 whose body is no Messages API answer (a proxy's HTML
    page, an event stream, an empty body, cut-off JSON, other JSON: the SDK would give a string,
    a list or a message without content), or whose Content-Encoding does not decode."""
    from .._bodies import body_error

    response = raw.http_response
    content_type = response.headers.get("content-type", "")
    try:
        message = await raw.parse()
    except ValueError:  # JSON that cannot be parsed (cut off, empty)
        message = None
    except Exception as exc:  # the body's Content-Encoding does not decode (a bad gzip)
        if type(exc).__name__ != "DecodingError":
            raise
        encoding = response.headers.get("content-encoding", "")
        raise ResponseBodyError(
            f"the answer's body does not decode as its Content-Encoding {encoding!r} says "
            f"(content-type {content_type!r}): {type(exc).__name__}: {exc}",
            status_code=response.status_code, content_type=content_type, provider=model.provider,
        ) from None
    if getattr(message, "type", None) == "message" and isinstance(getattr(message, "content", None), list):
        return message
    raise body_error(model, response.status_code, content_type, await raw.read(), streaming=False,
                     expected="a Messages API answer")
