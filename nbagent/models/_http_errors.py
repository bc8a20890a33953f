"""A failed HTTP model call, sorted into nbagent's exceptions: the part every provider shares.

Owns `ErrorTable`, the base of a provider's error table: `ErrorTable.map_error` sorts an
exception into nbagent's error tree (an SDK's exception classes, found on the table's ``sdk``
module, which both official SDKs name alike; or an httpx transport error, for a provider that
speaks HTTP itself) and hands the two things only the provider knows to its table:
`ErrorTable.status_error` (an HTTP error status with the server's body) and
`ErrorTable.stream_error` (an error object the server sent inside a started stream, or with a
2xx status). Also `parse_retry_after` (``retry-after-ms`` / ``Retry-After`` in seconds or as an
HTTP date), `transport_failure` (which httpx transport error an exception is, if any), `where`
(the server's name in messages) and `ErrorSource` (what the mapping reads from a model).

The key is not scrubbed here: `HTTPModel` scrubs every error that leaves a call (`_keys.scrub_error`).

    ModelError
    ├── ModelHTTPError (error_for_status: 400 BadRequestError / ContextOverflowError, 401 / 403
    │   AuthenticationError, 404 NotFoundError, 429 RateLimitError, 5xx ServerError, other 4xx)
    ├── ModelConnectionError   could not reach the server (retried)
    ├── ModelTimeoutError      the request timed out, or the call's deadline passed (retried)
    ├── StreamInterruptedError a started stream broke off (retried)
    └── ModelResponseError     an answer nbagent cannot read (ResponseBodyError: a 2xx body that is no answer)

May import: the standard library, nbagent's exceptions and `models._keys`. Never an SDK: a
provider's table names its SDK module.
"""

from __future__ import annotations

import email.utils
import sys
import time
from collections.abc import Mapping
from typing import Any, Protocol

from ..exceptions import (
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
    ResponseBodyError,
    StreamInterruptedError,
    error_for_status,
)
from ._keys import Secret, safe_url

__all__ = ["ErrorSource", "ErrorTable", "parse_retry_after", "refused_words", "transient_error", "transport_failure",
           "where"]


class ErrorSource(Protocol):
    """What the error mapping reads from the model that made the call."""

    provider: str
    model_name: str
    base_url: str | None
    default_host: str
    _api_key: Secret


def where(model: ErrorSource) -> str:
    """The server a model talks to, for messages: its URL without credentials, or its default host."""
    return safe_url(model.base_url) or model.default_host


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


def transport_failure(exc: BaseException) -> str | None:
    """``"timeout"`` or ``"connection"`` for an httpx transport error (the SDKs' ``httpx2`` or
    ``httpx``, and their ``httpcore``), None for anything else. Looked up in `sys.modules`, so no
    HTTP library is imported for it."""
    for module in ("httpx2", "httpx", "httpcore2", "httpcore"):
        mod = sys.modules.get(module)
        base = getattr(mod, "TransportError", None) if mod is not None else None
        if base is not None and isinstance(exc, base):
            timeout = getattr(mod, "TimeoutException", None) or getattr(mod, "TimeoutError", None)
            return "timeout" if timeout is not None and isinstance(exc, timeout) else "connection"
    return None


def error_message(body: Any, fallback: str) -> str:
    """The server's own words in an error body: ``{"error": {"message": ...}}``, ``{"error":
    "..."}``, ``{"message": ...}``, or the body itself when it is text; else `fallback`."""
    inner = body.get("error") if isinstance(body, dict) else None
    for candidate in (inner.get("message") if isinstance(inner, dict) else inner,
                      body.get("message") if isinstance(body, dict) else None, body):
        if isinstance(candidate, str) and candidate.strip():
            return candidate
    return fallback


def refused_words(in_stream: bool) -> str:
    """How the message of a refusal the server sent as an error object begins: inside a started
    stream, or as the whole answer (a 2xx body that is an error object: there was no stream)."""
    return "the server ended the stream with an error: " if in_stream else "the server answered with an error: "


def transient_error(model: ErrorSource, words: str, body: Any, status_code: int | None, *,
                    in_stream: bool) -> ModelError:
    """The retried error for an error object that does not refuse the request (a server error,
    an overload, an unknown error): inside a started stream, the stream broke off (a
    `StreamInterruptedError`); as the whole answer, a 2xx body that is no answer (a
    `ResponseBodyError`). `status_code`: a status the server put in the object, if any."""
    if in_stream:
        return StreamInterruptedError(f"the streamed answer broke off: {words}", status_code=status_code, body=body,
                                      provider=model.provider)
    return ResponseBodyError(f"the server answered with an error: {words}", status_code=status_code, body=body,
                             provider=model.provider, retryable=True)


