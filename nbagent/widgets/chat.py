"""`ChatView`: the in-cell agent view (``agent.chat(thread=...)``).

Owns the view's layout and its reaction to run events. The conversation so far (from the store),
then per run: the streaming answer (`StreamText`), a live tool table per answer with tool calls
(`ToolTable`), a footer with the run's tokens and cost, and at the bottom ``Stop``, ``Approve all``
/ ``Deny all`` and the message box with ``Send`` (the last text box of the view).

How it stays responsive (DESIGN.md, "Facts about Jupyter"): a run is `Agent.start`, a background
task on the kernel's loop, so the cell returns at once. Button and text-box handlers may run on
another thread (ipykernel subshells), so they only hand work to the loop captured when the view was
made (``loop.call_soon_threadsafe``) and return. Every decision starts a background resume; a
decision made while a run is still going is queued and sent when it ends. A paused thread needs
no live run: the pending calls come from the store's ``meta["pending"]``, so the buttons work
after a kernel restart.

Imports ipywidgets, the core's public shapes and the sibling widget modules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import uuid
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._loop import unanswered_calls
from ..events import PendingCall
from ..result import RunResult
from ..usage import Usage
from ._sanitize import escape
from .static import FONT, assistant_html, messages_html, usage_html, user_html
from .stream import StreamText
from .tool_table import WAITING, ToolRow, ToolTable

if TYPE_CHECKING:
    from ..agent import Agent, RunHandle

__all__ = ["ChatView"]

_ENDED = ("run-completed", "run-paused", "run-stopped", "run-failed", "run-cancelled")


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
        interval: seconds between streaming updates of the answer text (0.05 = 20 per second).

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
        self._tables: dict[int, ToolTable] = {}
        self._shown: dict[str, PendingCall] = {}
        """The pending calls as the person saw them (decisions carry these objects)."""
        self._queued: dict[str, tuple[str, Any, PendingCall]] = {}
        self._always: set[str] = set()
        self._state: Any = None

        self._history = widgets.HTML()
        self._log = widgets.VBox(layout=widgets.Layout(width="100%"))
        self._status = widgets.HTML()
        self._footer = widgets.HTML()
        self._stop = widgets.Button(description="Stop", button_style="danger", tooltip="cancel the run",
                                    layout=widgets.Layout(width="auto", display="none"))
        self._approve_all = widgets.Button(description="Approve all", button_style="success",
                                           layout=widgets.Layout(width="auto", display="none"))
        self._deny_all = widgets.Button(description="Deny all", button_style="danger",
                                        layout=widgets.Layout(width="auto", display="none"))
        self._input = widgets.Text(placeholder="Message the agent (Enter sends)", continuous_update=True,
                                   layout=widgets.Layout(flex="1 1 auto", width="auto"))
        self._send_button = widgets.Button(description="Send", button_style="primary",
                                           layout=widgets.Layout(width="auto"))
        self._stop.on_click(lambda _: self._call(self.stop))
        self._approve_all.on_click(lambda _: self._call(self._decide_all, "approve"))
        self._deny_all.on_click(lambda _: self._call(self._decide_all, "deny"))
        self._send_button.on_click(lambda _: self._call(self._submit))
        self._input.on_msg(self._on_input_msg)
        super().__init__(
            [
                self._history,
                self._log,
                self._status,
                self._footer,
                widgets.HBox([self._stop, self._approve_all, self._deny_all]),
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
        """Wait until no run is going on and no decision is queued; returns the last result."""
        await self.wait_loaded()
        while self.handle is not None or self._queued:
            handle = self.handle
            if handle is not None:
                try:
                    await asyncio.shield(handle.task)
                except BaseException:
                    pass
            await asyncio.sleep(0)
        return self.result

    # ------------------------------------------------------------------ loading a thread
    async def _load(self) -> None:
        try:
            loaded = await self.agent.store.load(self.thread)
        except Exception as exc:
            self._say(f"could not load thread {self.thread!r}: {type(exc).__name__}: {exc}", error=True)
            return
        if loaded is None:
            return
        meta = loaded.meta or {}
        open_ids = {c.id for c in unanswered_calls(loaded.messages)}
        pending = [PendingCall.from_dict(p) for p in meta.get("pending", ()) if p.get("id") in open_ids]
        self._history.value = messages_html(loaded.messages, skip_call_ids=[p.id for p in pending])
        self._always = set(meta.get("always_allowed", ()))
        self._footer.value = usage_html(Usage.of(loaded.usage), label="thread so far")
        if pending:
            table = self._new_table()
            for p in pending:
                row = table.add(p.id, p.name, p.args)
                self.rows[p.id] = row
                self._show_pending(p)
            self._say(self._waiting_text())
        elif meta.get("status") == "failed" and meta.get("error"):
            self._say(f"the last run failed: {meta['error']}", error=True)

    # ------------------------------------------------------------------ status lines
    def _say(self, text: str, *, error: bool = False) -> None:
        colour = "#c62828" if error else "var(--jp-ui-font-color2,#666)"
        self._status.value = (
            f'<div style="{FONT};color:{colour};white-space:pre-wrap">{escape(text)}</div>' if text else ""
        )

    def _waiting_text(self) -> str:
        n = sum(1 for row in self.rows.values() if row.status in WAITING and not row.decided)
        return f"waiting for you: {n} tool call{'s' if n != 1 else ''}" if n else ""

    def _set_running(self, running: bool) -> None:
        self._stop.layout.display = "" if running else "none"
        self._send_button.disabled = running

    def _update_bulk(self) -> None:
        waiting = [r for r in self.rows.values()
                   if r.status == "needs approval" and not r.decided and r.pending is not None]
        show = "" if len(waiting) >= 2 else "none"
        if self._approve_all.layout.display != show:
            self._approve_all.layout.display = show
            self._deny_all.layout.display = show

    # ------------------------------------------------------------------ sending
    def ask(self, prompt: str) -> RunHandle | None:
        """Send a message as if typed in the box (must be called on the view's loop)."""
        self._input.value = prompt
        self._submit()
        return self.handle

    def _submit(self) -> None:
        text = self._input.value.strip()
        if not text:
            return
        if self._load_task is not None and not self._load_task.done():
            self._load_task.add_done_callback(lambda _: self._submit())
            return
        if self.handle is not None:
            self._say("a run is going on: wait for it, or Stop it")
            return
        if any(r.status in WAITING and not r.decided for r in self.rows.values()):
            self._say("decide the waiting tool calls first (or Deny them)", error=True)
            return
        self._input.value = ""
        self._log.children = (*self._log.children, widgets.HTML(user_html(text)))
        self._start(prompt=text)

    def _start(self, prompt: str | None = None, resume: dict[str, Any] | None = None) -> None:
        if self._loop is None:
            self._say("no running event loop: use the view in a notebook (or an async function)", error=True)
            return
        self._streams = {}
        self._tables = {}
        self._say("running…")
        handle = self.agent.start(prompt, thread=self.thread, on_event=self._on_event, resume=resume,
                                  state=self._state)
        self.handle = handle
        self._set_running(True)
        handle.task.add_done_callback(lambda task: self._on_done(handle, task))

    def stop(self) -> None:
        """Cancel the run going on (the ``Stop`` button)."""
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
            st = self._streams.get(event.step)
            if st is not None:
                st.reset()
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
        for st in self._streams.values():
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
            self._say(f"failed: {result.error}", error=True)
        else:
            self._say("cancelled")
        self._update_bulk()

    def _on_done(self, handle: RunHandle, task: asyncio.Future[Any]) -> None:
        if self.handle is handle:
            self.handle = None
        self._set_running(False)
        if task.cancelled():
            self._say("cancelled")
        else:
            exc = task.exception()
            if exc is not None:
                self._say(f"{type(exc).__name__}: {exc}", error=True)
                # the decisions were not applied: show what waits now, as the store has it
                assert self._loop is not None
                self._loop.create_task(self._reload_pending())
                return
        self._kick()

    async def _reload_pending(self) -> None:
        loaded = await self.agent.store.load(self.thread)
        if loaded is None:
            return
        open_ids = {c.id for c in unanswered_calls(loaded.messages)}
        for data in (loaded.meta or {}).get("pending", ()):
            if data.get("id") in open_ids and data["id"] not in self._queued:
                p = PendingCall.from_dict(data)
                self._row(p.id, p.name, p.args).args = p.args
                self._show_pending(p)
        self._kick()

    # ------------------------------------------------------------------ decisions
    def _decide(self, call_id: str, action: str, payload: Any) -> None:
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
        self._kick()

    def _decide_all(self, action: str) -> None:
        for call_id, row in list(self.rows.items()):
            if row.status == "needs approval" and not row.decided and row.pending is not None:
                self._decide(call_id, action, None)

    def _kick(self) -> None:
        """Start a resume with the queued decisions, unless a run is going on (then it runs
        when that run ends)."""
        if self.handle is not None or not self._queued:
            return
        queued, self._queued = self._queued, {}
        approve: list[PendingCall] = []
        deny: dict[str, str | None] = {}
        edit: dict[str, dict[str, Any]] = {}
        results: dict[str, Any] = {}
        always: list[str] = []
        for call_id, (action, payload, shown) in queued.items():
            self._shown.pop(call_id, None)
            if action in ("approve", "always"):
                approve.append(shown)
                if action == "always":
                    always.append(shown.name)
            elif action == "deny":
                deny[call_id] = payload
            elif action == "edit":
                edit[call_id] = payload
            elif action == "result":
                results[call_id] = payload
        # The RunResult the person decided on: binds deny/edit/result decisions to the shown args.
        base = self.result or RunResult("", self.thread, "paused", [], Usage())
        seen = dataclasses.replace(base, pending=[shown for _, _, shown in queued.values()])
        self._start(resume={"result": seen, "approve": approve, "deny": deny, "edit": edit,
                            "results": results, "always_allow": sorted(set(always)),
                            "decided_by": _person()})
