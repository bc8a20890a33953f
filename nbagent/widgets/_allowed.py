"""The line of a chat view that lists its thread's always-allowed tools, each with a ✕ to revoke it.

Owns `AllowedTools`: "always allowed on this thread:" and one ``<tool> ✕`` button per tool (what
"Always allow <tool>" added, in this view, in code or before a restart). A click hands the
revoke to the controller (`ChatController.revoke` → `Agent.revoke`): the tool's next call waits
for a person again. While a run goes on the buttons are off (the run keeps its own copy of the
list until it ends). Hidden when no tool is always allowed.

Imports ipywidgets, the theme and `tool_table.themed_button`; clicks go through `schedule`
(handlers may run on another thread than the kernel loop's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

from ..display.html import MUTED, SMALL
from .tool_table import Schedule, themed_button

__all__ = ["AllowedTools"]

_RUNNING = "a run is going on: stop it (or let it pause) to revoke"


def _tip(tool: str) -> str:
    return f"revoke: {tool} no longer runs without asking on this thread; its next call waits for you"


class AllowedTools(widgets.HBox):
    """The thread's always-allowed tools, each with a ✕ (``buttons``, by tool name) that calls
    ``revoke(tool)`` on the loop."""

    def __init__(self, schedule: Schedule, revoke: Callable[[str], Any]) -> None:
        self._schedule, self._revoke = schedule, revoke
        self.tools: list[str] = []
        self.buttons: dict[str, widgets.Button] = {}
        self._running = False
        self._label = widgets.HTML(f'<span style="{SMALL};{MUTED}">always allowed on this thread:</span>')
        super().__init__([], layout=widgets.Layout(display="none", flex_flow="row wrap", align_items="center"))
        self.add_class("nbagent-always-allowed")

    def show(self, tools: Sequence[str]) -> None:
        """List `tools` (none: the line hides)."""
        tools = sorted(tools)
        if tools == self.tools:
            return
        self.tools = tools
        self.buttons = {t: self.buttons.get(t) or self._button(t) for t in tools}
        self.children = (self._label, *self.buttons.values()) if tools else ()
        self.layout.display = "" if tools else "none"
        self.running(self._running)

    def _button(self, tool: str) -> widgets.Button:
        button = themed_button(f"{tool} ✕", "", _tip(tool))
        button.add_class("nbagent-revoke")
        button.on_click(lambda _: None if self._running else self._schedule(self._revoke, tool))
        return button

    def running(self, running: bool) -> None:
        """A run goes on (the ✕ are off) or not."""
        self._running = running
        for tool, button in self.buttons.items():
            button.disabled = running
            button.tooltip = _RUNNING if running else _tip(tool)
