"""A server-sent event stream's bytes in, the JSON of each event's data out: nbagent's own reader of
an event stream, for a provider that reads the HTTP response itself rather than its SDK's parsed
events (`OpenAIResponsesModel`: the SDK's event objects cost about thirty times what reading the
same lines with `json.loads` does, and a streamed answer holds the kernel's only thread that long).

Owns `json_events`. Tolerant, as the event-stream format allows: the bytes may be cut anywhere
(inside a line, a UTF-8 character or a ``\\r\\n``); lines end with ``\\n``, ``\\r\\n`` or ``\\r``;
comments (``: keep-alive``), ``event:`` / ``id:`` / ``retry:`` fields and events without data are
skipped; an event's ``data:`` lines are joined by ``\\n``; OpenAI's ``data: [DONE]`` ends nothing
and is skipped; a last event without its blank line still counts. Data that is not JSON is a
`ModelResponseError` quoting it, as the SDKs' decoders raise. Sans-IO: chunks in, values out.

May import: the standard library and nbagent's exceptions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ..exceptions import ModelResponseError

__all__ = ["json_events"]


def _data(block: bytes) -> bytes | None:
    """The data of one event (its ``data:`` lines joined by ``\\n``), or None when it has none."""
    if block.startswith(b"data:"):
        at = 5
    else:
        at = block.find(b"\ndata:") + 6
        if at == 5:
            return None  # a comment, or fields without data
    end = block.find(b"\n", at)
    if end < 0 or block.find(b"\ndata:", end) < 0:  # one data line: every event of the servers known
        data = block[at:] if end < 0 else block[at:end]
        return data[1:] if data[:1] == b" " else data
    lines = [line[5:] for line in block.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(line[1:] if line[:1] == b" " else line for line in lines)


def _value(data: bytes, provider: str | None) -> Any:
    try:
        return json.loads(data.decode())
    except ValueError as error:  # also bytes that are not UTF-8 (a UnicodeDecodeError)
        text = data[:200].decode("utf-8", "backslashreplace")
        raise ModelResponseError(f"the stream sent an unreadable event: {error}: {text!r}",
                                 provider=provider) from None


async def json_events(chunks: AsyncIterator[bytes], provider: str | None = None) -> AsyncGenerator[Any, None]:
    """The JSON value of each event's data in an event stream's bytes (`chunks`, as they came).

    Raises:
        ModelResponseError: an event's data is not JSON (its first 200 bytes quoted).
    """
    loads = json.loads
    pending: list[bytes] = []  # the pieces of an event not ended yet
    held = False  # the last chunk ended with a CR: maybe the first half of a CRLF
    async for chunk in chunks:
        if held:
            chunk = b"\r" + chunk
            held = False
        if b"\r" in chunk:
            held = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                chunk = chunk[:-1]
        if b"\n\n" not in chunk and not (pending and chunk[:1] == b"\n" and pending[-1].endswith(b"\n")):
            if chunk:
                pending.append(chunk)
            continue
        if pending:
            chunk = b"".join(pending) + chunk
            pending.clear()
        *blocks, last = chunk.split(b"\n\n")
        if last:
            pending.append(last)
        for block in blocks:
            data = _data(block.lstrip(b"\n"))
            if data is None or data == b"[DONE]":
                continue
            try:
                value = loads(data.decode())  # str: json.loads would guess the encoding of bytes
            except ValueError:
                value = _value(data, provider)  # raises, naming the event
            yield value
    last = b"".join(pending).strip(b"\n")
    if last:  # a last event without its blank line
        data = _data(last)
        if data is not None and data != b"[DONE]":
            yield _value(data, provider)
