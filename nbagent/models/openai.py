"""`OpenAIModel`: any OpenAI-compatible chat-completions server through the official ``openai`` SDK.

Owns the mapping between nbagent's messages / settings / errors and the chat-completions wire
format, and `local_model` (the bundled llama.cpp server). Imports ``openai`` (lazily, through
``nbagent.models.__getattr__``) and nbagent's messages, usage, exceptions and model base; never
widgets or pandas.

Works with OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp, Groq, Gemini's OpenAI endpoint,
DeepSeek, Together, OpenRouter. The quirks handled here are the ones seen in recorded traffic
(``tests/wire/cases``): tool-call deltas without ``index`` and with empty ids, a choice with no
``message`` (Azure content filter), ``finish_reason`` values outside the SDK's list (``eos``),
usage in ``x_groq`` or missing, ``reasoning_content``, ``content: ""`` next to tool calls.

A server can also report an error inside a stream it has already started (HTTP 200): an event
``data: {"error": {...}}`` (OpenAI, vLLM, llama.cpp, Groq with ``event: error``), OpenRouter's chunk
with a top-level ``error`` and ``finish_reason: "error"``, vLLM's older ``{"object": "error", ...}``.
`OpenAIModel.stream_error` sorts them: a request the server refuses (invalid request, context too
long, content policy, key, permission, not found, any 4xx but 408/409/429) fails at once as the
matching `BadRequestError`-family error; anything else (server error, overload, rate limit, an
unknown error) is retried like a broken stream.

The API key is kept in a `_Secret` and handed only to the SDK client: it is never part of a
message, an event, a usage row, an error (errors are raised without their SDK cause, whose request
carries the ``Authorization`` header) or a repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import inspect
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
from openai import AsyncOpenAI

from ..exceptions import (
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    StreamInterruptedError,
    UserError,
    error_for_status,
)
from ..messages import AssistantMessage, Message, ToolCall, new_call_id
from ..usage import TokenCounts
from .base import Model, ModelRequest, ModelResponse, ReasoningText

__all__ = ["LocalModel", "OpenAIModel", "local_model", "parse_retry_after", "stream_error_status"]

DEFAULT_TIMEOUT = 300.0
"""Seconds: the SDK's per-operation timeout (connect, each read). Long, because a reasoning model
can think for minutes before its first byte."""

LOCAL_SETTINGS: dict[str, Any] = {"temperature": 0, "max_tokens": 512}
"""Defaults for the bundled 135M model: deterministic, and a cap on its tendency to ramble."""

_ALWAYS_SET = frozenset({"messages", "model", "stream", "tools", "self"})
_MERGED_DICTS = ("extra_body", "extra_headers", "extra_query")
_CACHE_LIMIT = 20_000
_create_params: frozenset[str] | None = None


def _allowed_settings() -> frozenset[str]:
    """The keyword arguments the installed SDK's ``chat.completions.create`` accepts."""
    global _create_params
    if _create_params is None:
        from openai.resources.chat.completions import AsyncCompletions

        names = inspect.signature(AsyncCompletions.create).parameters
        _create_params = frozenset(names) - _ALWAYS_SET
    return _create_params


class _Secret:
    """An API key that does not show itself in reprs, vars() dumps or tracebacks' locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def _safe_url(url: str | None) -> str | None:
    """The URL without user:password (some people put credentials there)."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP-date)."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _get(obj: Any, name: str) -> Any:
    """Field `name` of an SDK object or a plain dict (extras included), or None."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra:
            value = extra.get(name)
    return value


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def token_counts(usage: Any) -> TokenCounts:
    """Map an OpenAI ``usage`` object (or Groq's ``x_groq.usage`` dict) to `TokenCounts`."""
    if usage is None:
        return TokenCounts(reported=False)
    prompt = _get(usage, "prompt_tokens")
    completion = _get(usage, "completion_tokens")
    pdet = _get(usage, "prompt_tokens_details")
    cdet = _get(usage, "completion_tokens_details")
    cached = _get(pdet, "cached_tokens")
    if cached is None:
        cached = _get(usage, "prompt_cache_hit_tokens")  # DeepSeek's older field
    written = _get(pdet, "cache_write_tokens") or _get(pdet, "cache_creation_tokens")
    return TokenCounts(
        input_tokens=_int(prompt),
        cache_read_tokens=_int(cached),
        cache_write_tokens=_int(written),
        output_tokens=_int(completion),
        reasoning_tokens=_int(_get(cdet, "reasoning_tokens")),
        reported=prompt is not None or completion is not None,
    )


def _arguments_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)  # a server that sent an object instead of a JSON string


