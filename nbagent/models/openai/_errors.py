"""The error table of OpenAI and OpenAI-compatible servers (Chat Completions and the Responses API).

Owns `OpenAIErrors`, the `ErrorTable` both OpenAI models use: `OpenAIErrors.status_error` (an
HTTP error status: the server's message, OpenRouter's upstream words, the statuses that fail the
same way again and are not retried, `_permanent_http_error`; a request too long for the model's
context window, `context_overflow`) and `OpenAIErrors.stream_error` (an error object a server
sent inside a started stream or with status 200, sorted by `stream_error_status`). What every
provider shares (the SDK's timeouts and connection errors, transport errors, a stream that broke
off, the key scrubbed out of every error) is `models._http_errors`' and `models._http`'s.

May import: ``openai`` (its exception classes), nbagent's exceptions and the models' shared
`_http_errors` and `_fields`. Not `_wire`, `_stream` or the models: the model is passed in as an
`ErrorSource`.
"""

from __future__ import annotations

import re
from typing import Any

import openai

from ...exceptions import ContextOverflowError, ModelError, ModelHTTPError, error_for_status
from .._fields import extras, field, positive
from .._http_errors import ErrorSource, ErrorTable, refused_words, transient_error

__all__ = ["OpenAIErrors", "context_overflow", "stream_error_status"]


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
        value = field(error, name)
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
        word = field(error, name)
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
    words = {str(field(body, name)).lower() for name in ("type", "code")} if isinstance(body, dict) else set()
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


def _said(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return positive(int(found.group(1).replace(",", "")))
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
    words = {str(field(error, name)).strip().lower() for name in ("code", "type")} if isinstance(error, dict) else set()
    text = message.lower()
    if not words & _OVERFLOW_WORDS and not any(phrase in text for phrase in _OVERFLOW_PHRASES):
        return None
    fields = error if isinstance(error, dict) else {}
    tokens = positive(fields.get("n_prompt_tokens")) or _said(_TOKENS_SAID, text)
    limit = positive(fields.get("n_ctx")) or _said(_LIMIT_SAID, text)
    return tokens, limit


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


class OpenAIErrors(ErrorTable):
    """The error table of OpenAI-compatible servers (`ErrorTable`)."""

    sdk = openai
    forbidden = " (check the API key's access to this model, or the input if it was flagged)"  # OpenRouter's moderation

    def status_error(self, model: ErrorSource, status: int, body: Any, message: str,
                     retry_after: float | None) -> ModelError:
        """The error for an HTTP error status: `body` is the SDK's (the ``error`` object of the
        JSON), its ``message`` the server's words (OpenRouter's upstream ``metadata.raw`` added);
        a status that will fail the same way again is not retried (`_permanent_http_error`)."""
        said = field(body, "message") if isinstance(body, dict) else None
        if not isinstance(said, str) or not said:
            said = body if isinstance(body, str) and body.strip() else message
        raw = field(field(body, "metadata"), "raw") if isinstance(body, dict) else None
        if isinstance(raw, str) and raw:
            said = f"{said}: {raw}"  # OpenRouter: the upstream provider's own words
        text = str(said) + self.hint(model, status)
        return _http_error(model, status, text, body, _permanent_http_error(status, body, text), retry_after)

    def stream_error(self, model: ErrorSource, error: Any, fallback: str | None = None, *,
                     in_stream: bool = True) -> ModelError:
        """The nbagent error for an error object a server sent inside an already started stream
        (``in_stream=False``: as the whole answer, with a 2xx status; the words then speak of no
        stream).

        A request the server refuses (a 4xx other than 408 / 409 / 429, or a word such as
        ``invalid_request_error``, ``context_length_exceeded``, ``invalid_api_key``,
        ``model_not_found``) fails at once: `BadRequestError` (`ContextOverflowError` when it does
        not fit the context window), `AuthenticationError`, `NotFoundError`, or `ModelHTTPError`
        (402 and other 4xx). A rate limit is a retried `RateLimitError`; anything else
        (``server_error``, overloaded, 5xx, an unknown error) a retried `StreamInterruptedError`
        (a retried `ResponseBodyError` for a whole answer). ``status_code`` is set only when the
        server put a status in the object. The message is the server's own (OpenRouter's upstream
        ``metadata.raw`` included) followed by its type and code.
        """
        if isinstance(error, str):
            words, body = error, error
        else:
            if error is not None and not isinstance(error, dict):
                error = extras(error)  # vLLM's older error event, parsed as a chunk
            words = field(error, "message")
            body = error
        if not isinstance(words, str) or not words.strip():
            words = fallback or "the server reported an error without a message"
        raw = field(field(error, "metadata"), "raw")
        if isinstance(raw, str) and raw:
            words = f"{words}: {raw}"  # OpenRouter: the upstream provider's own words
        labels = [field(error, "type"), field(error, "code")]
        tags = list(dict.fromkeys(str(x) for x in labels if isinstance(x, str) and x and not x.isdigit()))
        if tags:
            words = f"{words} [{', '.join(tags)}]"
        given = _status_in(error)
        status = stream_error_status(error)
        permanent = None if status is None else _permanent_http_error(status, error, words)
        if status is None or ((status >= 500 or status in (408, 409)) and not permanent):
            return transient_error(model, words, body, given, in_stream=in_stream)
        said = f"{refused_words(in_stream)}{words}{self.hint(model, status)}"
        err = _http_error(model, status, said, body, permanent)
        err.status_code = given  # a status the server did not send is not shown as one
        return err
