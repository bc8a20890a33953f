"""`ViewFrame`: the part of a chat view that lives in the browser only.

Owns the view's stylesheet (``view.css``), the notice shown after a kernel restart and the clock
of running tool calls (``frame.js``). One `ViewFrame` is the first child of every `ChatView`.

Kernel restart, measured in JupyterLab 4.6 and Notebook 7.6: the front end marks every widget
view of the old kernel disconnected (class ``jupyter-widgets-disconnected``) and ipywidgets' CSS
draws a red broken-link icon on each — about twenty in one chat view, one per sub-widget. The
stylesheet hides those icons inside ``.nbagent-chat``, shows this frame's one notice instead
("kernel restarted: run this cell again to continue thread ..."), and greys the controls, which
can do nothing any more. anywidget puts the stylesheet in the page's head once, where it stays
when the kernel goes. The stylesheet also hides the copy of the conversation saved with the
notebook (see `ChatView`) while the live view is on the page.

The clock: a running call's time is ``<span class="nbagent-tick" data-elapsed="…">`` in its
row's HTML; ``frame.js`` counts it up about ten times a second in the browser, so a running call
shows its time without widget traffic (a kernel's widget messages stay at most 100 per second:
past ~800 a second, front ends silently lose updates), from the elapsed seconds the kernel sent
(the two clocks need not agree).

Imports anywidget and traitlets; the JavaScript and CSS are files next to this one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

__all__ = ["ViewFrame", "restart_notice"]

_HERE = Path(__file__).parent


def restart_notice(thread: str) -> str:
    """What a view says once its kernel is gone."""
    return f"kernel restarted: run this cell again to continue thread {thread!r}"


class ViewFrame(anywidget.AnyWidget):
    """The browser-only part of a `ChatView` (see the module docstring).

    Args:
        thread: the view's thread, named in the notice shown after a kernel restart.
    """

    _esm = (_HERE / "frame.js").read_text(encoding="utf-8")
    _css = (_HERE / "view.css").read_text(encoding="utf-8")
    notice = traitlets.Unicode("").tag(sync=True)
    """The text shown (as text, never HTML) once the kernel is gone."""

    def __init__(self, thread: str, **kwargs: Any) -> None:
        super().__init__(notice=restart_notice(thread), **kwargs)
        self.add_class("nbagent-frame")