def _unique_ids(calls: list[ToolCall]) -> None:
    # Gemini sends "" for every id; results must map back to exactly one call.
    seen: set[str] = set()
    for call in calls:
        if not call.id or call.id in seen:
            call.id = new_call_id()
        seen.add(call.id)


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


# ------------------------------------------------------------------------------- errors inside a stream
_STREAM_ERROR_WORDS: dict[str, int] = {
    # The request itself is refused: the same request gets the same answer.
    "invalid_request_error": 400,
    "badrequesterror": 400,  # vLLM's type names
    "bad_request": 400,
    "context_length_exceeded": 400,
    "exceed_context_size_error": 400,  # llama.cpp
    "string_above_max_length": 400,
    "content_filter": 400,
    "content_policy_violation": 400,
    "invalid_prompt": 400,
    "invalid_value": 400,
    "unsupported_value": 400,
    "unsupported_parameter": 400,
    "tool_use_failed": 400,  # Groq
    "authentication_error": 401,
    "authenticationerror": 401,
    "invalid_api_key": 401,
    "insufficient_quota": 402,  # billing: OpenAI sends it with 429, but waiting does not help
    "permission_error": 403,
    "permissiondeniederror": 403,
    "permission_denied": 403,
    "not_found_error": 404,
    "notfounderror": 404,
    "model_not_found": 404,
    # Rate limits pass (retried as RateLimitError).
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
    "ratelimiterror": 429,
    "requests": 429,  # OpenAI's 429 types
    "tokens": 429,
}
"""Error ``type`` / ``code`` words of a mid-stream error, as the HTTP status they stand for. Words
not listed (``server_error``, ``overloaded_error``, ``InternalServerError``...) count as transient."""


def _status_in(error: Any) -> int | None:
    """The HTTP status an error object carries in ``code`` / ``status`` (OpenRouter, llama.cpp, vLLM)."""
    for name in ("code", "status", "status_code"):
        value = _get(error, name)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


def stream_error_status(error: Any) -> int | None:
    """The HTTP status a mid-stream error object stands for, or None when nothing says (transient).

    A status the server put in the object decides; without one, its ``code`` then its ``type``
    word (see ``_STREAM_ERROR_WORDS``).
    """
    status = _status_in(error)
    if status is not None:
        return status
    for name in ("code", "type"):
        word = _get(error, name)
        if isinstance(word, str):
            status = _STREAM_ERROR_WORDS.get(word.strip().lower())
            if status is not None:
                return status
    return None


def _permanent_http_error(status: int, body: Any, message: str) -> str | None:
    """Why an error status that is normally retried (429, 5xx) will fail again the same way, or
    None: 501 Not Implemented; OpenAI's 429 ``insufficient_quota`` (billing, not a rate); a 5xx
    whose message says the input is not supported (llama.cpp answers an image sent to a text-only
    model with ``500 image input is not supported``)."""
    if status == 501:
        return "the server does not implement this"
    words = {str(_get(body, name)).lower() for name in ("type", "code")} if isinstance(body, dict) else set()
    if status == 429 and "insufficient_quota" in words:
        return "the account's quota is used up; waiting does not help"
    if status >= 500 and "not supported" in message.lower():
        return "the server says the input is not supported"
    return None


