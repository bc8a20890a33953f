"""Failures of a chat-completions call sorted into nbagent's exceptions, and the API key's hygiene.

Owns `map_error` (an SDK or transport exception: HTTP status, timeout, connection, an error event
the SDK raised mid-stream), `stream_error` (an error object a server sent inside a started
stream, sorted by `stream_error_status`), `_http_error` (the not-retried statuses that fail the
same way again, `_permanent_http_error`; a request too long for the model's context window,
`context_overflow`), `parse_retry_after`, and the key's hygiene: `_Secret`
holds it, `scrub` takes it out of any text or body, `_safe_url` takes credentials out of URLs.
Every error is built without its SDK cause (whose request carries the ``Authorization`` header).
Also `body_error`: a 2xx answer whose body is not a chat completion (an HTML page, empty, not
UTF-8), named by its status, content type and first bytes (`nbagent.models._bodies`).

May import: ``openai`` (its exception classes), nbagent's exceptions, and `_stream`'s field
readers. Not `_wire` or `_model`: the model is passed in as an `ErrorSource`.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import openai

from ...exceptions import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    ResponseBodyError,
    StreamInterruptedError,
    error_for_status,
)
from .. import _bodies
from .._keys import ErrorSource, _safe_url, parse_retry_after, scrub
from ._stream import _extras, _get


def _where(model: ErrorSource) -> str:
    return _safe_url(model.base_url) or "api.openai.com"


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


# ------------------------------------------------------------------------------- a request too long
_OVERFLOW_WORDS = frozenset({"context_length_exceeded", "exceed_context_size_error"})
"""Error ``code`` / ``type`` words that say the request does not fit the context window (OpenAI's
``code``, llama.cpp's ``type``)."""

_OVERFLOW_PHRASES = ("maximum context length is", "exceeds the available context size",
                     "is larger than the max context size")
"""What a 400's message says when a server sends no such word: vLLM, OpenRouter, DeepSeek and
other OpenAI-compatible servers word it as OpenAI does ("This model's maximum context length is
... tokens"); llama.cpp ("request (5000 tokens) exceeds the available context size (4096 tokens)")."""

_LIMIT_SAID = (re.compile(r"maximum context length is (\d[\d,]*) tokens"),
               re.compile(r"available context size \((\d+) tokens\)"),
               re.compile(r"max context size \((\d+) tokens\)"))
_TOKENS_SAID = (re.compile(r"(?:resulted in|you requested|your request has) (\d[\d,]*) (?:input )?tokens"),
                re.compile(r"(?:request|input) \((\d+) tokens\)"))


def _count(value: Any) -> int | None:
    """A positive token count given as a number, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _said(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return _count(int(found.group(1).replace(",", "")))
    return None


def context_overflow(status: int | None, error: Any, message: str) -> tuple[int | None, int | None] | None:
    """``(tokens, limit)`` when a refused request (HTTP 400, or a mid-stream error standing for
    one) says it does not fit the model's context window, else None.

    Recognised by the error object's ``code`` / ``type`` (``context_length_exceeded``,
    ``exceed_context_size_error``), or, without one, by the message's words (`_OVERFLOW_PHRASES`).
    The counts come from llama.cpp's ``n_prompt_tokens`` / ``n_ctx``, else from the message
    ("maximum context length is 128000 tokens. However, your messages resulted in 130419
    tokens"); each is None when neither says it.
    """
    if status != 400:
        return None
    words = {str(_get(error, name)).strip().lower() for name in ("code", "type")} if isinstance(error, dict) else set()
    text = message.lower()
    if not words & _OVERFLOW_WORDS and not any(phrase in text for phrase in _OVERFLOW_PHRASES):
        return None
    fields = error if isinstance(error, dict) else {}
    tokens = _count(fields.get("n_prompt_tokens")) or _said(_TOKENS_SAID, text)
    limit = _count(fields.get("n_ctx")) or _said(_LIMIT_SAID, text)
    return tokens, limit


def _hint(model: ErrorSource, status: int | None) -> str:
    if status == 404:
        return f" (model {model.model_name!r} at {_where(model)})"
    if status == 401:
        return " (check the API key for this provider)"
    if status == 403:  # also OpenRouter's moderation / guardrail refusals
        return " (check the API key's access to this model, or the input if it was flagged)"
    return ""


def _http_error(
    model: ErrorSource, status: int, message: str, body: Any, permanent: str | None, retry_after: float | None = None
) -> ModelHTTPError:
    """`error_for_status`, except that an error that will fail again the same way (`permanent`
    says why, see `_permanent_http_error`) is not retried and its message says so, and a request
    too long for the model's context window is a `ContextOverflowError` (`context_overflow`)."""
    overflow = context_overflow(status, body, message)
    if overflow is not None:
        tokens, limit = overflow
        return ContextOverflowError(message, status_code=status, body=body, provider=model.provider,
                                    tokens=tokens, limit=limit)
    error = error_for_status(
        status,
        message + (f" (not retried: {permanent})" if permanent else ""),
        body=body,
        provider=model.provider,
        retry_after=retry_after,
    )
    if permanent:
        error.retryable = False
    return error


def stream_error(model: ErrorSource, error: Any, fallback: str | None = None) -> ModelError:
    """The nbagent error for an error object a server sent inside an already started stream.

    A request the server refuses (a 4xx other than 408 / 409 / 429, or a word such as
    ``invalid_request_error``, ``context_length_exceeded``, ``invalid_api_key``,
    ``model_not_found``) fails at once: `BadRequestError` (`ContextOverflowError` when it does
    not fit the context window), `AuthenticationError`, `NotFoundError`, or `ModelHTTPError`
    (402 and other 4xx). A rate limit is a retried
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
    words = scrub(model._api_key, words)
    body = scrub(model._api_key, body)
    given = _status_in(error)
    status = stream_error_status(error)
    permanent = None if status is None else _permanent_http_error(status, error, words)
    if (status is None or status >= 500 or status in (408, 409)) and not permanent:
        return StreamInterruptedError(
            f"the streamed answer broke off: {words}", status_code=given, body=body, provider=model.provider
        )
    assert status is not None
    err = _http_error(
        model, status, f"the server ended the stream with an error: {words}{_hint(model, status)}", body, permanent
    )
    err.status_code = given  # a status the server did not send is not shown as one
    return err


def map_error(model: ErrorSource, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
    """The nbagent error for an SDK / transport exception (None: not a model-call failure).

    ``streaming``: the exception came while reading an already started stream.
    """
    provider = model.provider
    secret = model._api_key
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
        message = scrub(secret, str(message)) + _hint(model, status)
        return _http_error(
            model, status, message, scrub(secret, body), _permanent_http_error(status, body, message),
            retry_after=parse_retry_after(exc.response.headers),
        )
    if streaming:
        if isinstance(exc, openai.APITimeoutError):
            reason = "the read timed out"
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
            reason = scrub(secret, f"{exc.message}{detail}")
        elif isinstance(exc, openai.APIError):
            # the SDK raises this for an event whose data has "error"; its body is that object
            return stream_error(model, exc.body, exc.message)
        elif isinstance(exc, ValueError):
            return ModelResponseError(f"the stream sent an unreadable chunk: {exc}", provider=provider)
        else:
            reason = scrub(secret, f"{type(exc).__name__}: {exc}")
        return StreamInterruptedError(f"the streamed answer broke off: {reason}", provider=provider)
    if isinstance(exc, openai.APITimeoutError):
        return ModelTimeoutError(f"the request to {_where(model)} timed out", provider=provider)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return ModelConnectionError(scrub(secret, f"could not reach {_where(model)}{detail}"), provider=provider)
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelResponseError(f"the server's answer does not fit the API: {exc.message}", provider=provider)
    if isinstance(exc, openai.APIError):
        return ModelError(scrub(secret, exc.message), provider=provider)
    if _is_transport_error(exc):
        return ModelConnectionError(scrub(secret, f"{type(exc).__name__}: {exc}"), provider=provider)
    return None


# ------------------------------------------------------------------------------- bodies that are no answer
def body_error(
    model: ErrorSource, status: int, content_type: str, data: bytes | None, *, streaming: bool
) -> ResponseBodyError:
    """The error for a success answer whose body is not a chat completion (`_bodies.body_error`)."""
    return _bodies.body_error(model, status, content_type, data, streaming=streaming, expected="a chat completion")


def _is_transport_error(exc: BaseException) -> bool:
    for module in ("httpx2", "httpx", "httpcore2", "httpcore"):
        mod = sys.modules.get(module)
        base = getattr(mod, "TransportError", None) if mod is not None else None
        if base is not None and isinstance(exc, base):
            return True
    return False
