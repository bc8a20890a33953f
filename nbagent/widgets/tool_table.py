"""The live tool-call table: one row per call, with approval controls on the rows that wait.

Owns `ToolTable`, `ToolRow` and `themed_button`. A row is an HTML widget (tool, arguments, status,
result, duration; built by `_html.tool_row_html`, everything escaped; what a tool returned richly —
a DataFrame's table, images — under it; edited arguments with an "edited" badge) plus, while the
call waits for a person, the buttons ``Approve``, ``Deny`` (reason box + ``Confirm deny``; Enter in
the box confirms), ``Edit`` (JSON text area, the diff of what it changes, and ``Approve edited``,
validated with the tool's schema), ``Always allow <tool>``, or for a client tool its question as
text and a labelled answer box + ``Submit`` (Enter submits). A call whose tool is not registered
in this kernel offers only ``Deny`` (a client call: nothing) and says why. Buttons are tinted with
JupyterLab's theme colours, text in the theme's text colour (``view.css``), so they read in light,
dark and high-contrast themes.

What is approved is what could be read: a waiting call's arguments are shown whole (up to
`nbagent.display.html.WHOLE_CHARS`), invisible characters escaped and flagged; longer ones are
cut, the row says so, and Approve and Always allow stay off until the editor, which holds them
all, has been opened.

While a call runs (or, stopped, still runs in its thread) its time counts up in the browser
(``frame.js``); the row's HTML only carries the seconds elapsed when it was drawn.

An agent call's row (`Agent.as_tool`) holds its sub-agent's steps under it (`ToolRow.attach_steps`:
collapsed, with a toggle); a sub-agent's call that waits is labelled with its path ("researcher →
delete_file") and offers Approve, Deny and Edit (no "Always allow": not the view's thread).

Button handlers may run on a thread other than the kernel loop's (ipykernel subshells), so every
handler only hands its work to the `schedule` callable (``loop.call_soon_threadsafe``) and
returns; reading text boxes, validating and deciding happen on the loop.

Imports ipywidgets, the core's HTML rendering and `_calls`' `WAITING` statuses; the decisions
go to the `ChatController` through `decide`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..display import theme
from ..display.html import (
    ERROR,
    MUTED,
    diff_html,
    pretty_args,
    question_html,
    table_header_html,
    tool_row_html,
    unshown_chars,
)
from ..display.sanitize import escape
from ._calls import TICKING, WAITING

if TYPE_CHECKING:
    from ..events import PendingCall
    from ..messages import ToolResultMessage

__all__ = ["ToolRow", "ToolTable", "themed_button"]

Schedule = Callable[..., None]
"""``schedule(fn, *args)``: run ``fn(*args)`` on the kernel loop (thread-safe)."""
Decide = Callable[[str, str, Any], None]
"""``decide(call_id, action, payload)`` on the loop; action: approve, deny, edit, result, always."""
Validate = Callable[[str, dict[str, Any], Any], Any]
"""``validate(tool name, args, pending)``: raises when edited arguments do not fit the tool (a
sub-agent's call's `pending` names whose tool it is)."""

_HIDDEN = "none"
_NOTICE = (f"{theme.css('border-left', theme.WARN.within('3px solid {}'))};padding:2px 8px;margin:2px 0;"
           f"font-size:12px;{theme.css('color', theme.TEXT)};white-space:pre-wrap")
"""A call's notice (why it cannot be approved here): the theme's text by a warning-coloured rule."""


def themed_button(label: str, style: str = "", tooltip: str = "", **layout: Any) -> widgets.Button:
    """A button; a ``success`` / ``danger`` / ``primary`` one is a tint of JupyterLab's theme
    colour with the theme's own text colour (class ``nbagent-button-<style>``, styled by
    ``view.css``): ipywidgets' own styles put the inverse text colour on the full colour, under
    4.5:1 contrast in JupyterLab Light."""
    button = widgets.Button(description=label, tooltip=tooltip or label,
                            layout=widgets.Layout(width="auto", **layout))
    if style:
        button.add_class(f"nbagent-button-{style}")
    return button


def on_enter(box: widgets.Text, schedule: Schedule, fn: Callable[..., None], *args: Any) -> None:
    """Enter in `box` schedules ``fn(*args)`` on the loop (like a click of the box's button)."""
    def handler(_widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "submit":
            schedule(fn, *args)

    box.on_msg(handler)


_EDIT_OPEN = "an edit is open: use Approve edited, or close Edit to approve the call as shown"
_UNSEEN = "these arguments are longer than the row shows: open Edit to read all of them first"


def unshown_notice(unshown: int) -> str:
    """What a waiting row says when its arguments are too long to show whole (`unshown_chars`)."""
    return (f"These arguments are longer than this row shows: {unshown:,} characters are left out above. "
            "Approve and Always allow stay off until you open Edit, which holds all of them; Deny works now.")


class ToolRow(widgets.VBox):
    """One tool call in the table. `status` is what the row shows; `pending` is the
    `PendingCall` the person sees while it waits (decisions carry exactly that object)."""

    def __init__(self, call_id: str, name: str, args: Any, status: str = "queued", *,
                 schedule: Schedule, decide: Decide, validate: Validate | None = None) -> None:
        self.call_id = call_id
        self.name = name
        self.args = args
        self.status = status
        self.result: str | None = None
        self.is_error = False
        self.duration_s: float | None = None
        self.message: ToolResultMessage | None = None
        """The call's result once it ended (its images, display, edited arguments)."""
        self.edited_args: dict[str, Any] | None = None
        """The arguments a person edited (shown with an "edited" badge), once known."""
        self.pending: PendingCall | None = None
        self._edit_guard: tuple[Any, ...] | None = None  # set by `_approval_controls`
        self.unshown = 0
        """Characters of the waiting call's arguments the row leaves out (`unshown_chars`): until
        the editor, which holds them all, has been opened, Approve and Always allow stay off."""
        self.reviewed = False
        """The editor of a waiting call was opened (the person could read every argument)."""
        self.decided = False
        self._started: float | None = None
        self._schedule = schedule
        self._decide = decide
        self._validate = validate
        # No width: a flex child already fills the row; width 100% plus the widget's 2px margins
        # overflowed the row by 4px (a horizontal scrollbar under every row).
        self.html = widgets.HTML(layout=widgets.Layout(margin="0"))
        self.actions = widgets.VBox(layout=widgets.Layout(display=_HIDDEN, padding="2px 6px 6px 6px"))
        self.buttons: dict[str, widgets.Button] = {}
        self.steps: widgets.Widget | None = None
        """An agent call's sub-agent steps (`attach_steps`), under the row, collapsed at first."""
        self.steps_toggle: widgets.Button | None = None
        super().__init__([self.html, self.actions], layout=widgets.Layout(width="100%"))
        self.add_class("nbagent-tool-row")
        self._render()

    # ------------------------------------------------------------------ display
    def _render(self) -> None:
        waiting = self.status in WAITING
        ticking = self.status in TICKING and self._started is not None
        args = self.pending.args if (waiting and self.pending) else self.args
        extra: dict[str, Any] = {}
        if self.edited_args is not None and not waiting:
            extra["edited_from"], args = args, self.edited_args
        if self.message is not None:
            extra.update(display=self.message.display, images=self.message.images)
        name = self.pending.label if waiting and self.pending is not None else self.name  # "researcher → ..."
        value = tool_row_html(name, args, self.status, self.result, is_error=self.is_error,
                              duration_s=self.duration_s, full_args=waiting,
                              elapsed_s=time.perf_counter() - self._started if ticking else None,  # type: ignore[operator]
                              **extra)
        if self.html.value != value:
            self.html.value = value

    def set_status(self, status: str, result: str | None = None, *, is_error: bool = False,
                   duration_s: float | None = None, message: ToolResultMessage | None = None) -> None:
        """Show a new status (and the result or error when the call ended; `message`: the whole
        result, for what it returned richly and the arguments a person edited)."""
        if message is not None:
            self.message = message
            if message.edited_args is not None:
                self.edited_args = message.edited_args
        if status == "running" or (status in TICKING and self._started is None):
            self._started = time.perf_counter()
        if duration_s is None and self._started is not None and status not in (*TICKING, *WAITING):
            duration_s = time.perf_counter() - self._started
        self.status = status
        if result is not None:
            self.result, self.is_error = result, is_error
        if duration_s is not None:
            self.duration_s = duration_s
        if status not in WAITING:
            self._hide_actions()
        self._render()

    def _hide_actions(self) -> None:
        if self.actions.layout.display != _HIDDEN:
            self.actions.layout.display = _HIDDEN
        for b in self.buttons.values():
            b.disabled = True

    # ------------------------------------------------------------------ waiting for a person
    def show_pending(self, pending: PendingCall, unavailable: str | None = None) -> None:
        """The call waits: show its full arguments and the controls for a decision. With
        `unavailable` (its tool is not registered here) only Deny is offered, and the row says
        why."""
        self.pending = pending
        self.decided = False
        self.status = "needs answer" if pending.reason == "client" else "needs approval"
        self.unshown, self.reviewed = (unshown_chars(pending.args) if pending.reason != "client" else 0), False
        self._render()
        self.buttons = {}
        if pending.reason == "client":
            children = self._answer_controls(pending, unavailable)
        else:
            children = self._approval_controls(pending, unavailable)
        if unavailable:
            children.insert(0, widgets.HTML(
                f'<div class="nbagent-unavailable" style="{_NOTICE}">{escape(unavailable)}</div>'))
        elif self.unshown:
            children.insert(0, widgets.HTML(
                f'<div class="nbagent-unshown" style="{_NOTICE}">{escape(unshown_notice(self.unshown))}</div>'))
        if pending.description and pending.reason != "client":  # a question shows it already
            children.append(widgets.HTML(
                f'<span style="{MUTED};font-size:12px">'
                f"{escape(pending.name)}: {escape(pending.description)}</span>"))
        self.actions.children = tuple(children)
        self.actions.layout.display = "flex"

    def _answer_controls(self, pending: PendingCall, unavailable: str | None) -> list[widgets.Widget]:
        """A client tool's question and its answer box."""
        question = widgets.HTML(question_html(pending.name, pending.args, pending.description),
                                layout=widgets.Layout(margin="0 0 4px 0"))
        box = widgets.Text(placeholder=f"your answer for {pending.name}", continuous_update=True,
                           description="Your answer", style={"description_width": "initial"},
                           layout=widgets.Layout(width="60%"))
        box.add_class("nbagent-answer-box")
        submit = themed_button("Submit", "primary", f"send this answer as the result of {pending.name}")
        submit.on_click(lambda _: self._schedule(self._submit_answer, box))
        on_enter(box, self._schedule, self._submit_answer, box)
        if not unavailable:
            self.buttons["Submit"] = submit
        self.answer_box = box
        return [question] if unavailable else [question, widgets.HBox([box, submit])]

    def _approval_controls(self, pending: PendingCall, unavailable: str | None) -> list[widgets.Widget]:
        """Approve / Deny / Edit / Always allow, the Deny reason box and the argument editor."""
        approve = themed_button("Approve", "success", "run this call with the arguments shown")
        deny = themed_button("Deny", "danger", "answer the model that you denied it")
        edit = themed_button("Edit", "", "change the arguments (a diff shows what changes), then approve")
        always = themed_button(f"Always allow {pending.name}", "",
                               f"approve this and every later {pending.name} call of this thread")
        reason = widgets.Text(placeholder="reason for the model (optional)", continuous_update=True,
                              layout=widgets.Layout(width="60%"))
        confirm = themed_button("Confirm deny", "danger")
        deny_box = widgets.HBox([reason, confirm], layout=widgets.Layout(display=_HIDDEN))
        edit_box = self._edit_controls(pending)
        # (refused here too while blocked: a click may arrive before the browser shows the button disabled)
        approve.on_click(lambda _: None if self._blocked() else self._schedule(self._decide_now, "approve", None))
        always.on_click(lambda _: None if self._blocked() else self._schedule(self._decide_now, "always", None))
        deny.on_click(lambda _: self._schedule(self._toggle, deny_box, edit_box))
        edit.on_click(lambda _: self._schedule(self._toggle, edit_box, deny_box))
        # An open editor whose text differs from the arguments shown: the plain Approve (and
        # Always allow) would run the call as shown, silently dropping the edit. They wait
        # until the edit is approved ("Approve edited") or the editor is closed. Arguments too
        # long to show whole: they wait until the editor (which holds them all) was opened.
        self._edit_guard = (self.edit_area, edit_box, ((approve, approve.tooltip), (always, always.tooltip)),
                            pretty_args(pending.args))
        confirm.on_click(lambda _: self._schedule(self._confirm_deny, reason))
        on_enter(reason, self._schedule, self._confirm_deny, reason)
        self.buttons = {"Deny": deny, "Confirm deny": confirm}
        if not unavailable:
            self.buttons.update({"Approve": approve, "Edit": edit, "Always allow": always,
                                 "Approve edited": edit_box.children[-1]})
        self.deny_reason = reason
        self._guard_edit(force=True)
        bar = [deny] if unavailable else [approve, deny, edit, always]
        if pending.nested:  # a sub-agent's tool: decided call by call (its thread is not the view's)
            self.buttons.pop("Always allow", None)
            bar = [b for b in bar if b is not always]
        return [widgets.HBox(bar), deny_box] + ([] if unavailable else [edit_box])

    def _edit_controls(self, pending: PendingCall) -> widgets.VBox:
        """The argument editor (JSON), the diff of what it changes, its error line and ``Approve
        edited``. Arguments too long to show whole reach the editor when it is first opened."""
        shown = pretty_args(pending.args)
        area = widgets.Textarea(value="" if self.unshown else shown, continuous_update=True,
                                layout=widgets.Layout(width="90%", height="8em"))
        diff = widgets.HTML()
        diff.add_class("nbagent-edit-diff")
        save = themed_button("Approve edited", "success", "validate these arguments and approve")
        error = widgets.HTML()

        def changed(_: Any) -> None:
            diff.value = "" if not area.value or area.value.strip() == shown.strip() else diff_html(
                shown, _normalized(area.value, pending.args, shown))
            self._guard_edit()

        area.observe(changed, "value")
        save.on_click(lambda _: self._schedule(self._save_edit, area, error))
        self.edit_area, self.edit_diff, self.edit_error = area, diff, error
        return widgets.VBox([area, diff, error, save], layout=widgets.Layout(display=_HIDDEN))

    def _toggle(self, show: widgets.Widget, hide: widgets.Widget) -> None:
        hide.layout.display = _HIDDEN
        show.layout.display = _HIDDEN if show.layout.display == "flex" else "flex"
        if show.layout.display == "flex":  # the reason box or the editor takes the typing at once
            if self._edit_guard is not None and show is self._edit_guard[1]:
                self._opened_editor()
            show.children[0].focus()
        self._guard_edit()

    def _opened_editor(self) -> None:
        """The editor is open: arguments too long to show whole are in it now, for the person to read."""
        if self._edit_guard is not None and not self.reviewed:
            self.reviewed = True
            if not self.edit_area.value:
                self.edit_area.value = self._edit_guard[3]

    def _edit_open(self) -> bool:
        """Whether the editor is open and holds arguments other than those shown."""
        if self._edit_guard is None:
            return False
        area, box, _, shown = self._edit_guard
        return bool(box.layout.display == "flex" and area.value.strip() != shown.strip())

    def _blocked(self) -> bool:
        """Whether Approve / Always allow must not act: an open editor holds changed arguments,
        or the arguments are too long to show and the editor was never opened."""
        return self._edit_open() or bool(self.unshown and not self.reviewed)

    def _guard_edit(self, *, force: bool = False) -> None:
        """Approve / Always allow are disabled while an open editor holds changed arguments, and
        while arguments too long to show whole were not read in the editor."""
        if self._edit_guard is None or self.decided or (self.actions.layout.display == _HIDDEN and not force):
            return
        editing, unseen = self._edit_open(), bool(self.unshown and not self.reviewed)
        for button, tooltip in self._edit_guard[2]:
            button.disabled = editing or unseen
            button.tooltip = _EDIT_OPEN if editing else _UNSEEN if unseen else tooltip

    def _decide_now(self, action: str, payload: Any) -> None:
        if self.decided or self.pending is None:
            return
        self._decide(self.call_id, action, payload)

    def _confirm_deny(self, reason_box: widgets.Text) -> None:
        self._decide_now("deny", reason_box.value.strip() or None)

    def _submit_answer(self, box: widgets.Text) -> None:
        self._decide_now("result", box.value)

    def _save_edit(self, area: widgets.Textarea, error: widgets.HTML) -> None:
        try:
            args = json.loads(area.value)
        except ValueError as exc:
            error.value = f'<span style="{ERROR}">not valid JSON: {escape(exc)}</span>'
            return
        if not isinstance(args, dict):
            error.value = f'<span style="{ERROR}">the arguments must be a JSON object {{...}}</span>'
            return
        if self._validate is not None:
            try:
                self._validate(self.name, args, self.pending)
            except Exception as exc:
                error.value = f'<span style="{ERROR}">{escape(exc)}</span>'
                return
        error.value = ""
        if self.pending is not None and args == self.pending.args:
            self._decide_now("approve", None)  # nothing changed: the call as the model asked (and as read)
            return
        if not self.decided and self.pending is not None:
            self.edited_args = args  # shown with its badge while the edited call waits to run
        self._decide_now("edit", args)

    # ------------------------------------------------------------------ a sub-agent's steps
    def attach_steps(self, steps: widgets.Widget, label: str) -> None:
        """Show an agent call's sub-agent steps (`steps`, a run log) under the row: indented,
        collapsed, with a toggle that says whose they are."""
        self.steps = steps
        toggle = widgets.Button(description=f"▸ {label}", tooltip=f"show or hide the steps of {label}",
                                layout=widgets.Layout(width="auto", margin="0 0 2px 0", align_self="flex-start"))
        toggle.add_class("nbagent-steps-toggle")
        toggle.on_click(lambda _: self._schedule(self.expand, not self._expanded()))
        self.steps_toggle = toggle
        steps.layout.display = _HIDDEN
        steps.add_class("nbagent-subrun")  # indented, with a rule down its left (view.css)
        self.children = (*self.children, toggle, steps)  # type: ignore[has-type]

    def _expanded(self) -> bool:
        return self.steps is not None and self.steps.layout.display != _HIDDEN

    def expand(self, show: bool = True) -> None:
        """Show (or hide) the sub-agent steps under the row."""
        if self.steps is None or self.steps_toggle is None or self._expanded() == show:
            return
        self.steps.layout.display = "flex" if show else _HIDDEN
        label = self.steps_toggle.description[2:]
        self.steps_toggle.description = ("▾ " if show else "▸ ") + label

    def lock(self, status: str = "queued") -> None:
        """A decision was made: disable the controls and show `status` until the run reports."""
        self.decided = True
        self.status = status
        self._hide_actions()
        self._render()


def _normalized(text: str, args: Any, shown: str) -> str:
    """The editor's text as `pretty_args` writes it when it is a JSON object, and `shown` when
    it is the same value as `args` (re-indenting or reordering keys is no change); else as typed."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict):
        return text
    return shown if value == args else pretty_args(value)


class ToolTable(widgets.VBox):
    """The tool calls of one model answer: a header and one `ToolRow` per call."""

    def __init__(self, *, schedule: Schedule, decide: Decide, validate: Validate | None = None) -> None:
        self._schedule, self._decide, self._validate = schedule, decide, validate
        self.rows: dict[str, ToolRow] = {}
        super().__init__([widgets.HTML(table_header_html())],
                         layout=widgets.Layout(width="100%", margin="4px 0 8px 0"))
        self.add_class("nbagent-tool-table")

    def add(self, call_id: str, name: str, args: Any, status: str = "queued") -> ToolRow:
        """Add a row (or return the existing one for this call id)."""
        row = self.rows.get(call_id)
        if row is None:
            row = ToolRow(call_id, name, args, status, schedule=self._schedule, decide=self._decide,
                          validate=self._validate)
            self.rows[call_id] = row
            self.children = (*self.children, row)  # type: ignore[has-type]
        return row

    def settle(self) -> None:
        """Rows read in the order the calls ran: a call that ended while a call above it waits
        for a person moves above the waiting ones (a read-only call that ran while another
        waited for approval no longer sits below that call's later result)."""
        children = list(self.children)
        rows = [c for c in children if isinstance(c, ToolRow)]
        first = next((i for i, r in enumerate(rows) if r.status in WAITING), None)
        if first is None:
            return
        ended = [r for r in rows[first:] if r.status not in (*WAITING, *TICKING, "queued")]
        if not ended:
            return
        rest = [r for r in rows[first:] if r not in ended]
        self.children = (*children[:len(children) - len(rows)], *rows[:first], *ended, *rest)