def _extras(obj: Any) -> dict[str, Any]:
    return dict(getattr(obj, "__pydantic_extra__", None) or {})


# ------------------------------------------------------------------------------- request building
def _wire_message(message: Message, send_reasoning: bool = True) -> dict[str, Any]:
    kind = message.kind
    if kind == "user":
        images = message.images  # type: ignore[union-attr]
        if not images:
            return {"role": "user", "content": message.content}  # type: ignore[union-attr]
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []  # type: ignore[union-attr]
        for image in images:
            url: dict[str, Any] = {"url": image.data_url()}
            if image.detail is not None:
                url["detail"] = image.detail
            parts.append({"type": "image_url", "image_url": url})
        return {"role": "user", "content": parts}
    if kind == "tool-result":
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}  # type: ignore[union-attr]
    if kind == "system":
        return {"role": "system", "content": message.content}  # type: ignore[union-attr]
    if kind == "assistant":
        text = message.text or message.refusal  # type: ignore[union-attr]
        calls = message.tool_calls  # type: ignore[union-attr]
        wire: dict[str, Any] = {"role": "assistant", "content": text or ("" if not calls else None)}
        if send_reasoning and message.reasoning:  # type: ignore[union-attr]
            # DeepSeek (thinking with tools) needs it back within a turn; only servers that
            # sent reasoning_content produce messages with reasoning.
            wire["reasoning_content"] = message.reasoning  # type: ignore[union-attr]
        if not calls:
            return wire
        # Arguments that are not a JSON object are never replayed (llama.cpp answers the whole
        # request with HTTP 500); the call's error result already told the model what was wrong.
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.args_json if c.args is not None and c.args_json.strip() else "{}",
                },
            }
            for c in calls
        ]
        return wire
    raise UserError(f"cannot send a message of kind {kind!r} to a chat-completions model")


