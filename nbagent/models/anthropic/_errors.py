"""Failures of a Messages API call sorted into nbagent's exceptions, and the API key's hygiene.

Owns `map_error` (an SDK or transport exception: HTTP status, timeout, connection, an ``error``
event the SDK raised mid-stream), `stream_error` (an error object sent inside a started stream,
sorted by its ``type``), `parse_retry_after`, and the key's hygiene: `_Secret` holds it, `scrub`
takes it out of any text or body, `_safe_url` takes credentials out of URLs. Every error is
built without its SDK cause (whose request carries the ``x-api-key`` header).

Retried: 429 (``retry-after`` honoured), 529 overloaded, 500 and other 5xx, 408 / 409, a stream
that broke off. Not retried: 400 / 413 (`BadRequestError`; a prompt too long for the model's
context window is a `ContextOverflowError`, `context_overflow`), 401 / 403
(`AuthenticationError`), 404 (`NotFoundError`), other 4xx (`ModelHTTPError`); each carries the
status and the server's message.

May import: ``anthropic`` (its exception classes), nbagent's exceptions, and `_stream`'s field
reader. Not `_wire` or `_model`: the model is passed in as an `ErrorSource`.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import anthropic

from ...exceptions import (
    BadRequestError,
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
    StreamInterruptedError,
    error_for_status,
)
from .._keys import ErrorSource, _safe_url, parse_retry_after, scrub
from ._stream import _get


def _where(model: ErrorSource) -> str:
    return _safe_url(model.base_url) or "api.anthropic.com"


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


def _hint(model: ErrorSource, status: int | None) -> str:
    if status == 404:
        return f" (model {model.model_name!r} at {_where(model)})"
    if status == 401:
        return " (check the API key: ANTHROPIC_API_KEY)"
    if status == 403:
        return " (check the API key's access to this model)"
    return ""


def _message_of(body: Any, fallback: str) -> tuple[str, str | None]:
    """The server's message and error type from an error body ``{"type": "error", "error": {...}}``."""
    error = _get(body, "error") if isinstance(body, dict) else None
    message = _get(error, "message")
    kind = _get(error, "type")
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


def stream_error(model: ErrorSource, error: Any) -> ModelError:
    """The nbagent error for an ``error`` event inside a started stream, sorted like an HTTP error
    of the status its ``type`` stands for: ``overloaded_error`` / ``api_error`` (and an unknown
    type) are a retried `StreamInterruptedError`, ``rate_limit_error`` a retried `RateLimitError`,
    ``invalid_request_error`` a `BadRequestError` (a `ContextOverflowError` when the prompt is
    too long), ... (``status_code`` stays None: the HTTP status was 200)."""
    message = _get(error, "message")
    kind = _get(error, "type")
    if not isinstance(message, str) or not message:
        message = "the server reported an error without a message"
    words = scrub(model._api_key, message + (f" [{kind}]" if isinstance(kind, str) and kind else ""))
    body = scrub(model._api_key, error)
    status = _ERROR_TYPES.get(kind) if isinstance(kind, str) else None
    if status is None or status >= 500 or status in (408, 409):
        return StreamInterruptedError(f"the streamed answer broke off: {words}", body=body, provider=model.provider)
    err = _http_error(model, status, f"the server ended the stream with an error: {words}{_hint(model, status)}",
                      body, None, kind, message)
    err.status_code = None
    return err


def map_error(model: ErrorSource, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
    """The nbagent error for an SDK / transport exception (None: not a model-call failure)."""
    provider = model.provider
    secret = model._api_key
    if isinstance(exc, ModelError):  # nbagent's own (e.g. an unreadable event, quoting the server)
        if len(secret.get()) >= 8 and secret.get() in exc.message:
            exc.message = scrub(secret, exc.message)
            exc.args = (exc.message,)
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body
        status = exc.status_code
        if status < 400:  # an ``error`` event inside a started stream (the SDK raises it so)
            return stream_error(model, _get(body, "error") if isinstance(body, dict) else body)
        message, kind = _message_of(body, exc.message)
        text = scrub(secret, str(message)) + (f" [{kind}]" if kind else "") + _hint(model, status)
        return _http_error(model, status, text, scrub(secret, body), parse_retry_after(exc.response.headers),
                           kind, message)
    if streaming:
        if isinstance(exc, anthropic.APITimeoutError):
            reason = "the read timed out"
        elif isinstance(exc, anthropic.APIConnectionError):
            cause = exc.__cause__
            detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
            reason = scrub(secret, f"{exc.message}{detail}")
        elif isinstance(exc, ValueError):  # the SDK could not decode an event's JSON
            doc = getattr(exc, "doc", None)  # json.JSONDecodeError keeps the text it read
            quoted = f": {doc[:200]!r}" if isinstance(doc, str) else ""
            return ModelResponseError(scrub(secret, f"the stream sent an unreadable event: {exc}{quoted}"),
                                      provider=provider)
        else:
            reason = scrub(secret, f"{type(exc).__name__}: {exc}")
        return StreamInterruptedError(f"the streamed answer broke off: {reason}", provider=provider)
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelTimeoutError(f"the request to {_where(model)} timed out", provider=provider)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return ModelConnectionError(scrub(secret, f"could not reach {_where(model)}{detail}"), provider=provider)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ModelResponseError(f"the server's answer does not fit the API: {exc.message}", provider=provider)
    if isinstance(exc, anthropic.APIError):
        return ModelError(scrub(secret, exc.message), provider=provider)
    if _is_transport_error(exc):
        return ModelConnectionError(scrub(secret, f"{type(exc).__name__}: {exc}"), provider=provider)
    return None


def _is_transport_error(exc: BaseException) -> bool:
    """An httpx transport error the SDK let through (e.g. while reading a stream)."""
    for module in ("httpx2", "httpx", "httpcore2", "httpcore"):
        mod = sys.modules.get(module)
        base = getattr(mod, "TransportError", None) if mod is not None else None
        if base is not None and isinstance(exc, base):
            return True
    return False
