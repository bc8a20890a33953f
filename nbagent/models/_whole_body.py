"""A success (2xx) body read whole, for every HTTP provider: what it holds, and the error naming
it when it is no answer. Sans-IO: bytes in, a verdict out.

A model reads a body whole when it asked for the whole answer, and when a streamed request was
answered with something that is not the stream it asked for (no ``text/event-stream`` label): a
server or proxy that ignored ``stream``, an event stream labelled as JSON or not at all, an error
object sent with status 200, a proxy's HTML error page, an empty body, bytes that are not UTF-8.

Owns `read_body` (what the body holds: a JSON value, the data of the events of event-stream
text, or nothing nbagent reads), `sse_data` (those data fields), `body_error` (the
`ResponseBodyError` naming the status, the content type, what the body is and its first bytes)
and `body_excerpt` (those bytes as one printable line, the API key scrubbed). What a JSON value
or an event means is the provider's (`HTTPModel.read_answer`, `HTTPModel.body_events`).

May import: the standard library, nbagent's exceptions, `models._keys` and `models._http_errors`.
"""

from __future__ import annotations

import json
from typing import Any

from ..exceptions import ResponseBodyError
from ._http_errors import ErrorSource
from ._keys import Secret, scrub

__all__ = ["EXCERPT_CHARS", "body_error", "body_excerpt", "read_body", "sse_data"]

EXCERPT_CHARS = 200
"""At most this many characters of a bad body are shown (in the message and as ``body``)."""

_ESCAPES = {i: repr(chr(i))[1:-1] for i in (*range(32), 127)}  # newlines, tabs, NUL... as \n, \t, \x00

_NOTHING: tuple[str, Any] = ("", None)

_SSE_FIELDS = ("data:", "event:", "id:", "retry:", ":")
"""How an event-stream text that is not labelled so starts (``:`` begins a comment)."""


def read_body(data: bytes, content_type: str) -> tuple[str, Any]:
    """What a 2xx body read whole holds: ``("json", value)`` for a JSON text (any value: the
    provider decides whether it is an answer), ``("events", [data, ...])`` for event-stream text
    (labelled so, or starting with an event-stream field or comment), else ``("", None)``: empty, not UTF-8,
    JSON that does not parse, HTML, other text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _NOTHING
    start = text.lstrip()[:1]
    if start in ("{", "["):
        try:
            return "json", json.loads(text)
        except ValueError:
            return _NOTHING
    if start and ("event-stream" in content_type.lower() or text.lstrip().startswith(_SSE_FIELDS)):
        return "events", sse_data(text)
    return _NOTHING


def sse_data(text: str) -> list[str]:
    """The ``data`` of each event of event-stream text (its ``data:`` lines joined), in order;
    events without data and the ``[DONE]`` sentinel left out."""
    found = []
    for event in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
        if data and not data.startswith("[DONE]"):
            found.append(data)
    return found


def body_excerpt(data: bytes, secret: Secret, limit: int = EXCERPT_CHARS) -> str:
    """The first bytes of a body as one printable line: bytes that are not UTF-8 as ``\\xNN``,
    control characters escaped, the API key scrubbed (before cutting, so no part of it shows), at
    most `limit` characters and then ``…``."""
    head = data[: 4 * limit + len(secret.get())]  # `limit` characters come from <= 4 * limit bytes
    text = scrub(secret, head.decode("utf-8", "backslashreplace")).translate(_ESCAPES)
    if len(text) > limit or len(head) < len(data):
        text = text[:limit] + "…"
    return text


def _sort_body(content_type: str, data: bytes, expected: str, streaming: bool) -> tuple[str, bool]:
    """What a body that is not the answer is, and whether asking again can help."""
    if not data.strip():
        return "an empty body", True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes that are not UTF-8", False  # the server's encoding: the same bytes again
    start = text.lstrip()[:1]
    if "html" in content_type.lower() or start == "<":
        return "an HTML page (most likely a proxy's or gateway's error page)", True
    if not streaming and ("event-stream" in content_type.lower() or text.lstrip().startswith(("event:", "data:"))):
        return "an event stream (to a request that asked for the whole answer)", True
    if start in ("{", "[") or "json" in content_type.lower():
        try:
            json.loads(text)
        except ValueError:
            return "JSON that cannot be parsed (cut off?)", True
        return f"JSON that is not {expected} object", False
    return "text that is not JSON", True


def body_error(
    model: ErrorSource, status: int, content_type: str, data: bytes | None, *, streaming: bool, expected: str
) -> ResponseBodyError:
    """The error for a success answer whose body is not `expected` (e.g. ``"a chat completion"``).
    `data` is the body, or None for a stream that ended without any event (its bytes were read by
    the SDK)."""
    if data is None:
        reason, retryable, excerpt, size = "an empty event stream (no data events)", True, "", ""
    else:
        reason, retryable = _sort_body(content_type, data, expected, streaming)
        excerpt = body_excerpt(data, model._api_key)
        size = f", {len(data)} bytes"
    what = "the answer to a streamed request" if streaming else "the answer"
    label = f"content-type {content_type!r}" if content_type else "no content-type"
    return ResponseBodyError(
        f"{what} is {reason}, not {expected} ({label}{size}){': ' + excerpt if excerpt else ''}",
        status_code=status,
        body=excerpt,
        content_type=content_type,
        provider=model.provider,
        retryable=retryable,
    )
