"""`ChatView`: the in-cell agent view (``agent.chat(thread=...)``).

Owns the view's layout and its reaction to run events. The conversation so far (from the store),
then per run: the model's reasoning (`ThinkingText`, a collapsed "Thinking" section above the
step's answer), the streaming answer (`StreamText`), a live tool table per answer with tool calls
(`ToolTable`), the queued messages, a status line, a footer with the run's tokens and cost, and at
the bottom ``Stop``, ``Approve all`` / ``Deny all`` (with a reason box), ``Clear queue`` and the
message box with ``Send`` (the last text box of the view).

How it stays responsive (a cell cannot wait for a button click in ipykernel): a run is `Agent.start`, a background
task on the kernel's loop, so the cell returns at once. Button and text-box handlers may run on
another thread (ipykernel subshells), so they only hand work to the loop captured when the view was
made (``loop.call_soon_threadsafe``) and return. Every decision starts a background resume; a
decision made while a run is still going is queued and sent when it ends. A paused thread needs
no live run: the pending calls come from the thread's stored `ThreadMeta`, so the buttons work
after a kernel restart.

Messages sent while the view is busy are queued, never refused (see `ChatView` for the rules).

Imports ipywidgets, the core's public shapes and the sibling widget modules.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._html import FONT, MUTED, assistant_html, messages_html, usage_html, user_html
from .._sanitize import escape
from ..approvals import Decisions, PendingCall
from ..messages import Prompt, UserMessage, user_message
from ..result import RunResult
from ..usage import Usage
from .stream import StreamText, ThinkingText
from .tool_table import WAITING, ToolRow, ToolTable

if TYPE_CHECKING:
    from ..agent import Agent, RunHandle

__all__ = ["ChatView"]

_ENDED = ("run-completed", "run-paused", "run-stopped", "run-failed", "run-cancelled")


def _bubble(message: UserMessage, note: str | None = None) -> str:
    return user_html(message.content, note, message.images)


def _person() -> str | None:
    """Who clicked: the user running the kernel (recorded with each decision)."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return None


