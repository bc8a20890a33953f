"""`RunLog`: a chat view's runs as they happen (its `RunLayout`), and an agent call's sub-agent steps
under its row, the same way down.

Owns `RunLog` and `bubble_html` (a message's bubble, for the log and the view's queue). Imports
ipywidgets, the core's HTML rendering and message shapes, and the sibling widget modules that
draw a step (`stream`, `tool_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..display.html import (
    FONT,
    MUTED,
    assistant_html,
    blocked_html,
    compaction_html,
    provider_calls,
    replayed_badge,
    user_html,
)
from ..display.sanitize import escape
from ..messages import UserMessage
from .stream import StreamText, ThinkingText
from .tool_table import Decide, Schedule, ToolRow, ToolTable, Validate

if TYPE_CHECKING:
    from ..approvals import PendingCall
    from ..messages import AssistantMessage

__all__ = ["RunLog", "bubble_html"]


def bubble_html(message: UserMessage, note: str | None = None) -> str:
    """A sent (or queued: `note`) message's bubble."""
    return user_html(message.content, note, message.images)


class RunLog(widgets.VBox):
    """A view's runs as they happen, oldest first: each message sent, each step's "Thinking"
    section (`ThinkingText`, just above the step's answer) and streaming answer (`StreamText`),
    and a `ToolTable` per answer with tool calls. `rows`: the `ToolRow`s by call id.

    An agent call's row holds its sub-agent's steps (`nested`): a `RunLog` of their own, under
    the row, collapsed, the same way down; every row of the tree is in `rows`, by its id in the
    tree.

    Args:
        interval: seconds between streaming updates.
        schedule, decide, validate: what the tool rows hand their clicks to (see `ToolTable`).
    """

    def __init__(self, *, interval: float, schedule: Schedule, decide: Decide, validate: Validate,
                 tree: tuple[dict[str, ToolRow], dict[str, RunLog]] | None = None) -> None:
        self.interval = interval
        self.rows: dict[str, ToolRow]
        self._nested: dict[str, RunLog]
        """The sub-agent step logs of the tree, by agent call id (shared by the whole tree)."""
        self.rows, self._nested = tree if tree is not None else ({}, {})
        self._streams: dict[int, StreamText] = {}
        self._thinking: dict[int, ThinkingText] = {}
        self._answers: dict[int, widgets.HTML] = {}  # a step's answer that was not streamed
        self._tables: dict[object, ToolTable] = {}
        self._held: dict[int, widgets.HTML] = {}
        """By step: the "checking…" line of an answer held for the output guards, or the line of
        its block."""
        self._schedule, self._decide, self._validate = schedule, decide, validate
        super().__init__(layout=widgets.Layout(width="100%"))

    def add(self, widget: widgets.Widget) -> None:
        """Add `widget` at the end (e.g. a message's bubble)."""
        self.children = (*self.children, widget)  # type: ignore[has-type]

    # RunLayout: what the controller shows of the runs
    def run_started(self) -> None:
        self._streams, self._thinking, self._tables, self._answers, self._held = {}, {}, {}, {}, {}

    def stream(self, step: int, delta: str, *, reasoning: bool = False) -> None:
        if self._held:  # a held answer's text: it takes the place of its "checking…"
            self._unhold(step)
        (self._thinking_for(step) if reasoning else self._stream(step)).append(delta)

    def hold(self, step: int) -> None:
        if step not in self._held:
            self._held[step] = line = widgets.HTML(
                f'<div class="nbagent-checking" style="{FONT};{MUTED};margin:4px 0">checking…</div>')
            self.add(line)

    def _unhold(self, step: int) -> None:
        line = self._held.pop(step, None)
        if line is not None:
            self.children = tuple(c for c in self.children if c is not line)

    def show_trip(self, check: Any, step: int) -> None:
        line = self._held.get(step)
        if line is not None and "nbagent-blocked" in line.value:
            return  # its answer's stand-in shows it already
        what = "not sent to the model" if check.stage == "input" else "answer withheld"
        html = blocked_html(f"{check.guard}: {check.reason}", what)
        if line is None:
            self._held[step] = widgets.HTML(html)
            self.add(self._held[step])
        else:
            line.value = html

    def reset_step(self, step: int) -> None:
        self._unhold(step)
        for partial in (self._streams.get(step), self._thinking.get(step)):
            if partial is not None:
                partial.reset()

    def show_answer(self, step: int, message: AssistantMessage) -> None:
        if message.blocked is not None:  # an answer a guard refused: its stand-in's line, no text
            self.show_trip(_Refused(message.blocked), step)
            return
        self._unhold(step)
        th = self._thinking.get(step)
        if message.reasoning:
            self._thinking_for(step).finish(message.reasoning)
        elif th is not None:
            th.finish()
        st = self._streams.get(step)
        if st is not None:
            st.finish(message.text or "")
        elif message.text:
            self._answers[step] = widgets.HTML(assistant_html(message.text))
            self.add(self._answers[step])
        if message.refusal:
            self.add(widgets.HTML(assistant_html(None, message.refusal)))
        for call in provider_calls(message):  # run by the model's server: read-only rows
            self.add_call(call.id, call.name, call.args, step)
            self.rows[call.id].set_status(call.status, call.result)

    def show_compaction(self, record: Any) -> None:
        self.add(widgets.HTML(compaction_html(record)))

    def mark_replayed(self, step: int) -> None:
        """A "replayed" badge just above the answer of `step` (its reasoning, text or tool calls)."""
        label = widgets.HTML(f'<div style="{FONT};margin:2px 0">{replayed_badge()}</div>')
        children = list(self.children)
        answer = (self._thinking.get(step) or self._streams.get(step) or self._answers.get(step)
                  or self._tables.get(step))
        children.insert(children.index(answer) if answer in children else len(children), label)
        self.children = tuple(children)

    def finish_streams(self) -> None:
        for step, line in list(self._held.items()):
            if "nbagent-checking" in line.value:  # held, and never let through (the run stopped)
                self._unhold(step)
        for st in (*self._thinking.values(), *self._streams.values()):
            if not st.finished:
                st.finish()

    def nested(self, agent_call: str, agent: str = "") -> RunLog:
        """The steps of the sub-agent `agent` that the agent call `agent_call` runs, made on first
        use under the call's row (collapsed), or at the end of the log when the row is not shown."""
        log = self._nested.get(agent_call)
        if log is None:
            log = RunLog(interval=self.interval, schedule=self._schedule, decide=self._decide,
                         validate=self._validate, tree=(self.rows, self._nested))
            self._nested[agent_call] = log
            row = self.rows.get(agent_call)
            label = f"steps of {agent or (row.name if row is not None else agent_call)}"
            if row is not None:
                row.attach_steps(log, label)
            else:
                log.children = (widgets.HTML(f'<div style="{FONT};{MUTED};font-size:12px">{escape(label)}</div>'),)
                self.add(log)
        return log

    def add_call(self, call_id: str, name: str, args: Any, group: object) -> None:
        if isinstance(group, tuple):  # a sub-agent's call: in its agent call's steps
            agent_call, step = group
            self.nested(agent_call).add_call(call_id, name, args, step)
            return
        table = self._tables.get(group) if group is not None else None
        if table is None:
            table = ToolTable(schedule=self._schedule, decide=self._decide, validate=self._validate)
            self.add(table)
            if group is not None:
                self._tables[group] = table
        self.rows[call_id] = table.add(call_id, name, args)

    def update_call(self, call_id: str, status: str, result: str | None = None, *,
                    is_error: bool = False, duration_s: float | None = None, message: Any = None) -> None:
        self.rows[call_id].set_status(status, result, is_error=is_error, duration_s=duration_s, message=message)
        self._settle(call_id)

    def _settle(self, call_id: str) -> None:
        for log in (self, *self._nested.values()):
            for table in log._tables.values():
                if call_id in table.rows:
                    table.settle()

    def set_call_args(self, call_id: str, args: Any) -> None:
        self.rows[call_id].args = args

    def show_pending(self, pending: PendingCall, unavailable: str | None = None) -> None:
        self.rows[pending.id].show_pending(pending, unavailable)
        self._settle(pending.id)
        if pending.nested:  # a sub-agent's call: open the steps it waits in, down to it
            for agent_call in self._nested:
                if pending.id.startswith(agent_call + "/") and agent_call in self.rows:
                    self.rows[agent_call].expand()

    def lock_call(self, call_id: str) -> None:
        self.rows[call_id].lock("queued")

    def _stream(self, step: int) -> StreamText:
        st = self._streams.get(step)
        if st is None:
            st = self._streams[step] = StreamText(interval=self.interval)
            self.add(st)
        return st

    def _thinking_for(self, step: int) -> ThinkingText:
        """The step's "Thinking" section, made on first use just above the step's answer."""
        th = self._thinking.get(step)
        if th is None:
            th = self._thinking[step] = ThinkingText(interval=self.interval)
            children = list(self.children)
            answer = self._streams.get(step)
            children.insert(children.index(answer) if answer in children else len(children), th)
            self.children = tuple(children)
        return th


class _Refused:
    """A refused answer's stand-in (``AssistantMessage.blocked``), shown as `show_trip` shows a trip."""

    stage = "output"

    def __init__(self, blocked: str) -> None:
        self.guard, _, self.reason = blocked.partition(": ")
