"""`OpenAIModel` itself: the SDK client of each event loop, and one request's orchestration.

Owns the configuration (model name, base URL, key, provider, settings, timeout, deadline), one
``AsyncOpenAI`` per event loop (closed when that loop shuts down), and the calls (each within its
time limit, `models._deadline`, shared with `models.anthropic`): `request` (the whole answer) and
`request_stream` (text and reasoning deltas, then the answer), including the answers in another
shape than asked (a whole completion to a streamed request, event-stream text
unlabelled or labelled as JSON, an event stream to a whole request) and the 200s whose body is no
answer at all (`ResponseBodyError`). What a request sends is `_wire`'s, how an answer is read
`_stream`'s, how a failure is named `_errors`'.

May import: ``openai``, nbagent's exceptions, model base and `models._deadline` / `models._keys`, and
`_wire`, `_stream`, `_errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import openai
from openai import AsyncOpenAI

from ...exceptions import ModelError, UserError
from .._clients import client_for_loop, close_for_loop
from .._deadline import DEFAULT_DEADLINE, Deadline, checked_deadline, read_within, within
from .._keys import Travelling, _safe_url, _Secret
from ..base import Model, ModelRequest, ModelResponse, StreamItem, check_context_window
from . import _errors
from ._stream import _StreamAssembler, completion_response, parse_whole_body, stream_items
from ._wire import WireCache, check_settings, request_params

DEFAULT_TIMEOUT = 300.0
"""Seconds: the SDK's per-operation timeout (connect, each read). Long, because a reasoning model
can think for minutes before its first byte."""

class OpenAIModel(Travelling, Model):
    """A chat-completions model on any OpenAI-compatible server, via the official ``openai`` SDK.

    ```python
    model = OpenAIModel("gpt-4.1-mini")                               # OPENAI_API_KEY from the env
    model = OpenAIModel("llama3.1", base_url="http://localhost:11434/v1", provider="ollama")
    agent = Agent(model, tools=[get_weather], settings={"temperature": 0})
    ```

    Args:
        model_name: the model to ask for; default ``$OPENAI_MODEL``.
        base_url: the server's ``.../v1`` URL; default ``$OPENAI_BASE_URL``, else OpenAI's.
        api_key: default ``$OPENAI_API_KEY``; servers that need none get a placeholder when a
            `base_url` is given. Never shown in reprs, messages, events, usage rows or errors.
        provider: the name written to usage rows and used for prices (``"openai"``,
            ``"groq"``, ``"ollama"``...): what you configured, whatever the URL.
        settings: default settings (temperature, max_tokens, seed, stop, top_p, tool_choice,
            parallel_tool_calls, response_format, reasoning_effort, extra_body, ...); the
            agent's settings are merged over them (``extra_body`` / ``extra_headers`` dicts key
            by key). A ``tool_choice`` that is a tool's name forces that tool.
        timeout: seconds for each network operation (connect, each read); see also `deadline`.
        max_retries: the SDK's own retries; 0 because nbagent's run loop retries (and shows it).
        client: an ``openai.AsyncOpenAI`` to use as is (then `base_url`, `api_key`, `timeout`,
            `http_client` are ignored).
        http_client: an ``httpx2.AsyncClient`` for the SDK (proxies, custom TLS); it is bound to
            one event loop, so use the model from that loop only.
        send_reasoning: send an answer's reasoning text back as ``reasoning_content`` (what
            DeepSeek needs between tool calls); only answers from servers that return reasoning
            text have any.
        tool_images: send images tools return in a user message after the answer's tool results
            (``tool`` messages take text only; they say the images follow). False for a text-only
            model (`local_model`): it reads only the tool's text.
        deadline: seconds for a whole model call, from sending the request to the stream's last
            chunk (``None``: no limit; default `DEFAULT_DEADLINE`, 600). Unlike `timeout`, it
            ends a stream kept alive by keep-alive comments or empty deltas. A call past it fails
            with a retried `ModelTimeoutError`; each retry has a deadline of its own. It counts
            the time the consumer spends between deltas too, but it never interrupts the
            consumer: the stream fails at its next read.
        context_window: the model's context window in tokens, for a model genai-prices does not
            know or a server that serves less of it (`Model.context_window`; default: genai-prices'
            figure for `model_name` at `provider`, None when unknown).

    One SDK client is made per event loop and reused, so the same model works from
    ``agent.run_sync`` (nbagent's background loop) and from ``await agent.run`` in one notebook.
    """

    _key_variable = "OPENAI_API_KEY"  # pickled without its key, read from there where it arrives

    def __init__(
        self,
        model_name: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str = "openai",
        settings: Mapping[str, Any] | None = None,
        timeout: float | Any = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        client: AsyncOpenAI | None = None,
        http_client: Any = None,
        send_reasoning: bool = True,
        deadline: float | None = DEFAULT_DEADLINE,
        tool_images: bool = True,
        context_window: int | None = None,
    ) -> None:
        model_name = model_name or os.environ.get("OPENAI_MODEL") or None
        if not model_name:
            raise UserError(
                f"{type(self).__name__} needs a model name: {type(self).__name__}('gpt-4.1-mini'), "
                "Agent('openai:gpt-4.1-mini'), or set the OPENAI_MODEL environment variable"
            )
        self.model_name = model_name
        self._context_window = check_context_window(f"{type(self).__name__}(context_window=...)", context_window)
        self.provider = provider
        self.settings: dict[str, Any] = dict(settings or {})
        self._check_settings(self.settings)
        self.timeout = timeout
        self.max_retries = max_retries
        self.send_reasoning = send_reasoning
        self.tool_images = tool_images
        self.deadline = checked_deadline("OpenAIModel", deadline)
        self._client = client
        self._http_client = http_client
        if client is not None:
            self.base_url: str | None = str(client.base_url)
            key: str | None = client.api_key
        else:
            self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
            if not key:
                if self.base_url is None or "api.openai.com" in self.base_url:
                    raise UserError(
                        "no OpenAI API key: pass OpenAIModel(..., api_key=...) or set OPENAI_API_KEY "
                        "(for a local server that needs no key, pass base_url=...)"
                    )
                key = self._key_placeholder = "not-needed"  # no secret: it travels (`Travelling`)
        self._api_key = _Secret(key or "")
        self._init_clients()

    def _check_settings(self, settings: Mapping[str, Any]) -> None:
        """Raise `UserError` for a setting the SDK's create call does not take."""
        check_settings(settings)

    def _init_clients(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[AsyncOpenAI, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()
        self._wire = WireCache()

    def __repr__(self) -> str:
        url = f", base_url={_safe_url(self.base_url)!r}" if self.base_url else ""
        return f"OpenAIModel({self.model_name!r}, provider={self.provider!r}{url})"

    # ------------------------------------------------------------------ client per event loop
    async def client(self) -> AsyncOpenAI:
        """The SDK client for the running event loop (made on first use in that loop).

        Its connections are closed when the loop shuts down (``asyncio.run`` and pytest close
        async generators first; a sentinel generator does it), so no socket outlives its loop.
        """
        if self._client is not None:
            return self._client
        client: AsyncOpenAI = await client_for_loop(self, lambda: AsyncOpenAI(
            api_key=self._api_key.get(),
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=self._http_client,
        ))
        return client

    async def aclose(self) -> None:
        """Close the SDK client of the running event loop (its pooled connections)."""
        if self._client is not None:
            return  # the caller's client: the caller closes it
        await close_for_loop(self)

    # ------------------------------------------------------------------ request building, errors
    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (without the key)."""
        return request_params(
            request, model_name=self.model_name, settings=self.settings, cache=self._wire,
            send_reasoning=self.send_reasoning, stream=stream, tool_images=self.tool_images,
        )

    def stream_error(self, error: Any, fallback: str | None = None) -> ModelError:
        """The nbagent error for an error object a server sent inside an already started stream:
        a refused request fails at once, anything else is retried (`_errors.stream_error`)."""
        return _errors.stream_error(self, error, fallback)

    def map_error(self, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
        """The nbagent error for an SDK / transport exception (None: not a model-call failure).

        ``streaming``: the exception came while reading an already started stream.
        """
        return _errors.map_error(self, exc, streaming=streaming)

    # ------------------------------------------------------------------ requests
    async def _create(self, params: dict[str, Any], deadline: Deadline) -> Any:
        """``chat.completions.create`` with the SDK's errors mapped to nbagent's: the SDK's stream
        for a streamed request, else the ``ChatCompletion`` (or the chunks of an event stream
        answering it, `_whole_answer`)."""
        client = await self.client()
        if params.get("stream"):
            return await within(deadline, lambda: client.chat.completions.create(**params), self.map_error)
        raw = await within(deadline, lambda: client.chat.completions.with_raw_response.create(**params),
                           self.map_error)
        return _whole_answer(self, raw)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask for the whole answer (no streaming), within the call's `deadline`."""
        deadline = Deadline(self, _errors._where)
        try:
            answer = await self._create(self.request_params(request, stream=False), deadline)
        finally:
            deadline.close()
        if not isinstance(answer, list):
            return self.map_completion(answer)
        items = stream_items(_aiter(answer), _StreamAssembler(self.provider), self.stream_error, _no_chunks)
        async with contextlib.aclosing(items):
            async for item in items:
                if isinstance(item, ModelResponse):
                    return item
        raise _no_chunks()  # (stream_items always ends with the response)

    def map_completion(self, raw: Any) -> ModelResponse:
        """Map a ``ChatCompletion`` to a `ModelResponse` (choice 0 when there are several)."""
        return completion_response(raw)

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream the answer: text deltas (``str``), `ReasoningText` deltas, then the `ModelResponse`,
        all within the call's `deadline`."""
        deadline = Deadline(self, _errors._where)
        try:
            stream = await self._create(self.request_params(request, stream=True), deadline)
            source: Any = stream
            content_type = stream.response.headers.get("content-type", "")
            if "event-stream" not in content_type:
                # A server or proxy that ignored stream=True (one whole completion), sent the event
                # stream labelled as JSON (seen in a 2023 OpenAI recording) or unlabelled, or an
                # error page: read whole, so that a body that is no answer can be named.
                whole = await self._read_whole(stream, content_type, deadline)
                if isinstance(whole, ModelResponse):
                    if whole.message.text:
                        yield whole.message.text
                    yield whole
                    return
                source = _aiter(whole)
            state = _StreamAssembler(self.provider)
            state.request_id = stream.response.headers.get("x-request-id")

            def empty() -> ModelError:  # not one event: an empty body, or one without a "data:" line
                return _errors.body_error(self, stream.response.status_code, content_type, None, streaming=True)

            async with (
                contextlib.aclosing(self._reading(stream, source, deadline)) as chunks,
                contextlib.aclosing(stream_items(chunks, state, self.stream_error, empty)) as items,
            ):
                async for item in items:
                    yield item
        finally:
            deadline.close()

    def _reading(self, stream: Any, source: AsyncIterator[Any], deadline: Deadline) -> AsyncGenerator[Any, None]:
        """The items of `source` (the SDK stream, or its response's bytes), then `stream` closed
        (`_deadline.read_within`): a failure while reading becomes nbagent's error (`map_error`
        with ``streaming=True``), raised without the SDK exception attached, whose request carries
        the ``Authorization`` header; so does the `deadline` passing (`ModelTimeoutError`)."""
        return read_within(deadline, stream, source, self.map_error)

    async def _read_whole(self, stream: Any, content_type: str, deadline: Deadline) -> ModelResponse | list[Any]:
        """Read a streamed request's answer that is not labelled as an event stream: a whole
        completion (as a `ModelResponse`), event-stream text (as the list of its chunks), an error
        object sent with status 200 (raised as `stream_error` sorts it), or else a body that is
        no answer (`ResponseBodyError`)."""
        from openai.types.chat import ChatCompletion

        pieces = [piece async for piece in self._reading(stream, stream.response.aiter_bytes(), deadline)]
        data = b"".join(pieces)
        whole: Any = None
        if data.strip():
            try:
                whole = parse_whole_body(data.decode("utf-8"))
            except (ValueError, TypeError):  # not UTF-8, not JSON, not JSON events
                whole = None
        if isinstance(whole, dict):
            if whole.get("error"):
                raise self.stream_error(whole["error"])  # an error answered with status 200
            response = self.map_completion(ChatCompletion.construct(**whole))
            response.request_id = stream.response.headers.get("x-request-id") or response.request_id
            return response
        if whole:
            return whole  # type: ignore[no-any-return]
        raise _errors.body_error(self, stream.response.status_code, content_type, data, streaming=True)


def _whole_answer(model: OpenAIModel, raw: Any) -> Any:
    """The ``ChatCompletion`` of a whole answer (the SDK's raw response); the chunks of an event
    stream sent instead; or `ResponseBodyError` when the body is neither: an HTML page, empty, not
    UTF-8 (which the SDK would return as text, or fail on with a bare ``JSONDecodeError`` /
    ``UnicodeDecodeError``)."""
    response = raw.http_response
    parsed: Any = None
    if response.content.strip():
        try:
            parsed = raw.parse()
        except (ValueError, TypeError):  # JSONDecodeError, UnicodeDecodeError, validation
            parsed = None
    if isinstance(parsed, openai.BaseModel):
        return parsed
    data = response.content
    content_type = response.headers.get("content-type", "")
    if "event-stream" in content_type or data.lstrip().startswith(b"data:"):
        # a server or proxy that streams whatever was asked: its chunks are the answer
        with contextlib.suppress(ValueError, TypeError):
            chunks = parse_whole_body(data.decode("utf-8"))
            if isinstance(chunks, list) and chunks:
                return chunks
    raise _errors.body_error(model, response.status_code, content_type, data, streaming=False)


def _no_chunks() -> ModelError:
    return ModelError("an event stream without chunks")  # unreachable: `_whole_answer` returns chunks only


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item

