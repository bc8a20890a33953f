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
    header_html,
    messages_html,
)
from ..display.sanitize import escape
from ..messages import Prompt, UserMessage
from ._allowed import AllowedTools
from ._attach import Attachments, kernel_namespace
from ._calls import validate_args
from ._controller import ChatController
from ._run_log import RunLog, bubble_html
from ._tally import UsageTally, footer_html
from ._transcript import SavedCopy
from .frame import ViewFrame
from .tool_table import on_enter, themed_button

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..agent import Agent, RunHandle
    from ..messages import Message
    from ..result import RunResult

__all__ = ["ChatView", "RunLog"]


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
            return old or widgets.HTML(bubble_html(message, note="queued"))

        self._queued = [(m, bubble(m)) for m in messages]
        self._queue_box.children = tuple(b for _, b in self._queued)
        display = "" if messages else "none"
        if self._buttons["Clear queue"].layout.display != display:
            self._buttons["Clear queue"].layout.display = display

    def show_sent(self, message: UserMessage) -> None:
        bubble = next((b for m, b in self._queued if m is message), None)  # a queued bubble moves
        if bubble is None:
            bubble = widgets.HTML(bubble_html(message))
        else:
            self._queued = [(m, b) for m, b in self._queued if b is not bubble]
            bubble.value = bubble_html(message)
        self._sent[id(message)] = bubble
        self._log.add(bubble)


def _summary_cap(model: Any) -> int:
    """Tokens one attached variable's summary may take (as for ``{var}`` in ``%%agent``)."""
    from ..notebook import cap_for

    return cap_for(model)
