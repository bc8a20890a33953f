"""`HTTPModel`: the base of nbagent's HTTP providers, everything about a model call but the wire.

A provider supplies three parts (docs/architecture.md, "How to add a provider"):

- its wire: `HTTPModel.request_params` (nbagent's request in, one call's keywords or JSON out),
  `HTTPModel._make_client` (its SDK's client, or an HTTP client) and the sends: on an official
  SDK, `HTTPModel._resource` (``client.messages``); on a plain HTTP client, `HTTPModel._send`
  (one whole answer's HTTP response) and `HTTPModel._send_stream` (a started stream, as a `Streamed`);
- its readers, sans-IO: `HTTPModel.read_stream` (a stream's events, or its bytes, in; text
  deltas, `ReasoningText` deltas and last the `ModelResponse` out), `HTTPModel.read_answer` (a
  whole answer's JSON in) and, when it can, `HTTPModel.body_events` (event-stream text that came
  as one body);
- its error table: `HTTPModel.errors`, an `ErrorTable` (`models._http_errors`).

The base does the rest, the same way for every provider:

- one client per event loop, closed with its loop or soon after the model is dropped (`_clients`);
- the call's deadline, around the send and every read of the stream (`_deadline`);
- the key: read from `key_variable` unless given, held in a `Secret`, scrubbed out of every
  `ModelError` that leaves a call (`_keys.scrub_error`), never pickled (`_travel`);
- a 2xx body that is not what was asked for (`_whole_body`): a whole answer to a streamed request,
  an event stream to a whole one, an error object sent with a 2xx status (sorted as the table's
  `stream_error` says), an HTML page, an empty body, a stream without events;
- failures: an error status (the SDKs raise it; a plain HTTP client's is read here), timeouts,
  lost connections, a stream that broke off (`ErrorTable.map_error`).

The answer side reads fields with `_fields` (one rule for SDK objects and dicts, extras and booleans).

May import: nbagent's exceptions and model base, and the models' shared modules (`_clients`,
`_deadline`, `_fields`, `_http_errors`, `_keys`, `_travel`, `_whole_body`). Never an SDK: a
provider's SDK is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import ModelError, UserError
from ._clients import client_for_loop, close_for_loop
from ._deadline import DEFAULT_DEADLINE, Deadline, checked_deadline, read_within, within
from ._http_errors import ErrorTable, parse_retry_after, where
from ._keys import Secret, safe_url, scrub_error
from ._travel import Travelling
from ._whole_body import body_error, read_body
from .base import Model, ModelRequest, ModelResponse, StreamItem, check_context_window

if TYPE_CHECKING:
    from ._batch import BatchRounds, BatchWire

__all__ = ["DEFAULT_TIMEOUT", "HTTPModel", "Reading", "Streamed"]

DEFAULT_TIMEOUT = 300.0
"""Seconds: the client's per-operation timeout (connect, each read). Long, because a reasoning
model can think for minutes before its first byte."""


class Streamed:
    """A started stream, as a provider's `HTTPModel._send_stream` hands it over.

    Args:
        events: what the provider's `HTTPModel.read_stream` reads: its SDK's decoded events, or
            the response's bytes (``response.aiter_bytes()``) for a reader of its own.
        response: the HTTP response (``status_code``, ``headers``, ``aiter_bytes()``, ``aread()``).
        close: closes the stream and its connection (awaited once the reading ends, however it ends).
    """

    __slots__ = ("close", "events", "response")

    def __init__(self, events: AsyncIterator[Any], response: Any, close: Callable[[], Awaitable[Any]]) -> None:
        self.events = events
        self.response = response
        self.close = close


def _no_error(*args: Any) -> ModelError:
    return ModelError("no reading yet")  # replaced before any reader runs (`HTTPModel._reading`)


@dataclass(slots=True)
class Reading:
    """What a provider's readers are told about the answer they read. Sans-IO: no socket, no key."""

    provider: str = ""
    request_id: str | None = None
    """The request id the server sent in its headers (`HTTPModel.request_id_header`), if any."""
    fail: Callable[..., ModelError] = _no_error
    """``fail(error, fallback=None)``: the error for an error object the server sent in the
    stream (`HTTPModel.stream_error`); the reader raises it."""
    empty: Callable[[], ModelError] = _no_error
    """The error for a stream that ended without any event; the reader raises it."""
    state: Any = None
    """What a reader leaves for its model after the answer (Anthropic's: what a paused turn sends back)."""


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


