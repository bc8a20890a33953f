"""The error table of the Messages API: its failures sorted into nbagent's exceptions.

Owns `AnthropicErrors`, the model's `ErrorTable`: `AnthropicErrors.status_error` (an HTTP error
status with the server's ``{"type": "error", "error": {...}}`` body) and
`AnthropicErrors.stream_error` (an ``error`` event inside a started stream, sorted by its
``type``). What every provider shares (the SDK's timeouts and connection errors, transport
errors, a stream that broke off, an unreadable event, the key scrubbed out of every error) is
`models._http_errors`' and `models._http`'s.

Retried: 429 (``retry-after`` honoured), 529 overloaded, 500 and other 5xx, 408 / 409, a stream
that broke off. Not retried: 400 / 413 (`BadRequestError`; a prompt too long for the model's
context window is a `ContextOverflowError`, `context_overflow`), 401 / 403
(`AuthenticationError`), 404 (`NotFoundError`), other 4xx (`ModelHTTPError`); each carries the
status and the server's message.

May import: ``anthropic`` (its exception classes), nbagent's exceptions and the models' shared
`_http_errors` and `_fields`. Not `_wire`, `_stream` or `_model`: the model is passed in as an
`ErrorSource`.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic

from ...exceptions import BadRequestError, ContextOverflowError, ModelError, error_for_status
from .._fields import field
from .._http_errors import ErrorSource, ErrorTable, refused_words, transient_error

__all__ = ["AnthropicErrors", "context_overflow"]


_ERROR_TYPES: dict[str, int] = {
    "invalid_request_error": 400,
    "request_too_large": 413,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "timeout_error": 504,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The Messages API's error ``type`` words, as the HTTP status they stand for."""


def _message_of(body: Any, fallback: str) -> tuple[str, str | None]:
    """The server's message and error type from an error body ``{"type": "error", "error": {...}}``."""
    error = field(body, "error") if isinstance(body, dict) else None
    message = field(error, "message")
    kind = field(error, "type")
    if not isinstance(message, str) or not message:
        message = body if isinstance(body, str) and body.strip() else fallback
    return message, kind if isinstance(kind, str) else None


_PROMPT_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_INPUT_AND_MAX_TOKENS = re.compile(r"input length and `max_tokens` exceed context limit: (\d+) \+ \d+ > (\d+)")


def context_overflow(status: int, kind: str | None, said: Any) -> tuple[int | None, int | None] | None:
    """``(tokens, limit)`` when an ``invalid_request_error`` (HTTP 400, or that error event in a
    stream) says the request does not fit the model's context window, else None.

    ``said`` is the server's own message: ``prompt is too long: 200027 tokens > 200000 maximum``
    (tokens 200027, limit 200000), or ``input length and `max_tokens` exceed context limit:
    197626 + 8192 > 200000`` (tokens is the input's 197626). A count the message does not give
    is None.
    """
    if status != 400 or kind not in (None, "invalid_request_error") or not isinstance(said, str):
        return None
    text = said.strip()
    if not text.lower().startswith(("prompt is too long", "input length and `max_tokens` exceed context limit")):
        return None
    found = _PROMPT_TOO_LONG.match(text) or _INPUT_AND_MAX_TOKENS.match(text)
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)


def _http_error(
    model: ErrorSource, status: int, message: str, body: Any, retry_after: float | None,
    kind: str | None = None, said: Any = None,
) -> ModelError:
    """`error_for_status`, except that 413 is a `BadRequestError` and a request too long for the
    context window (the server's message ``said`` and error ``kind``, `context_overflow`) is a
    `ContextOverflowError`."""
    overflow = context_overflow(status, kind, said)
    if overflow is not None:
        tokens, limit = overflow
        return ContextOverflowError(message, status_code=status, body=body, provider=model.provider,
                                    tokens=tokens, limit=limit)
    if status == 413:  # the request is too large: the same request fails again
        return BadRequestError(message, status_code=413, body=body, provider=model.provider)
    return error_for_status(status, message, body=body, provider=model.provider, retry_after=retry_after)


class AnthropicErrors(ErrorTable):
    """The Messages API's error table (`ErrorTable`)."""

    sdk = anthropic
    unauthorized = " (check the API key: ANTHROPIC_API_KEY)"

    def status_error(self, model: ErrorSource, status: int, body: Any, message: str,
                     retry_after: float | None) -> ModelError:
        """The error for an HTTP error status, named by the server's message and error type."""
        said, kind = _message_of(body, message)
        text = str(said) + (f" [{kind}]" if kind else "") + self.hint(model, status)
        return _http_error(model, status, text, body, retry_after, kind, said)

    def stream_error(self, model: ErrorSource, error: Any, fallback: str | None = None, *,
                     in_stream: bool = True) -> ModelError:
        """The nbagent error for an ``error`` event inside a started stream (``in_stream=False``:
        an error object sent as the whole answer, with a 2xx status), sorted like an HTTP error of
        the status its ``type`` stands for: ``overloaded_error`` / ``api_error`` (and an unknown
        type) are a retried `StreamInterruptedError` (a `ResponseBodyError` for a whole answer),
        ``rate_limit_error`` a retried `RateLimitError`, ``invalid_request_error`` a
        `BadRequestError` (a `ContextOverflowError` when the prompt is too long), ...
        (``status_code`` stays None: the HTTP status was 200)."""
        message = field(error, "message")
        kind = field(error, "type")
        if not isinstance(message, str) or not message:
            message = fallback or "the server reported an error without a message"
        words = message + (f" [{kind}]" if isinstance(kind, str) and kind else "")
        status = _ERROR_TYPES.get(kind) if isinstance(kind, str) else None
        if status is None or status >= 500 or status in (408, 409):
            return transient_error(model, words, error, None, in_stream=in_stream)
        said = f"{refused_words(in_stream)}{words}{self.hint(model, status)}"
        err = _http_error(model, status, said, error, None, kind, message)
        err.status_code = None
        return err