def _wire_tool(definition: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": definition["name"]}
    if definition.get("description"):
        function["description"] = definition["description"]
    function["parameters"] = definition.get("parameters") or {"type": "object", "properties": {}}
    if definition.get("strict") is not None:
        function["strict"] = definition["strict"]
    return {"type": "function", "function": function}


def _wire_tool_choice(value: Any) -> Any:
    if isinstance(value, str) and value not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": value}}  # a tool name
    return value


# ------------------------------------------------------------------------------- stream assembly
class _CallParts:
    __slots__ = ("args", "id", "name")

    def __init__(self, id: str, name: str) -> None:
        self.id = id
        self.name = name
        self.args: list[str] = []


class _StreamAssembler:
    """Collects what is not plain text from chunks: tool-call deltas, refusal, finish reason,
    usage, model name. Sans-IO: fed SDK chunk pieces, it builds the final `ModelResponse`."""

    __slots__ = (
        "by_id",
        "by_index",
        "calls",
        "content_seen",
        "finish_reason",
        "model",
        "reasoning",
        "refusal",
        "request_id",
        "usage",
    )

    def __init__(self) -> None:
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

    def add_tool_calls(self, deltas: list[Any]) -> None:
        """Assemble tool-call deltas by ``index`` and by ``id`` (Gemini and Ollama send no index)."""
        for tc in deltas:
            index = getattr(tc, "index", None)
            call_id = getattr(tc, "id", None) or ""
            fn = getattr(tc, "function", None)
            name = (getattr(fn, "name", None) or "") if fn is not None else ""
            args = getattr(fn, "arguments", None) if fn is not None else None
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

    def response(self, parts: list[str]) -> ModelResponse:
        calls = [ToolCall(c.id, c.name, "".join(c.args)) for c in self.calls]
        _unique_ids(calls)
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


# ------------------------------------------------------------------------------- the model
class OpenAIModel(Model):
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
        timeout: seconds for each network operation (connect, each read).
        max_retries: the SDK's own retries; 0 because nbagent's run loop retries (and shows it).
        client: an ``openai.AsyncOpenAI`` to use as is (then `base_url`, `api_key`, `timeout`,
            `http_client` are ignored).
        http_client: an ``httpx2.AsyncClient`` for the SDK (proxies, custom TLS); it is bound to
            one event loop, so use the model from that loop only.
        send_reasoning: send an answer's reasoning text back as ``reasoning_content`` (what
            DeepSeek needs between tool calls); only answers from servers that return reasoning
            text have any.

    One SDK client is made per event loop and reused, so the same model works from
    ``agent.run_sync`` (nbagent's background loop) and from ``await agent.run`` in one notebook.
    """

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
    ) -> None:
        model_name = model_name or os.environ.get("OPENAI_MODEL") or None
        if not model_name:
            raise UserError(
                "OpenAIModel needs a model name: OpenAIModel('gpt-4.1-mini'), "
                "Agent('openai:gpt-4.1-mini'), or set the OPENAI_MODEL environment variable"
            )
        self.model_name = model_name
        self.provider = provider
        self.settings: dict[str, Any] = dict(settings or {})
        self._check_settings(self.settings)
        self.timeout = timeout
        self.max_retries = max_retries
        self.send_reasoning = send_reasoning
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
                key = "not-needed"
        self._api_key = _Secret(key or "")
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[AsyncOpenAI, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()
        # Converted history messages, keyed by id() with the message kept alive so ids are not
        # reused: a step converts only what is new, whatever the length of the history.
        self._wire_cache: dict[int, tuple[Message, dict[str, Any]]] = {}
        self._tools_cache: tuple[Any, list[dict[str, Any]]] | None = None

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
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None:
            return entry[0]
        client = AsyncOpenAI(
            api_key=self._api_key.get(),
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=self._http_client,
        )
        closer = _close_at_loop_shutdown(client)
        await closer.__anext__()  # registered with this loop's shutdown_asyncgens()
        with self._clients_lock:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            entry = self._clients.setdefault(loop, (client, closer))
        if entry[0] is not client:  # another task of this loop won the race
            await closer.aclose()
        return entry[0]

    async def aclose(self) -> None:
        """Close the SDK client of the running event loop (its pooled connections)."""
        if self._client is not None:
            return  # the caller's client: the caller closes it
        with self._clients_lock:
            entry = self._clients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    # ------------------------------------------------------------------ request building
    @staticmethod
    def _check_settings(settings: Mapping[str, Any]) -> None:
        unknown = sorted(k for k in settings if k not in _allowed_settings())
        if unknown:
            raise UserError(
                f"unknown model setting(s) {unknown} for the openai SDK's chat.completions.create; "
                "send server-specific parameters with settings={'extra_body': {...}}"
            )

    def _messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        cache = self._wire_cache
        out = []
        for m in messages:
            if m.kind == "system":  # rebuilt by the loop each step: not worth a cache entry
                out.append({"role": "system", "content": m.content})  # type: ignore[union-attr]
                continue
            hit = cache.get(id(m))
            if hit is None or hit[0] is not m:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                hit = (m, _wire_message(m, self.send_reasoning))
                cache[id(m)] = hit
            out.append(hit[1])
        return out

    def _tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cached = self._tools_cache
        if cached is not None and cached[0] is tools:
            return cached[1]
        wire = [_wire_tool(t) for t in tools]
        self._tools_cache = (tools, wire)
        return wire

    def request_params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (without the key)."""
        settings = self.settings
        if request.settings:
            self._check_settings(request.settings)
            merged = {**settings, **request.settings}
            for name in _MERGED_DICTS:
                if isinstance(settings.get(name), dict) and isinstance(request.settings.get(name), dict):
                    merged[name] = {**settings[name], **request.settings[name]}
            settings = merged
        params: dict[str, Any] = {"model": self.model_name, "messages": self._messages(request.messages)}
        if request.tools:
            params["tools"] = self._tools(request.tools)
        for key, value in settings.items():
            if value is None:
                continue
            if key == "tool_choice":
                if not request.tools:
                    continue  # servers reject tool_choice without tools
                value = _wire_tool_choice(value)
            elif key == "parallel_tool_calls" and not request.tools:
                continue
            params[key] = value
        if stream:
            params["stream"] = True
            params.setdefault("stream_options", {"include_usage": True})
        else:
            params.pop("stream_options", None)
        return params

    # ------------------------------------------------------------------ errors
    def _scrub(self, value: Any) -> Any:
        key = self._api_key.get()
        if len(key) < 8:
            return value
        if isinstance(value, str):
            return value.replace(key, "***")
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        return value

    def _hint(self, status: int | None) -> str:
        if status == 404:
            return f" (model {self.model_name!r} at {_safe_url(self.base_url) or 'api.openai.com'})"
        if status == 401:
            return " (check the API key for this provider)"
        if status == 403:  # also OpenRouter's moderation / guardrail refusals
            return " (check the API key's access to this model, or the input if it was flagged)"
        return ""

    def stream_error(self, error: Any, fallback: str | None = None) -> ModelError:
        """The nbagent error for an error object a server sent inside an already started stream.

        A request the server refuses (a 4xx other than 408 / 409 / 429, or a word such as
        ``invalid_request_error``, ``context_length_exceeded``, ``invalid_api_key``,
        ``model_not_found``) fails at once: `BadRequestError`, `AuthenticationError`,
        `NotFoundError`, or `ModelHTTPError` (402 and other 4xx). A rate limit is a retried
        `RateLimitError`; anything else (``server_error``, overloaded, 5xx, an unknown error) a
        retried `StreamInterruptedError`. ``status_code`` is set only when the server put a status
        in the object. The message is the server's own (OpenRouter's upstream ``metadata.raw``
        included) followed by its type and code; the API key is scrubbed from it and from ``body``.
        """
        if isinstance(error, str):
            words, body = error, error
        else:
            if error is not None and not isinstance(error, dict):
                error = _extras(error)  # vLLM's older error event, parsed as a chunk
            words = _get(error, "message")
            body = error
        if not isinstance(words, str) or not words.strip():
            words = fallback or "the server reported an error without a message"
        raw = _get(_get(error, "metadata"), "raw")
        if isinstance(raw, str) and raw:
            words = f"{words}: {raw}"  # OpenRouter: the upstream provider's own words
        labels = [_get(error, "type"), _get(error, "code")]
        tags = list(dict.fromkeys(str(x) for x in labels if isinstance(x, str) and x and not x.isdigit()))
        if tags:
            words = f"{words} [{', '.join(tags)}]"
        words = self._scrub(words)
        body = self._scrub(body)
        given = _status_in(error)
        status = stream_error_status(error)
        permanent = None if status is None else _permanent_http_error(status, error, words)
        if (status is None or status >= 500 or status in (408, 409)) and not permanent:
            return StreamInterruptedError(
                f"the streamed answer broke off: {words}", status_code=given, body=body, provider=self.provider
            )
        assert status is not None
        err = self._http_error(
            status, f"the server ended the stream with an error: {words}{self._hint(status)}", body, permanent
        )
        err.status_code = given  # a status the server did not send is not shown as one
        return err

    def _http_error(
        self, status: int, message: str, body: Any, permanent: str | None, retry_after: float | None = None
    ) -> ModelHTTPError:
        """`error_for_status`, except that an error that will fail again the same way (`permanent`
        says why, see `_permanent_http_error`) is not retried and its message says so."""
        error = error_for_status(
            status,
            message + (f" (not retried: {permanent})" if permanent else ""),
            body=body,
            provider=self.provider,
            retry_after=retry_after,
        )
        if permanent:
            error.retryable = False
        return error

    def map_error(self, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
        """The nbagent error for an SDK / transport exception (None: not a model-call failure).

        ``streaming``: the exception came while reading an already started stream.
        """
        provider = self.provider
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, openai.APIStatusError):
            body = exc.body
            message = _get(body, "message") if isinstance(body, dict) else None
            if not isinstance(message, str) or not message:
                message = body if isinstance(body, str) and body.strip() else exc.message
            status = exc.status_code
            raw = _get(_get(body, "metadata"), "raw") if isinstance(body, dict) else None
            if isinstance(raw, str) and raw:
                message = f"{message}: {raw}"  # OpenRouter: the upstream provider's own words
            message = self._scrub(str(message)) + self._hint(status)
            return self._http_error(
                status, message, self._scrub(body), _permanent_http_error(status, body, message),
                retry_after=parse_retry_after(exc.response.headers),
            )
        if streaming:
            if isinstance(exc, openai.APITimeoutError):
                reason = "the read timed out"
            elif isinstance(exc, openai.APIConnectionError):
                cause = exc.__cause__
                detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
                reason = self._scrub(f"{exc.message}{detail}")
            elif isinstance(exc, openai.APIError):
                # the SDK raises this for an event whose data has "error"; its body is that object
                return self.stream_error(exc.body, exc.message)
            elif isinstance(exc, ValueError):
                return ModelResponseError(f"the stream sent an unreadable chunk: {exc}", provider=provider)
            else:
                reason = self._scrub(f"{type(exc).__name__}: {exc}")
            return StreamInterruptedError(f"the streamed answer broke off: {reason}", provider=provider)
        if isinstance(exc, openai.APITimeoutError):
            return ModelTimeoutError(
                f"the request to {_safe_url(self.base_url) or 'api.openai.com'} timed out", provider=provider
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
            return ModelConnectionError(
                self._scrub(f"could not reach {_safe_url(self.base_url) or 'api.openai.com'}{detail}"),
                provider=provider,
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return ModelResponseError(
                f"the server's answer does not fit the API: {exc.message}", provider=provider
            )
        if isinstance(exc, openai.APIError):
            return ModelError(self._scrub(exc.message), provider=provider)
        if _is_transport_error(exc):
            return ModelConnectionError(self._scrub(f"{type(exc).__name__}: {exc}"), provider=provider)
        return None

    # ------------------------------------------------------------------ requests
    async def _create(self, params: dict[str, Any]) -> Any:
        """``chat.completions.create`` with the SDK's errors mapped to nbagent's."""
        client = await self.client()
        error: ModelError | None = None
        try:
            return await client.chat.completions.create(**params)
        except Exception as exc:
            error = self.map_error(exc)
            if error is None:
                raise
        raise error  # outside the except block: no SDK cause (and no key) attached

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask for the whole answer (no streaming)."""
        raw = await self._create(self.request_params(request, stream=False))
        return self.map_completion(raw)

    def map_completion(self, raw: Any) -> ModelResponse:
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
            _unique_ids(calls)
            extra = message.__pydantic_extra__ or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
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
            extra = getattr(raw, "__pydantic_extra__", None) or {}
            usage = _get(extra.get("x_groq"), "usage")
        request_id = getattr(raw, "_request_id", None) or getattr(raw, "id", None) or None
        return ModelResponse(reply, token_counts(usage), model, request_id)

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Stream the answer: text deltas (``str``), `ReasoningText` deltas, then the `ModelResponse`."""
        stream = await self._create(self.request_params(request, stream=True))
        source: Any = stream
        content_type = stream.response.headers.get("content-type", "")
        if "json" in content_type and "event-stream" not in content_type:
            # A server or proxy that ignored stream=True (one whole completion), or sent the
            # event stream labelled as JSON (seen in a 2023 OpenAI recording).
            whole = await self._read_mislabelled(stream)
            if isinstance(whole, ModelResponse):
                if whole.message.text:
                    yield whole.message.text
                yield whole
                return
            source = _aiter(whole)
        state = _StreamAssembler()
        state.request_id = stream.response.headers.get("x-request-id")
        parts: list[str] = []
        append = parts.append
        async with contextlib.aclosing(self._reading(stream, source)) as chunks:
            async for chunk in chunks:
                choices = getattr(chunk, "choices", None)
                if choices:
                    choice = choices[0]
                    if len(choices) > 1 or getattr(choice, "index", 0) != 0:
                        choice = next((c for c in choices if getattr(c, "index", 0) == 0), None)
                    delta = getattr(choice, "delta", None)
                    if delta is not None:
                        text = delta.content
                        if text:
                            append(text)
                            yield text
                        elif text is not None:
                            state.content_seen = True
                        if delta.tool_calls:
                            state.add_tool_calls(delta.tool_calls)
                        if delta.refusal:
                            state.refusal.append(delta.refusal)
                        extra = delta.__pydantic_extra__
                        if extra:
                            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
                            if reasoning and isinstance(reasoning, str):
                                state.reasoning.append(reasoning)
                                yield ReasoningText(reasoning)
                    finish = getattr(choice, "finish_reason", None)
                    if finish:
                        if finish == "error":  # OpenRouter ends a failed stream so (error beside it)
                            raise self.stream_error(
                                _get(choice, "error") or _get(chunk, "error"),
                                "the server ended the answer with finish_reason 'error'",
                            )
                        state.finish_reason = finish
                elif getattr(chunk, "object", None) == "error" or _get(chunk, "error"):
                    # vLLM's older {"object": "error", ...}; {"error": ...} in a JSON-labelled stream
                    raise self.stream_error(_get(chunk, "error") or chunk)
                if chunk.usage is not None:
                    state.usage = chunk.usage
                elif state.usage is None:
                    extra = chunk.__pydantic_extra__
                    if extra and "x_groq" in extra:
                        state.usage = _get(extra["x_groq"], "usage")
                if state.model is None:
                    state.model = getattr(chunk, "model", None) or None
                    if state.request_id is None:
                        state.request_id = getattr(chunk, "id", None) or None
        yield state.response(parts)

    async def _reading(self, stream: Any, source: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
        """The items of `source` (the SDK stream, or its response's bytes), then `stream` closed.

        A failure while reading becomes nbagent's error (`map_error` with ``streaming=True``),
        raised outside the ``except`` block so that neither ``__cause__`` nor ``__context__`` holds
        the SDK exception, whose request carries the ``Authorization`` header. `stream` is closed
        however the reading ends: finished, failed, or the consumer closing this generator.
        """
        error: ModelError | None = None
        try:
            async for item in source:
                yield item
        except Exception as exc:
            error = self.map_error(exc, streaming=True)
            if error is None:
                raise
        finally:
            with contextlib.suppress(Exception):  # a broken connection may fail to close too
                await stream.close()
        if error is not None:
            raise error

    async def _read_mislabelled(self, stream: Any) -> ModelResponse | list[Any]:
        """Read a streamed request's JSON-labelled answer: a whole completion (as a
        `ModelResponse`) or event-stream text (as the list of its chunks)."""
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        pieces = [piece async for piece in self._reading(stream, stream.response.aiter_bytes())]
        text = b"".join(pieces).decode("utf-8", "replace")
        try:
            if text.lstrip().startswith("{"):
                body = json.loads(text)
                if isinstance(body, dict) and body.get("error"):
                    raise self.stream_error(body["error"])  # an error answered with status 200
                response = self.map_completion(ChatCompletion.construct(**body))
                response.request_id = stream.response.headers.get("x-request-id") or response.request_id
                return response
            chunks = []
            for event in text.replace("\r\n", "\n").split("\n\n"):
                data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
                if data and not data.startswith("[DONE]"):
                    chunks.append(ChatCompletionChunk.construct(**json.loads(data)))
            return chunks
        except (ValueError, TypeError) as exc:
            message = f"the server answered a streamed request with an unreadable body: {exc}"
        raise ModelResponseError(message, provider=self.provider)


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _close_at_loop_shutdown(client: AsyncOpenAI) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.close()


def _is_transport_error(exc: BaseException) -> bool:
    for module in ("httpx2", "httpx", "httpcore2", "httpcore"):
        mod = sys.modules.get(module)
        base = getattr(mod, "TransportError", None) if mod is not None else None
        if base is not None and isinstance(exc, base):
            return True
    return False


# ------------------------------------------------------------------------------- the local model
_local_servers: dict[tuple[Any, ...], Any] = {}
_local_lock = threading.Lock()


def local_model(
    *,
    settings: Mapping[str, Any] | None = None,
    port: int | None = None,
    threads: int | None = None,
    ctx: int = 4096,
    start_timeout: float = 240.0,
    **kwargs: Any,
) -> OpenAIModel:
    """An `OpenAIModel` on the bundled llama.cpp server with SmolLM2-135M-Instruct.

    Starts the server on first use (about a second once installed) and reuses it while it runs;
    it stops when the interpreter that started it exits. If it is gone when a request is made (the
    notebook kernel that started it was shut down while this one reused it), the request starts
    it again (`LocalModel`). Settings default to
    ``{"temperature": 0, "max_tokens": 512}``; yours are merged over them.

    The model is tiny: it calls a tool when asked explicitly ("Use the get_weather tool for
    Paris.") and answers short questions, but its prose is weak, it copies patterns and it does
    not reason. Use it to try nbagent offline, not to judge an agent's quality.

    Args:
        settings: model settings merged over the defaults.
        port, threads, ctx: the server's port (default ``$NBAGENT_LOCAL_LLM_PORT`` or 18282),
            CPU threads and context size in tokens.
        start_timeout: seconds to wait for the server to start.
        **kwargs: passed to `OpenAIModel` (e.g. ``timeout``).
    """
    key = (port, threads, ctx)
    server = _local_server(key, start_timeout)
    return LocalModel(
        kwargs.pop("model_name", "local-model"),
        base_url=server.base_url,
        api_key="local",
        provider=kwargs.pop("provider", "local"),
        settings={**LOCAL_SETTINGS, **(settings or {})},
        server_key=key,
        start_timeout=start_timeout,
        **kwargs,
    )


def _local_server(key: tuple[Any, ...], start_timeout: float) -> Any:
    """The running local server for ``(port, threads, ctx)``: this process's, one it reuses, or a
    new one."""
    from ._llama_server import start_server

    port, threads, ctx = key
    with _local_lock:
        server = _local_servers.get(key)
        if server is None or not server.is_running():
            server = start_server(port=port, threads=threads, ctx=ctx, timeout=start_timeout)
            _local_servers[key] = server
    return server


class LocalModel(OpenAIModel):
    """The `OpenAIModel` that `local_model` returns. When the bundled server is gone — the
    process that started it exited (another notebook's kernel shut down while this one reused
    it), or it was stopped — a request that cannot connect starts it again and is sent once more.
    """

    def __init__(self, *args: Any, server_key: tuple[Any, ...], start_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_key = server_key
        self._start_timeout = start_timeout

    async def _create(self, params: dict[str, Any]) -> Any:
        try:
            return await super()._create(params)
        except ModelConnectionError:
            if not await asyncio.to_thread(self._restart):
                raise
        await self.aclose()  # this loop's client pooled connections to the old server
        return await super()._create(params)

    def _restart(self) -> bool:
        """Start the server again if it is not running; True when it was started."""
        with _local_lock:
            old = _local_servers.get(self._server_key)
            if old is not None and old.is_running():
                return False  # it runs: the connection failed for another reason
        server = _local_server(self._server_key, self._start_timeout)
        if server.base_url != self.base_url:  # a free port (port=0) changes at each start
            self.base_url = server.base_url  # other loops' clients close when their loop ends
            with self._clients_lock:
                self._clients.clear()
        return True