def _current_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
    """

    def __init__(self, agent: Agent, thread: str | None = None, *, interval: float = 0.05) -> None:
        self.agent = agent
        self.thread = thread or "thread_" + uuid.uuid4().hex[:16]
        self.interval = interval
        self._loop = _current_loop()
        self.handle: RunHandle | None = None
        self.result: RunResult | None = None
        self.rows: dict[str, ToolRow] = {}
        self._streams: dict[int, StreamText] = {}
        self._thinking: dict[int, ThinkingText] = {}
        self._tables: dict[int, ToolTable] = {}
        self._shown: dict[str, PendingCall] = {}
        """The pending calls as the person saw them (decisions carry these objects)."""
        self._queued: dict[str, tuple[str, Any, PendingCall]] = {}
        self._always: set[str] = set()
        self._state: Any = None
        self._outbox: list[tuple[UserMessage, widgets.HTML]] = []
        """Messages sent while busy (the message, its "queued" bubble), oldest first."""
        self._hold = False
        """The queue is on hold (after Stop or a failed run) until the person presses Send."""
        self._status_msg: tuple[str, bool] = ("", False)
        self._reload_task: asyncio.Future[None] | None = None

        self._history = widgets.HTML()
        self._log = widgets.VBox(layout=widgets.Layout(width="100%"))
        self._queue_box = widgets.VBox(layout=widgets.Layout(width="100%"))
        self._queue_box.add_class("nbagent-queue")
        self._status = widgets.HTML()
        self._footer = widgets.HTML()
        self._stop = widgets.Button(description="Stop", button_style="danger", tooltip="cancel the run",
                                    layout=widgets.Layout(width="auto", display="none"))
        self._approve_all = widgets.Button(description="Approve all", button_style="success",
                                           layout=widgets.Layout(width="auto", display="none"))
        self._deny_all = widgets.Button(description="Deny all", button_style="danger",
                                        tooltip="deny every waiting call (asks for a reason)",
                                        layout=widgets.Layout(width="auto", display="none"))
        self._deny_all_reason = widgets.Text(placeholder="reason for the model, for every call (optional)",
                                             continuous_update=True, layout=widgets.Layout(width="60%"))
        self._deny_all_confirm = widgets.Button(description="Confirm deny all", button_style="danger",
                                                tooltip="deny every waiting call with this reason",
                                                layout=widgets.Layout(width="auto"))
        self._deny_all_cancel = widgets.Button(description="Cancel", tooltip="keep the calls waiting",
                                               layout=widgets.Layout(width="auto"))
        self._deny_all_box = widgets.HBox([self._deny_all_reason, self._deny_all_confirm, self._deny_all_cancel],
                                          layout=widgets.Layout(display="none"))
        self._clear_queue = widgets.Button(description="Clear queue", tooltip="drop the queued messages (not sent)",
                                           layout=widgets.Layout(width="auto", display="none"))
        self._input = widgets.Text(placeholder="Message the agent (Enter sends)", continuous_update=True,
                                   layout=widgets.Layout(flex="1 1 auto", width="auto"))
        self._send_button = widgets.Button(description="Send", button_style="primary",
                                           layout=widgets.Layout(width="auto"))
        self._stop.on_click(lambda _: self._call(self.stop))
        self._approve_all.on_click(lambda _: self._call(self._decide_all, "approve"))
        self._deny_all.on_click(lambda _: self._call(self._toggle_deny_all))
        self._deny_all_confirm.on_click(lambda _: self._call(self._confirm_deny_all))
        self._deny_all_cancel.on_click(lambda _: self._call(self._show_deny_all, False))
        self._clear_queue.on_click(lambda _: self._call(self.clear_queue))
        self._send_button.on_click(lambda _: self._call(self._submit))
        self._input.on_msg(self._on_input_msg)
        super().__init__(
            [
                self._history,
                self._log,
                self._queue_box,
                self._status,
                self._footer,
                widgets.HBox([self._stop, self._approve_all, self._deny_all, self._clear_queue]),
                self._deny_all_box,
                widgets.HBox([self._input, self._send_button], layout=widgets.Layout(width="100%")),
            ],
            layout=widgets.Layout(width="100%", max_width="1000px"),
        )
        self.add_class("nbagent-chat")
        self._load_task: asyncio.Future[None] | None = None
        if self._loop is not None:
            self._load_task = self._loop.create_task(self._load())
        else:  # a script with no loop: load synchronously (the view cannot run anything then)
            from .._sync import run_sync

            run_sync(self._load)

    # ------------------------------------------------------------------ threading
    def _call(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the view's loop; safe from any thread (handlers call this)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._guarded(fn, args)
            return
        loop.call_soon_threadsafe(self._guarded, fn, args)

    def _guarded(self, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception as exc:  # a handler's error shows in the view instead of vanishing
            self._say(f"{type(exc).__name__}: {exc}", error=True)

    def _on_input_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "submit":  # Enter in the message box
            self._call(self._submit)

    async def wait_loaded(self) -> None:
        """Wait until the stored conversation is shown (tests; the notebook never needs to)."""
        if self._load_task is not None:
            await self._load_task

    async def wait(self) -> RunResult | None:
        """Wait until no run is going on and nothing queued will start one by itself (decisions,
        and queued messages unless they wait for a decision or are on hold); returns the last
        result."""
        await self.wait_loaded()
        while True:
            handle = self.handle
            if handle is not None:
                try:
                    await asyncio.shield(handle.task)
                except BaseException:
                    pass
            elif self._queued or (self._reload_task is not None and not self._reload_task.done()):
                pass
            elif self._outbox and not self._hold and not self._undecided():
                if not self._send_next():  # cannot start (no loop): nothing will change by itself
                    break
            else:
                break
            await asyncio.sleep(0)
        return self.result

    @property
    def queued_messages(self) -> list[str]:
        """The messages waiting to be sent, oldest first."""
        return [message.content for message, _ in self._outbox]

    # ------------------------------------------------------------------ loading a thread
    async def _load(self) -> None:
        try:
            loaded = await self.agent.store.load(self.thread)
        except Exception as exc:
            self._say(f"could not load thread {self.thread!r}: {type(exc).__name__}: {exc}", error=True)
            return
        if loaded is None:
            return
        meta = loaded.meta
        pending = loaded.open_pending()
        self._history.value = messages_html(loaded.messages, skip_call_ids=[p.id for p in pending])
        self._always = set(meta.always_allowed)
        self._footer.value = usage_html(Usage.of(loaded.usage), label="thread so far")
        if pending:
            table = self._new_table()
            for p in pending:
                row = table.add(p.id, p.name, p.args)
                self.rows[p.id] = row
                self._show_pending(p)
            self._say(self._waiting_text())
        elif meta.status == "failed" and meta.error:
            self._say(f"the last run failed: {meta.error}", error=True)

    # ------------------------------------------------------------------ status lines
    def _say(self, text: str, *, error: bool = False) -> None:
        self._status_msg = (text, error)
        self._render_status()

    def _render_status(self) -> None:
        text, error = self._status_msg
        colour = "#c62828" if error else "var(--jp-ui-font-color2,#666)"
        out = f'<div style="{FONT};color:{colour};white-space:pre-wrap">{escape(text)}</div>' if text else ""
        note = self._queue_note()
        if note:
            out += f'<div class="nbagent-queue-note" style="{FONT};{MUTED};white-space:pre-wrap">{escape(note)}</div>'
        if self._status.value != out:
            self._status.value = out

    def _queue_note(self) -> str:
        n = len(self._outbox)
        if not n:
            return ""
        what = f"{n} message{'s' if n != 1 else ''} queued"
        each = " (one run each)" if n != 1 else ""
        if self._hold:
            it = "them" if n != 1 else "it"
            return f"{what}, on hold: Send sends {it}{each}, Clear queue drops {it}"
        if self.handle is not None:
            return f"{what}: sent when this run ends{each}"
        if self._undecided():
            return f"{what}: sent after you decide the waiting tool calls"
        return what

    def _undecided(self) -> bool:
        return any(r.status in WAITING and not r.decided for r in self.rows.values())

    def _waiting_text(self) -> str:
        n = sum(1 for row in self.rows.values() if row.status in WAITING and not row.decided)
        return f"waiting for you: {n} tool call{'s' if n != 1 else ''}" if n else ""

    def _set_running(self, running: bool) -> None:
        self._stop.layout.display = "" if running else "none"

    def _bulk_rows(self) -> list[ToolRow]:
        return [r for r in self.rows.values()
                if r.status == "needs approval" and not r.decided and r.pending is not None]

    def _update_bulk(self) -> None:
        show = "" if len(self._bulk_rows()) >= 2 else "none"
        if self._approve_all.layout.display != show:
            self._approve_all.layout.display = show
            self._deny_all.layout.display = show
        if show == "none":
            self._show_deny_all(False)

    def _show_deny_all(self, show: bool) -> None:
        display = "flex" if show else "none"
        if self._deny_all_box.layout.display != display:
            self._deny_all_box.layout.display = display

    def _toggle_deny_all(self) -> None:
        """``Deny all``: show (or hide again) the reason box with ``Confirm deny all``."""
        self._show_deny_all(self._deny_all_box.layout.display != "flex")

    def _confirm_deny_all(self) -> None:
        """``Confirm deny all``: deny every waiting approval with the reason typed (may be empty)."""
        reason = self._deny_all_reason.value.strip() or None
        self._show_deny_all(False)
        self._deny_all_reason.value = ""
        self._decide_all("deny", reason)

    def _update_queue_controls(self) -> None:
        display = "" if self._outbox else "none"
        if self._clear_queue.layout.display != display:
            self._clear_queue.layout.display = display

    # ------------------------------------------------------------------ sending
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
        message = user_message(prompt)  # checked now, in the caller's cell
        if self._load_task is not None and not self._load_task.done():
            self._load_task.add_done_callback(lambda _: self._send_message(message))
            return None
        return self.handle if self._send_message(message) else None

    def _busy(self) -> bool:
        """A new message cannot start a run now: a run is going on, or calls wait for a decision."""
        return self.handle is not None or bool(self._queued) or self._undecided()

    def _submit(self) -> bool:
        """Send or queue the text of the message box; on hold, also send the queue again.
        Returns True when a run was started."""
        text = self._input.value.strip()
        if not text and not self._outbox:
            return False
        if self._load_task is not None and not self._load_task.done():
            self._load_task.add_done_callback(lambda _: self._submit())
            return False
        if text:
            self._input.value = ""
            try:
                return self._send_message(UserMessage(text))
            except Exception:  # not sent: the text goes back into the box
                self._input.value = self._input.value or text
                raise
        self._hold = False  # Send releases a queue on hold
        return self._send_next()

    def _send_message(self, message: UserMessage) -> bool:
        """Start a run with `message`, or queue it when the view is busy or others wait before it.
        Returns True when a run was started."""
        if self._outbox or self._busy():
            self._enqueue(message)
            self._hold = False  # sending releases a queue on hold (it goes on from its first message)
            return self._send_next()
        self._hold = False
        bubble = widgets.HTML(_bubble(message))
        self._log.children = (*self._log.children, bubble)
        try:
            self._start(prompt=message)
        except Exception:
            self._log.children = tuple(w for w in self._log.children if w is not bubble)
            raise
        return True

    def _enqueue(self, message: UserMessage) -> None:
        bubble = widgets.HTML(_bubble(message, note="queued"))
        self._outbox.append((message, bubble))
        self._queue_box.children = (*self._queue_box.children, bubble)
        self._update_queue_controls()
        self._render_status()

    def _send_next(self) -> bool:
        """Start a run with the oldest queued message if nothing stands in the way; else only
        refresh the status line. Returns True when a run was started."""
        if not self._outbox or self._hold or self._busy() or self._loop is None:
            self._render_status()
            return False
        message, bubble = self._outbox.pop(0)
        self._queue_box.children = tuple(w for w in self._queue_box.children if w is not bubble)
        self._update_queue_controls()
        bubble.value = _bubble(message)
        self._log.children = (*self._log.children, bubble)
        try:
            self._start(prompt=message)
        except Exception as exc:  # not sent: back at the head of the queue, on hold
            self._log.children = tuple(w for w in self._log.children if w is not bubble)
            bubble.value = _bubble(message, note="queued")
            self._outbox.insert(0, (message, bubble))
            self._queue_box.children = (bubble, *self._queue_box.children)
            self._hold = True
            self._update_queue_controls()
            self._say(f"could not send the queued message: {type(exc).__name__}: {exc}", error=True)
            return False
        return True

    def clear_queue(self) -> list[str]:
        """Drop the queued messages without sending them (the ``Clear queue`` button); returns
        their texts. The status line says how many were dropped."""
        texts = [message.content for message, _ in self._outbox]
        self._outbox.clear()
        self._queue_box.children = ()
        self._hold = False
        self._update_queue_controls()
        if texts:
            dropped = f"dropped {len(texts)} queued message{'s' if len(texts) != 1 else ''} (not sent)"
            self._say("; ".join(t for t in (self._waiting_text(), dropped) if t))
        return texts

    def _start(self, prompt: Prompt | None = None, resume: Decisions | None = None) -> None:
        if self._loop is None:
            self._say("no running event loop: use the view in a notebook (or an async function)", error=True)
            return
        self._streams = {}
        self._thinking = {}
        self._tables = {}
        self._say("running…")
        handle = self.agent.start(prompt, thread=self.thread, on_event=self._on_event, resume=resume,
                                  state=self._state)
        self.handle = handle
        self._set_running(True)
        handle.task.add_done_callback(lambda task: self._on_done(handle, task))

    def stop(self) -> None:
        """Cancel the run going on (the ``Stop`` button); queued messages stay, on hold."""
        if self.handle is not None:
            self._say("stopping…")
            self.handle.cancel()

    # ------------------------------------------------------------------ run events
    def _new_table(self) -> ToolTable:
        table = ToolTable(schedule=self._call, decide=self._decide, validate=self._validate)
        self._log.children = (*self._log.children, table)
        return table

    def _validate(self, name: str, args: dict[str, Any]) -> Any:
        tool = self.agent.tools.get(name)
        return None if tool is None else tool.validate(args)

    def _stream(self, step: int) -> StreamText:
        st = self._streams.get(step)
        if st is None:
            st = self._streams[step] = StreamText(interval=self.interval)
            self._log.children = (*self._log.children, st)
        return st

    def _thinking_for(self, step: int) -> ThinkingText:
        """The step's "Thinking" section, made on first use just above the step's answer."""
        th = self._thinking.get(step)
        if th is None:
            th = self._thinking[step] = ThinkingText(interval=self.interval)
            children = list(self._log.children)
            answer = self._streams.get(step)
            children.insert(children.index(answer) if answer in children else len(children), th)
            self._log.children = tuple(children)
        return th

    def _row(self, call_id: str, name: str, args: Any, step: int | None = None) -> ToolRow:
        row = self.rows.get(call_id)
        if row is None:
            table = self._tables.get(step) if step is not None else None
            if table is None:
                table = self._new_table()
                if step is not None:
                    self._tables[step] = table
            row = self.rows[call_id] = table.add(call_id, name, args)
        return row

    def _on_event(self, event: Any) -> None:
        """`on_event` of the view's runs (on the loop): dispatch on `event.kind` (an `Event`)."""
        kind = event.kind
        if kind == "text-delta":
            self._stream(event.step).append(event.delta)
        elif kind == "reasoning-delta":
            self._thinking_for(event.step).append(event.delta)
        elif kind == "model-response":
            self._on_response(event)
        elif kind == "tool-call-started":
            call = event.call
            self._row(call.id, call.name, call.args if call.args is not None else call.args_json,
                      event.step).set_status("running")
        elif kind == "tool-call-finished":
            call, res = event.call, event.result
            row = self._row(call.id, call.name, call.args if call.args is not None else call.args_json,
                            event.step)
            row.set_status(res.status, res.content, is_error=res.is_error, duration_s=res.duration_s)
        elif kind in ("approval-requested", "client-call-requested"):
            self._show_pending(event.pending)
        elif kind == "model-retry":
            for partial in (self._streams.get(event.step), self._thinking.get(event.step)):
                if partial is not None:
                    partial.reset()
            self._say(f"model call failed (attempt {event.attempt}): {event.error}; "
                      f"retrying in {event.delay_s:.1f} s")
        elif kind == "usage":
            self._footer.value = usage_html(event.total, token_budget=self.agent.token_budget,
                                            cost_budget=self.agent.cost_budget)
        elif kind == "run-started":
            self._say("running…")
        elif kind in _ENDED:
            self._on_end(kind, event.result)

    def _on_response(self, event: Any) -> None:
        message, step = event.message, event.step
        th = self._thinking.get(step)
        if message.reasoning:
            self._thinking_for(step).finish(message.reasoning)
        elif th is not None:
            th.finish()
        st = self._streams.get(step)
        if st is not None:
            st.finish(message.text or "")
        elif message.text:
            self._log.children = (*self._log.children, widgets.HTML(assistant_html(message.text)))
        if message.refusal:
            self._log.children = (*self._log.children, widgets.HTML(assistant_html(None, message.refusal)))
        for call in message.tool_calls:
            self._row(call.id, call.name, call.args if call.args is not None else call.args_json, step)
        if message.tool_calls:
            self._say("running tools…")

    def _show_pending(self, pending: PendingCall) -> None:
        row = self._row(pending.id, pending.name, pending.args)
        if pending.id in self._queued:  # decided while the run was still going: keep the decision
            return
        self._shown[pending.id] = pending
        row.show_pending(pending)
        self._update_bulk()

    def _on_end(self, kind: str, result: RunResult) -> None:
        self.result = result
        self._state = result.state
        for st in (*self._thinking.values(), *self._streams.values()):
            if not st.finished:
                st.finish()
        results = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
        pending_ids = {p.id for p in result.pending}
        for call_id, row in self.rows.items():
            if row.status in ("queued", "running") and call_id not in pending_ids:
                r = results.get(call_id)
                if r is not None:
                    row.set_status(r.status, r.content, is_error=r.is_error, duration_s=r.duration_s)
                elif kind == "run-cancelled":
                    row.set_status("cancelled")
        if kind == "run-completed":
            self._say("")
        elif kind == "run-paused":
            self._say(self._waiting_text())
        elif kind == "run-stopped":
            self._say(f"stopped: {result.stop_reason}")
        elif kind == "run-failed":
            self._hold = True  # keep the queue; the person decides (Send or Clear queue)
            self._say(f"failed: {result.error}", error=True)
        else:
            self._hold = True  # Stop: queued messages wait for Send
            self._say("cancelled")
        self._update_bulk()

    def _on_done(self, handle: RunHandle, task: asyncio.Future[Any]) -> None:
        if self.handle is handle:
            self.handle = None
        self._set_running(False)
        if task.cancelled():
            self._hold = True
            self._say("cancelled")
        else:
            exc = task.exception()
            if exc is not None:
                self._hold = True
                self._say(f"{type(exc).__name__}: {exc}", error=True)
                # the decisions were not applied: show what waits now, as the store has it
                assert self._loop is not None
                self._reload_task = self._loop.create_task(self._reload_pending())
                return
        self._kick()

    async def _reload_pending(self) -> None:
        loaded = await self.agent.store.load(self.thread)
        if loaded is None:
            return
        for p in loaded.open_pending():
            if p.id not in self._queued:
                self._row(p.id, p.name, p.args).args = p.args
                self._show_pending(p)
        self._kick()

    # ------------------------------------------------------------------ decisions
    def _decide(self, call_id: str, action: str, payload: Any, *, kick: bool = True) -> None:
        """Record a person's decision on a waiting call and start (or queue) the resume."""
        shown = self._shown.get(call_id)
        if shown is None or call_id in self._queued:
            return
        self._queued[call_id] = (action, payload, shown)
        self.rows[call_id].lock("queued")
        if action == "always":
            self._always.add(shown.name)
            for other_id, other in list(self._shown.items()):
                if other.name == shown.name and other_id not in self._queued and other.reason == "approval":
                    self._queued[other_id] = ("approve", None, other)
                    self.rows[other_id].lock("queued")
        self._update_bulk()
        if kick:
            self._kick()

    def _decide_all(self, action: str, payload: Any = None) -> None:
        """``Approve all`` / ``Deny all``: the same decision on every waiting approval, one resume."""
        for row in self._bulk_rows():
            self._decide(row.call_id, action, payload, kick=False)
        self._show_deny_all(False)
        self._kick()

    def _kick(self) -> None:
        """Start a resume with the queued decisions, unless a run is going on (then it runs
        when that run ends); with no decision queued, send the next queued message."""
        if self.handle is not None:
            self._render_status()
            return
        if not self._queued:
            self._send_next()
            return
        queued, self._queued = self._queued, {}
        decisions = Decisions(by=_person())
        for call_id, (action, payload, shown) in queued.items():
            # Each decision names the PendingCall that was shown: it binds to the shown arguments.
            self._shown.pop(call_id, None)
            if action in ("approve", "always"):
                decisions = decisions.approve(shown)
                if action == "always" and shown.name not in decisions.always_allowed:
                    decisions = decisions.always_allow(shown.name)
            elif action == "deny":
                decisions = decisions.deny(shown, payload)
            elif action == "edit":
                decisions = decisions.edit(shown, payload)
            elif action == "result":
                decisions = decisions.result(shown, payload)
        self._start(resume=decisions)
