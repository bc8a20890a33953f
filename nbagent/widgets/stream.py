"""`StreamText`: the streaming assistant text of one model call, as an anywidget.

Owns the coalescing of text deltas into front-end updates. Measured in JupyterLab 4: updating an HTML
widget per token sends ~40 MB for an 18.7 KB answer and loses updates; sending only the new text
at ≤ 20 updates/s sends ~0.16 MB. So deltas are buffered and sent as custom ``{"a": new_text}``
messages at most every `interval` seconds; `finish` then syncs the whole text and its sanitized
Markdown HTML once, so a re-rendered view (or a second view) is complete.

`ThinkingText` streams a model's reasoning the same way (same throttle, same delta messages) into a
collapsed "Thinking" section. Reasoning is never turned into HTML: the front end shows it with
``textContent`` only, and its `html` trait stays empty.

Imports anywidget/traitlets and `_sanitize`; the JavaScript is ``stream.js`` next to this file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..display.sanitize import markdown_html

__all__ = ["StreamText", "ThinkingText", "Throttle"]

_ESM = Path(__file__).with_name("stream.js").read_text(encoding="utf-8")


class Throttle:
    """Calls `flush` at most once per `interval` seconds, trailing: the first `poke` after a quiet
    period flushes on the next loop turn, later pokes within the interval are merged into one
    flush at the interval's end.

    Args:
        flush: what to call.
        interval: minimum seconds between flushes (0.05 = 20 per second).
        clock: monotonic seconds (injectable for tests).
        call_later: ``(delay, fn) -> handle with .cancel()`` (default: the running loop's).
    """

    def __init__(
        self,
        flush: Callable[[], None],
        interval: float = 0.05,
        *,
        clock: Callable[[], float] = time.monotonic,
        call_later: Callable[[float, Callable[[], None]], Any] | None = None,
    ) -> None:
        self._flush = flush
        self.interval = interval
        self._clock = clock
        self._call_later = call_later
        self._handle: Any = None
        self._last = float("-inf")
        self.flushes = 0

    def poke(self) -> None:
        """Ask for a flush (cheap: at most one is scheduled at a time)."""
        if self._handle is not None:
            return
        delay = max(0.0, self._last + self.interval - self._clock())
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._handle = call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._last = self._clock()
        self.flushes += 1
        self._flush()

    def cancel(self) -> None:
        """Drop a scheduled flush."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class StreamText(anywidget.AnyWidget):
    """Assistant text that streams in; rendered as sanitized Markdown.

    Use `append` per delta, `reset` when a model call is retried, `finish` at the end of the
    model call. Between `finish` calls the synced traits stay unchanged: the front end builds the
    text from the appended pieces.
    """

    _esm = _ESM
    plain = traitlets.Bool(False).tag(sync=True)
    """Front-end mode: False = Markdown answer; True = a collapsed "Thinking" section (text only)."""
    done = traitlets.Bool(False).tag(sync=True)
    """True once `finish` was called (the "Thinking" summary stops saying "…")."""
    text = traitlets.Unicode("").tag(sync=True)
    """The whole text; synced at the end (during streaming only new text is sent)."""
    html = traitlets.Unicode("").tag(sync=True)
    """The text as sanitized Markdown HTML; set by `finish`."""

    def __init__(self, text: str = "", *, interval: float = 0.05,
                 clock: Callable[[], float] = time.monotonic,
                 call_later: Callable[[float, Callable[[], None]], Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._parts: list[str] = []
        self._unsent: list[str] = []
        self._throttle = Throttle(self._send_unsent, interval, clock=clock, call_later=call_later)
        self.finished = False
        if text:
            self.finish(text)

    @property
    def value(self) -> str:
        """All text received so far (including text not yet sent to the front end)."""
        return "".join(self._parts)

    def append(self, delta: str) -> None:
        """Add new text; it reaches the front end within `interval` seconds."""
        if not delta:
            return
        if self.finished:  # a second stream on a finished widget: start over from its text
            self.finished = False
            self._parts = [self.text]
            self.html = ""
        self._parts.append(delta)
        self._unsent.append(delta)
        if self.done:
            self.done = False
        self._throttle.poke()

    def _send_unsent(self) -> None:
        if self._unsent:
            piece = "".join(self._unsent)
            self._unsent.clear()
            self.send({"a": piece})

    def reset(self) -> None:
        """Clear the text (a retried model call: its partial text is void)."""
        self._throttle.cancel()
        self._parts.clear()
        self._unsent.clear()
        self.finished = False
        with self.hold_sync():
            self.text = ""
            self.html = ""
            self.done = False
        self.send({"r": 1})

    def finish(self, text: str | None = None) -> None:
        """End of the model call: sync the whole text (`text` if given, e.g. the final message)
        and its sanitized Markdown in one update; pending appends are folded into it."""
        self._throttle.cancel()
        self._unsent.clear()
        full = self.value if text is None else text
        self._parts = [full]
        self.finished = True
        with self.hold_sync():
            self.text = full
            self.html = self._html(full)
            self.done = True

    def _html(self, text: str) -> str:
        return markdown_html(text)


class ThinkingText(StreamText):
    """A model's reasoning for one model call: a "Thinking" section, collapsed by default, that
    streams while the model thinks and hides itself while empty.

    Same API as `StreamText` (`append`, `reset`, `finish`). The text is shown as plain text
    (``textContent`` in the browser, never parsed as HTML); `html` is always empty.
    """

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("plain", True)
        super().__init__(text, **kwargs)

    def _html(self, text: str) -> str:
        return ""
