"""A stdio server's stdout decoded as the SDK decodes it (strict UTF-8), telling nbagent which
bytes it refused.

The SDK's stdio reader decodes the server's stdout strictly: at the first bytes that are not
UTF-8 (a log line in the server's locale's encoding) it stops for good, silently, while the
server lives on, so every later answer is lost and each call would wait its whole timeout.
`STDOUT_CODEC` is the encoding nbagent hands the SDK (``StdioServerParameters(encoding=...)``):
the same strict UTF-8, whose decoder first calls the session's hook (`refused_bytes`) with the
error. Owns the codec, its registration and `refused_bytes_text`. Imports the standard library only.
"""

from __future__ import annotations

import codecs
import contextvars
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["STDOUT_CODEC", "refused_bytes", "refused_bytes_text", "register_codec"]

STDOUT_CODEC = "nbagent_mcp_utf_8"
"""The encoding nbagent gives the SDK for a stdio server's stdout: strict UTF-8 that tells the
session which bytes it refused (`_Utf8Decoder`)."""

refused_bytes: contextvars.ContextVar[Callable[[UnicodeDecodeError], None] | None] = contextvars.ContextVar(
    "nbagent_mcp_refused_bytes", default=None)
"""The session to tell about bytes that are not UTF-8: set in the session's task, whose context
the SDK's stdout reader task inherits (it is started inside that task)."""


class _Utf8Decoder(codecs.IncrementalDecoder):
    """Strict UTF-8, as the SDK decodes a stdio server's stdout, which first tells the session
    that started the server about the bytes it refuses (the SDK's reader then stops silently)."""

    def __init__(self, errors: str = "strict") -> None:
        super().__init__(errors)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors)
        self._tell = refused_bytes.get()

    def decode(self, input: Any, final: bool = False) -> str:  # the codecs API names it `input`
        try:
            return self._utf8.decode(input, final)
        except UnicodeDecodeError as exc:
            if self._tell is not None:
                self._tell(exc)
            raise

    def reset(self) -> None:
        self._utf8.reset()

    def getstate(self) -> tuple[bytes, int]:
        return self._utf8.getstate()

    def setstate(self, state: tuple[bytes, int]) -> None:
        self._utf8.setstate(state)


def _find_codec(name: str) -> codecs.CodecInfo | None:
    if name != STDOUT_CODEC:
        return None
    utf8 = codecs.lookup("utf-8")
    return codecs.CodecInfo(utf8.encode, utf8.decode, name=STDOUT_CODEC, incrementalencoder=utf8.incrementalencoder,
                            incrementaldecoder=_Utf8Decoder, streamreader=utf8.streamreader,
                            streamwriter=utf8.streamwriter)


@functools.lru_cache(maxsize=1)
def register_codec() -> None:
    """Make `STDOUT_CODEC` known to ``codecs`` (once per process)."""
    codecs.register(_find_codec)


def refused_bytes_text(exc: UnicodeDecodeError) -> str:
    """The bytes `exc` refused, and the line around them (at most 80 bytes), as Python shows bytes."""
    data = bytes(exc.object)
    start = data.rfind(b"\n", 0, exc.start) + 1
    end = data.find(b"\n", exc.end)
    end = len(data) if end < 0 else end
    start, end = max(start, exc.start - 40), min(end, exc.end + 40)
    return f"{data[exc.start:exc.end]!r} in {data[start:end]!r}"
