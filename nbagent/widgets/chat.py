"""`ChatView`: the in-cell agent view (``agent.chat(thread=...)``), its widgets and their layout.

Owns the widgets and what they show. The conversation so far (from the store), then per run: the
model's reasoning (`ThinkingText`, a collapsed "Thinking" section above the step's answer), the
streaming answer (`StreamText`), a live tool table per answer with tool calls (`ToolTable`), the
queued messages, a status line, the thread's always-allowed tools (each with a ✕ that revokes
it, `AllowedTools`), a footer with the run's tokens and cost, and at the bottom
``Stop``, ``Approve all`` / ``Deny all`` (with a reason box), ``Clear queue`` and the message box
with ``Send`` (the last text box of the view).

What the view does lives in `ChatController` (``view.controller``, in `_controller`): runs,
decisions (`_calls`), the message queue (`_queue`), the reaction to run events. The view wires its
buttons and text boxes to the controller and draws what the controller reports: `ChatView` is the
controller's `ChatLayout`, and `RunLog` (``view.run_log``: the runs as they happen) its
`RunLayout`.

How it stays responsive (a cell cannot wait for a button click in ipykernel): a run is `Agent.start`, a background
task on the kernel's loop, so the cell returns at once. Button and text-box handlers may run on
another thread (ipykernel subshells), so they only hand work to the loop captured when the view was
made (`ChatController.schedule`, ``loop.call_soon_threadsafe``) and return.

A view registers a settle hook (`nbagent._settle`): `nbagent.notebook.settle`, the last cell of a
notebook run headless, waits until the view shows its thread as stored and sends its saved copy
again from that cell.

Imports ipywidgets, the core's HTML rendering, message shapes and settle registry, and the
sibling widget modules.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._settle import on_settle
from ..display.html import (
    ERROR,
    FONT,
    MUTED,
    NO_MATH,
    assistant_html,
    blocked_html,
    compaction_html,
    header_html,
    messages_html,
    provider_calls,
    replayed_badge,
    user_html,
)
from ..display.sanitize import escape
from ..messages import Prompt, UserMessage
from ._allowed import AllowedTools
from ._attach import Attachments, kernel_namespace
from ._calls import validate_args
from ._controller import ChatController
from ._tally import UsageTally, footer_html
from ._transcript import SavedCopy
from .frame import ViewFrame
from .stream import StreamText, ThinkingText
from .tool_table import Decide, Schedule, ToolRow, ToolTable, Validate, on_enter, themed_button

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..agent import Agent, RunHandle
    from ..approvals import PendingCall
    from ..messages import AssistantMessage, Message
    from ..result import RunResult

__all__ = ["ChatView", "RunLog"]


def _bubble(message: UserMessage, note: str | None = None) -> str:
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


class ChatView(widgets.VBox):
    """Chat with an agent in a notebook cell; watch and steer its runs.

    ```python
    agent.chat(thread="support-42")        # or ChatView(agent, thread="support-42")
    ```

    Args:
        agent: the `Agent`.
        thread: the conversation to show and continue (default: a new thread).
        interval: seconds between streaming updates of the answer and reasoning text (0.05 = 20
            per second).

    Reasoning: a model's reasoning (``reasoning-delta`` events, `AssistantMessage.reasoning`) is
    shown above that step's answer in a "Thinking" section, collapsed until opened, streaming while
    the model thinks, as plain text (never HTML). A retried model call clears it with the partial
    answer.

    Variables as context: typing ``@`` in the message box offers the kernel's variables (names,
    types and shapes; `namespace` replaces the kernel's), and each ``@name`` of the message that
    names a variable attaches it, shown as a chip above the box. What is sent is the variable's
    capped summary (a DataFrame's shape, dtypes, ``head(5)``, ``describe()`` and null counts, else
    its ``repr``), edited by ``Agent(context_redact=...)``; clicking a chip shows that exact text.
    The summaries are added to the end of the message, so the thread keeps what the model saw
    (see `nbagent.widgets._attach.Attachments`, ``view.attachments``).

    Sending while busy: ``Send`` (or Enter) always takes the message. When nothing is going on it
    starts a run at once; otherwise it is queued, shown below the log as "you · queued", and the
    box clears. The queue's rules:

    - Each queued message is sent as its own run, in the order sent, when the run before it ends
      (completed, or stopped by a limit such as ``max_steps`` or a budget).
    - If a run ends paused with calls waiting for a decision (or a message is sent while they
      wait), the queue waits until every waiting call is decided and the resume has run; the
      status line says so.
    - ``Stop`` cancels the run and keeps the queue on hold: nothing more is sent by itself.
    - A failed run also keeps the queue on hold, and the status line says how many messages wait.
    - On hold, ``Send`` (with or without new text; new text joins the end of the queue) sends the
      queue again from its first message; ``Clear queue`` drops the queued messages (the status
      line says how many were dropped).
    - Decisions on waiting calls always go before queued messages.

    Attributes:
        thread: the thread id.
        handle: the `RunHandle` of the run going on, or None.
        result: the `RunResult` of the last run that ended in this view.
        rows: tool-call rows by call id.
        controller: the `ChatController` that runs, decides and queues for this view.
        buttons: the view's own buttons by label: ``Send``, ``Stop``, ``Approve all``,
            ``Deny all``, ``Confirm deny all``, ``Cancel`` (of Deny all) and ``Clear queue``
            (the rows' buttons are on `rows`).
        header: the identity line at the top: the agent's name (``Agent(name=...)``), its model
            and the thread id, so two views of one notebook can be told apart.
        attachments: the ``@`` completion and chips of the message box (`Attachments`).
        always_allowed: the thread's always-allowed tools, each with a ✕ that revokes it
            (`AllowedTools`: ``buttons`` by tool name).
        message_box: the message box (Enter sends); deny_all_reason and deny_all_box: the reason
            box of ``Deny all`` and the line that holds it; history: the stored conversation;
            run_log: this view's runs (messages, reasoning, answers, tool tables); queue_box:
            the queued messages; status_line; footer: tokens, cost and budget.
    """

    def __init__(self, agent: Agent, thread: str | None = None, *, interval: float = 0.05,
                 namespace: Mapping[str, Any] | None = None) -> None:
        self.agent = agent
        self.interval = interval
        # The rows' clicks go to the controller, looked up when they happen (it is made below:
        # it shows its runs in this log).
        self._log = RunLog(interval=interval, schedule=lambda fn, *args: self.controller.schedule(fn, *args),
                           decide=lambda call_id, action, payload: self.controller.decide(call_id, action, payload),
                           validate=lambda name, args, pending: validate_args(self.agent.tools, name, args, pending))
        self._queued: list[tuple[UserMessage, widgets.HTML]] = []
        """The queued messages and their bubbles, oldest first."""
        self._history = widgets.HTML()
        self._header = widgets.HTML(layout=widgets.Layout(margin="0"))
        self._queue_box = widgets.VBox(layout=widgets.Layout(width="100%"))
        self._queue_box.add_class("nbagent-queue")
        self._status = widgets.HTML()
        self._footer = widgets.HTML()
        self._buttons = MappingProxyType(self._make_buttons())
        self.attachments = Attachments(self._input,
                                       namespace=lambda: kernel_namespace() if namespace is None else namespace,
                                       cap=lambda: _summary_cap(self.agent.model),
                                       redact=lambda: getattr(self.agent, "context_redact", None))
        self._sent: dict[int, widgets.HTML] = {}
        """The bubbles of the messages sent, by message (id)."""
        self._allowed = AllowedTools(lambda fn, *args: self.controller.schedule(fn, *args),
                                     lambda tool: self.controller.revoke(tool))
        self.controller = ChatController(agent, thread or "thread_" + uuid.uuid4().hex[:16], self)
        self._frame = ViewFrame(self.controller.thread)
        self._copy = SavedCopy(self.controller.thread)
        self._header.value = header_html(self.controller.thread, agent.model, getattr(agent, "name", None))
        self._wire()
        b = self._buttons
        super().__init__(
            [
                self._frame,
                self._header,
                self._history,
                self._log,
                self._queue_box,
                self._status,
                self._allowed,
                self._footer,
                widgets.HBox([b["Stop"], b["Approve all"], b["Deny all"], b["Clear queue"]]),
                self._deny_all_box,
                self.attachments.widget,
                widgets.HBox([self._input, b["Send"]], layout=widgets.Layout(width="100%")),
            ],
            layout=widgets.Layout(width="100%", max_width="1000px"),
        )
        self.add_class("nbagent-chat")
        self.add_class(NO_MATH)  # JupyterLab would typeset "$5 and $10" in an answer as math
        self.controller.load()
        self._unsettle = on_settle(self._settled)

    def _make_buttons(self) -> dict[str, widgets.Button]:
        """The view's buttons by label, and the two text boxes (message, Deny all's reason)."""
        stop = themed_button("Stop", "danger", "cancel the run", display="none")
        approve_all = themed_button("Approve all", "success", display="none")
        deny_all = themed_button("Deny all", "danger", "deny every waiting call (asks for a reason)",
                                 display="none")
        self._deny_all_reason = widgets.Text(placeholder="reason for the model, for every call (optional)",
                                             continuous_update=True, layout=widgets.Layout(width="60%"))
        confirm = themed_button("Confirm deny all", "danger", "deny every waiting call with this reason")
        cancel = widgets.Button(description="Cancel", tooltip="keep the calls waiting",
                                layout=widgets.Layout(width="auto"))
        self._deny_all_box = widgets.HBox([self._deny_all_reason, confirm, cancel],
                                          layout=widgets.Layout(display="none"))
        clear = widgets.Button(description="Clear queue", tooltip="drop the queued messages (not sent)",
                               layout=widgets.Layout(width="auto", display="none"))
        # A Combobox is a text box whose completions the browser offers: "@" completes variables.
        self._input = widgets.Combobox(placeholder="Message the agent (Enter sends; @ attaches a variable)",
                                       continuous_update=True, ensure_option=False,
                                       layout=widgets.Layout(flex="1 1 auto", width="auto"))
        send = themed_button("Send", "primary")
        return {b.description: b for b in (send, stop, approve_all, deny_all, confirm, cancel, clear)}

    def _wire(self) -> None:
        """Hand each click and Enter to the controller's loop (handlers do no work themselves)."""
        schedule = self.controller.schedule
        b = self._buttons
        b["Stop"].on_click(lambda _: schedule(self.stop))
        b["Approve all"].on_click(lambda _: schedule(self._on_approve_all))
        b["Deny all"].on_click(lambda _: schedule(self._toggle_deny_all))
        b["Confirm deny all"].on_click(lambda _: schedule(self._confirm_deny_all))
        b["Cancel"].on_click(lambda _: schedule(self._show_deny_all, False))
        b["Clear queue"].on_click(lambda _: schedule(self.clear_queue))
        b["Send"].on_click(lambda _: schedule(self._submit))
        self._input.on_msg(self._on_input_msg)
        on_enter(self._deny_all_reason, schedule, self._confirm_deny_all)  # Enter confirms Deny all

    # ------------------------------------------------------------------ public names (read-only)
    thread = property(lambda self: self.controller.thread, doc="The thread id.")
    handle = property(lambda self: self.controller.handle, doc="The `RunHandle` of the run going on, or None.")
    result = property(lambda self: self.controller.result,
                      doc="The `RunResult` of the last run that ended in this view.")
    rows = property(lambda self: self._log.rows, doc="The tool-call rows (`ToolRow`) by call id.")
    buttons = property(lambda self: self._buttons, doc="The view's own buttons by label.")
    message_box = property(lambda self: self._input, doc="The message box (Enter sends).")
    status_line = property(lambda self: self._status, doc="The status line (HTML).")
    footer = property(lambda self: self._footer, doc="Tokens, cost and budget (HTML).")
    history = property(lambda self: self._history, doc="The stored conversation (HTML).")
    header = property(lambda self: self._header,
                      doc="The view's identity line: agent name, model and thread id (HTML).")
    run_log = property(lambda self: self._log, doc="This view's runs as they happen (`RunLog`).")
    queue_box = property(lambda self: self._queue_box, doc="The queued messages' bubbles, oldest first.")
    deny_all_box = property(lambda self: self._deny_all_box, doc="The reason line of Deny all.")
    deny_all_reason = property(lambda self: self._deny_all_reason, doc="The reason box of Deny all.")
    always_allowed = property(lambda self: self._allowed,
                              doc="The thread's always-allowed tools, each with a ✕ that revokes it (`AllowedTools`).")

    # ------------------------------------------------------------------ in the notebook file
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data = super()._repr_mimebundle_(**kwargs)
        if data is not None:  # where no widget can run, the text says what this was
            data["text/plain"] = f"nbagent chat view of thread {self.thread!r} (live in Jupyter; copy below)"
        return data

    def _ipython_display_(self) -> None:
        """Display the live view, and under it a copy of the conversation for the saved notebook
        (hidden while the view is on the page; kept current as runs end)."""
        live = self._repr_mimebundle_() if callable(self._repr_mimebundle_) else None  # None once closed
        self._copy.display(live or {"text/plain": repr(self)})

    def saved_copy(self) -> dict[str, Any]:
        """The conversation as stored, as inert HTML and plain text: what a saved notebook shows
        where the view cannot run (GitHub, nbviewer, a closed kernel)."""
        return self._copy.bundle()

    async def _settled(self) -> None:
        """`nbagent.notebook.settle`'s hook: once the runs have ended, wait until the view shows
        its thread as stored, then send the saved copy again, from the cell that settles (a
        headless executor missed the updates sent while other cells ran)."""
        if await self.controller.settle():
            self._copy.send_again()

    def close(self) -> None:
        """Close the view's widget (its parts stay) and stop following its thread."""
        self.controller.follower.close()
        self._unsettle()
        super().close()

    @property
    def queued_messages(self) -> list[str]:
        """The messages waiting to be sent, oldest first."""
        return self.controller.queue.texts

    # ------------------------------------------------------------------ what the person does
    def ask(self, prompt: Prompt) -> RunHandle | None:
        """Send a message as if typed in the box and Send pressed (must be called on the view's
        loop). `prompt` may also be a list of text and images (``view.ask(["What is this?", fig])``,
        see `nbagent.Image`): the message box takes text only. Returns the `RunHandle` of the run
        this started, or None when the message was queued (see the class docstring for the
        queue's rules).

        Raises:
            InvalidPromptError: the prompt is neither text nor images (nothing is sent or queued).
        """
        if isinstance(prompt, str):
            self._input.value = prompt
            return self.handle if self._submit() else None
        return self.controller.ask(prompt)

    def stop(self) -> None:
        """Cancel the run going on (the ``Stop`` button); queued messages stay, on hold."""
        self.controller.stop()

    def clear_queue(self) -> list[str]:
        """Drop the queued messages without sending them (the ``Clear queue`` button); returns
        their texts. The status line says how many were dropped."""
        return self.controller.clear_queue()

    async def wait_loaded(self) -> None:
        """Wait until the stored conversation is shown (tests; the notebook never needs to)."""
        await self.controller.wait_loaded()

    async def wait(self) -> RunResult | None:
        """Wait until no run is going on and nothing queued will start one by itself (decisions,
        and queued messages unless they wait for a decision or are on hold); returns the last
        result."""
        return await self.controller.wait()

    def _on_input_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "submit":  # Enter in the message box
            self.controller.schedule(self._submit)

    def _submit(self) -> bool:
        """Send or queue the text of the message box; on hold, also send the queue again.
        Returns True when a run was started."""
        text = self._input.value.strip()
        if not text and not self.controller.queue:
            return False
        if self.controller.after_load(self._submit):
            return False
        if not text:
            return self.controller.send()  # Send releases a queue on hold
        message = self.attachments.message(text) if self.attachments.attached else text
        self._input.value = ""
        try:
            started = self.controller.send(UserMessage(message))
        except Exception:  # not sent: the text goes back into the box
            self._input.value = self._input.value or text
            raise
        self.attachments.clear()
        return started

    def _on_approve_all(self) -> None:
        self._show_deny_all(False)
        self.controller.decide_all("approve")

    def _show_deny_all(self, show: bool) -> None:
        display = "flex" if show else "none"
        if self._deny_all_box.layout.display != display:
            self._deny_all_box.layout.display = display
            if show:  # the reason box takes the typing at once
                self._deny_all_reason.focus()

    def _toggle_deny_all(self) -> None:
        """``Deny all``: show (or hide again) the reason box with ``Confirm deny all``."""
        self._show_deny_all(self._deny_all_box.layout.display != "flex")

    def _confirm_deny_all(self) -> None:
        """``Confirm deny all``: deny every waiting approval with the reason typed (may be empty)."""
        reason = self._deny_all_reason.value.strip() or None
        self._show_deny_all(False)
        self._deny_all_reason.value = ""
        self.controller.decide_all("deny", reason)

    # ------------------------------------------------------------------ ChatLayout: what the controller shows
    def show_history(self, messages: Sequence[Message], skip_call_ids: Sequence[str], *,
                     replayed: Sequence[int] = (), subruns: Mapping[str, Any] | None = None) -> None:
        self._history.value = messages_html(messages, skip_call_ids=skip_call_ids, replayed=replayed,
                                            subruns=subruns)

    def show_usage(self, tally: UsageTally, *, token_budget: int | None = None,
                   cost_budget: float | None = None) -> None:
        html = footer_html(tally, token_budget=token_budget, cost_budget=cost_budget)
        if self._footer.value != html:
            self._footer.value = html

    def show_conversation(self, messages: Sequence[Message], subruns: Mapping[str, Any] | None = None) -> None:
        self._copy.update(messages, subruns)  # the saved notebook's copy follows

    def unsend(self, message: UserMessage) -> None:
        bubble = self._sent.pop(id(message), None)
        if bubble is not None:
            self._log.children = tuple(c for c in self._log.children if c is not bubble)

    def show_status(self, text: str, error: bool, note: str) -> None:
        colour = ERROR if error else MUTED
        out = f'<div style="{FONT};{colour};white-space:pre-wrap">{escape(text)}</div>' if text else ""
        if note:
            out += f'<div class="nbagent-queue-note" style="{FONT};{MUTED};white-space:pre-wrap">{escape(note)}</div>'
        if self._status.value != out:
            self._status.value = out

    def show_running(self, running: bool) -> None:
        self._buttons["Stop"].layout.display = "" if running else "none"
        self._allowed.running(running)

    def show_always_allowed(self, tools: Sequence[str]) -> None:
        self._allowed.show(tools)

    def show_bulk(self, show: bool) -> None:
        display = "" if show else "none"
        if self._buttons["Approve all"].layout.display != display:
            self._buttons["Approve all"].layout.display = display
            self._buttons["Deny all"].layout.display = display
        if not show:
            self._show_deny_all(False)

    def show_queue(self, messages: Sequence[UserMessage]) -> None:
        def bubble(message: UserMessage) -> widgets.HTML:
            old = next((b for m, b in self._queued if m is message), None)
            return old or widgets.HTML(_bubble(message, note="queued"))

        self._queued = [(m, bubble(m)) for m in messages]
        self._queue_box.children = tuple(b for _, b in self._queued)
        display = "" if messages else "none"
        if self._buttons["Clear queue"].layout.display != display:
            self._buttons["Clear queue"].layout.display = display

    def show_sent(self, message: UserMessage) -> None:
        bubble = next((b for m, b in self._queued if m is message), None)  # a queued bubble moves
        if bubble is None:
            bubble = widgets.HTML(_bubble(message))
        else:
            self._queued = [(m, b) for m, b in self._queued if b is not bubble]
            bubble.value = _bubble(message)
        self._sent[id(message)] = bubble
        self._log.add(bubble)


class _Refused:
    """A refused answer's stand-in (``AssistantMessage.blocked``), shown as `show_trip` shows a trip."""

    stage = "output"

    def __init__(self, blocked: str) -> None:
        self.guard, _, self.reason = blocked.partition(": ")


def _summary_cap(model: Any) -> int:
    """Tokens one attached variable's summary may take (as for ``{var}`` in ``%%agent``)."""
    from ..notebook import cap_for

    return cap_for(model)
