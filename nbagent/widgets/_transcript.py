"""The copy of a chat view's conversation that is saved with the notebook.

Owns `transcript_bundle` (the conversation as stored, as inert HTML — inline styles only, no
JavaScript, the static summary's builders from `nbagent.display.html` — and as plain text) and
`SavedCopy`, which a `ChatView` uses to display it as a second output under the live view and
keep it current (``update_display``) when a run on its thread ends, and sends again when the
notebook's last cell settles (`nbagent.notebook.settle`). So a saved notebook shows
the conversation where no widget can run: on GitHub, in nbviewer, in JupyterLab after the kernel
is gone. The view's stylesheet hides it while the live view is on the page.

Imports the core's HTML builders, sanitizer and message shapes, and IPython's display functions
when it displays (no ipywidgets).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..display.html import FONT, FRAME, MUTED, NO_MATH, messages_html, table_header_html, tool_row_html
from ..display.sanitize import escape
from ..messages import Message, ToolCall, unanswered_calls

__all__ = ["MAX_MESSAGES", "SavedCopy", "transcript_bundle", "transcript_text"]

MAX_MESSAGES = 60
"""The newest messages kept in the saved copy (the thread itself keeps all of them)."""
_TEXT_CHARS = 400
"""Each message's text is cut to this in the plain-text copy."""


def _clip(text: str, limit: int = _TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def transcript_text(thread: str, messages: Sequence[Message], waiting: Sequence[ToolCall] | None = None) -> str:
    """The conversation as plain text: one line per message, tool calls and results indented;
    `waiting`: its unanswered calls, when the caller has them already."""
    lines = [f"nbagent chat · thread {thread!r} · saved copy (run the cell in Jupyter to continue)"]
    shown = list(messages)[-MAX_MESSAGES:]
    if len(messages) > len(shown):
        lines.append(f"… {len(messages) - len(shown)} earlier messages")
    for m in shown:
        blocked = getattr(m, "blocked", None)
        if m.kind == "user":
            lines.append(f"you: {_clip(m.content)}")
            if blocked:
                lines.append(f"  [not sent to the model: blocked by {blocked}]")
        elif blocked:  # an answer a guard refused: its text was never kept
            lines.append(f"assistant: [answer withheld: blocked by {blocked}]")
        elif m.kind == "assistant":
            if m.text:
                lines.append(f"assistant: {_clip(m.text)}")
            for call in m.tool_calls:
                lines.append(f"  tool call {call.name}({_clip(call.args_json, 200)})")
        elif m.kind == "tool-result":
            lines.append(f"  {m.name} {m.status}: {_clip(m.content, 200)}")
    for call in unanswered_calls(messages) if waiting is None else waiting:
        lines.append(f"  {call.name} waits for a decision")
    return "\n".join(lines)


def _waiting_html(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return ""
    rows = [table_header_html(), *(tool_row_html(c.name, c.args_json, "waiting") for c in calls)]
    return '<div style="margin:4px 0 8px 0">' + "".join(rows) + "</div>"


def transcript_bundle(thread: str, messages: Sequence[Message],
                      subruns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"text/html": ..., "text/plain": ...}`` of the conversation (the newest `MAX_MESSAGES`),
    with the sub-agents' runs under their agent calls (`subruns`, by call id); the HTML keeps its
    look in an untrusted notebook (each themed style after a plain one: `nbagent.display.theme`)."""
    shown = list(messages)[-MAX_MESSAGES:]
    earlier = len(messages) - len(shown)
    head = (f'<div style="{MUTED};font-size:12px;margin-bottom:4px">nbagent chat · thread '
            f"<code>{escape(thread)}</code> · saved copy (run the cell in Jupyter to continue)"
            + (f" · {earlier} earlier messages not shown" if earlier else "") + "</div>")
    # (an agent call that waits stays in its answer's table, its sub-agent's steps under it)
    waiting = [c for c in unanswered_calls(messages) if not subruns or c.id not in subruns]
    body = (messages_html(shown, skip_call_ids={c.id for c in waiting}, subruns=subruns) if shown
            else f'<div style="{MUTED}">no messages yet</div>')
    html = (f'<div class="nbagent-transcript {NO_MATH}" style="{FONT};{FRAME};border-radius:6px;'
            f'padding:8px 10px;max-width:960px">{head}{body}{_waiting_html(waiting)}</div>')
    return {"text/html": html, "text/plain": transcript_text(thread, messages, waiting)}


class SavedCopy:
    """The saved-notebook copy of one view's conversation: displayed under the view, updated in
    place (one display id) whenever the conversation changes.

    Args:
        thread: the view's thread.
    """

    def __init__(self, thread: str) -> None:
        self.thread = thread
        self.messages: list[Message] = []
        self.subruns: Mapping[str, Any] = {}
        self.display_id: str | None = None

    def bundle(self) -> dict[str, Any]:
        """The copy as it stands (`transcript_bundle`)."""
        return transcript_bundle(self.thread, self.messages, self.subruns)

    def display(self, live: dict[str, Any]) -> None:
        """Display the live view's bundle, then the copy (with the display id updates go to)."""
        from IPython.display import display

        display(live, raw=True)
        self.display_id = self.display_id or "nbagent-" + uuid.uuid4().hex
        display(self.bundle(), raw=True, display_id=self.display_id)

    def update(self, messages: Sequence[Message], subruns: Mapping[str, Any] | None = None) -> None:
        """The conversation now (and its sub-agents' runs): the displayed copies follow (nothing
        to do before a display)."""
        self.messages = list(messages)
        self.subruns = dict(subruns or {})
        self.send_again()

    def send_again(self) -> None:
        """Send the copy as it stands to where it is displayed, as a reply to the cell running now
        (`nbagent.notebook.settle`: a headless executor reads only that cell's replies)."""
        if self.display_id is None:
            return
        try:
            from IPython.display import update_display

            update_display(self.bundle(), raw=True, display_id=self.display_id)
        except Exception:  # no IPython here: nothing was displayed to update
            pass