class ErrorTable:
    """How one provider's failures become nbagent's errors (its ``errors`` attribute).

    A provider subclasses it and gives `status_error` and `stream_error` (the words and codes its
    servers use), and sets `sdk` to its SDK's module when it calls through one. The rest, the
    same for every provider, is `map_error`'s.
    """

    sdk: Any = None
    """The SDK module whose exception classes `map_error` knows (``openai``, ``anthropic``: they
    share the names ``APIStatusError``, ``APITimeoutError``...); None for a provider that sends
    its requests with an HTTP client of its own (only transport errors are then exceptions)."""
    unauthorized = " (check the API key for this provider)"
    """Added to a 401's message."""
    forbidden = " (check the API key's access to this model)"
    """Added to a 403's message."""

    def hint(self, model: ErrorSource, status: int | None) -> str:
        """What a user can check, added to the message of an error of this status."""
        if status == 404:
            return f" (model {model.model_name!r} at {where(model)})"
        if status == 401:
            return self.unauthorized
        if status == 403:
            return self.forbidden
        return ""

    def status_error(self, model: ErrorSource, status: int, body: Any, message: str,
                     retry_after: float | None) -> ModelError:
        """The error for an HTTP error status (>= 400): `body` is the server's (parsed JSON, or
        text), `message` the SDK's (or the status line). The default: `error_for_status` with the
        server's own words (`error_message`) and the `hint`."""
        text = error_message(body, message) + self.hint(model, status)
        return error_for_status(status, text, body=body, provider=model.provider, retry_after=retry_after)

    def stream_error(self, model: ErrorSource, error: Any, fallback: str | None = None, *,
                     in_stream: bool = True) -> ModelError:
        """The error for an error object the server sent inside a started stream, or, with
        ``in_stream=False``, as a 2xx answer's whole body (the message then speaks of no stream).
        The default: retried (`transient_error`), with the server's words."""
        words = error_message(error if isinstance(error, dict) else {"error": error},
                              fallback or "the server reported an error without a message")
        return transient_error(model, words, error, None, in_stream=in_stream)

    def map_error(self, model: ErrorSource, exc: BaseException, *, streaming: bool = False) -> ModelError | None:
        """The nbagent error for an SDK or transport exception (None: not a model-call failure,
        which the caller re-raises as it is). ``streaming``: it came while reading an already
        started stream."""
        if isinstance(exc, ModelError):
            return exc
        sdk = self.sdk
        if sdk is not None and isinstance(exc, sdk.APIStatusError):
            body = exc.body
            if exc.status_code < 400:  # an error event inside a started stream, raised so (Anthropic's SDK)
                return self.stream_error(model, body.get("error") if isinstance(body, dict) else body)
            return self.status_error(model, exc.status_code, body, exc.message,
                                     parse_retry_after(exc.response.headers))
        if streaming:
            return self._broken_stream(model, exc)
        if sdk is not None:
            found = self._sdk_failure(model, exc)
            if found is not None:
                return found
        failure = transport_failure(exc)
        if failure == "timeout":
            return ModelTimeoutError(f"the request to {where(model)} timed out", provider=model.provider)
        if failure is not None:
            return ModelConnectionError(f"could not reach {where(model)}: {type(exc).__name__}: {exc}",
                                        provider=model.provider)
        return None

    def _sdk_failure(self, model: ErrorSource, exc: BaseException) -> ModelError | None:
        """The SDK's own failures of a request that got no answer (a timeout, no connection, an
        answer that does not fit the API), or None."""
        sdk, provider = self.sdk, model.provider
        if isinstance(exc, sdk.APITimeoutError):
            return ModelTimeoutError(f"the request to {where(model)} timed out", provider=provider)
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__
            detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
            return ModelConnectionError(f"could not reach {where(model)}{detail}", provider=provider)
        if isinstance(exc, sdk.APIResponseValidationError):
            return ModelResponseError(f"the server's answer does not fit the API: {exc.message}", provider=provider)
        if isinstance(exc, sdk.APIError):
            return ModelError(exc.message, provider=provider)
        return None

    def _broken_stream(self, model: ErrorSource, exc: BaseException) -> ModelError:
        """The error for an exception while reading a started stream: an error event the SDK
        raised (sorted by `stream_error`), an event that is not JSON (`ModelResponseError`, its
        text quoted), else the stream broke off (a retried `StreamInterruptedError`)."""
        sdk, provider = self.sdk, model.provider
        if isinstance(exc, ValueError):  # an event whose JSON does not decode
            doc = getattr(exc, "doc", None)  # json.JSONDecodeError keeps the text it read
            quoted = f": {doc[:200]!r}" if isinstance(doc, str) else ""
            return ModelResponseError(f"the stream sent an unreadable event: {exc}{quoted}", provider=provider)
        if (sdk is not None and isinstance(exc, sdk.APITimeoutError)) or transport_failure(exc) == "timeout":
            reason = "the read timed out"
        elif sdk is not None and isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__
            reason = exc.message + (f" ({type(cause).__name__}: {cause})" if cause is not None else "")
        elif sdk is not None and isinstance(exc, sdk.APIError):
            # the OpenAI SDK raises this for an event whose data has "error"; its body is that object
            return self.stream_error(model, exc.body, exc.message)
        else:
            reason = f"{type(exc).__name__}: {exc}"
        return StreamInterruptedError(f"the streamed answer broke off: {reason}", provider=provider)