class HTTPModel(Travelling, Model):
    """The base of a model behind an HTTP API (see the module docstring for what a subclass gives).

    Args:
        model_name: the model to ask for (`_default_model_name` when None or "").
        provider: the name written to usage rows and used for prices.
        base_url: the server's URL; default ``$<base_url_variable>``, else the client's own default.
        api_key: default ``$<key_variable>``. Never shown in reprs, messages, events, usage rows
            or errors; never pickled.
        settings: default settings, checked by `_check_settings`; the agent's are merged over them.
        timeout: seconds for each network operation (connect, each read); see also `deadline`.
        max_retries: the client's own retries; 0 because nbagent's run loop retries (and shows it).
        deadline: seconds for a whole call, from sending the request to the stream's last event
            (None: no limit); a call past it fails with a retried `ModelTimeoutError`.
        client: a client to use as is (its ``base_url`` and ``api_key`` are read); such a model
            cannot be pickled.
        http_client: an HTTP client for the SDK (proxies, custom TLS), bound to one event loop.
        context_window: the model's context window in tokens (`Model.context_window`).
    """

    default_host = ""
    """The server named in messages when no `base_url` is given (``api.openai.com``)."""
    base_url_variable = ""
    """The environment variable a `base_url` is read from when none is given ("" for none)."""
    request_id_header = "x-request-id"
    """The response header that carries the server's request id."""
    stream_content_type = "event-stream"
    """What a streamed answer's content type contains; any other is read whole (`_read_whole`)."""
    expected = "an answer"
    """What an answer is called in a `ResponseBodyError` (``"a chat completion"``)."""
    errors = ErrorTable()
    """The provider's error table (`models._http_errors.ErrorTable`)."""

    def __init__(
        self,
        model_name: str | None,
        *,
        provider: str,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: Mapping[str, Any] | None = None,
        timeout: float | Any = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        deadline: float | None = DEFAULT_DEADLINE,
        client: Any = None,
        http_client: Any = None,
        context_window: int | None = None,
    ) -> None:
        name = type(self).__name__
        self.model_name = model_name or self._default_model_name()
        self._context_window = check_context_window(f"{name}(context_window=...)", context_window)
        self.provider = provider
        self.settings: dict[str, Any] = dict(settings or {})
        self._check_settings(self.settings)
        self.timeout = timeout
        self.max_retries = max_retries
        self.deadline = checked_deadline(name, deadline)
        self._client = client
        self._http_client = http_client
        if client is not None:
            self.base_url: str | None = str(client.base_url)
            key: str | None = client.api_key
        else:
            from_env = os.environ.get(self.base_url_variable) if self.base_url_variable else None
            self.base_url = base_url or from_env or None
            key = api_key if api_key is not None else os.environ.get(self.key_variable)
            if not key:
                key = self._no_key()
        self._api_key = Secret(key or "")
        self._init_clients()

    def _default_model_name(self) -> str:
        """The model's name when none was given: raise `UserError` (default), or read it from
        the environment (``OPENAI_MODEL``)."""
        raise UserError(f"{type(self).__name__} needs a model name: {type(self).__name__}('<model name>')")

    def _check_settings(self, settings: Mapping[str, Any]) -> None:
        """Raise `UserError` for a setting the provider does not take (default: take any)."""

    def _no_key(self) -> str:
        """The key when none was given and `key_variable` is unset: raise `UserError` (default),
        or return a placeholder, set as `_key_placeholder`, for a server that needs none."""
        raise UserError(f"no API key: pass {type(self).__name__}(..., api_key=...) or set {self.key_variable}")

    def _init_clients(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()

    def __repr__(self) -> str:
        url = f", base_url={safe_url(self.base_url)!r}" if self.base_url else ""
        return f"{type(self).__name__}({self.model_name!r}, provider={self.provider!r}{url})"

    # ------------------------------------------------------------------ the provider's parts
    def _make_client(self) -> Any:
        """A new client (an SDK's, or an HTTP client) for the running event loop, with the key
        (``self._api_key.get()``), `base_url`, `timeout`, `max_retries`, `http_client`."""
        raise NotImplementedError

    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """One call's keyword arguments (or JSON body) for `request`, without the key."""
        raise NotImplementedError

    def _resource(self, client: Any) -> Any:
        """The SDK resource whose ``create`` makes the call (``client.messages``,
        ``client.chat.completions``), for a provider on one of the official SDKs: its
        ``with_raw_response.create`` and ``create(stream=True)`` are the sends. A provider on a
        plain HTTP client writes `_send` and `_send_stream` instead."""
        raise NotImplementedError

    async def _send(self, client: Any, params: dict[str, Any]) -> Any:
        """Send a request for the whole answer: its HTTP response, read (``status_code``,
        ``headers``, ``content``). An SDK raises its error statuses; a plain client's are read
        by the base (`_raise_status`)."""
        return (await self._resource(client).with_raw_response.create(**params)).http_response

    async def _send_stream(self, client: Any, params: dict[str, Any]) -> Streamed:
        """Send a streamed request: the started stream, unread (the SDK's stream: its decoded events)."""
        stream = await self._resource(client).create(**params)
        return Streamed(stream, stream.response, stream.close)

    def read_stream(self, events: AsyncIterator[Any], reading: Reading) -> AsyncGenerator[StreamItem, None]:
        """Sans-IO: the text deltas (``str``) and `ReasoningText` deltas of a stream's events
        (what `Streamed.events` gives), then its `ModelResponse`. An error object in the stream
        raises ``reading.fail(error)``; a stream without events ``reading.empty()``."""
        raise NotImplementedError

    def read_answer(self, body: dict[str, Any], reading: Reading) -> ModelResponse | None:
        """Sans-IO: the `ModelResponse` of a whole answer's JSON object, or None when `body` is
        no answer (the base then names it: an error object, or a `ResponseBodyError`)."""
        raise NotImplementedError

    def body_events(self, data: list[str]) -> list[Any] | None:
        """The events `read_stream` takes, made of the ``data`` of event-stream text that came as
        one body (a server that streams whatever is asked); None: not readable so (the default)."""
        return None

    def read_line_answer(self, body: dict[str, Any], request_id: str | None) -> ModelResponse | None:
        """`read_answer` of a whole answer that came in a batch's result line, not as an HTTP
        response of its own (`nbagent.models._batch.BatchWire.answer`)."""
        return self.read_answer(body, Reading(provider=self.provider, request_id=request_id, fail=self.stream_error))

    def batch_wire(self) -> BatchWire | None:
        """The provider's batch API for this model's requests (`nbagent.models._batch.BatchWire`),
        or None when it has none (the default)."""
        return None

    def batched(self, rounds: BatchRounds) -> Model | None:
        """This model answering through its `batch_wire` (see `Model.batched`)."""
        wire = self.batch_wire()
        if wire is None:
            return None
        from ._batch import BatchedModel

        return BatchedModel(self, wire, rounds)

    # ------------------------------------------------------------------ client per event loop
    async def client(self) -> Any:
        """The client for the running event loop (made on first use in that loop).

        Its connections are closed when the loop shuts down (``asyncio.run`` and pytest close
        async generators first; a sentinel generator does it), so no socket outlives its loop.
        """
        if self._client is not None:
            return self._client
        return await client_for_loop(self, self._make_client)

    async def aclose(self) -> None:
        """Close the client of the running event loop (its pooled connections)."""
        if self._client is not None:
            return  # the caller's client: the caller closes it
        await close_for_loop(self)

    # ------------------------------------------------------------------ errors
    def map_error(self, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
        """The nbagent error for an SDK / transport exception (None: not a model-call failure),
        the key scrubbed. ``streaming``: the exception came while reading an already started stream."""
        error = self.errors.map_error(self, exc, streaming=streaming)
        return None if error is None else scrub_error(self._api_key, error)

    def stream_error(self, error: Any, fallback: str | None = None, *, in_stream: bool = True) -> ModelError:
        """The nbagent error for an error object a server sent inside a started stream (or, with
        ``in_stream=False``, as a 2xx answer's whole body), as the provider's table sorts it, the
        key scrubbed."""
        return scrub_error(self._api_key, self.errors.stream_error(self, error, fallback, in_stream=in_stream))

    def _deadline(self) -> Deadline:
        return Deadline(self, where)

    # ------------------------------------------------------------------ one request
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask for the whole answer (no streaming), within the call's `deadline`."""
        return await self._call_whole(self.request_params(request, stream=False))

    def request_stream(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        """Stream the answer: text deltas (``str``), `ReasoningText` deltas, then the
        `ModelResponse`, all within the call's `deadline`."""
        return self._call_stream(request)

    async def _open(self, params: dict[str, Any], deadline: Deadline, *, stream: bool) -> Any:
        """Send one request within `deadline`: the whole answer's HTTP response, or the
        `Streamed` of a started stream. An error status raises the table's error."""
        client = await self.client()
        if stream:
            streamed: Streamed = await within(deadline, lambda: self._send_stream(client, params), self.map_error)
            if streamed.response.status_code >= 400:
                await self._raise_status(streamed.response, deadline, streamed.close)
            return streamed
        response = await within(deadline, lambda: self._send(client, params), self.map_error)
        if response.status_code >= 400:
            await self._raise_status(response, deadline, None)
        return response

    async def _raise_status(
        self, response: Any, deadline: Deadline, close: Callable[[], Awaitable[Any]] | None
    ) -> None:
        """Raise the error for an error status a plain HTTP client returned (an SDK raises it
        itself): the table's `ErrorTable.status_error` of the body, read within `deadline`."""
        data = await within(deadline, response.aread, self.map_error)
        if close is not None:
            await close()
        body: Any = data.decode("utf-8", "replace")
        try:
            body = json.loads(body)
        except ValueError:
            pass
        status = response.status_code
        raise self.errors.status_error(self, status, body, f"HTTP {status} {response.reason_phrase}".strip(),
                                       parse_retry_after(response.headers))

    def _reading(self, response: Any, reading: Reading | None) -> Reading:
        """`reading` (a new one when None) told about `response`: its request id, the errors to raise."""
        if reading is None:
            reading = Reading()
        reading.provider = self.provider
        reading.request_id = response.headers.get(self.request_id_header) or None
        reading.fail = self.stream_error
        reading.empty = functools.partial(body_error, self, response.status_code,
                                          response.headers.get("content-type", ""), None, streaming=True,
                                          expected=self.expected)
        return reading

    def _whole(self, response: Any, data: bytes, reading: Reading, *, streaming: bool) -> ModelResponse | list[Any]:
        """What a 2xx body read whole is: the answer (`read_answer`), the events of event-stream
        text (`body_events`), an error object sent with a 2xx status (raised as `stream_error`
        sorts it), else a `ResponseBodyError` naming it."""
        content_type = response.headers.get("content-type", "")
        kind, value = read_body(data, content_type)
        if kind == "json" and isinstance(value, dict):
            answer = self.read_answer(value, reading)
            if answer is not None:
                answer.request_id = reading.request_id or answer.request_id
                return answer
            if value.get("error"):  # an error object as the whole answer: there was no stream
                raise self.stream_error(value["error"], in_stream=False)
        elif kind == "events":
            events = self.body_events(value)
            if events:
                return events
        raise body_error(self, response.status_code, content_type, data, streaming=streaming, expected=self.expected)

    async def _call_whole(self, params: dict[str, Any], reading: Reading | None = None) -> ModelResponse:
        """One request for the whole answer, within its deadline; every error leaves with the key
        scrubbed, and so does the answer's own `ModelResponse.error`."""
        deadline = self._deadline()
        try:
            try:
                response = await self._open(params, deadline, stream=False)
            finally:
                deadline.close()
            reading = self._reading(response, reading)
            found = self._whole(response, response.content, reading, streaming=False)
            # an event stream sent as the whole answer: the answer is its reader's last item
            answer = found if isinstance(found, ModelResponse) else [
                item async for item in self.read_stream(_aiter(found), reading)][-1]
        except ModelError as error:
            scrub_error(self._api_key, error)
            raise
        if not isinstance(answer, ModelResponse):
            raise TypeError(f"{type(self).__name__}.read_stream ended with {answer!r}, not with its answer")
        if answer.error is not None:
            scrub_error(self._api_key, answer.error)
        return answer

    async def _read_whole(self, streamed: Streamed, deadline: Deadline, reading: Reading) -> ModelResponse | list[Any]:
        """A streamed request's answer that is not labelled as a stream, read whole (`_whole`)."""
        source = streamed.response.aiter_bytes()
        data = b"".join([piece async for piece in read_within(deadline, streamed, source, self.map_error)])
        return self._whole(streamed.response, data, reading, streaming=True)

    async def _call_stream(
        self, request: ModelRequest, params: dict[str, Any] | None = None, reading: Reading | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        """One streamed request (`params`, else `request`'s), within its deadline: the reader's
        items, passed on as they come. Every error leaves with the key scrubbed; an error the
        reader of a stream puts on its answer (`ModelResponse.error`) is the caller's to scrub
        (finding the answer among the items would cost every delta a check)."""
        deadline = self._deadline()
        try:
            if params is None:
                params = self.request_params(request, stream=True)
            streamed: Streamed = await self._open(params, deadline, stream=True)
            reading = self._reading(streamed.response, reading)
            source = streamed.events
            if self.stream_content_type not in streamed.response.headers.get("content-type", ""):
                # A server or proxy that ignored the stream asked for, sent it labelled otherwise,
                # or answered with an error object or page: read whole, so that it can be named.
                found = await self._read_whole(streamed, deadline, reading)
                if isinstance(found, ModelResponse):
                    if found.error is not None:
                        scrub_error(self._api_key, found.error)
                    if found.message.text:
                        yield found.message.text
                    yield found
                    return
                source = _aiter(found)
            async with (
                contextlib.aclosing(read_within(deadline, streamed, source, self.map_error)) as events,
                contextlib.aclosing(self.read_stream(events, reading)) as items,
            ):
                async for item in items:
                    yield item
        except ModelError as error:
            scrub_error(self._api_key, error)
            raise
        finally:
            deadline.close()
