"""The notebook edge: nbagent's views, built on ipywidgets (anywidget for the streaming text).

- `ChatView` (``agent.chat(thread=...)``): the conversation, streaming answers, a live tool-call
  table with Approve / Deny / Edit / Always allow, Stop, usage and cost.
- `render_result_html` (``display(result)``): a static HTML summary of a run, no JavaScript.
- `ConfirmBox`: a forecast with Run and Cancel (what ``agent.map(rows, confirm_over=...)`` shows
  when the forecast passes the limit; `nbagent.evals` makes it, this package never imports evals).

Inside, the view is split by what it does: `chat` (the widgets and their layout), `frame`
(`ViewFrame`: the browser-only part — stylesheet, restart notice, ticking clock), `_controller`
(`ChatController`: runs, run events, what goes first), `_follow` (keeping in step with the thread
when it moves on elsewhere), `_calls` (which tool calls wait, the decisions on them), `_queue`
(messages sent while busy), `_tally` (the footer's numbers) and `_transcript` (the copy of the
conversation saved with the notebook); the underscored ones import no ipywidgets.

Imported only when used: ``import nbagent`` never imports ipywidgets. `ChatView` loads lazily so
that the static summary works where ipywidgets is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..display.html import render_result_html

if TYPE_CHECKING:
    from .chat import ChatView
    from .confirm import ConfirmBox
    from .stream import StreamText, ThinkingText
    from .tool_table import ToolRow, ToolTable

__all__ = ["ChatView", "ConfirmBox", "StreamText", "ThinkingText", "ToolRow", "ToolTable", "render_result_html"]

_LAZY = {"ChatView": "chat", "ConfirmBox": "confirm", "StreamText": "stream", "ThinkingText": "stream",
         "ToolRow": "tool_table", "ToolTable": "tool_table"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.widgets' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
